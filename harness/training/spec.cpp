#include "harness/training/spec.h"

#include "harness/base/json_read.h"
#include "harness/runtime/faults.h"

#include "models/registry.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

namespace recap::training {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + v[i];
  return r;
}

// The double whose shortest decimal form is the float's shortest form, so JSON shows 0.1, not
// 0.10000000149011612, and reading it back gives the same float.
double float_for_json(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string fmt_float(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// ---- reading with field paths --------------------------------------------------------------

struct ParseError {
  std::string what;
};

std::string type_of(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number_float()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

[[noreturn]] void fail(const std::string& field, const std::string& what) { throw ParseError{field + ": " + what}; }

int64_t get_int(const Json& j, const std::string& field) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) fail(field, "integer out of range");
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  fail(field, "expected an integer, got " + type_of(j));
}

int get_int32(const Json& j, const std::string& field) {
  int64_t v = get_int(j, field);
  if (v < INT32_MIN || v > INT32_MAX) fail(field, "integer out of range: " + std::to_string(v));
  return static_cast<int>(v);
}

uint64_t get_u64(const Json& j, const std::string& field) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) fail(field, "expected a non-negative integer, got " + std::to_string(v));
    return static_cast<uint64_t>(v);
  }
  fail(field, "expected a non-negative integer, got " + type_of(j));
}

double get_number(const Json& j, const std::string& field) {
  if (j.is_number()) return j.get<double>();
  fail(field, "expected a number, got " + type_of(j));
}

bool get_bool(const Json& j, const std::string& field) {
  if (j.is_boolean()) return j.get<bool>();
  fail(field, "expected true or false, got " + type_of(j));
}

std::string get_string(const Json& j, const std::string& field) {
  if (j.is_string()) return j.get<std::string>();
  fail(field, "expected a string, got " + type_of(j));
}

template <size_t N, typename E>
void get_enum(const Json& j, const std::string& field, const EnumName<E> (&t)[N], const char* what, E* out) {
  std::string s = get_string(j, field);
  if (!from_name(t, s, out)) fail(field, std::string("unknown ") + what + " '" + s + "' (one of: " + names_list(t) + ")");
}

void check_keys(const Json& obj, const std::string& where, const std::set<std::string>& known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    if (!k.empty() && k[0] == '_') continue;
    if (!known.count(k)) fail(where.empty() ? k : where + "." + k, "unknown field");
  }
}

void parse_layer(const Json& j, const std::string& where, models::LayerSpec* ls, LayerFlags* lf) {
  if (!j.is_object()) fail(where, "expected an object, got " + type_of(j));
  check_keys(j, where, {"kind", "heads", "ffn_hidden", "dropout", "checkpoint", "checkpoint_modules", "graphed"});
  if (!j.contains("kind")) fail(where + ".kind", "missing");
  ls->kind = get_string(j["kind"], where + ".kind");
  if (!models::find_layer_kind(ls->kind))
    fail(where + ".kind", "unknown layer kind '" + ls->kind + "' (one of: " + models::layer_kind_list() + ")");
  if (j.contains("heads")) ls->heads = get_int32(j["heads"], where + ".heads");
  if (j.contains("ffn_hidden")) ls->ffn_hidden = get_int32(j["ffn_hidden"], where + ".ffn_hidden");
  if (j.contains("dropout")) ls->dropout = static_cast<float>(get_number(j["dropout"], where + ".dropout"));
  if (j.contains("checkpoint")) {
    const Json& c = j["checkpoint"];
    if (c.is_boolean())
      lf->checkpoint = c.get<bool>() ? CheckpointGranularity::Full : CheckpointGranularity::None;
    else
      get_enum(c, where + ".checkpoint", kGranularityNames, "checkpoint granularity", &lf->checkpoint);
  }
  if (j.contains("checkpoint_modules")) {
    const Json& m = j["checkpoint_modules"];
    std::string f = where + ".checkpoint_modules";
    if (!m.is_array()) fail(f, "expected an array of module roles, got " + type_of(m));
    for (size_t i = 0; i < m.size(); ++i) lf->modules.push_back(get_string(m[i], f + "[" + std::to_string(i) + "]"));
  }
  if (j.contains("graphed")) lf->graphed = get_bool(j["graphed"], where + ".graphed");
}

