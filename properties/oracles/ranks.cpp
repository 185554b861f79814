// The cross-rank oracles of a rank group's run (issue 22; drivers/PROTOCOL.md, "Rank groups"):
// recap's C++ form of drivers/recap_drivers/core/ranks_check.py, check for check. Judged only where
// the system under test runs a rank group (--ranks N, Oracle::ranks_only); a case of tp 1, or a run
// whose observation has no `ranks`, is skipped with the reason.
//
//   rank_recompute_equal  on every rank, every recompute draw equals its forward draw and every
//                         checkpointed forward draw was recomputed (planted: tp-recompute-stale)
//   tp_masks_differ       draws inside tensor-parallel regions (ranks.tp_sites; with sequence
//                         parallelism every draw site, on the rank's rows) differ between
//                         every two ranks beyond chance (tp-seed-shared)
//   outside_masks_equal   draws outside those regions are equal on every rank (dp-seed-per-rank)
//   grads_match_one_rank  the group's full-shape gradients and parameters equal a one-rank run's of
//                         the same case (tp 1, the ordinary worker) within a relative L2 tolerance,
//                         and replicated parameters' gradients agree across ranks (tp-grad-not-reduced);
//                         with pipeline stages of tp 1, bitwise equal (pp-send-stale)
//   pp_schedule_1f1b      every stage's forward and backward events, as it ran them, are megatron-core's
//                         non-interleaved 1F1B order (pp-schedule-gpipe)
//   pp_stage_masks_differ the j-th draw of a step's microbatch on two stages, of equal size and
//                         probability, differ beyond chance: each stage draws its own stream
//                         (pp-stage-seed-shared)
//   dp_grads_reduced      data-parallel replicas apply bitwise equal step gradients, the sum of the
//                         replicas' own accumulations within the tolerance (dp-grad-not-reduced)
// With pipeline stages or data-parallel replicas the mask checks compare ranks of one cell (a
// stage of a replica: its tensor-parallel group) only: other stages run other layers from other
// seeds, other replicas other microbatches from the same seeds; with tp inside the stages, each
// rank against its cell's first, and grads_match_one_rank within the tolerance, not bitwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "harness/base/hash.h"
#include "models/check.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {

using training::RankGroupRun;
using training::RankMask;
using training::RunResult;

namespace {

// A coincidence of masks is a finding when chance alone would give it less often than this.
constexpr double kChance = 1e-6;

using MaskKey = std::tuple<int, std::string, std::string, int, int>;  // step, layer, op, microbatch, index
MaskKey key_of(const RankMask& m) { return {m.step, m.layer, m.op, m.microbatch, m.index}; }
std::string where(const MaskKey& k) {
  return "step " + std::to_string(std::get<0>(k)) + " " + std::get<1>(k) + " mb " + std::to_string(std::get<3>(k));
}
std::string g2(double v) {
  std::ostringstream o;
  o.precision(2);
  o << v;
  return o.str();
}
std::string fixed1(double v) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << v;
  return o.str();
}

// The group's run, or why there is nothing to judge across ranks.
const RankGroupRun* group_of(Runs& runs, std::string* why) {
  if (runs.spec().ranks() <= 1) {
    *why = "tp 1: one rank, nothing to compare across ranks";
    return nullptr;
  }
  const auto& g = runs.main().ranks;
  if (!g) {
    *why = "the observation of a " + runs.spec().parallel_dims() + " case has no ranks (not a rank group's)";
    return nullptr;
  }
  if (g->world < 2) {
    *why = "one rank: nothing to compare across ranks";
    return nullptr;
  }
  return &*g;
}

// Per rank, its forward draws inside (or outside) the tensor-parallel regions, by key.
std::vector<std::map<MaskKey, const RankMask*>> forward_table(const RankGroupRun& g, bool inside) {
  const std::set<std::string> sites(g.tp_sites.begin(), g.tp_sites.end());
  std::vector<std::map<MaskKey, const RankMask*>> out(g.masks.size());
  for (size_t r = 0; r < g.masks.size(); ++r)
    for (const RankMask& m : g.masks[r])
      if (m.pass == runtime::Phase::Forward && (sites.count(m.layer) > 0) == inside) out[r][key_of(m)] = &m;
  return out;
}

