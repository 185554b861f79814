#include "harness/sut/worker.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>

#include "harness/base/names.h"
#include "harness/base/profile.h"
#include "harness/sut/capabilities.h"
#include "harness/sut/in_process.h"
#include "harness/sut/observed.h"
#include "models/registry.h"

namespace recap::sut {

namespace {

Message error_reply(const std::string& message, const Json& id = nullptr) {
  Message m;
  m.header = {{"op", "error"}};
  if (!id.is_null()) m.header["id"] = id;
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  m.header["message"] = line;
  return m;
}

// The observation of a case recap's runtime does not run as specified (status skipped).
Message skipped_reply(const training::CaseSpec& spec, const std::string& why, const Json& id) {
  std::vector<std::string> names;
  std::string err;
  if (auto dev = device::make_device(device::BackendChoice::Sim, {}, &err)) {
    training::Session session(*dev, spec);
    for (models::Param* p : session.trainer().params) names.push_back(p->name);
  }
  Message m;
  m.header = {{"op", "observation"}, {"id", id}, {"status", "skipped"}, {"reason", why}, {"param_names", names},
              {"steps", Json::array()},
              {"memory", {{"capture_peak_bytes", 0}, {"replay_peak_bytes", 0}, {"graph_pool_bytes", 0},
                          {"activations_in_graphs_bytes", 0}, {"activations_eager_bytes", 0}}},
              {"timings", {{"run_ms", 0.0}}}};
  return m;
}

Json failure_json(const training::RunFailure& f) {
  return {{"phase", f.phase}, {"pass", f.pass},   {"layer", f.layer},   {"microbatch", f.microbatch},
          {"step", f.step},   {"api", f.api},     {"error", f.error},   {"message", f.message}};
}

// An observation's "memory": the figures every system reports (drivers/PROTOCOL.md).
Json observation_memory_json(const training::RunResult& r) {
  int64_t replay_peak = 0, eager_activations = 0;
  for (const auto& s : r.steps) {
    if (s.phase == "replay") replay_peak = std::max(replay_peak, s.memory.device.peak_bytes);
    else eager_activations = std::max(eager_activations, s.memory.activations_peak());
  }
  return {{"capture_peak_bytes", r.captured ? r.capture_memory.device.peak_bytes : 0},
          {"replay_peak_bytes", replay_peak},
          {"graph_pool_bytes", r.captured ? r.capture_memory.allocator.pool_peak_reserved_bytes : 0},
          {"activations_in_graphs_bytes", r.captured ? r.capture_memory.activations_peak() : 0},
          {"activations_eager_bytes", eager_activations}};
}

}  // namespace

Message observation_of(const training::RunResult& r, const Json& id) {
  Message m;
  Json& h = m.header;
  h = {{"op", "observation"}, {"id", id}, {"status", r.ok() ? "ok" : "failed"}, {"reason", ""}};
  if (r.failure) {
    h["reason"] = r.failure->line();
    h["failure"] = failure_json(*r.failure);
  }
  h["param_names"] = r.param_names;
  Json steps = Json::array();
  for (const auto& s : r.steps) {
    Json losses = Json::array(), draws = Json::array();
    for (const auto& mb : s.microbatches) losses.push_back(json_number(mb.loss));
    for (const auto& e : s.ledger)
      draws.push_back({{"layer", e.site.layer}, {"op", e.site.op}, {"microbatch", e.site.microbatch},
                       {"pass", runtime::phase_name(e.site.phase)}, {"seed", e.seed}, {"offset", e.offset},
                       {"count", e.count}, {"generator", e.generator}});
    steps.push_back({{"step", s.step}, {"phase", s.phase}, {"losses", losses}, {"masks", Json::array()},
                     {"draws", draws}, {"replays", Json(s.replays)}, {"ms", json_number(s.ms)}});
    if (s.graph_pool_bytes) steps.back()["graph_pool_bytes"] = *s.graph_pool_bytes;
    if (s.graph_pool_used_bytes) steps.back()["graph_pool_used_bytes"] = *s.graph_pool_used_bytes;
    const std::string st = std::to_string(s.step);
    for (size_t mb = 0; mb < s.microbatches.size(); ++mb)
      for (size_t i = 0; i < s.microbatches[mb].grads.size(); ++i)
        m.frames.push_back(f32_frame("grad " + st + " " + std::to_string(mb) + " " + std::to_string(i),
                                     s.microbatches[mb].grads[i]));
    for (size_t i = 0; i < s.grads.size(); ++i) m.frames.push_back(f32_frame("grad " + st + " " + std::to_string(i), s.grads[i]));
    for (size_t i = 0; i < s.params.size(); ++i) m.frames.push_back(f32_frame("param " + st + " " + std::to_string(i), s.params[i]));
  }
  h["steps"] = steps;
  // What the executor captured and launched (CONTRACT: "graphs"), as a framework driver reports it.
  h["graphs"] = {{"captures", r.captures ? Json(*r.captures) : Json::object()}};
  h["memory"] = observation_memory_json(r);
  // What recap's own oracles read beyond the common fields (run_result_of reads them back).
  Json cap = Json::array();
  for (const auto& c : r.capture_memory.allocator.tensors) cap.push_back({c.live_bytes, c.peak_bytes});
  Json step_memory = Json::array(), step_rebindings = Json::array();
  for (const auto& s : r.steps) {
    step_memory.push_back({s.memory.device.peak_bytes, s.memory.activations_peak()});
    Json rb = Json::array();
    for (const auto& b : s.rebindings)
      rb.push_back({{"layer", b.layer}, {"microbatch", b.microbatch}, {"holes", b.holes}, {"rebound", b.rebound},
                    {"recomputed", b.recomputed}, {"read", b.read}, {"misplaced", b.misplaced}});
    step_rebindings.push_back(rb);
  }
  h["recap"] = {{"layer_names", r.layer_names},
                {"param_layer", r.param_layer},
                {"captured", r.captured},
                {"graphs", r.graphs},
                {"capture_ms", json_number(r.capture_ms)},
                {"capture_tensors", cap},
                {"capture_device_peak", r.capture_memory.device.peak_bytes},
                {"capture_pool_peak_reserved", r.capture_memory.allocator.pool_peak_reserved_bytes},
                {"capture_pool_used", r.capture_memory.allocator.pool_used_bytes},
                {"step_memory", step_memory},
                {"step_rebindings", step_rebindings},
                {"held_in_graphs", r.held_in_graphs ? Json(*r.held_in_graphs) : Json(nullptr)},
                {"ledger_summary", r.ledger_summary},
                {"recompute_mismatches", r.recompute_mismatches},
                {"reused_masks", r.reused_masks},
                {"overlapping_draws", r.overlapping_draws},
                {"repeated_draws", r.repeated_draws},
                {"draw_streams", r.draw_streams}};
  return m;
}

namespace {
const Json& need(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw ProtocolError(where + ": missing '" + key + "'");
  return j[key];
}
double number(const Json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j == "nan" ? NAN : j == "inf" ? INFINITY : j == "-inf" ? -INFINITY : throw ProtocolError("a number expected");
  throw ProtocolError("a number expected");
}
std::vector<float> frame_values(const Message& m, const std::string& name) {
  const Frame* f = m.frame(name);
  if (!f) throw ProtocolError("observation: missing frame '" + name + "'");
  return f32_values(*f);
}
// A rank group's "ranks", its steps' "ranks" rows and its replicated parameters' `@<r>` gradient
// frames (drivers/PROTOCOL.md, "Rank groups"). `n`: the parameters.
training::RankGroupRun rank_group_of(const Message& m, size_t n) {
  const Json& h = m.header;
  const Json& g = h["ranks"];
  training::RankGroupRun rg;
  rg.world = need(g, "world", "observation.ranks").get<int>();
  rg.tp = g.value("tp", rg.world);
  rg.backend = g.value("backend", std::string());
  if (rg.world < 1 || rg.world > 64) throw ProtocolError("observation.ranks.world: " + std::to_string(rg.world) + " is not in [1, 64]");
  rg.tp_sites = g.value("tp_sites", std::vector<std::string>{});
  rg.pp = g.value("pp", 1);
  rg.vp = g.value("vp", 1);
  if (rg.vp < 1 || rg.vp > 64) throw ProtocolError("observation.ranks.vp: " + std::to_string(rg.vp) + " is not in [1, 64]");
  rg.sp = g.value("sp", false);
  rg.dp = g.value("dp", 1);
  if (rg.dp < 1 || rg.dp > rg.world || rg.world % rg.dp != 0)
    throw ProtocolError("observation.ranks.dp: " + std::to_string(rg.dp) + " replicas of a group of " + std::to_string(rg.world));
  rg.replicas = g.value("replicas", std::vector<int>(static_cast<size_t>(rg.world), 0));
  if (rg.replicas.size() != static_cast<size_t>(rg.world))
    throw ProtocolError("observation.ranks.replicas: " + std::to_string(rg.replicas.size()) + " replicas for " +
                        std::to_string(rg.world) + " ranks");
  for (int d : rg.replicas)
    if (d < 0 || d >= rg.dp) throw ProtocolError("observation.ranks.replicas: replica " + std::to_string(d) + " of " + std::to_string(rg.dp));
  rg.stages = g.value("stages", std::vector<int>(static_cast<size_t>(rg.world), 0));
  if (rg.stages.size() != static_cast<size_t>(rg.world))
    throw ProtocolError("observation.ranks.stages: " + std::to_string(rg.stages.size()) + " stages for " +
                        std::to_string(rg.world) + " ranks");
  for (const Json& e : g.value("stage_layers", Json::array())) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number_integer())
      throw ProtocolError("observation.ranks.stage_layers: expected [first, stop] pairs");
    rg.stage_layers.push_back({e[0].get<int>(), e[1].get<int>()});
  }
  rg.schedules.resize(static_cast<size_t>(rg.world));
  rg.shard_dim.assign(n, -1);
  for (const Json& e : g.value("shards", Json::array())) {
    const size_t i = need(e, "param", "observation.ranks.shards").get<size_t>();
    if (i >= n) throw ProtocolError("observation.ranks.shards: parameter " + std::to_string(i) + " of " + std::to_string(n));
    if (e.contains("dim") && !e["dim"].is_null()) rg.shard_dim[i] = e["dim"].get<int>();
  }
  rg.masks.resize(static_cast<size_t>(rg.world));
  rg.replicated_grads.resize(static_cast<size_t>(rg.world));
  rg.replica_grads.resize(static_cast<size_t>(rg.world));
  for (const Json& sj : need(h, "steps", "observation")) {
    const int step = need(sj, "step", "steps").get<int>();
    const std::string st = std::to_string(step);
    for (const Json& row : sj.value("ranks", Json::array())) {
      const int rank = need(row, "rank", "steps.ranks").get<int>();
      if (rank < 0 || rank >= rg.world) throw ProtocolError("steps.ranks: rank " + std::to_string(rank) + " of a group of " + std::to_string(rg.world));
      auto& mine = rg.masks[static_cast<size_t>(rank)];
      for (const Json& d : row.value("masks", Json::array())) {
        training::RankMask k;
        k.step = step;
        k.layer = d.value("layer", std::string());
        k.op = d.value("op", std::string());
        k.microbatch = d.value("microbatch", 0);
        from_name(runtime::kPhaseNames, d.value("pass", std::string("forward")), &k.pass);
        k.checkpointed = d.value("checkpointed", false);
        k.digest = d.value("digest", std::string());
        k.numel = d.value("numel", uint64_t{0});
        if (d.contains("index")) {
          k.index = d["index"].get<int>();
        } else {  // numbered by its order among its key's draws, as run_result_of numbers one rank's
          for (const auto& o : mine)
            k.index += o.step == k.step && o.layer == k.layer && o.op == k.op && o.microbatch == k.microbatch && o.pass == k.pass;
        }
        mine.push_back(std::move(k));
      }
      if (row.contains("schedule")) {  // a pipeline stage's events of this step, as it ran them
        std::vector<training::StageEvent> events;
        for (const Json& e : row["schedule"]) {
          if (!e.is_array() || e.size() < 2 || e.size() > 3 || !e[0].is_string() || !e[1].is_number_integer() ||
              (e.size() == 3 && !e[2].is_number_integer()))
            throw ProtocolError(
                "steps.ranks.schedule: expected [\"forward\"|\"backward\", microbatch(, model chunk)] events");
          events.push_back({e[0].get<std::string>() == "forward", e[1].get<int>(), e.size() == 3 ? e[2].get<int>() : 0});
        }
        rg.schedules[static_cast<size_t>(rank)].push_back({step, std::move(events)});
      }
      const size_t mbs = row.value("losses", Json::array()).size();
      const std::string at = " @" + std::to_string(rank);
      int last_mb = -1;  // the rank's last microbatch (with replicas, of its share of the step's)
      for (size_t mb = 0; mb < mbs; ++mb)
        for (size_t i = 0; i < n; ++i) {
          const std::string name = "grad " + st + " " + std::to_string(mb) + " " + std::to_string(i);
          const Frame* f = m.frame(name + at);
          if (f) last_mb = static_cast<int>(mb);
          if (f && rg.shard_dim[i] < 0) rg.replicated_grads[static_cast<size_t>(rank)][name] = f32_values(*f);
        }
      if (rg.dp > 1)
        for (size_t i = 0; i < n; ++i) {
          const std::string name = "grad " + st + " " + std::to_string(i);
          const Frame* applied = m.frame(name + at);
          const Frame* own = m.frame("grad " + st + " " + std::to_string(last_mb) + " " + std::to_string(i) + at);
          if (applied) rg.replica_grads[static_cast<size_t>(rank)][name] = {f32_values(*applied), own ? f32_values(*own) : std::vector<float>{}};
        }
    }
  }
  return rg;
}
}  // namespace

