// --known-findings FILE (recap.known-findings/1): reading it, and judging a failing case by it.
#include "harness/cli/known_findings.h"

#include <algorithm>

#include "harness/base/json_read.h"
#include "harness/cli/cli.h"
#include "models/registry.h"

namespace recap::cli {

namespace {

constexpr const char* kSchema = "recap.known-findings/1";

enum class ValueKind { Names, Bool };
struct FeatureDef {
  const char* key;
  ValueKind kind;
  std::vector<std::string> names;  // the values a case may have (Names)
};

std::vector<std::string> kind_names() {
  std::vector<std::string> out;
  for (const auto& k : models::layer_kinds()) out.emplace_back(k.kind);
  return out;
}

// Every key a `when` may name. Case fields have exactly one value per case; the "any layer"
// features have the set of values over the layers; booleans are "true" or "false".
const std::vector<FeatureDef>& feature_defs() {
  static const std::vector<FeatureDef> defs = [] {
    using namespace training;
    const std::vector<std::string> kinds = kind_names();
    return std::vector<FeatureDef>{
        {"executor", ValueKind::Names, names(kExecutorNames)},
        {"policy", ValueKind::Names, names(kPolicyNames)},
        {"generator", ValueKind::Names, names(runtime::kGeneratorModeNames)},
        {"checkpoint_style", ValueKind::Names, names(kStyleNames)},
        {"device_state", ValueKind::Names, names(runtime::kDeviceStateModelNames)},
        {"warmup_backward", ValueKind::Names, names(kWarmupBackwardNames)},
        {"dtype", ValueKind::Names, {"fp32", "bf16"}},
        {"microbatch_order", ValueKind::Names, {"default", "interleaved"}},
        {"shared_pool", ValueKind::Bool, {}},
        {"kinds", ValueKind::Names, kinds},
        {"checkpoint_granularity", ValueKind::Names, {"full", "selective"}},
        {"checkpoint_modules", ValueKind::Names, selective_roles()},
        {"checkpointed_kinds", ValueKind::Names, kinds},
        {"graphed_checkpoint_kinds", ValueKind::Names, kinds},
        {"checkpoint", ValueKind::Bool, {}},
        {"dropout", ValueKind::Bool, {}},
        {"capture", ValueKind::Bool, {}},
        {"checkpoint_in_graph", ValueKind::Bool, {}},
        {"checkpointed_dropout", ValueKind::Bool, {}},
        {"checkpointed_dropout_in_graph", ValueKind::Bool, {}},
    };
  }();
  return defs;
}

const FeatureDef* find_feature(const std::string& key) {
  for (const auto& d : feature_defs())
    if (key == d.key) return &d;
  return nullptr;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The roles of a selective checkpoint whose region draws dropout in recap's model (models/
// layers.cpp: the attention core's attn_dropout, the MLP's dropout; a norm draws nothing).
bool region_draws(const training::LayerFlags& f, float dropout) {
  if (dropout <= 0.0f) return false;
  if (f.checkpoint == training::CheckpointGranularity::Full) return true;
  if (f.checkpoint != training::CheckpointGranularity::Selective) return false;
  for (const auto& m : f.modules)
    if (m == "attn_core" || m == "mlp") return true;
  return false;
}

std::vector<KnownCondition> read_clause(const Json& j, const std::string& at) {
  if (!j.is_object()) throw std::runtime_error(at + ": expected an object of conditions");
  std::vector<KnownCondition> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = it.key();
    const Json& v = it.value();
    if (!key.empty() && key[0] == '_') continue;
    const FeatureDef* d = find_feature(key);
    if (!d) throw std::runtime_error(at + ": unknown feature '" + one_line(key, 60) +
                               "' (reports/schema/recap.known-findings.schema.json lists the " +
                               std::to_string(feature_defs().size()) + ")");
    KnownCondition c{key, {}};
    if (d->kind == ValueKind::Bool) {
      if (!v.is_boolean()) throw std::runtime_error(at + "." + key + ": expected true or false");
      c.allowed.insert(v.get<bool>() ? "true" : "false");
    } else {
      if (!v.is_array() || v.empty())
        throw std::runtime_error(at + "." + key + ": expected a non-empty array of values (any of)");
      for (const auto& x : v) {
        const std::string s = x.is_string() ? x.get<std::string>() : "";
        if (!x.is_string() || std::find(d->names.begin(), d->names.end(), s) == d->names.end())
          throw std::runtime_error(at + "." + key + ": " + one_line(x.dump(), 60) + " is not a recap.case/1 value (one of: " +
                                   join(d->names) + ")");
        c.allowed.insert(s);
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

KnownFinding read_entry(const Json& j, const std::string& at) {
  if (!j.is_object()) throw std::runtime_error(at + ": expected an object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (const std::string key = it.key(); key != "id" && key != "summary" && key != "buckets" && key != "when" && key != "see" && key.rfind('_', 0) != 0)
      throw std::runtime_error(at + ": unknown field '" + one_line(key, 60) + "' (id, summary, buckets, when, see)");
  auto str = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
      throw std::runtime_error(at + "." + key + ": expected a non-empty string");
    return j[key].get<std::string>();
  };
  KnownFinding f;
  f.id = str("id");
  f.summary = str("summary");
  if (j.contains("see") && !j["see"].is_string()) throw std::runtime_error(at + ".see: expected a string");
  const Json b = j.value("buckets", Json());
  if (!b.is_array() || b.empty()) throw std::runtime_error(at + ".buckets: expected a non-empty array of buckets");
  for (const auto& x : b) {
    const std::string s = x.is_string() ? x.get<std::string>() : "";
    if (!x.is_string() || std::count(s.begin(), s.end(), '/') != 4)
      throw std::runtime_error(at + ".buckets: a bucket is property/disposition/api/cuda_error/quantity, got " +
                               one_line(x.dump(), 80));
    f.buckets.insert(s);
  }
  if (!j.contains("when"))
    throw std::runtime_error(at + ".when: missing (the configuration that defines the finding; {} for every case)");
  const Json& w = j["when"];
  if (w.is_array()) {
    if (w.empty()) throw std::runtime_error(at + ".when: an empty array accepts no case");
    for (size_t i = 0; i < w.size(); ++i) f.when.push_back(read_clause(w[i], at + ".when[" + std::to_string(i) + "]"));
  } else {
    f.when.push_back(read_clause(w, at + ".when"));
  }
  return f;
}

}  // namespace

KnownFindings read_known_findings(const std::string& path) {
  KnownFindings k;
  if (path.empty()) return k;
  k.path = path;
  std::string text;
  if (std::string err = read_bounded_file(path, size_t{1} << 20, &text); !err.empty())
    throw UsageError("--known-findings: " + err);
  const std::string name = one_line(path, 120);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] != '{' && text[first] != '[')
    throw UsageError("--known-findings " + name + ": not a " + kSchema +
                     " JSON file (the one-bucket-per-line format is gone: each finding needs its configuration; "
                     "reports/schema/recap.known-findings.schema.json)");
  Json j;
  if (std::string err = parse_json_strict(text, &j); !err.empty()) throw UsageError("--known-findings " + name + ": " + err);
  try {
    if (!j.is_object()) throw std::runtime_error("expected a JSON object with schema and findings");
    for (auto it = j.begin(); it != j.end(); ++it)
      if (const std::string key = it.key(); key != "schema" && key != "sut" && key != "description" && key != "findings" && key.rfind('_', 0) != 0)
        throw std::runtime_error("unknown field '" + one_line(key, 60) + "' (schema, sut, description, findings)");
    if (j.value("schema", Json()) != Json(kSchema)) throw std::runtime_error(std::string("schema: expected \"") + kSchema + "\"");
    if (j.contains("sut")) {
      const Json& s = j["sut"];
      if (!s.is_object()) throw std::runtime_error("sut: expected {\"name\", \"version\"}");
      for (auto it = s.begin(); it != s.end(); ++it)
        if ((it.key() != "name" && it.key() != "version") || !it.value().is_string())
          throw std::runtime_error("sut." + one_line(it.key(), 40) + ": expected name or version, a string");
      k.sut_name = s.value("name", "");
      k.sut_version = s.value("version", "");
    }
    if (j.contains("description") && !j["description"].is_string()) throw std::runtime_error("description: expected a string");
    const Json f = j.value("findings", Json());
    if (!f.is_array()) throw std::runtime_error("findings: expected an array");
    std::set<std::string> ids;
    for (size_t i = 0; i < f.size(); ++i) {
      k.entries.push_back(read_entry(f[i], "findings[" + std::to_string(i) + "]"));
      if (!ids.insert(k.entries.back().id).second)
        throw std::runtime_error("findings[" + std::to_string(i) + "].id: '" + one_line(k.entries.back().id, 40) +
                                 "' twice");
    }
  } catch (const std::exception& e) {  // what the checks above throw (nlohmann's own cannot, but stay one line)
    throw UsageError("--known-findings " + name + ": " + one_line(e.what(), 230));
  }
  return k;
}

std::map<std::string, std::set<std::string>> case_features(const training::CaseSpec& s) {
  using training::CheckpointGranularity;
  using training::ExecutorKind;
  std::map<std::string, std::set<std::string>> f;
  f["executor"] = {training::executor_name(s.executor)};
  f["policy"] = {training::policy_name(s.policy)};
  f["generator"] = {runtime::generator_mode_name(s.generator)};
  f["checkpoint_style"] = {training::style_name(s.style)};
  f["device_state"] = {runtime::device_state_model_name(s.device_state)};
  f["warmup_backward"] = {training::warmup_backward_name(s.warmup_backward)};
  f["dtype"] = {s.model.dtype == models::DType::BF16 ? "bf16" : "fp32"};
  std::vector<int> plain;
  for (int m = 0; m < s.microbatches; ++m) plain.insert(plain.end(), {1, -1});
  f["microbatch_order"] = {s.effective_order() == plain ? "default" : "interleaved"};
  f["shared_pool"] = {s.shared_pool ? "true" : "false"};
  bool ckpt = false, dropout = false, capture = false, in_graph = false, ckpt_drop = false, ckpt_drop_graph = false;
  for (auto k : {"kinds", "checkpoint_granularity", "checkpoint_modules", "checkpointed_kinds", "graphed_checkpoint_kinds"})
    f[k] = {};
  for (size_t i = 0; i < s.layers.size() && i < s.model.layers.size(); ++i) {
    const auto& l = s.layers[i];
    const auto& m = s.model.layers[i];
    const bool graphed = s.executor == ExecutorKind::FullIteration || (s.executor == ExecutorKind::PerLayer && l.graphed);
    const bool c = l.checkpoint != CheckpointGranularity::None;
    f["kinds"].insert(m.kind);
    capture = capture || graphed;
    dropout = dropout || m.dropout > 0.0f;
    if (c) {
      ckpt = true;
      f["checkpoint_granularity"].insert(training::granularity_name(l.checkpoint));
      f["checkpointed_kinds"].insert(m.kind);
      if (graphed) f["graphed_checkpoint_kinds"].insert(m.kind);
      in_graph = in_graph || graphed;
    }
    if (l.checkpoint == CheckpointGranularity::Selective) f["checkpoint_modules"].insert(l.modules.begin(), l.modules.end());
    const bool draws = region_draws(l, m.dropout);
    ckpt_drop = ckpt_drop || draws;
    ckpt_drop_graph = ckpt_drop_graph || (draws && graphed);
  }
  auto b = [](bool v) { return std::set<std::string>{v ? "true" : "false"}; };
  f["checkpoint"] = b(ckpt);
  f["dropout"] = b(dropout);
  f["capture"] = b(capture);
  f["checkpoint_in_graph"] = b(in_graph);
  f["checkpointed_dropout"] = b(ckpt_drop);
  f["checkpointed_dropout_in_graph"] = b(ckpt_drop_graph);
  return f;
}

std::string accepting_finding(const KnownFindings& known, const std::string& bucket, const training::CaseSpec& spec) {
  std::map<std::string, std::set<std::string>> features;
  bool computed = false;
  for (const auto& e : known.entries) {
    if (!e.buckets.count(bucket)) continue;
    if (!computed) features = case_features(spec), computed = true;
    for (const auto& clause : e.when) {
      bool all = true;
      for (const auto& c : clause) {
        bool any = false;
        for (const auto& v : features[c.key]) any = any || c.allowed.count(v) > 0;
        all = all && any;
      }
      if (all) return e.id;
    }
  }
  return "";
}

}  // namespace recap::cli
