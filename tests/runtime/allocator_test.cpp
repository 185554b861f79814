// The allocator (tensor.h): eager accounting against the device ledger, pools (reuse, growth
// during capture under the Relaxed guard, reserved bytes), tensor lifetime, host copies.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "harness/runtime/context.h"
#include "harness/runtime/tensor.h"
#include "tests/runtime/core_test_util.h"

namespace recap::runtime {
namespace {

using coretest::CoreTest;
using device::MemCategory;

using AllocatorTest = CoreTest;

int64_t device_live(device::Device& dev, MemCategory c) { return dev.memory_stats()[c].live_bytes; }
int64_t tensor_live(const Allocator& a, MemCategory c) { return a.stats().tensors[static_cast<int>(c)].live_bytes; }

TEST_P(AllocatorTest, DtypeNamesAndNumel) {
  EXPECT_EQ(dtype_name(DType::F32), "fp32");
  EXPECT_EQ(dtype_name(DType::BF16), "bf16");
  DType d = DType::F32;
  ASSERT_TRUE(dtype_from_name("bf16", &d));
  EXPECT_EQ(d, DType::BF16);
  EXPECT_FALSE(dtype_from_name("fp16", &d));
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(numel({3, 5, 2}), 30);
  EXPECT_EQ(numel({}), 1);  // a scalar: the empty product
  EXPECT_EQ(numel({4, 0}), 0);
}

// Eager: one cudaMalloc of exactly the tensor's bytes under its category, so the device's
// ledger and the allocator's logical statistics agree category by category.
TEST_P(AllocatorTest, EagerAccountingEqualsDeviceLedger) {
  Allocator alloc(dev());
  device::MemoryStats base = dev().memory_stats();  // the fixture's own buffers, if any
  Tensor p = alloc.alloc({4, 8}, DType::F32, MemCategory::Parameters);     // 32 * 4 = 128 bytes
  Tensor g = alloc.alloc({3, 5}, DType::BF16, MemCategory::Gradients);     // 15 * 2 = 30 bytes
  Tensor a = alloc.alloc({100}, DType::F32, MemCategory::Activations);     // 100 * 4 = 400 bytes
  Tensor a2 = alloc.alloc({10}, DType::BF16, MemCategory::Activations);    // 10 * 2 = 20 bytes
  EXPECT_EQ(tensor_live(alloc, MemCategory::Parameters), 128);
  EXPECT_EQ(tensor_live(alloc, MemCategory::Gradients), 30);
  EXPECT_EQ(tensor_live(alloc, MemCategory::Activations), 420);
  EXPECT_EQ(alloc.stats().tensor_live_bytes, 128 + 30 + 420);
  for (int c = 0; c < device::kNumCategories; ++c) {
    auto cat = static_cast<MemCategory>(c);
    EXPECT_EQ(device_live(dev(), cat) - base[cat].live_bytes, tensor_live(alloc, cat)) << device::category_name(cat);
  }
  // Each tensor is its own allocation: 2 activation tensors -> 2 allocations on both sides.
  EXPECT_EQ(alloc.stats().tensors[static_cast<int>(MemCategory::Activations)].allocations, 2);
  EXPECT_EQ(dev().memory_stats()[MemCategory::Activations].allocations -
                base[MemCategory::Activations].allocations,
            2);
  // Pools are not involved: nothing is reserved.
  EXPECT_EQ(alloc.stats().pool_reserved_bytes, 0);

  a = Tensor{};  // frees 400 bytes on both sides; the peak keeps them
  EXPECT_EQ(tensor_live(alloc, MemCategory::Activations), 20);
  EXPECT_EQ(device_live(dev(), MemCategory::Activations) - base[MemCategory::Activations].live_bytes, 20);
  EXPECT_EQ(alloc.stats().tensors[static_cast<int>(MemCategory::Activations)].peak_bytes, 420);
  EXPECT_EQ(alloc.stats().tensor_peak_bytes, 578);
  alloc.reset_peaks();  // peaks := live
  EXPECT_EQ(alloc.stats().tensors[static_cast<int>(MemCategory::Activations)].peak_bytes, 20);
  EXPECT_EQ(alloc.stats().tensor_peak_bytes, 178);
}

// Saving a tensor for backward holds a reference: the memory goes only when the last one drops.
TEST_P(AllocatorTest, TensorFreedWhenLastReferenceDrops) {
  Allocator alloc(dev());
  int64_t base = device_live(dev(), MemCategory::Activations);
  Tensor t = alloc.alloc({64}, DType::F32, MemCategory::Activations);  // 256 bytes
  Tensor saved = t;                                                    // shares the storage
  EXPECT_EQ(saved.id(), t.id());
  EXPECT_NE(t.id(), 0u);  // ids start at 1; 0 means "no storage"
  t = Tensor{};
  EXPECT_EQ(device_live(dev(), MemCategory::Activations) - base, 256);  // still referenced
  EXPECT_EQ(tensor_live(alloc, MemCategory::Activations), 256);
  saved = Tensor{};
  EXPECT_EQ(device_live(dev(), MemCategory::Activations) - base, 0);
  EXPECT_EQ(tensor_live(alloc, MemCategory::Activations), 0);
  EXPECT_EQ(alloc.stats().free_failures, 0);
}

// A pool: blocks of the request rounded up to 512 bytes (GraphPool on the device), reused after
// the tensor is freed, best fit first, until the pool is destroyed.
TEST_P(AllocatorTest, PoolReusesFreedBlocksBestFit) {
  Allocator alloc(dev());
  int64_t base_pool = device_live(dev(), MemCategory::GraphPool);
  int64_t base_act = device_live(dev(), MemCategory::Activations);
  PoolId pool = alloc.create_pool();
  EXPECT_NE(pool, 0u);  // 0 means "no pool"
  {
    PoolScope scope(alloc, pool);
    EXPECT_EQ(alloc.active_pool(), pool);
    Tensor t1 = alloc.alloc({250}, DType::F32, MemCategory::Activations);  // 1000 bytes -> block 1024
    EXPECT_EQ(t1.storage->pool, pool);
    EXPECT_EQ(alloc.stats().pool_reserved_bytes, 1024);
    EXPECT_EQ(alloc.pool_reserved_bytes(pool), 1024);
    // The device sees the block under GraphPool, not the tensor's category ...
    EXPECT_EQ(device_live(dev(), MemCategory::GraphPool) - base_pool, 1024);
    EXPECT_EQ(device_live(dev(), MemCategory::Activations) - base_act, 0);
    // ... while the logical statistics see the tensor's own bytes under its category.
    EXPECT_EQ(tensor_live(alloc, MemCategory::Activations), 1000);

    EXPECT_EQ(alloc.stats().pool_used_bytes, 1024);  // the whole block is the tensor's

    void* p1 = t1.data;
    t1 = Tensor{};  // back to the pool: still reserved, no longer a live tensor
    EXPECT_EQ(alloc.stats().pool_reserved_bytes, 1024);
    EXPECT_EQ(alloc.stats().pool_used_bytes, 0);
    EXPECT_EQ(tensor_live(alloc, MemCategory::Activations), 0);
    Tensor t2 = alloc.alloc({225}, DType::F32, MemCategory::Activations);  // 900 -> 1024: reuses p1
    EXPECT_EQ(t2.data, p1);
    EXPECT_EQ(alloc.stats().pool_reserved_bytes, 1024);  // no growth

    Tensor big = alloc.alloc({512}, DType::F32, MemCategory::Workspace);  // 2048 -> a new block
    EXPECT_NE(big.data, p1);
    EXPECT_EQ(alloc.stats().pool_reserved_bytes, 1024 + 2048);
    void* pbig = big.data;
    big = Tensor{};
    t2 = Tensor{};
    // Free blocks: 1024 (p1) and 2048 (pbig). 600 bytes -> 1024 rounded: best fit is p1, not pbig.
    Tensor t3 = alloc.alloc({150}, DType::F32, MemCategory::Activations);
    EXPECT_EQ(t3.data, p1);
    // 1500 bytes -> 1536: p1 is taken, only pbig (2048) fits.
    Tensor t4 = alloc.alloc({375}, DType::F32, MemCategory::Activations);
    EXPECT_EQ(t4.data, pbig);
    // In use: the blocks the tensors hold, whole (a reused block counts at its own size).
    EXPECT_EQ(alloc.stats().pool_used_bytes, 1024 + 2048);
    EXPECT_EQ(alloc.stats().pool_reserved_bytes, 3072);
    EXPECT_EQ(alloc.stats().pool_peak_reserved_bytes, 3072);
  }
  EXPECT_EQ(alloc.active_pool(), 0u);  // the scope popped it
  // Outside the scope allocations are eager again.
  Tensor e = alloc.alloc({4}, DType::F32, MemCategory::Activations);
  EXPECT_EQ(e.storage->pool, 0u);
  EXPECT_EQ(alloc.stats().pool_reserved_bytes, 3072);

  alloc.destroy_pool(pool);  // all its tensors are gone: every block is freed now
  EXPECT_EQ(alloc.stats().pool_reserved_bytes, 0);
  EXPECT_EQ(alloc.stats().pool_peak_reserved_bytes, 3072);  // the peak remembers
  EXPECT_EQ(device_live(dev(), MemCategory::GraphPool) - base_pool, 0);
  EXPECT_THROW(alloc.push_pool(pool), std::invalid_argument);  // destroyed
}

// A tensor still alive when its pool is destroyed keeps its block until it drops.
TEST_P(AllocatorTest, DestroyedPoolFreesRemainingBlocksWhenTensorsDrop) {
  Allocator alloc(dev());
  int64_t base_pool = device_live(dev(), MemCategory::GraphPool);
  PoolId pool = alloc.create_pool();
  Tensor keep, drop;
  {
    PoolScope scope(alloc, pool);
    keep = alloc.alloc({10}, DType::F32, MemCategory::Activations);   // 40 -> 512 (the rounding unit)
    drop = alloc.alloc({200}, DType::F32, MemCategory::Activations);  // 800 -> 1024
    EXPECT_THROW(alloc.destroy_pool(pool), std::logic_error);         // still active here
  }
  drop = Tensor{};
  alloc.destroy_pool(pool);  // the free 1024 block goes now; the 512 one is still in use
  EXPECT_EQ(alloc.stats().pool_reserved_bytes, 512);
  EXPECT_EQ(device_live(dev(), MemCategory::GraphPool) - base_pool, 512);
  keep = Tensor{};
  EXPECT_EQ(alloc.stats().pool_reserved_bytes, 0);
  EXPECT_EQ(device_live(dev(), MemCategory::GraphPool) - base_pool, 0);
  EXPECT_EQ(alloc.stats().free_failures, 0);
}

// Pool growth during a Global capture: legal only because the allocator wraps cudaMalloc in a
// Relaxed capture-mode guard; the same cudaMalloc made plainly returns 900 and invalidates the
// capture (docs/cuda-capture-rules.md, "cudaMalloc ... Global own: ✗900").
TEST_P(AllocatorTest, PoolGrowthInsideGlobalCaptureUsesRelaxedGuard) {
  Allocator alloc(dev());
  PoolId pool = alloc.create_pool();
  Tensor early = alloc.alloc({16}, DType::F32, MemCategory::Activations);  // eager, before capture
  int64_t base_pool = device_live(dev(), MemCategory::GraphPool);
  CORE_ASSERT_OK(dev().stream_begin_capture(stream(), device::CaptureMode::Global));
  Tensor t;
  {
    PoolScope scope(alloc, pool);
    ASSERT_NO_THROW(t = alloc.alloc({1000}, DType::F32, MemCategory::Activations));  // 4000 -> 4096
  }
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(device_live(dev(), MemCategory::GraphPool) - base_pool, 4096);
  EXPECT_EQ(capture_status(), device::CaptureStatus::Active);  // the growth did not invalidate it
  EXPECT_EQ(thread_mode(), device::CaptureMode::Global);       // the guard put the mode back
  // Dropping an eager tensor mid-capture must not break it either (PyTorch would just cache the
  // block; recap's cudaFree runs under the same guard).
  early = Tensor{};
  EXPECT_EQ(capture_status(), device::CaptureStatus::Active);
  EXPECT_EQ(alloc.stats().free_failures, 0);

  // Why the guard exists: the plain call is refused and the capture is invalidated.
  void* p = nullptr;
  CORE_EXPECT_STATUS(device::Status::StreamCaptureUnsupported, dev().malloc(&p, 4096, MemCategory::GraphPool));
  EXPECT_EQ(capture_status(), device::CaptureStatus::Invalidated);
  device::Graph g;
  CORE_EXPECT_STATUS(device::Status::StreamCaptureInvalidated, dev().stream_end_capture(stream(), &g));
  dev().get_last_error();  // clear the sticky last error for the next case
}

// With no pool pushed, an eager tensor during a Global capture is a plain cudaMalloc: refused
// with 900, reported as a DeviceError naming the call and the CUDA error.
TEST_P(AllocatorTest, EagerAllocationDuringCaptureThrowsDeviceError) {
  Allocator alloc(dev());
  CORE_ASSERT_OK(dev().stream_begin_capture(stream(), device::CaptureMode::Global));
  try {
    alloc.alloc({8}, DType::F32, MemCategory::Activations);
    ADD_FAILURE() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.api, "cudaMalloc");
    EXPECT_EQ(e.status, device::Status::StreamCaptureUnsupported);
    EXPECT_NE(std::string(e.what()).find("cudaMalloc failed: cudaErrorStreamCaptureUnsupported"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(alloc.stats().tensor_live_bytes, 0);  // nothing was accounted for the failed tensor
  device::Graph g;
  CORE_EXPECT_STATUS(device::Status::StreamCaptureInvalidated, dev().stream_end_capture(stream(), &g));
  dev().get_last_error();
}

// Pools are per thread: a pool pushed on one thread does not serve another.
TEST_P(AllocatorTest, PoolIsActiveOnlyOnItsThread) {
  Allocator alloc(dev());
  PoolId pool = alloc.create_pool();
  PoolScope scope(alloc, pool);
  PoolId seen = 123;
  std::thread([&] { seen = alloc.active_pool(); }).join();
  EXPECT_EQ(seen, 0u);
  EXPECT_EQ(alloc.active_pool(), pool);
  EXPECT_THROW(alloc.push_pool(pool + 100), std::invalid_argument);  // no such pool
}

TEST_P(AllocatorTest, AllocatorOutlivedByTensor) {
  int64_t base = device_live(dev(), MemCategory::Activations);
  Tensor t;
  {
    Allocator alloc(dev());
    t = alloc.alloc({32}, DType::F32, MemCategory::Activations);
    EXPECT_EQ(device_live(dev(), MemCategory::Activations) - base, 128);
  }
  // ~Allocator freed the memory and detached the storage; dropping the tensor is harmless.
  EXPECT_EQ(device_live(dev(), MemCategory::Activations) - base, 0);
  EXPECT_EQ(t.storage->owner, nullptr);
  t = Tensor{};
}

TEST_P(AllocatorTest, HostCopiesAndBf16Rounding) {
  Allocator alloc(dev());
  Tensor f = alloc.alloc({3}, DType::F32, MemCategory::Other);
  from_floats(dev(), f, {1.5f, -2.25f, 1.00390625f});
  EXPECT_EQ(to_floats(dev(), f), (std::vector<float>{1.5f, -2.25f, 1.00390625f}));  // fp32: exact

  Tensor h = alloc.alloc({3}, DType::BF16, MemCategory::Other);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even -> 1.0.
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even -> 1 + 2^-6.
  from_floats(dev(), h, {-3.0f, 1.00390625f, 1.01171875f});
  EXPECT_EQ(to_floats(dev(), h), (std::vector<float>{-3.0f, 1.0f, 1.015625f}));
  uint16_t raw[3];
  download(dev(), h, raw, sizeof raw);
  EXPECT_EQ(raw[0], 0xC040);  // -3.0f = 0xC0400000: its top half
  EXPECT_EQ(raw[1], 0x3F80);  // 1.0f
  EXPECT_EQ(raw[2], 0x3F82);  // 1.015625f = 0x3F820000

  EXPECT_THROW(from_floats(dev(), h, {1.0f}), std::invalid_argument);  // wrong length
  EXPECT_THROW(upload(dev(), h, raw, 8), std::invalid_argument);      // 8 bytes > 6
}

}  // namespace
}  // namespace recap::runtime
