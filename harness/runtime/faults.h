// Fault points: named broken variants of the runtime's own mechanisms, one per bug class of
// docs/recompute-and-rng.md (catalogue: docs/faults.md). Each turns one mechanism into the
// variant a real framework shipped, so `recap mutants` can show that some oracle catches it.
//
// Off by default and free when off: a fault point is one test of a bit in a process-wide mask
// (`fault_on`), and the mask is zero unless a case names faults (CaseSpec::faults, written in its
// corpus file, so a reproducer replays with the fault it needs) or RECAP_FAULT names them for a
// test. A Session sets the mask for the case it runs (FaultScope) and puts the old one back.
// The mask is the process's: a FaultScope holds the process's fault lock for its life, so sessions
// of two threads (recap tradeoff --judge-jobs: each judging thread builds a worker's frames and
// the fp64 reference's parameters in a Session on sim) run one at a time, each with its own faults.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "harness/base/names.h"

namespace recap::runtime {

enum class Fault : uint8_t {
  RngSnapshotIsHandle,     // class 3: RNG states saved as live handles, restoring them rewinds nothing
  RngOffsetBaked,          // class 4: a graph-safe draw bakes its offset into the graph
  GeneratorNotRegistered,  // class 5: the default generator is not registered with the capture
  PhaseFlagLeak,           // class 6: a throwing capture or warmup leaves its phase flag set
  WarmupConsumesRng,       // class 7: the graph builder's own warmup forward consumes draws, not restored
  StaticInputStale,        // class 8: replays after the first do not refill the static inputs
  FreeUnderGraph,          // class 9: static inputs freed and reallocated after capture
  MicrobatchIndex,         // class 10: microbatches share the static buffers of microbatch 0
  GradAccumNotZeroed,      // gradients are not zeroed between steps
  AllocInCapture,          // class 14: a cudaMalloc inside the capture
  SideStreamUnjoined,      // class 15: work forked to a side stream during capture, never joined
  RestoreAcrossCapture,    // class 16: a snapshot taken before the capture is restored inside it
  TrackerKeysDrift,        // class 17: the saved tracker states miss the generator that draws
  HiddenParamGrad,         // class 11: a without-output checkpoint's inner parameters lose their gradients
  GradAliasesStatic,       // class 24: a microbatch's gradients kept as views of the static grad buffers
  PoolOrder,               // class 13: graphs sharing a pool captured in one order, replayed in another
  OutputAliasesInputFreed, // class 19: a without-output checkpoint frees an output that is its input
  WarmupMutatesBuffers,    // class 21: a weight cache filled in warmup is baked into the graph
  PhiloxIncrementShort,    // class 26: the offset advances by counter blocks (n/4), not the n values a draw uses
  GraphPoolLeak,           // class 27: every replay takes a buffer from the graph pool and never gives it back
  WithoutOutputNotRebound, // class 19: the consumer of a discarded output keeps reading its old storage
  RecomputeSavesNothing,   // class 2: graph-safe checkpoints keep every activation while a stream captures
  PoolNoReuse,             // a graph pool never hands a freed block to a later tensor: it grows within a capture
  LayerSegfault,           // a layer's recompute kills the process (SIGSEGV): the crash path
  CudaDropoutOffset,       // the layers' cuda dropout kernel (models/op_math.h) draws 4 values past its Philox offset (GPU only)
  GradBufferEmpty,         // gradient buffers allocated empty, not zeroed: the first step accumulates into what they held
};

inline constexpr EnumName<Fault> kFaultNames[] = {
    {Fault::RngSnapshotIsHandle, "rng-snapshot-is-handle"},
    {Fault::RngOffsetBaked, "rng-offset-baked"},
    {Fault::GeneratorNotRegistered, "generator-not-registered"},
    {Fault::PhaseFlagLeak, "phase-flag-leak"},
    {Fault::WarmupConsumesRng, "warmup-consumes-rng"},
    {Fault::StaticInputStale, "static-input-stale"},
    {Fault::FreeUnderGraph, "free-under-graph"},
    {Fault::MicrobatchIndex, "microbatch-index"},
    {Fault::GradAccumNotZeroed, "grad-accum-not-zeroed"},
    {Fault::AllocInCapture, "alloc-in-capture"},
    {Fault::SideStreamUnjoined, "side-stream-unjoined"},
    {Fault::RestoreAcrossCapture, "restore-across-capture"},
    {Fault::TrackerKeysDrift, "tracker-keys-drift"},
    {Fault::HiddenParamGrad, "hidden-param-grad"},
    {Fault::GradAliasesStatic, "grad-aliases-static"},
    {Fault::PoolOrder, "pool-order"},
    {Fault::OutputAliasesInputFreed, "output-aliases-input-freed"},
    {Fault::WarmupMutatesBuffers, "warmup-mutates-buffers"},
    {Fault::PhiloxIncrementShort, "philox-increment-short"},
    {Fault::GraphPoolLeak, "graph-pool-leak"},
    {Fault::WithoutOutputNotRebound, "without-output-not-rebound"},
    {Fault::RecomputeSavesNothing, "recompute-saves-nothing"},
    {Fault::PoolNoReuse, "pool-no-reuse"},
    {Fault::LayerSegfault, "layer-segfault"},
    {Fault::CudaDropoutOffset, "cuda-dropout-offset"},
    {Fault::GradBufferEmpty, "grad-buffer-empty"},
};
// A fault that changes the cuda backend only (its CUDA kernel body; the sim body is untouched): on
// sim it cannot fire, so recap mutants --backend sim reports it "not exercised", and on cuda only
// property differential (against sim) is sure to see it.
inline bool fault_needs_cuda(const std::string& name) { return name == "cuda-dropout-offset"; }
// A fault that kills the process running the case: only a worker process (`recap worker`, which
// sets g_process_killing_faults_allowed) turns it on; elsewhere FaultScope leaves it off.
inline bool fault_kills_process(const std::string& name) { return name == "layer-segfault"; }
extern bool g_process_killing_faults_allowed;
// The first of `names` that kills the process, or "".
std::string process_killing_fault(const std::vector<std::string>& names);
inline constexpr Fault kLastFault = Fault::GradBufferEmpty;  // the enum's last value (tests: one table entry each)
inline std::string fault_name(Fault f) { return name_of(kFaultNames, f); }
inline bool fault_from_name(const std::string& s, Fault* out) { return from_name(kFaultNames, s, out); }

// The mask of the faults on now (bit = enum value). Atomic: code outside any session (the fp64
// reference's model run) may read it while another thread's scope sets it; relaxed, a plain load.
extern std::atomic<uint64_t> g_fault_mask;
inline bool fault_on(Fault f) { return (g_fault_mask.load(std::memory_order_relaxed) >> static_cast<unsigned>(f)) & 1u; }

// "" or one line naming the first unknown name. *mask gets the bits of `names`.
std::string fault_mask_of(const std::vector<std::string>& names, uint64_t* mask);
// RECAP_FAULT's names (comma-separated), read once; a bad name is reported once on stderr.
uint64_t env_fault_mask();

// RAII: the faults of a case (and RECAP_FAULT's) are on inside the scope. It holds the process's
// fault lock for its life (recursive: a scope inside a scope of the same thread nests and puts
// the outer mask back), so a scope of another thread waits: one mask cannot hold two sessions'
// faults. Made and ended on one thread.
class FaultScope {
 public:
  explicit FaultScope(const std::vector<std::string>& names);
  ~FaultScope() { g_fault_mask.store(previous_, std::memory_order_relaxed); }  // before the lock goes
  FaultScope(const FaultScope&) = delete;
  FaultScope& operator=(const FaultScope&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;  // first: taken before the mask is read
  uint64_t previous_;
};

}  // namespace recap::runtime
