// Memory accounting categories and the statistics a device reports.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/base/names.h"

namespace recap::device {

// Every device allocation carries one of these, so that reports can say where the bytes went
// (the memory oracle compares saved activations with and without recompute).
enum class MemCategory : int {
  Parameters = 0,
  Gradients,
  Activations,  // saved activations (what checkpointing is meant to shrink)
  Workspace,    // cuBLAS workspace, scratch
  GraphPool,    // memory owned by graphs: graph memory nodes (cudaMallocAsync during capture)
  Other,
  kCount
};
constexpr int kNumCategories = static_cast<int>(MemCategory::kCount);

inline constexpr EnumName<MemCategory> kCategoryNames[] = {
    {MemCategory::Parameters, "parameters"}, {MemCategory::Gradients, "gradients"},
    {MemCategory::Activations, "activations"}, {MemCategory::Workspace, "workspace"},
    {MemCategory::GraphPool, "graph_pool"},   {MemCategory::Other, "other"}};
inline std::string category_name(MemCategory c) { return name_of(kCategoryNames, c); }
inline bool category_from_name(const std::string& name, MemCategory* out) { return from_name(kCategoryNames, name, out); }

struct CategoryStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;  // number of allocations ever made in this category
};

struct MemoryStats {
  std::array<CategoryStats, kNumCategories> by_category{};
  int64_t live_bytes = 0;  // all categories together
  int64_t peak_bytes = 0;  // peak of the total (not the sum of per-category peaks)
  // Counters read from the CUDA allocator itself (cudaMemPoolGetAttribute /
  // cudaDeviceGetGraphMemAttribute). On `sim` these equal the modelled values; -1 where unknown.
  int64_t pool_used_bytes = -1;
  int64_t pool_peak_bytes = -1;
  int64_t graph_mem_used_bytes = -1;
  int64_t graph_mem_peak_bytes = -1;

  const CategoryStats& operator[](MemCategory c) const {
    return by_category[static_cast<int>(c)];
  }
};

}  // namespace recap::device
