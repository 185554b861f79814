// The oracles in the order a case is judged: capture errors first (a run that failed has little
// else to compare), then the bitwise comparisons with twins, the RNG ledger, memory, the fp64
// reference, the training loop against it, and last hygiene, which may run a case of its own.
#include "properties/oracles/oracle.h"

namespace recap::properties {

const std::vector<Oracle>& oracles() {
  static const std::vector<Oracle> all = {capture_clean_oracle(), eager_vs_graphed_oracle(), recompute_on_off_oracle(),
                                          rng_ledger_oracle(),    memory_oracle(),           reference_oracle(),
                                          training_oracle(),      hygiene_oracle(),          differential_oracle(),
                                          rank_recompute_equal_oracle(), tp_masks_differ_oracle(),
                                          outside_masks_equal_oracle(),  grads_match_one_rank_oracle(),
                                          pp_schedule_1f1b_oracle(),     pp_stage_masks_differ_oracle(),
                                          dp_grads_reduced_oracle()};
  return all;
}

bool opt_in_property(const std::string& name) {
  for (const Oracle& o : oracles())
    if (o.opt_in && name == o.name) return true;
  return false;
}

bool ranks_property(const std::string& name) {
  for (const Oracle& o : oracles())
    if (o.ranks_only && name == o.name) return true;
  return false;
}

bool selected(const OracleOptions& opts, const std::string& property) {
  // an opt-in oracle (differential) runs only when its option asks for it
  if (opt_in_property(property) && !opts.differential) return false;
  // a cross-rank oracle only where a rank group runs the tp cases
  if (ranks_property(property) && !(opts.sut && opts.sut->ranks() > 0)) return false;
  if (opts.properties.empty()) return true;
  for (const auto& q : opts.properties)
    if (q == property) return true;
  return false;
}

sut::RunRequest run_request(const training::CaseSpec& spec, const OracleOptions& opts) {
  sut::RunRequest ask;
  // Another system's masks come back whole for the fp64 oracles, which judge fp32 cases only.
  // Frames are a byte per element of every mask of every step: asked for only while a mask is at
  // most 64 K elements (framework campaigns draw hidden <= 64, tokens <= 64), since a large case's
  // would be hundreds of MB per run. recap's runtime needs none: its draws are its own.
  const bool small = int64_t{spec.model.tokens} * spec.model.hidden <= (int64_t{1} << 16);
  if (!opts.sut || opts.sut->recap_runtime() || spec.model.dtype != models::DType::F32 || !small) return ask;
  for (const Oracle& o : oracles()) ask.mask_frames = ask.mask_frames || (o.reads_masks && selected(opts, o.name));
  return ask;
}

const std::vector<std::string>& property_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Oracle& o : oracles()) v.push_back(o.name);
    return v;
  }();
  return names;
}

CheckResult bad(const std::string& property, Disposition d, const std::string& why) {
  CheckResult c;
  c.property = property;
  c.disposition = d;
  c.reason = why;
  return c;
}

CheckResult skipped(const std::string& property, const std::string& why) { return bad(property, Disposition::Skipped, why); }

CheckResult passed(const std::string& property, const std::string& evidence) {
  CheckResult c = bad(property, Disposition::Passed, "");
  c.evidence = evidence;
  return c;
}

}  // namespace recap::properties
