// memory: nothing stays live on the device after teardown; when recompute runs inside graphs,
// the activation memory the graphs hold is judged against the same case without checkpoints
// (skipped, naming its trouble, when that twin did not run through or captured nothing):
//   skip        recompute is bypassed inside graphs (Megatron-LM PR #3919): what the graph-safe
//               policy would have saved is a finding, with its bytes (a failure with
//               --require-memory-savings; docs/recompute-and-rng.md, bug class 2). A system
//               without a graph-safe policy is judged against the no-checkpoint twin instead.
//   graph-safe  on recap's runtime the peak equals the memory model's (below); on another system
//   and naive   it stays under a bound predicted from the case; what it saves is reported.
// More demands, on what a run observed rather than on a twin:
//   graph pools   the bytes graph pools hold after each replay step, and the bytes tensors hold
//                 in them, never grow after the first replay of the same graphs (every system under
//                 test that reports them): a pool that grows leaks (bug class 27).
//   held bytes    on recap's runtime, the activation bytes each forward captured into a graph leaves
//                 for its backward equal the memory model's prediction from the case
//                 (properties/memory_model.h), byte for byte, for the case and for its no-checkpoint
//                 twin when that ran: a recompute that keeps what it should free (class 2), or a
//                 record that holds what it should let go, is caught where results agree.
//   the capture   on recap's runtime, the activations peak over the capture, the bytes its graph
//                 pools reserve and those live tensors still hold in them equal the model's
//                 prediction (memory_model.h: storage lifetimes through best-fit, never-split
//                 pools), for the case and its no-checkpoint twin: a pool that does not reuse what
//                 was freed, or a tensor freed late, is caught where every other figure agrees.
//   initialized   on recap's runtime on sim, every byte a kernel or copy reads was written since it
//                 was allocated (harness/device/sim/initcheck.h, compute-sanitizer initcheck's rule:
//                 sim hands out zeroed memory, so a read of fresh memory gives the same bits on
//                 every sim run and garbage on a GPU). On cuda, compute-sanitizer checks it.
// A check that judged none of these (frameworks report no bytes live after teardown) is skipped.
// The case's memory figures (case_memory_json) go into every report, judged or not.
#include <algorithm>
#include <tuple>

#include "properties/memory_model.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {

using training::CaseSpec;
using training::CheckpointGranularity;
using training::CheckpointPolicy;
using training::ExecutorKind;
using training::RunResult;

