// Memory: allocation, copies, the modelled device size, stream-ordered allocation, and the
// last-error rules.
#include <thread>

#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace k = kernels;
constexpr size_t kGiB = size_t{1} << 30;

class SimMemory : public ::testing::Test {
 protected:
  std::unique_ptr<Device> dev = make_sim();
  Stream s1 = new_stream(*dev);
};

TEST_F(SimMemory, AllocationsAre256ByteAlignedAndAccounted) {
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_OK(dev->malloc(&a, 100, MemCategory::Parameters));
  ASSERT_OK(dev->malloc(&b, 300, MemCategory::Gradients));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 256, 0u);
  MemoryStats st = dev->memory_stats();
  EXPECT_EQ(st[MemCategory::Parameters].live_bytes, 100);
  EXPECT_EQ(st[MemCategory::Gradients].live_bytes, 300);
  EXPECT_EQ(st.live_bytes, 400);
  ASSERT_OK(dev->free(a));
  st = dev->memory_stats();
  EXPECT_EQ(st.live_bytes, 300);
  EXPECT_EQ(st.peak_bytes, 400);
  EXPECT_EQ(st[MemCategory::Parameters].peak_bytes, 100);
}

TEST_F(SimMemory, MemGetInfoModelsA141GiBDevice) {
  size_t free_bytes = 0, total = 0;
  ASSERT_OK(dev->mem_get_info(&free_bytes, &total));
  EXPECT_EQ(total, 141 * kGiB);
  EXPECT_EQ(free_bytes, total);
  void* p = nullptr;
  ASSERT_OK(dev->malloc(&p, 1 << 20, MemCategory::Workspace));
  ASSERT_OK(dev->mem_get_info(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total - (1 << 20));
  EXPECT_STATUS(Status::MemoryAllocation, dev->malloc(&p, 142 * kGiB, MemCategory::Workspace));
}

TEST_F(SimMemory, BadFreesAreInvalidValue) {
  int on_stack = 0;
  EXPECT_STATUS(Status::InvalidValue, dev->free(&on_stack));
  EXPECT_STATUS(Status::Success, dev->free(nullptr));
  void* p = nullptr;
  ASSERT_OK(dev->malloc(&p, 64, MemCategory::Other));
  ASSERT_OK(dev->free(p));
  EXPECT_STATUS(Status::InvalidValue, dev->free(p)) << "double free";
  void* h = nullptr;
  ASSERT_OK(dev->malloc_host(&h, 64));
  EXPECT_STATUS(Status::InvalidValue, dev->free(h)) << "pinned host memory needs cudaFreeHost";
  EXPECT_STATUS(Status::Success, dev->free_host(h));
  EXPECT_STATUS(Status::InvalidValue, dev->free_host(h));
  EXPECT_STATUS(Status::InvalidValue, dev->malloc(nullptr, 64, MemCategory::Other));
}

TEST_F(SimMemory, CopiesAndSetsRoundTrip) {
  uint32_t* d = new_buffer(*dev, 4);
  std::vector<uint32_t> in{1, 2, 3, 4}, out(4, 0);
  ASSERT_OK(dev->memcpy(d, in.data(), 16, CopyKind::HostToDevice));
  ASSERT_OK(dev->memset_async(d + 1, 0xFF, 4, s1));
  ASSERT_OK(dev->memcpy_async(out.data(), d, 16, CopyKind::DeviceToHost, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_EQ(out, (std::vector<uint32_t>{1, 0xFFFFFFFFu, 3, 4}));
  EXPECT_STATUS(Status::InvalidValue, dev->memcpy(nullptr, in.data(), 4, CopyKind::Default));
  EXPECT_STATUS(Status::InvalidValue, dev->memcpy(d, in.data(), 4, static_cast<CopyKind>(9)));
}

TEST_F(SimMemory, StreamOrderedAllocationsFeedThePoolCounters) {
  void* p = nullptr;
  ASSERT_OK(dev->malloc_async(&p, 4096, s1, MemCategory::Activations));
  MemoryStats st = dev->memory_stats();
  EXPECT_EQ(st[MemCategory::Activations].live_bytes, 4096);
  EXPECT_EQ(st.pool_used_bytes, 4096);
  ASSERT_OK(dev->free_async(p, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  st = dev->memory_stats();
  EXPECT_EQ(st.pool_used_bytes, 0);
  EXPECT_EQ(st.pool_peak_bytes, 4096);
  EXPECT_EQ(st.graph_mem_used_bytes, 0);
  EXPECT_STATUS(Status::InvalidValue, dev->free_async(p, s1)) << "double free";
  void* plain = nullptr;
  ASSERT_OK(dev->malloc(&plain, 64, MemCategory::Other));
  dev->reset_peak_memory();
  EXPECT_EQ(dev->memory_stats().pool_peak_bytes, 0);
  EXPECT_EQ(dev->memory_stats().peak_bytes, 64);
  // cudaFreeAsync also frees cudaMalloc memory (measured on the H200); it is not pool memory.
  EXPECT_STATUS(Status::Success, dev->free_async(plain, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_EQ(dev->memory_stats().live_bytes, 0);
  EXPECT_EQ(dev->memory_stats().pool_used_bytes, 0);
  void* host = nullptr;
  ASSERT_OK(dev->malloc_host(&host, 64));
  EXPECT_STATUS(Status::InvalidValue, dev->free_async(host, s1)) << "pinned host memory";
}

TEST_F(SimMemory, CudaFreeOfAStreamOrderedAllocationSynchronizes) {
  void* p = nullptr;
  ASSERT_OK(dev->malloc_async(&p, 1024, s1, MemCategory::Activations));
  ASSERT_OK(dev->free(p));
  EXPECT_EQ(dev->memory_stats().pool_used_bytes, 0);
  EXPECT_EQ(dev->memory_stats().live_bytes, 0);
}

// ---- last error ------------------------------------------------------------------------------

TEST(SimLastError, StickyUntilReadPeekDoesNotClear) {
  auto dev = make_sim();
  EXPECT_STATUS(Status::Success, dev->get_last_error());
  int x = 0;
  EXPECT_STATUS(Status::InvalidValue, dev->free(&x));
  Stream s;
  ASSERT_OK(dev->stream_create(&s, true));  // a later success does not clear it
  EXPECT_STATUS(Status::InvalidValue, dev->peek_at_last_error());
  EXPECT_STATUS(Status::InvalidValue, dev->peek_at_last_error());
  EXPECT_STATUS(Status::InvalidValue, dev->get_last_error());
  EXPECT_STATUS(Status::Success, dev->get_last_error());
}

TEST(SimLastError, KeepsTheLatestFailure) {
  auto dev = make_sim();
  int x = 0;
  EXPECT_STATUS(Status::InvalidValue, dev->free(&x));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->stream_synchronize(Stream{12345}));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->get_last_error());
}

TEST(SimLastError, CaptureErrorsAreReportedButNotStickyForTheContext) {
  auto dev = make_sim();
  Stream s = new_stream(*dev);
  uint32_t* buf = new_buffer(*dev, 1);
  ASSERT_OK(dev->stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev->launch(k::increment_u32(buf, 1), s));
  void* p = nullptr;
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev->malloc(&p, 16, MemCategory::Other));
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s, &g));
  // Everything works afterwards; the last error still holds the last failure until read.
  ASSERT_OK(dev->stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev->launch(k::increment_u32(buf, 1), s));
  ASSERT_OK(dev->stream_end_capture(s, &g));
  GraphExec e;
  ASSERT_OK(dev->graph_instantiate(&e, g));
  for (int i = 0; i < 2; ++i) ASSERT_OK(dev->graph_launch(e, s));
  ASSERT_OK(dev->stream_synchronize(s));
  EXPECT_EQ(read_word(*dev, buf), 2u);
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->get_last_error());
  EXPECT_STATUS(Status::Success, dev->get_last_error());
}

TEST(SimLastError, NotReadyIsNotAnError) {
  // With exploration on, queued work waits until the host observes it; a query may find it
  // unfinished.
  auto dev = make_sim(/*seed=*/3);
  Stream s = new_stream(*dev);
  uint32_t* buf = new_buffer(*dev, 1);
  bool saw_not_ready = false;
  for (int round = 0; round < 20 && !saw_not_ready; ++round) {
    for (int i = 0; i < 8; ++i) ASSERT_OK(dev->launch(k::increment_u32(buf, 1), s));
    Status q = dev->stream_query(s);
    ASSERT_TRUE(q == Status::Success || q == Status::NotReady) << error_name(q);
    saw_not_ready = q == Status::NotReady;
    ASSERT_OK(dev->stream_synchronize(s));
  }
  EXPECT_TRUE(saw_not_ready);
  EXPECT_STATUS(Status::Success, dev->get_last_error());
}

TEST(SimLastError, IsPerThread) {
  auto dev = make_sim();
  int x = 0;
  EXPECT_STATUS(Status::InvalidValue, dev->free(&x));
  Status other = Status::Unknown;
  std::thread([&] { other = dev->get_last_error(); }).join();
  EXPECT_STATUS(Status::Success, other);
  EXPECT_STATUS(Status::InvalidValue, dev->get_last_error());
}

}  // namespace
}  // namespace recap::device::simtest
