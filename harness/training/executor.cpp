#include "harness/training/executor.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "harness/base/profile.h"
#include "harness/runtime/capture.h"
#include "harness/runtime/phase.h"

namespace recap::training {

using models::Saved;

namespace {

void check(device::Status s, const std::string& api, const std::string& where) {
  if (!device::ok(s)) throw DeviceError(api, s, where);
}

// Where a graphed executor is, for failure reports.
struct Position {
  std::string phase;  // "warmup", "capture", "replay"
  std::string pass;   // "forward", "backward", ""
  std::string layer;
  int microbatch = -1;
  int step = -1;
};

void fill_capture_memory(Trainer& t, RunResult& out) {
  out.capture_memory.device = t.dev.memory_stats();
  out.capture_memory.allocator = t.alloc.stats();
}

int64_t live_activations(Trainer& t) {
  return t.alloc.stats().tensors[static_cast<int>(device::MemCategory::Activations)].live_bytes;
}

// graph-pool-leak (bug class 27): every replay takes a buffer from the graphs' pool and keeps it,
// as Megatron's alloc_tensor_from_graph_mempool takes a use of the pool per static buffer and
// never releases it (results/FINDINGS.md M6), here once per replay: the pool grows with every one.
void take_from_pool(Trainer& t, PoolId pool, std::vector<Tensor>& kept) {
  if (pool == 0) return;
  PoolScope in_pool(t.alloc, pool);
  kept.push_back(t.alloc.alloc({t.spec.model.tokens, t.spec.model.hidden}, t.spec.model.dtype, device::MemCategory::Other));
}

// ---- eager ----------------------------------------------------------------------------------

class EagerExecutor : public Executor {
 public:
  using Executor::Executor;
  void run(RunResult& out) override {
    for (int step = 0; step < t_.spec.steps(); ++step) {
      try {
        out.steps.push_back(t_.eager_step(step, t_.main, "eager", track()));
      } catch (...) {
        out.failure = failure_from_current_exception("eager", pos_.pass, pos_.layer, pos_.microbatch, step);
        t_.dev.device_synchronize();
        t_.dev.get_last_error();
        return;
      }
    }
  }

 private:
  Trainer::Around track() {
    return [this](size_t l, int mb, bool fwd, const std::function<void()>& call) {
      pos_ = Position{"eager", fwd ? "forward" : "backward", t_.layers[l]->name(), mb, -1};
      call();
    };
  }
  Position pos_;
};

// ---- per-layer graphs -----------------------------------------------------------------------

class PerLayerGraphs : public Executor {
 public:
  explicit PerLayerGraphs(Trainer& t) : Executor(t) {
    const size_t L = t_.layers.size();
    const int M = t_.spec.microbatches;
    for (size_t l = 0; l < L; ++l) graphed_.push_back(t_.spec.layers[l].graphed);
    auto grid = [&] { return std::vector<std::vector<Tensor>>(L, std::vector<Tensor>(M)); };
    s_in_ = grid();
    s_out_ = grid();
    s_gout_ = grid();
    s_gin_ = grid();
    cap_saved_.assign(L, std::vector<Saved>(M));
  }

  ~PerLayerGraphs() override { teardown(); }

  void run(RunResult& out) override {
    const int W = t_.spec.warmup;
    int step = 0;
    try {
      for (; step < W; ++step) out.steps.push_back(warmup_step(step));
    } catch (...) {
      out.failure = failure_from_current_exception("warmup", pos_.pass, pos_.layer, pos_.microbatch, step);
      t_.dev.device_synchronize();
      t_.dev.get_last_error();
      return;
    }
    if (!capture_all(out)) return;
    for (step = W; step < t_.spec.steps(); ++step) {
      try {
        out.steps.push_back(replay_step(step));
      } catch (...) {
        out.failure = failure_from_current_exception("replay", pos_.pass, pos_.layer, pos_.microbatch, step);
        t_.dev.device_synchronize();
        t_.dev.get_last_error();
        return;
      }
    }
  }

  void replay_one(size_t layer, int mb, bool forward) {
    auto it = index_.find({layer, mb, forward});
    if (it == index_.end())
      throw ReplayOrderError("no " + std::string(forward ? "forward" : "backward") + " graph of layer " +
                             std::to_string(layer) + ", microbatch " + std::to_string(mb));
    launch_unit(it->second, t_.main);
  }

