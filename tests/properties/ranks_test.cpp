// Issue 22: the cross-rank oracles (properties/oracles/ranks.cpp) on hand-made rank-group
// observations (drivers/PROTOCOL.md, "Rank groups"), read through run_result_of as recap reads a
// group's reply. Each oracle has a clean observation it passes and a broken one (the planted fault
// it stands for) it fails, and what it cannot judge is skipped with the reason; the generators
// draw tp only from a group's capabilities.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include "harness/sut/worker.h"
#include "models/registry.h"
#include "properties/diagnosis.h"
#include "properties/generators.h"
#include "properties/oracles.h"
#include "properties/oracles/oracle.h"

#include <algorithm>
#include <set>

namespace recap::properties {
namespace {

using training::CaseSpec;

// attention (heads 2, dropout 0.2: its core's draws are inside a region) then mlp (dropout 0.1:
// outside), both checkpointed; tp 2, one microbatch, one step.
CaseSpec group_case() {
  CaseSpec s;
  s.model.hidden = 8;
  s.model.tokens = 4;
  models::LayerSpec a;
  a.kind = "attention";
  a.heads = 2;
  a.dropout = 0.2f;
  models::LayerSpec m;
  m.kind = "mlp";
  m.dropout = 0.1f;
  s.model.layers = {a, m};
  training::LayerFlags f;
  f.checkpoint = training::CheckpointGranularity::Full;
  s.layers = {f, f};
  s.warmup = 0;
  s.replays = 1;
  s.tp = 2;
  return s;
}

Json mask(const std::string& layer, const std::string& pass, const std::string& digest, uint64_t numel = 64) {
  return {{"layer", layer}, {"op", layer.substr(layer.find('.') + 1)}, {"microbatch", 0}, {"pass", pass},
          {"numel", numel}, {"digest", digest}, {"index", 0}, {"checkpointed", pass == "forward"}};
}

// A rank's draws: inside (attention0.core) and outside (mlp1.dropout), each recomputed.
struct RankDraws {
  std::string inside = "00000000000000a0", inside_recompute = "00000000000000a0";
  std::string outside = "00000000000000b0", outside_recompute = "00000000000000b0";
  bool with_inside = true;
  uint64_t inside_numel = 64;
  Json masks() const {
    Json m = Json::array();
    if (with_inside) {
      m.push_back(mask("attention0.core", "forward", inside, inside_numel));
      m.push_back(mask("attention0.core", "recompute", inside_recompute, inside_numel));
    }
    m.push_back(mask("mlp1.dropout", "forward", outside));
    m.push_back(mask("mlp1.dropout", "recompute", outside_recompute));
    return m;
  }
};

// Two parameters: p0 split along dim 0, p1 held whole by both ranks.
struct GroupObservation {
  RankDraws rank[2];
  std::vector<float> grad = {1.0f, 2.0f, 3.0f, 4.0f};  // every full-shape tensor's values
  std::vector<float> rank1_replicated = {1.0f, 2.0f, 3.0f, 4.0f};  // rank 1's own gradient of p1
  bool group = true;  // false: a one-rank worker's reply (no "ranks")
  sut::Message message() const {
    sut::Message m;
    Json rows = Json::array();
    for (int r = 0; r < 2; ++r) rows.push_back({{"rank", r}, {"losses", {0.5}}, {"masks", rank[r].masks()}});
    Json step = {{"step", 0}, {"phase", "eager"}, {"losses", {0.5}}, {"ms", 1.0}, {"masks", rank[0].masks()}};
    if (group) step["ranks"] = rows;
    m.header = {{"op", "observation"}, {"id", 1}, {"status", "ok"}, {"reason", ""}, {"param_names", {"p0", "p1"}},
                {"steps", Json::array({step})}};
    if (group)
      m.header["ranks"] = {{"world", 2}, {"tp", 2}, {"backend", "gloo"}, {"tp_sites", {"attention0.core"}},
                           {"shards", {{{"param", 0}, {"dim", 0}, {"ranges", {{{0, 2}}, {{2, 4}}}}},
                                       {{"param", 1}, {"dim", nullptr}, {"ranges", Json::array()}}}}};
    for (const char* n : {"grad 0 0 0", "grad 0 0 1", "grad 0 0", "grad 0 1", "param 0 0", "param 0 1"})
      m.frames.push_back(sut::f32_frame(n, grad, {4}));
    if (group) {
      m.frames.push_back(sut::f32_frame("grad 0 0 1 @0", grad, {4}));
      m.frames.push_back(sut::f32_frame("grad 0 0 1 @1", rank1_replicated, {4}));
    }
    return m;
  }
  training::RunResult result(const CaseSpec& spec) const { return sut::run_result_of(message(), spec); }
};

// Rank 1's own inside draws (its tracker is seeded seeds.rng + 2718 + 1).
GroupObservation clean() {
  GroupObservation o;
  o.rank[1].inside = o.rank[1].inside_recompute = "00000000000000a1";
  return o;
}

Run one_rank_run(const GroupObservation& o) {
  GroupObservation one = o;
  one.group = false;
  CaseSpec s = group_case();
  s.tp = 1;
  Run r;
  r.result = one.result(s);
  return r;
}

TEST(Ranks, TheObservationIsRead) {
  const training::RunResult r = clean().result(group_case());
  ASSERT_TRUE(r.ranks.has_value());
  EXPECT_EQ(r.ranks->world, 2);
  EXPECT_EQ(r.ranks->backend, "gloo");
  EXPECT_EQ(r.ranks->tp_sites, std::vector<std::string>{"attention0.core"});
  EXPECT_EQ(r.ranks->shard_dim, (std::vector<int>{0, -1}));
  ASSERT_EQ(r.ranks->masks.size(), 2u);
  EXPECT_EQ(r.ranks->masks[1].size(), 4u);
  EXPECT_EQ(r.ranks->masks[1][0].digest, "00000000000000a1");
  // only the replicated parameter's per-rank gradients are kept
  EXPECT_EQ(r.ranks->replicated_grads[1].count("grad 0 0 1"), 1u);
  EXPECT_EQ(r.ranks->replicated_grads[1].count("grad 0 0 0"), 0u);
  // a one-rank reply has none
  GroupObservation one = clean();
  one.group = false;
  EXPECT_FALSE(one.result(group_case()).ranks.has_value());
}

TEST(Ranks, CleanGroupPasses) {
  const training::RunResult r = clean().result(group_case());
  CheckResult c = rank_recompute_equal_check(r);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_EQ(c.evidence, "4 recompute draws on 2 ranks equal their forward draws");
  c = tp_masks_differ_check(r);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_NE(c.evidence.find("1 draws inside tensor-parallel regions differ across 2 ranks"), std::string::npos) << c.evidence;
  c = outside_masks_equal_check(r);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_EQ(c.evidence, "1 draws outside tensor-parallel regions equal on 2 ranks");
}

TEST(Ranks, RecomputeThatDiffersOnOneRankIsIncorrect) {  // planted: tp-recompute-stale
  GroupObservation o = clean();
  o.rank[1].inside_recompute = "00000000000000ff";
  CheckResult c = rank_recompute_equal_check(o.result(group_case()));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.reason, "1 of 4 recompute draws: rank 1 step 0 attention0.core mb 0: recompute 00000000000000ff != forward "
                      "00000000000000a1");
}

TEST(Ranks, CheckpointedDrawNotRecomputedIsIncorrect) {
  GroupObservation o = clean();
  o.rank[0].with_inside = false;  // rank 0 then has only the mlp's draws; drop its recompute by hand
  sut::Message m = o.message();
  Json& masks = m.header["steps"][0]["ranks"][0]["masks"];
  masks.erase(masks.size() - 1);
  CheckResult c = rank_recompute_equal_check(sut::run_result_of(m, group_case()));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("rank 0 step 0 mlp1.dropout mb 0: a checkpointed forward draw was not recomputed"), std::string::npos)
      << c.reason;
}

