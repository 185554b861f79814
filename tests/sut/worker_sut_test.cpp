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


// A fake worker that answers hello, then answers every run with REPLY (its id put in) and does
// what AFTER says; each start appends a line to COUNT, so a test sees when a new worker started.
WorkerConfig fake_runs(const std::string& reply, const std::string& after, const std::string& count) {
  return shell("echo start >> " + count +
               "; while read line; do case \"$line\" in *'\"hello\"'*) echo '{\"op\":\"hello\",\"protocol\":"
               "\"recap.worker/1\",\"sut\":\"fake\",\"version\":\"1\",\"device\":\"none\",\"capabilities\":{}}';; *) "
               "id=$(echo \"$line\" | sed 's/.*\"id\":\\([0-9]*\\).*/\\1/'); echo '" + reply +
               "' | sed \"s/ID/$id/\"; " + after + ";; esac; done");
}

training::CaseSpec one_linear() {
  training::CaseSpec spec;
  spec.model.layers.push_back({});
  spec.model.layers[0].kind = "linear";
  spec.layers.push_back({});
  return spec;
}

size_t lines_of(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

const std::string kFailedObservation =
    "{\"op\":\"observation\",\"id\":ID,\"status\":\"failed\",\"reason\":\"r\",\"param_names\":[],\"steps\":[],"
    "\"memory\":{},\"failure\":{\"phase\":\"eager\",\"pass\":\"forward\",\"layer\":\"linear0\",\"microbatch\":0,"
    "\"step\":0,\"api\":\"\",\"error\":\"ERROR\",\"message\":\"MESSAGE\"},\"fatal\":true}";

std::string failed_fatal(const std::string& error, const std::string& message) {
  std::string r = kFailedObservation;
  r.replace(r.find("ERROR"), 5, error);
  r.replace(r.find("MESSAGE"), 7, message);
  return r;
}

// A fatal reply with a sticky CUDA error (the worker's CUDA context is lost; it exits with status
// 3): the case is a crash naming the error, the error its bucket's, and the next case gets a new
// worker (drivers/PROTOCOL.md 4d).
TEST(WorkerSut, AFatalReplyWithAStickyErrorIsACrashAndTheWorkerIsReplaced) {
  const std::string count = ::testing::TempDir() + "recap_fatal_sticky_starts.txt";
  std::remove(count.c_str());
  WorkerSut w(fake_runs(failed_fatal("cudaErrorAssert", "CUDA error: device-side assert triggered"),
                        "echo 'recap worker: exiting after a fatal device error' >&2; exit 3", count));
  for (int k = 0; k < 2; ++k) {
    std::string e, sig;
    try {
      w.run(one_linear(), {});
    } catch (const WorkerCrash& x) {
      e = x.what();
      sig = x.signal;
    }
    EXPECT_EQ(e, "fake worker: the CUDA context is lost: eager step failed in the forward of linear0, microbatch 0 (step 0): "
                 "CUDA error: device-side assert triggered [cudaErrorAssert] (the worker exited with status 3); "
                 "stderr: recap worker: exiting after a fatal device error");
    EXPECT_EQ(sig, "cudaErrorAssert");
    EXPECT_EQ(lines_of(count), static_cast<size_t>(k + 1));  // a new worker for each case
  }
}

// A fatal reply without a sticky error (megatron's generator left unusable by a failed capture):
// the run's own failure stands, and the worker is replaced before the next case, which would
// otherwise find it gone.
TEST(WorkerSut, AFatalReplyWithoutAStickyErrorKeepsTheFailureAndReplacesTheWorker) {
  const std::string count = ::testing::TempDir() + "recap_fatal_plain_starts.txt";
  std::remove(count.c_str());
  WorkerSut w(fake_runs(failed_fatal("RuntimeError", "Offset increment outside graph capture"), "exit 3", count));
  for (int k = 0; k < 2; ++k) {
    SutRun r = w.run(one_linear(), {});
    ASSERT_TRUE(r.result.failure.has_value());
    EXPECT_EQ(r.result.failure->error, "RuntimeError");
    EXPECT_EQ(lines_of(count), static_cast<size_t>(k + 1));
  }
}

// A worker killed by a SIGKILL recap did not send (the kernel's out-of-memory killer, or the
// planted kill-in-capture) is a crash that names it; recap's own SIGKILL (the case timeout) is
// "ended by recap" (AHelloNotAnsweredInTimeKillsTheWorker).
TEST(WorkerSut, ASigkillRecapDidNotSendIsNamed) {
  const std::string count = ::testing::TempDir() + "recap_sigkill_starts.txt";
  std::remove(count.c_str());
  WorkerSut w(shell("read line; echo '{\"op\":\"hello\",\"protocol\":\"recap.worker/1\",\"sut\":\"fake\",\"version\":\"1\","
                    "\"device\":\"none\",\"capabilities\":{}}'; read line; echo 'SIGKILL in the capture' >&2; kill -KILL $$"));
  std::string e, sig;
  try {
    w.run(one_linear(), {});
  } catch (const WorkerCrash& x) {
    e = x.what();
    sig = x.signal;
  }
  EXPECT_EQ(e, "fake worker: the worker closed its output (the worker died of signal 9 (SIGKILL)); stderr: SIGKILL in the capture");
  EXPECT_EQ(sig, "SIGKILL");
}

TEST(WorkerSut, StickyAndOutOfMemoryErrorNames) {
  for (const char* e : {"cudaErrorIllegalAddress", "cudaErrorAssert", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
                        "cudaErrorMisalignedAddress"})
    EXPECT_TRUE(sticky_cuda_error(e)) << e;
  for (const char* e : {"", "RuntimeError", "cudaErrorMemoryAllocation", "cudaErrorStreamCaptureInvalidated"})
    EXPECT_FALSE(sticky_cuda_error(e)) << e;
  EXPECT_TRUE(out_of_memory_error("cudaErrorMemoryAllocation"));
  EXPECT_TRUE(out_of_memory_error("OutOfMemoryError"));
  EXPECT_FALSE(out_of_memory_error("RuntimeError"));
}

// determinism_check is asked once per case family: a graphed case, its eager twin and its
// no-checkpoint twin share one check; another case gets its own. The worker here logs each request and refuses it.
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
  graphed.layers[0].checkpoint = training::CheckpointGranularity::Full;
  graphed.executor = training::ExecutorKind::PerLayer;
  training::CaseSpec eager = graphed;
  eager.executor = training::ExecutorKind::Eager;
  training::CaseSpec plain = graphed;
  plain.layers[0].checkpoint = training::CheckpointGranularity::None;
  training::CaseSpec other = graphed;
  other.rng_seed = 77;
  for (const auto* spec : {&graphed, &graphed, &eager, &plain, &other}) {
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
  EXPECT_EQ(asked, (std::vector<bool>{true, false, false, false, true}));
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
