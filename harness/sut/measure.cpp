// recap tradeoff's measurements through the boundary: the JSON of a `measure` reply (drivers/PROTOCOL.md,
// "measure") and the worker's side of it (WorkerSut::measure); recap's runtime in process measures
// itself (in_process.cpp).
#include <algorithm>
#include <cmath>

#include "harness/sut/sut.h"

namespace recap::sut {

namespace {

Json opt(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }
Json opt(const std::optional<double>& v) { return v ? json_number(*v) : Json(nullptr); }

// Reads a field that may be null or absent: nullopt then. ProtocolError for any other type.
std::optional<int64_t> bytes_at(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
  const Json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw ProtocolError(where + "." + key + ": expected a byte count (an integer >= 0) or null");
  return v.get<int64_t>();
}
double number_of(const Json& v, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return NAN;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  throw ProtocolError(where + ": expected a number");
}
std::optional<double> number_at(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
  return number_of(j[key], where + "." + key);
}
std::string string_at(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return "";
  if (!j[key].is_string()) throw ProtocolError(where + "." + key + ": expected a string");
  return j[key].get<std::string>();
}

}  // namespace

Json measurement_to_json(const Measurement& m) {
  Json layers = Json::array();
  for (const auto& l : m.per_layer)
    layers.push_back({{"layer", l.layer},
                      {"forward_ms", opt(l.forward_ms)},
                      {"backward_ms", opt(l.backward_ms)},
                      {"activations_in_graphs", opt(l.activations_in_graphs)},
                      {"graph_pool", opt(l.graph_pool)}});
  Json steps = Json::array();
  for (double ms : m.step_ms) steps.push_back(json_number(ms));
  return {{"clock", m.clock},
          {"step_ms", steps},
          {"capture_ms", opt(m.capture_ms)},
          {"memory",
           {{"peak_allocated", opt(m.peak_allocated)},
            {"peak_reserved", opt(m.peak_reserved)},
            {"device_used", opt(m.device_used)},
            {"graph_pool", opt(m.graph_pool)},
            {"capture_peak", opt(m.capture_peak)},
            {"activations_in_graphs", opt(m.activations_in_graphs)},
            {"activations_eager", opt(m.activations_eager)}}},
          {"per_layer", layers},
          {"failure", m.failure},
          {"note", m.note}};
}

Measurement measurement_from_json(const Json& j) {
  const std::string w = "measurement";
  if (!j.is_object()) throw ProtocolError(w + ": expected an object");
  Measurement m;
  m.clock = string_at(j, "clock", w);
  if (j.contains("step_ms")) {
    if (!j["step_ms"].is_array()) throw ProtocolError(w + ".step_ms: expected an array of numbers");
    for (const Json& v : j["step_ms"]) m.step_ms.push_back(number_of(v, w + ".step_ms[]"));
  }
  m.capture_ms = number_at(j, "capture_ms", w);
  static const Json none = Json::object();
  const Json& mem = j.contains("memory") && j["memory"].is_object() ? j["memory"] : none;
  const std::string wm = w + ".memory";
  m.peak_allocated = bytes_at(mem, "peak_allocated", wm);
  m.peak_reserved = bytes_at(mem, "peak_reserved", wm);
  m.device_used = bytes_at(mem, "device_used", wm);
  m.graph_pool = bytes_at(mem, "graph_pool", wm);
  m.capture_peak = bytes_at(mem, "capture_peak", wm);
  m.activations_in_graphs = bytes_at(mem, "activations_in_graphs", wm);
  m.activations_eager = bytes_at(mem, "activations_eager", wm);
  if (j.contains("per_layer")) {
    if (!j["per_layer"].is_array()) throw ProtocolError(w + ".per_layer: expected an array");
    for (const Json& l : j["per_layer"]) {
      const std::string wl = w + ".per_layer[]";
      if (!l.is_object() || !l.contains("layer") || !l["layer"].is_number_integer())
        throw ProtocolError(wl + ": expected an object with an integer layer");
      LayerMeasurement lm;
      lm.layer = l["layer"].get<int>();
      lm.forward_ms = number_at(l, "forward_ms", wl);
      lm.backward_ms = number_at(l, "backward_ms", wl);
      lm.activations_in_graphs = bytes_at(l, "activations_in_graphs", wl);
      lm.graph_pool = bytes_at(l, "graph_pool", wl);
      m.per_layer.push_back(lm);
    }
  }
  m.failure = string_at(j, "failure", w);
  m.note = string_at(j, "note", w);
  for (const char* key : {"retire", "fatal"})  // measure_request has replaced the worker
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>() && m.worker_replaced.empty()) m.worker_replaced = key;
  if (m.worker_replaced == "retire" && j.contains("held_after") && j["held_after"].is_number_integer())
    m.worker_replaced += " (" + std::to_string(j["held_after"].get<int64_t>() >> 20) + " MiB still held)";
  if (j.contains("timings") && j["timings"].is_object()) {  // informative: never a reason to refuse the reply
    const Json& t = j["timings"];
    if (t.contains("run_ms") && t["run_ms"].is_number()) m.request_ms = t["run_ms"].get<double>();
    if (t.contains("profile") && t["profile"].is_object())
      for (const auto& [k, v] : t["profile"].items())
        if (v.is_number()) m.request_phases_ms[k] = v.get<double>();
  }
  return m;
}

