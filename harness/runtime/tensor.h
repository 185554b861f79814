// Tensors and the runtime's allocator.
//
// A Tensor is a typed view of device memory with a shape and an accounting category. The
// Allocator hands tensors out and models PyTorch's caching allocator where it matters to recap:
//  - eager: each tensor is its own device allocation (cudaMalloc), so the device ledger gives
//    exact per-category figures;
//  - graphs: while a pool is active (graph warmup, capture), tensors come from that private pool;
//    the pool grows with cudaMalloc under a Relaxed capture-interaction mode (as PyTorch's
//    allocator does), and freed blocks are reused by later tensors of the same pool. Blocks live
//    until the pool is destroyed, which is why a graph's memory stays reserved between replays.
// The allocator also keeps logical per-category statistics of live tensors (inside pools too),
// which is what the memory oracle compares: saved activations with and without recompute.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/base/names.h"
#include "harness/device/device.h"

namespace recap::runtime {

enum class DType { F32, BF16 };
inline constexpr EnumName<DType> kDTypeNames[] = {{DType::F32, "fp32"}, {DType::BF16, "bf16"}};
inline std::string dtype_name(DType d) { return name_of(kDTypeNames, d); }
inline bool dtype_from_name(const std::string& s, DType* out) { return from_name(kDTypeNames, s, out); }
size_t dtype_size(DType d);                // 4, 2

using Shape = std::vector<int64_t>;
using PoolIdInternal = uint64_t;
int64_t numel(const Shape& s);

class Allocator;

// The memory behind tensors. Shared: saving a tensor for backward holds a reference, as PyTorch
// does, and the memory goes back to the allocator (or its pool) when the last reference drops.
struct Storage {
  Allocator* owner = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  device::MemCategory category = device::MemCategory::Other;
  uint64_t id = 0;
  PoolIdInternal pool = 0;
  ~Storage();
};

struct Tensor {
  std::shared_ptr<Storage> storage;
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::F32;

  bool defined() const { return data != nullptr; }
  uint64_t id() const { return storage ? storage->id : 0; }
  device::MemCategory category() const { return storage ? storage->category : device::MemCategory::Other; }
  int64_t numel() const { return runtime::numel(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

using PoolId = PoolIdInternal;  // 0 = no pool (eager allocations)

class Allocator {
 public:
  explicit Allocator(device::Device& dev);
  ~Allocator();  // frees every live tensor and destroys every pool
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  device::Device& device() { return dev_; }

  // Throws std::runtime_error naming the failing call and its CUDA error (e.g. a cudaMalloc that a
  // capture refused) when the device refuses; it is a DeviceError (context.h). A tensor of zero
  // elements allocates nothing (data == nullptr). Pool blocks are 512-byte multiples, best fit,
  // never split; every cudaFree the allocator makes runs under a Relaxed capture-mode guard, so
  // dropping a tensor never breaks a capture (in PyTorch a free only returns the block to a cache).
  Tensor alloc(const Shape& shape, DType dtype, device::MemCategory cat);
  // Called by ~Storage when the last reference drops: back to its pool, or cudaFree when eager.
  void release(Storage& s);

  // Pools for graphs. While a pool is active on this thread, alloc() serves from it.
  PoolId create_pool();
  // Frees the pool's blocks. Throws std::logic_error while the pool is pushed on any thread. A
  // block whose tensor is still alive is freed when that tensor's last reference drops (and counts
  // as reserved until then); the pool can no longer be pushed.
  void destroy_pool(PoolId id);
  void push_pool(PoolId id);
  void pop_pool();
  PoolId active_pool() const;

  struct Stats {
    // Live/peak bytes of live tensors by category (logical: inside pools too).
    std::array<device::CategoryStats, device::kNumCategories> tensors{};
    int64_t tensor_live_bytes = 0;
    int64_t tensor_peak_bytes = 0;
    int64_t pool_reserved_bytes = 0;  // bytes held by all pools' blocks
    int64_t pool_peak_reserved_bytes = 0;
    int64_t pool_used_bytes = 0;      // bytes of pool blocks a live tensor holds (the rest are free for reuse)
    int64_t free_failures = 0;  // cudaFree calls the device refused (cannot throw from ~Storage)
  };
  Stats stats() const;
  void reset_peaks();
  // Bytes held by one pool's blocks (0 for an unknown or fully released pool).
  int64_t pool_reserved_bytes(PoolId id) const;

 private:
  struct Impl;
  device::Device& dev_;
  std::unique_ptr<Impl> impl_;
};

// RAII: a pool active for a scope.
class PoolScope {
 public:
  PoolScope(Allocator& a, PoolId id) : a_(a) { a_.push_pool(id); }
  ~PoolScope() { a_.pop_pool(); }
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  Allocator& a_;
};

// Host <-> device copies for tests and reports (synchronous; never during capture).
// An upload returns once the host buffer may be reused, but a pageable copy may still be landing
// and a non-blocking stream does not wait for it: Settle::Now synchronizes the device after it;
// Settle::ByCaller leaves that to a caller that uploads many tensors and synchronizes once after
// them (each synchronization waits for the GPU, which a campaign's processes share).
enum class Settle { Now, ByCaller };
void upload(device::Device& dev, const Tensor& t, const void* host, size_t bytes, Settle settle = Settle::Now);
void download(device::Device& dev, const Tensor& t, void* host, size_t bytes);
std::vector<float> to_floats(device::Device& dev, const Tensor& t);  // bf16 widened exactly
void from_floats(device::Device& dev, const Tensor& t, const std::vector<float>& v,
                 Settle settle = Settle::Now);  // bf16: RNE

}  // namespace recap::runtime
