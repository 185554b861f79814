// A hello's capabilities read into recap's enums (harness/sut/capabilities.h).
#include <gtest/gtest.h>

#include "harness/sut/capabilities.h"

namespace recap::sut {
namespace {

using training::CheckpointStyle;
using training::ExecutorKind;
using training::WarmupBackward;

std::string error_of(const Json& j) {
  Capabilities c;
  return capabilities_from_json(j, &c);
}

TEST(Capabilities, RecapsOwnListEveryValueButNonReentrant) {
  Capabilities r = recap_capabilities();
  Capabilities all = every_value();
  EXPECT_EQ(r.all.checkpoint_style, (std::vector<CheckpointStyle>{CheckpointStyle::Reentrant, CheckpointStyle::WithoutOutput}));
  EXPECT_EQ(all.all.checkpoint_style.size(), 3u);
  EXPECT_EQ(r.all.kinds, all.all.kinds);
  EXPECT_EQ(r.all.policy, all.all.policy);
  EXPECT_EQ(r.all.executor, all.all.executor);
  EXPECT_EQ(r.all.shared_pool, (std::vector<bool>{true, false}));
  EXPECT_TRUE(r.per_executor.empty());
  EXPECT_FALSE(recap_capabilities_json()["checkpoint_style"].dump().find("non-reentrant") != std::string::npos);
}

TEST(Capabilities, TorchsHelloIsReadInRecapsOrder) {
  // As drivers/recap_drivers/frameworks/torch/sut.py sends it on a GPU (values in another order on purpose).
  Json j = Json::parse(R"({"kinds":["block","linear"],"dtype":["bf16","fp32"],
    "executor":["eager","per-layer","full-iteration"],"checkpoint":["none","full","selective"],
    "checkpoint_style":["non-reentrant","reentrant"],"policy":["naive"],"generator":["graph-safe"],
    "device_state":["shared"],"warmup_backward":["backward","grad-of-inputs"],"shared_pool":[false,true],
    "graphs":true,"per_layer":{"warmup_backward":["grad-of-inputs"],"shared_pool_orders":["default"]}})");
  Capabilities c;
  ASSERT_EQ(capabilities_from_json(j, &c), "");
  EXPECT_EQ(c.all.kinds, (std::vector<std::string>{"linear", "block"}));
  EXPECT_EQ(c.all.dtype, (std::vector<models::DType>{models::DType::F32, models::DType::BF16}));
  EXPECT_EQ(c.all.checkpoint_style, (std::vector<CheckpointStyle>{CheckpointStyle::Reentrant, CheckpointStyle::NonReentrant}));
  EXPECT_EQ(c.all.policy, (std::vector<training::CheckpointPolicy>{training::CheckpointPolicy::Naive}));
  EXPECT_EQ(c.all.shared_pool, (std::vector<bool>{true, false}));
  ASSERT_EQ(c.per_executor.count(ExecutorKind::PerLayer), 1u);
  const Dims& p = c.per_executor.at(ExecutorKind::PerLayer);
  EXPECT_EQ(p.warmup_backward, (std::vector<WarmupBackward>{WarmupBackward::GradOfInputs}));
  EXPECT_EQ(p.shared_pool_orders, (std::vector<std::string>{"default"}));
  EXPECT_TRUE(p.dtype.empty());  // not restricted
  EXPECT_EQ(c.all.microbatch_order, (std::vector<std::string>{"default", "interleaved"}));  // not listed: both
  ASSERT_EQ(capabilities_from_json(Json::parse(R"({"microbatch_order":["default"]})"), &c), "");
  EXPECT_EQ(c.all.microbatch_order, (std::vector<std::string>{"default"}));
}

TEST(Capabilities, TheGeneralPerExecutorFormAndDefaults) {
  Capabilities c;
  ASSERT_EQ(capabilities_from_json(Json::parse(R"({"executor":["eager","full-iteration"],
    "per_executor":{"full-iteration":{"dtype":["fp32"]}}, "some_future_key": 3})"), &c), "");
  EXPECT_EQ(c.all.executor, (std::vector<ExecutorKind>{ExecutorKind::Eager, ExecutorKind::FullIteration}));
  EXPECT_EQ(c.all.dtype.size(), 2u);  // not listed: unrestricted
  EXPECT_EQ(c.per_executor.at(ExecutorKind::FullIteration).dtype, (std::vector<models::DType>{models::DType::F32}));
  // a value recap does not know is ignored, as long as one it knows is left
  ASSERT_EQ(capabilities_from_json(Json::parse(R"({"dtype":["fp8","bf16"]})"), &c), "");
  EXPECT_EQ(c.all.dtype, (std::vector<models::DType>{models::DType::BF16}));
}

TEST(Capabilities, BadHellosAreOneLineNamingTheField) {
  EXPECT_EQ(error_of(Json::array()), "capabilities: expected an object, got an array");
  EXPECT_EQ(error_of(Json::parse(R"({"dtype":"fp32"})")), "capabilities.dtype: expected an array of strings, got a string");
  EXPECT_EQ(error_of(Json::parse(R"({"executor":["tpu"]})")),
            "capabilities.executor: none of its values is one recap knows ('tpu'; recap's: eager, per-layer, full-iteration)");
  EXPECT_EQ(error_of(Json::parse(R"({"policy":[]})")),
            "capabilities.policy: none of its values is one recap knows (the list is empty; recap's: naive, skip, graph-safe)");
  EXPECT_EQ(error_of(Json::parse(R"({"shared_pool":[1]})")),
            "capabilities.shared_pool: expected an array of booleans, got an element that is a number");
  EXPECT_EQ(error_of(Json::parse(R"({"per_executor":{"lazy":{}}})")),
            "capabilities.per_executor.lazy: unknown executor (one of: eager, per-layer, full-iteration)");
  EXPECT_EQ(error_of(Json::parse(R"({"per_layer":{"kinds":["linear"]}})")),
            "capabilities.per_layer.kinds: not restricted per executor (list it at the top level)");
  EXPECT_EQ(error_of(Json::parse(R"({"per_layer":{},"per_executor":{"per-layer":{}}})")),
            "capabilities.per_executor.per-layer: restricted twice (also by per_layer)");
  EXPECT_EQ(error_of(Json::parse(R"({"per_layer":{"shared_pool_orders":["any"]}})")),
            "capabilities.per_layer.shared_pool_orders: none of its values is 'default' or 'interleaved'");
  EXPECT_EQ(error_of(Json::parse(R"({"tp":[2],"sp":"yes"})")), "capabilities.sp: expected true or false, got a string");
}

// Issue 22: a rank group's hello says whether it runs its tp cases sequence parallel ("sp": true);
// absent, or another system's hello, draws none.
TEST(Capabilities, SequenceParallelIsTheGroupsToSay) {
  Capabilities c;
  ASSERT_EQ(capabilities_from_json(Json::parse(R"({"tp":[2],"pp":[2],"sp":true})"), &c), "");
  EXPECT_TRUE(c.sp);
  ASSERT_EQ(capabilities_from_json(Json::parse(R"({"tp":[2]})"), &c), "");
  EXPECT_FALSE(c.sp);
}

}  // namespace
}  // namespace recap::sut
