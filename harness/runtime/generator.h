// The Philox generator, modelled on PyTorch's CUDA generator (CUDAGeneratorImpl), with the
// mechanisms whose variants cause the bug classes of docs/recompute-and-rng.md.
//
// Eager (not capturing): a draw gets (seed, offset) by value; the host offset advances by the
// draw's increment (count rounded up to a multiple of 4). Under capture:
//  - Mode::GraphSafe: a draw gets pointers to the device seed/offset of this capture plus the
//    intragraph offset, which advances; at capture end the whole-graph increment is the final
//    intragraph offset. Before every replay, replay_prologue() writes the host (seed, offset) into
//    the device pair on the replay stream (a kernel, so it is stream-ordered) and advances the
//    host offset by the increment. DeviceStateModel::Shared keeps one device pair per generator
//    for all graphs and skips the prologue when a graph's increment is zero (PyTorch <= 2.11);
//    PerCapture keeps one pair per capture.
//  - Mode::Host: the draw bakes (seed, offset) by value into the graph, so every replay draws the
//    same numbers (bug classes 4 and 5); reading or setting the state during capture throws
//    RngError ("Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture").
// State: snapshot() is a true copy (clone_state) and throws during capture; handle() aliases the
// live state (graphsafe_get_state), so restoring it does not rewind anything. get_state() during
// a graph-safe capture returns (seed, intragraph offset), set_state() with the same seed rewinds
// the intragraph offset (PyTorch 2.10+).
// Device pairs (16 bytes, category Other): Shared allocates its pair at construction (graph-safe
// only) and sets it to (seed, 0); PerCapture allocates one per capture_begin under a Relaxed
// capture-mode guard, so capture_begin may run before or after stream_begin_capture. Pairs live
// until ~Generator. "Capturing" means registered (capture_begin..capture_end): an unregistered
// generator draws by value even inside a stream capture (bug class 5). restore(snapshot) is
// set_state(seed, offset), so during a graph-safe capture it moves the intragraph offset.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/base/names.h"
#include "harness/device/device.h"
#include "harness/runtime/philox.h"

namespace recap::runtime {

struct RngError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class GeneratorMode { Host, GraphSafe };
enum class DeviceStateModel { Shared, PerCapture };
inline constexpr EnumName<GeneratorMode> kGeneratorModeNames[] = {{GeneratorMode::Host, "host"},
                                                                  {GeneratorMode::GraphSafe, "graph-safe"}};
inline constexpr EnumName<DeviceStateModel> kDeviceStateModelNames[] = {{DeviceStateModel::Shared, "shared"},
                                                                        {DeviceStateModel::PerCapture, "per-capture"}};
inline std::string generator_mode_name(GeneratorMode m) { return name_of(kGeneratorModeNames, m); }
inline std::string device_state_model_name(DeviceStateModel m) { return name_of(kDeviceStateModelNames, m); }
inline bool generator_mode_from_name(const std::string& s, GeneratorMode* out) {
  return from_name(kGeneratorModeNames, s, out);
}
inline bool device_state_model_from_name(const std::string& s, DeviceStateModel* out) {
  return from_name(kDeviceStateModelNames, s, out);
}

// What a graph needs at replay: its device pair and whole-graph increment.
struct GraphRngState {
  uint64_t* seed_dev = nullptr;    // device memory
  uint64_t* offset_dev = nullptr;  // device memory
  uint64_t increment = 0;
  bool valid = false;
};

class Generator;

// A saved generator state: either a snapshot (values) or a handle (an alias of the live state).
struct RngState {
  enum class Kind { Snapshot, Handle } kind = Kind::Snapshot;
  uint64_t seed = 0;
  uint64_t offset = 0;            // snapshot: host offset; handle: unused
  Generator* live = nullptr;      // handle only
};

// How far a draw of `count` values advances its stream's offset: philox_increment(count), unless
// the fault point philox-increment-short (class 26) counts counter blocks of 4 values instead.
uint64_t draw_increment(uint64_t count);

class Generator {
 public:
  Generator(device::Device& dev, uint64_t seed, GeneratorMode mode, DeviceStateModel model);
  ~Generator();  // frees the device pairs
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  GeneratorMode mode() const { return mode_; }
  DeviceStateModel device_state_model() const { return model_; }
  uint64_t seed() const { return seed_; }
  uint64_t host_offset() const { return offset_; }
  bool capturing() const { return capturing_; }

  // Reserves `count` values and returns how a kernel must read them (see the file comment).
  PhiloxArgs draw(uint64_t count);

  // Capture registration (the executor calls these around stream_begin/end_capture).
  void capture_begin();
  GraphRngState capture_end();
  // Before each replay of a graph captured with this generator: on `stream`, refresh the device
  // pair from the host state and advance the host offset (or skip, per the model).
  device::Status replay_prologue(const GraphRngState& g, device::Stream stream);

  // State access.
  RngState snapshot() const;          // clone_state: throws RngError during capture
  RngState handle();                  // graphsafe_get_state: alias of the live state
  void restore(const RngState& s);    // set_state / graphsafe_set_state
  std::pair<uint64_t, uint64_t> get_state() const;  // (seed, offset or intragraph offset)
  void set_state(uint64_t seed, uint64_t offset);
  void manual_seed(uint64_t seed);    // seed := seed, offset := 0

 private:
  void check_seed_settable_during_capture(uint64_t seed) const;

  device::Device& dev_;
  uint64_t seed_;
  uint64_t offset_ = 0;
  GeneratorMode mode_;
  DeviceStateModel model_;
  bool capturing_ = false;
  uint64_t intragraph_ = 0;
  GraphRngState current_;  // the device pair used by the capture in progress
  uint64_t* shared_seed_dev_ = nullptr;
  uint64_t* shared_offset_dev_ = nullptr;
  std::vector<void*> owned_;  // device pairs to free
};

}  // namespace recap::runtime
