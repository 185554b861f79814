#include "model_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "harness/runtime/dropout.h"
#include "harness/runtime/philox.h"
#include "harness/runtime/rng_tracker.h"
#include "harness/runtime/tensor.h"
#include "models/reference/reference.h"

namespace recap::models::testing {

using device::MemCategory;
using runtime::Tensor;

namespace {

void check(device::Status s, const char* what) {
  if (!device::ok(s)) throw std::runtime_error(std::string(what) + " failed: " + device::error_name(s));
}

}  // namespace

bool backend_usable(device::Backend backend, std::string* why) {
  if (backend == device::Backend::Sim) return true;
  return device::cuda_usable(why);
}

std::vector<float> test_values(uint64_t seed, uint64_t stream, size_t n) {
  std::vector<float> v(n);
  runtime::PhiloxStream s(seed, stream << 40);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * runtime::uniform_from_u32(s.next()) - 1.0f;
  return v;
}

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
        LayerCase c;
        c.name = std::string(kind) + "_" + dn + (p > 0 ? "_p10" : "_p0");
        c.spec.hidden = 16;
        c.spec.tokens = 8;
        c.spec.dtype = dt;
        LayerSpec l;
        l.kind = kind;
        l.heads = 2;
        l.ffn_hidden = 32;
        l.dropout = p;
        c.spec.layers = {l};
        c.tol = dt == DType::F32 ? kTolF32 : kTolBf16Layer;
        c.dropout = p > 0;
        cases.push_back(c);
      }
    }
    for (const char* kind : {"attention", "block"}) {  // wider: 4 heads of 16, 24 tokens
      LayerCase c;
      c.name = std::string(kind) + "_wide_" + dn + "_p10";
      c.spec.hidden = 64;
      c.spec.tokens = 24;
      c.spec.dtype = dt;
      LayerSpec l;
      l.kind = kind;
      l.heads = 4;
      l.dropout = 0.1f;
      c.spec.layers = {l};
      c.tol = dt == DType::F32 ? kTolF32 : kTolBf16Stack;
      c.dropout = true;
      cases.push_back(c);
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

RunOutput run_model(const RunOptions& o) {
  std::string err;
  std::unique_ptr<device::Device> dev = device::make_device(
      o.backend == device::Backend::Sim ? device::BackendChoice::Sim : device::BackendChoice::Cuda, o.device_options,
      &err);
  if (!dev) throw std::runtime_error("no device: " + err);
  device::Stream s;
  check(dev->stream_create(&s, true), "cudaStreamCreate");
  RunOutput out;
  {
    runtime::Allocator alloc(*dev);
    runtime::RngTracker rng(*dev, o.rng_seed, o.generator, runtime::DeviceStateModel::PerCapture);
    runtime::RngLedger ledger(*dev);
    runtime::Ctx ctx{*dev, s, alloc, rng, &ledger, "", runtime::Phase::Forward, 0, 0, true, std::nullopt};
    Model model(ctx, o.spec, o.param_seed, o.wrap);
    const int64_t T = o.spec.tokens, H = o.spec.hidden;
    const size_t n = static_cast<size_t>(T * H);
    Tensor x = alloc.alloc({T, H}, o.spec.dtype, MemCategory::Activations);
    Tensor dy = alloc.alloc({T, H}, o.spec.dtype, MemCategory::Workspace);
    runtime::from_floats(*dev, x, test_values(o.data_seed, 0, n));
    runtime::from_floats(*dev, dy, test_values(o.data_seed, 1, n));
    // The uploads (synchronous copies on the legacy stream) must land before work on `s` starts.
    check(dev->device_synchronize(), "cudaDeviceSynchronize");
    Tensor y, dx;

    if (!o.graph) {
      for (int step = 0; step < o.steps; ++step) {
        check(ledger.begin_step(step, s), "ledger begin_step");
        std::vector<Saved> saved;
        y = model.forward(ctx, x, saved);
        dx = model.backward(ctx, dy, saved);
        check(dev->stream_synchronize(s), "cudaStreamSynchronize");
        ledger.clear();
        check(ledger.collect(step), "ledger collect");
      }
      out.y = runtime::to_floats(*dev, y);
      out.dx = runtime::to_floats(*dev, dx);
    } else {
      runtime::PoolId pool = alloc.create_pool();
      device::Graph g;
      device::GraphExec exec;
      std::map<std::string, runtime::GraphRngState> rng_states;
      {
        runtime::PoolScope scope(alloc, pool);
        rng.capture_begin();
        check(dev->stream_begin_capture(s, device::CaptureMode::Global), "cudaStreamBeginCapture");
        std::vector<Saved> saved;
        y = model.forward(ctx, x, saved);
        dx = model.backward(ctx, dy, saved);
        check(dev->stream_end_capture(s, &g), "cudaStreamEndCapture");
        rng_states = rng.capture_end();
      }
      check(dev->graph_instantiate(&exec, g), "cudaGraphInstantiate");
      for (int step = 0; step < o.steps; ++step) {
        check(ledger.begin_step(step, s), "ledger begin_step");
        check(rng.replay_prologue(rng_states, s), "replay prologue");
        check(dev->graph_launch(exec, s), "cudaGraphLaunch");
        check(dev->stream_synchronize(s), "cudaStreamSynchronize");
        ledger.clear();
        check(ledger.collect(step), "ledger collect");
      }
      out.y = runtime::to_floats(*dev, y);
      out.dx = runtime::to_floats(*dev, dx);
      check(dev->graph_exec_destroy(exec), "cudaGraphExecDestroy");
      check(dev->graph_destroy(g), "cudaGraphDestroy");
      y = Tensor{};
      dx = Tensor{};
      alloc.destroy_pool(pool);
    }
    out.x = runtime::to_floats(*dev, x);
    out.dy = runtime::to_floats(*dev, dy);
    for (Param* p : model.params()) {
      out.names.push_back(p->name);
      out.params.push_back(runtime::to_floats(*dev, p->value));
      out.grads.push_back(runtime::to_floats(*dev, p->grad));
    }
    out.draws = ledger.entries();
  }
  check(dev->stream_destroy(s), "cudaStreamDestroy");
  return out;
}

double l2(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

double rel_l2(const std::vector<float>& a, const std::vector<double>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

bool all_finite(const std::vector<float>& a) {
  for (float v : a)
    if (!std::isfinite(v)) return false;
  return true;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b, size_t* first_diff) {
  if (a.size() != b.size()) {
    if (first_diff) *first_diff = std::min(a.size(), b.size());
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (first_diff) *first_diff = i;
      return false;
    }
  return true;
}

Comparison compare_with_reference(const ModelSpec& spec, const RunOutput& run) {
  reference::Params params;
  for (size_t i = 0; i < run.names.size(); ++i) params[run.names[i]] = reference::Vec(run.params[i].begin(), run.params[i].end());
  std::vector<bool> used(run.draws.size(), false);
  reference::MaskFn masks = [&](const std::string& layer, const std::string& op, uint64_t n, float p) {
    for (size_t i = 0; i < run.draws.size(); ++i) {
      const runtime::LedgerEntry& e = run.draws[i];
      if (e.site.phase != runtime::Phase::Forward || e.site.layer != layer || e.site.op != op) continue;
      used[i] = true;
      EXPECT_EQ(e.count, n) << "draw " << layer << "/" << op << ": recorded count";
      return runtime::dropout_mask_bytes(e.seed, e.offset, n, p);
    }
    ADD_FAILURE() << "the ledger has no forward draw for " << layer << "/" << op;
    return std::vector<uint8_t>(n, 1);
  };
  reference::RefModel ref(spec, params);
  reference::Vec x(run.x.begin(), run.x.end()), dy(run.dy.begin(), run.dy.end());
  reference::Vec y = ref.forward(x, spec.tokens, masks);
  reference::Vec dx = ref.backward(dy);
  for (size_t i = 0; i < run.draws.size(); ++i) {
    if (run.draws[i].site.phase != runtime::Phase::Forward) continue;
    EXPECT_TRUE(used[i]) << "recorded draw " << run.draws[i].site.layer << "/" << run.draws[i].site.op
                           << " has no counterpart in the reference";
  }

  Comparison c;
  std::ostringstream rep;
  auto note = [&](const std::string& what, double err) {
    rep << "  " << what << ": rel L2 " << err << "\n";
    if (err > c.worst || std::isnan(err)) {
      c.worst = std::isnan(err) ? INFINITY : err;
      c.worst_what = what;
    }
  };
  c.y = rel_l2(run.y, y);
  note("y", c.y);
  c.dx = rel_l2(run.dx, dx);
  note("dx", c.dx);
  for (size_t i = 0; i < run.names.size(); ++i) {
    double e = rel_l2(run.grads[i], ref.grads().at(run.names[i]));
    c.grads[run.names[i]] = e;
    note("grad " + run.names[i], e);
  }
  c.report = rep.str();
  return c;
}

// ---- shared gtest checks ------------------------------------------------------------------------

void expect_matches_reference(device::Backend backend, const LayerCase& c) {
  RunOptions o;
  o.backend = backend;
  o.spec = c.spec;
  RunOutput run = run_model(o);
  Comparison cmp = compare_with_reference(c.spec, run);
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