 private:
  struct Unit {
    size_t layer = 0;
    int mb = 0;
    bool forward = true;
    device::Graph graph{};
    device::GraphExec exec{};
    std::map<std::string, GraphRngState> rng;
  };

  std::string describe(const Unit& u) const {
    return std::string("the ") + (u.forward ? "forward" : "backward") + " graph of " + t_.layers[u.layer]->name() +
           ", microbatch " + std::to_string(u.mb);
  }

  bool grad_of_inputs() const { return t_.spec.warmup_backward == WarmupBackward::GradOfInputs; }

  StepRecord warmup_step(int step) {
    Trainer::Around around = [this, step](size_t l, int mb, bool fwd, const std::function<void()>& call) {
      pos_ = Position{"warmup", fwd ? "forward" : "backward", t_.layers[l]->name(), mb, step};
      if (!graphed_[l]) {
        call();
        return;
      }
      GraphWarmupScope warmup;
      BackwardStyleScope style(!fwd && grad_of_inputs());
      call();
    };
    return t_.eager_step(step, t_.side, "warmup", around);
  }

  // Captures every graph; on failure fills out.failure and returns false.
  bool capture_all(RunResult& out) {
    const int W = t_.spec.warmup;
    bool any = false;
    for (bool g : graphed_) any = any || g;
    if (!any) return true;  // nothing to capture: every step runs eagerly
    profile::Scope prof(profile::kCapture);  // the synchronizations around it and a failed capture too
    check(t_.dev.device_synchronize(), "cudaDeviceSynchronize", "before capture");
    t_.dev.reset_peak_memory();
    t_.alloc.reset_peaks();
    double t0 = t_.now_ms();
    if (fault_on(Fault::WarmupConsumesRng)) builder_warmup();
    auto saved_rng = t_.rng.save(/*as_handles=*/false);
    if (fault_on(Fault::RestoreAcrossCapture)) pre_capture_rng_ = saved_rng;
    try {
      if (t_.spec.shared_pool) {
        shared_pool_ = t_.alloc.create_pool();
        pools_.push_back(shared_pool_);
      }
      const Shape shape{t_.spec.model.tokens, t_.spec.model.hidden};
      for (size_t l = 0; l < graphed_.size(); ++l) {
        if (!graphed_[l]) continue;
        for (int m = 0; m < t_.spec.microbatches; ++m) {
          if (m > 0 && fault_on(Fault::MicrobatchIndex)) {  // bug class 10: every microbatch on mb 0's buffers
            s_in_[l][m] = s_in_[l][0];
            s_gout_[l][m] = s_gout_[l][0];
            continue;
          }
          s_in_[l][m] = t_.alloc.alloc(shape, t_.spec.model.dtype, device::MemCategory::Other);
          s_gout_[l][m] = t_.alloc.alloc(shape, t_.spec.model.dtype, device::MemCategory::Other);
        }
      }
      if (fault_on(Fault::WarmupMutatesBuffers)) swap_in_weight_cache();
      GraphCaptureScope capturing;
      int f = 0, b = 0;
      for (int e : capture_order()) {
        if (e > 0) {
          for (size_t l = 0; l < graphed_.size(); ++l)
            if (graphed_[l]) capture_unit(l, f, true, W);
          ++f;
        } else {
          for (size_t l = graphed_.size(); l-- > 0;)
            if (graphed_[l]) capture_unit(l, b, false, W);
          ++b;
        }
      }
    } catch (...) {
      out.failure = failure_from_current_exception("capture", pos_.pass, pos_.layer, pos_.microbatch, W);
      abandon_capture(t_.dev, t_.capture);
      if (weights_swapped_) swap_in_weight_cache();
      t_.rng.restore(saved_rng);
      for (Checkpoint* c : t_.checkpoints) c->reset();
      for (auto& row : cap_saved_)
        for (Saved& s : row) s.clear();
      fill_capture_memory(t_, out);
      return false;
    }
    t_.rng.restore(saved_rng);
    check(t_.dev.device_synchronize(), "cudaDeviceSynchronize", "after capture");
    if (fault_on(Fault::WarmupMutatesBuffers)) swap_in_weight_cache();  // the live weights back; graphs keep the cache
    if (fault_on(Fault::FreeUnderGraph)) rebind_static_inputs();
    out.captured = true;
    out.graph_activations = kept_;
    out.graphs = static_cast<int>(units_.size());
    out.held_in_graphs = held_;
    for (const Unit& u : units_) ++(*out.captures)[t_.layers[u.layer]->name()];
    out.capture_ms = t_.now_ms() - t0;
    fill_capture_memory(t_, out);
    return true;
  }

