// --gpus LIST (issue 22, harness/cli/gpus.h): parsing and validation, the round-robin assignment of
// jobs to GPUs, and the CUDA_VISIBLE_DEVICES a job gets. No GPU needed.
#include <gtest/gtest.h>

#include "harness/cli/gpus.h"

namespace recap::cli {
namespace {

std::vector<int> ok(const std::string& text, int count = -1) {
  std::vector<int> out;
  const std::string e = parse_gpus(text, count, "unknown here", &out);
  EXPECT_EQ(e, "") << text;
  return out;
}
std::string err(const std::string& text, int count = -1, const std::string& why = "unknown here") {
  std::vector<int> out;
  return parse_gpus(text, count, why, &out);
}

TEST(Gpus, ParsesOrdinals) {
  EXPECT_EQ(ok("0"), std::vector<int>({0}));
  EXPECT_EQ(ok("0,1,2,3"), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(ok("3,1"), std::vector<int>({3, 1}));  // the user's order: job 0 gets 3
  EXPECT_EQ(ok("7", 8), std::vector<int>({7}));
}

TEST(Gpus, AllIsEveryVisibleDevice) {
  EXPECT_EQ(ok("all", 4), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(ok("all", 1), std::vector<int>({0}));
}

TEST(Gpus, RefusesBadLists) {
  EXPECT_EQ(err(""), "--gpus: an empty list (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err(","), "--gpus ',': an empty entry (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err("0,,1"), "--gpus '0,,1': an empty entry (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err("0,"), "--gpus '0,': an empty entry (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err("a"), "--gpus 'a': 'a' is not a device ordinal (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err("1.5"), "--gpus '1.5': '1.5' is not a device ordinal (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err(" 1"), "--gpus ' 1': ' 1' is not a device ordinal (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err("+1"), "--gpus '+1': '+1' is not a device ordinal (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err("99999"), "--gpus '99999': '99999' is not a device ordinal (ordinals such as 0,1,2,3, or all)");
  EXPECT_EQ(err("0,-1"), "--gpus '0,-1': -1 is negative (device ordinals count from 0)");
  EXPECT_EQ(err("0,1,0"), "--gpus '0,1,0': 0 is listed twice (one job per entry; --jobs sets how many)");
  EXPECT_EQ(err("ALL"), "--gpus 'ALL': 'ALL' is not a device ordinal (ordinals such as 0,1,2,3, or all)");
}

TEST(Gpus, OrdinalsBeyondTheCountAreRefusedWhereItIsKnown) {
  EXPECT_EQ(err("0,2", 2), "--gpus '0,2': 2 is not a device here (2 visible: 0..1)");
  EXPECT_EQ(err("0", 0), "--gpus '0': 0 is not a device here (0 visible: none)");
  EXPECT_EQ(ok("5"), std::vector<int>({5}));  // count unknown: the workers' hellos say what they got
}

TEST(Gpus, AllNeedsACount) {
  EXPECT_EQ(err("all", -1, "nvidia-smi not found, and recap's backend is not cuda"),
            "--gpus all: cannot count the GPUs (nvidia-smi not found, and recap's backend is not cuda); name them (--gpus 0,1)");
  EXPECT_EQ(err("all", 0, "nvidia-smi -L lists 0"), "--gpus all: no GPU (nvidia-smi -L lists 0)");
}

TEST(Gpus, JobsGoRoundRobin) {
  const std::vector<int> g = {0, 1, 2, 3};
  std::vector<int> got;
  for (int j = 0; j < 10; ++j) got.push_back(gpu_of_job(j, g));
  EXPECT_EQ(got, std::vector<int>({0, 1, 2, 3, 0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(gpu_of_job(0, {2}), 2);
  EXPECT_EQ(gpu_of_job(5, {2}), 2);  // one ordinal: every job on it
  EXPECT_EQ(gpu_of_job(1, {3, 1}), 1);
}

TEST(Gpus, VisibleValueHonoursTheParentsRestriction) {
  EXPECT_EQ(visible_value(1, nullptr), "1");
  // recap run under CUDA_VISIBLE_DEVICES=2,3: its ordinal 1 is physical GPU 3
  EXPECT_EQ(visible_value(1, "2,3"), "3");
  EXPECT_EQ(visible_value(0, "GPU-abc,GPU-def"), "GPU-abc");
  EXPECT_EQ(visible_count(8, nullptr), 8);
  EXPECT_EQ(visible_count(8, "2,3"), 2);
  EXPECT_EQ(visible_count(8, ""), 0);
  EXPECT_EQ(visible_count(-1, nullptr), -1);
}

TEST(Gpus, CountsNvidiaSmiLines) {
  EXPECT_EQ(count_nvidia_smi_lines("GPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: GPU-2)\n"), 2);
  EXPECT_EQ(count_nvidia_smi_lines("  MIG 1g.18gb Device 0: (UUID: MIG-x)\nGPU 0: A (UUID: GPU-1)\n"), 1);
  EXPECT_EQ(count_nvidia_smi_lines("No devices found.\n"), 0);
  EXPECT_EQ(count_nvidia_smi_lines(""), 0);
}

}  // namespace
}  // namespace recap::cli