Json WorkerSut::measure_request(Json header) {
  if (pid_ < 0) {
    try {
      start();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(config_.name + " worker: " + e.what());
    }
  }
  if (std::find(info_.ops.begin(), info_.ops.end(), "measure") == info_.ops.end())
    throw SkippedBySut(config_.name + " worker: its hello lists no 'measure' op (a driver older than recap tradeoff)");
  const int64_t id = next_id_++;
  header["op"] = "measure";
  header["id"] = id;
  Message req, rep;
  req.header = std::move(header);
  begin_request();
  struct EndRequest {
    WorkerSut* w;
    ~EndRequest() { w->end_request(); }
  } end_request_at_exit{this};
  // As run(): a worker that dies or talks garbage is ended (the next request starts another), one
  // that does not answer in time was killed by the watchdog.
  auto crash = [&](const std::string& what, double grace_s) {
    std::string tail = stderr_tail();
    stop(grace_s);
    return WorkerCrash(config_.name + " worker: " + what + " (the worker " + last_exit_ + ")" + tail, last_signal_);
  };
  bool got = false;
  try {
    got = exchange(req, &rep);
  } catch (const ProtocolError& e) {
    throw crash(e.what(), 0);
  } catch (const std::runtime_error& e) {  // no reply within --case-timeout (killed)
    std::string tail = stderr_tail();
    stop(/*grace_s=*/0);
    throw std::runtime_error(config_.name + " worker: " + e.what() + tail);
  }
  if (!got) throw crash("the worker closed its output", 5);
  const Json& h = rep.header;
  const std::string op = h.value("op", std::string());
  if (op == "error")  // a request it cannot serve: it keeps serving
    throw std::runtime_error(config_.name + " worker refused the measure request: " + h.value("message", std::string()));
  if (op != "measurement" || h.value("id", int64_t{-1}) != id) throw crash("a measurement for this request expected", 0);
  if (h.value("status", std::string()) == "skipped") throw SkippedBySut(h.value("reason", std::string("no reason given")));
  // one that asks to retire (its memory grew), or whose device is unusable (fatal: it exits), has
  // answered: replaced before the next request
  for (const char* key : {"retire", "fatal"})
    if (auto r = h.find(key); r != h.end() && r->is_boolean() && r->get<bool>()) {
      stop(/*grace_s=*/10);
      break;
    }
  return h;
}

Measurement WorkerSut::measure(const training::CaseSpec& spec) {
  Json h = measure_request({{"what", "case"}, {"case", training::case_to_json(spec)}});
  try {
    Measurement m = measurement_from_json(h);
    if (h.value("status", std::string()) == "failed" && m.failure.empty())
      m.failure = h.value("reason", std::string("the run failed"));
    return m;
  } catch (const ProtocolError& e) {
    throw std::runtime_error(config_.name + " worker: a malformed measurement: " + e.what());
  }
}

std::optional<double> WorkerSut::matmul_bf16_tflops(std::string* why) {
  Json h = measure_request({{"what", "matmul-bf16"}});
  try {
    std::optional<double> v = number_at(h, "matmul_bf16_tflops", "measurement");
    if (!v) *why = h.value("reason", std::string("the worker measured no matmul rate"));
    return v;
  } catch (const ProtocolError& e) {
    throw std::runtime_error(config_.name + " worker: a malformed measurement: " + e.what());
  }
}

}  // namespace recap::sut
