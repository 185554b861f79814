// The diagnosis rules (diagnosis.h): one table, first match wins. Each rule is a symptom of the
// failing check plus what the case configures; where one symptom fits several classes the name
// says which, as a reviewer would narrow it down.
#include "properties/diagnosis.h"

#include <cmath>
#include <functional>
#include <vector>

namespace recap::properties {

namespace {

using training::CaseSpec;

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool any_dropout(const CaseSpec& s) {
  for (const auto& l : s.model.layers)
    if (l.dropout > 0.0f) return true;
  return false;
}

bool saves_host_rng(const CaseSpec& s) {  // checkpoints that save and restore RNG states eagerly
  return s.any_checkpoint() && s.policy != training::CheckpointPolicy::GraphSafe;
}

// The first divergence of the failing check, "" fields when it has none.
struct Symptom {
  const CaseSpec& spec;
  const CheckResult& check;
  int observed_first_replay;  // CaseReport::first_replay_step
  // The first replay as the system under test reported it; the case's warmup when it reported none.
  int first_replay() const { return observed_first_replay >= 0 ? observed_first_replay : spec.warmup; }
  bool diverged() const { return check.divergence.has_value(); }
  int step() const { return diverged() ? check.divergence->step : -1; }
  int microbatch() const { return diverged() ? check.divergence->microbatch : -1; }
  bool is(const char* property, Disposition d) const { return check.property == property && check.disposition == d; }
};

struct Rule {
  const char* bug_class;  // "13", "3 or 17", "-" (not in the catalogue)
  const char* name;
  std::function<bool(const Symptom&)> matches;
};

const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = {
      {"-", "the process running the case died of a signal: a crash inside the system under test, not a wrong result",
       [](const Symptom& s) { return s.check.disposition == Disposition::Crashed && has(s.check.cuda_error, "SIG"); }},
      // across the ranks of a rank group (issue 22; properties/oracles/ranks.cpp): not in the catalogue
      {"-", "sequence-parallel ranks draw equal masks on their rows and heads: the layers run outside the "
            "tensor-parallel tracker's fork (megatron-core's TransformerBlock forks it when sequence_parallel is set; "
            "0.9.0 entered `rng_context and fp8_context`, the second alone)",
       [](const Symptom& s) { return s.spec.sp && s.is("tp_masks_differ", Disposition::Incorrect); }},
      {"-", "ranks draw equal masks inside tensor-parallel regions: the tensor-parallel RNG state is seeded alike on "
            "every rank (megatron-core seeds it seed + 2718 + its tensor-parallel rank)",
       [](const Symptom& s) { return s.is("tp_masks_differ", Disposition::Incorrect); }},
      {"17", "a rank's recompute draws other masks than its forward: the checkpoint does not restore the "
             "tensor-parallel tracker state saved at its forward (megatron-core's CheckpointFunction does)",
       [](const Symptom& s) { return s.is("rank_recompute_equal", Disposition::Incorrect); }},
      {"-", "ranks draw different masks outside tensor-parallel regions: the shared generator is seeded per rank (as "
            "for data parallelism) where tensor-parallel ranks must draw alike",
       [](const Symptom& s) { return s.is("outside_masks_equal", Disposition::Incorrect); }},
      {"-", "with virtual pipeline stages, the group's gradients differ from one rank's: a model chunk holds other "
            "layers than megatron-core's offset gives it (virtual stage chunk * pp + stage), or an activation went to "
            "another chunk or microbatch",
       [](const Symptom& s) {
         return s.spec.vp > 1 && (s.is("grads_match_one_rank", Disposition::Incorrect) ||
                                  s.is("reference", Disposition::Incorrect) || s.is("training", Disposition::Incorrect));
       }},
      {"-", "data-parallel replicas applied gradients that are not the sum over the replicas: the gradient all-reduce "
            "before the update is missing, or reduces over another group",
       [](const Symptom& s) { return s.is("dp_grads_reduced", Disposition::Incorrect); }},
      {"-", "with data-parallel replicas, the group's gradients differ from one rank's while each replica's sum is "
            "right: a replica ran other microbatches than its share of the step's (d * M / dp ..)",
       [](const Symptom& s) {
         return s.spec.dp > 1 && (s.is("grads_match_one_rank", Disposition::Incorrect) ||
                                  s.is("reference", Disposition::Incorrect));
       }},
      {"-", "the group's gradients differ from one rank's: a collective missing or wrong (an all-reduce of a "
            "tensor-parallel region's backward) or shards assembled in the wrong place",
       [](const Symptom& s) { return s.is("grads_match_one_rank", Disposition::Incorrect); }},
      {"-", "a pipeline stage's gradients or parameters differ from the fp64 reference's: an activation or gradient "
            "sent between stages is another microbatch's (stale or misrouted) or lost",
       [](const Symptom& s) {
         return s.spec.pp > 1 && (s.is("training", Disposition::Incorrect) || s.is("reference", Disposition::Incorrect));
       }},
      {"-", "a pipeline stage ran its forwards and backwards out of megatron-core's 1F1B order (its warmup, steady "
            "and cooldown phases)",
       [](const Symptom& s) { return s.is("pp_schedule_1f1b", Disposition::Incorrect); }},
      {"-", "pipeline stages draw equal masks: every stage's generator is seeded alike (megatron's training seeds "
            "stage s with seed + 100 * s)",
       [](const Symptom& s) { return s.is("pp_stage_masks_differ", Disposition::Incorrect); }},
      {"1", "a reentrant checkpoint refuses the graph builder's torch.autograd.grad backward",
       [](const Symptom& s) {
         return s.is("capture_clean", Disposition::Failed) && has(s.check.reason, "checkpoint") &&
                (has(s.check.reason, "autograd.grad") || has(s.check.reason, "torch.autograd.backward"));
       }},
      {"25", "a backward that does not end: a checkpointed function returns a tensor it did not compute (a parameter), "
             "so the checkpoint becomes its grad_fn and the recompute re-enters itself",
       [](const Symptom& s) { return s.is("capture_clean", Disposition::Failed) && s.check.cuda_error == "RunawayBackward"; }},
      {"14", "memory allocated while capturing",
       [](const Symptom& s) { return s.is("capture_clean", Disposition::Failed) && has(s.check.api, "alloc"); }},
      {"14", "a synchronizing call while capturing (with a host generator, reading its state: class 4)",
       [](const Symptom& s) {
         return s.is("capture_clean", Disposition::Failed) && s.check.cuda_error == "cudaErrorStreamCaptureUnsupported";
       }},
      {"15", "work forked from the capture to a side stream never joined back",
       [](const Symptom& s) {
         return s.is("capture_clean", Disposition::Failed) && s.check.cuda_error == "cudaErrorStreamCaptureUnjoined";
       }},
      {"2", "recompute switched off during graph warmup and capture: the graphs keep every activation",
       [](const Symptom& s) { return s.check.property == "memory" && has(s.check.reason, "recompute lost inside graphs"); }},
      {"19",
       "a without-output checkpoint's consumer reads storage other than the recomputed output: the rebinding did not "
       "reach it (a graph, or a reference, left on the storage discarded at the forward)",
       [](const Symptom& s) { return s.is("recompute_on_off", Disposition::Incorrect) && has(s.check.reason, "without-output rebinding"); }},
      {"27", "a graph pool grows from one replay of the same graphs to the next: memory taken from it is never given back",
       [](const Symptom& s) { return s.is("memory", Disposition::Incorrect) && has(s.check.reason, "graph pools grew across replays"); }},
      {"2",
       "a captured forward keeps other activation bytes for its backward than the memory model predicts: a "
       "checkpointed region run as a plain forward inside the graph keeps its inner activations, not its input and RNG "
       "pair (recompute saving nothing)",
       [](const Symptom& s) { return s.is("memory", Disposition::Incorrect) && has(s.check.reason, "differ from the memory model"); }},
      {"-", "a kernel or copy reads device memory nothing wrote since it was allocated (a buffer allocated empty, as "
            "torch.empty, and read as if zeroed): sim reads zeros there, a GPU whatever the block held",
       [](const Symptom& s) { return s.is("memory", Disposition::Incorrect) && has(s.check.reason, "read before anything wrote it"); }},
      {"6", "graph phase flags left set after a failed capture",
       [](const Symptom& s) { return s.is("hygiene", Disposition::Incorrect) && has(s.check.reason, "phase flags"); }},
      {"-", "a failed capture left state behind (a stream still capturing, checkpoint records pending, or a next step "
            "that does not work)",
       [](const Symptom& s) { return s.is("hygiene", Disposition::Incorrect); }},
      {"4 or 5", "replays repeat one mask: an RNG offset baked into the graph, or a generator not registered with the capture",
       [](const Symptom& s) { return s.is("rng_ledger", Disposition::Incorrect) && (has(s.check.reason, "reused across steps") ||
                                                                has(s.check.reason, "repeat another site's")); }},
      {"26", "two draws of one Philox stream share values: an offset increment that does not cover the values a draw uses",
       [](const Symptom& s) { return s.is("rng_ledger", Disposition::Incorrect) && has(s.check.reason, "Philox value range"); }},
      {"3 or 17",
       "the recompute draws other numbers than the forward in an eager run: the checkpoint's saved RNG state does not "
       "restore the generator that draws (a live handle, class 3, or a tracker state left out, class 17)",
       [](const Symptom& s) {
         return (s.is("rng_ledger", Disposition::Incorrect) || s.is("recompute_on_off", Disposition::Incorrect)) &&
                s.spec.executor == training::ExecutorKind::Eager && saves_host_rng(s.spec) && any_dropout(s.spec);
       }},
      {"19",
       "non-finite values where a without-output checkpoint discarded its output: the output shared its memory with "
       "the input the recompute starts from, and discarding it freed that input",
       [](const Symptom& s) {
         return (s.is("recompute_on_off", Disposition::Incorrect) || s.is("eager_vs_graphed", Disposition::Incorrect)) &&
                s.spec.style == training::CheckpointStyle::WithoutOutput && s.spec.any_checkpoint() && s.diverged() &&
                !std::isfinite(s.check.divergence->max_abs_error);
       }},
      {"11 or 19",
       "a without-output checkpoint's backward differs from no checkpoint: inner parameters lost their gradients "
       "(class 11) or the discarded output shared memory the recompute needs (class 19)",
       [](const Symptom& s) {
         return s.is("recompute_on_off", Disposition::Incorrect) && s.spec.style == training::CheckpointStyle::WithoutOutput;
       }},
      {"8, 21 or 4",
       "the first replay agrees with eager and a later one departs: something the capture baked went stale (static "
       "inputs not refilled, class 8; state filled in warmup, class 21; a baked RNG offset, class 4)",
       [](const Symptom& s) {
         return s.is("eager_vs_graphed", Disposition::Incorrect) && s.spec.executor != training::ExecutorKind::Eager &&
                s.step() > s.first_replay();
       }},
      {"4, 7 or 16",
       "the graphed run draws other numbers from its first replay: an RNG offset baked into the graph (class 4), "
       "warmup or capture moved the generators and nobody put them back (class 7), or a snapshot crossed the capture "
       "boundary (class 16)",
       [](const Symptom& s) {
         return s.is("eager_vs_graphed", Disposition::Incorrect) && s.step() == s.first_replay() && any_dropout(s.spec) &&
                !has(s.check.divergence->tensor, "grad");
       }},
      {"9, 10, 13 or 24",
       "the first replay departs from eager without random draws involved: graphs read memory something else "
       "overwrote (a static buffer freed, class 9; shared by microbatches, class 10; graphs sharing a pool replayed "
       "out of capture order, class 13; gradients kept as views of static buffers, class 24)",
       [](const Symptom& s) {
         return s.is("eager_vs_graphed", Disposition::Incorrect) && s.step() == s.first_replay() &&
                (!any_dropout(s.spec) || has(s.check.divergence->tensor, "grad"));
       }},
      // a capture that allocated otherwise than the design says, when no result departs (a result that
      // departs names its own mechanism above; a changed capture order changes the figures too)
      {"-",
       "the capture's graph pools reserve other bytes than the memory model predicts (blocks of 512-byte multiples, "
       "best fit, never split): freed blocks not handed to later tensors, or allocations the design does not make",
       [](const Symptom& s) { return s.is("memory", Disposition::Incorrect) && has(s.check.reason, "graph-pool bytes"); }},
      {"-",
       "the capture's activations peak differs from the memory model: an activation freed later (or allocated earlier) "
       "than the design says",
       [](const Symptom& s) {
         return s.is("memory", Disposition::Incorrect) && has(s.check.reason, "activations peak during capture differs");
       }},
      // last: a graphed run whose capture went wrong fails training too; this is when nothing else did
      {"-", "state carried from one step into the next (gradients not zeroed between steps)",
       [](const Symptom& s) { return s.is("training", Disposition::Incorrect); }},
  };
  return table;
}

}  // namespace

std::string diagnose(const CaseReport& r) {
  // rule-major: a specific symptom on any failing check (masks reused, in rng_ledger) wins over a
  // generic one on the first (a divergence from eager)
  for (const Rule& rule : rules())
    for (const auto& c : r.checks) {
      if (!failing(c.disposition)) continue;
      if (rule.matches(Symptom{r.spec, c, r.first_replay_step}))
        return std::string(rule.bug_class) == "-" ? rule.name : std::string("class ") + rule.bug_class + ": " + rule.name;
    }
  return "";
}

}  // namespace recap::properties