TEST(Ranks, EqualMasksInsideRegionsAreIncorrect) {  // planted: tp-seed-shared
  GroupObservation o = clean();
  o.rank[1].inside = o.rank[1].inside_recompute = o.rank[0].inside;
  CheckResult c = tp_masks_differ_check(o.result(group_case()));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.reason, "ranks 0 and 1 drew equal masks in 1 of 1 draws inside tensor-parallel regions (first: step 0 "
                      "attention0.core mb 0; chance 10^-10.7)");
}

TEST(Ranks, SmallMasksInsideRegionsAreSkipped) {
  GroupObservation o = clean();
  o.rank[0].inside_numel = o.rank[1].inside_numel = 8;  // (0.2^2 + 0.8^2)^8: 10^-1.3, no evidence
  o.rank[1].inside = o.rank[0].inside;
  CheckResult c = tp_masks_differ_check(o.result(group_case()));
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_NE(c.reason.find("the masks are too small to tell ranks apart"), std::string::npos) << c.reason;
}

TEST(Ranks, DifferentMasksOutsideRegionsAreIncorrect) {  // planted: dp-seed-per-rank
  GroupObservation o = clean();
  o.rank[1].outside = o.rank[1].outside_recompute = "00000000000000b1";
  CheckResult c = outside_masks_equal_check(o.result(group_case()));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.reason, "step 0 mlp1.dropout mb 0: rank 1 drew 00000000000000b1, rank 0 00000000000000b0 (outside "
                      "tensor-parallel regions masks are equal)");
  // and the inside draws alone say nothing of it
  EXPECT_EQ(tp_masks_differ_check(o.result(group_case())).disposition, Disposition::Passed);
}

TEST(Ranks, NoDrawsAreSkippedWithTheReason) {
  GroupObservation o = clean();
  o.rank[0].with_inside = o.rank[1].with_inside = false;
  CheckResult c = tp_masks_differ_check(o.result(group_case()));
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason, "no dropout draw inside a tensor-parallel region");
  GroupObservation one = clean();
  one.group = false;  // one rank: every check skipped
  const training::RunResult r = one.result(group_case());
  for (const CheckResult& k : {rank_recompute_equal_check(r), tp_masks_differ_check(r), outside_masks_equal_check(r),
                               grads_match_one_rank_check(r, one_rank_run(one))}) {
    EXPECT_EQ(k.disposition, Disposition::Skipped) << k.property;
    EXPECT_EQ(k.reason, "the observation has no ranks (not a rank group's)") << k.property;
  }
}

// No draw inside a region: the group's gradients compare with a one-rank run's.
GroupObservation outside_only() {
  GroupObservation o = clean();
  o.rank[0].with_inside = o.rank[1].with_inside = false;
  return o;
}

TEST(Ranks, GradientsWithinToleranceOfOneRankPass) {
  GroupObservation g = outside_only();
  GroupObservation one = g;
  one.grad = {1.0f, 2.0f, 3.0f, 4.0000019f};  // relative L2 ~3.5e-7: another summation order
  CheckResult c = grads_match_one_rank_check(g.result(group_case()), one_rank_run(one));
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  // each run within kTolF32 of the exact result: the two within twice it
  EXPECT_NE(c.evidence.find("6 tensors (24 elements) within 2e-05 of the one-rank run"), std::string::npos) << c.evidence;
  EXPECT_NE(c.evidence.find("1 replicated gradients equal across 2 ranks"), std::string::npos) << c.evidence;
}

TEST(Ranks, GradientsBeyondToleranceAreIncorrect) {  // planted: tp-grad-not-reduced
  GroupObservation g = outside_only();
  GroupObservation one = g;
  one.grad = {2.0f, 4.0f, 3.0f, 4.0f};  // partial sums: half of the first two
  CheckResult c = grads_match_one_rank_check(g.result(group_case()), one_rank_run(one));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.reason, "'grad 0 0 0': relative L2 error 0.33 > 2e-05 against the one-rank run");
}

// bf16: twice models/check.h's bound for the model (4e-2 for a stack of up to 4 layers, scaled by
// depth past that), since each run is within it of the exact result.
TEST(Ranks, Bf16GradientsGetTwiceTheModelsBound) {
  GroupObservation g = outside_only();
  GroupObservation one = g;
  one.grad = {1.0f, 2.0f, 3.0f, 4.25f};  // relative L2 4.5e-2: past the stack bound, within twice it
  CaseSpec bf = group_case();
  bf.model.dtype = models::DType::BF16;
  properties::Run twin = one_rank_run(one);
  CheckResult c = grads_match_one_rank_check(g.result(bf), twin);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_NE(c.evidence.find("within 0.08 of the one-rank run"), std::string::npos) << c.evidence;
  one.grad = {1.0f, 2.0f, 3.0f, 5.0f};  // relative L2 0.18
  c = grads_match_one_rank_check(g.result(bf), one_rank_run(one));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
}

