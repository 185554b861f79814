// Op-level checks shared by the unit (sim) and gpu (cuda) suites: each takes a Device and uses
// only the device API (no allocator), so it exercises the kernels alone.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "harness/device/device.h"
#include "harness/runtime/bf16.h"
#include "harness/runtime/dropout.h"
#include "models/ops.h"

namespace recap::models::testing {

// A device buffer freed at scope exit.
struct DevBuf {
  device::Device& dev;
  void* p = nullptr;
  size_t bytes = 0;
  DevBuf(device::Device& d, size_t n, device::MemCategory cat = device::MemCategory::Other) : dev(d), bytes(n) {
    EXPECT_EQ(device::error_name(dev.malloc(&p, n, cat)), "cudaSuccess");
    EXPECT_EQ(device::error_name(dev.memset(p, 0, n)), "cudaSuccess");
    settle();
  }
  // cudaMemset and a pageable cudaMemcpy to the device may still be in flight when they return,
  // and work on a non-blocking stream does not wait for them: synchronize the device.
  void settle() { EXPECT_EQ(device::error_name(dev.device_synchronize()), "cudaSuccess"); }
  ~DevBuf() { dev.free(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void put(const void* host, size_t n) {
    EXPECT_EQ(device::error_name(dev.memcpy(p, host, n, device::CopyKind::HostToDevice)), "cudaSuccess");
    settle();
  }
  void get(void* host, size_t n) const {
    EXPECT_EQ(device::error_name(dev.memcpy(host, p, n, device::CopyKind::DeviceToHost)), "cudaSuccess");
  }
  template <typename T>
  std::vector<T> read(size_t n) const {
    std::vector<T> v(n);
    get(v.data(), n * sizeof(T));
    return v;
  }
};

#define RECAP_OK(expr) ASSERT_EQ(device::error_name(expr), "cudaSuccess") << #expr

// Values of dtype `dt` (bf16 as its bits) from floats in [-1, 1), and back to floats exactly.
inline std::vector<uint8_t> encode(const std::vector<float>& v, int dt) {
  std::vector<uint8_t> out(v.size() * (dt == math::kBF16 ? 2 : 4));
  for (size_t i = 0; i < v.size(); ++i) math::store(out.data(), dt, static_cast<int64_t>(i), v[i]);
  return out;
}
inline std::vector<double> decode(const std::vector<uint8_t>& bytes, int dt) {
  size_t n = bytes.size() / (dt == math::kBF16 ? 2 : 4);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = math::load(bytes.data(), dt, static_cast<int64_t>(i));
  return out;
}
inline std::vector<float> op_values(uint32_t seed, size_t n) {
  std::vector<float> v(n);
  runtime::PhiloxStream s(seed, 0);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * runtime::uniform_from_u32(s.next()) - 1.0f;
  return v;
}

// Every transpose combination, batched, with alpha/beta and with a bias, fp32 and bf16, against
// a double computation from the same (rounded) inputs. Relative L2 bound: 1e-6 fp32 (K = 33
// fp32 products), 1e-2 bf16 (one bf16 rounding of the result, u = 2^-9).
inline void check_gemm(device::Device& dev, ops::GemmImpl impl, ops::BlasWorkspace ws = {}) {
  device::Stream s;
  RECAP_OK(dev.stream_create(&s, true));
  const int64_t B = 2, M = 5, N = 7, K = 33;
  for (int dt : {math::kF32, math::kBF16})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int mode = 0; mode < 2; ++mode) {  // 0: alpha/beta accumulate, 1: bias
          SCOPED_TRACE("dtype " + std::to_string(dt) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) +
                       " mode " + std::to_string(mode));
          auto a_h = encode(op_values(1, B * M * K), dt), b_h = encode(op_values(2, B * K * N), dt),
               c_h = encode(op_values(3, B * M * N), dt), bias_h = encode(op_values(4, N), dt);
          DevBuf a(dev, a_h.size()), b(dev, b_h.size()), c(dev, c_h.size()), bias(dev, bias_h.size());
          a.put(a_h.data(), a_h.size());
          b.put(b_h.data(), b_h.size());
          c.put(c_h.data(), c_h.size());
          bias.put(bias_h.data(), bias_h.size());
          math::GemmArgs g;
          g.dtype = dt;
          g.trans_a = ta;
          g.trans_b = tb;
          g.batch = B;
          g.M = M;
          g.N = N;
          g.K = K;
          g.alpha = mode == 0 ? 0.5f : 1.0f;
          g.beta = mode == 0 ? 0.25f : 0.0f;
          g.A = a.p;
          g.lda = ta ? M : K;
          g.stride_a = M * K;
          g.B = b.p;
          g.ldb = tb ? K : N;
          g.stride_b = K * N;
          g.C = c.p;
          g.ldc = N;
          g.stride_c = M * N;
          g.bias = mode == 1 ? bias.p : nullptr;
          RECAP_OK(dev.launch(ops::gemm(g, impl, ws), s));
          RECAP_OK(dev.stream_synchronize(s));
          std::vector<uint8_t> out(c_h.size());
          c.get(out.data(), out.size());
          auto A = decode(a_h, dt), Bv = decode(b_h, dt), C0 = decode(c_h, dt), bi = decode(bias_h, dt), got = decode(out, dt);
          double num = 0, den = 0;
          for (int64_t bb = 0; bb < B; ++bb)
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                double acc = 0;
                for (int64_t k = 0; k < K; ++k) {
                  double av = A[bb * M * K + (ta ? k * M + m : m * K + k)];
                  double bv = Bv[bb * K * N + (tb ? n * K + k : k * N + n)];
                  acc += av * bv;
                }
                const int64_t ci = bb * M * N + m * N + n;
                double ref = g.alpha * acc + g.beta * C0[ci] + (mode == 1 ? bi[n] : 0.0);
                num += (got[ci] - ref) * (got[ci] - ref);
                den += ref * ref;
              }
          EXPECT_LE(std::sqrt(num / den), dt == math::kBF16 ? 1e-2 : 1e-6);
        }
  RECAP_OK(dev.stream_destroy(s));
}