void parse_case(const Json& j, CaseSpec* s) {
  if (!j.is_object()) fail("case", "expected a JSON object, got " + type_of(j));
  check_keys(j, "",
             {"schema", "name", "description", "expected", "hidden", "tokens", "dtype", "layers", "checkpoint_style",
              "policy", "executor", "warmup", "replays", "microbatches", "microbatch_order", "generator",
              "device_state", "warmup_backward", "shared_pool", "seeds", "lr", "tp", "pp", "vp", "dp", "sp", "faults"});
  if (j.contains("schema")) {
    std::string schema = get_string(j["schema"], "schema");
    if (schema != "recap.case/1") fail("schema", "unsupported schema '" + schema + "' (this recap reads recap.case/1)");
  }
  if (j.contains("name")) s->name = get_string(j["name"], "name");
  if (j.contains("description")) s->description = get_string(j["description"], "description");
  if (j.contains("expected")) s->expected = j["expected"];
  if (j.contains("hidden")) s->model.hidden = get_int32(j["hidden"], "hidden");
  if (j.contains("tokens")) s->model.tokens = get_int32(j["tokens"], "tokens");
  if (j.contains("dtype")) get_enum(j["dtype"], "dtype", kDTypeNames, "dtype", &s->model.dtype);
  if (!j.contains("layers")) fail("layers", "missing (a case needs at least one layer)");
  const Json& layers = j["layers"];
  if (!layers.is_array()) fail("layers", "expected an array, got " + type_of(layers));
  s->model.layers.clear();
  s->layers.clear();
  for (size_t i = 0; i < layers.size(); ++i) {
    models::LayerSpec ls;
    LayerFlags lf;
    parse_layer(layers[i], "layers[" + std::to_string(i) + "]", &ls, &lf);
    s->model.layers.push_back(ls);
    s->layers.push_back(lf);
  }
  if (j.contains("checkpoint_style")) get_enum(j["checkpoint_style"], "checkpoint_style", kStyleNames, "checkpoint style", &s->style);
  if (j.contains("policy")) get_enum(j["policy"], "policy", kPolicyNames, "policy", &s->policy);
  if (j.contains("executor")) get_enum(j["executor"], "executor", kExecutorNames, "executor", &s->executor);
  if (j.contains("warmup")) s->warmup = get_int32(j["warmup"], "warmup");
  if (j.contains("replays")) s->replays = get_int32(j["replays"], "replays");
  if (j.contains("microbatches")) s->microbatches = get_int32(j["microbatches"], "microbatches");
  if (j.contains("microbatch_order")) {
    const Json& o = j["microbatch_order"];
    if (!o.is_array()) fail("microbatch_order", "expected an array of +1/-1, got " + type_of(o));
    s->order.clear();
    for (size_t i = 0; i < o.size(); ++i) s->order.push_back(get_int32(o[i], "microbatch_order[" + std::to_string(i) + "]"));
  }
  if (j.contains("generator")) {
    get_enum(j["generator"], "generator", kGeneratorModeNames, "generator mode", &s->generator);
  }
  if (j.contains("device_state")) {
    get_enum(j["device_state"], "device_state", kDeviceStateModelNames, "device-state model", &s->device_state);
  }
  if (j.contains("warmup_backward"))
    get_enum(j["warmup_backward"], "warmup_backward", kWarmupBackwardNames, "warmup backward style", &s->warmup_backward);
  if (j.contains("shared_pool")) s->shared_pool = get_bool(j["shared_pool"], "shared_pool");
  if (j.contains("seeds")) {
    const Json& sd = j["seeds"];
    if (!sd.is_object()) fail("seeds", "expected an object {param, data, rng}, got " + type_of(sd));
    check_keys(sd, "seeds", {"param", "data", "rng"});
    if (sd.contains("param")) s->param_seed = get_u64(sd["param"], "seeds.param");
    if (sd.contains("data")) s->data_seed = get_u64(sd["data"], "seeds.data");
    if (sd.contains("rng")) s->rng_seed = get_u64(sd["rng"], "seeds.rng");
  }
  if (j.contains("lr")) s->lr = static_cast<float>(get_number(j["lr"], "lr"));
  if (j.contains("tp")) s->tp = get_int32(j["tp"], "tp");
  if (j.contains("pp")) s->pp = get_int32(j["pp"], "pp");
  if (j.contains("vp")) s->vp = get_int32(j["vp"], "vp");
  if (j.contains("dp")) s->dp = get_int32(j["dp"], "dp");
  if (j.contains("sp")) s->sp = get_bool(j["sp"], "sp");
  if (j.contains("faults")) {
    const Json& fs = j["faults"];
    if (!fs.is_array()) fail("faults", "expected an array of fault names, got " + type_of(fs));
    s->faults.clear();
    for (size_t i = 0; i < fs.size(); ++i) {
      const std::string f = "faults[" + std::to_string(i) + "]";
      std::string name = get_string(fs[i], f);
      runtime::Fault unused{};
      if (!runtime::fault_from_name(name, &unused))
        fail(f, "unknown fault '" + name + "' (known: " + names_list(runtime::kFaultNames) + ")");
      s->faults.push_back(name);
    }
  }
}