TEST(Ranks, ReplicatedGradientsThatDifferAcrossRanksAreIncorrect) {
  GroupObservation g = outside_only();
  g.rank1_replicated = {1.0f, 2.0f, 3.0f, 5.0f};
  CheckResult c = grads_match_one_rank_check(g.result(group_case()), one_rank_run(g));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("'grad 0 0 1' of a replicated parameter: rank 1 differs from rank 0"), std::string::npos) << c.reason;
}

TEST(Ranks, GradientsAreNotComparedWhereRanksDrawTheirOwn) {
  GroupObservation g = clean();  // a draw inside a region
  CheckResult c = grads_match_one_rank_check(g.result(group_case()), one_rank_run(g));
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason, "1 draws inside tensor-parallel regions come from per-rank generators, a one-rank run draws others: "
                      "its gradients differ by design");
  properties::Run crashed;
  crashed.crash = "torch worker: the worker exited with status 3";
  c = grads_match_one_rank_check(outside_only().result(group_case()), crashed);
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason, "the one-rank twin crashed: torch worker: the worker exited with status 3");
}

TEST(Ranks, OneRankMasksThatDifferAreIncorrect) {
  GroupObservation g = outside_only();
  GroupObservation one = g;
  one.rank[0].outside = one.rank[0].outside_recompute = "00000000000000c0";
  CheckResult c = grads_match_one_rank_check(g.result(group_case()), one_rank_run(one));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.reason, "step 0 mlp1.dropout mb 0: rank 0 drew 00000000000000b0, the one-rank run 00000000000000c0");
}

TEST(Ranks, JudgedOnlyWithARankGroup) {
  OracleOptions opts;
  for (const char* p : {"rank_recompute_equal", "tp_masks_differ", "outside_masks_equal", "grads_match_one_rank"}) {
    EXPECT_TRUE(ranks_property(p)) << p;
    EXPECT_FALSE(selected(opts, p)) << p;  // recap's runtime: one rank
  }
  EXPECT_FALSE(ranks_property("rng_ledger"));
}

GenConfig group_config() {
  GenConfig group;
  group.caps.tp = {2};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  return group;
}

TEST(Ranks, GeneratorsDrawTpOnlyFromAGroup) {
  const auto one = gen_case({});  // recap's own capabilities: no tp
  const auto group = gen_case(group_config());
  int tp2 = 0, tp1 = 0;
  for (int i = 0; i < 200; ++i) {
    const rc::Random seed(static_cast<uint64_t>(i) * 7919 + 13);
    EXPECT_EQ(one(seed, rc::kNominalSize).value().tp, 1);
    const CaseSpec b = group(seed, rc::kNominalSize).value();
    ASSERT_TRUE(b.tp == 1 || b.tp == 2) << b.tp;
    if (b.tp == 1) {
      ++tp1;
      continue;
    }
    ++tp2;
    EXPECT_EQ(b.executor, training::ExecutorKind::Eager);  // the group runs eagerly only
    EXPECT_EQ(training::validate(b), "");
    for (const auto& l : b.model.layers) {
      if (models::find_layer_kind(l.kind)->uses_heads) {
        EXPECT_EQ(l.heads % 2, 0) << l.kind;
      }
    }
  }
  EXPECT_GT(tp1, 20);
  EXPECT_GT(tp2, 20);
}

// tp shrinks first, toward 1: a case of tp 2's first shrink is the case on one rank, and a failure
// that needs tp 2 keeps it while everything else shrinks.
TEST(Ranks, TpShrinksFirstTowardOneRank) {
  const auto group = gen_case(group_config());
  int checked = 0;
  for (int i = 0; i < 50 && checked < 5; ++i) {
    auto s = group(rc::Random(static_cast<uint64_t>(i) * 104729 + 7), rc::kNominalSize);
    if (s.value().tp != 2) continue;
    ++checked;
    auto first = s.shrinks().next();
    ASSERT_TRUE(static_cast<bool>(first));
    EXPECT_EQ(first->value().tp, 1);
    // "fails only at tp 2": greedy, the first shrink that keeps tp 2
    for (int guard = 0; guard < 10000; ++guard) {
      auto seq = s.shrinks();
      bool moved = false;
      while (auto c = seq.next())
        if (c->value().tp == 2) {
          s = *c;
          moved = true;
          break;
        }
      if (!moved) break;
    }
    EXPECT_EQ(s.value().tp, 2);
    EXPECT_EQ(s.value().model.layers.size(), 1u);
  }
  EXPECT_EQ(checked, 5);
}

// A rank group's findings are named by what breaks across ranks (not in the bug catalogue but 17).
TEST(Ranks, FindingsAreDiagnosed) {
  const std::pair<const char*, const char*> cases[] = {
      {"tp_masks_differ", "- ranks draw equal masks inside tensor-parallel regions"},
      {"rank_recompute_equal", "17 a rank's recompute draws other masks than its forward"},
      {"outside_masks_equal", "- ranks draw different masks outside tensor-parallel regions"},
      {"grads_match_one_rank", "- the group's gradients differ from one rank's"}};
  for (const auto& [property, diagnosis] : cases) {
    CaseReport r;
    r.spec = group_case();
    r.checks.push_back(bad(property, Disposition::Incorrect, "planted"));
    const std::string d = diagnose(r);
    EXPECT_NE(d.find(diagnosis + std::string(diagnosis).find(' ') + 1), std::string::npos) << property << ": " << d;
  }
}

