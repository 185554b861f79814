#include "harness/training/train.h"

#include <chrono>
#include <map>
#include <tuple>

#include "harness/base/profile.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/philox.h"
#include "models/ops.h"

namespace recap::training {

using models::Saved;

namespace {

void check(device::Status s, const std::string& api, const std::string& where) {
  if (!device::ok(s)) throw DeviceError(api, s, where);
}

// Salts separating the input and target streams of the data seed.
constexpr uint64_t kDataSalt[2] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full};

}  // namespace

std::string RunFailure::line() const {
  std::string where;
  if (phase == "warmup") where = "graph warmup";
  else if (phase == "capture") where = "graph capture";
  else if (phase == "replay") where = "graph replay";
  else where = phase.empty() ? "run" : phase + " step";
  std::string s = where + " failed";
  if (!pass.empty() || !layer.empty()) {
    s += " in the";
    if (!pass.empty()) s += " " + pass;
    if (!layer.empty()) s += (pass.empty() ? " " : " of ") + layer;
    if (microbatch >= 0) s += ", microbatch " + std::to_string(microbatch);
  }
  if (step >= 0 && phase != "capture") s += " (step " + std::to_string(step) + ")";
  s += ": " + message;
  if (!error.empty() && message.find(error) == std::string::npos) s += " [" + error + "]";
  return s;
}

RunFailure failure_from_current_exception(const std::string& phase, const std::string& pass, const std::string& layer,
                                          int microbatch, int step) {
  RunFailure f;
  f.phase = phase;
  f.pass = pass;
  f.layer = layer;
  f.microbatch = microbatch;
  f.step = step;
  try {
    throw;
  } catch (const DeviceError& e) {
    f.api = e.api;
    f.error = device::error_name(e.status);
    f.message = e.what();
  } catch (const CheckpointError& e) {
    f.error = "RuntimeError";
    f.message = e.what();
    if (!e.layer.empty()) f.layer = e.layer;
  } catch (const RngError& e) {
    f.error = "RngError";
    f.message = e.what();
  } catch (const std::exception& e) {
    f.error = "error";
    f.message = e.what();
  } catch (...) {
    f.error = "unknown";
    f.message = "an exception that is not a std::exception";
  }
  return f;
}

std::string LedgerCounts::line() const {
  return std::to_string(draws) + " draws (" + std::to_string(forward) + " forward, " + std::to_string(recompute) +
         " recompute), " + std::to_string(mismatches) + " recompute mismatches";
}

LedgerCounts count_ledger(const std::vector<LedgerEntry>& entries) {
  LedgerCounts c;
  using Key = std::tuple<std::string, std::string, int, int>;
  std::map<Key, const LedgerEntry*> forward;
  for (const LedgerEntry& e : entries) {
    ++c.draws;
    if (e.site.phase == Phase::Forward) {
      ++c.forward;
      forward[Key{e.site.layer, e.site.op, e.site.microbatch, e.step}] = &e;
    } else if (e.site.phase == Phase::Recompute) {
      ++c.recompute;
    }
  }
  for (const LedgerEntry& e : entries) {
    if (e.site.phase != Phase::Recompute) continue;
    auto it = forward.find(Key{e.site.layer, e.site.op, e.site.microbatch, e.step});
    if (it != forward.end() && (it->second->seed != e.seed || it->second->offset != e.offset)) ++c.mismatches;
  }
  return c;
}

Trainer::Trainer(device::Device& d, const CaseSpec& s)
    : dev(d), spec(s), alloc(d), rng(d, s.rng_seed, s.generator, s.device_state), ledger(d) {
  std::string problem = validate(spec);
  if (!problem.empty()) throw std::invalid_argument("invalid case: " + problem);
  check(dev.stream_create(&main, true), "cudaStreamCreateWithFlags", "trainer main stream");
  check(dev.stream_create(&side, true), "cudaStreamCreateWithFlags", "trainer warmup stream");
  check(dev.stream_create(&capture, true), "cudaStreamCreateWithFlags", "trainer capture stream");
  order = spec.effective_order();

  Ctx c = ctx(main);
  model = std::make_unique<models::Model>(c, spec.model, spec.param_seed,
                                          make_checkpoint_wrap(spec, &checkpoints, &top_checkpoints));
  layers = model->layers();
  params = model->params();
  std::map<const models::Param*, int> owner;
  for (size_t l = 0; l < layers.size(); ++l)
    for (models::Param* p : layers[l]->params()) owner[p] = static_cast<int>(l);
  for (models::Param* p : params) param_layer.push_back(owner.count(p) ? owner[p] : -1);

  const Shape shape{spec.model.tokens, spec.model.hidden};
  for (int m = 0; m < spec.microbatches; ++m) {
    input.push_back(alloc.alloc(shape, spec.model.dtype, device::MemCategory::Other));
    target.push_back(alloc.alloc(shape, spec.model.dtype, device::MemCategory::Other));
    std::vector<Tensor> copies;
    for (models::Param* p : params) copies.push_back(alloc.alloc(p->grad.shape, p->grad.dtype, device::MemCategory::Other));
    grad_copies.push_back(std::move(copies));
  }
  check(dev.stream_synchronize(main), "cudaStreamSynchronize", "trainer setup");
  // A device clock for StepRecord::work_ms where the backend has one (NotSupported on sim).
  timing_events_ = device::ok(dev.timing_event_create(&work_start_));
  if (timing_events_ && !device::ok(dev.timing_event_create(&work_end_))) {
    dev.event_destroy(work_start_);
    timing_events_ = false;
  }
}

