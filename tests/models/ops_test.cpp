// The model ops on the sim backend (label unit): GEMM against double, the dropout mask kernel's
// record and its graph-safe arguments read at run time, eager vs graph replay bitwise, bf16 stores.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "harness/runtime/bf16.h"
#include "models/op_math.h"
#include "models/ops.h"
#include "op_check.h"

namespace recap::models::testing {
namespace {

std::unique_ptr<device::Device> sim() {
  std::string err;
  auto dev = device::make_device(device::BackendChoice::Sim, {}, &err);
  EXPECT_NE(dev, nullptr) << err;
  return dev;
}

TEST(OpsSim, GemmAgainstDouble) {
  auto dev = sim();
  check_gemm(*dev, ops::GemmImpl::Simple);
  check_gemm(*dev, ops::GemmImpl::Cublas);  // on sim the same host body runs
}

TEST(OpsSim, DropoutMaskKernelRecordsAndReadsStateAtRunTime) {
  auto dev = sim();
  check_dropout_mask_kernel(*dev);
}

TEST(OpsSim, GemmGraphReplayBitwiseEqualsEager) {
  auto dev = sim();
  check_gemm_graph_bitwise(*dev, ops::GemmImpl::Simple);
}

TEST(OpsSim, Bf16StoreRoundsToNearestEven) {
  uint16_t out[4];
  const float in[4] = {1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-16f, 1.0f + 3 * 0x1p-8f, -2.5f};
  for (int i = 0; i < 4; ++i) math::store(out, math::kBF16, i, in[i]);
  EXPECT_EQ(out[0], 0x3f80);  // tie: to even (down)
  EXPECT_EQ(out[1], 0x3f81);  // above the tie: up
  EXPECT_EQ(out[2], 0x3f82);  // tie: to even (up)
  EXPECT_EQ(out[3], runtime::float_to_bf16(-2.5f).bits);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(math::load(out, math::kBF16, i), runtime::round_to_bf16(in[i]));
}

TEST(OpsSim, KernelsDeclareTheirBuffers) {
  float a[6], b[6], c[4], bias[2];
  math::GemmArgs g;
  g.M = 2;
  g.N = 2;
  g.K = 3;
  g.A = a;
  g.lda = 3;
  g.B = b;
  g.ldb = 3;
  g.trans_b = 1;
  g.C = c;
  g.ldc = 2;
  g.bias = bias;
  device::Kernel k = ops::gemm(g);
  ASSERT_EQ(k.writes.size(), 1u);
  EXPECT_EQ(k.writes[0].ptr, c);
  EXPECT_EQ(k.writes[0].bytes, sizeof c);
  ASSERT_EQ(k.reads.size(), 3u);
  EXPECT_EQ(k.reads[0].bytes, sizeof a);
  EXPECT_EQ(k.reads[1].bytes, sizeof b);
  EXPECT_EQ(k.reads[2].bytes, sizeof bias);
  EXPECT_TRUE(static_cast<bool>(k.host));
#ifdef RECAP_WITH_CUDA
  EXPECT_TRUE(static_cast<bool>(k.gpu));
#endif

  uint32_t words[2];
  uint64_t rec[2], st[2];
  math::DropoutMaskArgs m;
  m.words = words;
  m.n = 40;
  m.p = 0.5f;
  m.record = rec;
  m.philox = runtime::PhiloxArgs::from_device(st, st + 1, 0);
  device::Kernel d = ops::dropout_mask(m);
  ASSERT_EQ(d.reads.size(), 2u);  // the device seed and offset
  ASSERT_EQ(d.writes.size(), 2u);
  EXPECT_EQ(d.writes[0].bytes, sizeof words);
  EXPECT_EQ(d.writes[1].ptr, rec);
}

}  // namespace
}  // namespace recap::models::testing