training::RunResult run_result_of(const Message& m, const training::CaseSpec& spec) {
  const Json& h = m.header;
  try {
    if (h.value("op", std::string()) == "error") throw ProtocolError("the worker refused the run: " + h.value("message", std::string()));
    if (h.value("op", std::string()) != "observation") throw ProtocolError("observation expected");
    training::RunResult r;
    r.spec = spec;
    const std::string status = need(h, "status", "observation").get<std::string>();
    if (status == "skipped") throw SkippedBySut(h.value("reason", std::string("no reason given")));
    if (status == "failed") {
      const Json& f = need(h, "failure", "observation");
      training::RunFailure rf;
      rf.phase = f.value("phase", std::string());
      rf.pass = f.value("pass", std::string());
      rf.layer = f.value("layer", std::string());
      rf.microbatch = f.value("microbatch", -1);
      rf.step = f.value("step", -1);
      rf.api = f.value("api", std::string());
      rf.error = f.value("error", std::string());
      rf.message = f.value("message", std::string());
      r.failure = rf;
    }
    r.param_names = need(h, "param_names", "observation").get<std::vector<std::string>>();
    static const Json none = Json::object();
    const bool own = h.contains("recap");  // recap's runtime, with its own fields
    const Json& x = own ? h["recap"] : none;
    r.layer_names = x.value("layer_names", std::vector<std::string>{});
    r.param_layer = x.value("param_layer", std::vector<int>{});
    r.captured = x.value("captured", false);
    r.graphs = x.value("graphs", 0);
    r.capture_ms = own ? number(need(x, "capture_ms", "observation.recap")) : 0.0;
    const Json& cap = own ? need(x, "capture_tensors", "observation.recap") : Json::array();
    for (size_t c = 0; c < cap.size() && c < r.capture_memory.allocator.tensors.size(); ++c) {
      r.capture_memory.allocator.tensors[c].live_bytes = cap[c].at(0).get<int64_t>();
      r.capture_memory.allocator.tensors[c].peak_bytes = cap[c].at(1).get<int64_t>();
    }
    r.capture_memory.device.peak_bytes = x.value("capture_device_peak", int64_t{0});
    r.capture_memory.allocator.pool_peak_reserved_bytes = x.value("capture_pool_peak_reserved", int64_t{0});
    r.capture_memory.allocator.pool_used_bytes = x.value("capture_pool_used", int64_t{0});
    r.ledger_summary = x.value("ledger_summary", std::string());
    r.recompute_mismatches = x.value("recompute_mismatches", size_t{0});
    r.reused_masks = x.value("reused_masks", size_t{0});
    r.overlapping_draws = x.value("overlapping_draws", size_t{0});
    r.repeated_draws = x.value("repeated_draws", size_t{0});
    r.draw_streams = x.value("draw_streams", size_t{0});
    if (h.contains("graphs")) r.captures = need(h["graphs"], "captures", "observation.graphs").get<std::map<std::string, int>>();
    else r.captures = std::nullopt;  // the system does not observe graphs
    const Json& step_memory = own ? need(x, "step_memory", "observation.recap") : Json::array();
    const Json& step_rebindings = x.value("step_rebindings", Json::array());
    if (!own || x.value("held_in_graphs", Json(nullptr)).is_null()) r.held_in_graphs = std::nullopt;
    else r.held_in_graphs = x["held_in_graphs"].get<std::map<std::string, int64_t>>();
    std::vector<std::vector<MaskDraw>> mask_draws;  // per step: another system's draws as it reported them
    const bool group = h.contains("ranks") && h["ranks"].is_object();  // a rank group's reply
    const int world = group ? h["ranks"].value("world", 1) : 1;
    // the ranks of one stage (tp of them; all with no pipeline stages) hold a site's masks
    const int group_tp = std::max(1, std::min(world, group ? h["ranks"].value("tp", world) : 1));
    const std::vector<std::string> tp_sites = group ? h["ranks"].value("tp_sites", std::vector<std::string>{})
                                                    : std::vector<std::string>{};
    // A pipeline group: the rank that ran each top-level layer (the first rank of its stage), whose
    // `@<r>` masks the fp64 oracles apply to that layer. stage_layers lists virtual stages,
    // chunk * pp + stage (without virtual stages, stages).
    std::vector<int> layer_rank;
    if (const int pp = group ? h["ranks"].value("pp", 1) : 1; pp > 1) {
      const std::vector<int> stages = h["ranks"].value("stages", std::vector<int>{});
      int virtual_stage = 0;
      for (const Json& e : h["ranks"].value("stage_layers", Json::array())) {
        const auto it = std::find(stages.begin(), stages.end(), virtual_stage++ % pp);
        for (int l = e.at(0).get<int>(); l < e.at(1).get<int>() && l < 4096; ++l) {
          if (static_cast<int>(layer_rank.size()) <= l) layer_rank.resize(static_cast<size_t>(l) + 1, -1);
          layer_rank[static_cast<size_t>(l)] = it == stages.end() ? -1 : static_cast<int>(it - stages.begin());
        }
      }
    }
    auto rank_of_site = [&](const std::string& site) {  // "block3.attn.core": layer 3's rank; 0 without pp
      if (layer_rank.empty()) return 0;
      const std::string head = site.substr(0, site.find('.'));
      size_t i = head.size();
      while (i > 0 && std::isdigit(static_cast<unsigned char>(head[i - 1]))) --i;
      if (i == head.size()) return -1;
      const size_t l = std::stoul(head.substr(i));
      return l < layer_rank.size() ? layer_rank[l] : -1;
    };
    // With data-parallel replicas a microbatch's masks are its replica's: replica d ran the step's
    // microbatches d * M / dp .., on the ranks tp * d .. of each stage (megatron-core's rank order).
    const int dp = group ? std::max(1, h["ranks"].value("dp", 1)) : 1;
    const int per_replica = std::max(1, spec.microbatches / dp);
    auto owner_of = [&](const std::string& site, int microbatch) {
      const int r = rank_of_site(site);
      return r < 0 ? -1 : r + (microbatch / per_replica) * group_tp;
    };
    const Json& steps = need(h, "steps", "observation");
    const size_t n = r.param_names.size();
    const int act = static_cast<int>(device::MemCategory::Activations);
    for (size_t k = 0; k < steps.size(); ++k) {
      const Json& sj = steps[k];
      training::StepRecord s;
      s.step = need(sj, "step", "steps").get<int>();
      s.phase = need(sj, "phase", "steps").get<std::string>();
      s.ms = number(need(sj, "ms", "steps"));
      const std::string st = std::to_string(s.step);
      if (sj.contains("replays")) s.replays = sj["replays"].get<std::map<std::string, int>>();
      mask_draws.emplace_back();
      const Json& losses = need(sj, "losses", "steps");
      for (size_t mb = 0; mb < losses.size(); ++mb) {
        training::MicrobatchRecord rec;
        rec.microbatch = static_cast<int>(mb);
        rec.loss = static_cast<float>(number(losses[mb]));
        for (size_t i = 0; i < n; ++i) rec.grads.push_back(frame_values(m, "grad " + st + " " + std::to_string(mb) + " " + std::to_string(i)));
        s.microbatches.push_back(std::move(rec));
      }
      for (size_t i = 0; i < n; ++i) s.grads.push_back(frame_values(m, "grad " + st + " " + std::to_string(i)));
      for (size_t i = 0; i < n; ++i) s.params.push_back(frame_values(m, "param " + st + " " + std::to_string(i)));
      // recap's ledger draws; another system's masks stand in for them: a draw per mask, its
      // digest in place of the realized (seed, offset).
      for (const char* key : {"masks", "draws"})
        for (const Json& d : sj.value(key, Json::array())) {
          runtime::LedgerEntry e;
          e.site.layer = d.value("layer", std::string());
          e.site.op = d.value("op", std::string());
          e.site.microbatch = d.value("microbatch", 0);
          from_name(runtime::kPhaseNames, d.value("pass", std::string("forward")), &e.site.phase);
          e.step = s.step;
          const bool mask = key[0] == 'm';
          e.seed = mask ? std::stoull(d.value("digest", std::string("0")), nullptr, 16) : d.value("seed", uint64_t{0});
          e.offset = d.value("offset", uint64_t{0});
          e.count = d.value(mask ? "numel" : "count", uint64_t{0});
          e.generator = mask ? "mask" : d.value("generator", std::string());
          if (mask) {  // the mask itself when the worker sent it (mask_frames)
            MaskDraw md{e.site.layer, e.site.op, e.site.microbatch, e.site.phase, 0, d.value("checkpointed", false), e.seed};
            if (d.contains("index")) {
              md.index = d["index"].get<int>();
            } else {  // a draw without "index" is numbered by its order among its key's draws
              for (const auto& o : mask_draws.back())
                md.index += o.layer == md.layer && o.op == md.op && o.microbatch == md.microbatch && o.pass == md.pass;
            }
            mask_draws.back().push_back(md);
            const std::string name = "mask " + st + " " + std::to_string(e.site.microbatch) + " " +
                                     d.value("pass", std::string("forward")) + " " + e.site.layer + " " + e.site.op + " " +
                                     std::to_string(md.index);
            if (const Frame* f = m.frame(name)) {
              if (f->dtype != "u8" || f->bytes.size() != e.count)
                throw ProtocolError("observation: frame '" + name + "' is not " + std::to_string(e.count) + " u8 values");
              e.mask.assign(f->bytes.begin(), f->bytes.end());
            } else if (group) {
              // A rank group sends every rank's own mask (`name @<r>`): outside the regions rank 0's
              // (every rank's is equal: outside_masks_equal); inside, the full mask is the ranks'
              // in rank order (rank r owns heads r*heads/N ..; a mask is [heads, T, T]), so the
              // fp64 oracles apply what the group drew to the full model.
              // With pipeline stages each layer's mask is the one rank's that ran it (its stage's).
              const bool inside = std::find(tp_sites.begin(), tp_sites.end(), e.site.layer) != tp_sites.end();
              const int owner = owner_of(e.site.layer, e.site.microbatch);
              std::vector<uint8_t> full;
              bool whole = owner >= 0;
              for (int r = owner; r < (inside ? owner + group_tp : owner + 1) && whole; ++r) {
                const Frame* f = m.frame(name + " @" + std::to_string(r));
                whole = f && f->dtype == "u8" && (r > owner || f->bytes.size() == e.count);
                if (whole) full.insert(full.end(), f->bytes.begin(), f->bytes.end());
              }
              if (whole) {
                e.count = full.size();
                e.mask = std::move(full);
              }
            }
          }
          s.ledger.push_back(e);
        }
      if (k < step_memory.size()) {
        s.memory.device.peak_bytes = step_memory[k].at(0).get<int64_t>();
        s.memory.allocator.tensors[act].peak_bytes = step_memory[k].at(1).get<int64_t>();
      }
      if (sj.contains("graph_pool_bytes")) s.graph_pool_bytes = sj["graph_pool_bytes"].get<int64_t>();
      if (sj.contains("graph_pool_used_bytes")) s.graph_pool_used_bytes = sj["graph_pool_used_bytes"].get<int64_t>();
      if (k < step_rebindings.size())
        for (const Json& b : step_rebindings[k])
          s.rebindings.push_back(training::Rebinding{b.at("layer").get<std::string>(), b.at("microbatch").get<int>(),
                                                     b.at("holes").get<int>(), b.at("rebound").get<bool>(),
                                                     b.at("recomputed").get<uint64_t>(),
                                                     b.at("read").get<std::vector<uint64_t>>(), b.at("misplaced").get<int>()});
      r.steps.push_back(std::move(s));
    }
    if (h.contains("ranks")) r.ranks = rank_group_of(m, n);
    if (!own) {
      // What recap's runtime counts itself: recomputed masks unlike their forward mask, forward
      // masks seen again at a later step; and the figures memory judges.
      std::map<std::tuple<std::string, std::string, int, uint64_t>, int> first_step;
      size_t fwd = 0, rec = 0, small = 0;
      // A mask is a few bits of entropy per element (0.47 at p = 0.1): two independent draws of a
      // small one are equal by chance (32 elements at p = 0.1: once in ~600 pairs). A repeat is
      // judged only for masks of at least 40 bits at the case's least random dropout.
      double bits_per_element = 1.0;
      for (const auto& l : spec.model.layers)
        if (l.dropout > 0.0f && l.dropout < 1.0f) {
          const double p = l.dropout;
          bits_per_element = std::min(bits_per_element, -(p * std::log2(p) + (1 - p) * std::log2(1 - p)));
        }
      for (const auto& s : r.steps)
        for (const auto& e : s.ledger)
          if (e.site.phase == runtime::Phase::Forward) {
            ++fwd;
            if (static_cast<double>(e.count) * bits_per_element < 40.0) {
              ++small;
              continue;
            }
            auto [it, fresh] = first_step.try_emplace({e.site.layer, e.site.op, e.site.microbatch, e.seed}, s.step);
            if (!fresh && it->second != s.step) ++r.reused_masks;
          } else if (e.site.phase == runtime::Phase::Recompute) {
            ++rec;
          }
      judge_recompute_draws(r, mask_draws);
      r.ledger_summary = std::to_string(fwd + rec) + " masks (" + std::to_string(fwd) + " forward, " + std::to_string(rec) +
                         " recompute), " + std::to_string(r.recompute_mismatches) + " recompute mismatches" +
                         (small ? ", " + std::to_string(small) + " forward masks under 40 bits not judged for reuse" : "");
      const Json& mem = h.value("memory", Json::object());
      judge_graphs(r, spec);
      r.capture_memory.device.peak_bytes = mem.value("capture_peak_bytes", int64_t{0});
      r.capture_memory.allocator.pool_peak_reserved_bytes = mem.value("graph_pool_bytes", int64_t{0});
      r.capture_memory.allocator.tensors[act].peak_bytes = mem.value("activations_in_graphs_bytes", int64_t{0});
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(std::string("a malformed observation: ") + e.what());
  }
}

std::vector<Frame> case_frames(const training::CaseSpec& spec) {
  std::string err;
  auto dev = device::make_device(device::BackendChoice::Sim, {}, &err);
  if (!dev) throw std::runtime_error("cannot create a sim device: " + err);
  training::Session session(*dev, spec);
  training::Trainer& t = session.trainer();
  std::vector<Frame> frames;
  for (models::Param* p : t.params)
    frames.push_back(f32_frame("param " + p->name, runtime::to_floats(*dev, p->value), p->value.shape));
  const std::vector<int64_t> shape{spec.model.tokens, spec.model.hidden};
  for (int step = 0; step < spec.steps(); ++step)
    for (int mb = 0; mb < spec.microbatches; ++mb) {
      const std::string at = std::to_string(step) + " " + std::to_string(mb);
      frames.push_back(f32_frame("input " + at, t.fresh_values(step, mb, 0), shape));
      frames.push_back(f32_frame("target " + at, t.fresh_values(step, mb, 1), shape));
    }
  return frames;
}

Json visible_device_json(const device::Device& dev) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  auto or_null = [](const std::string& x) { return x.empty() ? Json(nullptr) : Json(x); };
  return {{"cuda_visible_devices", cvd ? Json(cvd) : Json(nullptr)},
          {"uuid", or_null(dev.uuid())},
          {"pci_bus_id", or_null(dev.pci_bus_id())}};
}

