// RNG states tracker with named states and fork, like Megatron's CudaRNGStatesTracker: layers
// draw from the current generator; fork(name) makes a named generator current for a scope
// (dropout inside tensor-parallel regions draws from "model-parallel-rng").
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/runtime/generator.h"

namespace recap::runtime {

constexpr const char* kDefaultRngName = "default";
constexpr const char* kModelParallelRngName = "model-parallel-rng";

class RngTracker {
 public:
  // Creates "default" (seed) and "model-parallel-rng" (seed + 2718, as Megatron offsets it).
  RngTracker(device::Device& dev, uint64_t seed, GeneratorMode mode, DeviceStateModel model);

  Generator& current();
  const std::string& current_name() const { return current_; }
  Generator& get(const std::string& name);  // throws RngError for an unknown name
  std::vector<std::string> names() const;
  void add(const std::string& name, uint64_t seed);  // throws RngError if it exists

  // Saves/restores every generator's state (what CheckpointFunction saves in forward).
  std::map<std::string, RngState> save(bool as_handles);
  void restore(const std::map<std::string, RngState>& states);

  // All generators' capture registration, in one call each (executors use these).
  void capture_begin();
  std::map<std::string, GraphRngState> capture_end();
  device::Status replay_prologue(const std::map<std::string, GraphRngState>& g, device::Stream stream);

  class Fork {  // RAII: current() is `name` inside the scope
   public:
    Fork(RngTracker& t, const std::string& name);
    ~Fork();
   private:
    RngTracker& t_;
    std::string previous_;
  };

 private:
  bool registered(const std::string& name) const;  // false only under generator-not-registered

  device::Device& dev_;
  GeneratorMode mode_;
  DeviceStateModel model_;
  std::map<std::string, std::unique_ptr<Generator>> gens_;
  std::string current_ = kDefaultRngName;
};

}  // namespace recap::runtime
