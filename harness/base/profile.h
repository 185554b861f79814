// Where a case's time goes (--profile; issue 21): milliseconds per phase of one run, summed on the
// thread that runs it. Off unless a Sink is installed on this thread: then a Scope reads no clock
// and add() does nothing, so code paths instrumented here cost one thread-local load when off.
//
// The phases of a run (keys of Phases; docs/profile.md says what each holds):
//   disjoint, summing to at most the run's time (the rest is "other_ms"):
//     startup_ms model_build_ms eager_steps_ms warmup_ms capture_ms replay_ms hygiene_ms teardown_ms
//     request_ms exchange_ms decode_ms (a worker's run, seen from recap)
//     encode_ms (a worker: its reply's header and frames, before they are written)
//   within those (counters that overlap them, and may overlap each other):
//     h2d_ms d2h_ms (synchronous host-device copies) sync_ms (the host waiting at stream, event and
//     device synchronizations) sim_work_ms (sim: the simulated device work it runs on the host)
//     launch_ms (the host inside kernel and graph launches: a full launch queue blocks there)
//     alloc_ms (device allocations and frees; cudaFree waits for the device) host_data_ms (the
//     step's inputs and targets drawn, on the device; the name is older)
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace recap::profile {

using Phases = std::map<std::string, double>;

// Phase keys.
inline constexpr const char* kStartup = "startup_ms";
inline constexpr const char* kModelBuild = "model_build_ms";
inline constexpr const char* kEagerSteps = "eager_steps_ms";
inline constexpr const char* kWarmup = "warmup_ms";
inline constexpr const char* kCapture = "capture_ms";
inline constexpr const char* kReplay = "replay_ms";
inline constexpr const char* kHygiene = "hygiene_ms";
inline constexpr const char* kTeardown = "teardown_ms";
inline constexpr const char* kRequest = "request_ms";
inline constexpr const char* kExchange = "exchange_ms";
inline constexpr const char* kDecode = "decode_ms";
inline constexpr const char* kEncode = "encode_ms";
inline constexpr const char* kH2D = "h2d_ms";
inline constexpr const char* kD2H = "d2h_ms";
inline constexpr const char* kSync = "sync_ms";
inline constexpr const char* kSimWork = "sim_work_ms";
inline constexpr const char* kLaunch = "launch_ms";
inline constexpr const char* kAlloc = "alloc_ms";
inline constexpr const char* kHostData = "host_data_ms";
inline constexpr const char* kOther = "other_ms";

// The disjoint phases of a run, in the order a run goes through them (reports list them so).
inline constexpr const char* kDisjoint[] = {kStartup, kModelBuild, kEagerSteps, kWarmup, kCapture, kReplay,
                                            kHygiene, kTeardown,  kRequest,    kExchange, kDecode, kEncode};
// The counters within them.
inline constexpr const char* kWithin[] = {kH2D, kD2H, kSync, kSimWork, kLaunch, kAlloc, kHostData};

namespace detail {
inline thread_local Phases* g_sink = nullptr;
}

inline bool on() { return detail::g_sink != nullptr; }

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds ms to a phase of the installed sink (nothing when off).
inline void add(const char* key, double ms) {
  if (Phases* s = detail::g_sink) (*s)[key] += ms;
}

// Times its own life into `key` of the sink installed when it was made (a null key: nothing).
class Scope {
 public:
  explicit Scope(const char* key) : key_(key), sink_(key ? detail::g_sink : nullptr), t0_(sink_ ? now_ms() : 0.0) {}
  ~Scope() {
    if (sink_) (*sink_)[key_] += now_ms() - t0_;
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* key_;
  Phases* sink_;
  double t0_;
};

// Installs `phases` as this thread's sink for its life (null: profiling off inside), then puts the
// previous one back.
class Sink {
 public:
  explicit Sink(Phases* phases) : previous_(detail::g_sink) { detail::g_sink = phases; }
  ~Sink() { detail::g_sink = previous_; }
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

 private:
  Phases* previous_;
};

// Adds the within-counters of `inner` (a nested sink's) to the installed sink: what a nested part
// copied and waited for still counts, its phases do not (the caller times the part as one phase).
inline void add_within(const Phases& inner) {
  for (const char* k : kWithin)
    if (auto it = inner.find(k); it != inner.end()) add(k, it->second);
}

}  // namespace recap::profile
