// Case generators. Every knob is drawn from an integer range (gen::inRange shrinks toward its
// minimum), mapped through a table whose first entry is the simplest value, so RapidCheck's
// shrinking moves toward fewer layers, smaller dims, fewer steps and flags off. Weights bias the
// draw (small dims, graphed layers, checkpoint on) without losing shrinkability
// (gen::weightedElement does not shrink, hence `weighted` below).
#include "properties/generators.h"

#include "models/registry.h"

#include <algorithm>
#include <tuple>
#include <stdexcept>
#include <utility>
#include <vector>

namespace recap::properties {
namespace {

using training::CaseSpec;
using training::CheckpointGranularity;
using training::CheckpointPolicy;
using training::CheckpointStyle;
using training::ExecutorKind;
using runtime::GeneratorMode;

// inRange scales its range by RapidCheck's size (which ramps up within a run); at a fixed nominal
// size the draw is uniform over [min, max) and still shrinks toward min. The distribution is then
// the weights below, whatever the size, which keeps coverage and cost predictable.
rc::Gen<int> uniform(int min, int max) { return rc::gen::resize(rc::kNominalSize, rc::gen::inRange(min, max)); }

// A weighted choice that shrinks toward the first entry.
template <typename T>
rc::Gen<T> weighted(std::vector<std::pair<int, T>> table) {
  int total = 0;
  for (const auto& e : table) total += e.first;
  return rc::gen::map(uniform(0, total), [table](int k) {
    for (const auto& e : table) {
      if (k < e.first) return e.second;
      k -= e.first;
    }
    return table.back().second;
  });
}

template <typename V, typename T>
bool has(const std::vector<V>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The entries of a draw table whose value the system under test runs, in the table's order (so the
// first is still the shrink target). When it runs them all this is the table itself: the draws,
// and every fixed-seed case, are those of a generator that knows no capabilities.
template <typename T, typename Runs>
std::vector<std::pair<int, T>> runnable(std::vector<std::pair<int, T>> table, Runs runs, const char* dimension) {
  std::erase_if(table, [&](const std::pair<int, T>& e) { return !runs(e.second); });
  if (table.empty()) throw std::invalid_argument(std::string("the system under test runs no ") + dimension);
  return table;
}

// What one layer draws, before it is fitted to the case (hidden, style).
struct LayerDraw {
  int kind = 0;
  int heads = 1;
  int ffn_mult = 1;  // ffn_hidden = ffn_mult * hidden (0: the model's default 4 * hidden)
  float dropout = 0.0f;
  int checkpoint = 0;  // 0 none, 1 full, 2 selective
  int roles_mask = 1;  // selective: which of the layer's roles (bit i: the kind's roles[i])
  bool graphed = true;
};

rc::Gen<LayerDraw> gen_layer(const sut::Dims& a) {
  // By index into models::layer_kinds() (simplest first: linear is the shrink target): linear 2,
  // gelu 1, dropout 2, layernorm 1, rmsnorm 1, swiglu 1, mlp 2, attention 2, block 3.
  auto kinds = runnable<int>({{2, 0}, {1, 1}, {2, 2}, {1, 3}, {1, 4}, {1, 5}, {2, 6}, {2, 7}, {3, 8}},
                             [&](int k) { return has(a.kinds, std::string(models::layer_kinds().at(k).kind)); },
                             "layer kind");
  auto checkpoint = runnable<int>({{1, 0}, {3, 1}, {1, 2}},
                                  [&](int g) { return has(a.checkpoint, static_cast<CheckpointGranularity>(g)); },
                                  "checkpoint granularity");
  return rc::gen::build<LayerDraw>(
      rc::gen::set(&LayerDraw::kind, weighted<int>(kinds)),
      rc::gen::set(&LayerDraw::heads, weighted<int>({{2, 1}, {2, 2}, {1, 4}})),
      rc::gen::set(&LayerDraw::ffn_mult, weighted<int>({{4, 1}, {2, 2}, {1, 0}})),
      rc::gen::set(&LayerDraw::dropout, weighted<float>({{2, 0.0f}, {3, 0.1f}, {1, 0.5f}})),
      rc::gen::set(&LayerDraw::checkpoint, weighted<int>(checkpoint)),
      rc::gen::set(&LayerDraw::roles_mask, uniform(1, 8)),
      rc::gen::set(&LayerDraw::graphed, weighted<bool>({{1, false}, {4, true}})));
}

// The case-wide knobs.
struct CaseDraw {
  int hidden = 8;
  int tokens = 4;
  bool bf16 = false;
  std::vector<LayerDraw> layers;
  int style = 0;  // a CheckpointStyle: 0 reentrant, 1 without-output, 2 non-reentrant
  int policy = 2;
  int executor = 0;
  int warmup = 0;
  int replays = 1;
  int microbatches = 1;
  int in_flight = 1;  // microbatch order: forwards ahead of backwards (1: the default order)
  bool host_generator = false;
  bool per_capture = false;
  bool grad_of_inputs = false;
  bool separate_pools = false;
  int param_seed = 1, data_seed = 2, rng_seed = 3;
};

template <typename T, typename A>
void fit(T& value, const std::vector<A>& allowed) {
  if (!allowed.empty() && !has(allowed, value)) value = allowed.front();
}

// A value the case's executor does not run (torch's per-layer graphs warm up with grad-of-inputs
// only, and with a shared pool follow the default microbatch order only) becomes the first value it
// runs, an interleaved order the default one where only that runs; then anything the rules above set (a generator, a warmup backward) that the system does not
// run at all becomes the first it runs. For recap (no restriction, every value) nothing changes.
void fit_to_sut(CaseSpec& s, const sut::Capabilities& caps) {
  auto r = caps.per_executor.find(s.executor);
  if (r != caps.per_executor.end()) {
    const sut::Dims& d = r->second;
    fit(s.model.dtype, d.dtype);
    fit(s.style, d.checkpoint_style);
    fit(s.generator, d.generator);
    fit(s.device_state, d.device_state);
    fit(s.warmup_backward, d.warmup_backward);
    bool shared = s.shared_pool;
    fit(shared, d.shared_pool);
    s.shared_pool = shared;
    if (!d.microbatch_order.empty() && !has(d.microbatch_order, std::string("interleaved"))) s.order.clear();
    if (!d.shared_pool_orders.empty() && !has(d.shared_pool_orders, std::string("interleaved")) && s.shared_pool)
      s.order.clear();
  }
  const sut::Dims& a = caps.all;
  if (!has(a.microbatch_order, std::string("interleaved"))) s.order.clear();  // megatron: the default order only
  fit(s.generator, a.generator);
  fit(s.device_state, a.device_state);
  fit(s.warmup_backward, a.warmup_backward);
  if (s.style == CheckpointStyle::WithoutOutput)  // whole layers only (as drawn below)
    for (auto& f : s.layers)
      if (f.checkpoint == CheckpointGranularity::Selective) {
        f.checkpoint = CheckpointGranularity::Full;
        f.modules.clear();
      }
}

// A case of tp N for a rank group: an executor the group runs (eager: it runs no graphs), and
// heads a multiple of N where one divides hidden (megatron-core splits attention by heads). What
// cannot be fitted (a hidden or ffn width that N does not divide) the group skips, naming the layer.
// Sequence parallel (sp): tokens rounded up to a multiple of N, each rank's rows. Where the group
// splits only some kinds (caps.tp_kinds), a layer of another kind becomes the first of them (its
// selective checkpoint keeping the roles that kind offers, else a full one), so that the draw is a
// case the group runs rather than one it skips.
void fit_to_group(CaseSpec& s, int tp, bool sp, const sut::Capabilities& caps) {
  s.tp = tp;
  s.sp = sp;
  if (sp && s.model.tokens % tp != 0) s.model.tokens += tp - s.model.tokens % tp;
  if (!caps.tp_executor.empty()) fit(s.executor, caps.tp_executor);
  if (!caps.tp_kinds.empty())
    for (size_t i = 0; i < s.model.layers.size(); ++i) {
      auto& l = s.model.layers[i];
      if (has(caps.tp_kinds, l.kind)) continue;
      l.kind = caps.tp_kinds.front();
      auto& f = s.layers[i];
      const auto& roles = models::find_layer_kind(l.kind)->roles;
      std::vector<std::string> kept;
      for (const auto& m : f.modules)
        if (has(roles, m)) kept.push_back(m);
      f.modules = kept;
      if (f.checkpoint == CheckpointGranularity::Selective && kept.empty()) f.checkpoint = CheckpointGranularity::Full;
    }
  for (auto& l : s.model.layers) {
    if (!models::find_layer_kind(l.kind)->uses_heads || l.heads % tp == 0) continue;
    for (int h = tp; h <= 64; h += tp)
      if (s.model.hidden % h == 0) {
        l.heads = h;
        break;
      }
  }
}

// A case of pp P (and V virtual stages) for a rank group: an executor the group runs, and a layer
// count that splits into P * V model chunks (megatron-core gives each num_layers / P / V): the
// drawn layers cut down to a multiple of P * V, or repeated up to P * V where fewer were drawn (so
// a shrunk case keeps one layer per chunk). With V > 1 the microbatches are rounded up to a
// multiple of P (the interleaved schedule refuses a smaller last group of microbatches), in the
// default order; V is dropped where that passes recap's 16 microbatches.
void fit_to_pipeline(CaseSpec& s, int pp, int vp, const sut::Capabilities& caps) {
  s.pp = pp;
  if (!caps.tp_executor.empty()) fit(s.executor, caps.tp_executor);
  const int mbs = (s.microbatches + pp - 1) / pp * pp;
  if (vp > 1 && mbs <= 16) {
    s.vp = vp;
    if (mbs != s.microbatches) s.order.clear();
    s.microbatches = mbs;
  }
  const size_t n = s.layers.size(), k = static_cast<size_t>(pp * s.vp);
  if (n == 0) return;
  const size_t want = n < k ? k : n - n % k;
  std::vector<training::LayerFlags> layers;
  std::vector<models::LayerSpec> model;
  for (size_t i = 0; i < want; ++i) {
    layers.push_back(s.layers[i % n]);
    model.push_back(s.model.layers[i % n]);
  }
  s.layers = std::move(layers);
  s.model.layers = std::move(model);
}

// A case of dp D replicas for a rank group whose tp * pp * D is the size of a group started (else
// left without replicas): an executor the group runs, and microbatches rounded up to a multiple of
// D (of D * P with virtual stages: each replica's own must split into groups of P), in the default
// order (each replica runs its schedule's own); D is dropped where that passes recap's 16.
void fit_to_replicas(CaseSpec& s, int dp, const std::vector<int>& worlds, const sut::Capabilities& caps) {
  if (dp < 2 || std::find(worlds.begin(), worlds.end(), s.tp * s.pp * dp) == worlds.end()) return;
  const int unit = dp * (s.vp > 1 ? s.pp : 1);
  const int mbs = (s.microbatches + unit - 1) / unit * unit;
  if (mbs > 16) return;
  s.dp = dp;
  s.microbatches = mbs;
  s.order.clear();
  if (!caps.tp_executor.empty()) fit(s.executor, caps.tp_executor);
}

}  // namespace

rc::Gen<training::CaseSpec> gen_case(const GenConfig& config) {
  const bool cuda = config.backend == device::Backend::Cuda;
  // Small dims on sim keep the campaign fast (and small cases shrink well); the range still
  // reaches the bounds (hidden 8-64, tokens 4-64). Larger on cuda, where grid sizing and
  // real kernels are what is tested (the fp64 reference bounds its own cost: oracles.cpp).
  rc::Gen<int> hidden = cuda ? weighted<int>({{2, 64}, {2, 128}, {2, 256}, {1, 512}, {1, 1024}})
                             : weighted<int>({{12, 8}, {6, 16}, {2, 24}, {2, 32}, {1, 48}, {1, 64}});
  rc::Gen<int> tokens = cuda ? weighted<int>({{2, 64}, {2, 128}, {1, 256}, {1, 512}})
                             : rc::gen::resize(rc::kNominalSize, rc::gen::oneOf(uniform(4, 9), uniform(4, 9), uniform(4, 9),
                                              uniform(4, 9), uniform(4, 65)));
  // Fewer layers are likelier (cost grows with every layer); shrinks toward one.
  rc::Gen<int> nlayers = weighted<int>({{4, 1}, {4, 2}, {3, 3}, {2, 4}, {1, 5}, {1, 6}, {1, 7}, {1, 8}});

  const std::optional<CheckpointPolicy> fixed = config.policy;
  const sut::Capabilities caps = config.caps;
  const sut::Dims& a = caps.all;
  if (fixed && !has(a.policy, *fixed))
    throw std::invalid_argument("policy " + training::policy_name(*fixed) + ": the system under test does not run it");
  // Each table lists its simplest value first; only the values the system runs are kept.
  auto bf16 = runnable<bool>({{3, false}, {1, true}}, [&](bool b) { return has(a.dtype, b ? models::DType::BF16 : models::DType::F32); }, "dtype");
  std::vector<std::pair<int, int>> styles = {{3, 0}, {1, 1}};
  if (has(a.checkpoint_style, CheckpointStyle::NonReentrant)) styles.push_back({2, 2});  // recap's runtime lists it not
  styles = runnable(styles, [&](int v) { return has(a.checkpoint_style, static_cast<CheckpointStyle>(v)); }, "checkpoint style");
  auto policies = runnable<int>({{1, 0}, {1, 1}, {1, 2}}, [&](int v) { return has(a.policy, static_cast<CheckpointPolicy>(v)); }, "policy");
  auto executors = runnable<int>({{1, 0}, {2, 1}, {2, 2}}, [&](int v) { return has(a.executor, static_cast<ExecutorKind>(v)); }, "executor");
  auto host = runnable<bool>({{1, false}, {1, true}}, [&](bool b) { return has(a.generator, b ? GeneratorMode::Host : GeneratorMode::GraphSafe); }, "generator");
  auto per_capture = runnable<bool>({{1, false}, {1, true}}, [&](bool b) {
    return has(a.device_state, b ? runtime::DeviceStateModel::PerCapture : runtime::DeviceStateModel::Shared); }, "device_state");
  auto grad_of_inputs = runnable<bool>({{3, false}, {1, true}}, [&](bool b) {
    return has(a.warmup_backward, b ? training::WarmupBackward::GradOfInputs : training::WarmupBackward::Backward); }, "warmup_backward");
  auto separate = runnable<bool>({{3, false}, {1, true}}, [&](bool b) { return has(a.shared_pool, !b); }, "shared_pool");
  rc::Gen<LayerDraw> layer = gen_layer(a);
  const bool sound = config.sound_knobs.has_value()
                         ? *config.sound_knobs
                         : (fixed.has_value() && *fixed != CheckpointPolicy::Naive);

  rc::Gen<CaseDraw> draw = rc::gen::mapcat(nlayers, [=](int n) {
    return rc::gen::build<CaseDraw>(
        rc::gen::set(&CaseDraw::hidden, hidden), rc::gen::set(&CaseDraw::tokens, tokens),
        rc::gen::set(&CaseDraw::bf16, weighted<bool>(bf16)),
        rc::gen::set(&CaseDraw::layers, rc::gen::container<std::vector<LayerDraw>>(static_cast<size_t>(n), layer)),
        rc::gen::set(&CaseDraw::style, weighted<int>(styles)),
        rc::gen::set(&CaseDraw::policy, weighted<int>(policies)),  // equal weights: uniform(0, 3) for recap
        rc::gen::set(&CaseDraw::executor, weighted<int>(executors)),
        rc::gen::set(&CaseDraw::warmup, uniform(0, 4)),
        rc::gen::set(&CaseDraw::replays, uniform(1, 5)),
        rc::gen::set(&CaseDraw::microbatches, weighted<int>({{4, 1}, {3, 2}, {1, 3}, {1, 4}})),
        rc::gen::set(&CaseDraw::in_flight, uniform(1, 5)),
        rc::gen::set(&CaseDraw::host_generator, weighted<bool>(host)),
        rc::gen::set(&CaseDraw::per_capture, weighted<bool>(per_capture)),
        rc::gen::set(&CaseDraw::grad_of_inputs, weighted<bool>(grad_of_inputs)),
        rc::gen::set(&CaseDraw::separate_pools, weighted<bool>(separate)),
        rc::gen::set(&CaseDraw::param_seed, uniform(1, 1000)),
        rc::gen::set(&CaseDraw::data_seed, uniform(1, 1000)),
        rc::gen::set(&CaseDraw::rng_seed, uniform(1, 1000)));
  });

  std::vector<int> worlds = caps.worlds;
  if (worlds.empty()) {
    int world = 1;
    for (int v : caps.tp) world = std::max(world, v);
    for (int v : caps.pp) world = std::max(world, v);
    for (int v : caps.dp) world = std::max(world, v);
    worlds = {world};
  }
  std::sort(worlds.begin(), worlds.end());
  auto build = [=](const CaseDraw& d, int tp, int pp, bool sp, int vp, int dp) {
    CaseSpec s;
    s.name = "generated";
    s.model.hidden = d.hidden;
    s.model.tokens = d.tokens;
    s.model.dtype = d.bf16 ? models::DType::BF16 : models::DType::F32;
    s.style = static_cast<CheckpointStyle>(d.style);
    for (const LayerDraw& ld : d.layers) {
      models::LayerSpec l;
      const models::LayerKind& kind = models::layer_kinds().at(static_cast<size_t>(ld.kind));
      l.kind = kind.kind;
      l.heads = kind.uses_heads ? ld.heads : 1;
      l.ffn_hidden = kind.uses_ffn ? ld.ffn_mult * d.hidden : 0;
      l.dropout = kind.draws ? ld.dropout : 0.0f;
      training::LayerFlags f;
      f.graphed = ld.graphed;
      const auto& roles = kind.roles;
      if (ld.checkpoint == 1 || (ld.checkpoint == 2 && (roles.empty() || s.style == CheckpointStyle::WithoutOutput))) {
        f.checkpoint = CheckpointGranularity::Full;
      } else if (ld.checkpoint == 2) {
        f.checkpoint = CheckpointGranularity::Selective;
        for (size_t i = 0; i < roles.size(); ++i)
          if (ld.roles_mask & (1 << i)) f.modules.push_back(roles[i]);
        if (f.modules.empty()) f.modules.push_back(roles[0]);
      }
      s.model.layers.push_back(l);
      s.layers.push_back(f);
    }
    // Policy: shrinks toward naive when drawn (the simplest: checkpoint as in eager mode).
    s.policy = fixed ? *fixed : static_cast<CheckpointPolicy>(d.policy);
    s.executor = static_cast<ExecutorKind>(d.executor);
    s.warmup = d.warmup;
    s.replays = d.replays;
    s.microbatches = d.microbatches;
    // A valid order: forwards run up to `in_flight` microbatches ahead of their backwards (1F1B
    // with a warmup of in_flight forwards). in_flight 1 is the default order (left empty).
    int w = std::min(d.in_flight, d.microbatches);
    if (w > 1) {
      int f = 0, b = 0;
      while (b < d.microbatches) {
        if (f < d.microbatches && f - b < w) {
          s.order.push_back(1);
          ++f;
        } else {
          s.order.push_back(-1);
          ++b;
        }
      }
    }
    s.generator = d.host_generator ? GeneratorMode::Host : GeneratorMode::GraphSafe;
    s.device_state = d.per_capture ? runtime::DeviceStateModel::PerCapture : runtime::DeviceStateModel::Shared;
    s.warmup_backward = d.grad_of_inputs ? training::WarmupBackward::GradOfInputs : training::WarmupBackward::Backward;
    if (sound) {
      // Knobs broken by construction whatever the checkpoint policy (a host generator under
      // graphs bakes its offsets, bug classes 4/5; reentrant checkpoints refuse a grad-of-inputs
      // warmup backward, Megatron-LM #2758) stay in their sound setting.
      if (s.executor != ExecutorKind::Eager) s.generator = GeneratorMode::GraphSafe;
      if (s.style == CheckpointStyle::Reentrant) s.warmup_backward = training::WarmupBackward::Backward;
      if (s.policy == CheckpointPolicy::Skip) {
        // Outside the graph phases `skip` checkpoints as naive does, which is sound with a host
        // generator (true snapshots) and wrong with a graph-safe one (live handles, bug class 3)
        // wherever a checkpointed region draws eagerly. Eager cases take the host generator;
        // graphed cases keep the graph-safe one and no dropout inside checkpointed layers.
        if (s.executor == ExecutorKind::Eager) {
          s.generator = GeneratorMode::Host;
        } else {
          for (size_t i = 0; i < s.layers.size(); ++i)
            if (s.layers[i].checkpoint != CheckpointGranularity::None) s.model.layers[i].dropout = 0.0f;
        }
      }
    }
    if (!sound && fixed && *fixed == CheckpointPolicy::Naive && s.executor != ExecutorKind::Eager) {
      // A naive campaign judges naive under graphs with the host generator (its capture failure,
      // bug class 14); naive's other defect, live RNG handles with a graph-safe generator (bug
      // class 3), shows eagerly and is explored by eager cases (and by campaigns that draw the
      // policy). Otherwise the eager defect, found in any graphed case too, masks the capture one.
      s.generator = GeneratorMode::Host;
    }
    s.shared_pool = !d.separate_pools;
    s.param_seed = static_cast<uint64_t>(d.param_seed);
    s.data_seed = static_cast<uint64_t>(d.data_seed);
    s.rng_seed = static_cast<uint64_t>(d.rng_seed);
    for (size_t i = 0; i < s.layers.size(); ++i) {
      if (config.no_checkpoint) {
        s.layers[i].checkpoint = CheckpointGranularity::None;
        s.layers[i].modules.clear();
      }
      if (config.no_dropout) s.model.layers[i].dropout = 0.0f;
    }
    s.faults = config.faults;
    fit_to_sut(s, caps);
    if (tp > 1) fit_to_group(s, tp, sp, caps);
    if (pp > 1) fit_to_pipeline(s, pp, vp, caps);
    fit_to_replicas(s, dp, worlds, caps);
    return s;
  };
  // One rank only (every system without --ranks): no tp draw, so the draws and every fixed-seed
  // case are what they were.
  if (caps.tp.empty() && caps.pp.empty() && caps.dp.empty())
    return rc::gen::map(draw, [=](const CaseDraw& d) { return build(d, 1, 1, false, 1, 1); });
  // A rank group: the group's shape (tp, pp) is drawn first, so that RapidCheck shrinks it first,
  // toward (1, 1) (a failure that still happens on one rank is no cross-rank bug), keeping N where
  // only N fails. Shapes the groups run: tp * pp is the size of one of them (caps.worlds; without
  // it, the one group whose size is the largest tp or pp value: a group of 4 lists tp [2, 4] and
  // pp [2, 4], and runs tp 4, pp 4, or tp 2 with pp 2), smaller groups first, toward which the
  // larger shrink; and, where the groups run sequence parallelism, each shape of tp > 1 with sp
  // (after the shapes without it, toward which they shrink). A shape is tp * 1000 + pp * 10 + sp.
  // Virtual stages are a draw of their own after the case's (so that the shape and the case draw
  // what they drew before vp existed), used where pp > 1 and shrinking toward none; data-parallel
  // replicas one after that, used where the shape's tp * pp * dp is a group's size (one rank's
  // shape becomes dp replicas of one rank) and shrinking toward none.
  std::vector<int> tp_values = {1}, pp_values = {1};
  tp_values.insert(tp_values.end(), caps.tp.begin(), caps.tp.end());
  pp_values.insert(pp_values.end(), caps.pp.begin(), caps.pp.end());
  std::vector<std::pair<int, int>> shapes = {{1, 1010}};  // (weight, shape): one rank first
  for (int w : worlds)
    for (int t : tp_values)
      for (int p : pp_values)
        if (t * p > 1 && t * p == w) shapes.push_back({2, t * 1000 + p * 10});
  if (caps.sp)
    for (size_t i = 1, n = shapes.size(); i < n; ++i)
      if (shapes[i].second / 1000 > 1) shapes.push_back({2, shapes[i].second + 1});
  std::vector<std::pair<int, int>> vps = {{2, 1}};
  for (int v : caps.vp) vps.push_back({1, v});
  // as likely as not where a group runs it (it applies only where tp * pp * dp is a group's size)
  std::vector<std::pair<int, int>> dps = {{std::max(1, static_cast<int>(caps.dp.size())), 1}};
  for (int v : caps.dp) dps.push_back({1, v});
  return rc::gen::map(rc::gen::tuple(weighted<int>(shapes), draw, weighted<int>(vps), weighted<int>(dps)),
                      [=](const std::tuple<int, CaseDraw, int, int>& t) {
                        const int shape = std::get<0>(t);
                        return build(std::get<1>(t), shape / 1000, shape % 1000 / 10, shape % 10 == 1, std::get<2>(t),
                                     std::get<3>(t));
                      });
}

}  // namespace recap::properties