  void capture_unit(size_t l, int m, bool forward, int step) {
    models::Layer& layer = *t_.layers[l];
    pos_ = Position{"capture", forward ? "forward" : "backward", layer.name(), m, step};
    const std::string what = std::string(forward ? "forward" : "backward") + " graph of " + layer.name() +
                             ", microbatch " + std::to_string(m);
    PoolId pool = shared_pool_;
    if (pool == 0) {
      pool = t_.alloc.create_pool();
      pools_.push_back(pool);
    }
    Ctx c = t_.ctx(t_.capture);
    c.microbatch = m;
    c.step = step;
    c.phase = forward ? Phase::Forward : Phase::Backward;

    const auto activations_live = [&] {
      return t_.alloc.stats().tensors[static_cast<int>(device::MemCategory::Activations)].live_bytes;
    };
    const int64_t live_before = activations_live();
    runtime::CapturedGraph g = runtime::capture_graph(t_.dev, t_.alloc, t_.rng, t_.capture, pool, what, [&] {
      if (fault_on(Fault::RestoreAcrossCapture)) t_.rng.restore(pre_capture_rng_);  // bug class 16
      if (forward) {
        const int64_t before = live_activations(t_);
        {
          runtime::LayerScope scope(c, layer.name());
          s_out_[l][m] = layer.forward(c, s_in_[l][m], cap_saved_[l][m]);
        }
        held_[layer.name() + " mb" + std::to_string(m)] = live_activations(t_) - before;
      } else {
        BackwardStyleScope style(grad_of_inputs());
        runtime::LayerScope scope(c, layer.name());
        s_gin_[l][m] = layer.backward(c, s_gout_[l][m], cap_saved_[l][m]);
      }
    });
    if (forward) {
      kept_.resize(t_.layers.size(), 0);
      kept_[l] = std::max(kept_[l], activations_live() - live_before);
    }
    index_[{l, m, forward}] = units_.size();
    units_.push_back(Unit{l, m, forward, g.graph, g.exec, std::move(g.rng)});
  }

  void launch_unit(size_t idx, device::Stream s) {
    if (units_.empty()) throw ReplayOrderError("no graphs were captured");
    if (idx != cursor_ && !fault_on(Fault::PoolOrder))  // pool-order: no check, as make_graphed_callables trusts _order
      throw ReplayOrderError("graph replay out of record order: expected " + describe(units_[cursor_]) + " (graph " +
                             std::to_string(cursor_ + 1) + " of " + std::to_string(units_.size()) + "), got " +
                             describe(units_[idx]));
    const Unit& u = units_[idx];
    check(t_.rng.replay_prologue(u.rng, s), "replay prologue", describe(u));
    check(t_.dev.graph_launch(u.exec, s), "cudaGraphLaunch", describe(u));
    ++replays_[t_.layers[u.layer]->name()];  // what the step launched (observation_of reports it)
    cursor_ = (cursor_ + 1) % units_.size();
  }

  void copy_into(const Tensor& dst, const Tensor& src, device::Stream s) {
    if (dst.data == src.data) return;
    check(t_.dev.memcpy_async(dst.data, src.data, src.bytes(), device::CopyKind::DeviceToDevice, s), "cudaMemcpyAsync",
          "copying into a graph's static buffer");
  }

