// A system under test seen from recap's oracles: it runs a case and returns the run they judge.
// InProcessSut (in_process.h) is recap's own runtime in this process (what
// properties::OracleOptions::sut stands for when null, and what `recap worker` serves); WorkerSut
// runs cases in a persistent worker process speaking recap.worker/1 (drivers/PROTOCOL.md), started
// once and restarted after it dies, so a case that kills it costs that case alone.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/types.h>
#include <unordered_set>
#include <vector>

#include "harness/base/json.h"
#include "harness/sut/protocol.h"
#include "harness/training/executor.h"

namespace recap::sut {

struct SutRun {
  training::RunResult result;
  // Device bytes the run left behind; nullopt when the system does not report them (frameworks).
  std::optional<int64_t> live_after;
  // When the capture failed: training::hygiene_after_failed_capture ("" clean); nullopt when the
  // system sends no hygiene observation (frameworks; CONTRACT: hygiene is then skipped).
  std::optional<std::string> hygiene;
  // What the device's init check saw (recap's runtime on sim); nullopt: not observed.
  std::optional<training::InitObservation> init;
  std::string device_name, backend;  // what the worker ran it on
  // With profiling on (harness/base/profile.h): the worker's own phases, its reply's
  // timings.profile (drivers/PROTOCOL.md, "profile"); null when it sent none or ran in process.
  Json worker_profile;
};

// What a system says of itself (its hello reply).
struct SutInfo {
  std::string name;     // "recap", "torch", "megatron"
  std::string version;  // "0.1.0", torch.__version__, megatron-core's version
  std::string device;   // "sim", "NVIDIA H200", "cpu"
  Json capabilities;    // the hello's object (capabilities.h reads it)
  Json mutants = Json();  // the hello's "mutants" (framework drivers: drivers/recap_drivers/mutants/); null: none
  // The hello's "ops": the requests the worker serves beyond hello, run and shutdown ("measure");
  // empty for a worker older than them. recap's runtime in process measures itself.
  std::vector<std::string> ops;
  // The hello's "visible_device" (--gpus, drivers/PROTOCOL.md): what the worker saw of its GPU: the
  // CUDA_VISIBLE_DEVICES in its environment (nullopt: unset) and the GPU it uses ("" when none).
  // visible_said false: a worker older than the field.
  bool visible_said = false;
  std::optional<std::string> cuda_visible_devices;
  std::string uuid, pci_bus_id;
};
// Reads a hello's "visible_device" into *info (nothing when the hello has none).
void read_visible_device(const Json& hello, SutInfo* info);

// What recap tradeoff measures of one configuration (drivers/PROTOCOL.md, "measure"): the case's
// warmup steps and graph capture, then its replays as timed steps. A figure the system cannot
// measure is nullopt (memory on a CPU), never 0.
struct LayerMeasurement {
  int layer = 0;
  std::optional<double> forward_ms, backward_ms;
  std::optional<int64_t> activations_in_graphs, graph_pool;
};
struct Measurement {
  std::string clock;            // "cuda-events", "host-clock": what timed step_ms
  std::vector<double> step_ms;  // each timed step's work, in order (fewer when the run failed)
  std::optional<double> capture_ms;
  // Bytes: the peaks over the timed steps; device memory in use (total - free) at their end; the
  // graphs' pools; the peak allocated while they were captured; the activations the graphs keep
  // from forward to backward, and those eager steps keep (the same measure outside graphs).
  std::optional<int64_t> peak_allocated, peak_reserved, device_used, graph_pool, capture_peak, activations_in_graphs,
      activations_eager;
  std::vector<LayerMeasurement> per_layer;
  std::string failure;  // one line when the run failed
  std::string note;     // what was not measured and why ("memory: the worker runs on the CPU")
  // Where the request's time went, as the worker timed it (timings.run_ms and timings.profile:
  // data_ms, model_build_ms, run_ms, cleanup_ms); empty for recap's runtime in process.
  std::optional<double> request_ms;
  std::map<std::string, double> request_phases_ms;
  // The worker asked to be replaced after it (`retire`, with " (N MiB still held)" when the reply
  // says; `fatal`): the next request starts a new worker, whose start-up is then part of the time
  // between measurements.
  std::string worker_replaced;
};
Json measurement_to_json(const Measurement& m);
// Throws ProtocolError naming the field that is wrong.
Measurement measurement_from_json(const Json& j);

// A system could not run the case as specified (a worker's status "skipped"): its one-line reason.
// Its reason is never empty: a worker may send "reason": "", and an empty reason reads as "ran"
// where a Run's `skipped` is tested (properties/oracles/runs.cpp twin_trouble).
struct SkippedBySut : std::runtime_error {
  explicit SkippedBySut(const std::string& why) : std::runtime_error(why.empty() ? "no reason given" : why) {}
};
// A worker died during the case: `signal` names the signal that killed it ("SIGSEGV"), "" when it
// exited, hung or talked garbage. The case is `crashed`, its bucket carries the signal.
struct WorkerCrash : std::runtime_error {
  WorkerCrash(const std::string& what, std::string sig) : std::runtime_error(what), signal(std::move(sig)) {}
  std::string signal;
};
// A CUDA error after which the process's context is unusable (drivers/recap_drivers/core/
// cuda_errors.py STICKY): a worker's fatal reply with one is a crash of its case, not a run failure.
bool sticky_cuda_error(const std::string& error);
// An error name a worker reports for an allocator that ran out: cudaErrorMemoryAllocation, or
// OutOfMemoryError (torch's class; its CPU allocator's refusal). The case is `out-of-memory`.
bool out_of_memory_error(const std::string& error);

// What a run is asked to send beyond the observation every system sends. The oracles decide it
// (properties/oracles/: what the selected oracles read); a system sends what it can.
struct RunRequest {
  // Every recorded mask's bytes (drivers/PROTOCOL.md, "mask_frames"): the fp64 oracles apply
  // another system's masks to their reference. recap's runtime needs none (its draws are its own).
  bool mask_frames = false;
};

// The device a run was on, known even when the run threw after making it.
struct SutDevice {
  std::string device_name, backend;
};

class Sut {
 public:
  virtual ~Sut() = default;
  virtual std::string name() const = 0;
  // Whether it is recap's own runtime (whose fp64 reference recap can compute without its masks).
  virtual bool recap_runtime() const = 0;
  // Runs the case. Throws SkippedBySut when the system cannot run it as specified, and
  // std::runtime_error with one line when it could not give a run (the worker died, talked
  // garbage, refused the case, did not answer in time): the oracles record the case as crashed.
  virtual SutRun run(const training::CaseSpec& spec, const RunRequest& ask) = 0;
  // Measures the case (recap tradeoff): its warmup and capture, then spec.replays timed steps,
  // without the downloads the oracles need. Throws SkippedBySut when the system cannot run or
  // cannot measure the case, and std::runtime_error as run() does.
  virtual Measurement measure(const training::CaseSpec& spec) {
    (void)spec;
    throw SkippedBySut(name() + " does not measure cases");
  }
  // The device's bf16 matmul rate in TFLOP/s, timed now in the system's own process (a large
  // square GEMM between two device clock events); nullopt without a GPU (*why says so).
  virtual std::optional<double> matmul_bf16_tflops(std::string* why) {
    *why = name() + " does not measure a matmul rate";
    return std::nullopt;
  }
  // The device of the last run() when it threw after making one (a crashed case still names its
  // device); empty when unknown.
  virtual SutDevice last_device() const { return {}; }
  // The size of the rank group it runs tp cases on (RankedSut); 0: one rank only.
  virtual int ranks() const { return 0; }
};

struct WorkerConfig {
  std::string name;                // for messages: "<name> worker: ..." ("torch", "recap-worker")
  std::vector<std::string> argv;   // {"python3", "-m", "recap_drivers", ...}; argv[0] found on PATH
  std::vector<std::string> env;    // the worker's whole environment, KEY=VALUE (environment_with)
  bool send_frames = false;        // send each case's parameters and data (recap's own worker derives them)
  bool recap_runtime = false;
  double case_timeout_s = 0;       // a request unanswered this long kills the worker; 0: no limit
  bool echo_stderr = false;        // copy the worker's stderr to recap's after each request
  // Ask the worker to run a case's eager form twice before the case (drivers/PROTOCOL.md,
  // "determinism_check"): bitwise contracts mean nothing on nondeterministic kernels, and such a
  // case comes back skipped with the first tensor that differed. Once per case family: a case,
  // its eager twin and its no-checkpoint twin (the same eager form, checkpoints aside, whose
  // recomputes run the forward's kernels again) are checked once, by the first request of them.
  bool determinism_check = false;
  // A rank group of this many ranks (argv asks the driver for it: `--ranks N`): it runs the cases of
  // tp N alone, each request carrying "tp": N (drivers/PROTOCOL.md, "Rank groups"). 0: one rank,
  // which runs the cases of tp 1 alone.
  int ranks = 0;
};

// recap's environment with `set` (KEY=VALUE each) replacing or adding variables: what a worker
// gets, leaving recap's own environment as it is.
std::vector<std::string> environment_with(const std::vector<std::string>& set);

class WorkerSut : public Sut {
 public:
  explicit WorkerSut(WorkerConfig config) : config_(std::move(config)) {}
  ~WorkerSut() override;
  std::string name() const override { return config_.name; }
  bool recap_runtime() const override { return config_.recap_runtime; }
  SutRun run(const training::CaseSpec& spec, const RunRequest& ask) override;
  // The `measure` request (drivers/PROTOCOL.md); SkippedBySut when the worker's hello lists no
  // "measure" op or it skips the case.
  Measurement measure(const training::CaseSpec& spec) override;
  std::optional<double> matmul_bf16_tflops(std::string* why) override;
  // Starts the worker when it is not running (it answers `hello` first) and returns what it said.
  // std::runtime_error with one line when it cannot start, exits, refuses hello, talks garbage or
  // does not answer in time ("the worker exited with status 2: <its stderr tail>").
  SutInfo hello();

