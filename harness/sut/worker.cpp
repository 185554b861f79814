#include "harness/sut/worker.h"

#include <chrono>

#include "harness/base/names.h"
#include "models/registry.h"

namespace recap::sut {

namespace {

Message error_reply(const std::string& message, const Json& id = nullptr) {
  Message m;
  m.header = {{"op", "error"}};
  if (!id.is_null()) m.header["id"] = id;
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  m.header["message"] = line;
  return m;
}

Json failure_json(const training::RunFailure& f) {
  return {{"phase", f.phase}, {"pass", f.pass},   {"layer", f.layer},   {"microbatch", f.microbatch},
          {"step", f.step},   {"api", f.api},     {"error", f.error},   {"message", f.message}};
}

Json memory_json(const training::RunResult& r) {
  int64_t replay_peak = 0, eager_activations = 0;
  for (const auto& s : r.steps) {
    if (s.phase == "replay") replay_peak = std::max(replay_peak, s.memory.device.peak_bytes);
    else eager_activations = std::max(eager_activations, s.memory.activations_peak());
  }
  return {{"capture_peak_bytes", r.captured ? r.capture_memory.device.peak_bytes : 0},
          {"replay_peak_bytes", replay_peak},
          {"graph_pool_bytes", r.captured ? r.capture_memory.allocator.pool_peak_reserved_bytes : 0},
          {"activations_in_graphs_bytes", r.captured ? r.capture_memory.activations_peak() : 0},
          {"activations_eager_bytes", eager_activations}};
}

}  // namespace

Message observation_of(const training::RunResult& r, const Json& id) {
  Message m;
  Json& h = m.header;
  h = {{"op", "observation"}, {"id", id}, {"status", r.ok() ? "ok" : "failed"}, {"reason", ""}};
  if (r.failure) {
    h["reason"] = r.failure->line();
    h["failure"] = failure_json(*r.failure);
  }
  h["param_names"] = r.param_names;
  Json steps = Json::array();
  for (const auto& s : r.steps) {
    Json losses = Json::array(), draws = Json::array();
    for (const auto& mb : s.microbatches) losses.push_back(json_number(mb.loss));
    for (const auto& e : s.ledger)
      draws.push_back({{"layer", e.site.layer}, {"op", e.site.op}, {"microbatch", e.site.microbatch},
                       {"pass", runtime::phase_name(e.site.phase)}, {"seed", e.seed}, {"offset", e.offset},
                       {"count", e.count}, {"generator", e.generator}});
    steps.push_back({{"step", s.step}, {"phase", s.phase}, {"losses", losses}, {"masks", Json::array()},
                     {"draws", draws}, {"ms", json_number(s.ms)}});
    const std::string st = std::to_string(s.step);
    for (size_t mb = 0; mb < s.microbatches.size(); ++mb)
      for (size_t i = 0; i < s.microbatches[mb].grads.size(); ++i)
        m.frames.push_back(f32_frame("grad " + st + " " + std::to_string(mb) + " " + std::to_string(i),
                                     s.microbatches[mb].grads[i]));
    for (size_t i = 0; i < s.grads.size(); ++i) m.frames.push_back(f32_frame("grad " + st + " " + std::to_string(i), s.grads[i]));
    for (size_t i = 0; i < s.params.size(); ++i) m.frames.push_back(f32_frame("param " + st + " " + std::to_string(i), s.params[i]));
  }
  h["steps"] = steps;
  h["memory"] = memory_json(r);
  h["recompute_mismatches"] = r.recompute_mismatches;
  h["reused_masks"] = r.reused_masks;
  return m;
}

Message hello_reply(device::Device& dev) {
  Json kinds = Json::array();
  for (const auto& k : models::layer_kinds()) kinds.push_back(k.kind);
  Message m;
  m.header = {{"op", "hello"},
              {"protocol", kProtocol},
              {"sut", "recap"},
              {"version", "0.1.0"},
              {"device", dev.name()},
              {"capabilities",
               {{"kinds", kinds},
                {"dtype", names(runtime::kDTypeNames)},
                {"executor", names(training::kExecutorNames)},
                {"checkpoint", names(training::kGranularityNames)},
                {"checkpoint_style", names(training::kStyleNames)},
                {"policy", names(training::kPolicyNames)},
                {"generator", names(runtime::kGeneratorModeNames)},
                {"device_state", names(runtime::kDeviceStateModelNames)},
                {"warmup_backward", names(training::kWarmupBackwardNames)},
                {"shared_pool", {true, false}},
                {"graphs", true}}}};
  return m;
}

int serve(FILE* in, FILE* out, device::BackendChoice backend) {
  std::string err;
  auto probe = device::make_device(backend, {}, &err);
  for (;;) {
    Message req;
    try {
      if (!read_message(in, &req)) return 0;
    } catch (const ProtocolError& e) {
      // The stream cannot be trusted past a bad message: say so and stop.
      write_message(out, error_reply(e.what()));
      return 2;
    }
    const Json& h = req.header;
    const std::string op = h.contains("op") && h["op"].is_string() ? h["op"].get<std::string>() : "";
    const Json id = h.contains("id") ? h["id"] : Json(nullptr);
    if (op == "shutdown") return 0;
    if (op == "hello") {
      if (h.value("protocol", std::string()) != kProtocol) {
        write_message(out, error_reply("protocol mismatch: this worker speaks " + std::string(kProtocol)));
        return 2;
      }
      if (!probe) {
        write_message(out, error_reply("the device is not usable: " + err));
        return 2;
      }
      write_message(out, hello_reply(*probe));
      continue;
    }
    if (op != "run") {
      write_message(out, error_reply(op.empty() ? "a request without an op" : "unknown op '" + op + "'", id));
      continue;
    }
    if (!id.is_number_integer()) {
      write_message(out, error_reply("run: id must be an integer", id));
      continue;
    }
    training::CaseSpec spec;
    std::string problem = h.contains("case") ? training::case_from_json(h["case"], &spec) : "run: missing case";
    if (!problem.empty()) {
      write_message(out, error_reply("case: " + problem, id));
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    try {
      auto dev = device::make_device(backend, {}, &err);
      if (!dev) throw std::runtime_error("cannot create the device: " + err);
      Message obs = observation_of(training::run_case(*dev, spec), id);
      obs.header["timings"] = {
          {"run_ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()}};
      write_message(out, obs);
    } catch (const ProtocolError&) {
      throw;
    } catch (const std::exception& e) {
      write_message(out, error_reply(std::string("the run threw: ") + e.what(), id));
    }
  }
}

}  // namespace recap::sut
