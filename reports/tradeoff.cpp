#include "reports/tradeoff.h"

#include <cmath>
#include <cstdio>
#include <set>

namespace recap::reports {

namespace {

// A problem found while reading: its path and what is wrong; read_tradeoff turns it into one line.
struct Bad {
  std::string what;
};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// One object being read, with the path that names it in errors.
class Obj {
 public:
  Obj(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j.is_object()) throw Bad{(path_.empty() ? "the document" : path_) + ": must be an object"};
  }
  std::string at(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const Json& get(const std::string& key) const {
    if (!j_.contains(key)) throw Bad{at(key) + ": missing"};
    return j_.at(key);
  }
  std::string str(const std::string& key, bool required) const {
    if (!required && !has(key)) return "";
    const Json& v = get(key);
    if (!v.is_string()) throw Bad{at(key) + ": must be a string"};
    return v.get<std::string>();
  }
  std::string one_of(const std::string& key, const std::vector<std::string>& allowed) const {
    std::string v = str(key, true);
    for (const auto& a : allowed)
      if (v == a) return v;
    throw Bad{at(key) + ": must be one of " + joined(allowed) + ", got '" + v + "'"};
  }
  int integer(const std::string& key, bool required, int min = 1) const {
    if (!required && !has(key)) return 0;
    const Json& v = get(key);
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > (int64_t{1} << 30))
      throw Bad{at(key) + ": must be an integer >= " + std::to_string(min)};
    return static_cast<int>(v.get<int64_t>());
  }
  // A number, null/absent (nullopt), or recap's "nan", "inf", "-inf" for a non-finite one.
  std::optional<double> number(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return number_at(get(key), at(key));
  }
  std::optional<int64_t> bytes(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const Json& v = get(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) throw Bad{at(key) + ": must be a byte count (an integer >= 0) or null"};
    return v.get<int64_t>();
  }
  const Json& json() const { return j_; }
  const std::string& path() const { return path_; }

  static double number_at(const Json& v, const std::string& where) {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s == "nan") return std::nan("");
      if (s == "inf") return INFINITY;
      if (s == "-inf") return -INFINITY;
    }
    throw Bad{where + ": must be a number or null"};
  }

 private:
  const Json& j_;
  std::string path_;
};