// The dropout mask kernel: by-value args give dropout_mask()'s words and record (seed, offset);
// graph-safe args are read when the kernel runs, so one captured graph replayed after the device
// seed/offset change draws the new mask and records the new values.
inline void check_dropout_mask_kernel(device::Device& dev) {
  device::Stream s;
  RECAP_OK(dev.stream_create(&s, true));
  const uint64_t n = 1000;
  const float p = 0.3f;
  const size_t words = runtime::dropout_mask_words(n);
  DevBuf mask(dev, words * 4), record(dev, 16), state(dev, 16);

  math::DropoutMaskArgs m;
  m.words = static_cast<uint32_t*>(mask.p);
  m.philox = runtime::PhiloxArgs::by_value(0x1234567890abcdefull, 40);
  m.n = n;
  m.p = p;
  m.record = static_cast<uint64_t*>(record.p);
  RECAP_OK(dev.launch(ops::dropout_mask(m), s));
  RECAP_OK(dev.stream_synchronize(s));
  EXPECT_EQ(mask.read<uint32_t>(words), runtime::dropout_mask(0x1234567890abcdefull, 40, n, p).words);
  EXPECT_EQ(record.read<uint64_t>(2), (std::vector<uint64_t>{0x1234567890abcdefull, 40}));

  // Graph-safe: seed at state[0], base offset at state[1], intragraph offset 8.
  const uint64_t* st = static_cast<const uint64_t*>(state.p);
  m.philox = runtime::PhiloxArgs::from_device(st, st + 1, 8);
  device::Graph g;
  device::GraphExec ex;
  RECAP_OK(dev.stream_begin_capture(s, device::CaptureMode::Global));
  RECAP_OK(dev.launch(ops::dropout_mask(m), s));
  RECAP_OK(dev.stream_end_capture(s, &g));
  RECAP_OK(dev.graph_instantiate(&ex, g));
  for (uint64_t round = 0; round < 3; ++round) {
    uint64_t host_state[2] = {77 + round, 100 * round};
    state.put(host_state, 16);
    RECAP_OK(dev.graph_launch(ex, s));
    RECAP_OK(dev.stream_synchronize(s));
    EXPECT_EQ(mask.read<uint32_t>(words), runtime::dropout_mask(77 + round, 100 * round + 8, n, p).words) << round;
    EXPECT_EQ(record.read<uint64_t>(2), (std::vector<uint64_t>{77 + round, 100 * round + 8})) << round;
  }
  RECAP_OK(dev.graph_exec_destroy(ex));
  RECAP_OK(dev.graph_destroy(g));
  RECAP_OK(dev.stream_destroy(s));
}

