// Every conformance scenario on the GPU and on sim: the outcomes must agree call for call (where
// they differ, the GPU is right and sim is fixed), and the GPU must match the rule's prediction.
// Skipped where no GPU is usable.
#include <memory>

#include <gtest/gtest.h>

#include "harness/conformance/scenario.h"
#include "tests/conformance/test_names.h"

namespace recap::conformance {
namespace {

using testing::describe_mismatches;

// One cuda device for the whole run (the Recorder leaves nothing behind between scenarios).
device::Device* cuda_device(std::string* why) {
  static std::string error;
  static std::unique_ptr<device::Device> dev = [] {
    std::string why_not;
    if (!device::cuda_usable(&why_not)) {
      error = why_not;
      return std::unique_ptr<device::Device>();
    }
    return device::make_device(device::BackendChoice::Cuda, device::DeviceOptions{}, &error);
  }();
  if (!dev) *why = error.empty() ? "cuda device could not be made" : error;
  return dev.get();
}

class GpuConformance : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuConformance, AgreesWithSim) {
  const Scenario& s = all_scenarios().at(GetParam());
  std::string why;
  if (!device::cuda_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  device::Device* cuda = cuda_device(&why);
  ASSERT_NE(cuda, nullptr) << why;
  std::string error;
  auto sim = device::make_device(device::BackendChoice::Sim, device::DeviceOptions{}, &error);
  ASSERT_NE(sim, nullptr) << error;

  ScenarioResult on_gpu = run_scenario(s, *cuda);
  ScenarioResult on_sim = run_scenario(s, *sim);
  EXPECT_TRUE(on_gpu.error.empty()) << s.name << " could not run on cuda: " << on_gpu.error;
  auto diff = compare_outcomes(on_gpu, on_sim);
  std::string lines;
  for (const auto& d : diff) lines += "  " + d + "\n";
  EXPECT_TRUE(diff.empty()) << s.name << "\nrule: " << s.rule << "\ncuda against sim:\n" << lines;
  EXPECT_TRUE(on_gpu.mismatches().empty()) << s.name << "\nrule: " << s.rule << "\ncuda against the rule:\n"
                                           << describe_mismatches(on_gpu);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, GpuConformance, ::testing::Range<size_t>(0, all_scenarios().size()),
                         testing::param_name);

}  // namespace
}  // namespace recap::conformance
