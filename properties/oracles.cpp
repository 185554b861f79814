// The oracles: evaluate() runs a case and the twins its properties need, then judges it.
//
// Twins (each on a fresh device, nothing cached across cases):
//   eager twin      the same case, executor eager (eager_vs_graphed; not for an eager case)
//   no-ckpt twin    the same case with every checkpoint flag off (recompute_on_off and memory's
//                   baseline; not for a case without checkpoints)
//   graph-safe twin skip policy with checkpoints inside graphs only: what recompute would have
//                   saved (memory's finding)
//   injected case   hygiene: the case turned into one whose capture fails (naive policy, host
//                   generator, first layer checkpointed and graphed, no warmup); not needed when
//                   the case's own capture failed
#include "properties/oracles.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "harness/training/executor.h"
#include "harness/runtime/phase.h"
#include "models/check.h"

namespace recap::properties {

using training::CaseSpec;
using training::CheckpointGranularity;
using training::CheckpointPolicy;
using training::ExecutorKind;
using training::RunResult;

std::string disposition_name(Disposition d) {
  switch (d) {
    case Disposition::Passed: return "passed";
    case Disposition::Failed: return "failed";
    case Disposition::Incorrect: return "incorrect";
    case Disposition::Crashed: return "crashed";
    case Disposition::Skipped: return "skipped";
  }
  return "?";
}

bool disposition_from_name(const std::string& s, Disposition* out) {
  for (Disposition d : {Disposition::Passed, Disposition::Failed, Disposition::Incorrect, Disposition::Crashed,
                        Disposition::Skipped})
    if (disposition_name(d) == s) {
      *out = d;
      return true;
    }
  return false;
}

namespace {
int rank(Disposition d) {
  switch (d) {
    case Disposition::Skipped: return 0;
    case Disposition::Passed: return 1;
    case Disposition::Incorrect: return 2;
    case Disposition::Failed: return 3;
    case Disposition::Crashed: return 4;
  }
  return 0;
}
}  // namespace

Disposition worse(Disposition a, Disposition b) { return rank(a) >= rank(b) ? a : b; }

const std::vector<std::string>& property_names() {
  static const std::vector<std::string> names = {"capture_clean", "eager_vs_graphed", "recompute_on_off", "rng_ledger",
                                                 "memory",        "reference",        "hygiene"};
  return names;
}

std::string Divergence::describe() const {
  std::ostringstream o;
  o << "step " << step;
  if (microbatch >= 0) o << ", microbatch " << microbatch;
  o << ", " << tensor << ": ";
  if (rel_l2_error) {
    o << std::setprecision(2) << std::scientific << "rel L2 " << *rel_l2_error << " (tolerance " << tolerance
      << "), max abs " << max_abs_error;
  } else {
    o << "max abs " << max_abs_error << ", " << max_ulps << " ulps";
  }
  return o.str();
}

std::string CaseReport::first_failure() const {
  for (const auto& c : checks)
    if (c.disposition != Disposition::Passed && c.disposition != Disposition::Skipped)
      return c.property + ": " + c.reason;
  return "";
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

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
bool same(const std::vector<float>& a, const std::vector<float>& b, Divergence* d) {
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

// The first place where two runs of the same case differ (steps in order; per microbatch the
// loss then every gradient; then the step's gradients and the parameters after the update).
std::optional<Divergence> first_divergence(const RunResult& a, const RunResult& b) {
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

struct Run {
  std::optional<RunResult> result;
  std::string crash;  // an exception escaped the run
  double ms = 0;
  int64_t live_after = 0;  // device bytes live after teardown
};

std::unique_ptr<device::Device> new_device(device::BackendChoice b) {
  std::string err;
  auto dev = device::make_device(b, {}, &err);
  if (!dev) throw std::runtime_error("cannot create the device: " + err);
  return dev;
}

Run run_on_fresh_device(const CaseSpec& spec, device::BackendChoice backend) {
  Run r;
  auto t0 = std::chrono::steady_clock::now();
  try {
    auto dev = new_device(backend);
    r.result = training::run_case(*dev, spec);
    r.live_after = dev->memory_stats().live_bytes;
  } catch (const std::exception& e) {
    r.crash = e.what();
  } catch (...) {
    r.crash = "unknown exception";
  }
  r.ms = ms_since(t0);
  return r;
}

bool wanted(const OracleOptions& o, const std::string& p) {
  if (o.properties.empty()) return true;
  for (const auto& q : o.properties)
    if (q == p) return true;
  return false;
}

CheckResult skipped(const std::string& p, const std::string& why) {
  CheckResult c;
  c.property = p;
  c.disposition = Disposition::Skipped;
  c.reason = why;
  return c;
}
CheckResult passed(const std::string& p) {
  CheckResult c;
  c.property = p;
  c.disposition = Disposition::Passed;
  return c;
}
CheckResult bad(const std::string& p, Disposition d, const std::string& why) {
  CheckResult c;
  c.property = p;
  c.disposition = d;
  c.reason = why;
  return c;
}

CaseSpec without_checkpoints(CaseSpec s) {
  for (auto& f : s.layers) {
    f.checkpoint = CheckpointGranularity::None;
    f.modules.clear();
  }
  return s;
}

// Whether some checkpoint runs inside a captured graph (and so is judged by the memory oracle).
bool checkpoint_in_graph(const CaseSpec& s) {
  if (s.executor == ExecutorKind::Eager) return false;
  for (const auto& f : s.layers)
    if (f.checkpoint != CheckpointGranularity::None && (s.executor == ExecutorKind::FullIteration || f.graphed))
      return true;
  return false;
}

int checkpoint_count(const CaseSpec& s) {
  int n = 0;
  for (const auto& f : s.layers)
    n += f.checkpoint == CheckpointGranularity::Full ? 1 : static_cast<int>(f.modules.size());
  return n;
}

std::string twin_trouble(const char* what, const Run& r) {
  if (!r.crash.empty()) return std::string(what) + " crashed: " + r.crash;
  if (r.result->failure) return std::string(what) + " failed: " + r.result->failure->line();
  return "";
}

int64_t activations_peak_in_graphs(const RunResult& r) { return r.capture_memory.activations_peak(); }

Json memory_json(const RunResult& r) {
  Json j;
  Json cap;
  for (int c = 0; c < device::kNumCategories; ++c) {
    auto cat = static_cast<device::MemCategory>(c);
    cap[device::category_name(cat)] = {{"live", r.capture_memory.allocator.tensors[c].live_bytes},
                                       {"peak", r.capture_memory.allocator.tensors[c].peak_bytes}};
  }
  j["capture"] = cap;
  j["graph_pool_reserved_peak"] = r.capture_memory.allocator.pool_peak_reserved_bytes;
  j["device_peak"] = r.capture_memory.device.peak_bytes;
  int64_t step_peak = 0, step_act = 0;
  for (const auto& s : r.steps) {
    step_peak = std::max(step_peak, s.memory.device.peak_bytes);
    step_act = std::max(step_act, s.memory.activations_peak());
  }
  j["step_device_peak"] = step_peak;
  j["step_activations_peak"] = step_act;
  return j;
}

// Hygiene after a failed capture, on the session whose capture failed: "" or the problem.
std::string hygiene_after(training::Session& session, device::Device& dev, int step) {
  if (!runtime::phase_flags_clear()) return "phase flags still set after the failed capture";
  auto& t = session.trainer();
  for (device::Stream s : {t.main, t.side, t.capture}) {
    device::CaptureStatus st = device::CaptureStatus::None;
    uint64_t id = 0;
    dev.stream_get_capture_info(s, &st, &id);
    if (st != device::CaptureStatus::None)
      return "stream " + std::to_string(s.id) + " still " + device::capture_status_name(st) + " after the failed capture";
  }
  for (auto* c : t.checkpoints)
    if (c->pending() != 0) return "a checkpoint keeps " + std::to_string(c->pending()) + " pending records";
  training::StepRecord rec = session.eager_step(step);
  for (const auto& m : rec.microbatches)
    if (!std::isfinite(m.loss)) return "the eager step after the failed capture has a non-finite loss";
  if (!runtime::phase_flags_clear()) return "phase flags set after the eager step";
  return "";
}

// The case turned into one whose capture fails: naive policy, host generator, the first layer
// checkpointed whole and graphed, per-layer graphs unless full-iteration, no warmup, one replay.
CaseSpec injected_failure(CaseSpec s) {
  s.policy = CheckpointPolicy::Naive;
  s.generator = runtime::GeneratorMode::Host;
  s.style = training::CheckpointStyle::Reentrant;
  s.warmup_backward = training::WarmupBackward::Backward;
  if (s.executor == ExecutorKind::Eager) s.executor = ExecutorKind::PerLayer;
  s.layers[0].checkpoint = CheckpointGranularity::Full;
  s.layers[0].modules.clear();
  s.layers[0].graphed = true;
  s.warmup = 0;
  s.replays = 1;
  return s;
}

}  // namespace

// 6. reference. One eager forward+backward of the case's model on a fresh device, host generator
// (every draw is recorded with its (seed, offset), so the reference applies the same masks), then
// y, dx and every parameter gradient against the fp64 reference in relative L2. The case's
// policy, executor and checkpoints do not enter: the other oracles tie those runs bitwise to this
// eager arithmetic, this one ties the arithmetic to the math. Cost: one pass of the case's model
// (no optimizer, no capture) plus the fp64 pass, a fraction of one case step.
CheckResult reference_check(const CaseSpec& spec, device::Backend backend,
                            const std::function<void(models::check::RunOutput&)>& tamper,
                            const models::check::ParamsPerturbation& perturb_reference) {
  namespace mc = models::check;
  const std::string p = "reference";
  const bool bf16 = spec.model.dtype == models::DType::BF16;
  // What is checked: the whole model in fp32. In bf16 every layer alone: rounding every stored
  // tensor to 8 bits compounds through a stack, and a deep bf16 stack can be ill-conditioned
  // (fuzzing found a 5-layer stack ending in dropout 0.5 and a layernorm at hidden 8 whose bias
  // gradient was 38% off fp64 while the same case in fp32 agreed to 1e-6). The oracle is about
  // each layer's analytic gradients (DESIGN.md, oracle 6), which a layer alone on fresh inputs
  // shows without that conditioning. Identical layer specs are checked once.
  struct Unit {
    std::string what;  // "" (the whole model) or "layers[2] (block)"
    models::ModelSpec model;
  };
  std::vector<Unit> units;
  if (bf16 && spec.model.layers.size() > 1) {
    std::vector<models::LayerSpec> seen;
    for (size_t i = 0; i < spec.model.layers.size(); ++i) {
      const models::LayerSpec& l = spec.model.layers[i];
      bool dup = false;
      for (const auto& q : seen)
        dup = dup || (q.kind == l.kind && q.ffn_hidden == l.ffn_hidden && q.heads == l.heads && q.dropout == l.dropout);
      if (dup) continue;
      seen.push_back(l);
      models::ModelSpec m = spec.model;
      m.layers = {l};
      units.push_back({"layers[" + std::to_string(i) + "] (" + l.kind + ")", m});
    }
  } else {
    units.push_back({"", spec.model});
  }

  // The fp64 reference runs on the CPU in plain loops: a 1024-wide, 512-token stack costs minutes
  // (the first H200 campaign spent 89% of its time there). Past a budget of multiply-adds, each
  // unit is checked on fewer tokens: every layer still runs at its full width, where its
  // reductions live, and causal attention still sees many tokens.
  constexpr double kReferenceMacBudget = 2e8;
  int reduced_from = 0;
  for (Unit& u : units) {
    double per_token = 0;
    for (const auto& l : u.model.layers) {
      const double h = u.model.hidden, f = l.ffn_hidden > 0 ? l.ffn_hidden : 4.0 * h;
      per_token += 6.0 * h * std::max(f, h) + 6.0 * h * u.model.tokens;  // projections; attention core
    }
    const double cost = per_token * u.model.tokens;
    if (cost > kReferenceMacBudget && u.model.tokens > 8) {
      reduced_from = u.model.tokens;
      u.model.tokens = std::max(8, static_cast<int>(u.model.tokens * kReferenceMacBudget / cost));
    }
  }

  CheckResult c = passed(p);
  std::optional<Divergence> worst;  // by error over tolerance
  double worst_ratio = -1.0;
  for (const Unit& u : units) {
    mc::Comparison cmp;
    try {
      mc::RunOptions o;
      o.backend = backend;
      o.spec = u.model;
      o.param_seed = spec.param_seed;
      o.data_seed = spec.data_seed;
      o.rng_seed = spec.rng_seed;
      o.generator = runtime::GeneratorMode::Host;
      mc::RunOutput run = mc::run_model(o);
      if (tamper) tamper(run);
      cmp = mc::compare_with_reference(u.model, run, perturb_reference);
    } catch (const std::exception& e) {
      return bad(p, Disposition::Crashed, std::string("the reference run threw: ") + e.what());
    }
    const double tol = mc::tolerance(u.model);
    Divergence d;
    d.step = 0;
    d.microbatch = 0;
    d.tensor = (u.what.empty() ? "" : u.what + ": ") + cmp.worst_what;
    d.max_abs_error = cmp.worst_max_abs;
    d.rel_l2_error = cmp.worst;
    d.tolerance = tol;
    const double ratio = std::isfinite(cmp.worst) ? cmp.worst / tol : INFINITY;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = d;
    }
    if (c.disposition != Disposition::Passed) continue;  // keep the first failing unit's reason
    std::string dt = bf16 ? "bf16" : "fp32";
    std::string scope = u.what.empty() ? std::to_string(u.model.layers.size()) + " layers" : u.what + " alone";
    if (!cmp.problems.empty()) {
      c.disposition = Disposition::Incorrect;
      c.reason = "vs fp64 reference (" + scope + "): " + cmp.problems[0];
      if (cmp.problems.size() > 1) c.reason += " (and " + std::to_string(cmp.problems.size() - 1) + " more)";
    } else if (!std::isfinite(cmp.worst)) {
      c.disposition = Disposition::Incorrect;
      c.reason = "vs fp64 reference: " + d.tensor + " is non-finite (" + d.describe() + ")";
    } else if (cmp.worst > mc::kNoiseFactor * tol) {
      c.disposition = Disposition::Incorrect;
      c.reason = "vs fp64 reference (" + dt + ", " + scope + "): " + d.describe();
    }
  }
  c.divergence = worst;  // the worst quantity, passed or not
  if (reduced_from > 0 && c.disposition == Disposition::Passed)
    c.reason = "checked on fewer tokens than the case's " + std::to_string(reduced_from) + " (fp64 cost bound)";
  return c;
}

CaseReport evaluate(const CaseSpec& spec, const OracleOptions& opts) {
  CaseReport rep;
  rep.spec = spec;
  rep.backend = opts.backend == device::BackendChoice::Cuda ? "cuda" : "sim";
  rep.memory = Json::object();
  rep.timings = Json::object();
  std::string invalid = training::validate(spec);
  if (!invalid.empty()) {
    rep.disposition = Disposition::Skipped;
    rep.checks.push_back(skipped("capture_clean", "invalid case: " + invalid));
    return rep;
  }
  const bool graphed = spec.executor != ExecutorKind::Eager;
  const bool ckpt = spec.any_checkpoint();

  // The case itself, in a session kept for hygiene when its own capture fails.
  std::optional<RunResult> main;
  std::string crash;
  std::string own_hygiene;  // "" ok, else the problem (only when the capture failed)
  bool own_capture_failed = false;
  int64_t live_after = 0;
  device::Backend backend = opts.backend == device::BackendChoice::Cuda ? device::Backend::Cuda : device::Backend::Sim;
  {
    auto t0 = std::chrono::steady_clock::now();
    try {
      auto dev = new_device(opts.backend);
      rep.device_name = dev->name();
      rep.backend = device::backend_name(dev->backend());
      backend = dev->backend();
      {
        training::Session session(*dev, spec);
        main = session.run();
        if (main->failure && main->failure->phase == "capture") {
          own_capture_failed = true;
          if (wanted(opts, "hygiene")) {
            try {
              own_hygiene = hygiene_after(session, *dev, spec.steps());
            } catch (const std::exception& e) {
              own_hygiene = std::string("the eager step after the failed capture threw: ") + e.what();
            }
          }
        }
      }
      live_after = dev->memory_stats().live_bytes;
    } catch (const std::exception& e) {
      crash = e.what();
    } catch (...) {
      crash = "unknown exception";
    }
    rep.timings["case_ms"] = ms_since(t0);
  }
  if (!crash.empty()) {
    rep.checks.push_back(bad("capture_clean", Disposition::Crashed, "the run threw: " + crash));
    rep.disposition = Disposition::Crashed;
    return rep;
  }
  const RunResult& r = *main;
  rep.memory = memory_json(r);
  {
    double eager_ms = 0, replay_ms = 0;
    int ne = 0, nr = 0;
    for (const auto& s : r.steps) {
      if (s.phase == "replay") {
        replay_ms += s.ms;
        ++nr;
      } else {
        eager_ms += s.ms;
        ++ne;
      }
    }
    if (ne) rep.timings["eager_step_ms"] = eager_ms / ne;
    if (nr) rep.timings["replay_step_ms"] = replay_ms / nr;
    if (r.captured) rep.timings["capture_ms"] = r.capture_ms;
  }
  const bool ran = r.ok();
  const std::string not_ran = ran ? "" : "the run failed";

  // 1. capture_clean
  if (wanted(opts, "capture_clean")) {
    if (r.failure) {
      CheckResult c = bad("capture_clean", Disposition::Failed, r.failure->line());
      c.api = r.failure->api;
      c.cuda_error = r.failure->error;
      rep.checks.push_back(c);
    } else {
      rep.checks.push_back(passed("capture_clean"));
    }
  }

  // 2. eager_vs_graphed
  std::optional<Run> eager_twin;
  if (wanted(opts, "eager_vs_graphed")) {
    if (!graphed) {
      rep.checks.push_back(skipped("eager_vs_graphed", "an eager case"));
    } else if (!ran) {
      rep.checks.push_back(skipped("eager_vs_graphed", not_ran));
    } else {
      CaseSpec e = spec;
      e.executor = ExecutorKind::Eager;
      eager_twin = run_on_fresh_device(e, opts.backend);
      rep.timings["eager_twin_ms"] = eager_twin->ms;
      std::string t = twin_trouble("the eager twin", *eager_twin);
      if (!t.empty()) {
        rep.checks.push_back(skipped("eager_vs_graphed", t));
      } else if (auto d = first_divergence(r, *eager_twin->result)) {
        CheckResult c = bad("eager_vs_graphed", Disposition::Incorrect, "vs eager: " + d->describe());
        c.divergence = d;
        rep.checks.push_back(c);
      } else {
        rep.checks.push_back(passed("eager_vs_graphed"));
      }
    }
  }

  // 3. recompute_on_off (its twin is memory's baseline too)
  std::optional<Run> plain_twin;
  auto need_plain = [&] {
    if (!plain_twin) {
      plain_twin = run_on_fresh_device(without_checkpoints(spec), opts.backend);
      rep.timings["no_checkpoint_twin_ms"] = plain_twin->ms;
    }
  };
  if (wanted(opts, "recompute_on_off")) {
    if (!ckpt) {
      rep.checks.push_back(skipped("recompute_on_off", "no checkpoint"));
    } else if (!ran) {
      rep.checks.push_back(skipped("recompute_on_off", not_ran));
    } else {
      need_plain();
      std::string t = twin_trouble("the no-checkpoint twin", *plain_twin);
      if (!t.empty()) {
        rep.checks.push_back(skipped("recompute_on_off", t));
      } else if (auto d = first_divergence(r, *plain_twin->result)) {
        CheckResult c = bad("recompute_on_off", Disposition::Incorrect, "vs no checkpoint: " + d->describe());
        c.divergence = d;
        rep.checks.push_back(c);
      } else {
        rep.checks.push_back(passed("recompute_on_off"));
      }
    }
  }

  // 4. rng_ledger
  if (wanted(opts, "rng_ledger")) {
    size_t draws = 0;
    for (const auto& s : r.steps) draws += s.ledger.size();
    if (r.recompute_mismatches > 0 || r.reused_masks > 0) {
      std::string why;
      if (r.recompute_mismatches > 0)
        why = std::to_string(r.recompute_mismatches) + " recomputed draws differ from their forward draw";
      if (r.reused_masks > 0)
        why += (why.empty() ? "" : "; ") + std::to_string(r.reused_masks) + " forward masks reused across steps";
      rep.checks.push_back(bad("rng_ledger", Disposition::Incorrect, why + " (" + r.ledger_summary + ")"));
    } else if (draws == 0) {
      rep.checks.push_back(skipped("rng_ledger", ran ? "no random draws" : not_ran));
    } else {
      rep.checks.push_back(passed("rng_ledger"));
    }
  }

  // 5. memory
  if (wanted(opts, "memory")) {
    CheckResult c = passed("memory");
    std::vector<std::string> problems;
    if (live_after != 0)
      problems.push_back(std::to_string(live_after) + " bytes still live on the device after teardown");
    if (ran && r.captured && checkpoint_in_graph(spec)) {
      need_plain();
      if (twin_trouble("", *plain_twin).empty() && plain_twin->result->captured) {
        int64_t base = activations_peak_in_graphs(*plain_twin->result);
        int64_t mine = activations_peak_in_graphs(r);
        rep.memory["no_checkpoint_activations_peak_in_graphs"] = base;
        rep.memory["activations_peak_in_graphs"] = mine;
        if (spec.policy == CheckpointPolicy::Skip) {
          // What recompute would have saved: the same case under graph-safe.
          CaseSpec g = spec;
          g.policy = CheckpointPolicy::GraphSafe;
          Run gs = run_on_fresh_device(g, opts.backend);
          rep.timings["graph_safe_twin_ms"] = gs.ms;
          if (twin_trouble("", gs).empty() && gs.result->captured) {
            int64_t want = activations_peak_in_graphs(*gs.result);
            rep.memory["graph_safe_activations_peak_in_graphs"] = want;
            if (mine > want) {
              std::string what = "memory: recompute lost inside graphs (skip): " + std::to_string(mine - want) +
                                 " bytes of activations (peak " + std::to_string(mine) + " B vs " +
                                 std::to_string(want) + " B under graph-safe, " + std::to_string(base) +
                                 " B without checkpoints)";
              c.bytes = mine - want;
              if (opts.require_memory_savings)
                problems.push_back(what.substr(8));
              else
                rep.findings.push_back(what);
            }
          }
        } else if (spec.policy == CheckpointPolicy::GraphSafe) {
          // Prediction (an upper bound): inside graphs, per microbatch, each checkpoint holds its
          // input (one [tokens, hidden] tensor) and its RNG pair (16 bytes); during a backward one
          // region's recomputed activations are live (at most what the baseline saves), besides
          // what the unchecked layers save (at most the baseline). More than that means recompute
          // keeps what it should have freed.
          const int64_t elt = spec.model.dtype == models::DType::BF16 ? 2 : 4;
          const int64_t input = static_cast<int64_t>(spec.model.tokens) * spec.model.hidden * elt;
          int64_t bound = 2 * base + static_cast<int64_t>(checkpoint_count(spec)) * spec.microbatches * (input + 16);
          rep.memory["predicted_max_activations_peak_in_graphs"] = bound;
          if (mine > bound)
            problems.push_back("recompute costs activation memory inside graphs: peak " + std::to_string(mine) +
                               " B, over the bound " + std::to_string(bound) + " B (" + std::to_string(base) +
                               " B without checkpoints)");
          else if (mine < base)
            rep.memory["saved_in_graphs"] = base - mine;
        }
      }
    }
    if (!problems.empty()) {
      c.disposition = Disposition::Incorrect;
      c.reason = problems[0];
      for (size_t i = 1; i < problems.size(); ++i) c.reason += "; " + problems[i];
    }
    rep.checks.push_back(c);
  }

  // 6. reference: independent of how the case itself ran (its own pass of the model).
  if (wanted(opts, "reference")) {
    auto t0 = std::chrono::steady_clock::now();
    rep.checks.push_back(reference_check(spec, backend));
    const auto& d = rep.checks.back().divergence;
    if (rep.checks.back().disposition == Disposition::Passed && d && *d->rel_l2_error > d->tolerance)
      rep.findings.push_back("reference: error past the tolerance, within its noise (" +
                             std::to_string(models::check::kNoiseFactor).substr(0, 3) + "x): " + d->describe());
    rep.timings["reference_ms"] = ms_since(t0);
  }

  // 7. hygiene
  if (wanted(opts, "hygiene")) {
    if (own_capture_failed) {
      rep.checks.push_back(own_hygiene.empty() ? passed("hygiene")
                                               : bad("hygiene", Disposition::Incorrect, own_hygiene));
    } else {
      CaseSpec inj = injected_failure(spec);
      auto t0 = std::chrono::steady_clock::now();
      try {
        auto dev = new_device(opts.backend);
        training::Session session(*dev, inj);
        RunResult ir = session.run();
        if (!ir.failure || ir.failure->phase != "capture") {
          rep.checks.push_back(skipped("hygiene", "the injected capture failure did not happen"));
        } else {
          std::string h = hygiene_after(session, *dev, inj.steps());
          rep.checks.push_back(h.empty() ? passed("hygiene") : bad("hygiene", Disposition::Incorrect, h));
        }
      } catch (const std::exception& e) {
        rep.checks.push_back(bad("hygiene", Disposition::Crashed, std::string("after an injected capture failure: ") + e.what()));
      }
      rep.timings["hygiene_ms"] = ms_since(t0);
    }
  }

  rep.disposition = Disposition::Skipped;
  for (const auto& c : rep.checks) rep.disposition = worse(rep.disposition, c.disposition);
  if (rep.disposition == Disposition::Skipped) rep.disposition = Disposition::Passed;
  return rep;
}

Json case_report_to_json(const CaseReport& r) {
  Json j;
  j["spec"] = Json::parse(training::case_to_json(r.spec).dump());
  j["backend"] = r.backend;
  j["device"] = r.device_name;
  j["disposition"] = disposition_name(r.disposition);
  Json checks = Json::array();
  for (const auto& c : r.checks) {
    Json k;
    k["property"] = c.property;
    k["disposition"] = disposition_name(c.disposition);
    if (!c.reason.empty()) k["reason"] = c.reason;
    if (c.divergence) {
      k["divergence"] = {{"step", c.divergence->step},
                         {"microbatch", c.divergence->microbatch},
                         {"tensor", c.divergence->tensor},
                         {"max_abs_error", training::json_number(c.divergence->max_abs_error)},
                         {"max_ulps", c.divergence->max_ulps}};
      if (c.divergence->rel_l2_error) {
        k["divergence"]["rel_l2_error"] = training::json_number(*c.divergence->rel_l2_error);
        k["divergence"]["tolerance"] = c.divergence->tolerance;
      }
    }
    if (!c.api.empty() || !c.cuda_error.empty()) k["capture_error"] = {{"api", c.api}, {"error", c.cuda_error}};
    if (c.bytes) k["bytes"] = c.bytes;
    checks.push_back(k);
  }
  j["checks"] = checks;
  j["findings"] = r.findings;
  j["memory"] = r.memory;
  j["timings"] = r.timings;
  std::string ff = r.first_failure();
  if (!ff.empty()) j["first_failure"] = ff;
  return j;
}

}  // namespace recap::properties