// A group sends every rank's own mask frames (`@<r>`): the ledger recap's fp64 oracles apply holds
// rank 0's outside the regions and the ranks' masks in rank order inside them (the full mask).
TEST(Ranks, MaskFramesOfTheRanksMakeTheFullMasks) {
  sut::Message m = clean().message();
  auto u8 = [](const std::string& name, char v, size_t n) {
    sut::Frame f;
    f.name = name;
    f.dtype = "u8";
    f.shape = {static_cast<int64_t>(n)};
    f.bytes.assign(n, v);
    return f;
  };
  m.frames.push_back(u8("mask 0 0 forward attention0.core core 0 @0", 1, 64));
  m.frames.push_back(u8("mask 0 0 forward attention0.core core 0 @1", 0, 64));
  m.frames.push_back(u8("mask 0 0 forward mlp1.dropout dropout 0 @0", 1, 64));
  m.frames.push_back(u8("mask 0 0 forward mlp1.dropout dropout 0 @1", 1, 64));
  const training::RunResult r = sut::run_result_of(m, group_case());
  ASSERT_EQ(r.steps.size(), 1u);
  int checked = 0;
  for (const auto& e : r.steps[0].ledger) {
    if (e.site.phase != runtime::Phase::Forward) continue;
    ++checked;
    if (e.site.layer == "attention0.core") {
      ASSERT_EQ(e.mask.size(), 128u);  // both ranks' heads
      EXPECT_EQ(e.count, 128u);
      EXPECT_EQ(e.mask[0], 1);
      EXPECT_EQ(e.mask[64], 0);
    } else {
      EXPECT_EQ(e.mask.size(), 64u);  // rank 0's
      EXPECT_EQ(e.count, 64u);
    }
  }
  EXPECT_EQ(checked, 2);
  // a rank's frame missing: no bytes (the fp64 oracles then skip: masks not sent)
  m.frames.erase(m.frames.end() - 3);
  const training::RunResult partial = sut::run_result_of(m, group_case());
  for (const auto& e : partial.steps[0].ledger) {
    if (e.site.layer == "attention0.core") {
      EXPECT_TRUE(e.mask.empty());
    }
  }
}

// Pipeline stages (pp 2, tp 1): two dropout layers, one per stage, two microbatches, one step.
CaseSpec pp_case() {
  CaseSpec s;
  s.model.hidden = 8;
  s.model.tokens = 32;
  models::LayerSpec d;
  d.kind = "dropout";
  d.dropout = 0.3f;
  s.model.layers = {d, d};
  s.layers = {training::LayerFlags{}, training::LayerFlags{}};
  s.warmup = 0;
  s.replays = 1;
  s.microbatches = 2;
  s.pp = 2;
  return s;
}

// Stage r draws layer r's masks (256 elements each) with digests `digest[r]` + microbatch; its
// schedule is `schedule[r]`; every full-shape frame of the one parameterless case is absent.
struct PpObservation {
  std::string digest[2] = {"00000000000000a0", "00000000000000b0"};
  bool stage1_draws = true;
  bool group = true;
  Json schedule[2] = {Json::array({{"forward", 0}, {"backward", 0}, {"forward", 1}, {"backward", 1}}),
                      Json::array({{"forward", 0}, {"backward", 0}, {"forward", 1}, {"backward", 1}})};
  std::vector<float> grad = {1.0f, 2.0f};
  Json masks(int r) const {
    Json m = Json::array();
    if (r == 1 && !stage1_draws) return m;
    for (int mb = 0; mb < 2; ++mb)
      m.push_back({{"layer", "dropout" + std::to_string(r)}, {"op", "dropout"}, {"microbatch", mb}, {"pass", "forward"},
                   {"numel", 256}, {"digest", digest[r].substr(0, 15) + std::to_string(mb)}, {"index", 0}});
    return m;
  }
  sut::Message message() const {
    sut::Message m;
    Json rows = Json::array();
    for (int r = 0; r < 2; ++r)
      rows.push_back({{"rank", r}, {"stage", r}, {"losses", r ? Json::array({0.5, 0.5}) : Json::array({nullptr, nullptr})},
                      {"masks", masks(r)}, {"schedule", schedule[r]}});
    Json all = masks(0);
    for (const Json& x : masks(1)) all.push_back(x);
    Json step = {{"step", 0}, {"phase", "eager"}, {"losses", {0.5, 0.5}}, {"ms", 1.0}, {"masks", all}};
    if (group) step["ranks"] = rows;
    m.header = {{"op", "observation"}, {"id", 1}, {"status", "ok"}, {"reason", ""}, {"param_names", Json::array()},
                {"steps", Json::array({step})}};
    if (group)
      m.header["ranks"] = {{"world", 2}, {"tp", 1}, {"pp", 2}, {"backend", "gloo"}, {"tp_sites", Json::array()},
                           {"stages", {0, 1}}, {"stage_layers", {{0, 1}, {1, 2}}}, {"shards", Json::array()}};
    return m;
  }
  training::RunResult result() const { return sut::run_result_of(message(), pp_case()); }
};

TEST(Ranks, PipelineObservationIsRead) {
  const training::RunResult r = PpObservation{}.result();
  ASSERT_TRUE(r.ranks.has_value());
  EXPECT_EQ(r.ranks->pp, 2);
  EXPECT_EQ(r.ranks->stages, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.ranks->stage_layers, (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}}));
  ASSERT_EQ(r.ranks->schedules.size(), 2u);
  ASSERT_EQ(r.ranks->schedules[1].size(), 1u);
  EXPECT_EQ(r.ranks->schedules[1][0].second.size(), 4u);
  EXPECT_EQ(r.steps.at(0).ledger.size(), 4u);  // every stage's draws: the full model's
  // one rank per stage: the within-stage mask checks have nothing to compare
  EXPECT_EQ(outside_masks_equal_check(r).disposition, Disposition::Skipped);
  EXPECT_EQ(tp_masks_differ_check(r).disposition, Disposition::Skipped);
}

TEST(Ranks, PipelineScheduleIs1F1B) {  // planted: pp-schedule-gpipe
  PpObservation o;
  // stage 0 of 2, 3 microbatches: one warmup forward, two 1F1B pairs, one cooldown backward
  o.schedule[0] = Json::array({{"forward", 0}, {"forward", 1}, {"backward", 0}, {"forward", 2}, {"backward", 1}, {"backward", 2}});
  o.schedule[1] = Json::array({{"forward", 0}, {"backward", 0}, {"forward", 1}, {"backward", 1}, {"forward", 2}, {"backward", 2}});
  CheckResult c = pp_schedule_1f1b_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_EQ(c.evidence, "2 stage schedules (12 events) are 1F1B over 2 stages");
  o.schedule[0] = Json::array({{"forward", 0}, {"forward", 1}, {"forward", 2}, {"backward", 0}, {"backward", 1}, {"backward", 2}});
  c = pp_schedule_1f1b_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.reason, "step 0 rank 0 (stage 0 of 2, 3 microbatches): event 2 was the forward of microbatch 2, 1F1B runs "
                      "the backward of microbatch 0");
  o.group = false;  // a one-rank reply: nothing scheduled across ranks
  EXPECT_EQ(pp_schedule_1f1b_check(o.result()).disposition, Disposition::Skipped);
}

