// The RNG states tracker (rng_tracker.h), after Megatron's CudaRNGStatesTracker.
#include "harness/runtime/rng_tracker.h"

#include "harness/runtime/faults.h"

namespace recap::runtime {

RngTracker::RngTracker(device::Device& dev, uint64_t seed, GeneratorMode mode, DeviceStateModel model)
    : dev_(dev), mode_(mode), model_(model) {
  add(kDefaultRngName, seed);
  add(kModelParallelRngName, seed + 2718);  // Megatron: model_parallel_cuda_manual_seed
}

Generator& RngTracker::current() { return get(current_); }

Generator& RngTracker::get(const std::string& name) {
  auto it = gens_.find(name);
  if (it == gens_.end()) throw RngError("cuda rng state " + name + " is not added");  // Megatron's message
  return *it->second;
}

std::vector<std::string> RngTracker::names() const {
  std::vector<std::string> out;
  for (const auto& [name, gen] : gens_) out.push_back(name);
  return out;
}

void RngTracker::add(const std::string& name, uint64_t seed) {
  if (gens_.count(name) != 0) throw RngError("cuda rng state " + name + " already exists");
  gens_[name] = std::make_unique<Generator>(dev_, seed, mode_, model_);
}

std::map<std::string, RngState> RngTracker::save(bool as_handles) {
  as_handles = as_handles || fault_on(Fault::RngSnapshotIsHandle);  // bug class 3
  std::map<std::string, RngState> out;
  for (auto& [name, gen] : gens_) {
    if (fault_on(Fault::TrackerKeysDrift) && name == current_) continue;  // bug class 17: not saved, not restored
    out[name] = as_handles ? gen->handle() : gen->snapshot();
  }
  return out;
}

// generator-not-registered (bug class 5): the generator layers draw from is left out of capture
// registration, so it draws by value inside the capture.
bool RngTracker::registered(const std::string& name) const {
  return !(fault_on(Fault::GeneratorNotRegistered) && name == kDefaultRngName);
}

void RngTracker::restore(const std::map<std::string, RngState>& states) {
  for (const auto& [name, state] : states) get(name).restore(state);
}

void RngTracker::capture_begin() {
  // All or nothing: if one generator refuses, the ones already registered are unregistered.
  std::vector<Generator*> begun;
  try {
    for (auto& [name, gen] : gens_) {
      if (!registered(name)) continue;
      gen->capture_begin();
      begun.push_back(gen.get());
    }
  } catch (...) {
    for (Generator* g : begun) g->capture_end();
    throw;
  }
}

std::map<std::string, GraphRngState> RngTracker::capture_end() {
  std::map<std::string, GraphRngState> out;
  for (auto& [name, gen] : gens_)
    if (registered(name)) out[name] = gen->capture_end();
  return out;
}

device::Status RngTracker::replay_prologue(const std::map<std::string, GraphRngState>& g, device::Stream stream) {
  for (const auto& [name, state] : g) {
    device::Status s = get(name).replay_prologue(state, stream);
    if (!device::ok(s)) return s;
  }
  return device::Status::Success;
}

RngTracker::Fork::Fork(RngTracker& t, const std::string& name) : t_(t), previous_(t.current_) {
  t_.get(name);  // throws for an unknown name, before anything changes
  t_.current_ = name;
}

RngTracker::Fork::~Fork() { t_.current_ = previous_; }

}  // namespace recap::runtime
