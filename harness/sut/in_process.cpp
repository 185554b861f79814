#include "harness/sut/in_process.h"

#include <stdexcept>

#include "harness/runtime/faults.h"
#include "harness/sut/worker.h"

namespace recap::sut {

SutRun InProcessSut::run(const training::CaseSpec& spec, const RunRequest&) {
  last_device_ = {};
  if (std::string why = training::unmodelled(spec); !why.empty()) throw SkippedBySut(why);
  if (std::string f = runtime::process_killing_fault(spec.faults); !f.empty() && !runtime::g_process_killing_faults_allowed)
    throw SkippedBySut("fault " + f + " kills the process that runs the case: only a worker runs it (--sut recap-worker)");
  std::string err;
  auto dev = device::make_device(backend_, {}, &err);
  if (!dev) throw std::runtime_error("cannot create the device: " + err);
  last_device_ = {dev->name(), device::backend_name(dev->backend())};
  training::CheckedRun c = training::run_case_checked(*dev, spec);
  SutRun out;
  out.result = std::move(c.result);
  out.hygiene = c.hygiene;
  out.live_after = c.live_after;
  out.device_name = last_device_.device_name;
  out.backend = last_device_.backend;
  return out;
}

}  // namespace recap::sut