TEST(Ranks, PipelineStagesDrawTheirOwnStreams) {  // planted: pp-stage-seed-shared
  PpObservation o;
  CheckResult c = pp_stage_masks_differ_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  o.digest[1] = o.digest[0];  // every stage seeded as stage 0
  c = pp_stage_masks_differ_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("2 of 2 draws equal across stages"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("stage 0 (dropout0) and stage 1 (dropout1)"), std::string::npos) << c.reason;
  o.stage1_draws = false;
  c = pp_stage_masks_differ_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason, "no two stages made a draw of equal size and probability at one position");
}

TEST(Ranks, PipelineGradientsAreBitwiseOneRanks) {  // planted: pp-send-stale
  PpObservation o;
  o.stage1_draws = false;  // stage 0 draws what one rank draws
  PpObservation one = o;
  one.group = false;
  CaseSpec s1 = pp_case();
  s1.pp = 1;
  auto with_param = [](sut::Message m, const std::vector<float>& v) {  // one parameterless case, one tensor: the loss's
    m.header["param_names"] = {"p0"};
    for (const char* n : {"grad 0 0 0", "grad 0 1 0", "grad 0 0", "param 0 0"}) m.frames.push_back(sut::f32_frame(n, v, {2}));
    return m;
  };
  properties::Run twin;
  twin.result = sut::run_result_of(with_param(one.message(), {1.0f, 2.0f}), s1);
  training::RunResult g = sut::run_result_of(with_param(o.message(), {1.0f, 2.0f}), pp_case());
  CheckResult c = grads_match_one_rank_check(g, twin);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_EQ(c.evidence, "4 tensors (8 elements) of 2 pipeline stages bitwise equal to the one-rank run's");
  // one ulp off: within any tolerance, but not the one rank's arithmetic
  g = sut::run_result_of(with_param(o.message(), {1.0f, std::nextafter(2.0f, 3.0f)}), pp_case());
  c = grads_match_one_rank_check(g, twin);
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("'grad 0 0 0': not bitwise equal to the one-rank run"), std::string::npos) << c.reason;
  o.stage1_draws = true;  // stage 1 is seeded seed + 100: no one-rank run draws its masks
  c = grads_match_one_rank_check(sut::run_result_of(with_param(o.message(), {1.0f, 2.0f}), pp_case()), twin);
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason, "stage 1 draws (dropout1): a stage is seeded seed + 100 * stage (megatron's _set_random_seed), the "
                      "one-rank run draws others");
}

// With mask frames, each layer's mask is applied from the rank of its stage (`@<r>`).
TEST(Ranks, PipelineMasksAreStitchedFromTheirStages) {
  PpObservation o;
  sut::Message m = o.message();
  for (int r = 0; r < 2; ++r)
    for (int mb = 0; mb < 2; ++mb)
      m.frames.push_back({"mask 0 " + std::to_string(mb) + " forward dropout" + std::to_string(r) + " dropout 0 @" +
                              std::to_string(r),
                          "u8", {256}, std::string(256, static_cast<char>(r + 1))});
  const training::RunResult r = sut::run_result_of(m, pp_case());
  ASSERT_EQ(r.steps.at(0).ledger.size(), 4u);
  for (const auto& e : r.steps[0].ledger) {
    ASSERT_EQ(e.mask.size(), 256u) << e.site.layer;
    EXPECT_EQ(e.mask[0], e.site.layer == "dropout0" ? 1 : 2) << e.site.layer;
  }
}

TEST(Ranks, GeneratorsDrawPpFromAGroup) {
  GenConfig group;
  group.caps.tp = {2};
  group.caps.pp = {2};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  int pp2 = 0, tp2 = 0;
  for (int i = 0; i < 200; ++i) {
    const CaseSpec b = gen(rc::Random(static_cast<uint64_t>(i) * 7919 + 13), rc::kNominalSize).value();
    ASSERT_TRUE(b.tp * b.pp <= 2) << b.tp << " " << b.pp;  // the group's shapes: tp 2 or pp 2, not both
    tp2 += b.tp == 2;
    if (b.pp != 2) continue;
    ++pp2;
    EXPECT_EQ(b.executor, training::ExecutorKind::Eager);
    EXPECT_EQ(b.layers.size() % 2, 0u);  // two stages of equal layers
    EXPECT_EQ(b.layers.size(), b.model.layers.size());
    EXPECT_EQ(training::validate(b), "");
  }
  EXPECT_GT(pp2, 20);
  EXPECT_GT(tp2, 20);
}

// A group that runs sequence parallelism (its hello's "sp": true) gets tp cases with sp, their tokens
// a multiple of tp (each rank's rows); a group that does not, none.
TEST(Ranks, GeneratorsDrawSpFromAGroupThatRunsIt) {
  GenConfig group;
  group.caps.tp = {2};
  group.caps.pp = {2};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  for (const bool runs_sp : {true, false}) {
    group.caps.sp = runs_sp;
    const auto gen = gen_case(group);
    int sp = 0, tp_alone = 0;
    for (int i = 0; i < 200; ++i) {
      const CaseSpec b = gen(rc::Random(static_cast<uint64_t>(i) * 7919 + 13), rc::kNominalSize).value();
      EXPECT_EQ(training::validate(b), "");
      tp_alone += b.tp == 2 && !b.sp;
      if (!b.sp) continue;
      ++sp;
      EXPECT_EQ(b.tp, 2);
      EXPECT_EQ(b.pp, 1);
      EXPECT_EQ(b.model.tokens % 2, 0) << b.model.tokens;
    }
    if (runs_sp) {
      EXPECT_GT(sp, 20);
    } else {
      EXPECT_EQ(sp, 0);
    }
    EXPECT_GT(tp_alone, 20);
  }
}

