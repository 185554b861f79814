// The acceptance on a GPU (label gpu; skipped where no GPU is usable): eager, per-layer graphs and
// the full-iteration graph bitwise equal at every step and microbatch, with and without recompute;
// the naive policy's capture error as CUDA reports it; skip vs graph-safe memory inside graphs.
#include <gtest/gtest.h>

#include <cstdio>

#include "executor_test_util.h"
#include "harness/training/executor.h"
#include "harness/runtime/phase.h"

namespace recap::training {
namespace {

using testing::acceptance_spec;
using testing::first_difference;

std::unique_ptr<device::Device> gpu() {
  std::string why;
  if (!device::cuda_usable(&why)) return nullptr;
  std::string err;
  return device::make_device(device::BackendChoice::Cuda, {}, &err);
}

#define REQUIRE_GPU(dev)                                   \
  auto dev = gpu();                                        \
  if (!dev) {                                              \
    std::string why;                                       \
    device::cuda_usable(&why);                             \
    GTEST_SKIP() << "no usable GPU: " << why;              \
  }

TEST(ExecutorsGpu, AcceptanceBitwiseEqual) {
  REQUIRE_GPU(dev);
  for (std::vector<int> order : {std::vector<int>{1, 1, -1, -1}, std::vector<int>{1, -1, 1, -1}}) {
    auto spec = [&](ExecutorKind e, bool ckpt) {
      CaseSpec s = acceptance_spec(e, ckpt);
      s.order = order;
      return s;
    };
    RunResult eager = run_case(*dev, spec(ExecutorKind::Eager, true));
    RunResult plain = run_case(*dev, spec(ExecutorKind::Eager, false));
    RunResult per_layer = run_case(*dev, spec(ExecutorKind::PerLayer, true));
    RunResult full = run_case(*dev, spec(ExecutorKind::FullIteration, true));
    for (const RunResult* r : {&eager, &plain, &per_layer, &full}) {
      ASSERT_TRUE(r->ok()) << r->failure->line();
      EXPECT_EQ(verdict(*r).disposition, "passed") << verdict(*r).reason;
    }
    testing::expect_non_vacuous(eager);
    EXPECT_EQ(first_difference(eager, plain), "");
    EXPECT_EQ(first_difference(eager, per_layer), "");
    EXPECT_EQ(first_difference(eager, full), "");
    std::printf("    order %s: %zu steps bitwise equal across eager, per-layer (%d graphs), full-iteration; "
                "last loss %.9g\n",
                order[1] == 1 ? "[1,1,-1,-1]" : "[1,-1,1,-1]", eager.steps.size(), per_layer.graphs,
                eager.steps.back().microbatches[0].loss);
  }
}

TEST(ExecutorsGpu, NaiveFailsInCaptureWithTheCudaError) {
  REQUIRE_GPU(dev);
  CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, true);
  s.policy = CheckpointPolicy::Naive;
  s.generator = GeneratorMode::Host;
  Session session(*dev, s);
  RunResult r = session.run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure->api, "cudaStreamSynchronize");
  EXPECT_EQ(r.failure->error, "cudaErrorStreamCaptureUnsupported");
  EXPECT_EQ(r.failure->layer, "block0");
  EXPECT_TRUE(phase_flags_clear());
  std::printf("    %s\n", r.failure->line().c_str());
  StepRecord after = session.eager_step(3);
  EXPECT_EQ(count_ledger(after.ledger).recompute, 24);

  CaseSpec g = acceptance_spec(ExecutorKind::PerLayer, true);
  g.policy = CheckpointPolicy::Naive;
  g.warmup_backward = WarmupBackward::GradOfInputs;
  RunResult refusal = run_case(*dev, g);
  ASSERT_FALSE(refusal.ok());
  EXPECT_NE(refusal.failure->message.find(kCheckpointGradRefusal), std::string::npos);
}

TEST(ExecutorsGpu, SkipVersusGraphSafeMemoryInsideGraphs) {
  REQUIRE_GPU(dev);
  auto spec = [](CheckpointPolicy p, bool ckpt) {
    CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, ckpt);
    s.policy = p;
    s.replays = 2;
    return s;
  };
  RunResult none = run_case(*dev, spec(CheckpointPolicy::GraphSafe, false));
  RunResult skip = run_case(*dev, spec(CheckpointPolicy::Skip, true));
  RunResult safe = run_case(*dev, spec(CheckpointPolicy::GraphSafe, true));
  for (const RunResult* r : {&none, &skip, &safe}) ASSERT_TRUE(r->ok()) << r->failure->line();
  int64_t a_none = none.capture_memory.activations_peak(), a_skip = skip.capture_memory.activations_peak(),
          a_safe = safe.capture_memory.activations_peak();
  std::printf("    activations peak during capture: none %lld, skip %lld, graph-safe %lld bytes; graph pools %lld, "
              "%lld, %lld bytes\n",
              static_cast<long long>(a_none), static_cast<long long>(a_skip), static_cast<long long>(a_safe),
              static_cast<long long>(none.capture_memory.allocator.pool_peak_reserved_bytes),
              static_cast<long long>(skip.capture_memory.allocator.pool_peak_reserved_bytes),
              static_cast<long long>(safe.capture_memory.allocator.pool_peak_reserved_bytes));
  EXPECT_EQ(a_skip, a_none);
  EXPECT_LT(a_safe * 2, a_none);
}

}  // namespace
}  // namespace recap::training
