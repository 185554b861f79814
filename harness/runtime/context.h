// Ctx: what a layer sees while it runs. The executor fills it; layers know nothing of executors,
// graphs or phases beyond what is here.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "harness/device/device.h"
#include "harness/runtime/philox.h"
#include "harness/runtime/rng_ledger.h"
#include "harness/runtime/rng_tracker.h"
#include "harness/runtime/tensor.h"

namespace recap::runtime {

// A device call failed (a capture error, most often). Carries the call and the CUDA error so that
// reports can name them: "cudaMalloc failed: cudaErrorStreamCaptureUnsupported".
struct DeviceError : std::runtime_error {
  DeviceError(const std::string& api, device::Status status, const std::string& where);
  std::string api;
  device::Status status;
};

// A draw's arguments for a kernel: how to read (seed, offset), and where to record what it used.
struct Draw {
  PhiloxArgs args;
  uint64_t* record = nullptr;  // device: [seed, offset] written by the kernel; may be null
};

// Replaying a checkpointed region's draws from a saved device (seed, offset) (the graph-safe
// policy): draws return from_device(seed, offset, next) and advance `next`.
struct DrawOverride {
  const uint64_t* seed_dev = nullptr;
  const uint64_t* offset_dev = nullptr;
  uint64_t next = 0;
};

struct Ctx {
  device::Device& dev;
  device::Stream stream;
  Allocator& alloc;
  RngTracker& rng;
  RngLedger* ledger = nullptr;  // null: draws are not logged

  std::string layer;               // current layer path, "block1.mlp"
  Phase phase = Phase::Forward;
  int microbatch = 0;
  int step = 0;
  bool save_for_backward = true;   // false inside a checkpoint's no-grad forward
  std::optional<DrawOverride> draw_override;

  // Reserves `count` random values for op `op` of the current layer from the tracker's current
  // generator (or the override), with a ledger slot when a ledger is attached.
  Draw draw(const std::string& op, uint64_t count);
  // Launches record_draw_kernel(d.record, d.args) on `stream` (nothing when d.record is null):
  // for drawing kernels that do not write the record themselves. Launch it on the same stream as
  // the drawing kernel; it unpacks the same args, so it records what that kernel used.
  void record_draw(const Draw& d);
  // dev.launch(k, stream); throws DeviceError("kernel <name>", status, layer) on failure.
  void launch(const device::Kernel& k);
  Tensor alloc_tensor(const Shape& shape, DType dtype, device::MemCategory cat);
};

// RAII: ctx.layer gets ".name" appended for a scope (containers name their children).
class LayerScope {
 public:
  LayerScope(Ctx& ctx, const std::string& name);
  ~LayerScope();
 private:
  Ctx& ctx_;
  std::string previous_;
};

}  // namespace recap::runtime