// A group that splits only some kinds (megatron's: its hello's tp_kinds) gets tp cases of those
// kinds alone, valid, with a selective checkpoint only where the kind offers the role; one-rank
// cases keep every kind.
TEST(Ranks, GeneratorsDrawOnlyTheKindsAGroupSplits) {
  GenConfig group;
  group.caps.tp = {2};
  group.caps.tp_kinds = {"block", "gelu", "dropout"};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  int tp_cases = 0, blocks_made = 0;
  std::set<std::string> one_rank_kinds;
  for (int i = 0; i < 300; ++i) {
    const CaseSpec b = gen(rc::Random(static_cast<uint64_t>(i) * 7919 + 13), rc::kNominalSize).value();
    EXPECT_EQ(training::validate(b), "");
    for (size_t k = 0; k < b.model.layers.size(); ++k) {
      const auto& l = b.model.layers[k];
      if (b.tp == 1) {
        one_rank_kinds.insert(l.kind);
        continue;
      }
      EXPECT_TRUE(l.kind == "block" || l.kind == "gelu" || l.kind == "dropout") << l.kind;
      blocks_made += l.kind == "block";
      const auto& roles = models::find_layer_kind(l.kind)->roles;
      for (const auto& m : b.layers[k].modules) EXPECT_NE(std::find(roles.begin(), roles.end(), m), roles.end()) << m;
    }
    tp_cases += b.tp > 1;
  }
  EXPECT_GT(tp_cases, 50);
  EXPECT_GT(blocks_made, tp_cases);  // more blocks than one per case: other kinds became blocks
  EXPECT_GT(one_rank_kinds.size(), 3u);  // one rank: every kind still drawn
}

// A group of 4 (its hello: tp [2, 4], pp [2, 4]) gets its three shapes of 4 ranks, tp 2 inside pp 2
// among them, with and without sp; never a shape of 2 ranks it cannot run.
TEST(Ranks, GeneratorsDrawTpInsidePpFromAGroupOfFour) {
  GenConfig group;
  group.caps.tp = {2, 4};
  group.caps.pp = {2, 4};
  group.caps.sp = true;
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  std::map<std::tuple<int, int, bool>, int> seen;
  for (int i = 0; i < 300; ++i) {
    const CaseSpec b = gen(rc::Random(static_cast<uint64_t>(i) * 7919 + 13), rc::kNominalSize).value();
    EXPECT_EQ(training::validate(b), "");
    EXPECT_TRUE(b.tp * b.pp == 1 || b.tp * b.pp == 4) << b.tp << " " << b.pp;
    ++seen[{b.tp, b.pp, b.sp}];
    if (b.pp > 1) EXPECT_EQ(b.layers.size() % static_cast<size_t>(b.pp), 0u);
    if (b.sp) EXPECT_EQ(b.model.tokens % b.tp, 0);
  }
  for (const auto& shape : {std::tuple<int, int, bool>{2, 2, false}, {2, 2, true}, {4, 1, false}, {4, 1, true}, {1, 4, false}})
    EXPECT_GT(seen[shape], 5) << std::get<0>(shape) << " " << std::get<1>(shape) << " " << std::get<2>(shape);
  EXPECT_EQ((seen[{1, 4, true}]), 0);  // sp needs tp > 1
}

// With groups of 2 and 4 ranks (--ranks 4: caps.worlds), shapes of both are drawn, and a failure
// that needs tp > 1 only, found on a group of 4, shrinks to the group of 2 (tp 2): the smallest
// world that still fails.
TEST(Ranks, ShapesOfSeveralGroupsShrinkToTheSmallestThatFails) {
  GenConfig group;
  group.caps.tp = {2, 4};
  group.caps.pp = {2, 4};
  group.caps.worlds = {2, 4};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  auto fails = [](const CaseSpec& c) { return c.tp > 1; };  // as tp-seed-shared: any tp group
  std::map<int, int> by_world;
  int checked = 0;
  for (int i = 0; i < 300; ++i) {
    auto s = gen(rc::Random(static_cast<uint64_t>(i) * 7919 + 13), rc::kNominalSize);
    ++by_world[s.value().tp * s.value().pp];
    if (s.value().tp != 4 && !(s.value().tp == 2 && s.value().pp == 2)) continue;
    if (checked++ >= 10) continue;
    for (int guard = 0; guard < 10000; ++guard) {  // RapidCheck's walk: the first shrink that still fails
      auto seq = s.shrinks();
      bool moved = false;
      while (auto c = seq.next())
        if (fails(c->value())) {
          s = *c;
          moved = true;
          break;
        }
      if (!moved) break;
    }
    EXPECT_EQ(s.value().tp, 2);
    EXPECT_EQ(s.value().pp, 1);  // a group of 2
  }
  EXPECT_GE(checked, 10);
  EXPECT_GT(by_world[2], 20);
  EXPECT_GT(by_world[4], 20);
  EXPECT_EQ(by_world.size(), 3u);  // 1, 2 and 4 ranks
}

// An sp case's shrinks try one rank first, and the same tp without sp (a failure that holds without
// it is no sequence-parallel bug).
TEST(Ranks, SpShrinksFirstToTheSameShapeWithoutIt) {
  GenConfig group;
  group.caps.tp = {2};
  group.caps.sp = true;
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  int checked = 0;
  for (int i = 0; i < 100 && checked < 5; ++i) {
    auto s = gen(rc::Random(static_cast<uint64_t>(i) * 104729 + 7), rc::kNominalSize);
    if (!s.value().sp) continue;
    ++checked;
    std::vector<std::pair<int, bool>> shapes;
    auto seq = s.shrinks();
    while (auto c = seq.next())
      if (c->value().tp != 2 || !c->value().sp) shapes.push_back({c->value().tp, c->value().sp});
    ASSERT_GE(shapes.size(), 2u);
    EXPECT_EQ(shapes[0], std::make_pair(1, false));  // one rank first, as every group shape
    EXPECT_NE(std::find(shapes.begin(), shapes.end(), std::make_pair(2, false)), shapes.end());
  }
  EXPECT_EQ(checked, 5);
}

// pp shrinks first too: a pp 2 case's first shrink is one rank's, and a failure that needs pp 2
// keeps it while the layers shrink to one per stage.
TEST(Ranks, PpShrinksFirstTowardOneRank) {
  GenConfig group;
  group.caps.pp = {2};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  int checked = 0;
  for (int i = 0; i < 50 && checked < 5; ++i) {
    auto s = gen(rc::Random(static_cast<uint64_t>(i) * 104729 + 7), rc::kNominalSize);
    if (s.value().pp != 2) continue;
    ++checked;
    auto first = s.shrinks().next();
    ASSERT_TRUE(static_cast<bool>(first));
    EXPECT_EQ(first->value().pp, 1);
    for (int guard = 0; guard < 10000; ++guard) {
      auto seq = s.shrinks();
      bool moved = false;
      while (auto c = seq.next())
        if (c->value().pp == 2) {
          s = *c;
          moved = true;
          break;
        }
      if (!moved) break;
    }
    EXPECT_EQ(s.value().pp, 2);
    EXPECT_EQ(s.value().layers.size(), 2u);  // one layer per stage
  }
  EXPECT_EQ(checked, 5);
}

