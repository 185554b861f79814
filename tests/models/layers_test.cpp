// The layers on the sim backend (label unit): every layer kind, fp32 and bf16, with and without
// dropout, against the fp64 reference; determinism; graph replay equal to eager; wrapped
// sub-modules (a pass-through wrapper and the runtime's checkpoints) equal to unwrapped.
//
// Tolerances (relative L2 error against fp64, model_check.h):
//   fp32 1e-5: fp32 accumulation (u = 6e-8) over <= 256 terms per output, compounded over at most
//     a few dozen ops: errors observed here are 1e-7 .. 1e-6.
//   bf16 2e-2 per layer, 4e-2 for wide layers and stacks: every stored tensor is rounded to 8
//     significant bits (u = 2^-9 = 2e-3, so a single rounding alone gives ~1e-3 relative L2);
//     layers compound a few such roundings, stacks a few dozen, partly amplified by LayerNorm's
//     division by the standard deviation and by the softmax.
// A real defect (a wrong index, a missing term, a wrong mask) shows as an error of order 1e-1..1.
#include <gtest/gtest.h>

#include <set>

#include "harness/training/checkpoint.h"
#include "harness/runtime/dropout.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/rng_tracker.h"
#include "model_check.h"
#include "models/layers.h"
#include "models/model.h"

namespace recap::models::testing {
namespace {

using device::Backend;
using device::MemCategory;

class LayerCaseTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerCaseTest, MatchesFp64Reference) { expect_matches_reference(Backend::Sim, GetParam()); }

TEST_P(LayerCaseTest, DeterministicAcrossRuns) { expect_deterministic(Backend::Sim, GetParam()); }

// Every kernel of the layer, forward and backward, eagerly and replayed from a graph, reads only
// memory some kernel, copy or memset wrote since it was allocated (the sim's init check).
TEST_P(LayerCaseTest, ReadsOnlyWrittenMemory) {
  for (bool graph : {false, true}) {
    RunOptions o;
    o.spec = GetParam().spec;
    o.graph = graph;
    if (graph) o.generator = runtime::GeneratorMode::GraphSafe;
    o.device_options.init_check = true;
    const RunOutput r = run_model(o);
    ASSERT_TRUE(r.init.has_value());
    EXPECT_GT(r.init->launches, 0u);
    for (const auto& u : r.init->uninitialized) ADD_FAILURE() << (graph ? "graph: " : "eager: ") << u.describe();
  }
}

// ... and the check is live: with the gradients allocated empty (fault point grad-buffer-empty) the
// first accumulation into them is reported.
TEST(ModelInitCheck, SeesGradientsAllocatedEmpty) {
  RunOptions o;
  o.spec = block_stack(1, DType::F32, 0.0f);
  o.device_options.init_check = true;
  std::optional<device::sim::InitCheckSummary> seen;
  {
    runtime::FaultScope on({"grad-buffer-empty"});
    seen = run_model(o).init;
  }
  ASSERT_TRUE(seen.has_value());
  ASSERT_FALSE(seen->uninitialized.empty());
  EXPECT_NE(seen->uninitialized[0].allocation.find("(gradients)"), std::string::npos) << seen->uninitialized[0].describe();
}

INSTANTIATE_TEST_SUITE_P(Sim, LayerCaseTest, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& i) { return i.param.name; });

// ---- graphs -------------------------------------------------------------------------------------

TEST(ModelGraph, ReplayEqualsEagerBlockStack) {
  expect_graph_equals_eager(Backend::Sim, block_stack(2, DType::F32, 0.1f), 2);
}

TEST(ModelGraph, ReplayEqualsEagerBf16Mixed) {
  for (const LayerCase& c : layer_cases())
    if (c.name == "mixed_bf16_p10") expect_graph_equals_eager(Backend::Sim, c.spec, 2);
}

// Sim running pending work in a seeded order with the race check on: one stream, so the same
// bits, and no race reported between the declared reads and writes.
TEST(ModelGraph, ExploredOrderAndRaceCheckGiveTheSameBits) {
  RunOptions o;
  o.spec = block_stack(2, DType::BF16, 0.1f);
  RunOutput plain = run_model(o);
  o.device_options.explore_seed = 17;
  o.device_options.race_check = true;
  expect_runs_equal(plain, run_model(o), "explored order");
  o.graph = true;
  o.generator = runtime::GeneratorMode::GraphSafe;
  RunOptions g = o;
  g.device_options = {};
  expect_runs_equal(run_model(g), run_model(o), "explored order, graph");
}

// ---- wrapping -----------------------------------------------------------------------------------

