// The memory model: what recap's runtime must hold inside graphs, predicted from the case alone
// (layer kinds and shapes, dtype, checkpoint flags, style, policy, executor), never read from a
// run. The memory oracle compares it with what the run observed, byte for byte, so a runtime that
// keeps more (a recompute that saves nothing) or less than its design says is caught even where
// every bitwise comparison agrees.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "harness/training/spec.h"

namespace recap::properties {

// The activation bytes each forward captured into a graph leaves allocated for its backward (what
// training::RunResult::held_in_graphs observes), by the same units: "<layer> mb<m>" for each
// graphed layer and microbatch of per-layer graphs, "mb<m>" per microbatch of a full-iteration
// graph; empty for an eager case or per-layer graphs of no layer. The design it encodes, per top-level
// layer: what its forward saves for backward (its kind's tensors: models/layers.cpp), a
// checkpointed region instead saving its input and a token (graph-safe: the 16-byte RNG pair, an
// activation; naive and skip: a 4-byte key of another category); skip bypassing reentrant
// checkpoints while per-layer graphs capture; a without-output checkpoint's record holding its
// output until the consumer's forward lets it be discarded; per-layer graphs holding their output.
std::map<std::string, int64_t> predicted_held_in_graphs(const training::CaseSpec& spec);

// What the capture of recap's runtime allocates, predicted from the case alone: the storages each
// layer kind allocates and frees, in the order the runtime frees them (forward, the backward's
// recompute and its gradients, the without-output protocol, the loss), played through a model of
// the graph pools (blocks of the request rounded up to 512 bytes, best fit, never split, a freed
// block back to its own pool's free list; one pool per captured unit unless the case shares one).
struct CaptureMemory {
  int64_t activations_peak = 0;     // Allocator::Stats::tensors[Activations].peak_bytes over the capture
  int64_t pool_reserved = 0;        // bytes of every pool's blocks at the end of capture (= their peak: no pool frees a block while capturing)
  int64_t pool_used = 0;            // of those, bytes of blocks a live tensor holds once capture is over
  int pools = 0;                    // pools the capture created
  int64_t allocations = 0;          // tensors allocated inside the capture
};
// nullopt where the case captures nothing (eager, or per-layer graphs of no layer).
std::optional<CaptureMemory> predicted_capture_memory(const training::CaseSpec& spec);

}  // namespace recap::properties
