// Tensors and the allocator (tensor.h).
//
// Design notes (what the header leaves open):
//  - Eager tensors: one dev.malloc of exactly the tensor's bytes under its category, so the
//    device ledger's per-category live bytes equal the allocator's logical figures. A zero-byte
//    tensor makes no allocation and has data == nullptr (defined() is false).
//  - Pools: a block is one dev.malloc(GraphPool) of the request rounded up to 512 bytes, made
//    under a Relaxed capture-mode guard (PyTorch's cudaMallocMaybeCapturing), so growing a pool is
//    legal during a Global capture. Blocks are never split or merged; a freed block goes back to
//    its pool's free list and the next request of the pool takes the smallest free block that is
//    large enough (best fit; ties: lowest address, so reuse is deterministic). Streams are not
//    tracked (PyTorch reuses a block only on its stream or after recorded events; recap's
//    executors use one pool per capture stream).
//  - Every cudaFree the allocator makes (eager tensors, pool blocks) is also under a Relaxed
//    guard. In PyTorch a tensor's free never calls CUDA (the block goes back to the cache), so
//    dropping the last reference of an eager tensor in the middle of a capture must not fail or
//    invalidate that capture. A free that fails anyway is counted in Stats::free_failures.
//  - destroy_pool with tensors still live: the free blocks are freed at once, the pool is marked
//    destroyed (no longer pushable), and each remaining block is freed when its tensor's last
//    reference drops (as PyTorch frees a private pool once its graph is gone and its blocks are
//    free). The pool's reserved bytes count until then.
//  - ~Allocator frees every live tensor's memory and detaches its Storage (owner := nullptr), so a
//    Storage outliving its allocator is harmless (its data pointer then dangles, as it would).
#include "harness/runtime/tensor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "harness/runtime/bf16.h"
#include "harness/runtime/capture_mode_guard.h"
#include "harness/runtime/context.h"
#include "harness/runtime/faults.h"

namespace recap::runtime {

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
  }
  return 0;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Storage::~Storage() {
  if (owner != nullptr) owner->release(*this);
}

namespace {

constexpr size_t kPoolRound = 512;

size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

std::string size_text(size_t bytes, device::MemCategory cat) {
  return std::to_string(bytes) + " bytes (" + device::category_name(cat) + ")";
}

}  // namespace

struct Allocator::Impl {
  struct Pool {
    std::map<const void*, size_t> blocks;            // every block: address -> size
    std::multimap<size_t, void*> free_blocks;        // free blocks by size (then insertion order)
    int64_t reserved = 0;
    int64_t live_tensors = 0;
    bool destroyed = false;
  };

  mutable std::mutex mu;
  uint64_t next_id = 1;
  PoolId next_pool = 1;
  std::map<PoolId, Pool> pools;
  std::map<std::thread::id, std::vector<PoolId>> stacks;
  std::unordered_set<Storage*> live;
  Stats stats;

  void on_alloc_stats(size_t bytes, device::MemCategory cat) {
    auto& c = stats.tensors[static_cast<int>(cat)];
    c.live_bytes += static_cast<int64_t>(bytes);
    c.peak_bytes = std::max(c.peak_bytes, c.live_bytes);
    c.allocations += 1;
    stats.tensor_live_bytes += static_cast<int64_t>(bytes);
    stats.tensor_peak_bytes = std::max(stats.tensor_peak_bytes, stats.tensor_live_bytes);
  }
  void on_free_stats(size_t bytes, device::MemCategory cat) {
    stats.tensors[static_cast<int>(cat)].live_bytes -= static_cast<int64_t>(bytes);
    stats.tensor_live_bytes -= static_cast<int64_t>(bytes);
  }
  void on_reserve(int64_t delta) {
    stats.pool_reserved_bytes += delta;
    stats.pool_peak_reserved_bytes = std::max(stats.pool_peak_reserved_bytes, stats.pool_reserved_bytes);
  }
};

namespace {

// cudaFree under a Relaxed guard (see the file comment).
device::Status relaxed_free(device::Device& dev, void* p) {
  CaptureModeGuard guard(dev, device::CaptureMode::Relaxed);
  return dev.free(p);
}

}  // namespace

Allocator::Allocator(device::Device& dev) : dev_(dev), impl_(std::make_unique<Impl>()) {}

Allocator::~Allocator() {
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (Storage* s : impl_->live) {
      if (s->pool == 0 && s->ptr != nullptr) to_free.push_back(s->ptr);
      s->owner = nullptr;
    }
    impl_->live.clear();
    for (auto& [id, pool] : impl_->pools)
      for (auto& [ptr, size] : pool.blocks) to_free.push_back(const_cast<void*>(ptr));
    impl_->pools.clear();
  }
  for (void* p : to_free) relaxed_free(dev_, p);
}

