// recap: verification and fuzz testing of activation recomputation under CUDA graph capture.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "harness/base/json_read.h"
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

void add_sut_options(CLI::App& cmd, SutFlags* f) {
  cmd.add_option("--sut", f->sut,
                 "System under test: recap (recap's runtime in this process), recap-worker (the same runtime in a "
                 "persistent `recap worker` process, through the worker protocol), torch or megatron (through "
                 "drivers/recap_drivers; @VERSION makes the driver refuse to start unless that version is installed)")
      ->check([](const std::string& v) {
        SutChoice c;
        return parse_sut(v, &c);
      })
      ->each([f](const std::string&) { f->sut_given = true; })
      ->capture_default_str();  // not default_val: that would run `each`
  add_case_timeout_option(cmd, &f->case_timeout);
  cmd.add_option("--worker-python", f->worker_python,
                 "The Python interpreter of the torch and megatron drivers (default: RECAP_PYTHON, else python3)");
  cmd.add_option("--worker-env", f->worker_env,
                 "KEY=VALUE set in the worker's environment only, not recap's (repeatable; RECAP_DRIVERS_DIR is read "
                 "by recap itself)")
      ->check([](const std::string& kv) {
        size_t eq = kv.find('=');
        return eq == std::string::npos || eq == 0 ? "'" + kv + "' is not KEY=VALUE (a variable of the worker's environment)"
                                                  : std::string();
      });
}

void add_case_timeout_option(CLI::App& cmd, double* seconds) {
  cmd.add_option("--case-timeout", *seconds,
                 "Seconds a case may take before its worker is killed and the case recorded as crashed (0: no limit; "
                 "default 600 for a worker SUT, none in process)")
      ->check(CLI::Range(0.0, 1e6));
}

std::string parse_sut(const std::string& text, SutChoice* out) {
  const size_t at = text.find('@');
  SutChoice c;
  c.kind = text.substr(0, at);
  if (at != std::string::npos) c.version = text.substr(at + 1);
  if (c.kind != "recap" && c.kind != "recap-worker" && c.kind != "torch" && c.kind != "megatron")
    return "unknown system under test '" + text + "' (one of: recap, recap-worker, torch[@VERSION], megatron[@VERSION])";
  if (at != std::string::npos) {
    if (c.kind == "recap" || c.kind == "recap-worker")
      return "'" + text + "': recap's runtime takes no @VERSION (it is this recap's own)";
    if (c.version.empty()) return "'" + text + "': a version must follow '@' (e.g. " + c.kind + "@2.11.0)";
    for (char ch : c.version)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '+' && ch != '-' && ch != '_')
        return "'" + text + "': a version holds only letters, digits and . + - _";
  }
  *out = c;
  return "";
}

std::string sut_text(const std::string& name, const std::string& version) {
  if (name == "recap" || name == "recap-worker" || version.empty()) return name;
  return name + "@" + version;
}

SystemUnderTest make_sut(const SutFlags& f, const std::string& text, const std::string& backend) {
  SutChoice c;
  if (std::string err = parse_sut(text, &c); !err.empty()) throw UsageError("--sut: " + err);
  SystemUnderTest s;
  s.kind = c.kind;
  if (c.kind == "recap") {
    if (f.case_timeout > 0)
      throw UsageError("--case-timeout: recap's runtime in this process cannot be stopped inside a case "
                       "(--sut recap-worker runs it in a worker that can)");
    s.info = {"recap", "0.1.0", open_device(backend)->name(), sut::recap_capabilities_json()};
  } else {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) throw UsageError("cannot find the recap executable (/proc/self/exe): " + ec.message());
    sut::WorkerConfig w;
    w.name = c.kind;
    w.case_timeout_s = f.case_timeout < 0 ? 600 : f.case_timeout;
    const char* echo = std::getenv("RECAP_WORKER_STDERR");
    w.echo_stderr = echo && std::string(echo) == "1";
    std::vector<std::string> set = f.worker_env;
    if (c.kind == "recap-worker") {
      w.argv = {exe.string(), "worker", "--backend", backend};
      w.recap_runtime = true;
    } else {
      // A Python driver: the package next to the sources recap was built from, unless told otherwise,
      // ahead of the worker's PYTHONPATH (recap's, or --worker-env's).
      const char* dir = std::getenv("RECAP_DRIVERS_DIR");
      const std::string drivers = dir ? dir : std::string(RECAP_SOURCE_DIR) + "/drivers";
      const char* own = std::getenv("PYTHONPATH");
      std::string rest = own ? own : "";
      for (const auto& kv : f.worker_env)
        if (kv.rfind("PYTHONPATH=", 0) == 0) rest = kv.substr(11);
      set.push_back("PYTHONPATH=" + drivers + (rest.empty() ? "" : ":" + rest));
      const char* py = std::getenv("RECAP_PYTHON");
      const std::string python = !f.worker_python.empty() ? f.worker_python : py && *py ? py : "python3";
      w.argv = {python, "-m", "recap_drivers", "--sut", c.kind, "--device", backend == "cuda" ? "cuda" : "cpu"};
      if (!c.version.empty()) {
        w.argv.push_back("--expect-version");
        w.argv.push_back(c.version);
      }
      w.send_frames = true;
      w.determinism_check = true;  // a framework's kernels: deterministic algorithms are asked for, and checked
    }
    w.env = sut::environment_with(set);
    auto worker = std::make_shared<sut::WorkerSut>(w);
    try {
      s.info = worker->hello();
    } catch (const std::runtime_error& e) {
      throw UsageError("--sut " + text + ": " + e.what());
    }
    s.sut = worker;
  }
  if (std::string err = sut::capabilities_from_json(s.info.capabilities, &s.caps); !err.empty())
    throw UsageError("--sut " + text + ": its hello: " + err);
  return s;
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
