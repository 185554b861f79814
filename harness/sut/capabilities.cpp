#include "harness/sut/capabilities.h"

#include <algorithm>
#include <stdexcept>

#include "harness/base/names.h"
#include "models/registry.h"

namespace recap::sut {

namespace {

using training::ExecutorKind;

template <typename E, size_t N>
std::vector<E> all_of(const EnumName<E> (&table)[N]) {
  std::vector<E> v;
  for (const auto& e : table) v.push_back(e.value);
  return v;
}

std::vector<std::string> all_kinds() {
  std::vector<std::string> v;
  for (const auto& k : models::layer_kinds()) v.push_back(k.kind);
  return v;
}

struct Bad {
  std::string what;
};

std::string type_of(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// The strings of an array, or Bad naming the field.
std::vector<std::string> strings(const Json& j, const std::string& field) {
  if (!j.is_array()) throw Bad{field + ": expected an array of strings, got " + type_of(j)};
  std::vector<std::string> v;
  for (const auto& x : j) {
    if (!x.is_string()) throw Bad{field + ": expected an array of strings, got an element that is " + type_of(x)};
    v.push_back(x.get<std::string>());
  }
  return v;
}

// The listed values recap knows, in recap's order (the table's); Bad when none is known.
template <typename E, size_t N>
std::vector<E> read_enum(const Json& j, const std::string& field, const EnumName<E> (&table)[N]) {
  std::vector<std::string> listed = strings(j, field);
  std::vector<E> v;
  for (const auto& e : table)
    if (std::find(listed.begin(), listed.end(), e.name) != listed.end()) v.push_back(e.value);
  if (v.empty())
    throw Bad{field + ": none of its values is one recap knows (" +
              (listed.empty() ? std::string("the list is empty") : "'" + listed[0] + "'") + "; recap's: " +
              names_list(table) + ")"};
  return v;
}

std::vector<std::string> read_kinds(const Json& j, const std::string& field) {
  std::vector<std::string> listed = strings(j, field), v;
  for (const auto& k : all_kinds())
    if (std::find(listed.begin(), listed.end(), k) != listed.end()) v.push_back(k);
  if (v.empty())
    throw Bad{field + ": none of its values is a layer kind recap knows (" + models::layer_kind_list() + ")"};
  return v;
}

std::vector<bool> read_bools(const Json& j, const std::string& field) {
  if (!j.is_array()) throw Bad{field + ": expected an array of booleans, got " + type_of(j)};
  bool t = false, f = false;
  for (const auto& x : j) {
    if (!x.is_boolean()) throw Bad{field + ": expected an array of booleans, got an element that is " + type_of(x)};
    (x.get<bool>() ? t : f) = true;
  }
  if (!t && !f) throw Bad{field + ": the list is empty"};
  std::vector<bool> v;
  if (t) v.push_back(true);
  if (f) v.push_back(false);
  return v;
}

std::vector<std::string> read_orders(const Json& j, const std::string& field) {
  std::vector<std::string> listed = strings(j, field), v;
  for (const char* o : {"default", "interleaved"})
    if (std::find(listed.begin(), listed.end(), o) != listed.end()) v.push_back(o);
  if (v.empty()) throw Bad{field + ": none of its values is 'default' or 'interleaved'"};
  return v;
}

// The dimensions an object lists. `per_executor`: a restriction of one executor, where the
// dimensions that shape the whole campaign (kinds, executor, checkpoint, policy) are not allowed.
void read_dims(const Json& j, const std::string& where, bool per_executor, Dims* d) {
  if (!j.is_object()) throw Bad{where + ": expected an object, got " + type_of(j)};
  if (per_executor)
    for (const char* k : {"kinds", "executor", "checkpoint", "policy"})
      if (j.contains(k)) throw Bad{where + "." + k + ": not restricted per executor (list it at the top level)"};
  auto at = [&](const char* k) { return where + "." + k; };
  if (j.contains("kinds")) d->kinds = read_kinds(j["kinds"], at("kinds"));
  if (j.contains("dtype")) d->dtype = read_enum(j["dtype"], at("dtype"), runtime::kDTypeNames);
  if (j.contains("executor")) d->executor = read_enum(j["executor"], at("executor"), training::kExecutorNames);
  if (j.contains("checkpoint")) d->checkpoint = read_enum(j["checkpoint"], at("checkpoint"), training::kGranularityNames);
  if (j.contains("checkpoint_style"))
    d->checkpoint_style = read_enum(j["checkpoint_style"], at("checkpoint_style"), training::kStyleNames);
  if (j.contains("policy")) d->policy = read_enum(j["policy"], at("policy"), training::kPolicyNames);
  if (j.contains("generator")) d->generator = read_enum(j["generator"], at("generator"), runtime::kGeneratorModeNames);
  if (j.contains("device_state"))
    d->device_state = read_enum(j["device_state"], at("device_state"), runtime::kDeviceStateModelNames);
  if (j.contains("warmup_backward"))
    d->warmup_backward = read_enum(j["warmup_backward"], at("warmup_backward"), training::kWarmupBackwardNames);
  if (j.contains("shared_pool")) d->shared_pool = read_bools(j["shared_pool"], at("shared_pool"));
  if (j.contains("microbatch_order")) d->microbatch_order = read_orders(j["microbatch_order"], at("microbatch_order"));
  if (j.contains("shared_pool_orders")) d->shared_pool_orders = read_orders(j["shared_pool_orders"], at("shared_pool_orders"));
}

// A hello's list of group sizes ("tp": [2, 4]): the values above 1, sorted, each once.
void read_sizes(const Json& t, const std::string& name, int hi, std::vector<int>* out) {
  if (!t.is_array()) throw Bad{"capabilities." + name + ": expected an array of integers, got " + type_of(t)};
  for (const Json& x : t) {
    if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > hi)
      throw Bad{"capabilities." + name + ": expected integers in [1, " + std::to_string(hi) + "], got " +
                x.dump().substr(0, 40)};
    const int n = x.get<int>();
    if (n > 1 && std::find(out->begin(), out->end(), n) == out->end()) out->push_back(n);
  }
  std::sort(out->begin(), out->end());
}

}  // namespace

Capabilities every_value() {
  Capabilities c;
  Dims& d = c.all;
  d.kinds = all_kinds();
  d.dtype = all_of(runtime::kDTypeNames);
  d.executor = all_of(training::kExecutorNames);
  d.checkpoint = all_of(training::kGranularityNames);
  d.checkpoint_style = all_of(training::kStyleNames);
  d.policy = all_of(training::kPolicyNames);
  d.generator = all_of(runtime::kGeneratorModeNames);
  d.device_state = all_of(runtime::kDeviceStateModelNames);
  d.warmup_backward = all_of(training::kWarmupBackwardNames);
  d.shared_pool = {true, false};
  d.microbatch_order = {"default", "interleaved"};
  d.shared_pool_orders = {"default", "interleaved"};
  return c;
}

std::string capabilities_from_json(const Json& j, Capabilities* out) {
  Capabilities c = every_value();
  try {
    read_dims(j, "capabilities", /*per_executor=*/false, &c.all);
    // a rank group's sizes: tp, pp, vp and dp above 1 (1 is every system's)
    if (j.contains("tp")) read_sizes(j["tp"], "tp", 64, &c.tp);
    if (j.contains("pp")) read_sizes(j["pp"], "pp", 64, &c.pp);
    if (j.contains("vp")) read_sizes(j["vp"], "vp", 16, &c.vp);
    if (j.contains("dp")) read_sizes(j["dp"], "dp", 64, &c.dp);
    if (j.contains("tp_kinds")) c.tp_kinds = read_kinds(j["tp_kinds"], "capabilities.tp_kinds");
    if (j.contains("tp") || j.contains("pp")) c.tp_executor = c.all.executor;  // a group's executors
    if (j.contains("sp")) {  // a rank group runs its tp cases sequence parallel too
      if (!j["sp"].is_boolean()) throw Bad{"capabilities.sp: expected true or false, got " + type_of(j["sp"])};
      c.sp = j["sp"].get<bool>();
    }
    auto restrict_executor = [&](ExecutorKind e, const Json& r, const std::string& where) {
      Dims d;
      read_dims(r, where, /*per_executor=*/true, &d);
      c.per_executor[e] = d;
    };
    // torch's form: restrictions of executor per-layer alone.
    if (j.contains("per_layer")) restrict_executor(ExecutorKind::PerLayer, j["per_layer"], "capabilities.per_layer");
    if (j.contains("per_executor")) {
      const Json& p = j["per_executor"];
      if (!p.is_object()) throw Bad{"capabilities.per_executor: expected an object, got " + type_of(p)};
      for (auto it = p.begin(); it != p.end(); ++it) {
        ExecutorKind e;
        if (!training::executor_from_name(it.key(), &e))
          throw Bad{"capabilities.per_executor." + it.key() + ": unknown executor (one of: " +
                    names_list(training::kExecutorNames) + ")"};
        if (c.per_executor.count(e))
          throw Bad{"capabilities.per_executor." + it.key() + ": restricted twice (also by per_layer)"};
        restrict_executor(e, it.value(), "capabilities.per_executor." + it.key());
      }
    }
  } catch (const Bad& b) {
    return b.what;
  }
  *out = std::move(c);
  return "";
}

Json recap_capabilities_json() {
  Json styles = Json::array();
  for (const auto& s : training::kStyleNames)
    if (s.value != training::CheckpointStyle::NonReentrant) styles.push_back(s.name);  // training::unmodelled
  return {{"kinds", all_kinds()},
          {"dtype", names(runtime::kDTypeNames)},
          {"executor", names(training::kExecutorNames)},
          {"checkpoint", names(training::kGranularityNames)},
          {"checkpoint_style", styles},
          {"policy", names(training::kPolicyNames)},
          {"generator", names(runtime::kGeneratorModeNames)},
          {"device_state", names(runtime::kDeviceStateModelNames)},
          {"warmup_backward", names(training::kWarmupBackwardNames)},
          {"shared_pool", {true, false}},
          {"graphs", true}};
}

Capabilities recap_capabilities() {
  Capabilities c;
  std::string err = capabilities_from_json(recap_capabilities_json(), &c);
  if (!err.empty()) throw std::logic_error("recap's own capabilities: " + err);
  return c;
}

}  // namespace recap::sut