Tensor Allocator::alloc(const Shape& shape, DType dtype, device::MemCategory cat) {
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("Allocator::alloc: negative dimension " + std::to_string(d));
  int ci = static_cast<int>(cat);
  if (ci < 0 || ci >= device::kNumCategories) throw std::invalid_argument("Allocator::alloc: bad category");
  size_t bytes = static_cast<size_t>(numel(shape)) * dtype_size(dtype);

  std::lock_guard<std::mutex> lock(impl_->mu);
  PoolId pool_id = 0;
  auto st = impl_->stacks.find(std::this_thread::get_id());
  if (st != impl_->stacks.end() && !st->second.empty()) pool_id = st->second.back();

  void* ptr = nullptr;
  if (bytes > 0) {
    if (pool_id != 0) {
      Impl::Pool& pool = impl_->pools.at(pool_id);
      size_t need = round_up(bytes, kPoolRound);
      // pool-no-reuse: no freed block is ever handed out again, so the pool grows by every
      // allocation of the capture (without leaking across replays: only the exact model sees it)
      auto it = fault_on(Fault::PoolNoReuse) ? pool.free_blocks.end() : pool.free_blocks.lower_bound(need);
      if (it != pool.free_blocks.end()) {
        // Best fit: the smallest block that is large enough; among equal sizes the lowest address.
        size_t best_size = it->first;
        auto best = it;
        for (auto j = it; j != pool.free_blocks.end() && j->first == best_size; ++j)
          if (std::less<void*>()(j->second, best->second)) best = j;
        ptr = best->second;
        pool.free_blocks.erase(best);
        impl_->stats.pool_used_bytes += static_cast<int64_t>(best_size);
      } else {
        device::Status s;
        {
          CaptureModeGuard guard(dev_, device::CaptureMode::Relaxed);
          s = dev_.malloc(&ptr, need, device::MemCategory::GraphPool);
        }
        if (!device::ok(s))
          throw DeviceError("cudaMalloc", s,
                            "growing pool " + std::to_string(pool_id) + " by " + std::to_string(need) +
                                " bytes for a tensor of " + size_text(bytes, cat));
        pool.blocks[ptr] = need;
        pool.reserved += static_cast<int64_t>(need);
        impl_->on_reserve(static_cast<int64_t>(need));
        impl_->stats.pool_used_bytes += static_cast<int64_t>(need);
      }
    } else {
      device::Status s = dev_.malloc(&ptr, bytes, cat);
      if (!device::ok(s)) throw DeviceError("cudaMalloc", s, "tensor of " + size_text(bytes, cat));
    }
  }

  auto storage = std::make_shared<Storage>();
  storage->owner = this;
  storage->ptr = ptr;
  storage->bytes = bytes;
  storage->category = cat;
  storage->id = impl_->next_id++;
  storage->pool = (ptr != nullptr) ? pool_id : 0;
  impl_->live.insert(storage.get());
  impl_->on_alloc_stats(bytes, cat);
  if (storage->pool != 0) impl_->pools.at(pool_id).live_tensors += 1;

  Tensor t;
  t.storage = std::move(storage);
  t.data = ptr;
  t.shape = shape;
  t.dtype = dtype;
  return t;
}

void Allocator::release(Storage& s) {
  // The cudaFree runs after the lock is dropped: on sim a free first runs pending work, and work
  // (a host function holding a tensor) may drop another tensor and re-enter release().
  void* to_free = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->live.erase(&s) == 0) return;  // not ours, or already released
    impl_->on_free_stats(s.bytes, s.category);
    s.owner = nullptr;
    if (s.ptr == nullptr) return;
    if (s.pool == 0) {
      to_free = s.ptr;
    } else {
      auto pit = impl_->pools.find(s.pool);
      if (pit == impl_->pools.end()) return;  // cannot happen: pools with live tensors are kept
      Impl::Pool& pool = pit->second;
      pool.live_tensors -= 1;
      auto bit = pool.blocks.find(s.ptr);
      if (bit == pool.blocks.end()) return;
      impl_->stats.pool_used_bytes -= static_cast<int64_t>(bit->second);
      if (!pool.destroyed) {
        pool.free_blocks.emplace(bit->second, s.ptr);
        return;
      }
      // The pool was destroyed while this tensor lived: its block goes now.
      int64_t size = static_cast<int64_t>(bit->second);
      to_free = s.ptr;
      pool.blocks.erase(bit);
      pool.reserved -= size;
      impl_->stats.pool_reserved_bytes -= size;
      if (pool.blocks.empty()) impl_->pools.erase(pit);
    }
  }
  if (!device::ok(relaxed_free(dev_, to_free))) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.free_failures += 1;
  }
}

PoolId Allocator::create_pool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  PoolId id = impl_->next_pool++;
  impl_->pools[id];
  return id;
}