// Every rank's stage (all 0 without pipeline stages), and how many stages there are.
int stage_of(const RankGroupRun& g, size_t rank) { return rank < g.stages.size() ? g.stages[rank] : 0; }
int stage_count(const RankGroupRun& g) { return static_cast<int>(std::set<int>(g.stages.begin(), g.stages.end()).size()); }
// Every rank's data-parallel replica (0 without replicas), and its cell: the ranks of one stage of
// one replica (its tensor-parallel group), which run the same layers on the same microbatches.
int replica_of(const RankGroupRun& g, size_t rank) { return rank < g.replicas.size() ? g.replicas[rank] : 0; }
int cell_of(const RankGroupRun& g, size_t rank) { return stage_of(g, rank) * 64 + replica_of(g, rank); }
size_t cell_first(const RankGroupRun& g, size_t rank) {
  for (size_t r = 0; r < rank; ++r)
    if (cell_of(g, r) == cell_of(g, rank)) return r;
  return rank;
}
int replica_count(const RankGroupRun& g) { return static_cast<int>(std::set<int>(g.replicas.begin(), g.replicas.end()).size()); }
// Cells of one rank each (tp 1): no tensor-parallel region, no two ranks run the same layers on the
// same data; "" when some cell holds several ranks, else how the group is made, in words.
std::string one_rank_cells(const RankGroupRun& g) {
  std::set<int> cells;
  for (size_t r = 0; r < g.masks.size(); ++r) cells.insert(cell_of(g, r));
  if (cells.size() < 2 || cells.size() != g.masks.size()) return "";
  const int pp = stage_count(g), dp = std::max(1, replica_count(g));
  if (dp == 1) return std::to_string(pp) + " pipeline stages of one rank each";
  if (pp == 1) return std::to_string(dp) + " data-parallel replicas of one rank each";
  return std::to_string(pp) + " pipeline stages of " + std::to_string(dp) + " replicas, one rank each";
}

// The top-level layer of draw site `site` ("attention0.core": 0), -1 when it names none.
int layer_of_site(const std::string& site) {
  const std::string head = site.substr(0, site.find('.'));
  size_t i = head.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(head[i - 1]))) --i;
  if (i == head.size() || head.size() - i > 6) return -1;
  return std::stoi(head.substr(i));
}

// The dropout probability of draw site `layer` ("attention0.core": layer 0's).
double site_p(const training::CaseSpec& spec, const std::string& layer) {
  const int l = layer_of_site(layer);
  return l >= 0 && static_cast<size_t>(l) < spec.model.layers.size() ? spec.model.layers[static_cast<size_t>(l)].dropout
                                                                      : 0.0;
}

// log10 of the chance that two independent masks of numel elements, each element kept with
// probability 1 - p, are equal: (p^2 + (1-p)^2)^numel.
double log10_chance(double p, uint64_t numel) {
  const double q = p * p + (1 - p) * (1 - p);
  return q > 0 && q < 1 ? static_cast<double>(numel) * std::log10(q) : 0.0;
}

// ||a - b|| / ||b||, ||a - b|| when b is all zero (as ranks_check.py: a one-rank gradient of zeros
// is matched absolutely), over the common length (callers compare sizes first).
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Why a pipeline group's run cannot equal a one-rank run's draws: a stage after the first draws
// (megatron's _set_random_seed seeds stage s with seed + 100 * s; one rank draws from seed), or
// the first stage draws in a later model chunk (its chunks draw its one generator in the
// interleaved order; one rank draws layer after layer).
std::string later_stage_draws(const RankGroupRun& g) {
  const std::pair<int, int> first = g.stage_layers.empty() ? std::pair<int, int>{0, 1 << 30} : g.stage_layers[0];
  for (size_t rank = 0; rank < g.masks.size(); ++rank)
    for (const RankMask& m : g.masks[rank]) {
      if (m.pass != runtime::Phase::Forward) continue;
      if (stage_of(g, rank) > 0)
        return "stage " + std::to_string(stage_of(g, rank)) + " draws (" + m.layer +
               "): a stage is seeded seed + 100 * stage (megatron's _set_random_seed), the one-rank run draws others";
      const int l = layer_of_site(m.layer);
      if (l >= 0 && (l < first.first || l >= first.second))
        return "stage 0 draws in a later model chunk (" + m.layer +
               "): its chunks draw one generator in the interleaved order, the one-rank run layer after layer";
    }
  return "";
}

// Why a group of data-parallel replicas cannot draw what one rank draws: megatron seeds every
// replica alike, so replica d's j-th microbatch draws what replica 0's j-th draws, where one rank
// draws its microbatches in sequence from one generator. "" without replicas or draws.
std::string replica_draws(const RankGroupRun& g) {
  if (g.dp < 2) return "";
  size_t drawn = 0;
  for (const auto& mine : g.masks)
    for (const RankMask& m : mine) drawn += m.pass == runtime::Phase::Forward;
  if (drawn == 0) return "";
  return std::to_string(drawn) + " draws on " + std::to_string(g.dp) +
         " data-parallel replicas seeded alike: replica d's j-th microbatch draws what replica 0's j-th draws, a "
         "one-rank run draws its microbatches in sequence: its gradients differ by design";
}

// megatron-core's non-interleaved 1F1B order of one stage (schedules.py
// forward_backward_pipelining_without_interleaving): min(P - stage - 1, M) warmup forwards, one
// forward and one backward alternately, then the remaining backwards.
std::vector<training::StageEvent> one_f_one_b(int pp, int stage, int microbatches) {
  const int warm = std::min(pp - stage - 1, microbatches);
  std::vector<training::StageEvent> out;
  for (int m = 0; m < warm; ++m) out.push_back({true, m, 0});
  for (int i = 0; i < microbatches - warm; ++i) {
    out.push_back({true, warm + i, 0});
    out.push_back({false, i, 0});
  }
  for (int m = microbatches - warm; m < microbatches; ++m) out.push_back({false, m, 0});
  return out;
}