  StepRecord replay_step(int step) {
    profile::Scope prof(profile::kReplay);
    double t0 = t_.now_ms();
    t_.load_step_data(step);
    t_.begin_step(step, t_.main);
    if (fault_on(Fault::GraphPoolLeak) && !pools_.empty()) take_from_pool(t_, pools_.front(), leaked_);
    Ctx c = t_.ctx(t_.main);
    c.step = step;
    const int M = t_.spec.microbatches;
    const size_t L = t_.layers.size();
    std::vector<std::vector<Saved>> es(M, std::vector<Saved>(L));
    std::vector<Tensor> loss(M), dy(M);
    int f = 0, b = 0, last = -1;
    for (int e : t_.order) {
      if (e > 0) {
        const int m = f++;
        c.microbatch = m;
        c.phase = Phase::Forward;
        Tensor x = t_.input[m];
        for (size_t l = 0; l < L; ++l) {
          pos_ = Position{"replay", "forward", t_.layers[l]->name(), m, step};
          if (graphed_[l]) {
            // static-input-stale (bug class 8): only the first replay refills the static inputs
            if (!(fault_on(Fault::StaticInputStale) && step > t_.spec.warmup)) copy_into(s_in_[l][m], x, t_.main);
            launch_unit(index_.at({l, m, true}), t_.main);
            x = s_out_[l][m];
          } else {
            Tensor y;
            {
              runtime::LayerScope scope(c, t_.layers[l]->name());
              y = t_.layers[l]->forward(c, x, es[m][l]);
            }
            if (l > 0 && !graphed_[l - 1] && t_.discard_pair(l - 1))
              t_.top_checkpoints[l - 1]->discard_output(c, es[m][l - 1], es[m][l]);
            x = y;
          }
        }
        pos_ = Position{"replay", "forward", "loss", m, step};
        loss[m] = models::mse_loss(c, x, t_.target[m], &dy[m]);
      } else {
        const int m = b++;
        c.microbatch = m;
        c.phase = Phase::Backward;
        Tensor g = dy[m];
        for (size_t l = L; l-- > 0;) {
          pos_ = Position{"replay", "backward", t_.layers[l]->name(), m, step};
          if (graphed_[l]) {
            copy_into(s_gout_[l][m], g, t_.main);
            launch_unit(index_.at({l, m, false}), t_.main);
            g = s_gin_[l][m];
          } else {
            if (l > 0 && !graphed_[l - 1] && t_.discard_pair(l - 1)) {
              runtime::LayerScope scope(c, t_.layers[l - 1]->name());
              t_.top_checkpoints[l - 1]->recompute_output(c, es[m][l - 1], es[m][l]);
            }
            runtime::LayerScope scope(c, t_.layers[l]->name());
            g = t_.layers[l]->backward(c, g, es[m][l]);
          }
        }
        // grad-aliases-static: the microbatch's gradients are kept as views of the buffers the
        // graphs accumulate into (no copy), so they read what the step's last replay left there
        const bool aliased = fault_on(Fault::GradAliasesStatic) && !units_.empty();
        if (!aliased) t_.copy_grads(c, m);
        dy[m] = Tensor{};
        last = m;
      }
    }
    if (fault_on(Fault::GradAliasesStatic) && !units_.empty())
      for (int m = 0; m < M; ++m) t_.copy_grads(c, m);
    pos_ = Position{"replay", "", "", -1, step};
    models::sgd_update(c, t_.params, t_.spec.lr);
    StepRecord rec = t_.finish_step(step, "replay", loss, last, t0);
    rec.replays = std::move(replays_);
    replays_.clear();
    return rec;
  }

  // warmup-consumes-rng (bug class 7): a graph builder's own warmup forward of every graphed
  // layer (make_graphed_callables' num_warmup_iters), drawing from the generators, not undone.
  void builder_warmup() {
    Ctx c = t_.ctx(t_.side);
    c.phase = Phase::Forward;
    c.save_for_backward = false;
    c.microbatch = 0;
    c.step = t_.spec.warmup;
    // A sample input of the static input's shape, written before it is read (as the sample args a
    // graph builder is given are real tensors): the static buffers are not filled yet.
    Tensor sample = t_.alloc.alloc(t_.input[0].shape, t_.input[0].dtype, device::MemCategory::Workspace);
    check(t_.dev.memset_async(sample.data, 0, sample.bytes(), t_.side), "cudaMemsetAsync", "the builder's sample input");
    for (size_t l = 0; l < graphed_.size(); ++l) {
      if (!graphed_[l]) continue;
      Saved scratch;
      runtime::LayerScope scope(c, t_.layers[l]->name());
      t_.layers[l]->forward(c, sample, scratch);
    }
    check(t_.dev.device_synchronize(), "cudaDeviceSynchronize", "after the builder's warmup");
  }

