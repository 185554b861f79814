// recap tradeoff: what each checkpointing configuration of a GPT-like stack costs in memory and
// buys in time on one system under test, and whether it is still correct (docs/DESIGN.md, section
// 8, "Trade-off reports"). Per model size (flags, or a sweep file), every configuration of
// checkpointing (none, selective with its modules, full) x executor (eager, per-layer graphs, one
// graph of the whole step) x the system's own choices (checkpoint style, recompute policy,
// generator or RNG tracker) is
//   judged   by the oracles, as `recap replay` judges a case (properties::evaluate on the system
//            under test), on the configuration's case with --judged-replays replays: the verdict,
//            and a finding per failing check (its bucket, the known finding that accepts it, the
//            corpus file written for it);
//   measured by the system itself (sut::Sut::measure: recap's runtime in process, a framework
//            through the worker's `measure` request): --warmup steps, the capture, then --steps
//            timed steps; step times, capture time, memory figures, per layer where it can.
// With a worker system every configuration is judged first, --judge-jobs at once, and then each
// measured alone on the device (judge_all). A configuration the system's hello does not list, or
// that it skips, is listed as skipped with the reason. Everything in one report comes from this
// one run. The report is recap.tradeoff/1 (reports/schema/recap.tradeoff.schema.json); a
// plain-text table goes to stdout.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "harness/base/json_read.h"
#include "harness/cli/cli.h"
#include "harness/cli/known_findings.h"
#include "harness/cli/signals.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/phase.h"
#include "harness/sut/in_process.h"
#include "harness/training/spec.h"
#include "properties/diagnosis.h"
#include "properties/fuzz.h"
#include "properties/oracles.h"
#include "properties/oracles/oracle.h"
#include "reports/render.h"
#include "reports/report.h"
#include "reports/reporter.h"
#include "reports/results.h"
#include "reports/tradeoff.h"
#include "reports/tradeoff_writer.h"

namespace recap::cli {

using properties::Disposition;
using training::CaseSpec;

namespace {

constexpr const char* kSweepSchema = "recap.tradeoff-sweep/1";

// One model size: a stack of `layers` transformer blocks. recap.case/1 has no batch dimension: a
// micro-batch of `micro_batch` sequences of `seq` tokens is seq x micro_batch tokens, over which
// the causal attention runs as one sequence (FLOPs are counted for what runs).
struct SizeSpec {
  std::string name = "default";
  int layers = 2, hidden = 64, heads = 2, ffn_hidden = 0, seq = 32, micro_batch = 1, microbatches = 2;
  std::string dtype = "fp32";
  double dropout = 0.1;
  int tokens() const { return seq * micro_batch; }
  int ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
};

// What a sweep file says (or the flags): sizes, and the values each dimension may take. An empty
// choice list means the system's own (default_choices).
struct Sweep {
  std::vector<SizeSpec> sizes;
  std::vector<std::string> checkpoint = {"none", "selective", "full"};
  std::vector<std::vector<std::string>> selective_modules = {{"attn_core"}};
  std::vector<std::string> executor = {"eager", "per-layer", "full-iteration"};
  std::vector<std::string> style, policy, generator;
};

struct TradeoffArgs {
  std::string backend = "auto";
  std::string sweep_file, report, corpus_dir = "corpus/found", known_findings;
  SizeSpec size;
  std::vector<std::string> size_flags_given;  // which size flags the command line set
  int warmup = 3, steps = 20, judged_replays = 2;
  double fp64_budget = 1e10;
  double judge_budget = 1e8;  // elements the judged case may observe a step (observed_per_step)
  int judge_jobs = 4;         // worker processes judging at once (a worker system only)
  std::vector<std::string> faults, properties;
  bool require_memory_savings = false;
  uint64_t seed = 1;
  SutFlags sut;
};

// ---- the sweep file -------------------------------------------------------------------------

// A problem in the sweep file: its path in the document and what is wrong.
struct SweepError {
  std::string what;
};

std::string names_of(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

int int_field(const Json& o, const std::string& path, const char* key, int lo, int hi, int def, bool required) {
  if (!o.contains(key)) {
    if (required) throw SweepError{path + "." + key + ": missing"};
    return def;
  }
  const Json& v = o[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw SweepError{path + "." + key + ": must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "], got " + one_line(v.dump(), 40)};
  return static_cast<int>(v.get<int64_t>());
}

std::vector<std::string> names_field(const Json& o, const char* key, const std::vector<std::string>& allowed) {
  const Json& v = o[key];
  const std::string path = key;
  if (!v.is_array() || v.empty()) throw SweepError{path + ": must be a non-empty array of names"};
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!v[i].is_string()) throw SweepError{at + ": must be a string"};
    const std::string s = v[i].get<std::string>();
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end())
      throw SweepError{at + ": unknown value '" + one_line(s, 40) + "' (one of: " + names_of(allowed) + ")"};
    if (std::find(out.begin(), out.end(), s) != out.end()) throw SweepError{at + ": '" + s + "' is listed twice"};
    out.push_back(s);
  }
  return out;
}

template <class E, size_t N>
std::vector<std::string> enum_names(const EnumName<E> (&table)[N]) {
  std::vector<std::string> v;
  for (const auto& e : table) v.push_back(e.name);
  return v;
}

// "" or the size's problem (its dimensions against recap.case/1's ranges), one line.
std::string check_size(const SizeSpec& s) {
  auto range = [](const char* what, int v, int lo, int hi) -> std::string {
    if (v < lo || v > hi)
      return std::string(what) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v);
    return "";
  };
  for (const std::string& e : {range("layers", s.layers, 1, 64), range("hidden", s.hidden, 1, 4096),
                               range("heads", s.heads, 1, 64), range("ffn_hidden", s.ffn_hidden, 0, 16384),
                               range("seq", s.seq, 1, 8192), range("micro_batch", s.micro_batch, 1, 8192),
                               range("microbatches", s.microbatches, 1, 16)})
    if (!e.empty()) return e;
  if (s.hidden % s.heads != 0)
    return "heads " + std::to_string(s.heads) + " does not divide hidden " + std::to_string(s.hidden);
  if (static_cast<int64_t>(s.seq) * s.micro_batch > 8192)
    return "seq x micro_batch = " + std::to_string(static_cast<int64_t>(s.seq) * s.micro_batch) +
           " tokens, over recap.case/1's 8192 tokens";
  if (s.dtype != "fp32" && s.dtype != "bf16") return "dtype must be fp32 or bf16, got '" + one_line(s.dtype, 20) + "'";
  if (!(s.dropout >= 0.0 && s.dropout < 1.0)) return "dropout must be in [0, 1)";
  if (s.name.empty()) return "name must not be empty";
  for (char c : s.name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return "name '" + one_line(s.name, 40) + "' holds a character other than letters, digits, - _ .";
  return "";
}

SizeSpec read_size(const Json& j, const std::string& path) {
  if (!j.is_object()) throw SweepError{path + ": must be an object"};
  static const std::set<std::string> keys = {"name", "layers", "hidden", "heads", "ffn_hidden", "seq",
                                             "micro_batch", "microbatches", "dtype", "dropout"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!keys.count(it.key()) && it.key().rfind('_', 0) != 0)
      throw SweepError{path + ": unknown key '" + one_line(it.key(), 40) + "' (name, layers, hidden, heads, ffn_hidden, "
                       "seq, micro_batch, microbatches, dtype, dropout)"};
  SizeSpec s;
  if (!j.contains("name") || !j["name"].is_string()) throw SweepError{path + ".name: must be a string"};
  s.name = j["name"].get<std::string>();
  s.layers = int_field(j, path, "layers", 1, 64, 0, true);
  s.hidden = int_field(j, path, "hidden", 1, 4096, 0, true);
  s.heads = int_field(j, path, "heads", 1, 64, 0, true);
  s.ffn_hidden = int_field(j, path, "ffn_hidden", 0, 16384, 0, false);
  s.seq = int_field(j, path, "seq", 1, 8192, 0, true);
  s.micro_batch = int_field(j, path, "micro_batch", 1, 8192, 1, false);
  s.microbatches = int_field(j, path, "microbatches", 1, 16, 1, false);
  if (j.contains("dtype")) {
    if (!j["dtype"].is_string()) throw SweepError{path + ".dtype: must be fp32 or bf16"};
    s.dtype = j["dtype"].get<std::string>();
  }
  if (j.contains("dropout")) {
    if (!j["dropout"].is_number()) throw SweepError{path + ".dropout: must be a number in [0, 1)"};
    s.dropout = j["dropout"].get<double>();
  }
  if (std::string e = check_size(s); !e.empty()) throw SweepError{path + ": " + e};
  return s;
}

// Reads and validates a sweep file (the format: docs/DESIGN.md, "Trade-off reports"). UsageError,
// one line starting with the path, for anything wrong.
Sweep read_sweep(const std::string& path) {
  Json j;
  if (std::string err = read_json_file(path, &j); !err.empty()) throw UsageError("--sweep: " + err);
  Sweep sw;
  try {
    if (!j.is_object()) throw SweepError{"the document must be an object"};
    if (!j.contains("schema") || j["schema"] != kSweepSchema)  // first: another kind of file says what it is
      throw SweepError{std::string("schema: must be \"") + kSweepSchema + "\", got " +
                       (j.contains("schema") ? one_line(j["schema"].dump(), 40) : std::string("none"))};
    static const std::set<std::string> keys = {"schema", "sizes", "checkpoint", "selective_modules",
                                               "executor", "style", "policy", "generator"};
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!keys.count(it.key()) && it.key().rfind('_', 0) != 0)
        throw SweepError{"unknown key '" + one_line(it.key(), 40) +
                         "' (schema, sizes, checkpoint, selective_modules, executor, style, policy, generator)"};
    if (!j.contains("sizes") || !j["sizes"].is_array() || j["sizes"].empty())
      throw SweepError{"sizes: must be a non-empty array of sizes"};
    std::set<std::string> names;
    for (size_t i = 0; i < j["sizes"].size(); ++i) {
      const std::string at = "sizes[" + std::to_string(i) + "]";
      sw.sizes.push_back(read_size(j["sizes"][i], at));
      if (!names.insert(sw.sizes.back().name).second)
        throw SweepError{at + ".name: '" + sw.sizes.back().name + "' names two sizes"};
    }
    if (j.contains("checkpoint")) sw.checkpoint = names_field(j, "checkpoint", enum_names(training::kGranularityNames));
    if (j.contains("executor")) sw.executor = names_field(j, "executor", enum_names(training::kExecutorNames));
    if (j.contains("style")) sw.style = names_field(j, "style", enum_names(training::kStyleNames));
    if (j.contains("policy")) sw.policy = names_field(j, "policy", enum_names(training::kPolicyNames));
    if (j.contains("generator")) sw.generator = names_field(j, "generator", enum_names(runtime::kGeneratorModeNames));
    if (j.contains("selective_modules")) {
      const Json& m = j["selective_modules"];
      if (!m.is_array() || m.empty()) throw SweepError{"selective_modules: must be a non-empty array of module lists"};
      sw.selective_modules.clear();
      for (size_t i = 0; i < m.size(); ++i) {
        const std::string at = "selective_modules[" + std::to_string(i) + "]";
        if (!m[i].is_array() || m[i].empty()) throw SweepError{at + ": must be a non-empty array of modules"};
        std::vector<std::string> mods;
        for (size_t k = 0; k < m[i].size(); ++k) {
          const Json& v = m[i][k];
          const auto& roles = training::selective_roles();
          if (!v.is_string() || std::find(roles.begin(), roles.end(), v.get<std::string>()) == roles.end())
            throw SweepError{at + "[" + std::to_string(k) + "]: must be a module of a block (one of: " + names_of(roles) + ")"};
          if (std::find(mods.begin(), mods.end(), v.get<std::string>()) != mods.end())
            throw SweepError{at + ": '" + v.get<std::string>() + "' is listed twice"};
          mods.push_back(v.get<std::string>());
        }
        sw.selective_modules.push_back(mods);
      }
    }
  } catch (const SweepError& e) {
    throw UsageError("--sweep " + one_line(path, 120) + ": " + e.what);
  }
  return sw;
}

