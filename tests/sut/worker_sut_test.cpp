// WorkerSut's handling of a worker process (harness/sut/sut.h), with small shell scripts standing
// in for workers: its hello, its stderr tail in the reasons, the case timeout, its own environment.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "harness/sut/sut.h"
#include "harness/sut/worker.h"

namespace recap::sut {
namespace {

WorkerConfig shell(const std::string& script, double timeout_s = 0, std::vector<std::string> env = {}) {
  WorkerConfig c;
  c.name = "fake";
  c.argv = {"sh", "-c", script};
  c.env = environment_with(env);
  c.case_timeout_s = timeout_s;
  return c;
}

std::string hello_error(const WorkerConfig& c) {
  WorkerSut w(c);
  try {
    w.hello();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(WorkerSut, AWorkerThatExitsBeforeHelloSaysHowWithItsStderr) {
  EXPECT_EQ(hello_error(shell("echo 'fake: torch 2.12 is installed, 2.11 was asked' >&2; exit 2")),
            "the worker exited with status 2 before answering hello; stderr: fake: torch 2.12 is installed, 2.11 was asked");
}

TEST(WorkerSut, TheStderrTailIsTheLastFiveLinesOnOne) {
  std::string e = hello_error(shell("for i in 1 2 3 4 5 6 7 8; do echo line $i >&2; echo >&2; done; kill -ABRT $$"));
  EXPECT_EQ(e, "the worker died of signal 6 (SIGABRT) before answering hello; stderr: line 4 | line 5 | line 6 | line 7 | line 8");
}

TEST(WorkerSut, TheStderrTailIsAtMost600Bytes) {
  std::string e = hello_error(shell("head -c 5000 /dev/zero | tr '\\0' x >&2; exit 1"));
  const std::string tail = e.substr(e.find("stderr: ") + 8);
  EXPECT_EQ(tail.size(), 600u) << e;
  EXPECT_EQ(tail.substr(0, 4), "...x");
}

TEST(WorkerSut, AHelloNotAnsweredInTimeKillsTheWorker) {
  auto t0 = std::chrono::steady_clock::now();
  std::string e = hello_error(shell("echo waiting >&2; read line; sleep 30", 0.5));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e, "no reply within --case-timeout 0.5 s (killed) (it was ended by recap); stderr: waiting");
  EXPECT_LT(s, 10.0);
}

TEST(WorkerSut, AnErrorReplyToHelloIsItsMessage) {
  std::string e = hello_error(shell("read line; echo '{\"op\":\"error\",\"message\":\"sut megatron not built yet\"}'; exit 2"));
  EXPECT_EQ(e, "the worker refused hello: sut megatron not built yet (it exited with status 2)");
}

TEST(WorkerSut, TheEnvironmentIsTheWorkersAlone) {
  ASSERT_EQ(std::getenv("RECAP_TEST_WORKER_ENV"), nullptr);
  std::string e = hello_error(shell("echo \"x=$RECAP_TEST_WORKER_ENV\" >&2; exit 4", 0,
                                    {"RECAP_TEST_WORKER_ENV=first", "RECAP_TEST_WORKER_ENV=second"}));
  EXPECT_EQ(e, "the worker exited with status 4 before answering hello; stderr: x=second");  // the later setting wins
  EXPECT_EQ(std::getenv("RECAP_TEST_WORKER_ENV"), nullptr);  // recap's own environment is untouched
}

TEST(WorkerSut, AHelloIsKeptAndARunNotAnsweredInTimeIsACrashWithItsReason) {
  // Answers hello, then reads the run request and never answers it.
  WorkerSut w(shell("read line; echo '{\"op\":\"hello\",\"protocol\":\"recap.worker/1\",\"sut\":\"fake\",\"version\":\"9\","
                    "\"device\":\"none\",\"capabilities\":{\"executor\":[\"eager\"]}}'; read line; echo stuck >&2; sleep 30",
                    1.0));
  SutInfo info = w.hello();
  EXPECT_EQ(info.name, "fake");
  EXPECT_EQ(info.version, "9");
  EXPECT_EQ(info.capabilities, Json({{"executor", {"eager"}}}));
  training::CaseSpec spec;
  spec.model.layers.push_back({});
  spec.model.layers[0].kind = "linear";
  spec.layers.push_back({});
  std::string e;
  try {
    w.run(spec, {});
  } catch (const std::runtime_error& x) {
    e = x.what();
  }
  EXPECT_EQ(e, "fake worker: no reply within --case-timeout 1 s (killed); stderr: stuck");
}


// determinism_check is asked once per eager form of a case: a graphed case and its eager twin
// share one check; another case gets its own. The worker here logs each request and refuses it.
TEST(WorkerSut, DeterminismIsCheckedOncePerEagerForm) {
  const std::string log = ::testing::TempDir() + "recap_determinism_requests.txt";
  std::remove(log.c_str());
  WorkerConfig c = shell(
      "while read line; do case \"$line\" in *'\"hello\"'*) echo '{\"op\":\"hello\",\"protocol\":\"recap.worker/1\","
      "\"sut\":\"fake\",\"version\":\"1\",\"device\":\"none\",\"capabilities\":{}}';; *) echo \"$line\" >> " + log +
      "; echo '{\"op\":\"error\",\"message\":\"refused\"}';; esac; done");
  c.determinism_check = true;
  WorkerSut w(c);
  training::CaseSpec graphed;
  graphed.model.layers.push_back({});
  graphed.model.layers[0].kind = "linear";
  graphed.layers.push_back({});
  graphed.executor = training::ExecutorKind::PerLayer;
  training::CaseSpec eager = graphed;
  eager.executor = training::ExecutorKind::Eager;
  training::CaseSpec other = graphed;
  other.rng_seed = 77;
  for (const auto* spec : {&graphed, &graphed, &eager, &other}) {
    try {
      w.run(*spec, {});
    } catch (const std::runtime_error&) {
    }
  }
  std::ifstream in(log);
  std::vector<bool> asked;
  for (std::string line; std::getline(in, line);) {
    Json h = Json::parse(line);
    asked.push_back(h.value("determinism_check", false));
  }
  EXPECT_EQ(asked, (std::vector<bool>{true, false, false, true}));
}

}  // namespace
}  // namespace recap::sut

namespace recap::sut {
namespace {

// Another system's masks stand in for its draws: a mask seen again at a later step is a reused
// draw, but only when the mask holds enough entropy (>= 40 bits at the case's dropout) that two
// independent draws are not equal by chance; a 32-element mask at p = 0.1 (15 bits) is not judged.
TEST(WorkerSut, AMaskRepeatedAcrossStepsIsAReuseOnlyWhenItCannotBeChance) {
  training::CaseSpec spec;
  models::LayerSpec l;
  l.kind = "dropout";
  l.dropout = 0.1f;
  spec.model.layers.push_back(l);
  spec.layers.push_back({});
  auto obs = [](uint64_t numel) {
    Message m;
    Json steps = Json::array();
    for (int s = 0; s < 2; ++s)
      steps.push_back({{"step", s}, {"phase", "eager"}, {"losses", {0.5}}, {"ms", 1.0},
                       {"masks", {{{"layer", "dropout0"}, {"op", "dropout"}, {"microbatch", 0}, {"pass", "forward"},
                                   {"numel", numel}, {"digest", "e7c31c94284f1e0f"}, {"draws", 1}}}}});
    m.header = {{"op", "observation"}, {"id", 1}, {"status", "ok"}, {"reason", ""},
                {"param_names", Json::array()}, {"steps", steps}, {"memory", Json::object()}};
    return m;
  };
  training::RunResult big = run_result_of(obs(512), spec);  // 512 x 0.47 = 240 bits
  EXPECT_EQ(big.reused_masks, 1u) << big.ledger_summary;
  training::RunResult small = run_result_of(obs(32), spec);
  EXPECT_EQ(small.reused_masks, 0u) << small.ledger_summary;
  EXPECT_NE(small.ledger_summary.find("2 forward masks under 40 bits not judged for reuse"), std::string::npos)
      << small.ledger_summary;
}

}  // namespace
}  // namespace recap::sut