Trainer::~Trainer() {
  dev.device_synchronize();
  if (timing_events_) {
    dev.event_destroy(work_start_);
    dev.event_destroy(work_end_);
  }
  for (device::Stream s : {main, side, capture})
    if (s.id != 0) dev.stream_destroy(s);
}

Ctx Trainer::ctx(device::Stream s) {
  return Ctx{.dev = dev,
             .stream = s,
             .alloc = alloc,
             .rng = rng,
             .ledger = &ledger,
             .layer = "",
             .phase = Phase::Forward,
             .microbatch = 0,
             .step = 0,
             .save_for_backward = true,
             .draw_override = std::nullopt};
}

double Trainer::now_ms() const {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

namespace {
// The draw of step_data(spec, step, microbatch, kind): one Philox stream per (step, microbatch,
// kind), offsets spaced far enough apart that streams never overlap (n <= 2^24).
models::math::FillUniformArgs step_data_args(const CaseSpec& spec, int step, int microbatch, int kind) {
  models::math::FillUniformArgs a;
  a.n = static_cast<int64_t>(spec.model.tokens) * spec.model.hidden;
  a.seed = spec.data_seed ^ kDataSalt[kind & 1];
  a.offset = ((static_cast<uint64_t>(step) << 8) + static_cast<uint64_t>(microbatch)) << 26;
  return a;  // U(-1, 1): base 0, bound 1
}
}  // namespace

std::vector<float> step_data(const CaseSpec& spec, int step, int microbatch, int kind) {
  models::math::FillUniformArgs a = step_data_args(spec, step, microbatch, kind);
  std::vector<float> v(static_cast<size_t>(a.n));
  a.out = v.data();
  for (int64_t i = 0; i < a.n; ++i) models::math::fill_uniform_element(a, i);
  return v;
}

void Trainer::load_step_data(int step) {
  check(dev.device_synchronize(), "cudaDeviceSynchronize", "loading the step's data");
  profile::Scope prof(profile::kHostData);
  // Drawn on the device (a copy from the host per tensor waited for the GPU's other work), the
  // values of step_data bit for bit.
  Ctx c = ctx(main);
  for (int m = 0; m < spec.microbatches; ++m) {
    for (int kind : {0, 1}) {
      models::math::FillUniformArgs a = step_data_args(spec, step, m, kind);
      a.dtype = models::ops::dtype_code(spec.model.dtype);
      a.out = (kind == 0 ? input : target)[m].data;
      c.launch(models::ops::fill_uniform(a));
    }
  }
  check(dev.device_synchronize(), "cudaDeviceSynchronize", "the step's data drawn");
}

void Trainer::begin_step(int step, device::Stream s) {
  step_stream_ = s;
  work_t0_ = now_ms();
  if (timing_events_) check(dev.event_record(work_start_, s), "cudaEventRecord", "the step's start");
  dev.reset_peak_memory();
  alloc.reset_peaks();
  check(ledger.begin_step(step, s), "cudaMemsetAsync", "RNG ledger begin_step");
  Ctx c = ctx(s);
  c.step = step;
  // grad-buffer-empty: the first step accumulates into the buffers as allocated (torch.empty)
  const bool skip = (fault_on(Fault::GradAccumNotZeroed) && step > 0) || (fault_on(Fault::GradBufferEmpty) && step == 0);
  if (!skip) models::zero_grads(c, params);
}

void Trainer::copy_grads(Ctx& c, int mb) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& g = params[i]->grad;
    check(c.dev.memcpy_async(grad_copies[mb][i].data, g.data, g.bytes(), device::CopyKind::DeviceToDevice, c.stream),
          "cudaMemcpyAsync", "copying the gradients of microbatch " + std::to_string(mb));
  }
}