// ---- configurations -------------------------------------------------------------------------

// The system's own choices when the sweep does not restrict them: every value its hello lists,
// but what is no trade-off: recap's host generator under graphs is a known-broken mechanism (not a
// choice a user makes), and without-output is a style of whole ungraphed layers only.
void default_choices(const std::string& kind, const sut::Capabilities& caps, Sweep* sw) {
  if (sw->style.empty())
    for (auto st : caps.all.checkpoint_style)
      if (st != training::CheckpointStyle::WithoutOutput) sw->style.push_back(training::style_name(st));
  if (sw->style.empty()) sw->style = {"reentrant"};
  if (sw->policy.empty())
    for (auto p : caps.all.policy) sw->policy.push_back(training::policy_name(p));
  if (sw->generator.empty()) {
    if (kind == "recap" || kind == "recap-worker")
      sw->generator = {"graph-safe"};
    else
      for (auto g : caps.all.generator) sw->generator.push_back(runtime::generator_mode_name(g));
  }
}

// A configuration to run: what the report shows of it, and its case.
struct Plan {
  reports::Configuration cfg;
  CaseSpec spec;         // the measured case (replays = --steps)
  CaseSpec judged;       // the judged case (replays = --judged-replays): spec, or spec at judged_size
  std::optional<reports::JudgedSize> judged_size;  // set when the judged case is smaller than spec
  std::string skip;      // why it cannot run here, one line; "" runnable
  std::string baseline;  // the key of the configuration without checkpoints it is compared with
  std::string key;       // its own such key when it is one ("" when checkpointed)
};