namespace {

// Whether some checkpoint runs inside a captured graph (and so is judged by the memory oracle).
bool checkpoint_in_graph(const CaseSpec& s) {
  if (s.executor == ExecutorKind::Eager) return false;
  for (const auto& f : s.layers)
    if (f.checkpoint != CheckpointGranularity::None && (s.executor == ExecutorKind::FullIteration || f.graphed))
      return true;
  return false;
}

int checkpoint_count(const CaseSpec& s) {
  int n = 0;
  for (const auto& f : s.layers)
    n += f.checkpoint == CheckpointGranularity::Full ? 1 : static_cast<int>(f.modules.size());
  return n;
}

int64_t activations_peak_in_graphs(const RunResult& r) { return r.capture_memory.activations_peak(); }

int64_t total(const std::map<std::string, int64_t>& m) {
  int64_t n = 0;
  for (const auto& [unit, bytes] : m) n += bytes;
  return n;
}

// "" when what a run's graphs held equals the model's prediction for `spec`, else the first unit
// that differs, one line (`who`: "" for the case, "the no-checkpoint twin: " for its twin).
std::string held_problem(const std::map<std::string, int64_t>& seen, const CaseSpec& spec, const std::string& who) {
  const std::map<std::string, int64_t> want = predicted_held_in_graphs(spec);
  if (seen == want) return "";
  std::string unit;
  int64_t a = 0, b = 0;
  for (const auto& [u, bytes] : want)
    if (auto it = seen.find(u); it == seen.end() || it->second != bytes) {
      unit = u;
      a = it == seen.end() ? 0 : it->second;
      b = bytes;
      break;
    }
  if (unit.empty())
    for (const auto& [u, bytes] : seen)
      if (!want.count(u)) {
        unit = u;
        a = bytes;
        break;
      }
  return who + "activations held by graphs differ from the memory model: " + unit + " keeps " + std::to_string(a) +
         " B for its backward, the model " + std::to_string(b) + " B (in all " + std::to_string(total(seen)) + " B vs " +
         std::to_string(total(want)) + " B)";
}

// "" when the capture's figures equal the model's prediction for `spec` (the activations peak, the
// bytes the graph pools reserved and those live tensors still hold in them), else the first that
// differs, one line; *evidence says what was compared when they agree.
std::string capture_problem(const RunResult& r, const CaseSpec& spec, const std::string& who, std::string* evidence) {
  const std::optional<CaptureMemory> want = predicted_capture_memory(spec);
  if (!want) return "";
  const auto& a = r.capture_memory.allocator;
  const std::tuple<const char*, int64_t, int64_t> figures[] = {
      {"activations peak during capture", r.capture_memory.activations_peak(), want->activations_peak},
      {"graph-pool bytes reserved by the capture", a.pool_peak_reserved_bytes, want->pool_reserved},
      {"graph-pool bytes live tensors hold after capture", a.pool_used_bytes, want->pool_used}};
  for (const auto& [what, seen, predicted] : figures)
    if (seen != predicted)
      return who + what + " differs from the memory model: " + std::to_string(seen) + " B observed, " +
             std::to_string(predicted) + " B predicted (" + std::to_string(want->pools) + " pools, " +
             std::to_string(want->allocations) + " allocations inside the capture)";
  *evidence = who + "capture: activations peak " + std::to_string(want->activations_peak) + " B, graph pools " +
              std::to_string(want->pool_reserved) + " B reserved (" + std::to_string(want->pool_used) +
              " B still in use) over " + std::to_string(want->pools) + " pools and " + std::to_string(want->allocations) +
              " allocations, as the memory model predicts";
  return "";
}

// The graph-pool figures after each replay step (StepRecord::graph_pool_bytes, what the pools hold,
// and ::graph_pool_used_bytes, what tensors hold in them): "" when neither grows after the first
// replay (evidence filled when two or more replays were observed), else the first growth, one line.
// A leak fills a pool's free blocks before the pool grows, hence both. The first replay is the
// baseline, not the capture: a framework may capture lazily, inside the first step it labels a replay.
std::string pool_growth(const RunResult& r, std::string* evidence) {
  using Figure = std::optional<int64_t> training::StepRecord::*;
  const std::pair<Figure, const char*> figures[] = {{&training::StepRecord::graph_pool_bytes, "graph pools"},
                                                    {&training::StepRecord::graph_pool_used_bytes, "tensors in graph pools"}};
  for (const auto& [figure, what] : figures) {
    const training::StepRecord* first = nullptr;
    int replays = 0;
    for (const auto& s : r.steps) {
      if (s.phase != "replay" || !(s.*figure)) continue;
      ++replays;
      if (first == nullptr) {
        first = &s;
        continue;
      }
      const int64_t a = *(first->*figure), b = *(s.*figure);
      if (b > a)
        return std::string(what) + " grew across replays of the same graphs (a leak): " + std::to_string(a) + " B after step " +
               std::to_string(first->step) + " (the first replay), " + std::to_string(b) + " B after step " +
               std::to_string(s.step) + " (+" + std::to_string(b - a) + " B)";
    }
    if (replays >= 2)
      *evidence += (evidence->empty() ? "" : ", ") + std::string(what) + " " + std::to_string(*(first->*figure)) +
                   " B after each of " + std::to_string(replays) + " replays";
  }
  return "";
}

CheckResult judge(Runs& runs) {
  const CaseSpec& spec = runs.spec();
  const RunResult& r = runs.main();
  CheckResult c = passed("memory", "");
  std::vector<std::string> problems, evidence;
  const std::optional<int64_t> live = runs.live_after();
  if (live && *live != 0) problems.push_back(std::to_string(*live) + " bytes still live on the device after teardown");
  if (live && *live == 0) evidence.push_back("0 bytes live after teardown");
  if (const std::optional<training::InitObservation>& init = runs.init(); init && init->launches > 0) {
    if (!init->uninitialized.empty())
      problems.push_back("device memory read before anything wrote it: " + init->uninitialized[0] +
                         (init->uninitialized.size() > 1
                              ? " (and " + std::to_string(init->uninitialized.size() - 1) + " more)"
                              : std::string()));
    else
      evidence.push_back(std::to_string(init->launches) + " launches read " + std::to_string(init->bytes) +
                         " B of device memory, every byte written since it was allocated");
  }
  std::string not_judged;  // why the in-graph figures were not judged although the case has them
  if (r.captured) {
    std::string pools;
    if (std::string leak = pool_growth(r, &pools); !leak.empty()) problems.push_back(leak);
    else if (!pools.empty()) evidence.push_back(pools);
  }
  if (r.captured && r.held_in_graphs) {
    // recap's runtime: what its graphs hold, against the model. The twin too, when it ran anyway.
    const int64_t seen = total(*r.held_in_graphs);
    runs.report().memory["held_in_graphs"] = seen;
    runs.report().memory["predicted_held_in_graphs"] = total(predicted_held_in_graphs(spec));
    if (std::string why = held_problem(*r.held_in_graphs, spec, ""); !why.empty()) problems.push_back(why);
    else
      evidence.push_back("activations held by graphs " + std::to_string(seen) + " B over " +
                         std::to_string(r.held_in_graphs->size()) + " captured forwards, as the memory model predicts");
    // The capture's peak and its pools, exactly (what the bound below only bounds for other systems).
    if (const std::optional<CaptureMemory> want = predicted_capture_memory(spec)) {
      runs.report().memory["predicted_activations_peak_in_graphs"] = want->activations_peak;
      runs.report().memory["predicted_graph_pool_reserved"] = want->pool_reserved;
    }
    std::string ev;
    if (std::string why = capture_problem(r, spec, "", &ev); !why.empty()) problems.push_back(why);
    else if (!ev.empty()) evidence.push_back(ev);
  }
  if (runs.ran() && r.captured && checkpoint_in_graph(spec)) {
    const Run& plain = runs.no_checkpoint_twin();
    if (std::string t = twin_trouble("the no-checkpoint twin", plain); !t.empty()) {
      not_judged = t;
    } else if (!plain.result->captured) {
      not_judged = "the no-checkpoint twin captured no graph";
    } else {
      // The saving the model states for the case's policy (on every system: what recap's design
      // saves): what the twin holds less what the case holds. recap's runtime is held to it.
      const CaseSpec bare = training::without_checkpoints(spec);
      runs.report().memory["predicted_saving_in_graphs"] =
          total(predicted_held_in_graphs(bare)) - total(predicted_held_in_graphs(spec));
      if (plain.result->held_in_graphs && r.held_in_graphs) {
        if (std::string why = held_problem(*plain.result->held_in_graphs, bare, "the no-checkpoint twin: "); !why.empty())
          problems.push_back(why);
        std::string ev;
        if (std::string why = capture_problem(*plain.result, bare, "the no-checkpoint twin: ", &ev); !why.empty())
          problems.push_back(why);
        runs.report().memory["no_checkpoint_held_in_graphs"] = total(*plain.result->held_in_graphs);
      }
      int64_t base = activations_peak_in_graphs(*plain.result);
      int64_t mine = activations_peak_in_graphs(r);
      runs.report().memory["no_checkpoint_activations_peak_in_graphs"] = base;
      runs.report().memory["activations_peak_in_graphs"] = mine;
      const int64_t elt = spec.model.dtype == models::DType::BF16 ? 2 : 4;
      const int64_t input = static_cast<int64_t>(spec.model.tokens) * spec.model.hidden * elt;  // one [tokens, hidden]
      // The skip policy's lost saving: a finding, or a failure with --require-memory-savings.
      auto lost_saving = [&](int64_t bytes, const std::string& what) {
        c.bytes = bytes;
        if (runs.options().require_memory_savings)
          problems.push_back(what.substr(8));
        else
          runs.report().findings.push_back(what);
      };
      if (spec.policy == CheckpointPolicy::Skip) {
        // What recompute would have saved: the same case under graph-safe.
        const Run& gs = runs.graph_safe_twin();
        if (twin_trouble("", gs).empty() && gs.result->captured) {
          int64_t want = activations_peak_in_graphs(*gs.result);
          runs.report().memory["graph_safe_activations_peak_in_graphs"] = want;
          evidence.push_back("activations inside graphs " + std::to_string(mine) + " B vs " + std::to_string(want) +
                             " B under graph-safe (" + std::to_string(base) + " B without checkpoints)");
          if (mine > want)
            lost_saving(mine - want, "memory: recompute lost inside graphs (skip): " + std::to_string(mine - want) +
                                         " bytes of activations (peak " + std::to_string(mine) + " B vs " +
                                         std::to_string(want) + " B under graph-safe, " + std::to_string(base) +
                                         " B without checkpoints)");
        } else if (spec.executor == ExecutorKind::FullIteration) {
          // One graph holds the forward and the backward, so its peak includes the backward's
          // recompute and can equal the no-checkpoint peak while recompute does save (a checkpoint
          // of the first layer recomputes once the rest is freed); megatron-core's skip does not
          // even apply there (FullCudaGraphWrapper sets no warmup or capture flag). Without a
          // graph-safe twin the saving cannot be measured (results/h200/2026-12-02-issue20).
          const std::string why = twin_trouble("it", gs);
          not_judged = "one full-iteration graph: its peak includes the backward's recompute, and no graph-safe twin "
                       "ran to compare with (" + (why.empty() ? std::string("it captured no graph") : why) + ")";
        } else if (mine == 0 && base == 0) {
          // Neither the case nor its twin held an activation inside graphs: no saving a recompute
          // could make was observed, so nothing was judged ("0 B vs 0 B" is no evidence).
          const std::string why = twin_trouble("it", gs);
          not_judged = "the case and its no-checkpoint twin both hold 0 B of activations inside graphs (nothing a "
                       "recompute could save was observed), and no graph-safe twin ran to compare with (" +
                       (why.empty() ? std::string("it captured no graph") : why) + ")";
        } else {
          evidence.push_back("activations inside graphs " + std::to_string(mine) + " B vs " + std::to_string(base) +
                             " B without checkpoints (no graph-safe twin)");
          if (mine >= base) {
            // No graph-safe twin (a framework after Megatron-LM PR #3919 runs only skip): inside
            // graphs the case holds what it holds without checkpoints, so it lost everything but
            // the checkpointed regions' inputs, which recompute would have kept.
            const int64_t inputs = static_cast<int64_t>(checkpoint_count(spec)) * spec.microbatches * input;
            const int64_t lost = std::max<int64_t>(0, mine - inputs);
            if (lost > 0)
              lost_saving(lost, "memory: recompute lost inside graphs (skip): " + std::to_string(lost) +
                                    " bytes of activations (peak " + std::to_string(mine) + " B inside graphs, " +
                                    std::to_string(base) + " B without checkpoints; the checkpoints' inputs are " +
                                    std::to_string(inputs) + " B; no graph-safe twin: " + twin_trouble("it", gs) + ")");
          }
        }
      } else if (r.held_in_graphs && plain.result->held_in_graphs) {
        // graph-safe and naive on recap's runtime: both peaks were compared with the memory model
        // exactly above; what recompute saves inside graphs is reported.
        evidence.push_back("activations inside graphs " + std::to_string(mine) + " B vs " + std::to_string(base) +
                           " B without checkpoints, both peaks as the memory model predicts");
        if (mine < base) runs.report().memory["saved_in_graphs"] = base - mine;
      } else {
        // graph-safe and naive on a system without a model (a naive case whose capture went through): an upper
        // bound: inside graphs, per microbatch, each checkpoint holds its input (one [tokens,
        // hidden] tensor) and its RNG pair (16 bytes); during a backward one region's recomputed
        // activations are live (at most what the baseline saves), besides what the unchecked
        // layers save (at most the baseline). More than that means recompute keeps what it
        // should have freed.
        // A framework's bytes are its caching allocator's blocks (drivers/PROTOCOL.md section 7), 512
        // bytes the smallest: there a checkpoint's input and its RNG record (a device tensor, as
        // the megatron driver's graph-safe recompute keeps one) each count whole blocks.
        const bool blocks = !r.held_in_graphs;
        auto block = [](int64_t b) { return (b + 511) / 512 * 512; };
        const int64_t per_checkpoint = blocks ? block(input) + 512 : input + 16;
        int64_t bound = 2 * base + static_cast<int64_t>(checkpoint_count(spec)) * spec.microbatches * per_checkpoint;
        runs.report().memory["predicted_max_activations_peak_in_graphs"] = bound;
        if (mine > bound)
          problems.push_back("recompute costs activation memory inside graphs: peak " + std::to_string(mine) +
                             " B, over the bound " + std::to_string(bound) + " B (" + std::to_string(base) +
                             " B without checkpoints)");
        else
          evidence.push_back("activations inside graphs " + std::to_string(mine) + " B <= bound " + std::to_string(bound) +
                             " B (" + std::to_string(base) + " B without checkpoints)");
        if (mine < base) runs.report().memory["saved_in_graphs"] = base - mine;
      }
    }
  }
  if (!problems.empty()) {
    c.disposition = Disposition::Incorrect;
    c.reason = problems[0];
    for (size_t i = 1; i < problems.size(); ++i) c.reason += "; " + problems[i];
    return c;
  }
  // A check that judged nothing it was meant to is skipped with the reason, never passed.
  if (!not_judged.empty()) return skipped("memory", "nothing to judge inside graphs: " + not_judged);
  if (evidence.empty())
    return skipped("memory", std::string("nothing to judge: ") +
                                 (checkpoint_in_graph(spec) && runs.ran() && !r.captured ? "no graph was captured"
                                  : checkpoint_in_graph(spec) && !runs.ran()              ? "the run failed"
                                                                                          : "no checkpoint runs inside a graph") +
                                 ", and the system under test does not report the bytes live after teardown");
  c.evidence = evidence[0];
  for (size_t i = 1; i < evidence.size(); ++i) c.evidence += "; " + evidence[i];
  return c;
}

}  // namespace

Json case_memory_json(const RunResult& r) {
  Json j;
  Json cap;
  for (int c = 0; c < device::kNumCategories; ++c) {
    auto cat = static_cast<device::MemCategory>(c);
    cap[device::category_name(cat)] = {{"live", r.capture_memory.allocator.tensors[c].live_bytes},
                                       {"peak", r.capture_memory.allocator.tensors[c].peak_bytes}};
  }
  j["capture"] = cap;
  j["graph_pool_reserved_peak"] = r.capture_memory.allocator.pool_peak_reserved_bytes;
  j["device_peak"] = r.capture_memory.device.peak_bytes;
  int64_t step_peak = 0, step_act = 0;
  for (const auto& s : r.steps) {
    step_peak = std::max(step_peak, s.memory.device.peak_bytes);
    step_act = std::max(step_act, s.memory.activations_peak());
  }
  j["step_device_peak"] = step_peak;
  j["step_activations_peak"] = step_act;
  return j;
}

Oracle memory_oracle() {
  return {"memory",
          "recompute saves activation memory inside graphs, as the memory model predicts; graph pools do not grow across "
          "replays; nothing live after teardown; nothing read before it was written (sim)",
          judge};
}

}  // namespace recap::properties
