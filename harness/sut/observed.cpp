// Another system's graphs and RNG ledger judged from its observation (observed.h).
#include "harness/sut/observed.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "harness/base/json.h"

namespace recap::sut {

namespace {
std::string draws_of(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? " draw" : " draws");
}
}  // namespace

void judge_recompute_draws(training::RunResult& r, const std::vector<std::vector<MaskDraw>>& steps) {
  using Key = std::tuple<std::string, std::string, int>;
  size_t equal = 0;
  std::set<Key> sites;
  int judged_steps = 0;
  for (size_t k = 0; k < steps.size() && k < r.steps.size(); ++k) {
    std::map<Key, std::pair<std::vector<const MaskDraw*>, std::vector<const MaskDraw*>>> by;
    for (const MaskDraw& d : steps[k]) {
      if (d.pass == runtime::Phase::Forward && d.checkpointed) by[{d.layer, d.op, d.microbatch}].first.push_back(&d);
      if (d.pass == runtime::Phase::Recompute) by[{d.layer, d.op, d.microbatch}].second.push_back(&d);
    }
    auto by_index = [](const MaskDraw* a, const MaskDraw* b) { return a->index < b->index; };
    for (auto& [key, fr] : by) {
      auto& [f, rc] = fr;
      std::stable_sort(f.begin(), f.end(), by_index);
      std::stable_sort(rc.begin(), rc.end(), by_index);
      const std::string at = std::get<0>(key) + "." + std::get<1>(key) + " step " + std::to_string(r.steps[k].step) +
                             " mb " + std::to_string(std::get<2>(key)) + ": ";
      if (f.size() != rc.size()) {
        r.recompute_mismatches += f.size() > rc.size() ? f.size() - rc.size() : rc.size() - f.size();
        if (r.ledger_problem.empty())
          r.ledger_problem = at + draws_of(rc.size(), "recompute") + " for " + draws_of(f.size(), "checkpointed forward");
      }
      for (size_t i = 0; i < std::min(f.size(), rc.size()); ++i) {
        if (f[i]->digest == rc[i]->digest) {
          ++equal;
          continue;
        }
        ++r.recompute_mismatches;
        if (r.ledger_problem.empty()) {
          char buf[96];
          std::snprintf(buf, sizeof buf, " (digest %016llx vs %016llx)", static_cast<unsigned long long>(rc[i]->digest),
                        static_cast<unsigned long long>(f[i]->digest));
          r.ledger_problem = at + "recompute draw " + std::to_string(rc[i]->index) + " differs from checkpointed forward draw " +
                             std::to_string(f[i]->index) + buf;
        }
      }
      sites.insert(key);
    }
    judged_steps += by.empty() ? 0 : 1;
  }
  if (r.ledger_problem.empty() && equal > 0)
    r.ledger_evidence = std::to_string(equal) + " recompute draws equal their checkpointed forward draws (" +
                        std::to_string(sites.size()) + " sites, " + std::to_string(judged_steps) + " steps)";
}

void judge_graphs(training::RunResult& r, const training::CaseSpec& spec) {
  r.captured = false;
  r.graphs = 0;
  if (!r.captures) return;  // the system does not observe graphs: graphed steps are not evidenced
  bool replayed = false;
  for (const auto& [label, n] : *r.captures) r.graphs += n;
  for (const auto& s : r.steps)
    for (const auto& [label, n] : s.replays) replayed = replayed || n > 0;
  r.captured = r.graphs > 0 && replayed;
  if (!r.ok()) return;
  std::vector<std::string> wanted;  // labels the case asks graphs of ("iteration": any)
  if (spec.executor == training::ExecutorKind::FullIteration) wanted.push_back("iteration");
  if (spec.executor == training::ExecutorKind::PerLayer)
    for (size_t i = 0; i < spec.layers.size() && i < spec.model.layers.size(); ++i)
      if (spec.layers[i].graphed) wanted.push_back(spec.model.layers[i].kind + std::to_string(i));
  if (wanted.empty()) return;
  const bool whole = spec.executor == training::ExecutorKind::FullIteration;
  std::string all;
  for (const auto& w : wanted) all += (all.empty() ? "" : ", ") + w;
  const std::string captures = Json(*r.captures).dump();
  auto count = [](const std::map<std::string, int>& m, const std::string& label) {
    auto it = m.find(label);
    return it == m.end() ? 0 : it->second;
  };
  if (r.graphs == 0) {
    r.driver_error = "driver error: the case asks for graphs of " + all + "; the system observed none (captures: " + captures + ")";
    return;
  }
  if (!whole)
    for (const auto& w : wanted)
      if (count(*r.captures, w) == 0) {
        r.driver_error = "driver error: the case asks for graphs of " + all + "; the system observed no capture of " + w +
                         " (captures: " + captures + ")";
        return;
      }
  for (const auto& s : r.steps) {
    if (s.phase != "replay") continue;
    int any = 0;
    for (const auto& [label, n] : s.replays) any += n;
    for (const auto& w : wanted)
      if (whole ? any == 0 : count(s.replays, w) == 0) {
        r.driver_error = "driver error: step " + std::to_string(s.step) + " is labelled replay; the system observed no replay of " +
                         (whole ? std::string("any graph") : w) + " (replays: " + Json(s.replays).dump() + ")";
        return;
      }
  }
}

}  // namespace recap::sut