std::string range_error(const std::string& field, int64_t lo, int64_t hi, int64_t got) {
  return field + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(got);
}

}  // namespace

const std::vector<std::string>& selective_roles() {
  static const std::vector<std::string> r = {"attn_core", "mlp", "norm"};
  return r;
}

std::vector<int> CaseSpec::effective_order() const {
  if (!order.empty()) return order;
  std::vector<int> o;
  for (int m = 0; m < microbatches; ++m) {
    o.push_back(1);
    o.push_back(-1);
  }
  return o;
}

std::string CaseSpec::parallel_dims() const {
  return "tp " + std::to_string(tp) + (pp > 1 ? " pp " + std::to_string(pp) : std::string()) +
         (dp > 1 ? " dp " + std::to_string(dp) : std::string());
}

bool CaseSpec::any_checkpoint() const {
  for (const auto& l : layers)
    if (l.checkpoint != CheckpointGranularity::None) return true;
  return false;
}

CaseSpec without_checkpoints(CaseSpec s) {
  for (auto& l : s.layers) {
    l.checkpoint = CheckpointGranularity::None;
    l.modules.clear();
  }
  return s;
}

std::string validate(const CaseSpec& s) {
  const auto& m = s.model;
  if (m.hidden < 1 || m.hidden > 4096) return range_error("hidden", 1, 4096, m.hidden);
  if (m.tokens < 1 || m.tokens > 8192) return range_error("tokens", 1, 8192, m.tokens);
  if (m.layers.empty()) return "layers: a case needs at least one layer";
  if (m.layers.size() > 64) return "layers: at most 64 layers, got " + std::to_string(m.layers.size());
  if (s.layers.size() != m.layers.size())
    return "layers: " + std::to_string(s.layers.size()) + " flag entries for " + std::to_string(m.layers.size()) + " layers";
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const auto& l = m.layers[i];
    const auto& f = s.layers[i];
    std::string at = "layers[" + std::to_string(i) + "]";
    const models::LayerKind* kind = models::find_layer_kind(l.kind);
    if (!kind) return at + ".kind: unknown layer kind '" + l.kind + "' (one of: " + models::layer_kind_list() + ")";
    if (l.heads < 1 || l.heads > 64) return range_error(at + ".heads", 1, 64, l.heads);
    if (kind->uses_heads && m.hidden % l.heads != 0)
      return at + ".heads: hidden " + std::to_string(m.hidden) + " is not divisible by heads " + std::to_string(l.heads);
    if (l.ffn_hidden < 0 || l.ffn_hidden > 16384) return range_error(at + ".ffn_hidden", 0, 16384, l.ffn_hidden);
    if (!(l.dropout >= 0.0f && l.dropout < 1.0f))
      return at + ".dropout must be in [0, 1), got " + fmt_float(l.dropout);
    if (f.checkpoint == CheckpointGranularity::Selective) {
      if (f.modules.empty())
        return at + ".checkpoint_modules: a selective checkpoint names at least one module (" + join(selective_roles()) + ")";
      std::set<std::string> seen;
      for (size_t k = 0; k < f.modules.size(); ++k) {
        const auto& r = f.modules[k];
        std::string mf = at + ".checkpoint_modules[" + std::to_string(k) + "]";
        if (std::find(selective_roles().begin(), selective_roles().end(), r) == selective_roles().end())
          return mf + ": unknown module '" + r + "' (one of: " + join(selective_roles()) + ")";
        if (!seen.insert(r).second) return mf + ": module '" + r + "' named twice";
        const auto& has = kind->roles;
        if (std::find(has.begin(), has.end(), r) == has.end())
          return mf + ": a '" + l.kind + "' layer has no '" + r + "' module (" +
                 (has.empty() ? std::string("it has none; checkpoint it whole with \"full\"") : "it has: " + join(has)) + ")";
      }
      if (s.style == CheckpointStyle::WithoutOutput)
        return at + ".checkpoint: checkpoint_style without-output checkpoints whole layers only (granularity full), "
                    "this layer is selective";
    } else if (!f.modules.empty()) {
      return at + ".checkpoint_modules: only a selective checkpoint names modules (checkpoint is '" +
             granularity_name(f.checkpoint) + "')";
    }
  }
  if (s.warmup < 0 || s.warmup > 3) return range_error("warmup", 0, 3, s.warmup);
  if (s.replays < 0 || s.replays > 1000) return range_error("replays", 0, 1000, s.replays);
  if (s.steps() < 1) return "replays: a case runs at least one step (warmup + replays >= 1)";
  if (s.microbatches < 1 || s.microbatches > 16) return range_error("microbatches", 1, 16, s.microbatches);
  if (!s.order.empty()) {
    int fwd = 0, bwd = 0;
    for (size_t i = 0; i < s.order.size(); ++i) {
      int e = s.order[i];
      std::string at = "microbatch_order[" + std::to_string(i) + "]";
      if (e != 1 && e != -1)
        return at + ": " + std::to_string(e) + " is not +1 (a forward) or -1 (a backward) of the one model chunk";
      if (e == 1) ++fwd;
      if (e == -1) {
        ++bwd;
        if (bwd > fwd) return at + ": backward of microbatch " + std::to_string(bwd - 1) + " before its forward";
      }
    }
    if (fwd != bwd) return "microbatch_order: " + std::to_string(fwd) + " forwards but " + std::to_string(bwd) + " backwards";
    if (fwd != s.microbatches)
      return "microbatch_order: " + std::to_string(fwd) + " forwards for microbatches " + std::to_string(s.microbatches);
  }
  if (!std::isfinite(s.lr) || s.lr < 0.0f || s.lr > 10.0f) return "lr must be in [0, 10], got " + fmt_float(s.lr);
  if (s.tp < 1 || s.tp > 64) return range_error("tp", 1, 64, s.tp);
  if (s.pp < 1 || s.pp > 64) return range_error("pp", 1, 64, s.pp);
  if (s.dp < 1 || s.dp > 64) return range_error("dp", 1, 64, s.dp);
  if (s.tp * s.pp * s.dp > 64) {
    if (s.dp == 1)
      return "pp " + std::to_string(s.pp) + " with tp " + std::to_string(s.tp) + ": " + std::to_string(s.tp * s.pp) +
             " ranks, at most 64";
    return "dp " + std::to_string(s.dp) + " with tp " + std::to_string(s.tp) + " and pp " + std::to_string(s.pp) + ": " +
           std::to_string(s.tp * s.pp * s.dp) + " ranks, at most 64";
  }
  if (s.vp < 1 || s.vp > 16) return range_error("vp", 1, 16, s.vp);
  if (s.vp > 1 && s.pp < 2)
    return "vp: virtual pipeline stages interleave the chunks of pipeline ranks: needs pp > 1, got pp " +
           std::to_string(s.pp);
  if (s.sp && s.tp < 2)
    return "sp: sequence parallelism splits the sequence over tensor-parallel ranks: needs tp > 1, got tp " +
           std::to_string(s.tp);
  std::string model_error = models::validate(m);
  if (!model_error.empty()) return "model: " + model_error;
  return "";
}