// Virtual stages: rank s runs chunks c (virtual stage c * 2 + s) in megatron-core's interleaved
// 1F1B order, events [kind, microbatch, chunk]; P 2, V 2, M 2: rank 0 warms up all four forwards,
// rank 1 two (get_pp_rank_microbatches: (P - s - 1) * 2 + (V - 1) * P).
TEST(Ranks, VirtualStagesRunTheInterleavedOrder) {  // planted: pp-schedule-gpipe with vp
  PpObservation o;
  o.schedule[0] = Json::array({{"forward", 0, 0}, {"forward", 1, 0}, {"forward", 0, 1}, {"forward", 1, 1},
                               {"backward", 0, 1}, {"backward", 1, 1}, {"backward", 0, 0}, {"backward", 1, 0}});
  o.schedule[1] = Json::array({{"forward", 0, 0}, {"forward", 1, 0}, {"forward", 0, 1}, {"backward", 0, 1},
                               {"forward", 1, 1}, {"backward", 1, 1}, {"backward", 0, 0}, {"backward", 1, 0}});
  const training::RunResult r = o.result();
  ASSERT_TRUE(r.ranks.has_value());
  EXPECT_EQ(r.ranks->schedules[1][0].second.at(3), (training::StageEvent{false, 0, 1}));
  CheckResult c = pp_schedule_1f1b_check(r);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_EQ(c.evidence, "2 stage schedules (16 events) are interleaved 1F1B over 2 stages of 2 model chunks");
  // GPipe over chunks: microbatch 0's chunks before microbatch 1's
  o.schedule[0] = Json::array({{"forward", 0, 0}, {"forward", 0, 1}, {"forward", 1, 0}, {"forward", 1, 1},
                               {"backward", 0, 1}, {"backward", 0, 0}, {"backward", 1, 1}, {"backward", 1, 0}});
  c = pp_schedule_1f1b_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.reason, "step 0 rank 0 (stage 0 of 2, 2 microbatches, 2 model chunks): event 1 was the forward of "
                      "microbatch 0 on chunk 1, interleaved 1F1B runs the forward of microbatch 1 on chunk 0");
  o.schedule[0] = Json::array({{"forward", 0, 0, 0}});
  EXPECT_THROW(o.result(), sut::ProtocolError);  // an event of four fields
}

// The first stage's later chunks draw its one generator in the interleaved order: the one-rank run
// draws others, so the gradients are not compared (and say why).
TEST(Ranks, DrawsInALaterChunkVoidTheOneRankComparison) {
  PpObservation o;
  o.stage1_draws = false;
  sut::Message m = o.message();
  m.header["ranks"]["vp"] = 2;
  m.header["ranks"]["stage_layers"] = {{0, 1}, {1, 2}, {2, 3}, {3, 4}};  // dropout0 is virtual stage 0's
  EXPECT_EQ(sut::run_result_of(m, pp_case()).ranks->vp, 2);
  CheckResult c = grads_match_one_rank_check(sut::run_result_of(m, pp_case()), properties::Run{});
  EXPECT_EQ(c.reason, "the one-rank twin gave no result");  // not voided by a draw: it needs the twin
  m.header["ranks"]["stage_layers"] = {{1, 2}, {2, 3}, {0, 1}, {3, 4}};  // dropout0 is in rank 0's second chunk
  properties::Run twin;
  c = grads_match_one_rank_check(sut::run_result_of(m, pp_case()), twin);
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason, "stage 0 draws in a later model chunk (dropout0): its chunks draw one generator in the "
                      "interleaved order, the one-rank run layer after layer");
}

// A group listing vp draws it for pp cases only, fitted to the interleaved schedule (layers a
// multiple of pp * vp, microbatches of pp), and a vp case shrinks first to the same case without it.
TEST(Ranks, GeneratorsDrawVirtualStagesFromAGroupThatRunsThem) {
  GenConfig group;
  group.caps.pp = {2};
  group.caps.vp = {2, 3};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  int vp2 = 0, vp3 = 0, shrunk = 0;
  for (int i = 0; i < 300; ++i) {
    auto s = gen(rc::Random(static_cast<uint64_t>(i) * 7919 + 5), rc::kNominalSize);
    const CaseSpec b = s.value();
    if (b.vp == 1) continue;
    ASSERT_EQ(b.pp, 2);
    vp2 += b.vp == 2;
    vp3 += b.vp == 3;
    EXPECT_EQ(b.layers.size() % static_cast<size_t>(b.pp * b.vp), 0u);
    EXPECT_EQ(b.microbatches % b.pp, 0);
    EXPECT_EQ(training::validate(b), "");
    // the shape shrinks first (toward one rank); the vp draw's first shrink is vp 1 of pp 2
    bool none = false;
    for (auto seq = s.shrinks(); auto c = seq.next();)
      if (c->value().pp == 2 && c->value().vp == 1) {
        none = true;
        break;
      }
    shrunk += none;
  }
  EXPECT_GT(vp2, 20);
  EXPECT_GT(vp3, 20);
  EXPECT_EQ(shrunk, vp2 + vp3);
  GenConfig without = group;
  without.caps.vp.clear();
  const auto plain = gen_case(without);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(plain(rc::Random(static_cast<uint64_t>(i) * 31 + 1), rc::kNominalSize).value().vp, 1);
}

