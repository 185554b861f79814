// Runs: the case's own run and its twins, and the bitwise comparison of two runs (oracle.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "properties/oracles/oracle.h"

#include "harness/base/profile.h"

#include "harness/sut/in_process.h"

namespace recap::properties {

using training::CaseSpec;
using training::RunResult;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

uint64_t ordered(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  // Map to a monotonic unsigned scale (negative floats reversed).
  return (u & 0x80000000u) ? static_cast<uint64_t>(0x80000000u - (u & 0x7fffffffu))
                           : static_cast<uint64_t>(u) + 0x80000000u;
}

uint64_t ulps(float a, float b) {
  uint64_t x = ordered(a), y = ordered(b);
  return x > y ? x - y : y - x;
}

// Compares a tensor; fills `d` and returns false on the first bitwise difference.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b, Divergence* d) {
  if (a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0)) return true;
  d->max_abs_error = 0;
  d->max_ulps = 0;
  if (a.size() != b.size()) {
    d->tensor += " (size " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + ")";
    d->max_abs_error = INFINITY;
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (x == y) continue;
    double e = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(e)) e = INFINITY;
    d->max_abs_error = std::max(d->max_abs_error, e);
    d->max_ulps = std::max(d->max_ulps, ulps(a[i], b[i]));
  }
  return false;
}

}  // namespace

std::optional<Divergence> first_divergence(const RunResult& a, const RunResult& b, size_t* equal) {
  size_t unused = 0;
  size_t& n_equal = equal ? *equal : unused;
  n_equal = 0;
  // Counts each tensor found equal: same() returns true for it.
  auto same = [&n_equal](const std::vector<float>& x, const std::vector<float>& y, Divergence* d) {
    if (!same_bits(x, y, d)) return false;
    ++n_equal;
    return true;
  };
  Divergence d;
  size_t n = std::min(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < n; ++s) {
    const auto& x = a.steps[s];
    const auto& y = b.steps[s];
    d.step = x.step;
    for (size_t m = 0; m < std::min(x.microbatches.size(), y.microbatches.size()); ++m) {
      d.microbatch = static_cast<int>(m);
      d.tensor = "loss";
      if (!same({x.microbatches[m].loss}, {y.microbatches[m].loss}, &d)) return d;
      for (size_t i = 0; i < std::min(x.microbatches[m].grads.size(), y.microbatches[m].grads.size()); ++i) {
        d.tensor = "grad " + (i < a.param_names.size() ? a.param_names[i] : std::to_string(i));
        if (!same(x.microbatches[m].grads[i], y.microbatches[m].grads[i], &d)) return d;
      }
    }
    d.microbatch = -1;
    for (size_t i = 0; i < std::min(x.grads.size(), y.grads.size()); ++i) {
      d.tensor = "grad " + (i < a.param_names.size() ? a.param_names[i] : std::to_string(i));
      if (!same(x.grads[i], y.grads[i], &d)) return d;
    }
    for (size_t i = 0; i < std::min(x.params.size(), y.params.size()); ++i) {
      d.tensor = "param " + (i < a.param_names.size() ? a.param_names[i] : std::to_string(i));
      if (!same(x.params[i], y.params[i], &d)) return d;
    }
    if (x.microbatches.size() != y.microbatches.size() || x.grads.size() != y.grads.size() ||
        x.params.size() != y.params.size()) {
      d.tensor = "record shape";
      d.max_abs_error = INFINITY;
      return d;
    }
  }
  if (a.steps.size() != b.steps.size()) {
    d.step = static_cast<int>(n);
    d.microbatch = -1;
    d.tensor = "steps (" + std::to_string(a.steps.size()) + " vs " + std::to_string(b.steps.size()) + ")";
    d.max_abs_error = INFINITY;
    return d;
  }
  return std::nullopt;
}

namespace {
// A run's phases as its profile: every phase it recorded, "total_ms", "other_ms" (the total less
// the disjoint phases), "worker" (a worker's own phases).
Json run_profile_json(const profile::Phases& phases, double total_ms, const Json& worker) {
  Json j = Json::object();
  double disjoint = 0;
  for (const char* k : profile::kDisjoint)
    if (auto it = phases.find(k); it != phases.end()) {
      j[k] = it->second;
      disjoint += it->second;
    }
  for (const char* k : profile::kWithin)
    if (auto it = phases.find(k); it != phases.end()) j[k] = it->second;
  j["total_ms"] = total_ms;
  j[profile::kOther] = std::max(0.0, total_ms - disjoint);
  if (worker.is_object()) j["worker"] = worker;
  return j;
}
}  // namespace