// A wrapper that only forwards (what a checkpoint must behave like), recording roles.
class PassThrough : public Layer {
 public:
  explicit PassThrough(std::unique_ptr<Layer> inner) : Layer(inner->name()), inner_(std::move(inner)) {}
  std::string kind() const override { return inner_->kind(); }
  std::vector<Param*> params() override { return inner_->params(); }
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override {
    saved.clear();
    saved.children.resize(1);
    return inner_->forward(ctx, x, saved.children[0]);
  }
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override {
    Tensor dx = inner_->backward(ctx, dy, saved.children.at(0));
    saved.clear();
    return dx;
  }

 private:
  std::unique_ptr<Layer> inner_;
};

TEST(ModelWrap, RolesInBuildOrder) {
  auto roles = std::make_shared<std::vector<std::pair<std::string, std::string>>>();
  RunOptions o;
  o.spec = block_stack(1, DType::F32, 0.1f);
  LayerSpec a;
  a.kind = "attention";
  a.heads = 2;
  o.spec.layers.push_back(a);
  o.wrap = [roles](std::unique_ptr<Layer> l, const std::string& role) -> std::unique_ptr<Layer> {
    roles->emplace_back(role, l->name());
    return std::make_unique<PassThrough>(std::move(l));
  };
  run_model(o);
  std::vector<std::pair<std::string, std::string>> expected = {
      {"norm", "ln1"}, {"attn_core", "core"}, {"norm", "ln2"}, {"mlp", "mlp"}, {"block", "block0"},
      {"attn_core", "core"}, {"block", "attention1"}};
  EXPECT_EQ(*roles, expected);
}

TEST(ModelWrap, PassThroughIsBitwiseIdentical) {
  RunOptions o;
  o.spec = block_stack(2, DType::F32, 0.1f);
  RunOutput plain = run_model(o);
  o.wrap = [](std::unique_ptr<Layer> l, const std::string&) -> std::unique_ptr<Layer> {
    return std::make_unique<PassThrough>(std::move(l));
  };
  RunOutput wrapped = run_model(o);
  expect_runs_equal(plain, wrapped, "pass-through wrappers");
}

// The runtime's checkpoint around one role at a time: the inner forward runs with
// save_for_backward off, then is recomputed in backward (phase Recompute) before the inner
// backward. Gradients must be bitwise equal to the plain run, and every recomputed draw must equal
// its forward draw. Roles "block", "attn_core", "mlp", "norm" on a 2-block stack, and "block" on
// the mixed stack (every top-level kind checkpointed: each runs its no-grad forward and recompute).
void expect_checkpoint_identical(training::CheckpointPolicy policy, runtime::GeneratorMode mode, DType dtype) {
  const std::string mixed_name = std::string("mixed_") + (dtype == DType::F32 ? "fp32" : "bf16") + "_p10";
  ModelSpec mixed;
  for (const LayerCase& c : layer_cases())
    if (c.name == mixed_name) mixed = c.spec;
  ASSERT_FALSE(mixed.layers.empty());
  const std::vector<std::pair<std::string, ModelSpec>> variants = {
      {"block", block_stack(2, dtype, 0.1f)}, {"attn_core", block_stack(2, dtype, 0.1f)},
      {"mlp", block_stack(2, dtype, 0.1f)},   {"norm", block_stack(2, dtype, 0.1f)},
      {"block", mixed}};
  for (const auto& [only, spec] : variants) {
    SCOPED_TRACE("checkpointed role " + only + ", " + std::to_string(spec.layers.size()) + " layers");
    RunOptions o;
    o.spec = spec;
    o.generator = mode;
    RunOutput plain = run_model(o);
    o.wrap = [policy, only = only](std::unique_ptr<Layer> l, const std::string& role) -> std::unique_ptr<Layer> {
      if (role != only) return l;
      training::CheckpointConfig cfg;
      cfg.style = training::CheckpointStyle::Reentrant;
      cfg.policy = policy;
      cfg.role = role;
      return std::make_unique<training::Checkpoint>(std::move(l), cfg);
    };
    RunOutput ck = run_model(o);
    expect_runs_equal(plain, ck, "checkpointed " + only);
    size_t recomputed = 0;
    for (const runtime::LedgerEntry& r : ck.draws) {
      if (r.site.phase != runtime::Phase::Recompute) continue;
      ++recomputed;
      bool found = false;
      for (const runtime::LedgerEntry& f : ck.draws)
        if (f.site.phase == runtime::Phase::Forward && f.site.layer == r.site.layer && f.site.op == r.site.op) {
          found = true;
          EXPECT_EQ(f.seed, r.seed) << r.site.layer << "/" << r.site.op;
          EXPECT_EQ(f.offset, r.offset) << r.site.layer << "/" << r.site.op;
        }
      EXPECT_TRUE(found) << "recomputed draw " << r.site.layer << "/" << r.site.op << " has no forward draw";
    }
    if (only != "norm") {
      EXPECT_GT(recomputed, 0u) << "nothing recomputed a draw";
    }
  }
}

