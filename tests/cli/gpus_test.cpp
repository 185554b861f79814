// --gpus LIST (issue 22, harness/cli/gpus.h): parsing and validation, the round-robin assignment of
// jobs to GPUs, the CUDA_VISIBLE_DEVICES a job gets; the report's gpus section from what workers
// said (reports/results.h) and the hello's visible_device read (harness/sut/sut.h). No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/cli/gpus.h"
#include "harness/sut/sut.h"
#include "reports/results.h"

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

// ---- what the report says ran where (reports/results.h), from what workers said (sut.h) ----------
namespace recap::reports {
namespace {

JobDevice job(int j, int requested, const std::string& set, const std::string& seen, const std::string& uuid, int cases,
              double seconds) {
  JobDevice d;
  d.job = j;
  d.shard = std::to_string(j) + "/4";
  d.requested = requested;
  d.visible_set = set;
  d.observed = true;
  d.visible_seen_set = true;
  d.visible_seen = seen;
  d.device = "NVIDIA H200";
  d.uuid = uuid;
  d.pci_bus_id = uuid.empty() ? "" : "00000000:19:00.0";
  d.cases = cases;
  d.seconds = seconds;
  return d;
}

TEST(GpusReport, DevicesAreWhatTheWorkersObserved) {
  JobDevice lost;  // died before it said
  lost.job = 3;
  lost.shard = "3/4";
  lost.requested = 1;
  lost.visible_set = "1";
  lost.cases = 1;
  const std::vector<JobDevice> jobs = {job(0, 0, "0", "0", "GPU-a", 3, 30.0), job(1, 1, "1", "1", "GPU-b", 5, 60.0),
                                       job(2, 0, "0", "0", "GPU-a", 4, 20.0), lost};
  const Json g = gpus_json({0, 1}, jobs, 60.0);
  ASSERT_EQ(g["devices"].size(), 2u);
  EXPECT_EQ(g["devices"][0]["key"], "GPU-a");
  EXPECT_EQ(g["devices"][0]["jobs"], Json({0, 2}));
  EXPECT_EQ(g["devices"][0]["cases"], 7);
  EXPECT_EQ(g["devices"][0]["seconds"], 30.0);  // its jobs ran side by side: the slowest one's
  EXPECT_EQ(g["devices"][0]["cases_per_minute"], 14.0);
  EXPECT_EQ(g["devices"][1]["jobs"], Json({1}));
  EXPECT_EQ(g["unobserved_jobs"], Json({3}));
  EXPECT_EQ(g["cases"], 13);
  EXPECT_TRUE(g["jobs"][3]["observed"].is_null());
  const auto lines = gpu_lines(g);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "gpu GPU-a (NVIDIA H200, CUDA_VISIBLE_DEVICES=0): jobs 0, 2, 7 cases, 14.0 cases/min");
  EXPECT_EQ(lines[1], "gpu GPU-b (NVIDIA H200, CUDA_VISIBLE_DEVICES=1): job 1, 5 cases, 5.0 cases/min");
  EXPECT_EQ(lines[2], "gpu unknown: job 3 (given GPU 1) did not say which device it used (it ended first, or its worker's hello has "
            "no visible_device), 1 case");
  EXPECT_EQ(lines[3], "gpus total: 13 cases, 13.0 cases/min");
}

TEST(GpusReport, AWorkerOnAnotherDeviceThanAskedIsCountedWhereItRan) {
  // job 1 was given GPU 1, but its worker saw CUDA_VISIBLE_DEVICES=0 and GPU-a: it ran on GPU-a
  const Json g = gpus_json({0, 1}, {job(0, 0, "0", "0", "GPU-a", 2, 10.0), job(1, 1, "1", "0", "GPU-a", 2, 10.0)}, 10.0);
  ASSERT_EQ(g["devices"].size(), 1u);
  EXPECT_EQ(g["devices"][0]["jobs"], Json({0, 1}));
  const auto lines = gpu_lines(g);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "gpu mismatch: job 1 was given CUDA_VISIBLE_DEVICES=1, its worker saw 0"),
            lines.end());
}

TEST(GpusReport, NoGpusNoSection) { EXPECT_TRUE(gpus_json({}, {}, 1.0).is_null()); }