// megatron-core's interleaved 1F1B order of one rank of vp model chunks
// (forward_backward_pipelining_with_interleaving, microbatch_group_size_per_vp_stage pp, its
// default): get_schedule_table lists (microbatch, chunk) in groups of pp microbatches, chunk by
// chunk (the last group takes what is left); get_pp_rank_microbatches gives
// (pp - stage - 1) * 2 + (vp - 1) * pp warmup forwards (at most all); then one forward and one
// backward alternately, then the remaining backwards; backward k is the table's k-th microbatch
// on chunk vp - 1 - its chunk.
std::vector<training::StageEvent> interleaved(int pp, int stage, int microbatches, int vp) {
  std::vector<training::StageEvent> fwd, bwd, out;
  for (int lo = 0; lo < microbatches; lo += pp) {
    const int hi = lo + pp >= microbatches ? microbatches : lo + pp;
    for (int c = 0; c < vp; ++c)
      for (int m = lo; m < hi; ++m) {
        fwd.push_back({true, m, c});
        bwd.push_back({false, m, vp - 1 - c});
      }
  }
  const size_t total = fwd.size();
  const size_t warm = std::min(total, static_cast<size_t>((pp - stage - 1) * 2 + (vp - 1) * pp));
  out.assign(fwd.begin(), fwd.begin() + static_cast<std::ptrdiff_t>(warm));
  for (size_t k = 0; k + warm < total; ++k) {
    out.push_back(fwd[warm + k]);
    out.push_back(bwd[k]);
  }
  out.insert(out.end(), bwd.begin() + static_cast<std::ptrdiff_t>(total - warm), bwd.end());
  return out;
}

std::string event_name(const std::vector<training::StageEvent>& v, size_t i, int vp) {
  if (i >= v.size()) return "nothing";
  return std::string(v[i].forward ? "forward" : "backward") + " of microbatch " + std::to_string(v[i].microbatch) +
         (vp > 1 ? " on chunk " + std::to_string(v[i].chunk) : "");
}

}  // namespace

CheckResult rank_recompute_equal_check(const RunResult& r) {
  const char* p = "rank_recompute_equal";
  if (!r.ranks || r.ranks->world < 1) return skipped(p, "the observation has no ranks (not a rank group's)");
  const RankGroupRun& g = *r.ranks;
  size_t compared = 0, mismatches = 0;
  std::string first;
  auto problem = [&](const std::string& s) {
    if (mismatches++ == 0) first = s;
  };
  for (size_t rank = 0; rank < g.masks.size(); ++rank) {
    std::map<MaskKey, const RankMask*> fwd, rec;
    for (const RankMask& m : g.masks[rank]) {
      if (m.pass == runtime::Phase::Forward) fwd[key_of(m)] = &m;
      if (m.pass == runtime::Phase::Recompute) rec[key_of(m)] = &m;
    }
    const std::string rk = "rank " + std::to_string(rank) + " ";
    for (const auto& [k, m] : rec) {
      ++compared;
      auto f = fwd.find(k);
      if (f == fwd.end()) problem(rk + where(k) + ": a recompute draw without a forward draw");
      else if (f->second->digest != m->digest)
        problem(rk + where(k) + ": recompute " + m->digest + " != forward " + f->second->digest);
    }
    for (const auto& [k, f] : fwd)
      if (f->checkpointed && !rec.count(k)) problem(rk + where(k) + ": a checkpointed forward draw was not recomputed");
  }
  if (mismatches)
    return bad(p, Disposition::Incorrect, std::to_string(mismatches) + " of " + std::to_string(compared) + " recompute draws: " + first);
  if (compared == 0) return skipped(p, "no recompute draw on any rank (no checkpointed dropout)");
  return passed(p, std::to_string(compared) + " recompute draws on " + std::to_string(g.masks.size()) +
                       " ranks equal their forward draws");
}