std::string shortest(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

const Json& array_at(const Obj& o, const std::string& key, bool required, bool nonempty) {
  static const Json empty = Json::array();
  if (!required && !o.has(key)) return empty;
  const Json& v = o.get(key);
  if (!v.is_array()) throw Bad{o.at(key) + ": must be an array"};
  if (nonempty && v.empty()) throw Bad{o.at(key) + ": must not be empty"};
  return v;
}

StepTimes read_steps(const Obj& o) {
  StepTimes t;
  auto required = [&](const std::string& key) {
    std::optional<double> v = o.number(key);
    if (!v) throw Bad{o.at(key) + ": missing"};
    return *v;
  };
  t.median = required("median");
  t.p10 = required("p10");
  t.p90 = required("p90");
  t.mean = o.number("mean");
  if (!(t.p10 <= t.median && t.median <= t.p90))
    throw Bad{o.path() + ": needs p10 <= median <= p90, got " + shortest(t.p10) + ", " + shortest(t.median) + ", " +
              shortest(t.p90)};
  const Json& s = array_at(o, "samples", true, true);  // a spread, never a single number
  for (size_t i = 0; i < s.size(); ++i) t.samples.push_back(Obj::number_at(s[i], index(o.at("samples"), i)));
  return t;
}

Configuration read_configuration(const Obj& o) {
  Configuration c;
  c.name = o.str("name", true);
  if (c.name.empty()) throw Bad{o.at("name") + ": must not be empty"};
  c.checkpoint = o.one_of("checkpoint", {"none", "selective", "full"});
  const Json& mods = array_at(o, "selective_modules", false, false);
  for (size_t i = 0; i < mods.size(); ++i) {
    if (!mods[i].is_string()) throw Bad{index(o.at("selective_modules"), i) + ": must be a string"};
    c.selective_modules.push_back(mods[i].get<std::string>());
  }
  c.executor = o.one_of("executor", {"eager", "per-layer", "full-iteration"});
  if (o.has("choice")) {
    Obj ch(o.get("choice"), o.at("choice"));
    for (auto it = ch.json().begin(); it != ch.json().end(); ++it) {
      if (!it.value().is_string()) throw Bad{ch.at(it.key()) + ": must be a string"};
      c.choice[it.key()] = it.value().get<std::string>();
    }
  }
  c.verdict = o.one_of("verdict", {"passed", "failed", "incorrect", "crashed", "skipped", "out-of-memory"});
  c.reason = o.str("reason", false);
  const Json& fs = array_at(o, "findings", false, false);
  for (size_t i = 0; i < fs.size(); ++i) {
    Obj f(fs[i], index(o.at("findings"), i));
    c.findings.push_back({f.str("bucket", true), f.str("id", false), f.str("corpus_file", false), f.str("reason", false)});
  }
  if (o.has("step_ms")) c.step_ms = read_steps(Obj(o.get("step_ms"), o.at("step_ms")));
  c.capture_ms = o.number("capture_ms");
  c.tflops = o.number("tflops");
  c.matmul_share = o.number("matmul_share");
  c.recompute_overhead = o.number("recompute_overhead");
  if (o.has("memory")) {
    Obj m(o.get("memory"), o.at("memory"));
    c.memory = {m.bytes("peak_allocated"), m.bytes("peak_reserved"),        m.bytes("device_used"),
                m.bytes("graph_pool"),     m.bytes("capture_peak"),         m.bytes("activations_in_graphs"),
                m.bytes("saved_by_recompute")};
  }
  const Json& pl = array_at(o, "per_layer", false, false);
  for (size_t i = 0; i < pl.size(); ++i) {
    Obj l(pl[i], index(o.at("per_layer"), i));
    c.per_layer.push_back({l.integer("layer", true, 0), l.number("forward_ms"), l.number("backward_ms"),
                           l.bytes("activations_in_graphs"), l.bytes("graph_pool")});
  }
  if (o.has("judged_size")) {
    Obj js(o.get("judged_size"), o.at("judged_size"));
    JudgedSize j;
    j.hidden = js.integer("hidden", true);
    j.heads = js.integer("heads", true);
    j.ffn_hidden = js.integer("ffn_hidden", true);
    j.tokens = js.integer("tokens", true);
    j.reason = js.str("reason", true);
    if (j.reason.empty()) throw Bad{js.at("reason") + ": must not be empty"};
    if (j.hidden % j.heads != 0)
      throw Bad{js.at("heads") + ": " + std::to_string(j.heads) + " does not divide hidden " + std::to_string(j.hidden)};
    c.judged_size = j;
  }
  return c;
}

TradeoffSize read_size(const Obj& o) {
  TradeoffSize s;
  s.name = o.str("name", true);
  if (s.name.empty()) throw Bad{o.at("name") + ": must not be empty"};
  s.layers = o.integer("layers", true);
  s.hidden = o.integer("hidden", true);
  s.heads = o.integer("heads", true);
  s.ffn_hidden = o.integer("ffn_hidden", false);
  s.seq = o.integer("seq", true);
  s.micro_batch = o.integer("micro_batch", true);
  s.microbatches = o.integer("microbatches", true);
  s.dtype = o.one_of("dtype", {"bf16", "fp16", "fp32"});
  s.flops_per_step = o.number("flops_per_step");
  const Json& cs = array_at(o, "configurations", true, true);
  std::set<std::string> names;
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string path = index(o.at("configurations"), i);
    s.configurations.push_back(read_configuration(Obj(cs[i], path)));
    if (!names.insert(s.configurations.back().name).second)
      throw Bad{path + ".name: '" + s.configurations.back().name + "' names two configurations of size '" + s.name + "'"};
  }
  return s;
}

}  // namespace

std::string read_tradeoff(const Json& j, TradeoffReport* out) {
  try {
    Obj top(j, "");
    TradeoffReport r;
    Obj c(top.get("context"), "context");
    r.context.recap_version = c.str("recap_version", true);
    r.context.git_commit = c.str("git_commit", true);
    r.context.command = c.str("command", true);
    r.context.started_utc = c.str("started_utc", false);
    r.context.host = c.str("host", false);
    Obj sut(c.get("sut"), "context.sut");
    r.context.sut_name = sut.str("name", true);
    r.context.sut_version = sut.str("version", true);
    r.context.sut_device = sut.str("device", false);
    r.context.device_name = c.str("device_name", false);
    r.context.matmul_bf16_tflops = c.number("matmul_bf16_tflops");
    if (c.has("timing")) {
      Obj t(c.get("timing"), "context.timing");
      if (t.has("warmup_steps")) r.context.warmup_steps = t.integer("warmup_steps", true, 0);
      if (t.has("measured_steps")) r.context.measured_steps = t.integer("measured_steps", true, 1);
      r.context.clock = t.str("clock", false);
    }
    const Json& sizes = array_at(top, "sizes", true, true);
    std::set<std::string> names;
    for (size_t i = 0; i < sizes.size(); ++i) {
      r.sizes.push_back(read_size(Obj(sizes[i], index("sizes", i))));
      if (!names.insert(r.sizes.back().name).second)
        throw Bad{index("sizes", i) + ".name: '" + r.sizes.back().name + "' names two sizes"};
    }
    *out = std::move(r);
    return "";
  } catch (const Bad& b) {
    return b.what;
  }
}

}  // namespace recap::reports
