// Reading a RunResult: verdict, gradient norms, digests, JSON (executor.h).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "harness/training/executor.h"

#include "harness/base/hash.h"
#include "harness/base/profile.h"
#include "harness/device/sim/sim_device.h"
#include "harness/runtime/phase.h"

namespace recap::training {

namespace {

bool all_finite(const std::vector<std::vector<float>>& v) {
  for (const auto& x : v)
    for (float f : x)
      if (!std::isfinite(f)) return false;
  return true;
}

// One memory snapshot of recap.run/1: each category live/peak, and the graph pool.
Json snapshot_json(const MemorySnapshot& m) {
  Json cats = Json::object();
  for (int c = 0; c < device::kNumCategories; ++c) {
    auto cat = static_cast<device::MemCategory>(c);
    const auto& a = m.allocator.tensors[c];
    const auto& d = m.device.by_category[c];
    cats[device::category_name(cat)] = {{"tensors_live", a.live_bytes},
                                        {"tensors_peak", a.peak_bytes},
                                        {"device_live", d.live_bytes},
                                        {"device_peak", d.peak_bytes}};
  }
  return {{"categories", cats},
          {"tensors_live", m.allocator.tensor_live_bytes},
          {"tensors_peak", m.allocator.tensor_peak_bytes},
          {"pool_reserved", m.allocator.pool_reserved_bytes},
          {"pool_peak_reserved", m.allocator.pool_peak_reserved_bytes},
          {"device_live", m.device.live_bytes},
          {"device_peak", m.device.peak_bytes}};
}

}  // namespace

Verdict verdict(const RunResult& r) {
  if (r.failure) return {"failed", r.failure->line()};
  if (r.recompute_mismatches > 0)
    return {"incorrect", std::to_string(r.recompute_mismatches) +
                             " recomputed draws differ from their forward draws (RNG ledger): recompute drew other "
                             "dropout masks than the forward"};
  if (r.reused_masks > 0)
    return {"incorrect",
            std::to_string(r.reused_masks) + " forward draws reuse another step's (seed, offset) (RNG ledger)"};
  if (r.repeated_draws > 0)
    return {"incorrect", std::to_string(r.repeated_draws) +
                             " draws repeat another draw's (seed, offset) (RNG ledger): two sites or microbatches got one mask"};
  if (r.overlapping_draws > 0)
    return {"incorrect", std::to_string(r.overlapping_draws) +
                             " draws start inside another draw's Philox value range (RNG ledger): their masks are correlated"};
  for (const StepRecord& s : r.steps) {
    for (const MicrobatchRecord& m : s.microbatches)
      if (!std::isfinite(m.loss))
        return {"incorrect", "step " + std::to_string(s.step) + " microbatch " + std::to_string(m.microbatch) +
                                 ": loss is not finite"};
    if (!all_finite(s.grads)) return {"incorrect", "step " + std::to_string(s.step) + ": a gradient is not finite"};
  }
  return {"passed", ""};
}

GradNorms grad_norms(const RunResult& r, const StepRecord& s) {
  GradNorms n;
  n.per_layer.assign(r.layer_names.size(), 0.0);
  double total = 0.0;
  for (size_t i = 0; i < s.grads.size(); ++i) {
    double sum = 0.0;
    for (float g : s.grads[i]) sum += static_cast<double>(g) * g;
    total += sum;
    int l = i < r.param_layer.size() ? r.param_layer[i] : -1;
    if (l >= 0 && static_cast<size_t>(l) < n.per_layer.size()) n.per_layer[l] += sum;
  }
  n.total = std::sqrt(total);
  for (double& x : n.per_layer) x = std::sqrt(x);
  return n;
}

uint64_t digest(const std::vector<std::vector<float>>& v) {
  uint64_t h = kFnvOffset;
  for (const auto& x : v) {
    const uint32_t n = static_cast<uint32_t>(x.size());
    h = fnv1a64(&n, sizeof n, h);
    h = fnv1a64(x.data(), x.size() * sizeof(float), h);  // the bits, little-endian as written
  }
  return h;
}

Json run_result_to_json(const RunResult& r) {
  Verdict v = verdict(r);
  Json j;
  j["schema"] = "recap.run/1";
  j["backend"] = r.backend;
  j["device"] = r.device_name;
  j["spec"] = case_to_json(r.spec);
  j["disposition"] = v.disposition;
  j["reason"] = v.reason;
  if (r.failure) {
    const RunFailure& f = *r.failure;
    j["failure"] = {{"phase", f.phase}, {"pass", f.pass},   {"layer", f.layer},     {"microbatch", f.microbatch},
                    {"step", f.step},   {"api", f.api},     {"error", f.error},     {"message", f.message},
                    {"line", f.line()}};
  } else {
    j["failure"] = nullptr;
  }
  j["capture"] = {{"captured", r.captured},
                  {"graphs", r.graphs},
                  {"ms", json_number(r.capture_ms)},
                  {"memory", snapshot_json(r.capture_memory)}};
  j["ledger"] = {{"summary", r.ledger_summary},
                 {"recompute_mismatches", r.recompute_mismatches},
                 {"reused", r.reused_masks},
                 {"overlapping", r.overlapping_draws},
                 {"repeated", r.repeated_draws}};
  j["layers"] = r.layer_names;
  Json steps = Json::array();
  for (const StepRecord& s : r.steps) {
    Json st;
    st["step"] = s.step;
    st["phase"] = s.phase;
    Json losses = Json::array();
    for (const auto& m : s.microbatches) losses.push_back(json_number(m.loss));
    st["losses"] = losses;
    GradNorms n = grad_norms(r, s);
    Json per = Json::object();
    for (size_t l = 0; l < n.per_layer.size(); ++l) per[r.layer_names[l]] = json_number(n.per_layer[l]);
    st["grad_norm"] = {{"total", json_number(n.total)}, {"layers", per}};
    st["grad_digest"] = hex64(digest(s.grads));
    Json mbd = Json::array();
    for (const auto& m : s.microbatches) mbd.push_back(hex64(digest(m.grads)));
    st["microbatch_grad_digests"] = mbd;
    st["param_digest"] = hex64(digest(s.params));
    LedgerCounts lc = count_ledger(s.ledger);
    st["ledger"] = {{"draws", lc.draws}, {"forward", lc.forward}, {"recompute", lc.recompute}, {"mismatches", lc.mismatches}};
    st["memory"] = snapshot_json(s.memory);
    st["ms"] = json_number(s.ms);
    steps.push_back(st);
  }
  j["steps"] = steps;
  return j;
}

namespace {
// Hygiene after a failed capture, on the session whose capture failed: "" or the problem.
std::string hygiene_checks(Session& session, device::Device& dev) {
  const int step = session.trainer().spec.steps();
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
  StepRecord rec = session.eager_step(step);
  for (const auto& m : rec.microbatches)
    if (!std::isfinite(m.loss)) return "the eager step after the failed capture has a non-finite loss";
  if (!runtime::phase_flags_clear()) return "phase flags set after the eager step";
  return "";
}
}  // namespace

std::string hygiene_after_failed_capture(Session& session, device::Device& dev) {
  try {
    return hygiene_checks(session, dev);
  } catch (const runtime::DeviceError& e) {
    if (e.status == device::Status::MemoryAllocation) return std::string(kHygieneOutOfMemory) + e.what();
    return std::string("the eager step after the failed capture threw: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("the eager step after the failed capture threw: ") + e.what();
  }
}

CheckedRun run_case_checked(device::Device& dev, const CaseSpec& spec) {
  CheckedRun out;
  std::optional<Session> session;
  {
    profile::Scope build(profile::kModelBuild);
    session.emplace(dev, spec);
  }
  out.result = session->run();
  if (out.result.failure && out.result.failure->phase == "capture") {
    // hygiene's eager step is hygiene's time, not the run's eager steps (its copies and waits count)
    const double t0 = profile::on() ? profile::now_ms() : 0.0;
    profile::Phases inner;
    {
      profile::Sink nested(profile::on() ? &inner : nullptr);
      out.hygiene = hygiene_after_failed_capture(*session, dev);
    }
    if (profile::on()) {
      profile::add(profile::kHygiene, profile::now_ms() - t0);
      profile::add_within(inner);
    }
  }
  profile::Scope teardown(profile::kTeardown);
  session.reset();
  out.live_after = dev.memory_stats().live_bytes;
  if (std::optional<device::sim::InitCheckSummary> s = device::sim::init_check_summary(dev)) {
    InitObservation& o = out.init.emplace();
    o.launches = s->launches;
    o.bytes = s->bytes;
    for (const device::sim::UninitReport& r : s->uninitialized) o.uninitialized.push_back(r.describe());
  }
  return out;
}

}  // namespace recap::training