CheckResult tp_masks_differ_check(const RunResult& r) {
  const char* p = "tp_masks_differ";
  if (!r.ranks) return skipped(p, "the observation has no ranks (not a rank group's)");
  const RankGroupRun& g = *r.ranks;
  if (g.masks.size() < 2) return skipped(p, "one rank: nothing to compare across ranks");
  if (std::string cells = one_rank_cells(g); !cells.empty()) return skipped(p, cells + ": no tensor-parallel region");
  const auto tables = forward_table(g, /*inside=*/true);
  // with sequence parallelism every draw is per-rank: on the rank's heads or on its rows
  const std::string inside = g.sp ? "inside tensor-parallel regions or on sequence-parallel rows" : "inside tensor-parallel regions";
  std::set<MaskKey> keys;
  for (const auto& t : tables)
    for (const auto& [k, m] : t) keys.insert(k);
  if (keys.empty()) return skipped(p, "no dropout draw inside a tensor-parallel region");
  // every rank of a cell that drew it (the stage's layers, the replica's microbatches) drew it too
  std::map<MaskKey, uint64_t> numel;
  for (const MaskKey& k : keys) {
    std::set<int> have;
    for (size_t rank = 0; rank < tables.size(); ++rank)
      if (tables[rank].count(k)) {
        have.insert(cell_of(g, rank));
        numel[k] = tables[rank].at(k)->numel;
      }
    for (size_t rank = 0; rank < tables.size(); ++rank)
      if (have.count(cell_of(g, rank)) && !tables[rank].count(k))
        return bad(p, Disposition::Incorrect, where(k) + ": rank " + std::to_string(rank) + " made no such draw");
  }
  // how unlikely it is that every draw coincides on two ranks by chance; too likely: skipped
  double power = 0;
  for (const MaskKey& k : keys) power += log10_chance(site_p(r.spec, std::get<1>(k)), numel.at(k));
  if (power > std::log10(kChance))
    return skipped(p, "the masks are too small to tell ranks apart: equal masks on every draw would happen by chance "
                      "with probability 10^" + fixed1(power));
  size_t pairs = 0, coincident = 0;
  std::optional<std::pair<double, std::string>> worst;
  for (size_t a = 0; a < tables.size(); ++a)
    for (size_t b = a + 1; b < tables.size(); ++b) {
      if (cell_of(g, a) != cell_of(g, b)) continue;  // other layers, other seeds; or other data, seeded alike
      ++pairs;
      std::vector<MaskKey> same;
      for (const MaskKey& k : keys)
        if (tables[a].count(k) && tables[b].count(k) && tables[a].at(k)->digest == tables[b].at(k)->digest) same.push_back(k);
      coincident += same.size();
      if (same.empty()) continue;
      double chance = 0;
      for (const MaskKey& k : same) chance += log10_chance(site_p(r.spec, std::get<1>(k)), numel.at(k));
      if (!worst || chance < worst->first)
        worst = {chance, "ranks " + std::to_string(a) + " and " + std::to_string(b) + " drew equal masks in " +
                             std::to_string(same.size()) + " of " + std::to_string(keys.size()) +
                             " draws " + inside + " (first: " + where(same.front()) + "; chance 10^" +
                             fixed1(chance) + ")"};
    }
  if (worst && worst->first < std::log10(kChance)) return bad(p, Disposition::Incorrect, worst->second);
  return passed(p, std::to_string(keys.size()) + " draws " + inside + " differ across " +
                       std::to_string(tables.size()) + " ranks (" + std::to_string(pairs) + " pairs" +
                       (coincident ? ", " + std::to_string(coincident) + " equal by chance" : std::string()) +
                       "; all equal by chance: 10^" + fixed1(power) + ")");
}

CheckResult outside_masks_equal_check(const RunResult& r) {
  const char* p = "outside_masks_equal";
  if (!r.ranks) return skipped(p, "the observation has no ranks (not a rank group's)");
  const RankGroupRun& g = *r.ranks;
  if (g.masks.size() < 2) return skipped(p, "one rank: nothing to compare across ranks");
  if (std::string cells = one_rank_cells(g); !cells.empty())
    return skipped(p, cells + ": no two ranks run the same layers on the same data");
  const auto tables = forward_table(g, /*inside=*/false);
  bool any = false;
  for (const auto& t : tables) any = any || !t.empty();
  if (!any) return skipped(p, "no dropout draw outside the tensor-parallel regions");
  size_t compared = 0;
  for (size_t rank = 1; rank < tables.size(); ++rank) {
    const size_t first = cell_first(g, rank);  // only ranks of one cell run the same layers on the same data
    if (first == rank) continue;
    const auto& ref = tables[first];
    compared += ref.size();
    std::set<MaskKey> keys;
    for (const auto& [k, m] : ref) keys.insert(k);
    for (const auto& [k, m] : tables[rank]) keys.insert(k);
    for (const MaskKey& k : keys) {
      auto a = ref.find(k), b = tables[rank].find(k);
      if (a == ref.end() || b == tables[rank].end())
        return bad(p, Disposition::Incorrect,
                   where(k) + ": rank " + std::to_string(a == ref.end() ? first : rank) + " made no such draw");
      if (a->second->digest != b->second->digest)
        return bad(p, Disposition::Incorrect,
                   where(k) + ": rank " + std::to_string(rank) + " drew " + b->second->digest + ", rank " +
                       std::to_string(first) + " " + a->second->digest + " (outside tensor-parallel regions masks are equal)");
    }
  }
  if (stage_count(g) > 1)
    return passed(p, std::to_string(compared) + " draws outside tensor-parallel regions equal on the ranks of each of " +
                         std::to_string(stage_count(g)) + " stages (" + std::to_string(tables.size()) + " ranks)");
  return passed(p, std::to_string(tables[0].size()) + " draws outside tensor-parallel regions equal on " +
                       std::to_string(tables.size()) + " ranks");
}

