// recap run SPEC.json: runs one case (harness/training/spec.h) and prints, per step, the losses,
// gradient norms (total and per layer), the RNG ledger's counts and memory by category; a failure
// (capture error, checkpoint refusal...) as one line naming the checkpoint, the phase and the CUDA
// error. Exit 0 passed, 1 failed or incorrect, 2 bad input (the spec's one-line error).
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/cli/cli.h"
#include "reports/reporter.h"
#include "harness/training/executor.h"
#include "harness/training/spec.h"

namespace recap::cli {
namespace {

using namespace recap::training;

struct RunArgs {
  std::string spec_path;
  std::string backend = "auto";
  std::string json_path;
  double case_timeout = -1;  // -1 / 0: no limit
};

// --case-timeout for the one case this process runs: the run cannot be interrupted inside the
// runtime, so a thread ends the whole process (exit 1, as a crashed case) when it takes too long.
class RunTimeout {
 public:
  RunTimeout(double seconds, std::string path) {
    if (seconds <= 0) return;
    thread_ = std::thread([this, seconds, path] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
      std::fprintf(stderr, "recap run: %s: no result within --case-timeout %g s (stopped)\n", path.c_str(), seconds);
      std::fflush(stdout);
      std::_Exit(kExitFailed);
    });
  }
  ~RunTimeout() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

std::string bytes_text(int64_t b) {
  char buf[32];
  double v = static_cast<double>(b);
  if (b < 0) return "-" + bytes_text(-b);
  if (b < 1024) std::snprintf(buf, sizeof buf, "%" PRId64 " B", b);
  else if (v < 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024);
  else if (v < 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", v / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1024.0 * 1024 * 1024));
  return buf;
}

std::string memory_line(const MemorySnapshot& m) {
  using device::MemCategory;
  std::string s;
  for (MemCategory c : {MemCategory::Parameters, MemCategory::Gradients, MemCategory::Activations, MemCategory::Workspace,
                        MemCategory::Other}) {
    const auto& t = m.allocator.tensors[static_cast<int>(c)];
    if (!s.empty()) s += ", ";
    s += device::category_name(c) + " " + bytes_text(t.live_bytes) + "/" + bytes_text(t.peak_bytes);
  }
  s += ", graph pool " + bytes_text(m.allocator.pool_reserved_bytes) + "/" + bytes_text(m.allocator.pool_peak_reserved_bytes);
  return s + " (live/peak)";
}

std::string layer_flags(const CaseSpec& spec, size_t l) {
  const LayerFlags& f = spec.layers[l];
  std::string s = "checkpoint " + granularity_name(f.checkpoint);
  if (f.checkpoint == CheckpointGranularity::Selective) {
    s += " (";
    for (size_t i = 0; i < f.modules.size(); ++i) s += (i ? ", " : "") + f.modules[i];
    s += ")";
  }
  if (spec.executor == ExecutorKind::PerLayer) s += f.graphed ? ", graphed" : ", eager";
  if (spec.model.layers[l].dropout > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, ", dropout %g", spec.model.layers[l].dropout);
    s += buf;
  }
  return s;
}

void print_header(const RunResult& r, const std::string& path) {
  const CaseSpec& s = r.spec;
  std::printf("recap run: %s on %s (%s)\n", s.name.empty() ? path.c_str() : (s.name + " (" + path + ")").c_str(),
              r.backend.c_str(), r.device_name.c_str());
  std::printf("  %zu layers, hidden %d, tokens %d, %s:", s.model.layers.size(), s.model.hidden, s.model.tokens,
              dtype_name(s.model.dtype).c_str());
  for (size_t l = 0; l < r.layer_names.size(); ++l)
    std::printf("%s %s [%s]", l ? "," : "", r.layer_names[l].c_str(), layer_flags(s, l).c_str());
  std::printf("\n");
  std::string order;
  for (int e : s.effective_order()) order += (order.empty() ? "" : ",") + std::to_string(e);
  std::printf("  executor %s, policy %s, style %s, generator %s (%s), %d microbatch%s [%s], warmup %d, replays %d",
              executor_name(s.executor).c_str(), policy_name(s.policy).c_str(), style_name(s.style).c_str(),
              generator_mode_name(s.generator).c_str(), device_state_model_name(s.device_state).c_str(), s.microbatches,
              s.microbatches == 1 ? "" : "es", order.c_str(), s.warmup, s.replays);
  if (s.executor == ExecutorKind::PerLayer)
    std::printf(", %s pool%s, warmup backward %s", s.shared_pool ? "one shared" : "a", s.shared_pool ? "" : " per graph",
                warmup_backward_name(s.warmup_backward).c_str());
  std::printf(", lr %g\n", s.lr);
}

void print_step(const RunResult& r, const StepRecord& st) {
  std::printf("step %d %-7s loss", st.step, st.phase.c_str());
  for (const auto& m : st.microbatches) std::printf(" %.9g", m.loss);
  GradNorms n = grad_norms(r, st);
  std::printf("  grad norm %.6e (", n.total);
  for (size_t l = 0; l < n.per_layer.size(); ++l)
    std::printf("%s%s %.3e", l ? ", " : "", r.layer_names[l].c_str(), n.per_layer[l]);
  std::printf(")  %.1f ms\n", st.ms);
  std::printf("    ledger: %s\n", count_ledger(st.ledger).line().c_str());
  std::printf("    memory: %s\n", memory_line(st.memory).c_str());
}

int run(const RunArgs& args) {
  CaseSpec spec;
  std::string err = read_case_file(args.spec_path, &spec);
  if (!err.empty()) throw UsageError(err);
  if (std::string why = unmodelled(spec); !why.empty())
    throw UsageError(args.spec_path + ": recap's runtime cannot run this case: " + why);
  auto dev = open_device(args.backend);

  RunResult r;
  try {
    RunTimeout timeout(args.case_timeout, args.spec_path);
    r = run_case(*dev, spec);
  } catch (const std::exception& e) {
    // Setup itself failed (the device refused an allocation, ...): no step ran.
    std::printf("recap run: %s: setup failed: %s\n", args.spec_path.c_str(), e.what());
    std::printf("result: failed\n");
    return kExitFailed;
  }
  print_header(r, args.spec_path);
  bool capture_printed = false;
  for (const StepRecord& st : r.steps) {
    if (st.phase == "replay" && !capture_printed && r.captured) {
      std::printf("capture: %d graph%s in %.1f ms; during capture: %s\n", r.graphs, r.graphs == 1 ? "" : "s",
                  r.capture_ms, memory_line(r.capture_memory).c_str());
      capture_printed = true;
    }
    print_step(r, st);
  }
  if (r.captured && !capture_printed)
    std::printf("capture: %d graph%s in %.1f ms; during capture: %s\n", r.graphs, r.graphs == 1 ? "" : "s",
                r.capture_ms, memory_line(r.capture_memory).c_str());
  if (r.failure) {
    std::printf("%s\n", r.failure->line().c_str());
    if (r.failure->phase == "capture") std::printf("    during capture: %s\n", memory_line(r.capture_memory).c_str());
  }
  std::printf("ledger: %s\n", r.ledger_summary.c_str());
  Verdict v = verdict(r);
  std::printf("result: %s%s%s\n", v.disposition.c_str(), v.reason.empty() ? "" : ": ", v.reason.c_str());
  if (spec.expected.is_object() && spec.expected.contains("disposition") && spec.expected["disposition"].is_string()) {
    std::string want = spec.expected["disposition"].get<std::string>();
    std::printf("expected: %s (%s)\n", want.c_str(), want == v.disposition ? "as expected" : "DIFFERS");
  }

  if (!args.json_path.empty()) {
    reports::write_or_throw(args.json_path, run_result_to_json(r).dump(2) + "\n", "--json");
  }
  return v.disposition == "passed" ? kExitOk : kExitFailed;
}

}  // namespace

void add_run_command(CLI::App& app, Runner* runner) {
  auto [cmd, args] = add_command<RunArgs>(app, runner, run,
      "run",
      "Run one case (a JSON spec: model, checkpoint flags and policy, executor, phases, microbatch order, seeds) and "
      "print per step the loss, gradient norms, RNG ledger counts and memory by category. Exit 0 passed, 1 failed or "
      "incorrect, 2 bad input.");
  cmd->add_option("spec", args->spec_path, "The case file (JSON, schema recap.case/1)")->required();
  add_backend_option(*cmd, &args->backend);
  cmd->add_option("--json", args->json_path, "Also write the result to this JSON file (schema recap.run/1)");
  add_case_timeout_option(*cmd, &args->case_timeout);
  cmd->get_option("--case-timeout")
      ->description("Seconds the run may take; past them recap stops with exit 1 and one line (0 or absent: no limit)");
}

}  // namespace recap::cli
