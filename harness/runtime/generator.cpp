// The Philox generator (generator.h), after PyTorch's CUDAGeneratorImpl / CUDAGeneratorState.
//
// Where the device pairs live (16 bytes each, dev.malloc category Other, seed at [0], offset at
// [1]):
//  - Shared model (graph-safe): one pair per generator, allocated at construction and set to
//    (seed, 0), as PyTorch's capture_prologue fills it, so a zero-increment graph replayed before
//    any other reads defined values. PyTorch allocates it at the first register_graph; allocating
//    it up front keeps every device call of capture_begin away from the capture.
//  - PerCapture model: a fresh pair per capture_begin, under a Relaxed capture-mode guard, so
//    capture_begin may be called before or after stream_begin_capture. It is not initialized: in
//    this model every replay's prologue writes it before the graph runs.
//  - Host mode allocates nothing (its draws never read device state).
// All pairs are freed in ~Generator; graphs captured with them must be gone by then.
//
// "Capturing" is the generator's own registration (capture_begin .. capture_end), not the stream's
// status: a generator that the executor forgot to register draws by value during a capture and
// bakes its offset into the graph, which is bug class 5.
#include "harness/runtime/generator.h"

#include <cstring>

#include "harness/runtime/capture_mode_guard.h"
#include "harness/runtime/context.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/rng_state_kernels.h"