CheckResult grads_match_one_rank_check(const RunResult& group, const Run& one) {
  const char* p = "grads_match_one_rank";
  if (!group.ranks) return skipped(p, "the observation has no ranks (not a rank group's)");
  const RankGroupRun& g = *group.ranks;
  // The group sums partial products in another order than one rank (an all-reduce of per-rank
  // partial sums), so bitwise equality is not expected. Each run is within models/check.h's bound
  // of the exact result (tolerance(): fp32 1e-5; bf16 by depth), so the two are within twice it
  // (as ranks_check.py's tolerance). Measured: 300 fp32 tensors of a six-layer case within 5e-7; a
  // 3-layer bf16 tp 2 case over 4 steps reached 4.5e-2, past the stack bound 4e-2 itself.
  const double tol = 2 * models::check::tolerance(group.spec.model);
  if (group.failure) return skipped(p, "the group's run did not complete: " + group.failure->line());
  const auto inside = forward_table(g, /*inside=*/true);
  size_t inside_draws = 0;
  for (const auto& t : inside) inside_draws = std::max(inside_draws, t.size());
  if (inside_draws > 0)
    return skipped(p, std::to_string(inside_draws) + " draws inside tensor-parallel regions come from per-rank "
                      "generators, a one-rank run draws others: its gradients differ by design");
  if (std::string why = replica_draws(g); !why.empty()) return skipped(p, why);
  // A pipeline group of tp 1 computes each layer whole on one stage, as one rank does: bitwise
  // (tp inside the stages sums partial products in another order, replicas sum their gradients in
  // another order than one rank accumulates them: the tolerance).
  const bool pipeline = stage_count(g) > 1;
  const bool bitwise = pipeline && g.tp == 1 && g.dp == 1;
  // a microbatch's gradients are its replica's accumulation: one rank's up to it for replica 0's only
  const size_t local = static_cast<size_t>(std::max(1, group.spec.microbatches / std::max(1, g.dp)));
  if (pipeline)
    if (std::string why = later_stage_draws(g); !why.empty()) return skipped(p, why);
  if (std::string t = twin_trouble("the one-rank twin", one); !t.empty()) return skipped(p, t);
  const RunResult& o = *one.result;
  // rank 0's forward draws against the one-rank run's (its ledger's masks, numbered as the group's)
  const auto group_masks = forward_table(g, /*inside=*/false);
  std::map<MaskKey, std::string> one_masks;
  for (const auto& s : o.steps) {
    std::map<std::tuple<std::string, std::string, int>, int> seen;
    for (const auto& e : s.ledger) {
      if (e.generator != "mask" || e.site.phase != runtime::Phase::Forward) continue;
      const int index = seen[{e.site.layer, e.site.op, e.site.microbatch}]++;
      one_masks[{s.step, e.site.layer, e.site.op, e.site.microbatch, index}] = hex64(e.seed);
    }
  }
  auto digest_value = [](const std::string& d) { return d.empty() ? uint64_t{0} : std::stoull(d, nullptr, 16); };
  std::set<MaskKey> keys;
  for (const auto& [k, m] : group_masks[0]) keys.insert(k);
  for (const auto& [k, d] : one_masks) keys.insert(k);
  for (const MaskKey& k : keys) {
    auto a = group_masks[0].find(k);
    auto b = one_masks.find(k);
    if (a == group_masks[0].end() || b == one_masks.end() || digest_value(a->second->digest) != digest_value(b->second))
      return bad(p, Disposition::Incorrect,
                 where(k) + ": rank 0 drew " + (a == group_masks[0].end() ? std::string("nothing") : a->second->digest) +
                     ", the one-rank run " + (b == one_masks.end() ? std::string("nothing") : b->second));
  }
  if (group.steps.size() != o.steps.size())
    return bad(p, Disposition::Incorrect, std::to_string(group.steps.size()) + " steps against the one-rank run's " +
                                              std::to_string(o.steps.size()));
  size_t tensors = 0, elements = 0;
  double worst = 0;
  std::string worst_name;
  auto compare = [&](const std::vector<float>& a, const std::vector<float>& b, const std::string& name) -> std::optional<CheckResult> {
    if (a.size() != b.size())
      return bad(p, Disposition::Incorrect, "'" + name + "': " + std::to_string(a.size()) + " elements against " + std::to_string(b.size()));
    const double e = relative_l2(a, b);
    ++tensors;
    elements += a.size();
    if (bitwise && (a.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0))
      return bad(p, Disposition::Incorrect, "'" + name + "': not bitwise equal to the one-rank run (relative L2 " + g2(e) +
                                                "); a pipeline stage computes its layers as one rank does");
    if (e > worst || std::isnan(e)) {
      worst = e;
      worst_name = name;
    }
    if (!(e <= tol))  // NaN fails too
      return bad(p, Disposition::Incorrect, "'" + name + "': relative L2 error " + g2(e) + " > " + g2(tol) + " against the one-rank run");
    return std::nullopt;
  };
  for (size_t k = 0; k < o.steps.size(); ++k) {
    const auto& x = group.steps[k];
    const auto& y = o.steps[k];
    const std::string st = std::to_string(y.step);
    if (x.microbatches.size() != y.microbatches.size() || x.grads.size() != y.grads.size() || x.params.size() != y.params.size())
      return bad(p, Disposition::Incorrect, "step " + st + ": the group's record has another shape than the one-rank run's");
    for (size_t mb = 0; mb < y.microbatches.size() && mb < local; ++mb)
      for (size_t i = 0; i < y.microbatches[mb].grads.size() && i < x.microbatches[mb].grads.size(); ++i)
        if (auto c = compare(x.microbatches[mb].grads[i], y.microbatches[mb].grads[i],
                             "grad " + st + " " + std::to_string(mb) + " " + std::to_string(i)))
          return *c;
    for (size_t i = 0; i < y.grads.size(); ++i)
      if (auto c = compare(x.grads[i], y.grads[i], "grad " + st + " " + std::to_string(i))) return *c;
    for (size_t i = 0; i < y.params.size(); ++i)
      if (auto c = compare(x.params[i], y.params[i], "param " + st + " " + std::to_string(i))) return *c;
  }
  // parameters every rank holds whole: their gradients agree across ranks
  size_t replicated = 0;
  for (size_t rank = 1; rank < g.replicated_grads.size(); ++rank) {
    const size_t first = cell_first(g, rank);  // against its cell's first rank: the same parameters and data
    if (first == rank) continue;
    for (const auto& [name, r0] : g.replicated_grads[first]) {
      auto it = g.replicated_grads[rank].find(name);
      if (it == g.replicated_grads[rank].end())
        return bad(p, Disposition::Incorrect, "no frame '" + name + " @" + std::to_string(rank) + "'");
      ++replicated;
      const double e = relative_l2(it->second, r0);
      if (!(e <= tol))
        return bad(p, Disposition::Incorrect, "'" + name + "' of a replicated parameter: rank " + std::to_string(rank) +
                                                  " differs from rank " + std::to_string(first) + " by " + g2(e));
    }
  }
  if (tensors == 0) return skipped(p, "no gradient or parameter to compare");
  if (bitwise)
    return passed(p, std::to_string(tensors) + " tensors (" + std::to_string(elements) + " elements) of " +
                         std::to_string(stage_count(g)) + " pipeline stages bitwise equal to the one-rank run's");
  return passed(p, std::to_string(tensors) + " tensors (" + std::to_string(elements) + " elements) within " + g2(tol) +
                       " of the one-rank run (worst " + g2(worst) + ": '" + worst_name + "'), " + std::to_string(replicated) +
                       " replicated gradients equal across " + std::to_string(g.world) + " ranks");
}