// dp 2 replicas of one rank each (tp 1), one parameter of 4 values, one step of two microbatches:
// replica d ran microbatch d. Each rank sends its own accumulation `grad 0 d 0 @d` and the step
// gradient it applied, `grad 0 0 @d`; `draws`: each replica draws an mlp mask for its microbatch.
struct DpObservation {
  std::vector<float> own[2] = {{1.0f, 2.0f, 3.0f, 4.0f}, {0.5f, 0.25f, -1.0f, 2.0f}};
  std::vector<float> applied[2] = {{1.5f, 2.25f, 2.0f, 6.0f}, {1.5f, 2.25f, 2.0f, 6.0f}};
  bool draws = false;
  sut::Message message() const {
    sut::Message m;
    Json rows = Json::array(), all = Json::array();
    for (int r = 0; r < 2; ++r) {
      Json masks = Json::array();
      if (draws)
        masks.push_back({{"layer", "mlp0.dropout"}, {"op", "dropout"}, {"microbatch", r}, {"pass", "forward"},
                         {"numel", 64}, {"digest", "00000000000000c0"}, {"index", 0}});
      for (const Json& x : masks) all.push_back(x);
      rows.push_back({{"rank", r}, {"losses", r ? Json::array({nullptr, 0.5}) : Json::array({0.5, nullptr})}, {"masks", masks}});
    }
    Json step = {{"step", 0}, {"phase", "eager"}, {"losses", {0.5, 0.5}}, {"ms", 1.0}, {"masks", all}, {"ranks", rows}};
    m.header = {{"op", "observation"}, {"id", 1}, {"status", "ok"}, {"reason", ""}, {"param_names", {"p0"}},
                {"steps", Json::array({step})}};
    m.header["ranks"] = {{"world", 2}, {"tp", 1}, {"dp", 2}, {"replicas", {0, 1}}, {"backend", "gloo"},
                         {"tp_sites", Json::array()}, {"shards", {{{"param", 0}, {"dim", nullptr}, {"ranges", Json::array()}}}}};
    m.frames.push_back(sut::f32_frame("grad 0 0 0", own[0], {4}));
    m.frames.push_back(sut::f32_frame("grad 0 1 0", own[1], {4}));
    m.frames.push_back(sut::f32_frame("grad 0 0", applied[0], {4}));
    m.frames.push_back(sut::f32_frame("param 0 0", applied[0], {4}));
    for (int r = 0; r < 2; ++r) {
      const std::string at = " @" + std::to_string(r);
      m.frames.push_back(sut::f32_frame("grad 0 " + std::to_string(r) + " 0" + at, own[r], {4}));
      m.frames.push_back(sut::f32_frame("grad 0 0" + at, applied[r], {4}));
    }
    return m;
  }
  training::RunResult result() const {
    CaseSpec s = pp_case();
    s.pp = 1;
    s.dp = 2;
    s.model.layers.resize(1);
    s.model.layers[0].kind = "mlp";
    s.layers.resize(1);
    return sut::run_result_of(message(), s);
  }
};

TEST(Ranks, ReplicasApplyTheSumOfTheirOwnGradients) {  // planted: dp-grad-not-reduced
  const training::RunResult r = DpObservation{}.result();
  ASSERT_TRUE(r.ranks.has_value());
  EXPECT_EQ(r.ranks->dp, 2);
  EXPECT_EQ(r.ranks->replicas, (std::vector<int>{0, 1}));
  CheckResult c = dp_grads_reduced_check(r);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_EQ(c.evidence, "1 step gradients (4 elements) bitwise equal across 2 replicas; 1 within 2e-05 of the sum of the "
                        "replicas' own (worst 0)");
  // replica 1 applied its own accumulation: not what replica 0 applied
  DpObservation o;
  o.applied[1] = o.own[1];
  c = dp_grads_reduced_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("'grad 0 0': rank 1 (replica 1) applied another gradient than rank 0 (replica 0)"), std::string::npos)
      << c.reason;
  // both applied replica 0's own: equal, but not the sum
  o.applied[0] = o.applied[1] = o.own[0];
  c = dp_grads_reduced_check(o.result());
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("against the sum of its 2 replicas' own gradients"), std::string::npos) << c.reason;
  // without replicas there is nothing to judge
  EXPECT_EQ(dp_grads_reduced_check(PpObservation{}.result()).disposition, Disposition::Skipped);
}

TEST(Ranks, ReplicasOfOneRankHaveNoRegionAndDrawAlike) {
  DpObservation o;
  o.draws = true;
  const training::RunResult r = o.result();
  CheckResult c = tp_masks_differ_check(r);
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason, "2 data-parallel replicas of one rank each: no tensor-parallel region");
  EXPECT_EQ(outside_masks_equal_check(r).disposition, Disposition::Skipped);
  // the replicas draw alike, one rank in sequence: the one-rank comparison is void, with the reason
  c = grads_match_one_rank_check(r, properties::Run{});
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_EQ(c.reason.rfind("2 draws on 2 data-parallel replicas seeded alike", 0), 0u) << c.reason;
  // each microbatch's mask is its replica's rank's (mask_frames): microbatch 1's from rank 1
  EXPECT_EQ(r.steps.at(0).ledger.size(), 2u);
}

TEST(Ranks, GeneratorsDrawDataParallelReplicasFromGroupsThatRunThem) {
  GenConfig group;
  group.caps.tp = {2, 4};
  group.caps.pp = {2, 4};
  group.caps.dp = {2, 4};
  group.caps.worlds = {2, 4};
  group.caps.tp_executor = {training::ExecutorKind::Eager};
  const auto gen = gen_case(group);
  int dp = 0, one_rank_dp = 0, shrunk = 0;
  for (int i = 0; i < 300; ++i) {
    auto s = gen(rc::Random(static_cast<uint64_t>(i) * 7919 + 11), rc::kNominalSize);
    const CaseSpec b = s.value();
    EXPECT_TRUE(b.ranks() == 1 || b.ranks() == 2 || b.ranks() == 4) << b.parallel_dims();
    if (b.dp == 1) continue;
    ++dp;
    one_rank_dp += b.tp == 1 && b.pp == 1;
    EXPECT_EQ(b.microbatches % (b.dp * (b.vp > 1 ? b.pp : 1)), 0);
    EXPECT_TRUE(b.order.empty());
    EXPECT_EQ(b.executor, training::ExecutorKind::Eager);
    EXPECT_EQ(training::validate(b), "");
    bool none = false;  // the dp draw shrinks toward none
    for (auto seq = s.shrinks(); auto c = seq.next();)
      if (c->value().dp == 1) {
        none = true;
        break;
      }
    shrunk += none;
  }
  EXPECT_GT(dp, 30);
  EXPECT_GT(one_rank_dp, 5);
  EXPECT_EQ(shrunk, dp);
  GenConfig without = group;
  without.caps.dp.clear();
  const auto plain = gen_case(without);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(plain(rc::Random(static_cast<uint64_t>(i) * 31 + 1), rc::kNominalSize).value().dp, 1);
}

}  // namespace
}  // namespace recap::properties