TEST(ModelCheckpoint, GraphSafePolicyBitwiseIdentical) {
  expect_checkpoint_identical(training::CheckpointPolicy::GraphSafe, runtime::GeneratorMode::GraphSafe, DType::F32);
}

TEST(ModelCheckpoint, NaivePolicyHostGeneratorBitwiseIdentical) {
  expect_checkpoint_identical(training::CheckpointPolicy::Naive, runtime::GeneratorMode::Host, DType::BF16);
}

// ---- Saved, memory categories, no-grad forward -----------------------------------------------------

struct SimEnv {
  std::unique_ptr<device::Device> dev;
  device::Stream stream;
  std::unique_ptr<runtime::Allocator> alloc;
  std::unique_ptr<runtime::RngTracker> rng;
  std::unique_ptr<runtime::Ctx> ctx;
  SimEnv() {
    std::string err;
    dev = device::make_device(device::BackendChoice::Sim, {}, &err);
    EXPECT_TRUE(device::ok(dev->stream_create(&stream, true)));
    alloc = std::make_unique<runtime::Allocator>(*dev);
    rng = std::make_unique<runtime::RngTracker>(*dev, 5, runtime::GeneratorMode::Host, runtime::DeviceStateModel::PerCapture);
    ctx.reset(new runtime::Ctx{*dev, stream, *alloc, *rng, nullptr, "", runtime::Phase::Forward, 0, 0, true, std::nullopt});
  }
  ~SimEnv() {
    ctx.reset();
    rng.reset();
    alloc.reset();
  }
};

void collect_categories(const Saved& s, std::set<MemCategory>& out) {
  for (const Tensor& t : s.tensors) out.insert(t.category());
  for (const Saved& c : s.children) collect_categories(c, out);
}

TEST(ModelSaved, SavedTensorsAreActivationsOrInputsAndBackwardClears) {
  SimEnv env;
  ModelSpec spec = block_stack(1, DType::F32, 0.1f);
  Model model(*env.ctx, spec, 3);
  Tensor x = env.alloc->alloc({spec.tokens, spec.hidden}, spec.dtype, MemCategory::Activations);
  runtime::from_floats(*env.dev, x, test_values(1, 0, static_cast<size_t>(x.numel())));
  std::vector<Saved> saved;
  Tensor y = model.forward(*env.ctx, x, saved);
  ASSERT_EQ(saved.size(), 1u);
  std::set<MemCategory> cats;
  collect_categories(saved[0], cats);
  EXPECT_EQ(cats, std::set<MemCategory>{MemCategory::Activations});
  EXPECT_GT(saved[0].bytes(), 0);
  EXPECT_EQ(y.category(), MemCategory::Activations);
  for (Param* p : model.params()) {
    EXPECT_EQ(p->value.category(), MemCategory::Parameters) << p->name;
    EXPECT_EQ(p->grad.category(), MemCategory::Gradients) << p->name;
  }
  Tensor dy = env.alloc->alloc(y.shape, y.dtype, MemCategory::Workspace);
  runtime::from_floats(*env.dev, dy, test_values(1, 1, static_cast<size_t>(y.numel())));
  Tensor dx = model.backward(*env.ctx, dy, saved);
  EXPECT_EQ(dx.category(), MemCategory::Workspace);
  EXPECT_EQ(saved[0].bytes(), 0);
  EXPECT_TRUE(saved[0].tensors.empty() && saved[0].children.empty());
  EXPECT_TRUE(device::ok(env.dev->stream_synchronize(env.stream)));
}