CheckResult dp_grads_reduced_check(const RunResult& r) {
  const char* p = "dp_grads_reduced";
  if (!r.ranks) return skipped(p, "the observation has no ranks (not a rank group's)");
  const RankGroupRun& g = *r.ranks;
  if (g.dp < 2) return skipped(p, "no data-parallel replicas: nothing reduced across them");
  if (r.failure) return skipped(p, "the group's run did not complete: " + r.failure->line());
  const double tol = 2 * models::check::tolerance(r.spec.model);
  const size_t world = g.replica_grads.size();
  const int tp = std::max(1, g.tp);
  auto members = [&](size_t rank) {  // the ranks of rank's data-parallel group, replica 0's first
    std::vector<size_t> out;
    for (size_t q = 0; q < world; ++q)
      if (stage_of(g, q) == stage_of(g, rank) && static_cast<int>(q) % tp == static_cast<int>(rank) % tp) out.push_back(q);
    return out;
  };
  size_t tensors = 0, elements = 0, sums = 0;
  double worst = 0;
  for (size_t rank = 0; rank < world; ++rank) {
    const std::vector<size_t> group = members(rank);
    const size_t peer = group.front();
    for (const auto& [name, rg] : g.replica_grads[rank]) {
      const std::vector<float>& mine = rg.applied;
      if (peer != rank) {  // every replica applies the same sum
        auto it = g.replica_grads[peer].find(name);
        if (it == g.replica_grads[peer].end())
          return bad(p, Disposition::Incorrect, "rank " + std::to_string(rank) + " (replica " + std::to_string(replica_of(g, rank)) +
                                                    ") sent '" + name + " @" + std::to_string(rank) + "', rank " +
                                                    std::to_string(peer) + " (replica 0) none");
        const std::vector<float>& first = it->second.applied;
        ++tensors;
        elements += mine.size();
        if (mine.size() != first.size() || (mine.size() && std::memcmp(mine.data(), first.data(), mine.size() * sizeof(float)) != 0))
          return bad(p, Disposition::Incorrect,
                     "'" + name + "': rank " + std::to_string(rank) + " (replica " + std::to_string(replica_of(g, rank)) +
                         ") applied another gradient than rank " + std::to_string(peer) + " (replica 0), relative L2 " +
                         g2(relative_l2(mine, first)) + ": the replicas' gradients were not summed over them");
        continue;
      }
      // the sum of the replicas' own accumulations (each its last microbatch's), in double
      std::vector<double> total(mine.size(), 0.0);
      for (size_t q : group) {
        auto it = g.replica_grads[q].find(name);
        if (it == g.replica_grads[q].end() || it->second.own.size() != mine.size())
          return bad(p, Disposition::Incorrect, "rank " + std::to_string(q) + " sent no microbatch gradient of '" + name + "'");
        for (size_t i = 0; i < total.size(); ++i) total[i] += it->second.own[i];
      }
      const std::vector<float> sum(total.begin(), total.end());
      const double e = relative_l2(mine, sum);
      ++sums;
      worst = std::isnan(e) ? INFINITY : std::max(worst, e);
      if (!(e <= tol))
        return bad(p, Disposition::Incorrect, "'" + name + "' on rank " + std::to_string(rank) + ": relative L2 error " + g2(e) +
                                                  " > " + g2(tol) + " against the sum of its " + std::to_string(group.size()) +
                                                  " replicas' own gradients");
    }
  }
  if (sums == 0) return skipped(p, "no rank sent its step gradients");
  return passed(p, std::to_string(tensors) + " step gradients (" + std::to_string(elements) + " elements) bitwise equal across " +
                       std::to_string(g.dp) + " replicas; " + std::to_string(sums) + " within " + g2(tol) +
                       " of the sum of the replicas' own (worst " + g2(worst) + ")");
}

