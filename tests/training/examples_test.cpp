// Every curated case in corpus/ runs on sim to the disposition it expects (and, where it names
// them, the failure's phase, layer and error), judged by what the run alone shows (the runtime's
// verdict). Cases whose expected failure is a comparison with another run (eager_vs_graphed,
// recompute_on_off, memory, reference, hygiene) are the oracles' business: the corpus.* tests replay
// those through `recap replay`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "harness/training/executor.h"
#include "harness/training/spec.h"

namespace recap::training {
namespace {

TEST(CorpusCases, RunToTheirExpectedDisposition) {
  namespace fs = std::filesystem;
  int seen = 0;
  std::vector<fs::path> files;
  // RECAP_CORPUS_DIR in the environment overrides the source path baked in at build time (a
  // binary carried to another machine finds the cases in its own checkout).
  const char* dir = std::getenv("RECAP_CORPUS_DIR");
  for (const auto& entry : fs::directory_iterator(dir ? dir : RECAP_CORPUS_DIR))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.filename().string());
    CaseSpec spec;
    ASSERT_EQ(read_case_file(path.string(), &spec), "");
    ASSERT_TRUE(spec.expected.is_object()) << "a corpus case states its expected disposition";
    const std::string property = spec.expected.value("property", "");
    if (!property.empty() && property != "capture_clean" && property != "rng_ledger") continue;
    std::string err;
    auto dev = device::make_device(device::BackendChoice::Sim, {}, &err);
    RunResult r = run_case(*dev, spec);
    Verdict v = verdict(r);
    EXPECT_EQ(v.disposition, spec.expected.value("disposition", "")) << v.reason;
    if (r.failure) {
      if (spec.expected.contains("phase")) {
        EXPECT_EQ(r.failure->phase, spec.expected["phase"].get<std::string>());
      }
      if (spec.expected.contains("layer")) {
        EXPECT_EQ(r.failure->layer, spec.expected["layer"].get<std::string>());
      }
      if (spec.expected.contains("error")) {
        EXPECT_EQ(r.failure->error, spec.expected["error"].get<std::string>());
      }
    }
    ++seen;
  }
  EXPECT_GE(seen, 12);
}

}  // namespace
}  // namespace recap::training