TEST(GpusReport, AJobHandsItsObservationToItsParent) {
  CampaignResult r;
  r.job_devices = {job(2, 1, "1", "1", "GPU-b", 4, 2.5)};
  r.job_devices[0].visible_seen_set = false;  // unset in the worker: null, not ""
  const CampaignResult back = campaign_from_json(campaign_to_json(r));
  ASSERT_EQ(back.job_devices.size(), 1u);
  EXPECT_EQ(job_device_to_json(back.job_devices[0]), job_device_to_json(r.job_devices[0]));
  EXPECT_TRUE(job_device_to_json(back.job_devices[0])["observed"]["cuda_visible_devices"].is_null());
  EXPECT_FALSE(campaign_to_json(CampaignResult{}).contains("job_devices"));  // without --gpus: as before
}

TEST(GpusReport, HelloVisibleDeviceIsRead) {
  sut::SutInfo info;
  sut::read_visible_device(Json{{"visible_device", {{"cuda_visible_devices", "3"}, {"uuid", "GPU-x"}, {"pci_bus_id", nullptr}}}},
                           &info);
  EXPECT_TRUE(info.visible_said);
  EXPECT_EQ(info.cuda_visible_devices, std::optional<std::string>("3"));
  EXPECT_EQ((std::pair{info.uuid, info.pci_bus_id}), (std::pair<std::string, std::string>{"GPU-x", ""}));
  sut::SutInfo unset;
  sut::read_visible_device(Json{{"visible_device", {{"cuda_visible_devices", nullptr}, {"uuid", nullptr}, {"pci_bus_id", nullptr}}}},
                           &unset);
  EXPECT_TRUE(unset.visible_said);
  EXPECT_FALSE(unset.cuda_visible_devices.has_value());
  sut::SutInfo old;  // a worker older than the field
  sut::read_visible_device(Json{{"device", "cpu"}}, &old);
  EXPECT_FALSE(old.visible_said);
}

// --jobs auto: cores bound the jobs, and on GPUs their free memory at the estimate per job.
TEST(AutoJobs, CoresAndGpuMemory) {
  std::string why;
  EXPECT_EQ(cli::auto_jobs(16, {}, 0, &why), 16);  // no GPU: one job a core
  EXPECT_EQ(why, "16 (16 CPU cores)");
  EXPECT_EQ(cli::auto_jobs(0, {}, 0, &why), 1);  // never fewer than one
  EXPECT_EQ(cli::auto_jobs(16, {139000}, 2048, &why), 16);  // an idle H200 holds 67 jobs: cores decide
  EXPECT_EQ(why, "16 (16 CPU cores; GPU memory free: 139000 MiB, 2048 MiB a job: 67)");
  EXPECT_EQ(cli::auto_jobs(16, {20000}, 8192, &why), 2);  // a busy GPU decides
  EXPECT_EQ(cli::auto_jobs(16, {20000, 40000}, 8192, &why), 6);  // summed over the GPUs the jobs spread over
  EXPECT_EQ(cli::auto_jobs(16, {1000}, 8192, &why), 1);  // at least one a GPU
  EXPECT_EQ(cli::auto_jobs(1000, {}, 0, &why), 256);  // --jobs's range
}

TEST(AutoJobs, NvidiaSmiFreeMemory) {
  EXPECT_EQ(cli::parse_free_mib("139500\n 80000 \r\n"), (std::vector<long long>{139500, 80000}));
  EXPECT_TRUE(cli::parse_free_mib("[N/A]\n").empty());  // unreadable: not known, never zero
  EXPECT_TRUE(cli::parse_free_mib("").empty());
  std::vector<long long> out;
  EXPECT_EQ(cli::free_mib_of({0, 1}, nullptr, {100, 200, 300}, &out), "");
  EXPECT_EQ(out, (std::vector<long long>{100, 200}));
  EXPECT_EQ(cli::free_mib_of({0}, "2,0", {100, 200, 300}, &out), "");  // visible 0 is physical 2
  EXPECT_EQ(out, (std::vector<long long>{300}));
  EXPECT_EQ(cli::free_mib_of({1}, "2", {100, 200, 300}, &out), "GPU 1 is not visible");
  EXPECT_EQ(cli::free_mib_of({0}, "GPU-abc", {100}, &out), "CUDA_VISIBLE_DEVICES entry 'GPU-abc' is not a device index");
  EXPECT_EQ(cli::free_mib_of({3}, nullptr, {100}, &out), "nvidia-smi lists 1 GPUs, not GPU 3");
}

}  // namespace
}  // namespace recap::reports