Message hello_reply(device::Device& dev) {
  Message m;
  m.header = {{"op", "hello"},
              {"protocol", kProtocol},
              {"sut", "recap"},
              {"version", "0.1.0"},
              {"device", dev.name()},
              {"visible_device", visible_device_json(dev)},
              {"capabilities", recap_capabilities_json()},
              {"ops", Json::array({"measure"})}};
  return m;
}

namespace {
// Fault points for the client's crash tests, off unless RECAP_FAULT_WORKER is set:
// "abort@N" aborts the worker at its N-th run (after a line on stderr, which the client's crash
// reason quotes), "garbage@N" answers it with a line that is not JSON, "retire@N" answers it and
// asks to be replaced (the reply's `retire`), "hang@N" never answers it
// (the client's --case-timeout kills it); ":FILE" after N makes it fire once per FILE (the worker
// that fires creates it), so the worker recap starts next runs clean.
struct WorkerFault {
  std::string kind;
  int at = -1;
  std::string once;
};
WorkerFault worker_fault() {
  WorkerFault f;
  if (const char* e = std::getenv("RECAP_FAULT_WORKER")) {
    std::string v = e;
    size_t at = v.find('@');
    if (at != std::string::npos) {
      f.kind = v.substr(0, at);
      f.at = std::atoi(v.c_str() + at + 1);
      size_t colon = v.find(':', at);
      if (colon != std::string::npos) f.once = v.substr(colon + 1);
    }
  }
  return f;
}
}  // namespace

