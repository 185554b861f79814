// recap: verification and fuzz testing of activation recomputation under CUDA graph capture.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "harness/cli/cli.h"
#include "properties/oracles.h"
#include "reports/reporter.h"

namespace recap::cli {

void add_backend_option(CLI::App& cmd, std::string* backend) {
  cmd.add_option("--backend", *backend,
                 "Device backend: sim (CPU model of CUDA's rules), cuda (the GPU), or auto (cuda when a GPU is "
                 "usable, else sim)")
      ->check(CLI::IsMember({"sim", "cuda", "auto"}))
      ->default_val("auto");
}

void add_property_option(CLI::App& cmd, std::vector<std::string>* properties) {
  std::string all;
  for (const auto& p : properties::property_names()) all += (all.empty() ? "" : ", ") + p;
  cmd.add_option("--property", *properties, "Check only these properties (repeat the flag or separate by commas; all when absent): " + all)
      ->delimiter(',')
      ->check([](const std::string& name) { return properties::unknown_property({name}); });
}

void add_sut_option(CLI::App& cmd, std::string* sut) {
  cmd.add_option("--sut", *sut,
                 "System under test: recap (recap's runtime in this process), recap-worker (the same runtime "
                 "in a persistent `recap worker` process, through the worker protocol) or torch (PyTorch through "
                 "drivers/recap_drivers; RECAP_PYTHON, RECAP_DRIVERS_DIR choose the interpreter and the package)")
      ->check(CLI::IsMember({"recap", "recap-worker", "torch"}))
      ->default_val("recap");
}

std::shared_ptr<sut::Sut> make_sut(const std::string& name, const std::string& backend) {
  if (name.empty() || name == "recap") return nullptr;  // in process
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw UsageError("cannot find the recap executable (/proc/self/exe): " + ec.message());
  if (name == "recap-worker")
    return std::make_shared<sut::WorkerSut>(name, std::vector<std::string>{exe.string(), "worker", "--backend", backend},
                                            /*send_frames=*/false, /*recap_runtime=*/true);
  // torch: the driver package next to the sources recap was built from, unless told otherwise.
  const char* dir = std::getenv("RECAP_DRIVERS_DIR");
  const std::string drivers = dir ? dir : std::string(RECAP_SOURCE_DIR) + "/drivers";
  const char* old = std::getenv("PYTHONPATH");
  setenv("PYTHONPATH", (drivers + (old && *old ? ":" + std::string(old) : "")).c_str(), 1);
  const char* py = std::getenv("RECAP_PYTHON");
  return std::make_shared<sut::WorkerSut>(
      name,
      std::vector<std::string>{py ? py : "python3", "-m", "recap_drivers", "--sut", "torch", "--device",
                               backend == "cuda" ? "cuda" : "cpu"},
      /*send_frames=*/true, /*recap_runtime=*/false);
}

std::unique_ptr<device::Device> open_device(const std::string& backend, const device::DeviceOptions& opts) {
  device::BackendChoice choice;
  if (!device::parse_backend_choice(backend, &choice)) throw UsageError("unknown backend '" + backend + "'");
  std::string error;
  auto dev = device::make_device(choice, opts, &error);
  if (!dev) throw UsageError(error);
  return dev;
}

}  // namespace recap::cli

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
    std::fprintf(stderr, "recap: error: %s (see recap --help)\n", what.c_str());
    return kExitUsage;
  }
  try {
    return run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "recap: error: %s\n", e.what());
    return kExitUsage;
  } catch (const recap::reports::WriteError& e) {
    std::fprintf(stderr, "recap: error: %s\n", e.what());
    return kExitUsage;
  }
}