TEST(ModelSaved, NoGradForwardSavesNothingAndFreesActivations) {
  SimEnv env;
  ModelSpec spec = block_stack(2, DType::F32, 0.1f);
  Model model(*env.ctx, spec, 3);
  Tensor x = env.alloc->alloc({spec.tokens, spec.hidden}, spec.dtype, MemCategory::Activations);
  runtime::from_floats(*env.dev, x, test_values(1, 0, static_cast<size_t>(x.numel())));
  const int act = static_cast<int>(MemCategory::Activations);
  const int64_t before = env.alloc->stats().tensors[act].live_bytes;

  std::vector<Saved> saved;
  Tensor y = model.forward(*env.ctx, x, saved);
  const int64_t with_grad = env.alloc->stats().tensors[act].live_bytes - before;

  std::vector<Saved> none;
  env.ctx->save_for_backward = false;
  Tensor y2 = model.forward(*env.ctx, x, none);
  env.ctx->save_for_backward = true;
  const int64_t without = env.alloc->stats().tensors[act].live_bytes - before - with_grad;
  for (const Saved& s : none) EXPECT_EQ(s.bytes(), 0);
  EXPECT_EQ(without, y2.bytes()) << "a no-grad forward keeps only its output";
  EXPECT_GT(with_grad, 4 * y.bytes());
  EXPECT_TRUE(device::ok(env.dev->stream_synchronize(env.stream)));
  EXPECT_EQ(runtime::to_floats(*env.dev, y2).size(), runtime::to_floats(*env.dev, y).size());
}

TEST(ModelSaved, BackwardWithoutForwardThrows) {
  SimEnv env;
  ModelSpec spec = block_stack(1, DType::F32, 0.0f);
  Model model(*env.ctx, spec, 3);
  std::vector<Saved> saved(1);
  Tensor dy = env.alloc->alloc({spec.tokens, spec.hidden}, spec.dtype, MemCategory::Workspace);
  EXPECT_THROW(model.backward(*env.ctx, dy, saved), std::logic_error);
}

TEST(ModelSaved, WrongInputShapeOrDtypeThrows) {
  SimEnv env;
  ModelSpec spec = block_stack(1, DType::F32, 0.0f);
  Model model(*env.ctx, spec, 3);
  std::vector<Saved> saved;
  Tensor bad = env.alloc->alloc({spec.tokens, spec.hidden + 1}, spec.dtype, MemCategory::Activations);
  EXPECT_THROW(model.forward(*env.ctx, bad, saved), std::invalid_argument);
  Tensor bf = env.alloc->alloc({spec.tokens, spec.hidden}, DType::BF16, MemCategory::Activations);
  EXPECT_THROW(model.forward(*env.ctx, bf, saved), std::invalid_argument);
}

// ---- parameters ----------------------------------------------------------------------------------

TEST(ModelParams, NamesShapesAndDeterministicInit) {
  SimEnv env;
  ModelSpec spec = block_stack(1, DType::F32, 0.0f, 16, 8, 2);
  Model a(*env.ctx, spec, 42);
  Model b(*env.ctx, spec, 42);
  Model c(*env.ctx, spec, 43);
  std::vector<std::string> names;
  for (Param* p : a.params()) names.push_back(p->name);
  std::vector<std::string> expected = {
      "block0.ln1.weight",     "block0.ln1.bias",      "block0.attn.qkv.weight", "block0.attn.qkv.bias",
      "block0.attn.proj.weight", "block0.attn.proj.bias", "block0.ln2.weight",     "block0.ln2.bias",
      "block0.mlp.fc1.weight", "block0.mlp.fc1.bias",  "block0.mlp.fc2.weight",  "block0.mlp.fc2.bias"};
  EXPECT_EQ(names, expected);
  auto pa = a.params(), pb = b.params(), pc = c.params();
  EXPECT_EQ(pa[2]->value.shape, (Shape{48, 16}));
  EXPECT_EQ(pa[8]->value.shape, (Shape{64, 16}));
  for (size_t i = 0; i < pa.size(); ++i) {
    auto va = runtime::to_floats(*env.dev, pa[i]->value);
    EXPECT_TRUE(bits_equal(va, runtime::to_floats(*env.dev, pb[i]->value))) << pa[i]->name;
    EXPECT_FALSE(bits_equal(va, runtime::to_floats(*env.dev, pc[i]->value))) << pa[i]->name;
    auto g = runtime::to_floats(*env.dev, pa[i]->grad);
    EXPECT_EQ(l2(g), 0.0) << pa[i]->name << ": gradients start at zero";
  }
  // Linear weights within +-1/sqrt(fan_in); LayerNorm gamma near 1.
  for (float v : runtime::to_floats(*env.dev, pa[2]->value)) EXPECT_LE(std::abs(v), 0.25f);
  for (float v : runtime::to_floats(*env.dev, pa[0]->value)) EXPECT_NEAR(v, 1.0f, 0.1f);
}

TEST(ModelParams, DrawnOnTheDeviceEqualTheHostValues) { expect_drawn_values_equal_host(device::Backend::Sim); }

