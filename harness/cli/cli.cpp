// The recap command line's shared pieces (cli.h): the backend, property and system-under-test
// options, starting a system under test, opening a device, checking output paths. main.cpp holds
// main() alone; each subcommand (*_cmd.cpp) uses these.
#include <algorithm>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "harness/cli/cli.h"
#include "harness/sut/worker.h"
#include "properties/oracles.h"

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
      })
      // one KEY=VALUE per flag: `--worker-env A=1 case.json` leaves the case file positional
      ->allow_extra_args(false);
  cmd.add_option("--ranks", f->ranks,
                 "Also start rank groups of n ranks for every divisor n > 1 of N (2..64; --sut torch, on gloo on the "
                 "CPU, or --sut megatron, on CUDA): cases whose tp * pp * dp is n run on that group (tp, pp, tp inside pp, sp, vp, dp; a failure shrinks toward the "
                 "smallest group), tp 1 pp 1 on the ordinary worker, and the cross-rank properties are judged "
                 "(drivers/PROTOCOL.md, \"Rank groups\")")
      ->check(CLI::Range(2, 64));
}

void add_case_timeout_option(CLI::App& cmd, double* seconds) {
  cmd.add_option("--case-timeout", *seconds,
                 "Seconds a case may take before its worker is killed and the case recorded as crashed (0: no limit; "
                 "default 600 for a worker SUT, none in process)")
      ->check(CLI::Range(0.0, 1e6));
}

void add_profile_flag(CLI::App& cmd, bool* profile) {
  cmd.add_flag("--profile", *profile,
               "Where each case's time goes: its report's timings.profile holds milliseconds per phase of its own run "
               "and of each twin (start-up, model build, eager steps, warmup, capture, replays, copies, "
               "synchronizations, a worker's protocol and its own phases), per oracle (the fp64 reference, hygiene...); "
               "the summary gives each phase's median, p90 and share of the cases' time (docs/profile.md). Timings: "
               "excluded from determinism comparisons");
}

void add_differential_option(CLI::App& cmd, std::string* other) {
  cmd.add_option("--differential", *other,
                 "Also run each case on a fresh device of backend OTHER (sim or cuda; recap's runtime only, in this "
                 "process) and judge property differential: same disposition and failure, bitwise equal RNG ledgers, "
                 "losses, gradients and parameters within a per-dtype tolerance. OTHER may equal --backend (a self-check)");
}

