#include "model_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "harness/runtime/bf16.h"
#include "harness/runtime/dropout.h"
#include "harness/runtime/philox.h"
#include "harness/runtime/rng_tracker.h"
#include "harness/runtime/tensor.h"
#include "harness/training/train.h"
#include "models/layers.h"
#include "models/reference/reference.h"

namespace recap::models::testing {

using device::MemCategory;
using runtime::Tensor;

ModelSpec block_stack(int blocks, DType dtype, float p, int hidden, int tokens, int heads) {
  ModelSpec s;
  s.hidden = hidden;
  s.tokens = tokens;
  s.dtype = dtype;
  for (int i = 0; i < blocks; ++i) {
    LayerSpec l;
    l.kind = "block";
    l.heads = heads;
    l.dropout = p;
    s.layers.push_back(l);
  }
  return s;
}

std::vector<LayerCase> layer_cases() {
  std::vector<LayerCase> cases;
  const char* kinds[] = {"linear", "layernorm", "rmsnorm", "gelu", "swiglu", "dropout", "attention", "mlp", "block"};
  auto draws = [](const std::string& k) { return k == "dropout" || k == "attention" || k == "mlp" || k == "block"; };
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::string dn = dt == DType::F32 ? "fp32" : "bf16";
    for (const char* kind : kinds) {
      for (float p : {0.0f, 0.1f}) {
        if (p > 0 && !draws(kind)) continue;
        cases.push_back({.name = std::string(kind) + "_" + dn + (p > 0 ? "_p10" : "_p0"),
                         .spec = {.hidden = 16, .tokens = 8, .dtype = dt,
                                  .layers = {{.kind = kind, .ffn_hidden = 32, .heads = 2, .dropout = p}}},
                         .tol = dt == DType::F32 ? kTolF32 : kTolBf16Layer,
                         .dropout = p > 0});
      }
    }
    for (const char* kind : {"attention", "block"}) {  // wider: 4 heads of 16, 24 tokens
      cases.push_back({.name = std::string(kind) + "_wide_" + dn + "_p10",
                       .spec = {.hidden = 64, .tokens = 24, .dtype = dt,
                                .layers = {{.kind = kind, .heads = 4, .dropout = 0.1f}}},
                       .tol = dt == DType::F32 ? kTolF32 : kTolBf16Stack,
                       .dropout = true});
    }
    // Rows and columns longer than a warp and not a multiple of it (70 tokens, hidden 100): the
    // GPU's warp-per-row and block reductions (ops.cu) take their strided and tail paths.
    for (const char* kind : {"layernorm", "rmsnorm", "attention"}) {
      cases.push_back({.name = std::string(kind) + "_long_rows_" + dn + (draws(kind) ? "_p10" : "_p0"),
                       .spec = {.hidden = 100, .tokens = 70, .dtype = dt,
                                .layers = {{.kind = kind, .heads = 2, .dropout = draws(kind) ? 0.1f : 0.0f}}},
                       .tol = dt == DType::F32 ? kTolF32 : kTolBf16Stack,
                       .dropout = draws(kind)});
    }
    for (float p : {0.0f, 0.1f}) {
      LayerCase c;
      c.name = "stack4_" + dn + (p > 0 ? "_p10" : "_p0");
      c.spec = block_stack(4, dt, p);
      c.tol = dt == DType::F32 ? kTolF32 : kTolBf16Stack;
      c.dropout = p > 0;
      cases.push_back(c);
    }
    LayerCase m;
    m.name = "mixed_" + dn + "_p10";
    m.spec.hidden = 32;
    m.spec.tokens = 12;
    m.spec.dtype = dt;
    for (const char* kind : {"layernorm", "attention", "gelu", "swiglu", "rmsnorm", "mlp", "dropout", "linear", "block"}) {
      LayerSpec l;
      l.kind = kind;
      l.heads = 4;
      l.ffn_hidden = 48;
      l.dropout = draws(kind) ? 0.1f : 0.0f;
      m.spec.layers.push_back(l);
    }
    m.tol = dt == DType::F32 ? kTolF32 : kTolBf16Stack;
    m.dropout = true;
    cases.push_back(m);
  }
  return cases;
}

// ---- shared gtest checks ------------------------------------------------------------------------

void expect_matches_reference(device::Backend backend, const LayerCase& c) {
  RunOptions o;
  o.backend = backend;
  o.spec = c.spec;
  RunOutput run = run_model(o);
  Comparison cmp = check::compare_with_reference(c.spec, run);
  for (const std::string& p : cmp.problems) ADD_FAILURE() << p;
  EXPECT_LE(cmp.worst, c.tol) << "worst: " << cmp.worst_what << " (tolerance " << c.tol << ")\n" << cmp.report;
  std::ostringstream worst;
  worst << std::scientific << std::setprecision(2) << cmp.worst << " (" << cmp.worst_what << ")";
  ::testing::Test::RecordProperty("worst_rel_l2", worst.str());
  std::printf("[ rel L2   ] %-28s worst %s, tolerance %.0e\n", c.name.c_str(), worst.str().c_str(), c.tol);

  EXPECT_TRUE(all_finite(run.y)) << "y has a non-finite value";
  EXPECT_TRUE(all_finite(run.dx)) << "dx has a non-finite value";
  EXPECT_GT(l2(run.y), 0.0) << "y is all zero";
  EXPECT_GT(l2(run.dx), 0.0) << "dx is all zero";
  for (size_t i = 0; i < run.grads.size(); ++i) {
    EXPECT_TRUE(all_finite(run.grads[i])) << run.names[i];
    EXPECT_GT(l2(run.grads[i]), 0.0) << "gradient of " << run.names[i] << " is all zero";
  }

  size_t forward_draws = 0;
  for (const runtime::LedgerEntry& e : run.draws) {
    if (e.site.phase != runtime::Phase::Forward) continue;
    ++forward_draws;
    runtime::DropoutMask m = runtime::dropout_mask(e.seed, e.offset, e.count, 0.1f);
    EXPECT_GT(m.count_kept(), 0u) << e.site.layer << "/" << e.site.op << " drops everything";
    EXPECT_LT(m.count_kept(), e.count) << e.site.layer << "/" << e.site.op << " drops nothing";
  }
  if (c.dropout) {
    EXPECT_GT(forward_draws, 0u) << "a case with dropout drew nothing";
  } else {
    EXPECT_EQ(forward_draws, 0u) << "a case without dropout drew";
  }

  if (c.dropout && c.spec.layers.size() == 1 && c.spec.layers[0].kind == "dropout") {
    size_t zeroed = 0;
    for (size_t i = 0; i < run.y.size(); ++i)
      if (run.y[i] == 0.0f && run.x[i] != 0.0f) ++zeroed;
    EXPECT_GT(zeroed, 0u) << "dropout zeroed nothing";
    EXPECT_LT(zeroed, run.y.size() / 2) << "dropout 0.1 zeroed half or more";
  }
}

