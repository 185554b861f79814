// recap: verification and fuzz testing of activation recomputation under CUDA graph capture.
// main() alone: the subcommands register themselves (*_cmd.cpp), their shared pieces are cli.cpp.
#include <cstdio>

#include "harness/base/json_read.h"
#include "harness/cli/cli.h"
#include "reports/reporter.h"

// Every exit-2 message is one line of at most 300 bytes with its "recap: error: " prefix: echoed
// input (a path, a value from a file) is escaped and cut (json_read.h, one_line).
constexpr size_t kMessageBytes = 300 - 14;

int main(int argc, char** argv) {
  using namespace recap::cli;
  CLI::App app{
      "recap: verification and fuzz testing of activation recomputation (checkpointing) under CUDA graph "
      "capture.\nExit codes: 0 all held, 1 a check failed, 2 bad usage or input.",
      "recap"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "recap 0.1.0");
  Runner run;
  add_conformance_command(app, &run);
  add_run_command(app, &run);
  add_fuzz_command(app, &run);
  add_replay_command(app, &run);
  add_gate_command(app, &run);
  add_worker_command(app, &run);
  add_mutants_command(app, &run);
  add_compare_command(app, &run);
  add_report_command(app, &run);
  add_merge_command(app, &run);
  add_tradeoff_command(app, &run);

  // An unknown command: CLI11 would only say "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      found = found || sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::fprintf(stderr, "recap: error: unknown command '%s' (commands: %s)\n", argv[1], known.c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, naming the problem; CLI11's own messages already do ("The following argument was
    // not expected: --bogus"), we only keep them on one line and fix the exit code.
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "recap: error: %s (see recap --help)\n", recap::one_line(what, kMessageBytes - 16).c_str());
    return kExitUsage;
  }
  try {
    return run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "recap: error: %s\n", recap::one_line(e.what(), kMessageBytes).c_str());
    return kExitUsage;
  } catch (const recap::reports::WriteError& e) {
    std::fprintf(stderr, "recap: error: %s\n", recap::one_line(e.what(), kMessageBytes).c_str());
    return kExitUsage;
  }
}