CheckResult pp_schedule_1f1b_check(const RunResult& r) {
  const char* p = "pp_schedule_1f1b";
  if (!r.ranks) return skipped(p, "the observation has no ranks (not a rank group's)");
  const RankGroupRun& g = *r.ranks;
  // judged from what the stages observed: P is the stages that reported, M the microbatches and
  // V the model chunks a rank ran, never the case's fields
  const int pp = stage_count(g);
  if (pp < 2) return skipped(p, "no pipeline stages: nothing scheduled across ranks");
  size_t schedules = 0, events = 0;
  int chunks = 1;
  for (size_t rank = 0; rank < g.schedules.size(); ++rank)
    for (const auto& [step, got] : g.schedules[rank]) {
      if (got.empty()) continue;
      std::set<int> mbs, vps;
      for (const auto& e : got) {
        mbs.insert(e.microbatch);
        vps.insert(e.chunk);
      }
      // a replica's microbatches are the step's d * k ..: judged as its 0 .. k - 1, in order
      const std::vector<int> order(mbs.begin(), mbs.end());
      std::vector<training::StageEvent> seen = got;
      for (auto& e : seen)
        e.microbatch = static_cast<int>(std::lower_bound(order.begin(), order.end(), e.microbatch) - order.begin());
      const int stage = stage_of(g, rank), vp = static_cast<int>(vps.size()), m = static_cast<int>(mbs.size());
      chunks = std::max(chunks, vp);
      const auto want = vp > 1 ? interleaved(pp, stage, m, vp) : one_f_one_b(pp, stage, m);
      ++schedules;
      events += got.size();
      if (seen != want) {
        size_t i = 0;
        while (i < seen.size() && i < want.size() && seen[i] == want[i]) ++i;
        return bad(p, Disposition::Incorrect,
                   "step " + std::to_string(step) + " rank " + std::to_string(rank) + " (stage " + std::to_string(stage) +
                       " of " + std::to_string(pp) + ", " + std::to_string(m) + " microbatches" +
                       (vp > 1 ? ", " + std::to_string(vp) + " model chunks" : "") + "): event " + std::to_string(i) +
                       " was the " + event_name(seen, i, vp) + ", " + (vp > 1 ? "interleaved 1F1B" : "1F1B") + " runs the " +
                       event_name(want, i, vp));
      }
    }
  if (schedules == 0) return skipped(p, "no stage reported its schedule");
  if (chunks > 1)
    return passed(p, std::to_string(schedules) + " stage schedules (" + std::to_string(events) +
                         " events) are interleaved 1F1B over " + std::to_string(pp) + " stages of " + std::to_string(chunks) +
                         " model chunks");
  return passed(p, std::to_string(schedules) + " stage schedules (" + std::to_string(events) + " events) are 1F1B over " +
                       std::to_string(pp) + " stages");
}