void Allocator::destroy_pool(PoolId id) {
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto pit = impl_->pools.find(id);
    if (pit == impl_->pools.end() || pit->second.destroyed)
      throw std::invalid_argument("Allocator::destroy_pool: no pool " + std::to_string(id));
    for (const auto& [thread, stack] : impl_->stacks)
      if (std::find(stack.begin(), stack.end(), id) != stack.end())
        throw std::logic_error("Allocator::destroy_pool: pool " + std::to_string(id) + " is still active");
    Impl::Pool& pool = pit->second;
    pool.destroyed = true;
    for (auto& [size, ptr] : pool.free_blocks) {
      to_free.push_back(ptr);
      pool.blocks.erase(ptr);
      pool.reserved -= static_cast<int64_t>(size);
      impl_->stats.pool_reserved_bytes -= static_cast<int64_t>(size);
    }
    pool.free_blocks.clear();
    if (pool.blocks.empty()) impl_->pools.erase(pit);
  }
  int64_t failures = 0;
  for (void* p : to_free)
    if (!device::ok(relaxed_free(dev_, p))) ++failures;
  if (failures > 0) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.free_failures += failures;
  }
}

void Allocator::push_pool(PoolId id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto pit = impl_->pools.find(id);
  if (pit == impl_->pools.end() || pit->second.destroyed)
    throw std::invalid_argument("Allocator::push_pool: no pool " + std::to_string(id));
  impl_->stacks[std::this_thread::get_id()].push_back(id);
}

void Allocator::pop_pool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto st = impl_->stacks.find(std::this_thread::get_id());
  if (st == impl_->stacks.end() || st->second.empty())
    throw std::logic_error("Allocator::pop_pool: no pool is active on this thread");
  st->second.pop_back();
  if (st->second.empty()) impl_->stacks.erase(st);
}

PoolId Allocator::active_pool() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto st = impl_->stacks.find(std::this_thread::get_id());
  if (st == impl_->stacks.end() || st->second.empty()) return 0;
  return st->second.back();
}

Allocator::Stats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void Allocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& c : impl_->stats.tensors) c.peak_bytes = c.live_bytes;
  impl_->stats.tensor_peak_bytes = impl_->stats.tensor_live_bytes;
  impl_->stats.pool_peak_reserved_bytes = impl_->stats.pool_reserved_bytes;
}

int64_t Allocator::pool_reserved_bytes(PoolId id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto pit = impl_->pools.find(id);
  return pit == impl_->pools.end() ? 0 : pit->second.reserved;
}

// ---- host <-> device ----------------------------------------------------------------------------

namespace {

void check_fits(const Tensor& t, size_t bytes, const char* what) {
  if (!t.defined() && bytes > 0) throw std::invalid_argument(std::string(what) + ": undefined tensor");
  if (bytes > t.bytes())
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(bytes) + " bytes exceed the tensor's " +
                                std::to_string(t.bytes()));
}

}  // namespace

void upload(device::Device& dev, const Tensor& t, const void* host, size_t bytes, Settle settle) {
  check_fits(t, bytes, "upload");
  if (bytes == 0) return;
  device::Status s = dev.memcpy(t.data, host, bytes, device::CopyKind::HostToDevice);
  if (!device::ok(s)) throw DeviceError("cudaMemcpy", s, "upload of " + std::to_string(bytes) + " bytes");
  if (settle == Settle::ByCaller) return;
  // A pageable host-to-device cudaMemcpy may return before the data lands, and work on a
  // non-blocking stream does not wait for the legacy stream: finish the copy before anyone reads.
  s = dev.device_synchronize();
  if (!device::ok(s)) throw DeviceError("cudaDeviceSynchronize", s, "after an upload");
}

void download(device::Device& dev, const Tensor& t, void* host, size_t bytes) {
  check_fits(t, bytes, "download");
  if (bytes == 0) return;
  device::Status s = dev.memcpy(host, t.data, bytes, device::CopyKind::DeviceToHost);
  if (!device::ok(s)) throw DeviceError("cudaMemcpy", s, "download of " + std::to_string(bytes) + " bytes");
}

std::vector<float> to_floats(device::Device& dev, const Tensor& t) {
  size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  if (t.dtype == DType::F32) {
    download(dev, t, out.data(), n * sizeof(float));
  } else {
    std::vector<uint16_t> raw(n);
    download(dev, t, raw.data(), n * sizeof(uint16_t));
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(bf16::from_bits(raw[i]));
  }
  return out;
}

void from_floats(device::Device& dev, const Tensor& t, const std::vector<float>& v, Settle settle) {
  size_t n = static_cast<size_t>(t.numel());
  if (v.size() != n)
    throw std::invalid_argument("from_floats: " + std::to_string(v.size()) + " values for a tensor of " +
                                std::to_string(n) + " elements");
  if (t.dtype == DType::F32) {
    upload(dev, t, v.data(), n * sizeof(float), settle);
  } else {
    std::vector<uint16_t> raw(n);
    for (size_t i = 0; i < n; ++i) raw[i] = float_to_bf16(v[i]).bits;
    upload(dev, t, raw.data(), n * sizeof(uint16_t), settle);
  }
}

}  // namespace recap::runtime
