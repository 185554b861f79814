// recap's own runtime in this process, as a system under test: the one sequence that runs a case
// the way recap judges it (a fresh device, training::run_case_checked), used by the oracles when
// no other system is given and by `recap worker` (worker.h) for every request.
#pragma once

#include "harness/device/device.h"
#include "harness/sut/sut.h"

namespace recap::sut {

class InProcessSut : public Sut {
 public:
  explicit InProcessSut(device::BackendChoice backend) : backend_(backend) {}
  std::string name() const override { return "recap"; }
  bool recap_runtime() const override { return true; }
  // On a fresh device of the backend. SkippedBySut for a case recap's runtime does not model
  // (training::unmodelled) and, unless this process may die of it
  // (runtime::g_process_killing_faults_allowed: `recap worker`), for a fault that kills the process;
  // std::runtime_error when the device cannot be made; whatever the run throws (runtime::DeviceError
  // for an allocation the device refused while setting up) passes through.
  SutRun run(const training::CaseSpec& spec, const RunRequest& ask) override;
  SutDevice last_device() const override { return last_device_; }
  // A session on a fresh device, results not downloaded: step times by the device's clock
  // (Trainer::step_clock), bytes from the device's ledger and the allocator, exactly.
  Measurement measure(const training::CaseSpec& spec) override;
  // cuda: a bf16 GEMM of 8192 x 8192 x 8192 through cuBLAS, 10 timed launches after 3; nullopt on sim.
  std::optional<double> matmul_bf16_tflops(std::string* why) override;

 private:
  device::BackendChoice backend_;
  SutDevice last_device_;
};

}  // namespace recap::sut
