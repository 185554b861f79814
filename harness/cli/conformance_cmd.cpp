// recap conformance: runs the scenario suite (harness/conformance) on a backend and prints a
// table. On cuda every scenario also runs on sim, and the two outcomes must agree call for call:
// that is how sim is kept faithful to the GPU.
#include <cstdio>
#include <regex>

#include "harness/base/json.h"
#include "harness/cli/cli.h"
#include "harness/conformance/scenario.h"
#include "reports/reporter.h"

namespace recap::cli {
namespace {

struct ConformanceArgs {
  std::string backend = "auto";
  std::string filter;
  std::string json_path;
  bool list = false;
  bool verbose = false;
  bool compare_sim = true;
};

Json observations_json(const conformance::Outcome& o) {
  Json arr = Json::array();
  for (const auto& ob : o.observations)
    arr.push_back({{"label", ob.label}, {"got", ob.got}, {"expected", ob.expected}});
  return arr;
}

int run_conformance(const ConformanceArgs& args) {
  std::regex filter;
  try {
    filter = std::regex(args.filter.empty() ? ".*" : args.filter);
  } catch (const std::regex_error& e) {
    throw UsageError("--filter is not a valid regular expression: '" + args.filter + "'");
  }
  std::vector<const conformance::Scenario*> chosen;
  for (const auto& s : conformance::all_scenarios())
    if (std::regex_search(s.name, filter)) chosen.push_back(&s);
  if (chosen.empty()) throw UsageError("--filter '" + args.filter + "' matches no scenario");

  if (args.list) {
    for (const auto* s : chosen) std::printf("%-60s %s\n", s->name.c_str(), s->rule.c_str());
    return kExitOk;
  }

  auto dev = open_device(args.backend);
  bool on_gpu = dev->backend() == device::Backend::Cuda;
  bool compare = on_gpu && args.compare_sim;
  std::printf("recap conformance: backend %s (%s), %zu scenarios%s\n", device::backend_name(dev->backend()).c_str(),
              dev->name().c_str(), chosen.size(), compare ? ", each compared with sim" : "");
  std::printf("%-58s %6s %10s %8s  %s\n", "scenario", "calls", "mismatch", "vs sim", "verdict");

  Json cases = Json::array();
  int passed = 0, failed = 0;
  for (const auto* s : chosen) {
    auto result = conformance::run_scenario(*s, *dev);
    auto mismatches = result.mismatches();
    std::vector<std::string> diffs;
    if (compare) {
      auto sim_dev = open_device("sim");
      auto sim_result = conformance::run_scenario(*s, *sim_dev);
      diffs = conformance::compare_outcomes(result, sim_result);
    }
    bool ok = result.passed() && diffs.empty();
    (ok ? passed : failed) += 1;
    std::printf("%-58s %6zu %10zu %8s  %s\n", s->name.c_str(), result.outcome.observations.size(), mismatches.size(),
                compare ? (diffs.empty() ? "same" : "DIFFERS") : "-", ok ? "passed" : "FAILED");
    if (!result.error.empty()) std::printf("    error: %s\n", result.error.c_str());
    for (const auto& m : mismatches)
      std::printf("    %s: got %s, expected %s\n", m.label.c_str(), m.got.c_str(), m.expected.c_str());
    for (const auto& d : diffs) std::printf("    vs sim: %s\n", d.c_str());
    if (args.verbose)
      for (const auto& ob : result.outcome.observations)
        std::printf("      %-70s %s\n", ob.label.c_str(), ob.got.c_str());
    cases.push_back({{"name", s->name},
                     {"rule", s->rule},
                     {"verdict", ok ? "passed" : "failed"},
                     {"error", result.error},
                     {"differences_from_sim", diffs},
                     {"observations", observations_json(result.outcome)}});
  }
  std::printf("%d passed, %d failed\n", passed, failed);

  if (!args.json_path.empty()) {
    Json doc = {{"schema", "recap.conformance/1"},
                          {"backend", device::backend_name(dev->backend())},
                          {"device", dev->name()},
                          {"compared_with_sim", compare},
                          {"passed", passed},
                          {"failed", failed},
                          {"scenarios", cases}};
    // Keys sorted, as this file has always been written (the logs kept in results/h200/).
    reports::write_or_throw(args.json_path, sorted_keys(doc).dump(2) + "\n", "--json");
  }
  return failed == 0 ? kExitOk : kExitFailed;
}

}  // namespace

void add_conformance_command(CLI::App& app, Runner* run) {
  auto [cmd, args] = add_command<ConformanceArgs>(app, run, run_conformance,
      "conformance",
      "Run the conformance scenarios: one small program per rule of the CUDA capture model, each call's "
      "outcome checked against the rule; on cuda also compared call for call with sim.");
  add_backend_option(*cmd, &args->backend);
  cmd->add_option("--filter", args->filter, "Only scenarios whose name matches this regular expression");
  cmd->add_flag("--list", args->list, "List the scenarios (name and rule) and exit");
  cmd->add_flag("--verbose,-v", args->verbose, "Print every observation of every scenario");
  cmd->add_flag("!--no-compare", args->compare_sim, "On cuda, do not also run each scenario on sim to compare");
  cmd->add_option("--json", args->json_path, "Write the results, every observation included, to this JSON file");
}

}  // namespace recap::cli