namespace {
// The reply to a measure request: a measurement, skipped with the reason, or an error.
Message measure_reply(InProcessSut& recap, const Json& h, const Json& id) {
  Message m;
  m.header = {{"op", "measurement"}, {"id", id}, {"status", "ok"}, {"reason", ""}};
  const std::string what = h.value("what", std::string("case"));
  if (what == "matmul-bf16") {
    std::string why;
    std::optional<double> r = recap.matmul_bf16_tflops(&why);
    m.header["matmul_bf16_tflops"] = r ? json_number(*r) : Json(nullptr);
    if (!r) m.header["reason"] = why;
    return m;
  }
  if (what != "case") return error_reply("measure: unknown 'what' '" + what + "' (case, matmul-bf16)", id);
  training::CaseSpec spec;
  std::string problem = h.contains("case") ? training::case_from_json(h["case"], &spec) : "measure: missing case";
  if (!problem.empty()) return error_reply("case: " + problem, id);
  try {
    Measurement r = recap.measure(spec);
    m.header.update(measurement_to_json(r));
    if (!r.failure.empty()) {
      m.header["status"] = "failed";
      m.header["reason"] = r.failure;
    }
  } catch (const SkippedBySut& e) {
    m.header["status"] = "skipped";
    m.header["reason"] = e.what();
  } catch (const std::exception& e) {
    return error_reply(std::string("the measured run threw: ") + e.what(), id);
  }
  return m;
}
}  // namespace