namespace recap::runtime {

namespace {

// PyTorch's at::cuda::assertNotCapturing message (CUDAGraphsUtils.cuh).
[[noreturn]] void throw_capturing(const std::string& attempt) {
  throw RngError(attempt +
                 " during CUDA graph capture. If you need this call to be captured, please file an issue. "
                 "Current cudaStreamCaptureStatus: cudaStreamCaptureStatusActive");
}

// A 16-byte device pair under a Relaxed guard; throws DeviceError when the device refuses.
uint64_t* alloc_pair(device::Device& dev, std::vector<void*>& owned, const char* where) {
  void* p = nullptr;
  device::Status s;
  {
    CaptureModeGuard guard(dev, device::CaptureMode::Relaxed);
    s = dev.malloc(&p, 2 * sizeof(uint64_t), device::MemCategory::Other);
  }
  if (!device::ok(s)) throw DeviceError("cudaMalloc", s, where);
  owned.push_back(p);
  return static_cast<uint64_t*>(p);
}

}  // namespace

Generator::Generator(device::Device& dev, uint64_t seed, GeneratorMode mode, DeviceStateModel model)
    : dev_(dev), seed_(seed), mode_(mode), model_(model) {
  if (mode_ == GeneratorMode::GraphSafe && model_ == DeviceStateModel::Shared) {
    uint64_t* pair = alloc_pair(dev_, owned_, "generator: shared device seed/offset");
    shared_seed_dev_ = pair;
    shared_offset_dev_ = pair + 1;
    uint64_t init[2] = {seed_, 0};
    device::Status s = dev_.memcpy(pair, init, sizeof init, device::CopyKind::HostToDevice);
    if (!device::ok(s)) {
      CaptureModeGuard guard(dev_, device::CaptureMode::Relaxed);
      dev_.free(pair);
      throw DeviceError("cudaMemcpy", s, "generator: initializing the shared device seed/offset");
    }
  }
}

Generator::~Generator() {
  CaptureModeGuard guard(dev_, device::CaptureMode::Relaxed);
  for (void* p : owned_) dev_.free(p);
}

uint64_t draw_increment(uint64_t count) {
  // class 26: an increment in the wrong unit leaves the next draw inside this one's values
  if (fault_on(Fault::PhiloxIncrementShort)) return philox_increment((count + 3u) / 4u);
  return philox_increment(count);
}

PhiloxArgs Generator::draw(uint64_t count) {
  uint64_t inc = draw_increment(count);
  if (capturing_ && mode_ == GeneratorMode::GraphSafe) {
    if (fault_on(Fault::RngOffsetBaked)) {  // bug class 4: the replays repeat the capture's draws
      PhiloxArgs a = PhiloxArgs::by_value(seed_, offset_ + intragraph_);
      intragraph_ += inc;
      return a;
    }
    PhiloxArgs a = PhiloxArgs::from_device(current_.seed_dev, current_.offset_dev, intragraph_);
    intragraph_ += inc;
    return a;
  }
  // Eager, or a host-mode (or unregistered) draw under capture: the value is baked into the launch.
  PhiloxArgs a = PhiloxArgs::by_value(seed_, offset_);
  offset_ += inc;
  return a;
}

void Generator::capture_begin() {
  if (capturing_) throw RngError("Generator::capture_begin: a capture is already registered");
  current_ = GraphRngState{};
  if (mode_ == GeneratorMode::GraphSafe) {
    if (model_ == DeviceStateModel::Shared) {
      current_.seed_dev = shared_seed_dev_;
      current_.offset_dev = shared_offset_dev_;
    } else {
      uint64_t* pair = alloc_pair(dev_, owned_, "generator: per-capture device seed/offset");
      current_.seed_dev = pair;
      current_.offset_dev = pair + 1;
    }
    current_.valid = true;
  }
  intragraph_ = 0;
  capturing_ = true;
}

GraphRngState Generator::capture_end() {
  if (!capturing_) throw RngError("Generator::capture_end: no capture is registered");
  capturing_ = false;
  GraphRngState g = current_;
  // Host mode: nothing to refresh at replay (valid == false); the draws were baked by value.
  g.increment = g.valid ? intragraph_ : 0;
  current_ = GraphRngState{};
  return g;
}

device::Status Generator::replay_prologue(const GraphRngState& g, device::Stream stream) {
  if (capturing_) throw_capturing("Cannot prepare for replay");
  if (!g.valid) return device::Status::Success;
  // PyTorch <= 2.11 (CUDAGeneratorState::replay_prologue): `if (wholegraph_increment) { fill; increase; }`.
  if (model_ == DeviceStateModel::Shared && g.increment == 0) return device::Status::Success;
  device::Status s = dev_.launch(write_rng_state_kernel(g.seed_dev, g.offset_dev, seed_, offset_), stream);
  if (!device::ok(s)) return s;
  offset_ += g.increment;
  return device::Status::Success;
}

RngState Generator::snapshot() const {
  if (capturing_) throw_capturing("Cannot call CUDAGeneratorImpl::clone_state");
  RngState s;
  s.kind = RngState::Kind::Snapshot;
  s.seed = seed_;
  s.offset = offset_;
  return s;
}

RngState Generator::handle() {
  RngState s;
  s.kind = RngState::Kind::Handle;
  s.seed = seed_;
  s.live = this;
  return s;
}

void Generator::restore(const RngState& s) {
  if (s.kind == RngState::Kind::Snapshot) {
    set_state(s.seed, s.offset);
    return;
  }
  if (s.live == nullptr) throw RngError("Generator::restore: a handle without a live state");
  // graphsafe_set_state: this generator's state becomes the handle's live state. Restoring a
  // handle of itself changes nothing (the bug: the "saved" state has moved on with every draw).
  if (s.live == this) return;
  auto [seed, offset] = s.live->get_state();
  set_state(seed, offset);
}

std::pair<uint64_t, uint64_t> Generator::get_state() const {
  if (!capturing_) return {seed_, offset_};
  if (mode_ == GeneratorMode::Host) throw_capturing("Cannot call CUDAGeneratorImpl::current_seed");
  return {seed_, intragraph_};  // PyTorch 2.10+: the intragraph offset during capture
}

void Generator::set_state(uint64_t seed, uint64_t offset) {
  if (offset % 4 != 0) throw RngError("offset must be a multiple of 4");
  if (!capturing_) {
    seed_ = seed;
    offset_ = offset;
    return;
  }
  check_seed_settable_during_capture(seed);
  intragraph_ = offset;  // PyTorch 2.10+: rewinds (or moves) the offset within the graph
}

// Setting the seed during capture (PyTorch's set_current_seed): refused for a host generator, and
// for a graph-safe one unless the seed stays the same.
void Generator::check_seed_settable_during_capture(uint64_t seed) const {
  if (mode_ == GeneratorMode::Host) throw_capturing("Cannot call CUDAGeneratorImpl::set_current_seed");
  if (seed != seed_)
    throw RngError(
        "CUDAGeneratorImpl::set_current_seed can be called during stream capture only if new seed is the same "
        "as the original seed.");
}

void Generator::manual_seed(uint64_t seed) {
  if (!capturing_) {
    seed_ = seed;
    offset_ = 0;
    return;
  }
  check_seed_settable_during_capture(seed);
}

}  // namespace recap::runtime
