// MemoryLedger: the per-category bookkeeping of live and peak bytes, shared by both backends so
// that `sim` and `cuda` report the same figures for the same program (the cuda backend adds the
// CUDA allocator's own counters on top).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "harness/device/memory.h"

namespace recap::device {

class MemoryLedger {
 public:
  // Records `bytes` becoming live at `ptr` under `cat`. A pointer already live is an error the
  // caller must have refused; here it is ignored (returns false).
  bool on_alloc(const void* ptr, int64_t bytes, MemCategory cat);
  // Records `ptr` no longer live; returns its bytes, or -1 if it was not live.
  int64_t on_free(const void* ptr);
  bool is_live(const void* ptr) const;
  int64_t bytes_of(const void* ptr) const;  // -1 when not live
  MemoryStats stats() const;                // pool_* and graph_mem_* left at -1
  void reset_peak();

 private:
  struct Block {
    int64_t bytes;
    MemCategory cat;
  };
  mutable std::mutex mu_;
  std::unordered_map<const void*, Block> live_;
  MemoryStats stats_;
};

}  // namespace recap::device