int serve(FILE* in, FILE* out, device::BackendChoice backend) {
  static const WorkerFault fault = worker_fault();
  int runs = 0;
  std::string err;
  auto probe = device::make_device(backend, {}, &err);
  InProcessSut recap(backend);
  for (;;) {
    Message req;
    try {
      if (!read_message(in, &req)) return 0;
    } catch (const ProtocolError& e) {
      // The stream cannot be trusted past a bad message: say so and stop.
      write_message(out, error_reply(e.what()));
      return 2;
    }
    const Json& h = req.header;
    const std::string op = h.contains("op") && h["op"].is_string() ? h["op"].get<std::string>() : "";
    const Json id = h.contains("id") ? h["id"] : Json(nullptr);
    if (op == "shutdown") return 0;
    if (op == "hello") {
      if (h.value("protocol", std::string()) != kProtocol) {
        write_message(out, error_reply("protocol mismatch: this worker speaks " + std::string(kProtocol)));
        return 2;
      }
      if (!probe) {
        write_message(out, error_reply("the device is not usable: " + err));
        return 2;
      }
      write_message(out, hello_reply(*probe));
      continue;
    }
    if (op == "measure") {  // recap tradeoff (drivers/PROTOCOL.md, "measure"), as recap measures in process
      if (!id.is_number_integer()) {
        write_message(out, error_reply("measure: id must be an integer", id));
        continue;
      }
      write_message(out, measure_reply(recap, h, id));
      continue;
    }
    if (op != "run") {
      write_message(out, error_reply(op.empty() ? "a request without an op" : "unknown op '" + op + "' (hello, run, measure, shutdown)", id));
      continue;
    }
    if (!id.is_number_integer()) {
      write_message(out, error_reply("run: id must be an integer", id));
      continue;
    }
    training::CaseSpec spec;
    std::string problem = h.contains("case") ? training::case_from_json(h["case"], &spec) : "run: missing case";
    if (!problem.empty()) {
      write_message(out, error_reply("case: " + problem, id));
      continue;
    }
    bool retire = false;
    if (++runs == fault.at && (fault.once.empty() || !std::filesystem::exists(fault.once))) {
      if (!fault.once.empty()) std::ofstream{fault.once};
      if (fault.kind == "retire") {  // answers, and asks to be replaced (as a driver that leaks does)
        std::fprintf(stderr, "recap worker: RECAP_FAULT_WORKER retire@%d: retiring after run %d\n", fault.at, runs);
        retire = true;
      }
      if (fault.kind == "abort") {
        std::fprintf(stderr, "recap worker: RECAP_FAULT_WORKER abort@%d: aborting in run %d\n", fault.at, runs);
        std::abort();
      }
      if (fault.kind == "hang") {
        std::fprintf(stderr, "recap worker: RECAP_FAULT_WORKER hang@%d: not answering run %d\n", fault.at, runs);
        for (;;) pause();
      }
      if (fault.kind == "garbage") {
        std::fputs("garbage instead of an observation\n", out);
        std::fflush(out);
        continue;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    // "profile": true (drivers/PROTOCOL.md): this run's phases come back in timings.profile
    const bool profiled = h.contains("profile") && h["profile"].is_boolean() && h["profile"].get<bool>();
    profile::Phases phases;
    profile::Sink sink(profiled ? &phases : nullptr);
    try {
      // As recap runs a case in process: the same Sut.
      SutRun run = recap.run(spec, {});
      std::optional<profile::Scope> encode(std::in_place, profile::kEncode);
      Message obs = observation_of(run.result, id);
      obs.header["device"] = run.device_name;
      obs.header["recap"]["backend"] = run.backend;
      obs.header["recap"]["hygiene"] = run.hygiene.value_or("");
      obs.header["recap"]["live_after"] = run.live_after.value_or(0);
      if (run.init)
        obs.header["recap"]["initcheck"] = {{"launches", run.init->launches},
                                            {"bytes", run.init->bytes},
                                            {"uninitialized", run.init->uninitialized}};
      encode.reset();
      obs.header["timings"] = {
          {"run_ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()}};
      if (profiled) obs.header["timings"]["profile"] = phases;
      if (retire) obs.header["retire"] = true;
      write_message(out, obs);
    } catch (const SkippedBySut& e) {
      write_message(out, skipped_reply(spec, e.what(), id));
    } catch (const ProtocolError&) {
      throw;
    } catch (const std::exception& e) {
      write_message(out, error_reply(std::string("the run threw: ") + e.what(), id));
    }
  }
}

}  // namespace recap::sut