  // The order graphs are captured in: the replay order (t_.order), so that graphs sharing a pool
  // reuse memory only as their replays do. pool-order (bug class 13): always one forward then one
  // backward per microbatch, whatever order the replays follow.
  std::vector<int> capture_order() const {
    if (!fault_on(Fault::PoolOrder)) return t_.order;
    std::vector<int> o;
    for (int m = 0; m < t_.spec.microbatches; ++m) o.insert(o.end(), {1, -1});
    return o;
  }

  // warmup-mutates-buffers (bug class 21): a cache of each graphed layer's weights, filled from
  // the weights the warmup left (TransformerEngine's cast cache of is_first_microbatch), is what
  // the capture reads; called again after capture, the live weights are back in place while the
  // graphs keep reading the cache, which no optimizer step reaches.
  void swap_in_weight_cache() {
    for (size_t l = 0; l < graphed_.size(); ++l) {
      if (!graphed_[l]) continue;
      for (models::Param* p : t_.layers[l]->params()) {
        Tensor& cached = weight_cache_[p];
        if (!cached.defined()) {
          cached = t_.alloc.alloc(p->value.shape, p->value.dtype, device::MemCategory::Other);
          check(t_.dev.memcpy_async(cached.data, p->value.data, p->value.bytes(), device::CopyKind::DeviceToDevice,
                                    t_.main),
                "cudaMemcpyAsync", "the weight cache");
          check(t_.dev.device_synchronize(), "cudaDeviceSynchronize", "the weight cache");
        }
        std::swap(p->value, cached);
      }
    }
    weights_swapped_ = !weights_swapped_;
  }

  // free-under-graph (bug class 9): the static inputs are rebound to fresh buffers after capture
  // and the old ones freed, while the graphs still read the old addresses.
  void rebind_static_inputs() {
    const Shape shape{t_.spec.model.tokens, t_.spec.model.hidden};
    for (size_t l = 0; l < graphed_.size(); ++l) {
      if (!graphed_[l]) continue;
      for (int m = 0; m < t_.spec.microbatches; ++m)
        s_in_[l][m] = t_.alloc.alloc(shape, t_.spec.model.dtype, device::MemCategory::Other);
    }
  }

  void teardown() {
    t_.dev.device_synchronize();
    for (Unit& u : units_) {
      if (u.exec.id != 0) t_.dev.graph_exec_destroy(u.exec);
      if (u.graph.id != 0) t_.dev.graph_destroy(u.graph);
    }
    units_.clear();
    for (auto* grid : {&s_in_, &s_out_, &s_gout_, &s_gin_})
      for (auto& row : *grid)
        for (Tensor& x : row) x = Tensor{};
    for (auto& row : cap_saved_)
      for (Saved& s : row) s.clear();
    for (Checkpoint* c : t_.checkpoints) c->reset();
    weight_cache_.clear();
    leaked_.clear();
    for (PoolId p : pools_) {
      try {
        t_.alloc.destroy_pool(p);
      } catch (...) {
      }
    }
    pools_.clear();
  }

  std::vector<bool> graphed_;
  std::vector<std::vector<Tensor>> s_in_, s_out_, s_gout_, s_gin_;  // [layer][microbatch]
  std::vector<std::vector<Saved>> cap_saved_;                        // [layer][microbatch]
  std::vector<Unit> units_;                                          // in record order
  std::map<std::tuple<size_t, int, bool>, size_t> index_;
  std::map<std::string, int> replays_;  // graph launches of the current replay step, by layer
  std::vector<int64_t> kept_;           // per layer: activation bytes its forward graph keeps (RunResult::graph_activations)
  size_t cursor_ = 0;
  PoolId shared_pool_ = 0;
  std::vector<PoolId> pools_;
  std::map<std::string, RngState> pre_capture_rng_;  // restore-across-capture restores it inside
  std::map<models::Param*, Tensor> weight_cache_;     // warmup-mutates-buffers only
  bool weights_swapped_ = false;
  std::map<std::string, int64_t> held_;               // RunResult::held_in_graphs
  std::vector<Tensor> leaked_;                        // graph-pool-leak only
  Position pos_;
};

// ---- full-iteration graph -------------------------------------------------------------------

class FullIterationGraph : public Executor {
 public:
  using Executor::Executor;
  ~FullIterationGraph() override { teardown(); }

