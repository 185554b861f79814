// Shared pieces of the recap command line (cli.cpp): exit codes, one-line usage errors, the backend,
// property and system-under-test options, output checks; the subcommands' registration.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/device/device.h"
#include "harness/sut/capabilities.h"
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
// The system-under-test flags of fuzz, replay and gate.
struct SutFlags {
  std::string sut = "recap";              // --sut recap|recap-worker|torch[@V]|megatron[@V]
  bool sut_given = false;                 // --sut was on the command line (replay: else each file's own)
  double case_timeout = -1;               // --case-timeout; -1: the default (600 s for a worker)
  std::string worker_python;              // --worker-python; "" RECAP_PYTHON, else python3
  std::vector<std::string> worker_env;    // --worker-env KEY=VALUE, the worker's environment only
  int ranks = 0;                          // --ranks N (2..64, --sut torch): rank groups of every divisor n > 1 of N beside the one-rank worker
};
// Adds --sut, --case-timeout, --worker-python, --worker-env and --ranks.
void add_sut_options(CLI::App& cmd, SutFlags* f);
// Adds --case-timeout alone (recap run: the runtime in this process).
void add_case_timeout_option(CLI::App& cmd, double* seconds);
// Adds --profile (fuzz, replay, gate): each case report's timings.profile, the summary's table.
void add_profile_flag(CLI::App& cmd, bool* profile);
// Adds --differential OTHER (fuzz, gate, replay): property differential against backend OTHER.
void add_differential_option(CLI::App& cmd, std::string* other);
// --differential's value resolved: nullopt when absent. UsageError (exit 2) when OTHER is not sim
// or cuda, when the system under test is not recap's runtime (`sut`: recap, recap-worker), or when
// --property names differential without it. OTHER may equal the case's backend: a self-check.
std::optional<device::BackendChoice> resolve_differential(const std::string& other, const std::string& sut,
                                                          const std::vector<std::string>& properties);

// A --sut value: recap, recap-worker, torch, megatron, the last two with an optional @VERSION.
struct SutChoice {
  std::string kind;     // "recap", "recap-worker", "torch", "megatron"
  std::string version;  // "" unless @VERSION
};
// "" or one line naming the problem ("unknown system under test 'jax' (one of: ...)").
std::string parse_sut(const std::string& text, SutChoice* out);
// What a case file's "sut" asks for as a --sut value: name@version for a framework, the name alone
// for recap's runtime (its version is recap's own).
std::string sut_text(const std::string& name, const std::string& version);

// A started system under test.
struct SystemUnderTest {
  std::shared_ptr<sut::Sut> sut;  // null: recap's runtime in this process
  std::string kind;               // SutChoice::kind: what corpus files and reports name
  sut::SutInfo info;              // its hello (in process: recap's own, the same function)
  sut::Capabilities caps;         // info.capabilities, read (with --ranks: caps.tp from the group's hello)
};
// Starts the system `text` names on `backend` (a concrete one: sim or cuda) and greets it (hello).
// UsageError with one line when it cannot start or fails hello: "--sut megatron@0.15.3: the worker
// exited with status 2 before answering hello; stderr: ...": a campaign against a system that
// cannot start is bad usage, not a crashed case per case.
SystemUnderTest make_sut(const SutFlags& f, const std::string& text, const std::string& backend);
// Output paths are checked before any work, so that a bad --report cannot hide a property failure
// behind exit 2 after a long campaign. A file: not a folder, in an existing writable folder (an
// existing file must be writable). A folder (--corpus-dir, made when needed): not a file, and its
// nearest existing ancestor a writable folder. "" is not checked. UsageError naming the flag.
void check_output_file(const std::string& flag, const std::string& path);
void check_output_dir(const std::string& flag, const std::string& path);
// Makes the device the --backend text asks for, or throws UsageError saying why it can't.
std::unique_ptr<device::Device> open_device(const std::string& backend, const device::DeviceOptions& opts = {});

// Each subcommand registers itself and sets *run to the function main calls after parsing.
using Runner = std::function<int()>;

// A subcommand and the arguments its flags fill (owned by the subcommand's callback).
template <class Args>
struct Command {
  CLI::App* cmd;
  Args* args;
};
// Adds subcommand `name` with arguments of its own; once it is parsed, *runner calls fn(args).
template <class Args, class Fn>
Command<Args> add_command(CLI::App& app, Runner* runner, Fn fn, const std::string& name, const std::string& help) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->callback([args, runner, fn] { *runner = [args, fn] { return fn(*args); }; });
  return {cmd, args.get()};
}
void add_conformance_command(CLI::App& app, Runner* run);
void add_run_command(CLI::App& app, Runner* run);
void add_fuzz_command(CLI::App& app, Runner* run);
void add_replay_command(CLI::App& app, Runner* run);
void add_gate_command(CLI::App& app, Runner* run);
void add_worker_command(CLI::App& app, Runner* run);
void add_mutants_command(CLI::App& app, Runner* run);
void add_compare_command(CLI::App& app, Runner* run);
void add_report_command(CLI::App& app, Runner* run);
void add_merge_command(CLI::App& app, Runner* run);
void add_tradeoff_command(CLI::App& app, Runner* run);

}  // namespace recap::cli
