// See check.h.
#include "models/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "harness/runtime/capture.h"
#include "harness/runtime/dropout.h"
#include "harness/runtime/philox.h"
#include "harness/runtime/rng_tracker.h"
#include "harness/runtime/tensor.h"

namespace recap::models::check {

using device::MemCategory;
using runtime::Tensor;

namespace {

void ensure(device::Status s, const char* what) {
  if (!device::ok(s)) throw std::runtime_error(std::string(what) + " failed: " + device::error_name(s));
}

}  // namespace

double tolerance(const ModelSpec& spec) {
  if (spec.dtype != DType::BF16) return kTolF32;
  const size_t n = spec.layers.size();
  if (n == 1 && spec.layers[0].kind != "attention" && spec.layers[0].kind != "block") return kTolBf16Layer;
  return kTolBf16Stack * std::max(1.0, static_cast<double>(n) / kBf16StackDepth);
}

bool backend_usable(device::Backend backend, std::string* why) {
  if (backend == device::Backend::Sim) return true;
  return device::cuda_usable(why);
}

std::vector<float> test_values(uint64_t seed, uint64_t stream, size_t n) {
  std::vector<float> v(n);
  runtime::PhiloxStream s(seed, stream << 40);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * runtime::uniform_from_u32(s.next()) - 1.0f;
  return v;
}

RunOutput run_model(const RunOptions& o) {
  std::string err;
  std::unique_ptr<device::Device> dev = device::make_device(
      o.backend == device::Backend::Sim ? device::BackendChoice::Sim : device::BackendChoice::Cuda, o.device_options,
      &err);
  if (!dev) throw std::runtime_error("no device: " + err);
  device::Stream s;
  ensure(dev->stream_create(&s, true), "cudaStreamCreate");
  RunOutput out;
  {
    runtime::Allocator alloc(*dev);
    runtime::RngTracker rng(*dev, o.rng_seed, o.generator, runtime::DeviceStateModel::PerCapture);
    runtime::RngLedger ledger(*dev);
    runtime::Ctx ctx{*dev, s, alloc, rng, &ledger, "", runtime::Phase::Forward, 0, 0, true, std::nullopt};
    Model model(ctx, o.spec, o.param_seed, o.wrap);
    const int64_t T = o.spec.tokens, H = o.spec.hidden;
    const size_t n = static_cast<size_t>(T * H);
    Tensor x = alloc.alloc({T, H}, o.spec.dtype, MemCategory::Activations);
    Tensor dy = alloc.alloc({T, H}, o.spec.dtype, MemCategory::Workspace);
    runtime::from_floats(*dev, x, test_values(o.data_seed, 0, n));
    runtime::from_floats(*dev, dy, test_values(o.data_seed, 1, n));
    // The uploads (synchronous copies on the legacy stream) must land before work on `s` starts.
    ensure(dev->device_synchronize(), "cudaDeviceSynchronize");
    Tensor y, dx;

    if (!o.graph) {
      for (int step = 0; step < o.steps; ++step) {
        ensure(ledger.begin_step(step, s), "ledger begin_step");
        std::vector<Saved> saved;
        y = model.forward(ctx, x, saved);
        dx = model.backward(ctx, dy, saved);
        ensure(dev->stream_synchronize(s), "cudaStreamSynchronize");
        ledger.clear();
        ensure(ledger.collect(step), "ledger collect");
      }
      out.y = runtime::to_floats(*dev, y);
      out.dx = runtime::to_floats(*dev, dx);
    } else {
      runtime::PoolId pool = alloc.create_pool();
      runtime::CapturedGraph graph = runtime::capture_graph(*dev, alloc, rng, s, pool, "the model's graph", [&] {
        std::vector<Saved> saved;
        y = model.forward(ctx, x, saved);
        dx = model.backward(ctx, dy, saved);
      });
      for (int step = 0; step < o.steps; ++step) {
        ensure(ledger.begin_step(step, s), "ledger begin_step");
        ensure(rng.replay_prologue(graph.rng, s), "replay prologue");
        ensure(dev->graph_launch(graph.exec, s), "cudaGraphLaunch");
        ensure(dev->stream_synchronize(s), "cudaStreamSynchronize");
        ledger.clear();
        ensure(ledger.collect(step), "ledger collect");
      }
      out.y = runtime::to_floats(*dev, y);
      out.dx = runtime::to_floats(*dev, dx);
      ensure(dev->graph_exec_destroy(graph.exec), "cudaGraphExecDestroy");
      ensure(dev->graph_destroy(graph.graph), "cudaGraphDestroy");
      y = Tensor{};
      dx = Tensor{};
      alloc.destroy_pool(pool);
    }
    out.x = runtime::to_floats(*dev, x);
    out.dy = runtime::to_floats(*dev, dy);
    for (Param* p : model.params()) {
      out.names.push_back(p->name);
      out.params.push_back(runtime::to_floats(*dev, p->value));
      out.grads.push_back(runtime::to_floats(*dev, p->grad));
    }
    out.draws = ledger.entries();
  }
  ensure(dev->stream_destroy(s), "cudaStreamDestroy");
  out.init = device::sim::init_check_summary(*dev);
  return out;
}

double l2(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

double rel_l2(const std::vector<float>& a, const std::vector<double>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

double max_abs(const std::vector<float>& a, const std::vector<double>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!std::isfinite(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

bool all_finite(const std::vector<float>& a) {
  for (float v : a)
    if (!std::isfinite(v)) return false;
  return true;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b, size_t* first_diff) {
  if (a.size() != b.size()) {
    if (first_diff) *first_diff = std::min(a.size(), b.size());
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (first_diff) *first_diff = i;
      return false;
    }
  return true;
}

reference::MaskFn ledger_masks(const std::vector<runtime::LedgerEntry>& draws, std::vector<bool>* used,
                               std::vector<std::string>* problems, int microbatch) {
  used->assign(draws.size(), false);
  return [&draws, used, problems, microbatch](const std::string& layer, const std::string& op, uint64_t n, float p) {
    for (size_t i = 0; i < draws.size(); ++i) {
      const runtime::LedgerEntry& e = draws[i];
      if ((*used)[i] || e.site.phase != runtime::Phase::Forward || e.site.layer != layer || e.site.op != op ||
          (microbatch >= 0 && e.site.microbatch != microbatch))
        continue;
      (*used)[i] = true;
      if (e.count != n)
        problems->push_back("draw " + layer + "/" + op + ": recorded count " + std::to_string(e.count) +
                            ", the reference asks for " + std::to_string(n));
      if (e.generator == "mask") {  // another system's mask: applied as it reported it
        if (e.mask.size() == n) return e.mask;
        problems->push_back("mask " + layer + "/" + op + ": the system sent " + std::to_string(e.mask.size()) +
                            " mask bytes, the reference asks for " + std::to_string(n));
        return std::vector<uint8_t>(n, 1);
      }
      return runtime::dropout_mask_bytes(e.seed, e.offset, n, p);
    }
    problems->push_back("the ledger has no forward draw for " + layer + "/" + op);
    return std::vector<uint8_t>(n, 1);
  };
}

Comparison compare_with_reference(const ModelSpec& spec, const RunOutput& run, const ParamsPerturbation& perturb) {
  Comparison c;
  reference::Params params;
  for (size_t i = 0; i < run.names.size(); ++i) params[run.names[i]] = reference::Vec(run.params[i].begin(), run.params[i].end());
  if (perturb) perturb(params);
  std::vector<bool> used;
  reference::MaskFn masks = ledger_masks(run.draws, &used, &c.problems);
  reference::RefModel ref(spec, params);
  reference::Vec x(run.x.begin(), run.x.end()), dy(run.dy.begin(), run.dy.end());
  reference::Vec y = ref.forward(x, spec.tokens, masks);
  reference::Vec dx = ref.backward(dy);
  for (size_t i = 0; i < run.draws.size(); ++i) {
    if (run.draws[i].site.phase != runtime::Phase::Forward || used[i]) continue;
    c.problems.push_back("recorded draw " + run.draws[i].site.layer + "/" + run.draws[i].site.op +
                         " has no counterpart in the reference");
  }

  std::ostringstream rep;
  // The first quantity wins a tie, so a non-finite y is named before what it poisons.
  auto note = [&](const std::string& what, const std::vector<float>& a, const reference::Vec& r) {
    double err = rel_l2(a, r);
    rep << "  " << what << ": rel L2 " << err << "\n";
    if (std::isnan(err)) err = INFINITY;
    if (c.worst_what.empty() || err > c.worst) {
      c.worst = err;
      c.worst_what = what;
      c.worst_max_abs = max_abs(a, r);
    }
    return err;
  };
  c.y = note("y", run.y, y);
  c.dx = note("dx", run.dx, dx);
  for (size_t i = 0; i < run.names.size(); ++i)
    c.grads[run.names[i]] = note("grad " + run.names[i], run.grads[i], ref.grads().at(run.names[i]));
  c.report = rep.str();
  return c;
}

}  // namespace recap::models::check