  void run(RunResult& out) override {
    const int W = t_.spec.warmup;
    int step = 0;
    try {
      for (; step < W; ++step) out.steps.push_back(t_.eager_step(step, t_.side, "warmup", track("warmup", step)));
    } catch (...) {
      out.failure = failure_from_current_exception("warmup", pos_.pass, pos_.layer, pos_.microbatch, step);
      t_.dev.device_synchronize();
      t_.dev.get_last_error();
      return;
    }
    if (!capture(out)) return;
    for (step = W; step < t_.spec.steps(); ++step) {
      try {
        out.steps.push_back(replay_step(step));
      } catch (...) {
        out.failure = failure_from_current_exception("replay", "", "", -1, step);
        t_.dev.device_synchronize();
        t_.dev.get_last_error();
        return;
      }
    }
  }

 private:
  Trainer::Around track(const std::string& phase, int step) {
    return [this, phase, step](size_t l, int mb, bool fwd, const std::function<void()>& call) {
      pos_ = Position{phase, fwd ? "forward" : "backward", t_.layers[l]->name(), mb, step};
      call();
    };
  }

  bool capture(RunResult& out) {
    profile::Scope prof(profile::kCapture);
    const int W = t_.spec.warmup;
    const int M = t_.spec.microbatches;
    check(t_.dev.device_synchronize(), "cudaDeviceSynchronize", "before capture");
    t_.dev.reset_peak_memory();
    t_.alloc.reset_peaks();
    double t0 = t_.now_ms();
    auto saved_rng = t_.rng.save(/*as_handles=*/false);
    std::vector<std::vector<Saved>> saved(M);
    std::vector<Tensor> dy(M);
    loss_.assign(M, Tensor{});
    try {
      pool_ = t_.alloc.create_pool();
      Ctx c = t_.ctx(t_.capture);
      c.step = W;
      pos_ = Position{"capture", "", "", -1, W};
      runtime::CapturedGraph g = runtime::capture_graph(t_.dev, t_.alloc, t_.rng, t_.capture, pool_, "full-iteration graph", [&] {
        if (fault_on(Fault::RestoreAcrossCapture)) t_.rng.restore(saved_rng);  // bug class 16
        int f = 0, b = 0;
        for (int e : t_.order) {
          if (e > 0) {
            const int64_t before = live_activations(t_);
            t_.forward_microbatch(c, f, saved[f], &loss_[f], &dy[f], track("capture", W));
            held_["mb" + std::to_string(f)] = live_activations(t_) - before;
            ++f;
          } else {
            t_.backward_microbatch(c, b, dy[b], saved[b], track("capture", W));
            dy[b] = Tensor{};
            last_ = b;
            ++b;
          }
        }
        pos_ = Position{"capture", "", "", -1, W};
      });
      graph_ = g.graph;
      exec_ = g.exec;
      rng_ = std::move(g.rng);
    } catch (...) {
      out.failure = failure_from_current_exception("capture", pos_.pass, pos_.layer, pos_.microbatch, W);
      abandon_capture(t_.dev, t_.capture);
      t_.rng.restore(saved_rng);
      for (Checkpoint* c : t_.checkpoints) c->reset();
      fill_capture_memory(t_, out);
      return false;
    }
    t_.rng.restore(saved_rng);
    check(t_.dev.device_synchronize(), "cudaDeviceSynchronize", "after capture");
    rebindings_ = t_.take_rebindings();  // what every replay reads: the addresses the capture baked
    out.captured = true;
    out.graphs = 1;
    out.held_in_graphs = held_;
    out.captures = std::map<std::string, int>{{"iteration", 1}};
    out.capture_ms = t_.now_ms() - t0;
    fill_capture_memory(t_, out);
    return true;
  }

  StepRecord replay_step(int step) {
    profile::Scope prof(profile::kReplay);
    double t0 = t_.now_ms();
    t_.load_step_data(step);
    t_.begin_step(step, t_.main);
    if (fault_on(Fault::GraphPoolLeak)) take_from_pool(t_, pool_, leaked_);
    check(t_.rng.replay_prologue(rng_, t_.main), "replay prologue", "full-iteration graph");
    check(t_.dev.graph_launch(exec_, t_.main), "cudaGraphLaunch", "full-iteration graph");
    Ctx c = t_.ctx(t_.main);
    c.step = step;
    models::sgd_update(c, t_.params, t_.spec.lr);
    StepRecord rec = t_.finish_step(step, "replay", loss_, last_, t0);
    rec.replays["iteration"] = 1;
    rec.rebindings = rebindings_;
    return rec;
  }

