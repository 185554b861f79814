// recap tradeoff's measurements (harness/sut/sut.h, Measurement): recap's runtime in process on sim
// (exact bytes from the device ledger and the allocator, the same on every run; step times by the
// host clock), the training run they come from (Trainer::record_tensors, StepRecord::work_ms), the
// reply's JSON, and WorkerSut's `measure` request against fake workers.
#include <gtest/gtest.h>

#include <string>

#include "harness/sut/in_process.h"
#include "harness/sut/sut.h"

namespace recap::sut {
namespace {

training::CaseSpec stack(training::ExecutorKind executor, training::CheckpointGranularity ck) {
  training::CaseSpec s;
  s.model.hidden = 16;
  s.model.tokens = 8;
  for (int i = 0; i < 2; ++i) {
    models::LayerSpec l;
    l.kind = "block";
    l.heads = 2;
    l.dropout = 0.1f;
    s.model.layers.push_back(l);
    training::LayerFlags f;
    f.checkpoint = ck;
    s.layers.push_back(f);
  }
  s.executor = executor;
  s.warmup = 2;
  s.replays = 6;
  s.microbatches = 2;
  return s;
}

TEST(Measure, RecapTimesTheReplaysAndGivesTheLedgersBytesExactly) {
  InProcessSut recap(device::BackendChoice::Sim);
  const auto full = stack(training::ExecutorKind::PerLayer, training::CheckpointGranularity::Full);
  Measurement a = recap.measure(full), b = recap.measure(full);
  EXPECT_EQ(a.clock, "host-clock");
  ASSERT_EQ(a.step_ms.size(), 6u);  // the replays; the warmup steps are not timed
  for (double ms : a.step_ms) EXPECT_GT(ms, 0.0);
  EXPECT_TRUE(a.failure.empty()) << a.failure;
  ASSERT_TRUE(a.activations_in_graphs && a.graph_pool && a.capture_peak && a.capture_ms);
  EXPECT_FALSE(a.activations_eager);  // a graphed configuration: its figure is inside the graphs
  // the same program, the same bytes: the device ledger and the allocator count exactly
  EXPECT_EQ(a.peak_allocated, b.peak_allocated);
  EXPECT_EQ(a.peak_reserved, b.peak_reserved);
  EXPECT_EQ(a.device_used, b.device_used);
  EXPECT_EQ(a.graph_pool, b.graph_pool);
  EXPECT_EQ(a.activations_in_graphs, b.activations_in_graphs);
  EXPECT_GE(*a.peak_reserved, *a.peak_allocated);
  // graph-safe recompute keeps fewer activations inside the graphs than no checkpoint, layer by layer
  Measurement none = recap.measure(stack(training::ExecutorKind::PerLayer, training::CheckpointGranularity::None));
  EXPECT_LT(*a.activations_in_graphs, *none.activations_in_graphs);
  ASSERT_EQ(a.per_layer.size(), 2u);
  ASSERT_EQ(none.per_layer.size(), 2u);
  for (size_t l = 0; l < 2; ++l) EXPECT_LT(*a.per_layer[l].activations_in_graphs, *none.per_layer[l].activations_in_graphs);
  // eager: the activations live between forward and backward, none inside graphs
  Measurement eager = recap.measure(stack(training::ExecutorKind::Eager, training::CheckpointGranularity::Full));
  EXPECT_EQ(eager.step_ms.size(), 6u);
  EXPECT_TRUE(eager.activations_eager && *eager.activations_eager > 0);
  EXPECT_FALSE(eager.activations_in_graphs || eager.graph_pool || eager.capture_ms);
  EXPECT_TRUE(eager.per_layer.empty());
}

TEST(Measure, AMeasuredRunDownloadsNothingButTrainsTheSame) {
  const auto spec = stack(training::ExecutorKind::FullIteration, training::CheckpointGranularity::Full);
  std::string err;
  auto d1 = device::make_device(device::BackendChoice::Sim, {}, &err);
  auto d2 = device::make_device(device::BackendChoice::Sim, {}, &err);
  training::Session plain(*d1, spec), timed(*d2, spec);
  timed.trainer().record_tensors = false;
  training::RunResult a = plain.run(), b = timed.run();
  ASSERT_EQ(a.steps.size(), b.steps.size());
  EXPECT_EQ(b.step_clock, "host-clock");
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_FALSE(a.steps[s].grads.empty());
    EXPECT_TRUE(b.steps[s].grads.empty() && b.steps[s].params.empty());
    EXPECT_TRUE(b.steps[s].microbatches[0].grads.empty());
    for (size_t m = 0; m < a.steps[s].microbatches.size(); ++m)
      EXPECT_EQ(a.steps[s].microbatches[m].loss, b.steps[s].microbatches[m].loss) << "step " << s;
    // the step's work is a part of the step
    EXPECT_GT(a.steps[s].work_ms, 0.0);
    EXPECT_LE(a.steps[s].work_ms, a.steps[s].ms);
  }
}

TEST(Measure, ACaseRecapDoesNotModelIsSkipped) {
  InProcessSut recap(device::BackendChoice::Sim);
  auto spec = stack(training::ExecutorKind::Eager, training::CheckpointGranularity::Full);
  spec.style = training::CheckpointStyle::NonReentrant;
  EXPECT_THROW(recap.measure(spec), SkippedBySut);
  std::string why;
  EXPECT_FALSE(recap.matmul_bf16_tflops(&why));
  EXPECT_EQ(why, "no GPU: the sim backend has no matmul rate");
}

TEST(Measure, TheReplysJsonRoundTripsAndNullIsNotZero) {
  Measurement m;
  m.clock = "cuda-events";
  m.step_ms = {1.5, 1.25};
  m.capture_ms = 3.0;
  m.peak_allocated = 100;
  m.activations_in_graphs = 0;  // zero is a figure, null is none
  m.per_layer.push_back({0, std::nullopt, std::nullopt, 64, std::nullopt});
  m.note = "n";
  Json j = measurement_to_json(m);
  EXPECT_TRUE(j["memory"]["peak_reserved"].is_null());
  EXPECT_EQ(j["memory"]["activations_in_graphs"], 0);
  Measurement r = measurement_from_json(j);
  EXPECT_EQ(r.clock, m.clock);
  EXPECT_EQ(r.step_ms, m.step_ms);
  EXPECT_EQ(r.capture_ms, m.capture_ms);
  EXPECT_EQ(r.peak_allocated, m.peak_allocated);
  EXPECT_FALSE(r.peak_reserved);
  EXPECT_EQ(r.activations_in_graphs, 0);
  ASSERT_EQ(r.per_layer.size(), 1u);
  EXPECT_EQ(r.per_layer[0].activations_in_graphs, 64);
  EXPECT_EQ(r.note, "n");
  j["memory"]["graph_pool"] = -1;
  EXPECT_THROW(measurement_from_json(j), ProtocolError);
  j["memory"]["graph_pool"] = nullptr;
  j["step_ms"] = "fast";
  EXPECT_THROW(measurement_from_json(j), ProtocolError);
}

TEST(Measure, TheWorkersOwnTimingsAndItsRetirementAreRead) {
  Json j = measurement_to_json(Measurement{});
  Measurement plain = measurement_from_json(j);
  EXPECT_FALSE(plain.request_ms);
  EXPECT_TRUE(plain.request_phases_ms.empty());
  EXPECT_EQ(plain.worker_replaced, "");
  j["timings"] = {{"run_ms", 12.5}, {"profile", {{"data_ms", 2.0}, {"run_ms", 9.5}, {"odd", "x"}}}};
  j["retire"] = true;
  Measurement r = measurement_from_json(j);
  EXPECT_EQ(r.request_ms, 12.5);
  EXPECT_EQ(r.request_phases_ms, (std::map<std::string, double>{{"data_ms", 2.0}, {"run_ms", 9.5}}));  // not a number: left out
  EXPECT_EQ(r.worker_replaced, "retire");
  j["held_after"] = int64_t{1536} << 20;
  EXPECT_EQ(measurement_from_json(j).worker_replaced, "retire (1536 MiB still held)");
  j.erase("held_after");
  j["retire"] = false;
  j["timings"] = "soon";  // informative only: never a reason to refuse a measurement
  Measurement q = measurement_from_json(j);
  EXPECT_EQ(q.worker_replaced, "");
  EXPECT_FALSE(q.request_ms);
}

WorkerConfig fake(const std::string& hello_extra, const std::string& reply) {
  WorkerConfig c;
  c.name = "fake";
  c.argv = {"sh", "-c",
            "while read line; do case \"$line\" in *'\"hello\"'*) echo '{\"op\":\"hello\",\"protocol\":\"recap.worker/1\","
            "\"sut\":\"fake\",\"version\":\"1\",\"device\":\"none\",\"capabilities\":{}" +
                hello_extra + "}';; *) echo '" + reply + "';; esac; done"};
  c.env = environment_with({});
  return c;
}

TEST(Measure, AWorkerWithoutTheOpIsNotAskedAndOneWithItIsRead) {
  const auto spec = stack(training::ExecutorKind::Eager, training::CheckpointGranularity::None);
  {
    WorkerSut old(fake("", "{\"op\":\"error\",\"message\":\"unknown op\"}"));
    try {
      old.measure(spec);
      ADD_FAILURE() << "measured by a worker whose hello lists no ops";
    } catch (const SkippedBySut& e) {
      EXPECT_EQ(std::string(e.what()), "fake worker: its hello lists no 'measure' op (a driver older than recap tradeoff)");
    }
  }
  WorkerSut w(fake(",\"ops\":[\"measure\"]",
                   "{\"op\":\"measurement\",\"id\":1,\"status\":\"ok\",\"reason\":\"\",\"clock\":\"host-clock\","
                   "\"step_ms\":[2.5,3],\"capture_ms\":null,\"memory\":{\"peak_allocated\":null,\"device_used\":7},"
                   "\"per_layer\":[],\"note\":\"cpu\"}"));
  Measurement m = w.measure(spec);
  EXPECT_EQ(m.step_ms, (std::vector<double>{2.5, 3.0}));
  EXPECT_FALSE(m.peak_allocated);
  EXPECT_EQ(m.device_used, 7);
  EXPECT_EQ(m.note, "cpu");
  WorkerSut skip(fake(",\"ops\":[\"measure\"]",
                      "{\"op\":\"measurement\",\"id\":1,\"status\":\"skipped\",\"reason\":\"executor x: no\"}"));
  EXPECT_THROW(skip.measure(spec), SkippedBySut);
}

}  // namespace
}  // namespace recap::sut
