// The runtime's CUDA kernels against the host code, bit for bit, plus cuRAND's Philox stream and
// CUDA's bf16 intrinsic as outside references. Every case skips where no GPU is usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "harness/device/device.h"
#include "harness/runtime/bf16.h"
#include "harness/runtime/dropout.h"
#include "harness/runtime/philox.h"

#ifdef RECAP_WITH_CUDA
#include <cuda_runtime.h>

#include "harness/runtime/runtime_gpu.h"
#include "tests/runtime/gpu_reference.h"
#endif

#define RECAP_REQUIRE_GPU()                                                  \
  do {                                                                       \
    std::string why;                                                         \
    if (!::recap::device::cuda_usable(&why)) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

namespace recap::runtime {
namespace {

#ifdef RECAP_WITH_CUDA

#define CUDA_OK(expr) ASSERT_EQ(0, static_cast<int>(expr)) << #expr

// A device array of n elements, freed on scope exit; status() holds cudaMalloc's result.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { status_ = cudaMalloc(reinterpret_cast<void**>(&ptr_), (n ? n : 1) * sizeof(T)); }
  ~DeviceArray() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  cudaError_t status() const { return status_; }
  T* get() const { return ptr_; }
  cudaError_t upload(const std::vector<T>& v) { return cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); }
  cudaError_t download(std::vector<T>* v) const {
    v->resize(n_);
    return cudaMemcpy(v->data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
  cudaError_t status_ = cudaSuccess;
};

// Index of the first difference, or -1.
template <typename T>
long long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long long>(i);
  return -1;
}

#endif  // RECAP_WITH_CUDA

TEST(RuntimeGpu, PhiloxBlocksEqualHostAndKnownAnswers) {
  RECAP_REQUIRE_GPU();
#ifdef RECAP_WITH_CUDA
  // The three Random123 philox4x32_10 vectors, then random counters and keys (all 6 words).
  const size_t n = 65536 + 3;
  std::vector<uint32_t> ctr = {0, 0, 0, 0, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
                               0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  std::vector<uint32_t> key = {0, 0, 0xffffffff, 0xffffffff, 0xa4093822, 0x299f31d0};
  std::mt19937 rng(4);
  while (ctr.size() < 4 * n) ctr.push_back(rng());
  while (key.size() < 2 * n) key.push_back(rng());
  DeviceArray<uint32_t> d_ctr(4 * n), d_key(2 * n), d_out(4 * n);
  CUDA_OK(d_ctr.status());
  CUDA_OK(d_key.status());
  CUDA_OK(d_out.status());
  CUDA_OK(d_ctr.upload(ctr));
  CUDA_OK(d_key.upload(key));
  CUDA_OK(gpu::philox4x32_10_batch(nullptr, d_ctr.get(), d_key.get(), d_out.get(), n));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint32_t> got;
  CUDA_OK(d_out.download(&got));

  std::vector<uint32_t> want(4 * n);
  for (size_t i = 0; i < n; ++i) {
    PhiloxCtr r = philox4x32_10(PhiloxCtr{{ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3]}},
                                PhiloxKey{{key[2 * i], key[2 * i + 1]}});
    for (int j = 0; j < 4; ++j) want[4 * i + j] = r.v[j];
  }
  EXPECT_EQ(first_difference(got, want), -1);
  const std::vector<uint32_t> kat = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8, 0x408f276d, 0x41c83b0e,
                                     0xa20bc7c6, 0x6d5451fd, 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  EXPECT_EQ(std::vector<uint32_t>(got.begin(), got.begin() + 12), kat);
#endif
}

TEST(RuntimeGpu, DrawEqualsHostDrawAndCurandPhiloxStream) {
  RECAP_REQUIRE_GPU();
#ifdef RECAP_WITH_CUDA
  const size_t n = (size_t{1} << 20) + 3, n_sequential = 4099;
  struct State {
    uint64_t seed, offset;
  };
  // Aligned offsets, one past 2^34 (counter word 1 in use), and an unaligned one.
  for (State st : {State{0, 0}, State{0xdeadbeefcafef00dull, 4 * 12345}, State{7, (uint64_t{1} << 34) + 8}, State{123, 7}}) {
    SCOPED_TRACE("seed " + std::to_string(st.seed) + " offset " + std::to_string(st.offset));
    DeviceArray<uint32_t> d_draw(n), d_curand(n), d_seq(n_sequential);
    CUDA_OK(d_draw.status());
    CUDA_OK(d_curand.status());
    CUDA_OK(d_seq.status());
    CUDA_OK(gpu::philox_draw_u32(nullptr, d_draw.get(), PhiloxArgs::by_value(st.seed, st.offset), n));
    CUDA_OK(testing::curand_philox_values(nullptr, d_curand.get(), n, d_seq.get(), n_sequential, st.seed, st.offset));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint32_t> draw, curand_values, curand_seq;
    CUDA_OK(d_draw.download(&draw));
    CUDA_OK(d_curand.download(&curand_values));
    CUDA_OK(d_seq.download(&curand_seq));

    std::vector<uint32_t> host(n);
    PhiloxStream stream(st.seed, st.offset);
    for (size_t i = 0; i < n; ++i) host[i] = stream.next();
    EXPECT_EQ(first_difference(draw, host), -1) << "device draw vs host draw";
    EXPECT_EQ(first_difference(curand_values, host), -1) << "curand_init(seed, 0, offset + i) vs host draw";
    EXPECT_EQ(first_difference(curand_seq, std::vector<uint32_t>(host.begin(), host.begin() + n_sequential)), -1)
        << "successive curand() vs host draw";
  }
#endif
}

TEST(RuntimeGpu, DropoutMaskOfOneMillionElementsEqualsHostMask) {
  RECAP_REQUIRE_GPU();
#ifdef RECAP_WITH_CUDA
  struct Case {
    uint64_t seed, offset, n;
    float p;
  };
  const Case cases[] = {
      {1, 0, uint64_t{1} << 20, 0.1f},
      {0x5eed, 4096, 1000003, 0.5f},  // n not a multiple of 32: a partial last word
      {2, 6, uint64_t{1} << 20, 0.1f},  // unaligned offset
      {3, (uint64_t{1} << 36) + 4, 1000000, 0.9f},
      {4, 0, 4099, 0.0f},
      {4, 0, 4099, 1.0f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("seed " + std::to_string(c.seed) + " offset " + std::to_string(c.offset) + " n " +
                 std::to_string(c.n) + " p " + std::to_string(c.p));
    const size_t words = dropout_mask_words(c.n);
    DeviceArray<uint32_t> d_mask(words);
    CUDA_OK(d_mask.status());
    CUDA_OK(cudaMemset(d_mask.get(), 0xab, words * sizeof(uint32_t)));  // stale bits must not survive
    CUDA_OK(gpu::dropout_mask_bits(nullptr, d_mask.get(), PhiloxArgs::by_value(c.seed, c.offset), c.n, c.p));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint32_t> got;
    CUDA_OK(d_mask.download(&got));
    DropoutMask want = dropout_mask(c.seed, c.offset, c.n, c.p);
    EXPECT_EQ(first_difference(got, want.words), -1);
    if (c.p > 0.0f && c.p < 1.0f) {  // non-vacuity: neither all kept nor all dropped
      EXPECT_GT(want.count_kept(), 0u);
      EXPECT_LT(want.count_kept(), c.n);
    }
  }
#endif
}

TEST(RuntimeGpu, GraphSafeDropoutReplayReadsRefreshedOffsetByValueDoesNot) {
  RECAP_REQUIRE_GPU();
#ifdef RECAP_WITH_CUDA
  // One graph holds two launches: graph-safe (reads the seed/offset cells, intragraph offset 8)
  // and by-value (offset 8 baked in at capture, as a kernel that read the host offset would).
  const uint64_t n = 1 << 20, seed = 77;
  const size_t words = dropout_mask_words(n);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceArray<uint64_t> d_seed(1), d_offset(1);
  DeviceArray<uint32_t> d_safe(words), d_baked(words);
  CUDA_OK(d_seed.status());
  CUDA_OK(d_offset.status());
  CUDA_OK(d_safe.status());
  CUDA_OK(d_baked.status());
  CUDA_OK(d_seed.upload({seed}));
  CUDA_OK(d_offset.upload({0}));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  int safe_launch = gpu::dropout_mask_bits(stream, d_safe.get(), PhiloxArgs::from_device(d_seed.get(), d_offset.get(), 8), n, 0.5f);
  int baked_launch = gpu::dropout_mask_bits(stream, d_baked.get(), PhiloxArgs::by_value(seed, 8), n, 0.5f);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(safe_launch);
  CUDA_OK(baked_launch);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  for (uint64_t base : {uint64_t{0}, uint64_t{1} << 20, uint64_t{4} * 12345}) {
    SCOPED_TRACE("base offset " + std::to_string(base));
    // The replay prologue: refresh the offset cell, then replay.
    CUDA_OK(cudaMemcpyAsync(d_offset.get(), &base, sizeof base, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<uint32_t> safe, baked;
    CUDA_OK(d_safe.download(&safe));
    CUDA_OK(d_baked.download(&baked));
    EXPECT_EQ(first_difference(safe, dropout_mask(seed, base + 8, n, 0.5f).words), -1);
    EXPECT_EQ(first_difference(baked, dropout_mask(seed, 8, n, 0.5f).words), -1);
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamDestroy(stream));
#endif
}

TEST(RuntimeGpu, Bf16EqualsCudaIntrinsicOnAllFloatsAndHostOnRandomFloats) {
  RECAP_REQUIRE_GPU();
#ifdef RECAP_WITH_CUDA
  // counts[0]: mismatches, counts[1]: inputs compared (all 2^32, or the check proves nothing).
  DeviceArray<unsigned long long> d_counts(2);
  DeviceArray<uint32_t> d_first(1);
  CUDA_OK(d_counts.status());
  CUDA_OK(d_first.status());
  CUDA_OK(d_counts.upload({0, 0}));
  CUDA_OK(d_first.upload({0xffffffffu}));
  CUDA_OK(testing::bf16_vs_cuda_all_floats(nullptr, d_counts.get(), d_first.get(), d_counts.get() + 1));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<unsigned long long> counts;
  std::vector<uint32_t> first;
  CUDA_OK(d_counts.download(&counts));
  CUDA_OK(d_first.download(&first));
  EXPECT_EQ(counts[1], 1ull << 32);
  EXPECT_EQ(counts[0], 0u) << "first mismatching input 0x" << std::hex << first[0];

  // Device conversion vs host conversion on 16M random bit patterns (NaNs included).
  const size_t n = size_t{1} << 24;
  std::vector<uint32_t> bits(n);
  std::mt19937 rng(16);
  for (auto& b : bits) b = rng();
  // Uploaded as words, so no host float copy can quieten a signalling NaN on the way.
  DeviceArray<uint32_t> d_in(n);
  DeviceArray<uint16_t> d_out(n);
  CUDA_OK(d_in.status());
  CUDA_OK(d_out.status());
  CUDA_OK(d_in.upload(bits));
  CUDA_OK(gpu::float_to_bf16_bits(nullptr, reinterpret_cast<const float*>(d_in.get()), d_out.get(), n));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> got;
  CUDA_OK(d_out.download(&got));
  std::vector<uint16_t> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = float_bits_to_bf16_bits(bits[i]);
  EXPECT_EQ(first_difference(got, want), -1);
#endif
}

}  // namespace
}  // namespace recap::runtime