void expect_runs_equal(const RunOutput& a, const RunOutput& b, const std::string& what) {
  size_t at = 0;
  EXPECT_TRUE(bits_equal(a.y, b.y, &at)) << what << ": y differs at " << at;
  EXPECT_TRUE(bits_equal(a.dx, b.dx, &at)) << what << ": dx differs at " << at;
  ASSERT_EQ(a.names, b.names) << what;
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(bits_equal(a.grads[i], b.grads[i], &at)) << what << ": gradient of " << a.names[i] << " differs at " << at;
}

namespace {
void expect_draws_equal(const RunOutput& a, const RunOutput& b, const std::string& what) {
  ASSERT_EQ(a.draws.size(), b.draws.size()) << what;
  for (size_t i = 0; i < a.draws.size(); ++i) {
    const runtime::LedgerEntry &x = a.draws[i], &y = b.draws[i];
    EXPECT_EQ(x.site.layer, y.site.layer) << what;
    EXPECT_EQ(x.site.op, y.site.op) << what;
    EXPECT_EQ(x.seed, y.seed) << what << ": " << x.site.layer << "/" << x.site.op;
    EXPECT_EQ(x.offset, y.offset) << what << ": " << x.site.layer << "/" << x.site.op;
    EXPECT_EQ(x.count, y.count) << what << ": " << x.site.layer << "/" << x.site.op;
  }
}
}  // namespace

void expect_deterministic(device::Backend backend, const LayerCase& c) {
  RunOptions o;
  o.backend = backend;
  o.spec = c.spec;
  RunOutput a = run_model(o);
  RunOutput b = run_model(o);
  expect_runs_equal(a, b, "second run");
  expect_draws_equal(a, b, "second run");
}

void expect_drawn_values_equal_host(device::Backend backend) {
  for (DType dt : {DType::F32, DType::BF16}) {
    training::CaseSpec cs;
    cs.model.hidden = 40;  // 40 x 12 values a tensor: not a multiple of a block or of Philox's 4
    cs.model.tokens = 12;
    cs.model.dtype = dt;
    // layers whose parameters' inits are known by name: linear0.{weight,bias} U(+-1/sqrt(40)),
    // layernorm1.weight 1 + U(+-0.1), layernorm1.bias U(+-0.1), rmsnorm2.weight 1 + U(+-0.1)
    for (const char* kind : {"linear", "layernorm", "rmsnorm"}) cs.model.layers.push_back({.kind = kind});
    cs.layers.resize(cs.model.layers.size());
    cs.microbatches = 2;
    cs.param_seed = 11;
    cs.data_seed = 12;
    std::string err;
    auto dev = device::make_device(backend == device::Backend::Cuda ? device::BackendChoice::Cuda : device::BackendChoice::Sim,
                                   {}, &err);
    ASSERT_TRUE(dev) << err;
    training::Trainer t(*dev, cs);
    auto host = [&](std::vector<float> v) {
      if (dt == DType::BF16)
        for (float& x : v) x = runtime::round_to_bf16(x);
      return v;
    };
    ASSERT_EQ(t.params.size(), 5u);
    for (const Param* p : t.params) {
      const bool norm = p->name.rfind("linear", 0) != 0;
      const Init init = !norm ? Init::Uniform : p->name.ends_with(".weight") ? Init::NormGamma : Init::NormBeta;
      const std::vector<float> want = host(init_values(cs.param_seed, p->name, p->value.numel(), init, 40));
      EXPECT_TRUE(bits_equal(runtime::to_floats(*dev, p->value), want)) << p->name;
    }
    t.load_step_data(3);
    for (int m = 0; m < cs.microbatches; ++m) {
      EXPECT_TRUE(bits_equal(runtime::to_floats(*dev, t.input[m]), host(training::step_data(cs, 3, m, 0)))) << "input " << m;
      EXPECT_TRUE(bits_equal(runtime::to_floats(*dev, t.target[m]), host(training::step_data(cs, 3, m, 1)))) << "target " << m;
    }
  }
}

void expect_graph_equals_eager(device::Backend backend, const ModelSpec& spec, int steps) {
  RunOptions o;
  o.backend = backend;
  o.spec = spec;
  o.generator = runtime::GeneratorMode::GraphSafe;
  o.steps = steps;
  RunOutput eager = run_model(o);
  o.graph = true;
  RunOutput graph = run_model(o);
  expect_runs_equal(eager, graph, "graph replay vs eager");
  expect_draws_equal(eager, graph, "graph replay vs eager");
}

}  // namespace recap::models::testing