std::optional<device::BackendChoice> resolve_differential(const std::string& other, const std::string& sut,
                                                          const std::vector<std::string>& properties) {
  const bool asked = std::find(properties.begin(), properties.end(), "differential") != properties.end();
  if (other.empty()) {
    if (asked) throw UsageError("--property differential needs --differential OTHER (sim or cuda)");
    return std::nullopt;
  }
  if (other != "sim" && other != "cuda") throw UsageError("--differential: must be sim or cuda, got '" + other + "'");
  if (sut != "recap" && sut != "recap-worker")
    throw UsageError("--differential: compares recap's runtime on two backends; --sut " + sut + " is not recap's runtime");
  return other == "cuda" ? device::BackendChoice::Cuda : device::BackendChoice::Sim;
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
  if (f.ranks > 0 && c.kind != "torch" && c.kind != "megatron")
    throw UsageError("--ranks: rank groups run on --sut torch and --sut megatron, not --sut " + text);
  std::optional<sut::Capabilities> group_caps;  // --ranks: the group's
  if (c.kind == "recap") {
    if (f.case_timeout > 0)
      throw UsageError("--case-timeout: recap's runtime in this process cannot be stopped inside a case "
                       "(--sut recap-worker runs it in a worker that can)");
    auto dev = open_device(backend);
    s.info.name = "recap";
    s.info.version = "0.1.0";
    s.info.device = dev->name();
    s.info.capabilities = sut::recap_capabilities_json();
    // what this process sees of its GPU, as recap worker's hello says it (--gpus records it)
    sut::read_visible_device(Json{{"visible_device", sut::visible_device_json(*dev)}}, &s.info);
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
    if (f.ranks > 0) {
      // The rank groups beside the one-rank worker: the same driver with --ranks n (drivers/
      // PROTOCOL.md, "Rank groups"), one for every divisor n > 1 of N, so that shrinking can go
      // down to the smallest group that still fails. Greeted now, as the worker is: their hellos'
      // tp and pp are what the generators draw, and a group that cannot start is bad usage. Not
      // from another thread: a driver dies with the thread that started it (PR_SET_PDEATHSIG).
      std::map<int, std::shared_ptr<sut::WorkerSut>> groups;
      sut::Capabilities merged;
      std::set<std::string> group_fires;  // framework mutants a group can fire (its hello's listing)
      for (int n = 2; n <= f.ranks; ++n) {
        if (f.ranks % n != 0) continue;
        sut::WorkerConfig g = w;
        g.name = c.kind + " rank group of " + std::to_string(n);
        g.argv.push_back("--ranks");
        g.argv.push_back(std::to_string(n));
        g.ranks = n;
        auto group = std::make_shared<sut::WorkerSut>(g);
        sut::SutInfo gi;
        try {
          gi = group->hello();
        } catch (const std::runtime_error& e) {
          throw UsageError("--ranks " + std::to_string(f.ranks) + ": the rank group of " + std::to_string(n) + ": " + e.what());
        }
        sut::Capabilities gc;
        if (std::string err = sut::capabilities_from_json(gi.capabilities, &gc); !err.empty())
          throw UsageError("--ranks " + std::to_string(f.ranks) + ": the rank group's hello: " + err);
        if (std::find(gc.tp.begin(), gc.tp.end(), n) == gc.tp.end())
          throw UsageError("--ranks " + std::to_string(f.ranks) + ": the rank group's hello lists no tp " + std::to_string(n));
        // the union of the groups' sizes, sorted
        for (auto [from, to] : {std::pair{&gc.tp, &merged.tp}, {&gc.pp, &merged.pp}, {&gc.vp, &merged.vp}, {&gc.dp, &merged.dp}}) {
          for (int v : *from)
            if (std::find(to->begin(), to->end(), v) == to->end()) to->push_back(v);
          std::sort(to->begin(), to->end());
        }
        merged.tp_executor = gc.tp_executor;
        merged.tp_kinds = gc.tp_kinds;
        merged.sp = merged.sp || gc.sp;
        merged.worlds.push_back(n);
        groups[n] = group;
        if (gi.mutants.is_array())
          for (const Json& e : gi.mutants)
            if (e.is_object() && e.value("not_exercised", std::string("?")).empty())
              group_fires.insert(e.value("name", std::string()));
      }
      s.sut = std::make_shared<sut::RankedSut>(worker, std::move(groups), f.ranks);
      group_caps = merged;
      // A campaign's framework mutant is exercised where any of its workers can fire it (a
      // torch.distributed mutant in a rank group only): the groups' listing clears the one-rank
      // worker's reason.
      if (s.info.mutants.is_array())
        for (Json& e : s.info.mutants)
          if (e.is_object() && group_fires.count(e.value("name", std::string()))) e["not_exercised"] = "";
    }
  }
  if (std::string err = sut::capabilities_from_json(s.info.capabilities, &s.caps); !err.empty())
    throw UsageError("--sut " + text + ": its hello: " + err);
  if (group_caps) {
    s.caps.tp = group_caps->tp;
    s.caps.tp_executor = group_caps->tp_executor;
    s.caps.tp_kinds = group_caps->tp_kinds;
    s.caps.pp = group_caps->pp;
    s.caps.vp = group_caps->vp;
    s.caps.dp = group_caps->dp;
    s.caps.sp = group_caps->sp;
    s.caps.worlds = group_caps->worlds;
  }
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

void check_output_file(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) throw UsageError(flag + " " + path + ": is a folder");
  if (fs::exists(p, ec)) {  // a file or a device, written over or in place (write_text_file)
    if (::access(path.c_str(), W_OK) != 0) throw UsageError(flag + " " + path + ": not writable: " + std::strerror(errno));
    return;
  }
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(dir, ec)) throw UsageError(flag + " " + path + ": the folder " + dir.string() + " does not exist");
  if (::access(dir.c_str(), W_OK) != 0)
    throw UsageError(flag + " " + path + ": the folder " + dir.string() + " is not writable: " + std::strerror(errno));
}

void check_output_dir(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) throw UsageError(flag + " " + path + ": is not a folder");
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (p.empty()) p = ".";
  if (!fs::is_directory(p, ec)) throw UsageError(flag + " " + path + ": " + p.string() + " is not a folder");
  if (::access(p.c_str(), W_OK) != 0)
    throw UsageError(flag + " " + path + ": " + p.string() + " is not writable: " + std::strerror(errno));
}

}  // namespace recap::cli
