// Generated cases validate, cover the configuration space, and shrink toward small cases.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/fuzz.h"
#include "properties/generators.h"

namespace recap::properties {
namespace {

RC_GTEST_PROP(Generators, CasesValidate, ()) {
  const auto spec = *gen_case({});
  RC_ASSERT(training::validate(spec) == "");
  RC_ASSERT(spec.model.layers.size() >= 1u);
  RC_ASSERT(spec.model.layers.size() <= 8u);
  RC_ASSERT(spec.model.hidden >= 8 && spec.model.hidden <= 64);
  RC_ASSERT(spec.model.tokens >= 4 && spec.model.tokens <= 64);
  RC_ASSERT(spec.warmup >= 0 && spec.warmup <= 3);
  RC_ASSERT(spec.replays >= 1 && spec.replays <= 4);
  RC_ASSERT(spec.microbatches >= 1 && spec.microbatches <= 4);
}

RC_GTEST_PROP(Generators, FixedPolicyIsKept, ()) {
  const auto p = *rc::gen::element(training::CheckpointPolicy::Naive, training::CheckpointPolicy::Skip,
                                   training::CheckpointPolicy::GraphSafe);
  GenConfig g;
  g.policy = p;
  const auto spec = *gen_case(g);
  RC_ASSERT(spec.policy == p);
  RC_ASSERT(training::validate(spec) == "");
  if (p != training::CheckpointPolicy::Naive && spec.executor != training::ExecutorKind::Eager)
    RC_ASSERT(spec.generator == runtime::GeneratorMode::GraphSafe);
}

RC_GTEST_PROP(Generators, CudaCasesValidate, ()) {
  GenConfig g;
  g.backend = device::Backend::Cuda;
  const auto spec = *gen_case(g);
  RC_ASSERT(training::validate(spec) == "");
  RC_ASSERT(spec.model.hidden >= 64);
}

// Many samples: every kind, both dtypes, every executor/policy/generator appear; the main
// combination is well covered.
TEST(Generators, Coverage) {
  std::map<std::string, int> seen;
  const int n = 2000;
  auto g = gen_case({});
  for (int i = 0; i < n; ++i) {
    auto spec = g(rc::Random(static_cast<uint64_t>(i) * 7919 + 1), rc::kNominalSize).value();
    ASSERT_EQ(training::validate(spec), "");
    for (const auto& l : classify(spec)) seen[l]++;
  }
  for (const char* k : {"linear", "layernorm", "rmsnorm", "gelu", "swiglu", "dropout", "attention", "mlp", "block"})
    EXPECT_GT(seen[std::string("kind=") + k], 0) << k;
  for (const char* l : {"executor=eager", "executor=per-layer", "executor=full-iteration", "policy=naive", "policy=skip",
                        "policy=graph-safe", "generator=host", "generator=graph-safe", "dtype=bf16", "dtype=fp32",
                        "style=without-output", "warmup_backward=grad-of-inputs", "selective", "interleaved order",
                        "device_state=per-capture", "separate pools", "layers=8", "microbatches=4", "warmup=3"})
    EXPECT_GT(seen[l], 0) << l;
  EXPECT_GE(seen["checkpoint+capture+dropout"], n / 10) << seen["checkpoint+capture+dropout"];
}

// Shrinking moves toward the smallest case: a property that fails for every case shrinks to one
// linear layer at the smallest dims, the fewest steps, flags off.
TEST(Generators, ShrinksTowardTheSmallestCase) {
  auto g = gen_case({});
  auto shrinkable = g(rc::Random(42), rc::kNominalSize);
  // Greedy: always take the first shrink (every case "fails").
  for (int guard = 0; guard < 10000; ++guard) {
    auto first = shrinkable.shrinks().next();
    if (!first) break;
    shrinkable = *first;
  }
  auto s = shrinkable.value();
  EXPECT_EQ(s.model.layers.size(), 1u);
  EXPECT_EQ(s.model.layers[0].kind, "linear");
  EXPECT_EQ(s.model.hidden, 8);
  EXPECT_EQ(s.model.tokens, 4);
  EXPECT_EQ(s.warmup, 0);
  EXPECT_EQ(s.replays, 1);
  EXPECT_EQ(s.microbatches, 1);
  EXPECT_EQ(s.layers[0].checkpoint, training::CheckpointGranularity::None);
  EXPECT_FALSE(s.layers[0].graphed);
  EXPECT_EQ(s.model.dtype, models::DType::F32);
  EXPECT_EQ(s.executor, training::ExecutorKind::Eager);
}

}  // namespace
}  // namespace recap::properties