std::string case_from_json(const Json& j, CaseSpec* out) {
  CaseSpec s;
  try {
    parse_case(j, &s);
  } catch (const ParseError& e) {
    return one_line(e.what);  // it may echo a value of the file: escaped, cut (found by tests/libfuzzer)
  }
  std::string err = validate(s);
  if (!err.empty()) return one_line(err);
  *out = std::move(s);
  return "";
}

Json case_to_json(const CaseSpec& s) {
  Json j;
  j["schema"] = "recap.case/1";
  if (!s.name.empty()) j["name"] = s.name;
  if (!s.description.empty()) j["description"] = s.description;
  j["hidden"] = s.model.hidden;
  j["tokens"] = s.model.tokens;
  j["dtype"] = dtype_name(s.model.dtype);
  Json layers = Json::array();
  for (size_t i = 0; i < s.model.layers.size(); ++i) {
    const auto& l = s.model.layers[i];
    Json e;
    e["kind"] = l.kind;
    if (models::find_layer_kind(l.kind)->uses_heads) e["heads"] = l.heads;
    if (l.ffn_hidden != 0) e["ffn_hidden"] = l.ffn_hidden;
    e["dropout"] = float_for_json(l.dropout);
    const LayerFlags f = i < s.layers.size() ? s.layers[i] : LayerFlags{};
    e["checkpoint"] = granularity_name(f.checkpoint);
    if (f.checkpoint == CheckpointGranularity::Selective) e["checkpoint_modules"] = f.modules;
    e["graphed"] = f.graphed;
    layers.push_back(e);
  }
  j["layers"] = layers;
  j["checkpoint_style"] = style_name(s.style);
  j["policy"] = policy_name(s.policy);
  j["executor"] = executor_name(s.executor);
  j["warmup"] = s.warmup;
  j["replays"] = s.replays;
  j["microbatches"] = s.microbatches;
  j["microbatch_order"] = s.effective_order();
  j["generator"] = generator_mode_name(s.generator);
  j["device_state"] = device_state_model_name(s.device_state);
  j["warmup_backward"] = warmup_backward_name(s.warmup_backward);
  j["shared_pool"] = s.shared_pool;
  j["seeds"] = {{"param", s.param_seed}, {"data", s.data_seed}, {"rng", s.rng_seed}};
  j["lr"] = float_for_json(s.lr);
  if (s.tp != 1) j["tp"] = s.tp;  // absent at 1: one-rank files and reports are unchanged
  if (s.pp != 1) j["pp"] = s.pp;
  if (s.vp != 1) j["vp"] = s.vp;
  if (s.dp != 1) j["dp"] = s.dp;
  if (s.sp) j["sp"] = true;  // absent when off, as tp and pp
  if (!s.faults.empty()) j["faults"] = s.faults;  // absent when none: files without faults are unchanged
  if (!s.expected.is_null()) j["expected"] = s.expected;
  return j;
}

std::string read_case_file(const std::string& path, CaseSpec* out, CaseFileSut* sut) {
  Json j;
  if (std::string err = read_json_file(path, &j); !err.empty()) return err;  // bounded, strict (json_read.h)
  CaseFileSut named;
  if (j.is_object() && j.contains("sut")) {
    try {
      const Json& u = j["sut"];
      if (!u.is_object()) fail("sut", "expected an object {name, version}, got " + type_of(u));
      check_keys(u, "sut", {"name", "version", "framework_mutant"});
      if (!u.contains("name")) fail("sut.name", "missing");
      named.name = get_string(u["name"], "sut.name");
      if (u.contains("version")) named.version = get_string(u["version"], "sut.version");
      if (u.contains("framework_mutant")) named.framework_mutant = get_string(u["framework_mutant"], "sut.framework_mutant");
    } catch (const ParseError& e) {
      return one_line(path, 120) + ": " + one_line(e.what);
    }
    j.erase("sut");
  }
  std::string err = case_from_json(j, out);
  if (!err.empty()) return one_line(path, 120) + ": " + err;
  if (sut) *sut = named;
  return "";
}

}  // namespace recap::training
