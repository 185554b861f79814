// Shared pieces of the recap command line: exit codes, one-line usage errors, backend option.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/device/device.h"
#include "harness/sut/sut.h"

namespace recap::cli {

// Exit codes, the same for every subcommand (a CI gate reads them).
constexpr int kExitOk = 0;       // everything held
constexpr int kExitFailed = 1;   // a check, scenario or property failed
constexpr int kExitUsage = 2;    // bad usage or bad input

// Thrown for bad input found after parsing (a missing file, a backend that is not usable...);
// main prints "recap: error: <what>" on one line and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Adds --backend sim|cuda|auto to a subcommand.
void add_backend_option(CLI::App& cmd, std::string* backend);
// Adds --property NAME... (the oracles to check; all when absent); an unknown name is a usage error.
void add_property_option(CLI::App& cmd, std::vector<std::string>* properties);
// Adds --sut recap|recap-worker (default recap: in process).
void add_sut_option(CLI::App& cmd, std::string* sut);
// The system under test --sut names, on `backend` (a concrete one: sim or cuda); null for recap in
// process.
std::shared_ptr<sut::Sut> make_sut(const std::string& name, const std::string& backend);
// Makes the device the --backend text asks for, or throws UsageError saying why it can't.
std::unique_ptr<device::Device> open_device(const std::string& backend, const device::DeviceOptions& opts = {});

// Each subcommand registers itself and sets *run to the function main calls after parsing.
using Runner = std::function<int()>;

// Adds subcommand `name` whose flags fill *args; once it is parsed, *runner calls fn(*args).
template <class Args, class Fn>
CLI::App* add_command(CLI::App& app, Runner* runner, std::shared_ptr<Args> args, Fn fn, const std::string& name,
                      const std::string& help) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->callback([args, runner, fn] { *runner = [args, fn] { return fn(*args); }; });
  return cmd;
}
void add_conformance_command(CLI::App& app, Runner* run);
void add_run_command(CLI::App& app, Runner* run);
void add_fuzz_command(CLI::App& app, Runner* run);
void add_replay_command(CLI::App& app, Runner* run);
void add_gate_command(CLI::App& app, Runner* run);
void add_worker_command(CLI::App& app, Runner* run);

}  // namespace recap::cli
