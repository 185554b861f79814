#include "harness/sut/in_process.h"

#include <algorithm>
#include <stdexcept>

#include "harness/base/profile.h"
#include "harness/runtime/faults.h"
#include "harness/sut/worker.h"
#include "models/ops.h"

namespace recap::sut {

namespace {
// The checks run() and measure() share: what recap's runtime does not run in this process.
void refuse_unrunnable(const training::CaseSpec& spec) {
  if (std::string why = training::unmodelled(spec); !why.empty()) throw SkippedBySut(why);
  if (std::string f = runtime::process_killing_fault(spec.faults); !f.empty() && !runtime::g_process_killing_faults_allowed)
    throw SkippedBySut("fault " + f + " kills the process that runs the case: only a worker runs it (--sut recap-worker)");
}
}  // namespace

SutRun InProcessSut::run(const training::CaseSpec& spec, const RunRequest&) {
  last_device_ = {};
  refuse_unrunnable(spec);
  std::string err;
  std::unique_ptr<device::Device> dev;
  {
    profile::Scope startup(profile::kStartup);  // a fresh device per run: its context and streams
    device::DeviceOptions opts;
    opts.block_cache = device::block_cache_wanted();  // no cudaFree, which waits for the whole GPU
    opts.init_check = true;  // sim: every read checked against what was written (the memory oracle)
    dev = device::make_device(backend_, opts, &err);
  }
  if (!dev) throw std::runtime_error("cannot create the device: " + err);
  last_device_ = {dev->name(), device::backend_name(dev->backend())};
  training::CheckedRun c = training::run_case_checked(*dev, spec);
  SutRun out;
  out.result = std::move(c.result);
  out.hygiene = c.hygiene;
  out.live_after = c.live_after;
  out.init = std::move(c.init);
  out.device_name = last_device_.device_name;
  out.backend = last_device_.backend;
  profile::Scope teardown(profile::kTeardown);
  dev.reset();
  return out;
}

Measurement InProcessSut::measure(const training::CaseSpec& spec) {
  last_device_ = {};
  refuse_unrunnable(spec);
  std::string err;
  auto dev = device::make_device(backend_, {}, &err);
  if (!dev) throw std::runtime_error("cannot create the device: " + err);
  last_device_ = {dev->name(), device::backend_name(dev->backend())};
  Measurement m;
  training::Session session(*dev, spec);
  session.trainer().record_tensors = false;  // the oracles' downloads are no part of a step
  const training::RunResult r = session.run();
  m.clock = r.step_clock;
  const bool graphed = spec.executor != training::ExecutorKind::Eager;
  for (const auto& s : r.steps) {
    // eager steps and warmups keep their activations in eager tensors: the same measure outside graphs
    if (s.phase != "replay")
      m.activations_eager = std::max(m.activations_eager.value_or(0), s.memory.activations_peak());
    if (s.step < spec.warmup) continue;  // warming up: not timed
    m.step_ms.push_back(s.work_ms);
    m.peak_allocated = std::max(m.peak_allocated.value_or(0), s.memory.allocator.tensor_peak_bytes);
    m.peak_reserved = std::max(m.peak_reserved.value_or(0), s.memory.device.peak_bytes);
  }
  if (graphed) m.activations_eager.reset();  // its warmup steps are not the configuration's steady state
  if (r.captured) {
    m.capture_ms = r.capture_ms;
    m.graph_pool = r.capture_memory.allocator.pool_peak_reserved_bytes;
    m.capture_peak = r.capture_memory.allocator.tensor_peak_bytes;
    m.activations_in_graphs = r.capture_memory.activations_peak();
    for (size_t l = 0; l < r.graph_activations.size(); ++l) {
      LayerMeasurement lm;
      lm.layer = static_cast<int>(l);
      if (spec.layers[l].graphed) lm.activations_in_graphs = r.graph_activations[l];
      m.per_layer.push_back(lm);
    }
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (device::ok(dev->mem_get_info(&free_bytes, &total_bytes)))
    m.device_used = static_cast<int64_t>(total_bytes - free_bytes);
  if (r.failure) m.failure = r.failure->line();
  return m;
}

std::optional<double> InProcessSut::matmul_bf16_tflops(std::string* why) {
  std::string err;
  auto dev = device::make_device(backend_, {}, &err);
  if (!dev) {
    *why = "cannot create the device: " + err;
    return std::nullopt;
  }
  if (dev->backend() != device::Backend::Cuda) {
    *why = "no GPU: the " + device::backend_name(dev->backend()) + " backend has no matmul rate";
    return std::nullopt;
  }
  if (!models::ops::blas_available()) {
    *why = "recap was built without cuBLAS: its GEMM is the simple kernel, not the GPU's rate";
    return std::nullopt;
  }
  const int64_t n = 8192;
  const size_t bytes = static_cast<size_t>(n * n) * 2, ws_bytes = size_t{32} << 20;
  void *a = nullptr, *b = nullptr, *c = nullptr, *ws = nullptr;
  device::Stream s{};
  device::Event e0{}, e1{};
  auto fail = [&](const char* what, device::Status st) {
    *why = std::string(what) + ": " + device::error_name(st);
    return std::nullopt;
  };
  device::Status st = dev->malloc(&a, bytes, device::MemCategory::Workspace);
  if (device::ok(st)) st = dev->malloc(&b, bytes, device::MemCategory::Workspace);
  if (device::ok(st)) st = dev->malloc(&c, bytes, device::MemCategory::Workspace);
  if (device::ok(st)) st = dev->malloc(&ws, ws_bytes, device::MemCategory::Workspace);
  if (!device::ok(st)) return fail("cudaMalloc", st);
  // bf16 0x3c3c (about 0.0115) everywhere: finite products, whatever the values, the same GEMM
  if (!device::ok(st = dev->memset(a, 0x3c, bytes)) || !device::ok(st = dev->memset(b, 0x3c, bytes)))
    return fail("cudaMemset", st);
  if (int e = models::ops::blas_prepare(); e != 0) return fail("cublasCreate", static_cast<device::Status>(e));
  if (!device::ok(st = dev->stream_create(&s, true))) return fail("cudaStreamCreateWithFlags", st);
  if (!device::ok(st = dev->timing_event_create(&e0)) || !device::ok(st = dev->timing_event_create(&e1)))
    return fail("cudaEventCreate", st);
  models::math::GemmArgs g;
  g.dtype = models::math::kBF16;
  g.M = g.N = g.K = n;
  g.A = a;
  g.lda = n;
  g.B = b;
  g.ldb = n;
  g.C = c;
  g.ldc = n;
  const device::Kernel k = models::ops::gemm(g, models::ops::GemmImpl::Cublas, {ws, ws_bytes});
  const int warmup = 3, timed = 10;
  for (int i = 0; i < warmup; ++i)
    if (!device::ok(st = dev->launch(k, s))) return fail("the GEMM's launch", st);
  if (!device::ok(st = dev->event_record(e0, s))) return fail("cudaEventRecord", st);
  for (int i = 0; i < timed; ++i)
    if (!device::ok(st = dev->launch(k, s))) return fail("the GEMM's launch", st);
  if (!device::ok(st = dev->event_record(e1, s))) return fail("cudaEventRecord", st);
  if (!device::ok(st = dev->stream_synchronize(s))) return fail("cudaStreamSynchronize", st);
  float ms = 0;
  if (!device::ok(st = dev->event_elapsed_ms(e0, e1, &ms)) || ms <= 0) return fail("cudaEventElapsedTime", st);
  return 2.0 * static_cast<double>(n) * n * n * timed / (ms * 1e-3) / 1e12;
}

}  // namespace recap::sut
