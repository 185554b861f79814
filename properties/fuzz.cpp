// The fuzz campaign: chunks of cases, each one RapidCheck run (rc::detail::checkProperty) with a
// seed derived from the campaign seed and the chunk index. Chunk c belongs to shard c % n, so
// shards run disjoint, deterministic subsets and together the whole campaign.
//
// Shrinking keeps the failure's identity (the first failing property, its disposition and CUDA
// error), as Hypothesis distinguishes failures: a shrink that fails differently counts as passing,
// so a capture failure does not shrink into another bug. The last failing evaluation during
// shrinking is the shrunk case (RapidCheck tries candidates in order and keeps each failing one).
// With keep_going a chunk goes on after its counterexample (a new RapidCheck run over the cases
// left), and shrinks each distinct failure once.
#include "properties/fuzz.h"
#include "properties/diagnosis.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include <rapidcheck/Check.h>
#include <rapidcheck/detail/TestListener.h>

namespace recap::properties {

namespace {
// RapidCheck's reproduce string for one failure, through its installed API: the `reproduce=` entry
// of the configuration string that would replay it (RC_PARAMS="reproduce=...").
std::string reproduce_string(const std::string& test_id, const rc::detail::Reproduce& r) {
  rc::detail::Configuration c;
  c.reproduce = {{test_id, r}};
  const std::string all = rc::detail::configToString(c);
  const size_t at = all.find("reproduce=");
  if (at == std::string::npos) return "";
  return all.substr(at, all.find(' ', at) == std::string::npos ? std::string::npos : all.find(' ', at) - at);
}

// What RC_PARAMS asks RapidCheck to reproduce. RapidCheck's configuration is read only when the
// variable is set: reading it prints "Using configuration: seed=..." on stderr, and recap prints
// its own seed line.
const std::unordered_map<std::string, rc::detail::Reproduce>& requested_reproductions() {
  static const std::unordered_map<std::string, rc::detail::Reproduce> none;
  return std::getenv("RC_PARAMS") ? rc::detail::configuration().reproduce : none;
}
}  // namespace

using training::CaseSpec;

std::vector<std::string> classify(const CaseSpec& s) {
  std::vector<std::string> out;
  bool ckpt = s.any_checkpoint();
  bool capture = s.executor != training::ExecutorKind::Eager;
  bool graphed_layer = false, dropout = false, ckpt_graphed = false;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    bool g = s.executor == training::ExecutorKind::FullIteration || (capture && s.layers[i].graphed);
    graphed_layer = graphed_layer || g;
    if (s.model.layers[i].dropout > 0.0f) dropout = true;
    if (g && s.layers[i].checkpoint != training::CheckpointGranularity::None) ckpt_graphed = true;
  }
  capture = capture && graphed_layer;
  if (ckpt && capture && dropout) out.push_back("checkpoint+capture+dropout");
  if (ckpt_graphed) out.push_back("checkpoint inside graphs");
  if (ckpt) out.push_back("checkpoint");
  if (capture) out.push_back("capture");
  if (dropout) out.push_back("dropout");
  out.push_back("executor=" + training::executor_name(s.executor));
  out.push_back("policy=" + training::policy_name(s.policy));
  out.push_back("generator=" + runtime::generator_mode_name(s.generator));
  out.push_back("device_state=" + runtime::device_state_model_name(s.device_state));
  out.push_back("style=" + training::style_name(s.style));
  out.push_back("warmup_backward=" + training::warmup_backward_name(s.warmup_backward));
  out.push_back(std::string("dtype=") + (s.model.dtype == models::DType::BF16 ? "bf16" : "fp32"));
  out.push_back("layers=" + std::to_string(s.model.layers.size()));
  out.push_back("microbatches=" + std::to_string(s.microbatches));
  if (!s.order.empty()) out.push_back("interleaved order");
  out.push_back("warmup=" + std::to_string(s.warmup));
  bool selective = false;
  for (const auto& l : s.model.layers) out.push_back("kind=" + l.kind);
  for (const auto& f : s.layers) selective = selective || f.checkpoint == training::CheckpointGranularity::Selective;
  if (selective) out.push_back("selective");
  if (!s.shared_pool) out.push_back("separate pools");
  if (s.tp > 1) out.push_back("tp=" + std::to_string(s.tp));  // a rank group's case (one-rank coverage unchanged)
  if (s.pp > 1) out.push_back("pp=" + std::to_string(s.pp));
  if (s.vp > 1) out.push_back("vp=" + std::to_string(s.vp));
  if (s.dp > 1) out.push_back("dp=" + std::to_string(s.dp));
  // Where issue 23's fault points live: a graph pool replayed more than once (a leak shows as
  // growth between replays), and a without-output checkpoint whose output the consumer saves, so
  // it is discarded and rebound (in one unit: eagerly, or both inside one full-iteration graph).
  if (capture && s.replays >= 2) out.push_back("graphs replayed twice or more");
  for (size_t i = 0; i + 1 < s.layers.size(); ++i) {
    const bool same_unit = s.executor != training::ExecutorKind::PerLayer || (!s.layers[i].graphed && !s.layers[i + 1].graphed);
    const bool identity = s.model.layers[i].kind == "dropout" && s.model.layers[i].dropout == 0.0f;
    if (s.style == training::CheckpointStyle::WithoutOutput && same_unit && !identity &&
        s.layers[i].checkpoint == training::CheckpointGranularity::Full &&
        s.layers[i + 1].checkpoint != training::CheckpointGranularity::Full && s.model.layers[i + 1].kind != "dropout") {
      out.push_back("without-output rebinding");
      break;
    }
  }
  // kinds may repeat: dedupe, keeping order
  std::vector<std::string> uniq;
  for (auto& l : out)
    if (std::find(uniq.begin(), uniq.end(), l) == uniq.end()) uniq.push_back(l);
  return uniq;
}

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What identifies a failure while shrinking.
std::string signature(const CaseReport& r) {
  const CheckResult* c = first_failing_check(r);
  return c ? c->property + "/" + disposition_name(c->disposition) + "/" + c->cuda_error : "";
}

}  // namespace

