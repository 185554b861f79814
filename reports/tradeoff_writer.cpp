#include "reports/tradeoff_writer.h"

#include <cmath>

namespace recap::reports {

namespace {

// The schema's numbers are finite or null.
Json number_or_null(const std::optional<double>& v) { return v && std::isfinite(*v) ? Json(*v) : Json(nullptr); }
Json bytes_or_null(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }

Json steps_to_json(const StepTimes& t) {
  Json samples = Json::array();
  for (double v : t.samples) samples.push_back(std::isfinite(v) ? Json(v) : Json(nullptr));
  Json j = {{"median", t.median}, {"p10", t.p10}, {"p90", t.p90}};
  if (t.mean) j["mean"] = *t.mean;
  j["samples"] = samples;
  return j;
}

}  // namespace

Json tradeoff_context_to_json(const TradeoffContext& c) {
  Json j = {{"recap_version", c.recap_version}, {"git_commit", c.git_commit}, {"command", c.command}};
  if (!c.started_utc.empty()) j["started_utc"] = c.started_utc;
  if (!c.host.empty()) j["host"] = c.host;
  j["sut"] = {{"name", c.sut_name}, {"version", c.sut_version}};
  if (!c.sut_device.empty()) j["sut"]["device"] = c.sut_device;
  if (!c.device_name.empty()) j["device_name"] = c.device_name;
  j["matmul_bf16_tflops"] = number_or_null(c.matmul_bf16_tflops);
  Json t = Json::object();
  if (c.warmup_steps) t["warmup_steps"] = *c.warmup_steps;
  if (c.measured_steps) t["measured_steps"] = *c.measured_steps;
  if (!c.clock.empty()) t["clock"] = c.clock;
  j["timing"] = t;
  return j;
}

Json configuration_to_json(const Configuration& c) {
  Json j = {{"name", c.name}, {"checkpoint", c.checkpoint}};
  if (c.checkpoint == "selective") j["selective_modules"] = c.selective_modules;
  j["executor"] = c.executor;
  Json choice = Json::object();
  for (const auto& [k, v] : c.choice) choice[k] = v;
  j["choice"] = choice;
  j["verdict"] = c.verdict;
  if (!c.reason.empty()) j["reason"] = c.reason;
  Json findings = Json::array();
  for (const auto& f : c.findings) {
    Json fj = {{"bucket", f.bucket}};
    if (!f.id.empty()) fj["id"] = f.id;
    if (!f.corpus_file.empty()) fj["corpus_file"] = f.corpus_file;
    if (!f.reason.empty()) fj["reason"] = f.reason;
    findings.push_back(fj);
  }
  j["findings"] = findings;
  j["step_ms"] = c.step_ms ? steps_to_json(*c.step_ms) : Json(nullptr);
  j["capture_ms"] = number_or_null(c.capture_ms);
  j["tflops"] = number_or_null(c.tflops);
  j["matmul_share"] = number_or_null(c.matmul_share);
  const TradeoffMemory& m = c.memory;
  j["memory"] = {{"peak_allocated", bytes_or_null(m.peak_allocated)},
                 {"peak_reserved", bytes_or_null(m.peak_reserved)},
                 {"device_used", bytes_or_null(m.device_used)},
                 {"graph_pool", bytes_or_null(m.graph_pool)},
                 {"capture_peak", bytes_or_null(m.capture_peak)},
                 {"activations_in_graphs", bytes_or_null(m.activations_in_graphs)},
                 {"saved_by_recompute", bytes_or_null(m.saved_by_recompute)}};
  j["recompute_overhead"] = number_or_null(c.recompute_overhead);
  if (!c.per_layer.empty()) {
    Json layers = Json::array();
    for (const auto& l : c.per_layer)
      layers.push_back({{"layer", l.layer},
                        {"forward_ms", number_or_null(l.forward_ms)},
                        {"backward_ms", number_or_null(l.backward_ms)},
                        {"activations_in_graphs", bytes_or_null(l.activations_in_graphs)},
                        {"graph_pool", bytes_or_null(l.graph_pool)}});
    j["per_layer"] = layers;
  }
  if (c.judged_size) {
    const JudgedSize& s = *c.judged_size;
    j["judged_size"] = {{"hidden", s.hidden}, {"heads", s.heads}, {"ffn_hidden", s.ffn_hidden}, {"tokens", s.tokens},
                        {"reason", s.reason}};
  }
  return j;
}

Json tradeoff_size_to_json(const TradeoffSize& s) {
  Json j = {{"name", s.name},   {"layers", s.layers}, {"hidden", s.hidden}, {"heads", s.heads}};
  if (s.ffn_hidden > 0) j["ffn_hidden"] = s.ffn_hidden;
  j["seq"] = s.seq;
  j["micro_batch"] = s.micro_batch;
  j["microbatches"] = s.microbatches;
  j["dtype"] = s.dtype;
  j["flops_per_step"] = number_or_null(s.flops_per_step);
  Json configs = Json::array();
  for (const auto& c : s.configurations) configs.push_back(configuration_to_json(c));
  j["configurations"] = configs;
  return j;
}

Json tradeoff_to_json(const TradeoffReport& r) {
  Json sizes = Json::array();
  for (const auto& s : r.sizes) sizes.push_back(tradeoff_size_to_json(s));
  return {{"schema", kTradeoffSchema}, {"context", tradeoff_context_to_json(r.context)}, {"sizes", sizes}};
}

}  // namespace recap::reports