TEST(ModelParams, InitDependsOnNameNotOrder) {
  auto a = init_values(7, "block0.mlp.fc1.weight", 64, Init::Uniform, 16);
  auto b = init_values(7, "block0.mlp.fc1.weight", 64, Init::Uniform, 16);
  auto c = init_values(7, "block0.mlp.fc2.weight", 64, Init::Uniform, 16);
  EXPECT_TRUE(bits_equal(a, b));
  EXPECT_FALSE(bits_equal(a, c));
}

TEST(ModelTraining, MseSgdZeroGrads) {
  SimEnv env;
  ModelSpec spec = block_stack(1, DType::F32, 0.0f, 16, 8, 2);
  Model model(*env.ctx, spec, 3);
  auto& ctx = *env.ctx;
  Tensor x = env.alloc->alloc({spec.tokens, spec.hidden}, spec.dtype, MemCategory::Activations);
  Tensor t = env.alloc->alloc({spec.tokens, spec.hidden}, spec.dtype, MemCategory::Activations);
  runtime::from_floats(*env.dev, x, test_values(1, 0, 128));
  runtime::from_floats(*env.dev, t, test_values(1, 1, 128));
  float first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    zero_grads(ctx, model.params());
    std::vector<Saved> saved;
    Tensor y = model.forward(ctx, x, saved);
    Tensor dy;
    Tensor loss = mse_loss(ctx, y, t, &dy);
    model.backward(ctx, dy, saved);
    sgd_update(ctx, model.params(), 0.5f);
    ASSERT_TRUE(device::ok(env.dev->stream_synchronize(env.stream)));
    float l = runtime::to_floats(*env.dev, loss)[0];
    if (step == 0) {
      first = l;
      // The loss against a host computation, and dy = (y - t) / n.
      auto yv = runtime::to_floats(*env.dev, y), tv = runtime::to_floats(*env.dev, t), dv = runtime::to_floats(*env.dev, dy);
      double s = 0;
      for (size_t i = 0; i < yv.size(); ++i) {
        s += (double(yv[i]) - tv[i]) * (double(yv[i]) - tv[i]);
        EXPECT_FLOAT_EQ(dv[i], (yv[i] - tv[i]) / 128.0f);
      }
      EXPECT_NEAR(l, 0.5 * s / 128.0, 1e-6);
    }
    last = l;
  }
  EXPECT_LT(last, first) << "SGD on the MSE loss did not reduce it";
  zero_grads(ctx, model.params());
  ASSERT_TRUE(device::ok(env.dev->stream_synchronize(env.stream)));
  for (Param* p : model.params()) EXPECT_EQ(l2(runtime::to_floats(*env.dev, p->grad)), 0.0) << p->name;
}

// ---- validate ------------------------------------------------------------------------------------

TEST(ModelValidate, OneLineMessages) {
  ModelSpec s = block_stack(2, DType::F32, 0.1f, 12, 8, 4);
  EXPECT_EQ(validate(s), "");
  s.layers[1].heads = 5;
  EXPECT_EQ(validate(s), "layer 1: hidden 12 is not divisible by heads 5");
  s.layers[1].heads = 0;
  EXPECT_EQ(validate(s), "layer 1: heads must be at least 1, got 0");
  s.layers[1].heads = 4;
  s.layers[0].kind = "conv";
  EXPECT_EQ(validate(s), "layer 0: unknown kind 'conv'");
  s.layers[0].kind = "mlp";
  s.layers[0].dropout = 1.0f;
  EXPECT_EQ(validate(s).rfind("layer 0: dropout must be in [0, 1)", 0), 0u) << validate(s);
  s.layers[0].dropout = std::nanf("");
  EXPECT_NE(validate(s), "");
  s.layers[0].dropout = 0.0f;
  s.layers[0].ffn_hidden = -3;
  EXPECT_NE(validate(s), "");
  s.layers[0].ffn_hidden = 0;
  EXPECT_EQ(validate(s), "");
  s.hidden = 0;
  EXPECT_EQ(validate(s), "hidden must be at least 1, got 0");
  s.hidden = 12;
  s.tokens = 0;
  EXPECT_EQ(validate(s), "tokens must be at least 1, got 0");
  s.tokens = 8;
  s.layers.clear();
  EXPECT_EQ(validate(s), "the stack has no layers");
  for (const LayerCase& c : layer_cases()) EXPECT_EQ(validate(c.spec), "") << c.name;
  for (const std::string& m : {validate(block_stack(1, DType::F32, 2.0f))}) EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(ModelValidate, ModelRefusesInvalidSpec) {
  SimEnv env;
  ModelSpec s = block_stack(1, DType::F32, 0.0f, 12, 8, 5);
  EXPECT_THROW(Model(*env.ctx, s, 1), std::invalid_argument);
}

}  // namespace
}  // namespace recap::models::testing