std::string bucket_of(const CaseReport& r) {
  const CheckResult* c = first_failing_check(r);
  if (!c) return "";
  std::string kind;
  if (c->divergence) kind = c->divergence->tensor.substr(0, c->divergence->tensor.find(' '));
  return c->property + "/" + disposition_name(c->disposition) + "/" + c->api + "/" + c->cuda_error + "/" + kind;
}

std::string bucket_of_json(const Json& report) {
  if (!report.is_object() || !report.contains("checks") || !report["checks"].is_array()) return "";
  CaseReport r;  // what bucket_of reads of each check: property, disposition, capture error, divergence
  for (const auto& j : report["checks"]) {
    CheckResult c;
    c.property = j.value("property", "");
    if (!disposition_from_name(j.value("disposition", ""), &c.disposition)) c.disposition = Disposition::Skipped;
    const Json e = j.value("capture_error", Json::object());
    c.api = e.value("api", "");
    c.cuda_error = e.value("error", "");
    if (j.contains("divergence")) {
      c.divergence.emplace();
      c.divergence->tensor = j["divergence"].value("tensor", "");
    }
    r.checks.push_back(std::move(c));
  }
  return bucket_of(r);
}

namespace {

// A shrunk counterexample as the reports hold it, named by its first failing check.
reports::FailureRecord failure_record(const CaseReport& shrunk) {
  reports::FailureRecord f;
  f.case_json = training::case_to_json(shrunk.spec);
  f.report = case_report_to_json(shrunk);
  f.disposition = disposition_name(shrunk.disposition);
  if (const CheckResult* c = first_failing_check(shrunk)) {
    f.property = c->property;
    f.error = c->cuda_error;
    f.api = c->api;
  }
  f.reason = shrunk.first_failure();
  f.diagnosis = diagnose(shrunk);
  return f;
}

// "memory: recompute lost inside graphs (skip): 1234 bytes ..." -> "memory: recompute lost inside graphs (skip)"
std::string finding_key(const std::string& f) {
  auto a = f.find(": ");
  if (a == std::string::npos) return f;
  auto b = f.find(": ", a + 2);
  return b == std::string::npos ? f : f.substr(0, b);
}

// RapidCheck shrinks the layer list only from its end (the count is drawn first, mapcat), so a bug
// in the last of seven layers keeps all seven. After its shrink, layers are deleted one at a time
// while the failure keeps its signature (delta debugging over the list), each evaluation counted
// against `budget` (0: none). Returns how many were deleted.
}  // namespace