 private:
  void start();
  // Closes the pipes and reaps the process, killed when it has not exited within grace_s; how it
  // ended: last_exit_.
  void stop(double grace_s);
  // One request and its reply, within the case timeout. false when the worker closed its output;
  // ProtocolError for a reply that is not one, std::runtime_error when the timeout killed it.
  bool exchange(const Message& request, Message* reply);
  void begin_request();      // empties the stderr file: its tail is this request's
  void end_request();        // with echo_stderr, copies what the request wrote to recap's stderr
  std::string stderr_tail() const;  // "" or "; stderr: <last lines, one line>"
  // One `measure` request and its reply ("measurement"), with run()'s handling of a worker that
  // dies, talks garbage or does not answer; SkippedBySut for a reply whose status is skipped.
  Json measure_request(Json header);
  WorkerConfig config_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  int stderr_fd_ = -1;       // an unlinked temporary file, the worker's fd 2
  off_t echoed_ = 0;         // bytes of it copied to recap's stderr
  int64_t next_id_ = 1;
  std::unordered_set<std::string> checked_eager_;  // case families already run twice (determinism_check)
  std::string last_exit_;
  std::string last_signal_;  // "SIGSEGV" when a signal ended it, else ""
  bool timed_out_ = false;   // the last exchange's watchdog killed the worker (its SIGKILL is recap's)
  SutInfo info_;
};

// recap fuzz|replay --sut torch --ranks N: the ordinary one-rank worker and a rank group of n ranks
// for every divisor n > 1 of N, each a WorkerSut (started when first needed, replaced when it dies).
// A case goes to the one its tp * pp * dp names: 1 to the one-rank worker (and so does every one-rank
// twin an oracle asks for), n to the group of n; a size no group has is skipped, naming the groups.
class RankedSut : public Sut {
 public:
  // groups: by their number of ranks (--ranks N starts one of every divisor of N above 1, so that
  // a failure shrinks to the smallest group that still fails); world: the largest.
  RankedSut(std::shared_ptr<WorkerSut> one, std::map<int, std::shared_ptr<WorkerSut>> groups, int world)
      : one_(std::move(one)), groups_(std::move(groups)), world_(world) {}
  int ranks() const override { return world_; }
  std::string name() const override { return one_->name(); }
  bool recap_runtime() const override { return false; }
  SutRun run(const training::CaseSpec& spec, const RunRequest& ask) override {
    const int n = spec.ranks();
    if (n > 1 && !groups_.count(n)) {
      std::string have;
      for (const auto& [size, g] : groups_) have += (have.empty() ? "" : ", ") + std::to_string(size);
      throw SkippedBySut("tp " + std::to_string(spec.tp) + " pp " + std::to_string(spec.pp) +
                         (spec.dp > 1 ? " dp " + std::to_string(spec.dp) : std::string()) + ": no rank group of " +
                         std::to_string(n) + " ranks (--ranks " + std::to_string(world_) + " started groups of " + have + ")");
    }
    WorkerSut& w = n > 1 ? *groups_.at(n) : *one_;
    last_ = &w;
    return w.run(spec, ask);
  }
  Measurement measure(const training::CaseSpec& spec) override {
    if (spec.ranks() > 1) throw SkippedBySut("a rank group serves no measure request (drivers/PROTOCOL.md, \"Rank groups\")");
    last_ = one_.get();
    return one_->measure(spec);
  }
  std::optional<double> matmul_bf16_tflops(std::string* why) override { return one_->matmul_bf16_tflops(why); }
  SutDevice last_device() const override { return last_ ? last_->last_device() : SutDevice{}; }

 private:
  std::shared_ptr<WorkerSut> one_;
  std::map<int, std::shared_ptr<WorkerSut>> groups_;
  int world_;
  const WorkerSut* last_ = nullptr;
};

}  // namespace recap::sut
