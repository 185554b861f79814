// The checkpoint wrapper on its own (sim): recompute equals forward per policy and generator mode,
// the reentrant refusal, the skip bypass, the naive policy's capture error.
#include <gtest/gtest.h>

#include "executor_test_util.h"
#include "harness/training/checkpoint.h"
#include "harness/runtime/phase.h"
#include "harness/training/train.h"

namespace recap::training {
namespace {

std::unique_ptr<device::Device> sim() {
  std::string err;
  auto d = device::make_device(device::BackendChoice::Sim, {}, &err);
  EXPECT_TRUE(d) << err;
  return d;
}

CaseSpec one_block(CheckpointPolicy policy, GeneratorMode gen, bool checkpoint = true) {
  CaseSpec s = testing::acceptance_spec(ExecutorKind::Eager, checkpoint);
  s.model.layers.resize(1);
  s.layers.resize(1);
  s.policy = policy;
  s.generator = gen;
  s.microbatches = 1;
  s.order = {1, -1};
  return s;
}

struct Pass {
  Tensor y, dx;
  std::vector<std::vector<float>> grads;
  std::vector<LedgerEntry> ledger;
  int64_t activations_after_forward = 0;
};

// One forward and backward of layer 0 on the main stream.
Pass forward_backward(Trainer& t) {
  Pass p;
  t.load_step_data(0);
  t.begin_step(0, t.main);
  Ctx c = t.ctx(t.main);
  models::Saved saved;
  {
    LayerScope scope(c, t.layers[0]->name());
    p.y = t.layers[0]->forward(c, t.input[0], saved);
  }
  t.dev.device_synchronize();
  p.activations_after_forward = t.alloc.stats().tensors[static_cast<int>(device::MemCategory::Activations)].live_bytes;
  c.phase = Phase::Backward;
  {
    LayerScope scope(c, t.layers[0]->name());
    p.dx = t.layers[0]->backward(c, t.target[0], saved);
  }
  t.dev.device_synchronize();
  for (auto* prm : t.params) p.grads.push_back(to_floats(t.dev, prm->grad));
  size_t before = t.ledger.entries().size();
  t.ledger.collect(0);
  p.ledger.assign(t.ledger.entries().begin() + static_cast<ptrdiff_t>(before), t.ledger.entries().end());
  return p;
}

TEST(Checkpoint, GraphSafeRecomputeDrawsTheForwardMasks) {
  for (GeneratorMode gen : {GeneratorMode::Host, GeneratorMode::GraphSafe}) {
    auto dev = sim();
    Trainer plain(*dev, one_block(CheckpointPolicy::GraphSafe, gen, false));
    Trainer ckpt(*dev, one_block(CheckpointPolicy::GraphSafe, gen, true));
    ASSERT_NE(ckpt.top_checkpoints[0], nullptr);
    Pass a = forward_backward(plain), b = forward_backward(ckpt);
    EXPECT_TRUE(testing::same_bits(to_floats(*dev, a.y), to_floats(*dev, b.y)));
    EXPECT_TRUE(testing::same_bits(to_floats(*dev, a.dx), to_floats(*dev, b.dx)));
    for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(testing::same_bits(a.grads[i], b.grads[i])) << i;
    LedgerCounts lc = count_ledger(b.ledger);
    EXPECT_EQ(lc.forward, 3);  // attn_dropout, drop1, mlp dropout
    EXPECT_EQ(lc.recompute, 3);
    EXPECT_EQ(lc.mismatches, 0);
    // Recompute frees the block's intermediates: only its input's references and the device pair stay.
    EXPECT_LT(b.activations_after_forward, a.activations_after_forward / 4)
        << b.activations_after_forward << " vs " << a.activations_after_forward;
    EXPECT_EQ(ckpt.top_checkpoints[0]->pending(), 0u);
  }
}

TEST(Checkpoint, NaiveWithHostGeneratorRestoresSnapshots) {
  auto dev = sim();
  Trainer plain(*dev, one_block(CheckpointPolicy::Naive, GeneratorMode::Host, false));
  Trainer ckpt(*dev, one_block(CheckpointPolicy::Naive, GeneratorMode::Host, true));
  Pass a = forward_backward(plain), b = forward_backward(ckpt);
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(testing::same_bits(a.grads[i], b.grads[i])) << i;
  EXPECT_EQ(count_ledger(b.ledger).mismatches, 0);
  // Both consumed the same random stream.
  EXPECT_EQ(plain.rng.current().host_offset(), ckpt.rng.current().host_offset());
}

TEST(Checkpoint, NaiveWithGraphSafeGeneratorSavesLiveHandles) {
  // Bug class 3 (Megatron-LM dev #5841): the saved state is an alias; the recompute draws on.
  auto dev = sim();
  Trainer plain(*dev, one_block(CheckpointPolicy::Naive, GeneratorMode::GraphSafe, false));
  Trainer ckpt(*dev, one_block(CheckpointPolicy::Naive, GeneratorMode::GraphSafe, true));
  Pass a = forward_backward(plain), b = forward_backward(ckpt);
  EXPECT_EQ(count_ledger(b.ledger).mismatches, 3);
  bool differs = false;
  for (size_t i = 0; i < a.grads.size(); ++i) differs = differs || !testing::same_bits(a.grads[i], b.grads[i]);
  EXPECT_TRUE(differs) << "wrong masks must give other gradients";
  EXPECT_GT(ckpt.rng.current().host_offset(), plain.rng.current().host_offset());
}

TEST(Checkpoint, ReentrantRefusesGradOfInputs) {
  auto dev = sim();
  Trainer t(*dev, one_block(CheckpointPolicy::GraphSafe, GeneratorMode::GraphSafe));
  t.load_step_data(0);
  Ctx c = t.ctx(t.main);
  models::Saved saved;
  Tensor y = t.layers[0]->forward(c, t.input[0], saved);
  BackwardStyleScope grad_style(true);
  try {
    t.layers[0]->backward(c, t.target[0], saved);
    FAIL() << "no refusal";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.message, kCheckpointGradRefusal);
    EXPECT_EQ(std::string(e.what()), std::string("checkpoint block0: ") + kCheckpointGradRefusal);
  }
}

TEST(Checkpoint, WithoutOutputStyleAcceptsGradOfInputs) {
  auto dev = sim();
  CaseSpec s = one_block(CheckpointPolicy::GraphSafe, GeneratorMode::GraphSafe);
  s.style = CheckpointStyle::WithoutOutput;
  Trainer t(*dev, s);
  t.load_step_data(0);
  Ctx c = t.ctx(t.main);
  models::Saved saved;
  t.layers[0]->forward(c, t.input[0], saved);
  BackwardStyleScope grad_style(true);
  EXPECT_NO_THROW(t.layers[0]->backward(c, t.target[0], saved));
}

TEST(Checkpoint, SkipBypassesWhileWarmingUpOrCapturing) {
  auto dev = sim();
  Trainer t(*dev, one_block(CheckpointPolicy::Skip, GeneratorMode::GraphSafe));
  t.load_step_data(0);
  Ctx c = t.ctx(t.main);
  for (bool warming_up : {true, false}) {  // bypassed while warming up, checkpointed after
    SCOPED_TRACE(warming_up ? "warming up" : "not warming up");
    models::Saved saved;
    GraphWarmupScope warmup(warming_up);
    t.layers[0]->forward(c, t.input[0], saved);
    EXPECT_EQ(Checkpoint::bypassed(saved), warming_up);
    if (warming_up) EXPECT_GT(saved.bytes(), 4096);
    t.layers[0]->backward(c, t.target[0], saved);
  }
  EXPECT_EQ(t.top_checkpoints[0]->pending(), 0u);
}

TEST(Checkpoint, NaiveWithHostGeneratorFailsInCapture) {
  auto dev = sim();
  Trainer t(*dev, one_block(CheckpointPolicy::Naive, GeneratorMode::Host));
  t.load_step_data(0);
  Ctx c = t.ctx(t.capture);
  models::Saved saved;
  t.rng.capture_begin();
  ASSERT_EQ(dev->stream_begin_capture(t.capture, device::CaptureMode::Global), device::Status::Success);
  PoolId pool = t.alloc.create_pool();
  try {
    PoolScope in_pool(t.alloc, pool);  // allocations during capture come from a graph pool
    LayerScope scope(c, t.layers[0]->name());
    t.layers[0]->forward(c, t.input[0], saved);
    FAIL() << "no capture error";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.api, "cudaStreamSynchronize");
    EXPECT_EQ(e.status, device::Status::StreamCaptureUnsupported);
    std::string what = e.what();
    EXPECT_NE(what.find("checkpoint block0"), std::string::npos) << what;
    EXPECT_NE(what.find("forward during graph capture"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << what;
  }
  device::CaptureStatus st;
  dev->stream_is_capturing(t.capture, &st);
  EXPECT_EQ(st, device::CaptureStatus::Invalidated);
  device::Graph g{};
  EXPECT_EQ(dev->stream_end_capture(t.capture, &g), device::Status::StreamCaptureInvalidated);
  t.rng.capture_end();
  dev->get_last_error();
}

}  // namespace
}  // namespace recap::training