// A GEMM replayed from a graph gives the bits of the eager launch (both run twice).
inline void check_gemm_graph_bitwise(device::Device& dev, ops::GemmImpl impl, ops::BlasWorkspace ws = {}) {
  device::Stream s;
  RECAP_OK(dev.stream_create(&s, true));
  const int64_t M = 24, N = 96, K = 64;
  for (int dt : {math::kF32, math::kBF16}) {
    auto a_h = encode(op_values(5, M * K), dt), b_h = encode(op_values(6, N * K), dt), bias_h = encode(op_values(7, N), dt);
    const size_t cb = static_cast<size_t>(M * N) * (dt == math::kBF16 ? 2 : 4);
    DevBuf a(dev, a_h.size()), b(dev, b_h.size()), bias(dev, bias_h.size()), c(dev, cb);
    a.put(a_h.data(), a_h.size());
    b.put(b_h.data(), b_h.size());
    bias.put(bias_h.data(), bias_h.size());
    const math::GemmArgs g{.dtype = dt, .trans_b = 1, .M = M, .N = N, .K = K,  // y = x W^T + b, as Linear runs it
                           .A = a.p, .lda = K, .B = b.p, .ldb = K, .C = c.p, .ldc = N, .bias = bias.p};
    device::Kernel k = ops::gemm(g, impl, ws);
    RECAP_OK(dev.launch(k, s));
    RECAP_OK(dev.stream_synchronize(s));
    std::vector<uint8_t> eager(cb), again(cb), replay(cb);
    c.get(eager.data(), cb);
    RECAP_OK(dev.memset(c.p, 0, cb));
    c.settle();
    RECAP_OK(dev.launch(k, s));
    RECAP_OK(dev.stream_synchronize(s));
    c.get(again.data(), cb);
    EXPECT_EQ(eager, again) << "dtype " << dt << ": two eager launches differ";
    device::Graph gr;
    device::GraphExec ex;
    RECAP_OK(dev.stream_begin_capture(s, device::CaptureMode::Global));
    RECAP_OK(dev.launch(k, s));
    RECAP_OK(dev.stream_end_capture(s, &gr));
    RECAP_OK(dev.graph_instantiate(&ex, gr));
    for (int r = 0; r < 2; ++r) {
      RECAP_OK(dev.memset(c.p, 0, cb));
      c.settle();
      RECAP_OK(dev.graph_launch(ex, s));
      RECAP_OK(dev.stream_synchronize(s));
      c.get(replay.data(), cb);
      EXPECT_EQ(eager, replay) << "dtype " << dt << ": replay " << r << " differs from eager";
    }
    RECAP_OK(dev.graph_exec_destroy(ex));
    RECAP_OK(dev.graph_destroy(gr));
  }
  RECAP_OK(dev.stream_destroy(s));
}

}  // namespace recap::models::testing
