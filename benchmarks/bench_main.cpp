// Benchmarks: what a reviewer of memory/speed trade-offs asks (step time and activation memory
// per checkpoint policy and executor), and what a CI owner asks (cases per second of the harness).
// Memory figures are reported as counters next to the times, so one JSON output holds both.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "harness/conformance/scenario.h"
#include "harness/device/device.h"
#include "harness/training/executor.h"
#include "harness/training/spec.h"
#include "properties/generators.h"
#include "properties/oracles.h"

namespace {

using namespace recap;

device::BackendChoice backend() {
  const char* b = std::getenv("RECAP_BENCH_BACKEND");
  device::BackendChoice c = device::BackendChoice::Sim;
  if (b && !device::parse_backend_choice(b, &c)) c = device::BackendChoice::Sim;
  return c;
}

training::CaseSpec load(const std::string& name) {
  training::CaseSpec s;
  std::string err = training::read_case_file(std::string(RECAP_CORPUS_DIR) + "/" + name + ".json", &s);
  if (!err.empty()) throw std::runtime_error(err);
  return s;
}

// One whole case (warmup, capture, replays) per iteration. Counters: the mean step time, the
// activations peak and the graph-pool bytes while the graphs were captured (what they hold at
// replay), so policies compare on both axes.
void BM_RunCase(benchmark::State& state, const std::string& name) {
  training::CaseSpec spec = load(name);
  std::string err;
  auto dev = device::make_device(backend(), {}, &err);
  if (!dev) {
    state.SkipWithError(err.c_str());
    return;
  }
  training::RunResult last;
  for (auto _ : state) {
    last = training::run_case(*dev, spec);
    if (!last.ok()) {
      state.SkipWithError(last.failure->line().c_str());
      return;
    }
  }
  double step_ms = 0;
  for (const auto& s : last.steps) step_ms += s.ms;
  state.counters["step_ms"] = last.steps.empty() ? 0 : step_ms / last.steps.size();
  // Inside graphs: the peaks over the capture; eagerly: the last step's.
  const training::MemorySnapshot& m = last.captured ? last.capture_memory : last.steps.back().memory;
  state.counters["activations_peak_B"] = static_cast<double>(m.activations_peak());
  state.counters["graph_pool_B"] = static_cast<double>(m.allocator.pool_peak_reserved_bytes);
  state.SetLabel(device::backend_name(dev->backend()));
}
BENCHMARK_CAPTURE(BM_RunCase, eager_graph_safe, std::string("graph-safe-eager"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RunCase, per_layer_no_checkpoint, std::string("no-checkpoint-per-layer"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RunCase, per_layer_skip, std::string("skip-per-layer"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RunCase, per_layer_graph_safe, std::string("graph-safe-per-layer"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RunCase, full_iteration_graph_safe, std::string("graph-safe-full-iteration"))->Unit(benchmark::kMillisecond);

// The harness's throughput: generated graph-safe cases judged by every oracle (items = cases).
void BM_EvaluateGeneratedCases(benchmark::State& state) {
  properties::GenConfig g;
  g.policy = training::CheckpointPolicy::GraphSafe;
  auto gen = properties::gen_case(g);
  properties::OracleOptions o;
  o.backend = backend();
  uint64_t i = 0;
  for (auto _ : state) {
    training::CaseSpec spec = gen(rc::Random(++i * 7919), rc::kNominalSize).value();
    auto rep = properties::evaluate(spec, o);
    benchmark::DoNotOptimize(rep.disposition);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_EvaluateGeneratedCases)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// The conformance suite, every scenario once per iteration (items = scenarios).
void BM_ConformanceSuite(benchmark::State& state) {
  const auto& all = conformance::all_scenarios();
  for (auto _ : state) {
    std::string err;
    auto dev = device::make_device(backend(), {}, &err);
    for (const auto& s : all) benchmark::DoNotOptimize(conformance::run_scenario(s, *dev).passed());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * all.size()));
}
BENCHMARK(BM_ConformanceSuite)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