StepRecord Trainer::finish_step(int step, const std::string& phase, const std::vector<Tensor>& losses,
                                int last_backward_mb, double start_ms) {
  if (timing_events_) check(dev.event_record(work_end_, step_stream_), "cudaEventRecord", "the step's end");
  check(dev.device_synchronize(), "cudaDeviceSynchronize", "end of step " + std::to_string(step));
  StepRecord r;
  r.step = step;
  r.phase = phase;
  r.work_ms = now_ms() - work_t0_;
  if (timing_events_) {
    float ms = 0;
    check(dev.event_elapsed_ms(work_start_, work_end_, &ms), "cudaEventElapsedTime", "step " + std::to_string(step));
    r.work_ms = ms;
  }
  r.memory.device = dev.memory_stats();
  r.memory.allocator = alloc.stats();
  r.graph_pool_bytes = r.memory.allocator.pool_reserved_bytes;
  r.graph_pool_used_bytes = r.memory.allocator.pool_used_bytes;
  r.rebindings = take_rebindings();
  size_t before = ledger.entries().size();
  check(ledger.collect(step), "cudaMemcpy", "RNG ledger collect");
  r.ledger.assign(ledger.entries().begin() + static_cast<ptrdiff_t>(before), ledger.entries().end());
  for (int m = 0; m < spec.microbatches; ++m) {
    MicrobatchRecord mr;
    mr.microbatch = m;
    if (m < static_cast<int>(losses.size()) && losses[m].defined()) mr.loss = to_floats(dev, losses[m]).at(0);
    if (record_tensors)
      for (size_t i = 0; i < params.size(); ++i) mr.grads.push_back(to_floats(dev, grad_copies[m][i]));
    r.microbatches.push_back(std::move(mr));
  }
  if (last_backward_mb >= 0) r.grads = r.microbatches[last_backward_mb].grads;
  if (record_tensors)
    for (models::Param* p : params) r.params.push_back(to_floats(dev, p->value));
  r.ms = now_ms() - start_ms;
  return r;
}

std::vector<Rebinding> Trainer::take_rebindings() {
  std::vector<Rebinding> out;
  for (Checkpoint* c : top_checkpoints)
    if (c != nullptr)
      for (Rebinding& r : c->take_rebindings()) out.push_back(std::move(r));
  return out;
}

bool Trainer::discard_pair(size_t l) const {
  return spec.style == CheckpointStyle::WithoutOutput && l + 1 < layers.size() && top_checkpoints[l] != nullptr &&
         top_checkpoints[l + 1] == nullptr;
}

Tensor Trainer::forward_microbatch(Ctx& c, int mb, std::vector<Saved>& saved, Tensor* loss, Tensor* dy,
                                   const Around& around) {
  c.microbatch = mb;
  c.phase = Phase::Forward;
  saved.assign(layers.size(), Saved{});
  Tensor x = input[mb];
  for (size_t l = 0; l < layers.size(); ++l) {
    Tensor y;
    auto call = [&] {
      runtime::LayerScope scope(c, layers[l]->name());
      y = layers[l]->forward(c, x, saved[l]);
    };
    if (around) around(l, mb, true, call);
    else call();
    if (l > 0 && discard_pair(l - 1)) top_checkpoints[l - 1]->discard_output(c, saved[l - 1], saved[l]);
    x = y;
  }
  *loss = models::mse_loss(c, x, target[mb], dy);
  return x;
}

void Trainer::backward_microbatch(Ctx& c, int mb, const Tensor& dy, std::vector<Saved>& saved, const Around& around) {
  c.microbatch = mb;
  c.phase = Phase::Backward;
  Tensor g = dy;
  for (size_t l = layers.size(); l-- > 0;) {
    auto call = [&] {
      if (l > 0 && discard_pair(l - 1)) {
        // The hook Megatron registers on the consumer's output: rematerialize the discarded
        // output before the consumer's backward reads it.
        runtime::LayerScope scope(c, layers[l - 1]->name());
        top_checkpoints[l - 1]->recompute_output(c, saved[l - 1], saved[l]);
      }
      runtime::LayerScope scope(c, layers[l]->name());
      g = layers[l]->backward(c, g, saved[l]);
    };
    if (around) around(l, mb, false, call);
    else call();
  }
  copy_grads(c, mb);
}

StepRecord Trainer::eager_step(int step, device::Stream s, const std::string& phase, const Around& around) {
  profile::Scope prof(phase == "warmup" ? profile::kWarmup : profile::kEagerSteps);
  double t0 = now_ms();
  load_step_data(step);
  begin_step(step, s);
  Ctx c = ctx(s);
  c.step = step;
  const int M = spec.microbatches;
  std::vector<std::vector<Saved>> saved(M);
  std::vector<Tensor> loss(M), dy(M);
  int f = 0, b = 0, last = -1;
  for (int e : order) {
    if (e > 0) {
      forward_microbatch(c, f, saved[f], &loss[f], &dy[f], around);
      ++f;
    } else {
      backward_microbatch(c, b, dy[b], saved[b], around);
      dy[b] = Tensor{};
      last = b;
      ++b;
    }
  }
  models::sgd_update(c, params, spec.lr);
  return finish_step(step, phase, loss, last, t0);
}

}  // namespace recap::training
