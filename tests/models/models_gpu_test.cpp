// The layers and ops on the cuda backend (label gpu): the same fp64 reference checks as on sim,
// determinism, graph replay bitwise equal to eager (cuBLAS included), checkpointed sub-modules,
// and the GPU against sim. Every case skips, with the reason, where no GPU is usable.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "harness/training/checkpoint.h"
#include "model_check.h"
#include "models/layers.h"
#include "models/ops.h"
#include "op_check.h"

namespace recap::models::testing {
namespace {

using device::Backend;

#define SKIP_WITHOUT_GPU()                          \
  do {                                              \
    std::string why;                                \
    if (!device::cuda_usable(&why)) GTEST_SKIP() << why; \
  } while (0)

class GpuLayerCaseTest : public ::testing::TestWithParam<LayerCase> {
 protected:
  void SetUp() override { SKIP_WITHOUT_GPU(); }
};

TEST_P(GpuLayerCaseTest, MatchesFp64Reference) { expect_matches_reference(Backend::Cuda, GetParam()); }

TEST_P(GpuLayerCaseTest, DeterministicAcrossRuns) { expect_deterministic(Backend::Cuda, GetParam()); }

// The GPU and sim draw the same masks (same generator stream, same layout) and agree within the
// reference tolerance (not bitwise: FMA contraction, expf/tanhf and cuBLAS differ from the host).
TEST_P(GpuLayerCaseTest, AgreesWithSim) {
  const LayerCase& c = GetParam();
  RunOptions o;
  o.spec = c.spec;
  o.backend = Backend::Sim;
  RunOutput cpu = run_model(o);
  o.backend = Backend::Cuda;
  RunOutput gpu = run_model(o);
  ASSERT_EQ(cpu.draws.size(), gpu.draws.size());
  for (size_t i = 0; i < cpu.draws.size(); ++i) {
    EXPECT_EQ(cpu.draws[i].site.layer, gpu.draws[i].site.layer);
    EXPECT_EQ(cpu.draws[i].seed, gpu.draws[i].seed);
    EXPECT_EQ(cpu.draws[i].offset, gpu.draws[i].offset);
  }
  auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  EXPECT_LE(rel_l2(gpu.y, as_double(cpu.y)), 2 * c.tol);
  EXPECT_LE(rel_l2(gpu.dx, as_double(cpu.dx)), 2 * c.tol);
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    EXPECT_LE(rel_l2(gpu.grads[i], as_double(cpu.grads[i])), 2 * c.tol) << cpu.names[i];
}

INSTANTIATE_TEST_SUITE_P(Cuda, GpuLayerCaseTest, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& i) { return i.param.name; });

// nvcc would contract base + u * bound into one FMA: the kernel rounds the two apart, as the host does
TEST(GpuModelParams, DrawnOnTheDeviceEqualTheHostValues) {
  SKIP_WITHOUT_GPU();
  expect_drawn_values_equal_host(Backend::Cuda);
}

TEST(GpuModelGraph, ReplayEqualsEagerBlockStack) {
  SKIP_WITHOUT_GPU();
  expect_graph_equals_eager(Backend::Cuda, block_stack(4, DType::F32, 0.1f), 3);
}

TEST(GpuModelGraph, ReplayEqualsEagerBf16Mixed) {
  SKIP_WITHOUT_GPU();
  for (const LayerCase& c : layer_cases())
    if (c.name == "mixed_bf16_p10") expect_graph_equals_eager(Backend::Cuda, c.spec, 2);
}

TEST(GpuModelCheckpoint, GraphSafePolicyBitwiseIdentical) {
  SKIP_WITHOUT_GPU();
  RunOptions o;
  o.backend = Backend::Cuda;
  o.spec = block_stack(2, DType::F32, 0.1f);
  o.generator = runtime::GeneratorMode::GraphSafe;
  RunOutput plain = run_model(o);
  for (const char* only_c : {"block", "attn_core", "mlp", "norm"}) {
    const std::string only = only_c;
    o.wrap = [only](std::unique_ptr<Layer> l, const std::string& role) -> std::unique_ptr<Layer> {
      if (role != only) return l;
      training::CheckpointConfig cfg;
      cfg.policy = training::CheckpointPolicy::GraphSafe;
      cfg.role = role;
      return std::make_unique<training::Checkpoint>(std::move(l), cfg);
    };
    expect_runs_equal(plain, run_model(o), "checkpointed " + only);
  }
}

class GpuOps : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    std::string err;
    dev_ = device::make_device(device::BackendChoice::Cuda, {}, &err);
    ASSERT_NE(dev_, nullptr) << err;
    ASSERT_EQ(ops::blas_prepare(), 0);
    ASSERT_EQ(device::error_name(dev_->malloc(&ws_, kWs, device::MemCategory::Workspace)), "cudaSuccess");
  }
  void TearDown() override {
    if (ws_ != nullptr) dev_->free(ws_);
  }
  static constexpr size_t kWs = 8u << 20;
  std::unique_ptr<device::Device> dev_;
  void* ws_ = nullptr;
};

TEST_F(GpuOps, SimpleGemmAgainstDouble) { check_gemm(*dev_, ops::GemmImpl::Simple); }

TEST_F(GpuOps, CublasGemmAgainstDouble) { check_gemm(*dev_, ops::GemmImpl::Cublas, {ws_, kWs}); }

TEST_F(GpuOps, CublasGemmGraphReplayBitwiseEqualsEager) {
  check_gemm_graph_bitwise(*dev_, ops::GemmImpl::Cublas, {ws_, kWs});
}

TEST_F(GpuOps, SimpleGemmGraphReplayBitwiseEqualsEager) { check_gemm_graph_bitwise(*dev_, ops::GemmImpl::Simple); }

TEST_F(GpuOps, DropoutMaskKernelRecordsAndReadsStateAtRunTime) { check_dropout_mask_kernel(*dev_); }

}  // namespace
}  // namespace recap::models::testing