CheckResult pp_stage_masks_differ_check(const RunResult& r) {
  const char* p = "pp_stage_masks_differ";
  if (!r.ranks) return skipped(p, "the observation has no ranks (not a rank group's)");
  const RankGroupRun& g = *r.ranks;
  if (stage_count(g) < 2) return skipped(p, "no pipeline stages: nothing to compare across stages");
  // per stage (its first rank): (step, microbatch, j) -> its j-th forward draw of that microbatch
  std::map<int, std::map<std::tuple<int, int, int>, const RankMask*>> seq;
  for (size_t rank = 0; rank < g.masks.size(); ++rank) {
    const int stage = stage_of(g, rank);
    if (seq.count(stage)) continue;
    auto& t = seq[stage];
    std::map<std::pair<int, int>, int> count;
    for (const RankMask& m : g.masks[rank])
      if (m.pass == runtime::Phase::Forward) t[{m.step, m.microbatch, count[{m.step, m.microbatch}]++}] = &m;
  }
  size_t pairs = 0, coincident = 0;
  double power = 0, same = 0;
  std::string first;
  for (auto a = seq.begin(); a != seq.end(); ++a)
    for (auto b = std::next(a); b != seq.end(); ++b)
      for (const auto& [k, x] : a->second) {
        auto y = b->second.find(k);
        if (y == b->second.end()) continue;
        const double px = site_p(r.spec, x->layer);
        if (x->numel != y->second->numel || px != site_p(r.spec, y->second->layer)) continue;
        ++pairs;
        const double c = log10_chance(px, x->numel);
        power += c;
        if (x->digest != y->second->digest) continue;
        ++coincident;
        same += c;
        if (first.empty())
          first = "step " + std::to_string(std::get<0>(k)) + " mb " + std::to_string(std::get<1>(k)) + " draw " +
                  std::to_string(std::get<2>(k)) + ": stage " + std::to_string(a->first) + " (" + x->layer + ") and stage " +
                  std::to_string(b->first) + " (" + y->second->layer + ") drew " + x->digest;
      }
  if (pairs == 0) return skipped(p, "no two stages made a draw of equal size and probability at one position");
  if (power > std::log10(kChance))
    return skipped(p, "the masks are too small to tell stages apart: equal masks on every pair would happen by chance "
                      "with probability 10^" + fixed1(power));
  if (coincident && same < std::log10(kChance))
    return bad(p, Disposition::Incorrect,
               std::to_string(coincident) + " of " + std::to_string(pairs) + " draws equal across stages (chance 10^" +
                   fixed1(same) + "; first: " + first + "): the stages draw one stream");
  return passed(p, std::to_string(pairs) + " draws at equal positions differ across " + std::to_string(stage_count(g)) +
                       " stages");
}

namespace {
template <CheckResult (*F)(const RunResult&)>
CheckResult judge_group(Runs& runs, const char* property) {
  std::string why;
  if (!group_of(runs, &why)) return skipped(property, why);
  return F(runs.main());
}
}  // namespace

Oracle rank_recompute_equal_oracle() {
  Oracle o{"rank_recompute_equal", "on every rank of a rank group, every recompute draw equals its forward draw",
           [](Runs& runs) { return judge_group<rank_recompute_equal_check>(runs, "rank_recompute_equal"); }};
  o.ranks_only = true;
  return o;
}

Oracle tp_masks_differ_oracle() {
  Oracle o{"tp_masks_differ", "dropout masks inside tensor-parallel regions differ across ranks (beyond chance)",
           [](Runs& runs) { return judge_group<tp_masks_differ_check>(runs, "tp_masks_differ"); }};
  o.ranks_only = true;
  return o;
}

Oracle outside_masks_equal_oracle() {
  Oracle o{"outside_masks_equal", "dropout masks outside tensor-parallel regions are equal on every rank",
           [](Runs& runs) { return judge_group<outside_masks_equal_check>(runs, "outside_masks_equal"); }};
  o.ranks_only = true;
  return o;
}

Oracle grads_match_one_rank_oracle() {
  Oracle o{"grads_match_one_rank",
           "a rank group's full gradients and parameters equal a one-rank run's of the same case within a relative L2 "
           "tolerance",
           [](Runs& runs) {
             std::string why;
             if (!group_of(runs, &why)) return skipped("grads_match_one_rank", why);
             // skipped before the twin runs when draws inside regions (or a failed run) make it void
             const auto inside = forward_table(*runs.main().ranks, /*inside=*/true);
             const bool later = stage_count(*runs.main().ranks) > 1 && !later_stage_draws(*runs.main().ranks).empty();
             const bool replicas = !replica_draws(*runs.main().ranks).empty();
             if (runs.main().failure || later || replicas || (!inside.empty() && !inside[0].empty()))
               return grads_match_one_rank_check(runs.main(), Run{});
             return grads_match_one_rank_check(runs.main(), runs.one_rank_twin());
           }};
  o.ranks_only = true;
  return o;
}

}  // namespace recap::properties

namespace recap::properties {

Oracle pp_schedule_1f1b_oracle() {
  Oracle o{"pp_schedule_1f1b", "every pipeline stage ran its forwards and backwards in megatron-core's 1F1B order",
           [](Runs& runs) { return judge_group<pp_schedule_1f1b_check>(runs, "pp_schedule_1f1b"); }};
  o.ranks_only = true;
  return o;
}

Oracle dp_grads_reduced_oracle() {
  Oracle o{"dp_grads_reduced",
           "data-parallel replicas apply equal step gradients, the sum of the replicas' own (within the tolerance)",
           [](Runs& runs) { return judge_group<dp_grads_reduced_check>(runs, "dp_grads_reduced"); }};
  o.ranks_only = true;
  return o;
}

Oracle pp_stage_masks_differ_oracle() {
  Oracle o{"pp_stage_masks_differ", "pipeline stages draw their dropout masks from their own streams (beyond chance)",
           [](Runs& runs) { return judge_group<pp_stage_masks_differ_check>(runs, "pp_stage_masks_differ"); }};
  o.ranks_only = true;
  return o;
}

}  // namespace recap::properties