template <class T>
bool listed(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Megatron's name for a generator: its RNG tracker (model_parallel_cuda_manual_seed's
// use_cudagraphable_rng).
std::string tracker_name(const std::string& generator) { return generator == "graph-safe" ? "cudagraphable" : "default"; }

// Why the system cannot run `spec`, from its hello's capabilities ("" when it lists every value).
std::string capability_gap(const CaseSpec& spec, const sut::Capabilities& caps, const std::string& who) {
  const sut::Dims& all = caps.all;
  const sut::Dims* ex = nullptr;
  if (auto it = caps.per_executor.find(spec.executor); it != caps.per_executor.end()) ex = &it->second;
  auto gap = [&](const char* dim, const std::string& value, bool in_all, bool in_ex) -> std::string {
    if (!in_all) return who + " does not run " + dim + " " + value + " (not in its hello's capabilities)";
    if (!in_ex)
      return who + " does not run " + dim + " " + value + " with executor " + training::executor_name(spec.executor) +
             " (its hello's per-executor capabilities)";
    return "";
  };
  const bool ck = spec.any_checkpoint();
  std::vector<std::string> gaps = {
      gap("executor", training::executor_name(spec.executor), listed(all.executor, spec.executor), true),
      gap("dtype", runtime::dtype_name(spec.model.dtype), listed(all.dtype, spec.model.dtype),
          !ex || ex->dtype.empty() || listed(ex->dtype, spec.model.dtype)),
      gap("kind", "block", all.kinds.empty() || listed(all.kinds, std::string("block")), true)};
  for (const auto& l : spec.layers)
    if (l.checkpoint != training::CheckpointGranularity::None)
      gaps.push_back(gap("checkpoint", training::granularity_name(l.checkpoint), listed(all.checkpoint, l.checkpoint), true));
  if (ck) {
    gaps.push_back(gap("checkpoint_style", training::style_name(spec.style), listed(all.checkpoint_style, spec.style),
                       !ex || ex->checkpoint_style.empty() || listed(ex->checkpoint_style, spec.style)));
    gaps.push_back(gap("policy", training::policy_name(spec.policy), listed(all.policy, spec.policy), true));
  }
  gaps.push_back(gap("generator", runtime::generator_mode_name(spec.generator), listed(all.generator, spec.generator),
                     !ex || ex->generator.empty() || listed(ex->generator, spec.generator)));
  for (const auto& g : gaps)
    if (!g.empty()) return g;
  return "";
}

// The first value of a dimension the executor runs: its per-executor restriction's first value,
// else `want` when the system runs it, else the system's first.
template <class T>
T pick(const std::vector<T>& all, const std::vector<T>* ex, T want) {
  if (ex && !ex->empty()) return listed(*ex, want) ? want : ex->front();
  if (all.empty() || listed(all, want)) return want;
  return all.front();
}

CaseSpec case_of(const SizeSpec& s, const std::string& checkpoint, const std::vector<std::string>& modules,
                 const std::string& executor, const std::string& style, const std::string& policy,
                 const std::string& generator, const sut::Capabilities& caps, const TradeoffArgs& a) {
  CaseSpec c;
  c.name = "tradeoff";
  c.model.hidden = s.hidden;
  c.model.tokens = s.tokens();
  runtime::dtype_from_name(s.dtype, &c.model.dtype);
  training::CheckpointGranularity g = training::CheckpointGranularity::None;
  training::granularity_from_name(checkpoint, &g);
  for (int i = 0; i < s.layers; ++i) {
    models::LayerSpec l;
    l.kind = "block";
    l.heads = s.heads;
    l.ffn_hidden = s.ffn_hidden;
    l.dropout = static_cast<float>(s.dropout);
    c.model.layers.push_back(l);
    training::LayerFlags f;
    f.checkpoint = g;
    if (g == training::CheckpointGranularity::Selective) f.modules = modules;
    f.graphed = true;
    c.layers.push_back(f);
  }
  training::executor_from_name(executor, &c.executor);
  training::style_from_name(style, &c.style);
  training::policy_from_name(policy, &c.policy);
  runtime::generator_mode_from_name(generator, &c.generator);
  const sut::Dims* ex = nullptr;
  if (auto it = caps.per_executor.find(c.executor); it != caps.per_executor.end()) ex = &it->second;
  // What the trade-off does not vary: each the system's sound value for the executor.
  c.device_state = pick(caps.all.device_state, ex ? &ex->device_state : nullptr, runtime::DeviceStateModel::Shared);
  c.warmup_backward = pick(caps.all.warmup_backward, ex ? &ex->warmup_backward : nullptr, training::WarmupBackward::Backward);
  c.shared_pool = pick(caps.all.shared_pool, ex ? &ex->shared_pool : nullptr, true);
  c.warmup = a.warmup;
  c.replays = a.steps;
  c.microbatches = s.microbatches;
  c.param_seed = a.seed;
  c.data_seed = a.seed + 1;
  c.rng_seed = a.seed + 2;
  c.faults = a.faults;
  return c;
}

std::string modules_label(const std::vector<std::string>& mods) {
  std::string s;
  for (const auto& m : mods) s += (s.empty() ? "" : "+") + m;
  return s;
}

// ---- the judged size (--judge-budget) -------------------------------------------------------

// Parameters of one recap block (models/layers.cpp, Block): two layernorms (weight and bias), qkv
// and proj, fc1 and fc2 with their biases.
double block_params(double h, double f) { return 4.0 * h * h + 2.0 * h * f + 9.0 * h + f; }

// What the judged case observes a step, in elements, by the size alone: what a framework's worker
// sends the oracles per step (drivers/PROTOCOL.md, "frames"), each gradient after every
// micro-batch's backward, those after the last backward again and the parameters after the
// update: parameters x (microbatches + 2); with dropout, one forward's masks too, per micro-batch
// and layer the attention probabilities' (heads x tokens x tokens) and the two residual branches'
// (2 x tokens x hidden). A recomputing configuration draws more (its recompute's masks), so this
// is the least any configuration of the size observes.
double observed_per_step(int layers, int hidden, int heads, int ffn, int tokens, int microbatches, double dropout) {
  const double params = layers * block_params(hidden, ffn);
  double masks = 0;
  if (dropout > 0) masks = static_cast<double>(microbatches) * layers * tokens * (static_cast<double>(heads) * tokens + 2.0 * hidden);
  return params * (microbatches + 2) + masks;
}
double observed_per_step(const SizeSpec& s) {
  return observed_per_step(s.layers, s.hidden, s.heads, s.ffn(), s.tokens(), s.microbatches, s.dropout);
}

// The size a configuration is judged at (docs/DESIGN.md, section 8, "judged size"): the size itself
// when what it observes a step is within --judge-budget, else the same stack (layers, microbatches,
// dtype, dropout) narrower and shorter: hidden min(hidden, 256), tokens min(tokens, 256), then both
// halved (not below min(hidden, 8), min(tokens, 8)) until within the budget or at that floor; heads
// the largest divisor of the hidden not above min(heads, 4); an explicit ffn_hidden scaled as the
// hidden (rounded, at least 1), 0 (4 x hidden) kept. nullopt when judged at the size itself (a
// size already at the floor is too: what would be judged is the size). *judged receives the
// judged size as a SizeSpec (seq = tokens, micro_batch 1: recap.case/1 has tokens only).
std::optional<reports::JudgedSize> judged_size(const SizeSpec& s, double budget, SizeSpec* judged) {
  *judged = s;
  const double full = observed_per_step(s);
  if (full <= budget) return std::nullopt;
  const int floor_h = std::min(s.hidden, 8), floor_t = std::min(s.tokens(), 8);
  int h = std::min(s.hidden, 256), t = std::min(s.tokens(), 256);
  auto at = [&](int hidden, int tokens) {
    SizeSpec r = s;
    r.hidden = hidden;
    r.heads = 1;
    for (int d = std::min(s.heads, 4); d >= 1; --d)
      if (hidden % d == 0) {
        r.heads = d;
        break;
      }
    if (s.ffn_hidden > 0)
      r.ffn_hidden = std::max(1, static_cast<int>(std::lround(static_cast<double>(s.ffn_hidden) * hidden / s.hidden)));
    r.seq = tokens;
    r.micro_batch = 1;
    return r;
  };
  SizeSpec r = at(h, t);
  while (observed_per_step(r) > budget && (h > floor_h || t > floor_t)) {
    h = std::max(floor_h, h / 2);
    t = std::max(floor_t, t / 2);
    r = at(h, t);
  }
  if (r.hidden == s.hidden && r.heads == s.heads && r.ffn() == s.ffn() && r.tokens() == s.tokens()) return std::nullopt;
  *judged = r;
  reports::JudgedSize js;
  js.hidden = r.hidden;
  js.heads = r.heads;
  js.ffn_hidden = r.ffn();
  js.tokens = r.tokens();
  char b[300];
  const double reduced = observed_per_step(r);
  std::snprintf(b, sizeof b, "the size's observation: %.0f elements a step, over --judge-budget %.0f; the judged size's: %.0f%s", full,
                budget, reduced, reduced > budget ? ", the rule's floor, still over it" : "");
  js.reason = b;
  return js;
}

std::vector<Plan> plan_size(const SizeSpec& s, const Sweep& sw, const std::string& kind, const sut::SutInfo& info,
                            const sut::Capabilities& caps, const TradeoffArgs& a) {
  std::vector<Plan> plans;
  const std::string who = kind + " " + info.version + " on " + info.device;
  SizeSpec judged_at;
  const std::optional<reports::JudgedSize> reduced = judged_size(s, a.judge_budget, &judged_at);
  for (const auto& ck : sw.checkpoint) {
    const bool none = ck == "none";
    std::vector<std::vector<std::string>> module_sets = {{}};
    if (ck == "selective") module_sets = sw.selective_modules;
    for (const auto& mods : module_sets)
      for (const auto& ex : sw.executor)
        for (const auto& st : none ? std::vector<std::string>{sw.style.front()} : sw.style)
          for (const auto& po : none ? std::vector<std::string>{sw.policy.front()} : sw.policy)
            for (const auto& gen : sw.generator) {
              Plan p;
              reports::Configuration& c = p.cfg;
              c.checkpoint = ck;
              c.selective_modules = mods;
              c.executor = ex;
              if (!none) {
                c.choice["style"] = st;
                c.choice["recompute"] = po;
              }
              c.choice["generator"] = gen;
              if (kind == "megatron") c.choice["tracker"] = tracker_name(gen);
              std::string name = ck + (mods.empty() ? "" : "(" + modules_label(mods) + ")") + "/" + ex;
              if (!none) name += "/" + st + "/" + po;
              name += "/" + (kind == "megatron" ? tracker_name(gen) : gen);
              c.name = name;
              p.spec = case_of(s, ck, mods, ex, st, po, gen, caps, a);
              // the judged case: the same configuration, at the judged size when it is not the size
              p.judged = reduced ? case_of(judged_at, ck, mods, ex, st, po, gen, caps, a) : p.spec;
              p.judged.replays = a.judged_replays;
              p.judged_size = reduced;
              p.baseline = ex + "/" + gen;
              if (none) p.key = p.baseline;
              if (std::string e = training::validate(p.spec); !e.empty())
                p.skip = "recap.case/1 cannot express it: " + e;
              else if (std::string e = training::validate(p.judged); !e.empty())
                p.skip = "recap.case/1 cannot express its judged case: " + e;
              else if (std::string g = capability_gap(p.spec, caps, who); !g.empty())
                p.skip = g;
              plans.push_back(std::move(p));
            }
  }
  return plans;
}

// ---- measuring and judging ------------------------------------------------------------------

// Model FLOPs of one step, forward and backward (3x the forward), recomputation not counted: per
// layer and token the four projections (qkv, proj, fc1, fc2), and the attention core over every
// pair of the micro-batch's tokens (recap's attention computes the whole T x T square).
double flops_per_step(const SizeSpec& s) {
  const double T = s.tokens(), h = s.hidden, f = s.ffn();
  const double forward = 2.0 * T * (4.0 * h * h + 2.0 * h * f) + 4.0 * T * T * h;
  return 3.0 * forward * s.layers * s.microbatches;
}

// Multiply-adds of the fp64 reference oracle for the case, as reference.cpp bounds it (bf16 one
// unit per distinct layer, fewer tokens past its budget).
double reference_cost(const CaseSpec& spec) {
  models::ModelSpec m = spec.model;
  if (m.dtype == models::DType::BF16 && m.layers.size() > 1) m.layers.resize(1);  // every block is the same
  double cost = properties::fp64_macs(m);
  if (cost > properties::kReferenceMacBudget && m.tokens > 8) {
    m.tokens = std::max(8, static_cast<int>(m.tokens * properties::kReferenceMacBudget / cost));
    cost = properties::fp64_macs(m);
  }
  return cost;
}

double percentile(std::vector<double> v, double q) {  // linear between the nearest ranks
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

reports::StepTimes step_times(const std::vector<double>& samples) {
  reports::StepTimes t;
  t.samples = samples;
  t.median = percentile(samples, 0.5);
  t.p10 = percentile(samples, 0.1);
  t.p90 = percentile(samples, 0.9);
  double sum = 0;
  for (double v : samples) sum += v;
  t.mean = sum / static_cast<double>(samples.size());
  return t;
}

std::string bucket_as_failure(const std::string& finding) {
  // A finding that is no failure (recap fuzz's summary lists it) under the bucket it would have as
  // one: the skip policy's lost saving is memory/incorrect/// with --require-memory-savings.
  const std::string property = finding.substr(0, finding.find(':'));
  return property == "memory" ? "memory/incorrect///" : property + "/passed///";
}

struct Outcome {
  Plan plan;
  properties::CaseReport judged;       // the oracles' report on the judged case
  std::optional<sut::Measurement> measured;
  std::string not_measured;            // why there is no measurement
  bool new_failure = false;            // failing, and no known finding accepts it
  bool judged_done = false;            // the oracles ran on it (a stop signal can come first)
};

// ---- output ---------------------------------------------------------------------------------

std::string human_bytes(const std::optional<int64_t>& b) {
  if (!b) return "-";
  char buf[32];
  const double v = static_cast<double>(*b);
  if (v >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1024.0 * 1024 * 1024));
  else if (v >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", v / (1024.0 * 1024));
  else if (v >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024.0);
  else std::snprintf(buf, sizeof buf, "%" PRId64 " B", *b);
  return buf;
}

std::string fixed(const std::optional<double>& v, const char* fmt) {
  if (!v || !std::isfinite(*v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

void print_size_table(const SizeSpec& s, const reports::TradeoffSize& size, const std::string& clock) {
  std::printf("\nsize %s: %d layers, hidden %d, %d heads, ffn %d, seq %d x micro-batch %d (%d tokens), %d microbatches, %s, "
              "dropout %g; %.3g FLOP a step\n",
              s.name.c_str(), s.layers, s.hidden, s.heads, s.ffn(), s.seq, s.micro_batch, s.tokens(), s.microbatches,
              s.dtype.c_str(), s.dropout, flops_per_step(s));
  std::printf("  step times: %s\n", clock.c_str());
  int w = 13;
  for (const auto& c : size.configurations) w = std::max(w, static_cast<int>(c.name.size()));
  std::printf("  %-*s %-13s %9s %17s %8s %10s %10s %10s %10s %10s %9s\n", w, "configuration", "verdict", "median ms",
              "p10-p90 ms", "TFLOP/s", "peak alloc", "peak resv", "graph pool", "act graphs", "saved", "overhead");
  std::vector<std::string> notes;
  for (const auto& c : size.configurations) {
    std::string verdict = c.verdict + (c.findings.empty() ? "" : "*");
    std::string spread = "-";
    if (c.step_ms) spread = fixed(c.step_ms->p10, "%.3f") + "-" + fixed(c.step_ms->p90, "%.3f");
    std::string overhead = c.recompute_overhead ? fixed(*c.recompute_overhead * 100.0, "%+.1f%%") : "-";
    std::printf("  %-*s %-13s %9s %17s %8s %10s %10s %10s %10s %10s %9s\n", w, c.name.c_str(), verdict.c_str(),
                c.step_ms ? fixed(c.step_ms->median, "%.3f").c_str() : "-", spread.c_str(), fixed(c.tflops, "%.3g").c_str(),
                human_bytes(c.memory.peak_allocated).c_str(), human_bytes(c.memory.peak_reserved).c_str(),
                human_bytes(c.memory.graph_pool).c_str(), human_bytes(c.memory.activations_in_graphs).c_str(),
                human_bytes(c.memory.saved_by_recompute).c_str(), overhead.c_str());
    for (const auto& f : c.findings)
      notes.push_back(c.name + ": " + (f.id.empty() ? "" : f.id + " ") + f.bucket +
                      (f.corpus_file.empty() ? "" : " (recap replay " + f.corpus_file + ")") +
                      (f.reason.empty() ? "" : ": " + f.reason));
    if (c.verdict == "skipped" || (c.verdict != "passed" && !c.reason.empty() && c.findings.empty()))
      notes.push_back(c.name + ": " + c.verdict + ": " + c.reason);
  }
  for (const auto& n : reports::judged_size_notes(size)) std::printf("  judged size: %s\n", one_line(n, 400).c_str());
  if (!notes.empty()) std::printf("  * findings and reasons:\n");
  for (const auto& n : notes) std::printf("    %s\n", one_line(n, 400).c_str());
}

// The command line that ran, for the report (so it can be run again): /proc/self/cmdline, each
// argument quoted for a POSIX shell where it needs it.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    std::string arg = all.substr(start, end - start);
    bool plain = !arg.empty();
    for (char c : arg)
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::string("@%+=:,./_-").find(c) != std::string::npos);
    if (!plain) {
      std::string q = "'";
      for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = q + "'";
    }
    out += (out.empty() ? "" : " ") + arg;
    start = end + 1;
  }
  return out.empty() ? "recap tradeoff" : out;
}

// ---- judging and measuring a configuration --------------------------------------------------

// The oracles' report on a configuration's judged case: the case, shorter (--judged-replays), at
// the judged size (--judge-budget), through every oracle the run can afford (opts.properties is
// set here); those it cannot are listed as skipped with the reason. On opts.sut, or recap's runtime
// in this process when it is null.
properties::CaseReport judge_plan(const Plan& p, properties::OracleOptions opts, const TradeoffArgs& a) {
  const CaseSpec& judged = p.judged;
  std::vector<std::string> run_props;
  std::map<std::string, std::string> why_not;
  const double cost = reference_cost(judged);
  for (const auto& prop : properties::property_names()) {
    if (properties::opt_in_property(prop)) continue;  // differential: never asked for here
    if (!a.properties.empty() && !listed(a.properties, prop)) why_not[prop] = "not selected (--property)";
    else if (prop == "reference" && cost > a.fp64_budget) {
      char b[200];
      std::snprintf(b, sizeof b, "the fp64 reference would take %.3g multiply-adds, over --fp64-budget %.3g", cost,
                    a.fp64_budget);
      why_not[prop] = b;
    } else
      run_props.push_back(prop);
  }
  opts.properties = run_props;
  if (!opts.sut) runtime::reset_phase_flags();  // each case as in a fresh process (a leaky fault)
  properties::CaseReport rep = properties::evaluate(judged, opts);
  if (!why_not.empty()) {  // in the registry's order, with the checks that ran
    std::vector<properties::CheckResult> all;
    for (const auto& prop : properties::property_names()) {
      if (properties::opt_in_property(prop)) continue;
      if (auto w = why_not.find(prop); w != why_not.end()) {
        all.push_back(properties::skipped(prop, w->second));
        continue;
      }
      for (const auto& c : rep.checks)
        if (c.property == prop) all.push_back(c);
    }
    rep.checks = all;
  }
  return rep;
}

// Measures a judged configuration when its verdict allows it (o->measured), else says why not
// (o->not_measured); the clock that timed it goes into *clocks.
void measure_plan(Outcome* o, sut::Sut& measurer, std::set<std::string>* clocks) {
  const Disposition d = o->judged.disposition;
  if (d == Disposition::Skipped || d == Disposition::OutOfMemory) {
    o->not_measured = d == Disposition::Skipped ? "skipped by the oracles" : "out of device memory when judged";
  } else if (d == Disposition::Failed || d == Disposition::Crashed) {
    // it does not run to its end (a capture error, a backward that never ends): no steady state to time
    o->not_measured = "the judged run " + properties::disposition_name(d) + ": not measured";
  } else {
    try {
      o->measured = measurer.measure(o->plan.spec);
      clocks->insert(o->measured->clock);
    } catch (const sut::SkippedBySut& e) {
      o->not_measured = std::string("the system did not measure it: ") + e.what();
    } catch (const runtime::DeviceError& e) {
      o->not_measured = e.status == device::Status::MemoryAllocation ? std::string("out of device memory: ") + e.what()
                                                                      : std::string("the measured run threw: ") + e.what();
    } catch (const std::exception& e) {
      o->not_measured = std::string("the measured run crashed: ") + e.what();
    }
  }
}

// "; the request took X s: data a s, model_build b s, run c s, cleanup d s" from a worker's own
// timings, else "": what a configuration's measurement costs beyond its timed steps.
std::string request_breakdown(const Outcome& o) {
  if (!o.measured || !o.measured->request_ms) return "";
  std::string s = "; the request took " + fixed(*o.measured->request_ms / 1e3, "%.1f") + " s";
  const char* sep = ": ";
  for (const auto& [k, v] : o.measured->request_phases_ms) {
    std::string name = k.size() > 3 && k.compare(k.size() - 3, 3, "_ms") == 0 ? k.substr(0, k.size() - 3) : k;
    s += sep + name + " " + fixed(v / 1e3, "%.1f") + " s";
    sep = ", ";
  }
  const std::string& why = o.measured->worker_replaced;
  if (why.rfind("retire", 0) == 0)
    s += "; the worker then retired" + (why.size() > 6 ? why.substr(6) : std::string(" (memory still held)")) +
         ", the next starts a new one";
  else if (!why.empty()) s += "; the worker then exited (" + why + ")";
  return s;
}

std::string verdict_of(const Outcome& o) {
  return o.plan.skip.empty() ? properties::disposition_name(o.judged.disposition) : "skipped";
}

// " (judged at hidden H, T tokens)" for a configuration judged at a smaller size, else "".
std::string judged_at(const Plan& p) {
  return p.skip.empty() && p.judged_size ? " (judged at hidden " + std::to_string(p.judged_size->hidden) + ", " +
                                               std::to_string(p.judged_size->tokens) + " tokens)"
                                         : "";
}

// --judge-jobs N with a worker system: judges every runnable configuration (o.judged) in up to N
// threads, taking them in plan order, each thread with a worker process of its own: the first
// thread (this one) the system's, the others one each started as it was (make_sut), which a thread
// stops once no configuration is left, so none is on the device when the measuring starts. A
// worker holds one case at a time and recap's in-process work is thread-safe (the fault lock,
// harness/runtime/faults.h, serializes the Sessions a worker's frames are built in), so what each
// configuration is judged to be does not depend on N. The first error of a thread (a worker that
// cannot start) is thrown once every thread has stopped.
void judge_all(std::vector<std::vector<Outcome>>& outcomes, const std::vector<SizeSpec>& sizes,
               const properties::OracleOptions& opts, const SystemUnderTest& system, const TradeoffArgs& a,
               const std::string& backend) {
  struct Item {
    Outcome* o;
    const SizeSpec* size;
  };
  std::vector<Item> todo;
  for (size_t si = 0; si < outcomes.size(); ++si)
    for (Outcome& o : outcomes[si])
      if (o.plan.skip.empty()) todo.push_back({&o, &sizes[si]});
  if (todo.empty()) return;
  const size_t jobs = std::min(static_cast<size_t>(a.judge_jobs), todo.size());
  std::fprintf(stderr, "tradeoff: judging %zu configurations with %zu %s worker%s, then measuring them one at a time\n",
               todo.size(), jobs, system.kind.c_str(), jobs == 1 ? "" : "s");
  std::atomic<size_t> next{0}, judged{0};
  std::atomic<bool> stop{false};
  std::vector<std::exception_ptr> errors(jobs);
  auto work = [&](size_t t) {
    try {
      std::optional<SystemUnderTest> own;  // threads after the first: a worker of their own, stopped at the end
      properties::OracleOptions mine = opts;
      if (t > 0) {
        try {
          own = make_sut(a.sut, a.sut.sut, backend);
        } catch (const UsageError& e) {
          throw UsageError("--judge-jobs " + std::to_string(a.judge_jobs) + ": judging worker " + std::to_string(t + 1) +
                           " did not start: " + e.what());
        }
        // the same system, or verdicts of two systems in one report
        if (own->info.version != system.info.version || own->info.device != system.info.device ||
            own->info.capabilities != system.info.capabilities)
          throw UsageError("--judge-jobs: judging worker " + std::to_string(t + 1) + " is " + own->kind + " " +
                           own->info.version + " on " + own->info.device + " (its hello), the first " + system.kind + " " +
                           system.info.version + " on " + system.info.device);
        mine.sut = own->sut;
      }
      for (size_t i = next++; !stop && !stop_flag()->load() && i < todo.size(); i = next++) {
        Outcome& o = *todo[i].o;
        o.judged = judge_plan(o.plan, mine, a);
        o.judged_done = true;
        std::fprintf(stderr, "tradeoff: judged [%zu/%zu] %s %s: %s%s\n", ++judged, todo.size(), todo[i].size->name.c_str(),
                     o.plan.cfg.name.c_str(), verdict_of(o).c_str(), judged_at(o.plan).c_str());
      }
    } catch (...) {
      errors[t] = std::current_exception();
      stop = true;
    }
  };
  std::vector<std::thread> threads;
  try {
    for (size_t t = 1; t < jobs; ++t) threads.emplace_back(work, t);
  } catch (...) {  // no thread: stop those started before unwinding past them
    stop = true;
    for (auto& th : threads) th.join();
    throw;
  }
  work(0);
  for (auto& th : threads) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// ---- the command ----------------------------------------------------------------------------

int tradeoff(const TradeoffArgs& a) {
  // SIGINT or SIGTERM (a `timeout`): no new configuration starts, the one running finishes, and
  // the report holds what ran, the rest "not run" (a compute-bound sweep is minutes per system).
  install_stop_handlers();
  const auto started = std::chrono::steady_clock::now();
  auto elapsed_s = [started] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  check_output_file("--report", a.report);
  check_output_dir("--corpus-dir", a.corpus_dir);
  Sweep sw;
  if (!a.sweep_file.empty()) {
    if (!a.size_flags_given.empty())
      throw UsageError(a.size_flags_given.front() + ": the sweep file gives the sizes (no size flag with --sweep)");
    sw = read_sweep(a.sweep_file);
  } else {
    if (std::string e = check_size(a.size); !e.empty()) throw UsageError("size: " + e);
    sw.sizes = {a.size};
  }
  if (std::string e = properties::unknown_property(a.properties); !e.empty()) throw UsageError("--property: " + e);
  for (const auto& prop : a.properties)
    if (properties::opt_in_property(prop)) throw UsageError("--property " + prop + ": recap tradeoff does not judge it (recap fuzz --differential does)");
  if (!std::isfinite(a.fp64_budget)) throw UsageError("--fp64-budget: must be a finite number of multiply-adds");
  if (!std::isfinite(a.judge_budget)) throw UsageError("--judge-budget: must be a finite number of elements");
  SutChoice choice;
  if (std::string e = parse_sut(a.sut.sut, &choice); !e.empty()) throw UsageError("--sut: " + e);
  if (choice.kind == "recap-worker")
    throw UsageError("--sut recap-worker: recap tradeoff measures recap's runtime in this process: use --sut recap");
  if (!a.faults.empty()) {
    uint64_t mask = 0;
    if (std::string e = runtime::fault_mask_of(a.faults, &mask); !e.empty()) throw UsageError("--fault: " + e);
    if (choice.kind != "recap") throw UsageError("--fault: fault points are recap's own runtime's; --sut " + a.sut.sut + " has none");
    if (std::string k = runtime::process_killing_fault(a.faults); !k.empty())
      throw UsageError("--fault " + k + " kills the process that runs the case: recap tradeoff runs recap's runtime in process");
  }
  KnownFindings known = read_known_findings(a.known_findings);
  if (!known.sut_name.empty() && known.sut_name != choice.kind)
    throw UsageError("--known-findings " + a.known_findings + ": its findings are " + known.sut_name + "'s, this run's system is " +
                     choice.kind);
  const std::string backend = device::backend_name(open_device(a.backend)->backend());
  if (a.sut.ranks > 0) throw UsageError("--ranks: recap tradeoff does not measure rank groups");
  SystemUnderTest system = make_sut(a.sut, a.sut.sut, backend);
  default_choices(choice.kind, system.caps, &sw);
  device::BackendChoice backend_choice = backend == "cuda" ? device::BackendChoice::Cuda : device::BackendChoice::Sim;
  auto in_process = std::make_shared<sut::InProcessSut>(backend_choice);
  sut::Sut& measurer = system.sut ? *system.sut : *in_process;

  reports::TradeoffReport report;
  reports::TradeoffContext& ctx = report.context;
  ctx.recap_version = "0.1.0";
  ctx.git_commit = reports::git_commit();
  ctx.command = command_line();
  ctx.started_utc = reports::utc_now_iso8601();
  ctx.host = reports::host_name();
  ctx.sut_name = system.kind;
  ctx.sut_version = system.info.version;
  ctx.sut_device = system.info.device;
  ctx.device_name = system.info.device;
  ctx.warmup_steps = a.warmup;
  ctx.measured_steps = a.steps;
  std::string matmul_why;
  ctx.matmul_bf16_tflops = measurer.matmul_bf16_tflops(&matmul_why);
  if (ctx.matmul_bf16_tflops)
    std::fprintf(stderr, "tradeoff: bf16 matmul rate %.1f TFLOP/s on %s\n", *ctx.matmul_bf16_tflops, ctx.device_name.c_str());

  properties::OracleOptions opts;
  opts.backend = backend_choice;
  opts.require_memory_savings = a.require_memory_savings;
  opts.sut = system.sut;
  std::set<std::string> clocks;
  std::vector<std::vector<Outcome>> outcomes;
  int total = 0, done = 0;
  std::vector<std::vector<Plan>> plans;
  for (const auto& s : sw.sizes) {
    plans.push_back(plan_size(s, sw, system.kind, system.info, system.caps, a));
    total += static_cast<int>(plans.back().size());
  }
  for (size_t si = 0; si < sw.sizes.size(); ++si) {
    outcomes.emplace_back();
    for (const Plan& p : plans[si]) {
      Outcome o;
      o.plan = p;
      outcomes.back().push_back(std::move(o));
    }
  }
  // A worker system with --judge-jobs above 1: every configuration judged first, by up to N worker
  // processes at once, and then measured one after the other, alone on the device. Otherwise (recap's
  // runtime in process, whose runs share the process's state; --judge-jobs 1) each configuration is
  // judged and then measured before the next.
  const bool judged_first = system.sut && a.judge_jobs > 1;
  if (judged_first) {
    judge_all(outcomes, sw.sizes, opts, system, a, backend);
    std::fprintf(stderr, "tradeoff: judging ended at %.0f s; measuring\n", elapsed_s());
  }
  std::string interrupted;
  for (size_t si = 0; si < sw.sizes.size(); ++si) {
    for (Outcome& o : outcomes[si]) {
      Plan& p = o.plan;
      ++done;
      if (p.skip.empty() && stop_flag()->load()) {
        const std::string why = std::string("recap tradeoff was interrupted (") + strsignal(stop_signal()) + ") before ";
        if (o.judged_done) o.not_measured = "not measured: " + why + "its measurement";
        else p.skip = "not run: " + why + "this configuration";
      } else if (p.skip.empty()) {
        if (!judged_first) {
          o.judged = judge_plan(p, opts, a);
          o.judged_done = true;
        }
        measure_plan(&o, measurer, &clocks);
      }
      std::fprintf(stderr, "tradeoff: [%d/%d] %s %s: %s%s%s (at %.0f s%s)\n", done, total, sw.sizes[si].name.c_str(),
                   p.cfg.name.c_str(), verdict_of(o).c_str(), judged_at(p).c_str(),
                   o.measured && !o.measured->step_ms.empty()
                       ? (" " + fixed(percentile(o.measured->step_ms, 0.5), "%.3f") + " ms").c_str()
                       : "",
                   elapsed_s(), request_breakdown(o).c_str());
    }
  }
  const int rc_if_stopped = exit_code_after_stop(0, &interrupted);
  if (clocks.count("cuda-events")) ctx.clock = "cuda-events: each step's work timed between two CUDA events on its stream";
  else if (clocks.count("host-clock"))
    ctx.clock = backend == "sim" || system.info.device == "cpu"
                    ? "host-clock: no GPU (" + system.info.device +
                          "): the host's steady clock around each step's work, which ends with a synchronization"
                    : "host-clock: the host's steady clock around each step's work, which ends with a synchronization";

  // The report: configurations with their verdicts, findings and figures; the baselines without
  // checkpoints give saved bytes and the recompute overhead.
  int new_failures = 0;
  Json sizes_extra = Json::array();
  for (size_t si = 0; si < sw.sizes.size(); ++si) {
    const SizeSpec& s = sw.sizes[si];
    reports::TradeoffSize size;
    size.name = s.name;
    size.layers = s.layers;
    size.hidden = s.hidden;
    size.heads = s.heads;
    size.ffn_hidden = s.ffn();
    size.seq = s.seq;
    size.micro_batch = s.micro_batch;
    size.microbatches = s.microbatches;
    size.dtype = s.dtype;
    size.flops_per_step = flops_per_step(s);
    std::map<std::string, const Outcome*> baselines;
    for (const Outcome& o : outcomes[si])
      if (!o.plan.key.empty() && o.measured && !o.measured->step_ms.empty()) baselines[o.plan.key] = &o;
    Json configs_extra = Json::array();
    for (Outcome& o : outcomes[si]) {
      reports::Configuration c = o.plan.cfg;
      Json extra = Json::object();
      if (!o.plan.skip.empty()) {
        c.verdict = "skipped";
        c.reason = o.plan.skip;
      } else {
        const properties::CaseReport& rep = o.judged;
        c.judged_size = o.plan.judged_size;  // the verdict is of that size, the figures of this one
        c.verdict = properties::disposition_name(rep.disposition);
        if (rep.disposition == Disposition::Skipped) {
          for (const auto& ch : rep.checks)
            if (ch.disposition == Disposition::Skipped && c.reason.empty() && ch.property == "capture_clean") c.reason = ch.reason;
          if (c.reason.empty()) c.reason = "every check was skipped";
        } else if (properties::failing(rep.disposition)) {
          c.reason = rep.first_failure();
        } else if (rep.disposition == Disposition::OutOfMemory) {
          for (const auto& ch : rep.checks)
            if (ch.disposition == Disposition::OutOfMemory && c.reason.empty()) c.reason = ch.reason;
        }
        if (const properties::CheckResult* f = properties::first_failing_check(rep)) {
          reports::TradeoffFinding tf;
          tf.bucket = properties::bucket_of(rep);
          tf.id = accepting_finding(known, tf.bucket, rep.spec);
          tf.reason = f->property + ": " + f->reason;
          if (tf.id.empty()) {
            o.new_failure = true;
            ++new_failures;
            reports::FailureRecord fr;
            fr.case_json = training::case_to_json(rep.spec);
            fr.report = properties::case_report_to_json(rep);
            fr.property = f->property;
            fr.disposition = properties::disposition_name(rep.disposition);
            fr.error = f->cuda_error;
            fr.api = f->api;
            fr.reason = rep.first_failure();
            fr.diagnosis = properties::diagnose(rep);
            fr.bucket = tf.bucket;
            reports::CorpusContext cc;
            cc.sut_name = system.kind;
            cc.sut_version = system.info.version;
            cc.require_memory_savings = a.require_memory_savings && f->property == "memory";
            cc.found_by = "recap tradeoff (size " + s.name + ", configuration " + c.name +
                          (c.judged_size ? ", judged at hidden " + std::to_string(c.judged_size->hidden) + ", " +
                                               std::to_string(c.judged_size->tokens) + " tokens"
                                         : "") +
                          ")";
            std::string err;
            tf.corpus_file = reports::write_corpus_entry(a.corpus_dir, fr, cc, &err);
            if (tf.corpus_file.empty()) throw UsageError("--corpus-dir: " + err);
          }
          c.findings.push_back(tf);
        }
        for (const auto& line : rep.findings) {
          reports::TradeoffFinding tf;
          tf.bucket = bucket_as_failure(line);
          tf.id = accepting_finding(known, tf.bucket, rep.spec);
          tf.reason = line;
          c.findings.push_back(tf);
        }
        Json checks = Json::array();
        for (const auto& ch : rep.checks) {
          Json k = {{"property", ch.property}, {"disposition", properties::disposition_name(ch.disposition)}};
          if (!ch.reason.empty()) k["reason"] = ch.reason;
          if (!ch.evidence.empty()) k["evidence"] = ch.evidence;
          checks.push_back(k);
        }
        extra["checks"] = checks;
        extra["case"] = training::case_to_json(rep.spec);  // the judged case: `recap replay` runs it again
      }
      if (!o.not_measured.empty() && o.plan.skip.empty()) extra["not_measured"] = o.not_measured;
      if (o.measured) {
        const sut::Measurement& m = *o.measured;
        if (!m.step_ms.empty() && static_cast<int>(m.step_ms.size()) == a.steps) {
          c.step_ms = step_times(m.step_ms);
          if (c.step_ms->median > 0) {
            c.tflops = size.flops_per_step.value_or(0) / (c.step_ms->median * 1e-3) / 1e12;
            if (ctx.matmul_bf16_tflops && *ctx.matmul_bf16_tflops > 0) c.matmul_share = *c.tflops / *ctx.matmul_bf16_tflops;
          }
        } else {
          extra["not_measured"] = "the measured run ended after " + std::to_string(m.step_ms.size()) + " of " +
                                  std::to_string(a.steps) + " timed steps" + (m.failure.empty() ? "" : ": " + m.failure);
          if (!m.step_ms.empty()) extra["partial_step_ms"] = m.step_ms;
        }
        if (!m.failure.empty()) extra["measured_failure"] = m.failure;
        c.capture_ms = m.capture_ms;
        c.memory.peak_allocated = m.peak_allocated;
        c.memory.peak_reserved = m.peak_reserved;
        c.memory.device_used = m.device_used;
        c.memory.graph_pool = m.graph_pool;
        c.memory.capture_peak = m.capture_peak;
        c.memory.activations_in_graphs = m.activations_in_graphs;
        for (const auto& l : m.per_layer)
          c.per_layer.push_back({l.layer, l.forward_ms, l.backward_ms, l.activations_in_graphs, l.graph_pool});
        if (!m.note.empty()) extra["note"] = m.note;
        if (m.request_ms) {  // the worker's own account of the request (timings aside, as every time)
          Json r = {{"request_ms", *m.request_ms}};
          for (const auto& [k, v] : m.request_phases_ms) r[k] = v;
          if (!m.worker_replaced.empty()) r["worker_replaced"] = m.worker_replaced;
          extra["measure_timings"] = r;
        }
        // against the same executor (and generator) without checkpoints
        if (o.plan.key.empty()) {
          if (auto b = baselines.find(o.plan.baseline); b != baselines.end() && b->second->measured) {
            const sut::Measurement& base = *b->second->measured;
            const bool graphed = c.executor != "eager";
            const std::optional<int64_t> mine = graphed ? m.activations_in_graphs : m.activations_eager;
            const std::optional<int64_t> theirs = graphed ? base.activations_in_graphs : base.activations_eager;
            if (mine && theirs) c.memory.saved_by_recompute = std::max<int64_t>(0, *theirs - *mine);
            if (c.step_ms && static_cast<int>(base.step_ms.size()) == a.steps) {
              const double base_median = percentile(base.step_ms, 0.5);
              if (base_median > 0) c.recompute_overhead = c.step_ms->median / base_median - 1.0;
            }
            extra["baseline"] = b->second->plan.cfg.name;
          }
        }
        extra["memory"] = {{"activations_eager", m.activations_eager ? Json(*m.activations_eager) : Json(nullptr)}};
      }
      size.configurations.push_back(c);
      configs_extra.push_back(extra);
    }
    report.sizes.push_back(size);
    sizes_extra.push_back({{"tokens", s.tokens()},
                           {"dropout", s.dropout},
                           {"observed_per_step", static_cast<int64_t>(std::llround(observed_per_step(s)))},
                           {"configurations", configs_extra}});
  }

  // The JSON: the model's fields, then recap tradeoff's own (the schema allows more).
  Json j = reports::tradeoff_to_json(report);
  j["context"]["backend"] = backend;
  j["context"]["timing"]["note"] =
      "step_ms: each timed step's work, from the step's first kernel to its end (the upload of its data before it and "
      "the downloads of its results after it left out); warmup steps and the capture are not timed";
  if (!ctx.matmul_bf16_tflops) j["context"]["matmul_note"] = matmul_why;
  j["context"]["oracles"] = {{"judged_replays", a.judged_replays},
                             {"properties", a.properties.empty() ? Json("all") : Json(a.properties)},
                             {"require_memory_savings", a.require_memory_savings},
                             {"fp64_budget", a.fp64_budget},
                             {"judge_budget", a.judge_budget},
                             {"known_findings", a.known_findings},
                             {"corpus_dir", a.corpus_dir}};
  j["context"]["seed"] = a.seed;
  if (!interrupted.empty()) j["context"]["interrupted"] = interrupted;
  if (!a.faults.empty()) j["context"]["faults"] = a.faults;
  j["context"]["model_note"] =
      "a stack of `layers` recap blocks (pre-norm attention and MLP with dropout); recap.case/1 has no batch dimension, "
      "so a micro-batch is seq x micro_batch tokens and its causal attention spans them as one sequence; flops_per_step "
      "counts the four projections and the whole T x T attention core, forward and backward (3x the forward), no recompute";
  for (size_t si = 0; si < report.sizes.size(); ++si) {
    Json& sj = j["sizes"][si];
    sj["tokens"] = sizes_extra[si]["tokens"];
    sj["dropout"] = sizes_extra[si]["dropout"];
    sj["observed_per_step"] = sizes_extra[si]["observed_per_step"];
    for (size_t ci = 0; ci < sj["configurations"].size(); ++ci) {
      const Json& extra = sizes_extra[si]["configurations"][ci];
      Json& cj = sj["configurations"][ci];
      for (auto it = extra.begin(); it != extra.end(); ++it) {
        if (it.key() == "memory") {
          for (auto m = it.value().begin(); m != it.value().end(); ++m) cj["memory"][m.key()] = m.value();
        } else {
          cj[it.key()] = it.value();
        }
      }
    }
  }
  // What recap report reads must be what was written: the reader's own check.
  reports::TradeoffReport back;
  if (std::string e = reports::read_tradeoff(j, &back); !e.empty())
    throw std::logic_error("recap tradeoff wrote a report recap report cannot read: " + e);

  std::printf("recap tradeoff: --sut %s (%s %s on %s), backend %s; %d warmup steps, %d timed steps, oracles on %d replays%s\n",
              a.sut.sut.c_str(), system.kind.c_str(), system.info.version.c_str(), system.info.device.c_str(),
              backend.c_str(), a.warmup, a.steps, a.judged_replays,
              ctx.matmul_bf16_tflops ? (", bf16 matmul " + fixed(ctx.matmul_bf16_tflops, "%.1f") + " TFLOP/s").c_str()
                                     : "");
  for (size_t si = 0; si < report.sizes.size(); ++si) print_size_table(sw.sizes[si], report.sizes[si], ctx.clock);
  int configs = 0;
  std::map<std::string, int> verdicts;
  for (const auto& s : report.sizes)
    for (const auto& c : s.configurations) {
      ++configs;
      ++verdicts[c.verdict];
    }
  std::string counts;
  for (const auto& [v, n] : verdicts) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + v;
  std::printf("\n%d configurations: %s; %d new failure%s%s\n", configs, counts.c_str(), new_failures,
              new_failures == 1 ? "" : "s", known.given() ? " (not accepted by --known-findings)" : "");
  if (!a.report.empty()) {
    std::string err;
    if (!reports::write_text_file(a.report, j.dump(1) + "\n", &err)) throw reports::WriteError("--report: " + err);
    std::printf("report: %s\n", a.report.c_str());
  }
  if (!interrupted.empty()) {
    std::printf("interrupted (%s): the configurations that ran\n", interrupted.c_str());
    return rc_if_stopped;
  }
  return new_failures ? kExitFailed : kExitOk;
}

}  // namespace

void add_tradeoff_command(CLI::App& app, Runner* runner) {
  // Not a structured binding: lambdas below capture cmd and a, which clang 14 (the sanitize
  // preset) refuses for bindings.
  auto added = add_command<TradeoffArgs>(
      app, runner, tradeoff, "tradeoff",
      "The memory/speed trade-off of checkpointing configurations (none, selective, full) x executors (eager, per-layer "
      "graphs, full-iteration graph) x the system's own choices, on a GPT-like stack: step times (median, p10, p90 of "
      "the timed steps), capture time, peak memory, graph pools, activations kept inside graphs and saved by recompute, "
      "TFLOP/s, each configuration with the oracles' verdict and findings. Writes recap.tradeoff/1 (--report) and a "
      "table. Exit 0 no configuration failed outside --known-findings, 1 one did, 2 bad usage or input.");
  CLI::App* cmd = added.cmd;
  TradeoffArgs* a = added.args;
  add_backend_option(*cmd, &a->backend);
  add_sut_options(*cmd, &a->sut);
  cmd->add_option("--sweep", a->sweep_file,
                  "A sweep file (JSON, schema recap.tradeoff-sweep/1): the sizes, and optionally the checkpointing, "
                  "selective modules, executors, styles, policies and generators to run (docs/DESIGN.md, \"Trade-off "
                  "reports\"); without it one size from the size flags")
      ->check([](const std::string& path) { return path.empty() ? std::string("an empty path names no sweep file") : ""; });
  cmd->add_option("--report", a->report, "Write the trade-off report (JSON, schema recap.tradeoff/1)");
  auto size_flag = [&](const char* flag, int* v, const char* help, int lo, int hi) {
    cmd->add_option(flag, *v, help)
        ->check(CLI::Range(lo, hi))
        ->capture_default_str()
        ->each([a, flag](const std::string&) { a->size_flags_given.push_back(flag); });
  };
  size_flag("--layers", &a->size.layers, "Transformer blocks in the stack", 1, 64);
  size_flag("--hidden", &a->size.hidden, "Hidden width", 1, 4096);
  size_flag("--heads", &a->size.heads, "Attention heads (dividing --hidden)", 1, 64);
  size_flag("--ffn-hidden", &a->size.ffn_hidden, "The MLP's inner width (0: 4 x hidden)", 0, 16384);
  size_flag("--seq", &a->size.seq, "Tokens per sequence", 1, 8192);
  size_flag("--micro-batch", &a->size.micro_batch, "Sequences per micro-batch (tokens = seq x micro-batch, at most 8192)", 1,
            8192);
  size_flag("--microbatches", &a->size.microbatches, "Micro-batches per step (gradient accumulation)", 1, 16);
  cmd->add_option("--dtype", a->size.dtype, "Parameters and activations: fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str()
      ->each([a](const std::string&) { a->size_flags_given.push_back("--dtype"); });
  cmd->add_option("--dropout", a->size.dropout, "Dropout probability of every dropout (hidden and attention)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str()
      ->each([a](const std::string&) { a->size_flags_given.push_back("--dropout"); });
  cmd->add_option("--name", a->size.name, "The size's name in the report")
      ->capture_default_str()
      ->each([a](const std::string&) { a->size_flags_given.push_back("--name"); });
  cmd->add_option("--warmup", a->warmup, "Steps before the capture (and before timing, for eager)")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  cmd->add_option("--steps", a->steps, "Timed steps per configuration, after warmup and capture (at least 20)")
      ->check(CLI::Range(20, 1000))
      ->capture_default_str();
  cmd->add_option("--judged-replays", a->judged_replays,
                  "Replays of the case the oracles judge per configuration (its warmup as --warmup)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--fp64-budget", a->fp64_budget,
                  "Multiply-adds the fp64 reference oracle may cost per configuration; past it `reference` is skipped "
                  "with the figure as its reason")
      ->check(CLI::Range(0.0, 1e18))
      ->capture_default_str();
  cmd->add_option("--judge-budget", a->judge_budget,
                  "Elements the judged case may observe a step (parameters x (microbatches + 2), and with dropout one "
                  "forward's masks); past it the configuration is judged at a smaller size (hidden and tokens at most "
                  "256, halved until within it) and the report says so; the measured run keeps the size")
      ->check(CLI::Range(0.0, 1e18))
      ->capture_default_str();
  cmd->add_option("--judge-jobs", a->judge_jobs,
                  "With a worker system (--sut torch, megatron): judge every configuration first, up to N at once, each "
                  "in a worker process of its own, then measure them one after the other with the system's worker alone "
                  "on the device. Default 4: judging (a small case in a worker, the fp64 reference on a CPU core) does not "
                  "need the device to itself, and 4 workers' device contexts and CPU cores fit a GPU host. 1: judge and "
                  "measure each configuration in turn, as recap's runtime in process (--sut recap) always does. The report "
                  "does not depend on N but for timings")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Parameter, data and RNG seeds of every case (seed, seed + 1, seed + 2)")
      ->check([](const std::string& v) {  // before the conversion, which would wrap -1 around
        const bool ok = !v.empty() && v.size() <= 18 &&
                        std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
        return ok ? std::string() : "must be an unsigned integer below 10^18, got '" + one_line(v, 40) + "'";
      })
      ->capture_default_str();
  add_property_option(*cmd, &a->properties);
  cmd->add_flag("--require-memory-savings", a->require_memory_savings,
                "Recompute that saves no activation memory inside graphs is a failure, not a finding");
  cmd->add_option("--known-findings", a->known_findings,
                  "A recap.known-findings/1 file (corpus/known-findings/): a configuration's failure one of its findings "
                  "accepts (bucket and configuration) is shown with the finding's id and does not fail the command");
  cmd->add_option("--corpus-dir", a->corpus_dir, "Where a configuration's new failure is written as a case file")
      ->capture_default_str();
  cmd->add_option("--fault", a->faults,
                  "Turn on a fault point of recap's runtime in every configuration (docs/faults.md; --sut recap only)");
}

}  // namespace recap::cli