void record_run_profile(CaseReport& report, const std::string& name, const Run& r) {
  if (r.profile) report.timings["profile"]["runs"][name] = *r.profile;
}

Run run_on_fresh_device(const CaseSpec& spec, const OracleOptions& opts) {
  Run r;
  auto t0 = std::chrono::steady_clock::now();
  profile::Phases phases;  // with opts.profile, what this run's phases took
  profile::Sink sink(opts.profile ? &phases : nullptr);
  Json worker_profile;
  sut::InProcessSut in_process(opts.backend);
  sut::Sut& system = opts.sut ? *opts.sut : in_process;
  try {
    sut::SutRun s = system.run(spec, run_request(spec, opts));
    r.result = std::move(s.result);
    r.live_after = s.live_after;
    r.hygiene = s.hygiene;
    r.init = std::move(s.init);
    r.device_name = s.device_name;
    r.backend = s.backend;
    worker_profile = std::move(s.worker_profile);
  } catch (const sut::SkippedBySut& e) {
    r.skipped = e.what();  // never empty (SkippedBySut)
  } catch (const runtime::DeviceError& e) {
    if (e.status == device::Status::MemoryAllocation) r.out_of_memory = e.what();  // setting up the case
    else r.crash = e.what();
  } catch (const sut::WorkerCrash& e) {
    r.crash = e.what();
    r.crash_signal = e.signal;
  } catch (const std::exception& e) {
    r.crash = e.what();
  } catch (...) {
    r.crash = "unknown exception";
  }
  if (!r.result) {  // it threw: the device it had made, if any
    r.device_name = system.last_device().device_name;
    r.backend = system.last_device().backend;
  }
  r.ms = ms_since(t0);
  if (opts.profile) r.profile = run_profile_json(phases, r.ms, worker_profile);
  return r;
}

std::string twin_trouble(const char* what, const Run& r) {
  if (!r.skipped.empty()) return std::string(what) + " was skipped by the system under test: " + r.skipped;
  if (!r.crash.empty()) return std::string(what) + " crashed: " + r.crash;
  if (!r.out_of_memory.empty()) return std::string(what) + " ran out of device memory: " + r.out_of_memory;
  if (!r.result) return std::string(what) + " gave no result";
  if (!r.result->driver_error.empty()) return std::string(what) + " crashed: " + r.result->driver_error;
  if (r.result->failure) return std::string(what) + " failed: " + r.result->failure->line();
  return "";
}

CheckResult compare_with_twin(const char* property, const Runs& runs, const Run& twin, const char* twin_name,
                              const char* versus) {
  std::string trouble = twin_trouble(twin_name, twin);
  if (!trouble.empty()) return skipped(property, trouble);
  size_t equal = 0;
  if (auto d = first_divergence(runs.main(), *twin.result, &equal)) {
    CheckResult c = bad(property, Disposition::Incorrect, std::string(versus) + ": " + d->describe());
    c.divergence = d;
    return c;
  }
  if (equal == 0) return skipped(property, std::string("nothing compared with ") + twin_name + ": the runs recorded no tensor");
  const auto& steps = runs.main().steps;
  return passed(property, std::to_string(steps.size()) + " steps x " + std::to_string(runs.spec().microbatches) +
                              " microbatches, " + std::to_string(equal) + " tensors bitwise equal to " + twin_name);
}

const Run& Runs::twin(std::optional<Run>& slot, const CaseSpec& spec, const std::string& name) {
  if (!slot) {
    slot = run_on_fresh_device(spec, opts_);
    report_.timings[name + "_ms"] = slot->ms;
    record_run_profile(report_, name, *slot);
  }
  return *slot;
}

const Run& Runs::eager_twin() {
  CaseSpec e = spec_;
  e.executor = training::ExecutorKind::Eager;
  return twin(eager_, e, "eager_twin");
}

const Run& Runs::no_checkpoint_twin() { return twin(plain_, training::without_checkpoints(spec_), "no_checkpoint_twin"); }

const Run& Runs::one_rank_twin() {
  CaseSpec one = spec_;
  one.tp = 1;
  one.pp = 1;
  one.vp = 1;
  one.dp = 1;
  one.sp = false;
  return twin(one_rank_, one, "one_rank_twin");
}

const Run& Runs::graph_safe_twin() {
  CaseSpec g = spec_;
  g.policy = training::CheckpointPolicy::GraphSafe;
  return twin(graph_safe_, g, "graph_safe_twin");
}

}  // namespace recap::properties