  void teardown() {
    t_.dev.device_synchronize();
    if (exec_.id != 0) t_.dev.graph_exec_destroy(exec_);
    if (graph_.id != 0) t_.dev.graph_destroy(graph_);
    exec_ = {};
    graph_ = {};
    loss_.clear();
    leaked_.clear();
    for (Checkpoint* c : t_.checkpoints) c->reset();
    if (pool_ != 0) {
      try {
        t_.alloc.destroy_pool(pool_);
      } catch (...) {
      }
      pool_ = 0;
    }
  }

  PoolId pool_ = 0;
  device::Graph graph_{};
  device::GraphExec exec_{};
  std::map<std::string, GraphRngState> rng_;
  std::vector<Tensor> loss_;  // static: written by each replay
  int last_ = -1;
  std::map<std::string, int64_t> held_;   // RunResult::held_in_graphs
  std::vector<Rebinding> rebindings_;    // observed at capture
  std::vector<Tensor> leaked_;           // graph-pool-leak only
  Position pos_;
};

}  // namespace

std::unique_ptr<Executor> make_executor(Trainer& t) {
  switch (t.spec.executor) {
    case ExecutorKind::Eager: return std::make_unique<EagerExecutor>(t);
    case ExecutorKind::PerLayer: return std::make_unique<PerLayerGraphs>(t);
    case ExecutorKind::FullIteration: return std::make_unique<FullIterationGraph>(t);
  }
  throw std::invalid_argument("unknown executor");
}

void replay_one_graph(Executor& e, size_t layer, int microbatch, bool forward) {
  auto* p = dynamic_cast<PerLayerGraphs*>(&e);
  if (p == nullptr) throw std::invalid_argument("replay_one_graph: not a per-layer executor");
  p->replay_one(layer, microbatch, forward);
}

Session::Session(device::Device& dev, const CaseSpec& spec)
    : faults_(spec.faults), trainer_(std::make_unique<Trainer>(dev, spec)), executor_(make_executor(*trainer_)) {}

Session::~Session() {
  executor_.reset();
  trainer_.reset();
}

std::string unmodelled(const CaseSpec& spec) {
  if (spec.style == CheckpointStyle::NonReentrant && spec.any_checkpoint())
    return "checkpoint_style non-reentrant: recap's runtime does not model torch.utils.checkpoint(use_reentrant=False) "
           "(its checkpoints are reentrant or without-output)";
  if (spec.tp > 1)
    return spec.parallel_dims() + ": recap's runtime runs one rank (a rank group runs it: --sut torch --ranks " +
           std::to_string(spec.ranks()) + ")";
  if (spec.ranks() > 1)  // pp or dp alone: named without the tp 1
    return spec.parallel_dims().substr(5) + ": recap's runtime runs one rank (a rank group runs it: --sut torch --ranks " +
           std::to_string(spec.ranks()) + ")";
  return "";
}

RunResult Session::run() {
  Trainer& t = *trainer_;
  if (std::string why = unmodelled(t.spec); !why.empty()) throw std::invalid_argument(why);
  RunResult r;
  r.spec = t.spec;
  r.backend = device::backend_name(t.dev.backend());
  r.device_name = t.dev.name();
  for (models::Layer* l : t.layers) r.layer_names.push_back(l->name());
  for (models::Param* p : t.params) r.param_names.push_back(p->name);
  r.param_layer = t.param_layer;
  r.step_clock = t.step_clock();
  executor_->run(r);
  r.ledger_summary = t.ledger.summary();
  r.recompute_mismatches = t.ledger.recompute_mismatches().size();
  r.reused_masks = t.ledger.reused_across_steps().size();
  for (const auto& [a, b] : t.ledger.overlapping_draws()) ++(a.offset == b.offset ? r.repeated_draws : r.overlapping_draws);
  r.draw_streams = t.ledger.streams();
  return r;
}

StepRecord Session::eager_step(int step) { return trainer_->eager_step(step, trainer_->main, "eager"); }

RunResult run_case(device::Device& dev, const CaseSpec& spec) {
  Session s(dev, spec);
  return s.run();
}

}  // namespace recap::training