int delete_layers(CaseSpec* spec, CaseReport* rep, const OracleOptions& oracle, int budget,
                  const std::function<bool(const CaseReport&)>& accepted) {
  const std::string target = signature(*rep);
  int deleted = 0, evaluations = 0;
  for (bool again = true; again && spec->model.layers.size() > 1;) {
    again = false;
    for (size_t i = 0; i < spec->model.layers.size() && spec->model.layers.size() > 1;) {
      if (budget > 0 && evaluations >= budget) return deleted;
      CaseSpec c = *spec;
      c.model.layers.erase(c.model.layers.begin() + static_cast<long>(i));
      c.layers.erase(c.layers.begin() + static_cast<long>(i));
      if (!training::validate(c).empty()) {
        ++i;
        continue;
      }
      ++evaluations;
      CaseReport r = evaluate(c, oracle);
      if (failing(r.disposition) && signature(r) == target && !(accepted && accepted(r))) {
        *spec = std::move(c);
        *rep = std::move(r);
        ++deleted;
        again = true;
      } else {
        ++i;
      }
    }
  }
  return deleted;
}

namespace {

struct Listener : rc::detail::TestListener {
  int accepted = 0;
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool ok) override { accepted += ok ? 1 : 0; }
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

}  // namespace

reports::CampaignResult fuzz(const FuzzOptions& opts, const std::function<void(const Progress&)>& progress) {
  reports::CampaignResult st;  // its counts are the sum of its chunks' (reports::sum_chunks), counted once
  int done = 0;                // cases run, for the progress callback
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto stopped = [&] { return opts.stop != nullptr && opts.stop->load(); };
  auto out_of_time = [&] { return stopped() || (opts.time_budget_s > 0 && elapsed() >= opts.time_budget_s); };
  const int shards = std::max(1, opts.shard_count);
  const int shard = opts.shard_index;

  auto report_progress = [&] {
    if (!progress) return;
    Progress p;
    p.done = done;
    p.failures = static_cast<int>(st.failures.size());
    p.elapsed_s = elapsed();
    p.time_left_s = opts.time_budget_s > 0 ? std::max(0.0, opts.time_budget_s - p.elapsed_s) : -1.0;
    progress(p);
  };
  const int chunk_cases = std::max(1, opts.chunk_cases);
  const int chunks = (opts.cases + chunk_cases - 1) / chunk_cases;
  for (int c = 0; c < chunks; ++c) {
    if (c % shards != shard || opts.skip_chunks.count(c)) continue;
    if (out_of_time()) break;
    if (!opts.keep_going && opts.max_failures > 0 && static_cast<int>(st.failures.size()) >= opts.max_failures) break;
    if (opts.claim && !opts.claim(c)) continue;  // another job has it
    const int n = std::min(chunk_cases, opts.cases - c * chunk_cases);
    const uint64_t chunk_seed = splitmix(opts.seed ^ splitmix(static_cast<uint64_t>(c) + 1));
    std::set<std::string> shrunk;  // buckets shrunk in this chunk (keep_going)
    reports::ChunkTotals& totals = st.chunks[c];
    bool cut = false;  // a shrink stopped by a signal: its counterexample is not the uninterrupted one

    // One RapidCheck run, or with keep_going one more after each counterexample, over the
    // chunk's remaining cases (run r > 0 has a seed of its own, so the cases stay deterministic).
    int left = n;
    for (int run = 0; left > 0; ++run) {
      if (out_of_time()) break;
      bool shrinking = false;
      std::string target;
      std::optional<CaseReport> last_failing;
      int evaluations_in_shrink = 0;
      int ran = 0;
      std::string first_bucket;
      bool accepted_start = false;  // the failing case that started the shrink is accepted (opts.accepted)

      auto prop = [&]() {
        CaseSpec spec = *gen_case(opts.gen);
        if (!shrinking && out_of_time()) return;  // budget spent: finish the run without running
        if (shrinking) {
          if (stopped()) {  // asked to stop: the smallest failing case so far is kept
            cut = true;
            return;
          }
          if (accepted_start) return;  // counts as passing
          if (opts.shrink_limit > 0 && evaluations_in_shrink >= opts.shrink_limit) return;  // counts as passing
          ++evaluations_in_shrink;
        }
        CaseReport rep = evaluate(spec, opts.oracle);
        bool fails = failing(rep.disposition);
        if (!shrinking) {
          ++ran;
          ++done;
          ++totals.cases;
          totals.by_disposition[disposition_name(rep.disposition)]++;
          // Coverage counts judged cases only: a skipped case exercised nothing it is labelled with.
          if (rep.disposition != Disposition::Skipped)
            for (const auto& l : classify(spec)) totals.classification[l]++;
          for (const auto& k : rep.checks) totals.by_property[k.property][disposition_name(k.disposition)]++;
          for (const auto& f : rep.findings) {
            int64_t bytes = 0;
            for (const auto& k : rep.checks) bytes = std::max(bytes, k.bytes);
            reports::tally_finding(&totals.finding_tallies, finding_key(f), bytes);
          }
          if (fails) totals.buckets[bucket_of(rep)]++;
          // a failure like one this chunk already shrank is counted and reported, not shrunk again
          if (fails && shrunk.count(bucket_of(rep))) fails = false;
          if (fails) {
            shrinking = true;
            target = signature(rep);
            first_bucket = bucket_of(rep);
            // an accepted (known) failure is not shrunk: every candidate counts as passing, so the
            // chunk's cases are those of the same campaign without --known-findings
            accepted_start = opts.accepted && opts.accepted(rep);
          }
          std::string first = rep.first_failure();
          st.reports.push_back(case_report_to_json(rep));
          st.report_chunks.push_back(c);
          report_progress();
          if (fails) {
            last_failing = std::move(rep);
            RC_FAIL(first);
          }
          return;
        }
        if (fails && signature(rep) == target && !(opts.accepted && opts.accepted(rep))) {
          std::string first = rep.first_failure();
          last_failing = std::move(rep);
          RC_FAIL(first);
        }
      };

      rc::detail::TestParams params;
      params.seed = run == 0 ? chunk_seed : splitmix(chunk_seed ^ splitmix(static_cast<uint64_t>(run)));
      params.maxSuccess = left;
      params.maxSize = rc::kNominalSize;
      params.maxDiscardRatio = 10;
      rc::detail::TestMetadata meta;
      meta.id = "recap.fuzz";
      meta.description = "recap fuzz chunk " + std::to_string(c);
      Listener listener;
      rc::detail::TestResult result =
          rc::detail::checkProperty(rc::detail::toProperty(prop), meta, params, listener, requested_reproductions());
      left -= ran;

      rc::detail::FailureResult failure;
      if (result.match(failure) && last_failing) {
        CaseSpec spec = last_failing->spec;
        const int deleted =
            accepted_start ? 0 : delete_layers(&spec, &*last_failing, opts.oracle, opts.shrink_limit, opts.accepted);
        reports::FailureRecord cx = failure_record(*last_failing);
        cx.shrinks = listener.accepted + deleted;
        cx.seed = opts.seed;
        cx.reproduce = "RC_PARAMS=\"" + reproduce_string(meta.id, failure.reproduce) + "\"";
        cx.bucket = first_bucket;
        cx.chunk = c;
        st.failures.push_back(std::move(cx));
        report_progress();
        shrunk.insert(first_bucket);
        if (!opts.keep_going) break;
      } else {
        rc::detail::Error err;
        if (result.match(err)) throw std::runtime_error("rapidcheck: " + err.description);
        break;  // the run went through every remaining case
      }
    }
    totals.complete = left == 0 && !cut;
  }
  reports::sum_chunks(st);
  st.seconds = elapsed();
  return st;
}

}  // namespace recap::properties
