// The memory model (memory_model.h). A forward is played on symbolic storages: each has its bytes
// and whether it is an activation (the category the allocator counts); a top-level layer's saved
// record is the set of storages it references (children flattened), and what a forward leaves
// allocated is every distinct activation some record, checkpoint record or static output still
// references once it is over. Sizes follow the layers' own tensors: outputs in the model's dtype,
// layernorm statistics and dropout masks (32 elements a word) in fp32.
#include "properties/memory_model.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <vector>

namespace recap::properties {

namespace {

using training::CaseSpec;
using training::CheckpointGranularity;
using training::CheckpointPolicy;
using training::CheckpointStyle;
using training::ExecutorKind;

struct Sto {
  int id = 0;
  int64_t numel = 0;
  int64_t bytes = 0;
  bool activation = false;
};
using Held = std::vector<int>;  // storage ids a record references

class Forward {
 public:
  explicit Forward(const CaseSpec& s)
      : s_(s), elt_(s.model.dtype == models::DType::BF16 ? 2 : 4), T_(s.model.tokens), H_(s.model.hidden) {}

  // A fresh storage of `numel` elements of the model's dtype (fp32 when `fp32`).
  Sto fresh(int64_t numel, bool activation, bool fp32 = false) {
    Sto x{static_cast<int>(all_.size()), numel, numel * (fp32 ? 4 : elt_), activation};
    all_.push_back(x);
    return x;
  }
  // The input of a forward: the microbatch's input or a graph's static input (not an activation).
  Sto input() { return fresh(T_ * H_, false); }

  // Layer l's forward with its checkpoint flags (a whole-layer checkpoint's record of its output,
  // without-output style, goes to `record`).
  Sto layer(size_t l, const Sto& x, Held& saved, Held& record) {
    const training::LayerFlags& f = s_.layers[l];
    const models::LayerSpec& spec = s_.model.layers[l];
    auto body = [this, &f, &spec](const Sto& in, bool save, Held& sv) { return kind(spec, f, in, save, sv); };
    if (f.checkpoint == CheckpointGranularity::Full) return checkpoint(x, saved, &record, body);
    return body(x, true, saved);
  }

  int64_t held_bytes(const std::vector<const Held*>& holders) const {
    std::set<int> ids;
    for (const Held* h : holders) ids.insert(h->begin(), h->end());
    int64_t n = 0;
    for (int id : ids)
      if (all_[static_cast<size_t>(id)].activation) n += all_[static_cast<size_t>(id)].bytes;
    return n;
  }

 private:
  using Body = std::function<Sto(const Sto&, bool, Held&)>;

  // Checkpoint::forward: the region runs without saving; its record keeps the input and a token
  // (graph-safe: the 16-byte device RNG pair, an activation; naive, skip: a 4-byte key of another
  // category). Skip bypasses reentrant checkpoints while per-layer graphs capture (PR #3919):
  // the region saves everything, as without a checkpoint.
  Sto checkpoint(const Sto& x, Held& saved, Held* record, const Body& inner) {
    const bool bypass = s_.policy == CheckpointPolicy::Skip && s_.style == CheckpointStyle::Reentrant &&
                        s_.executor == ExecutorKind::PerLayer;
    if (bypass) return inner(x, true, saved);
    const bool graph_safe = s_.policy == CheckpointPolicy::GraphSafe;
    Sto token = fresh(graph_safe ? 4 : 1, graph_safe, true);
    Held scratch;
    Sto y = inner(x, false, scratch);
    saved.push_back(x.id);
    saved.push_back(token.id);
    if (record != nullptr && s_.style == CheckpointStyle::WithoutOutput) record->push_back(y.id);
    return y;
  }

  // A sub-module checkpointed when the layer's selective checkpoint names its role.
  Sto maybe(const training::LayerFlags& f, const char* role, const Sto& x, bool save, Held& saved, const Body& inner) {
    const bool wrap = save && f.checkpoint == CheckpointGranularity::Selective &&
                      std::find(f.modules.begin(), f.modules.end(), role) != f.modules.end();
    return wrap ? checkpoint(x, saved, nullptr, inner) : inner(x, save, saved);
  }

  static void keep(bool save, Held& saved, std::initializer_list<Sto> xs) {
    if (save)
      for (const Sto& x : xs) saved.push_back(x.id);
  }

  Sto linear(const Sto& x, int64_t out, bool save, Held& saved) {
    Sto y = fresh(T_ * out, true);
    keep(save, saved, {x});
    return y;
  }
  Sto norm(const Sto& x, bool rms, bool save, Held& saved) {
    Sto y = fresh(x.numel, true);
    if (save) {
      keep(true, saved, {x, fresh(T_, true, true)});        // rstd
      if (!rms) keep(true, saved, {fresh(T_, true, true)});  // mean
    }
    return y;
  }
  Sto gelu(const Sto& x, bool save, Held& saved) {
    Sto y = fresh(x.numel, true);
    keep(save, saved, {x});
    return y;
  }
  static int64_t mask_words(int64_t n) { return (n + 31) / 32; }
  Sto dropout(const Sto& x, float p, bool save, Held& saved) {
    if (p == 0.0f) return x;  // returns its input: no draw, no copy
    Sto y = fresh(x.numel, true);
    Sto mask = fresh(mask_words(x.numel), save, true);
    keep(save, saved, {mask});
    return y;
  }
  Sto core(const Sto& qkv, int64_t heads, float p, bool save, Held& saved) {
    Sto P = fresh(heads * T_ * T_, save);
    if (save) keep(true, saved, {qkv, P});
    if (p > 0.0f) keep(save, saved, {fresh(mask_words(heads * T_ * T_), save, true)});
    return fresh(T_ * H_, true);
  }
  Sto attention(const training::LayerFlags& f, const models::LayerSpec& l, const Sto& x, bool save, Held& saved) {
    Sto a = linear(x, 3 * H_, save, saved);
    a = maybe(f, "attn_core", a, save, saved,
              [&](const Sto& in, bool sv, Held& h) { return core(in, l.heads, l.dropout, sv, h); });
    return linear(a, H_, save, saved);
  }
  Sto mlp(const models::LayerSpec& l, const Sto& x, bool save, Held& saved) {
    const int64_t F = ffn(l);
    Sto a = linear(x, F, save, saved);
    a = gelu(a, save, saved);
    a = linear(a, H_, save, saved);
    return dropout(a, l.dropout, save, saved);
  }
  Sto swiglu(const models::LayerSpec& l, const Sto& x, bool save, Held& saved) {
    const int64_t F = ffn(l);
    Sto g = linear(x, F, save, saved);
    Sto u = linear(x, F, save, saved);
    Sto h = fresh(T_ * F, true);
    Sto y = linear(h, H_, save, saved);
    keep(save, saved, {g, u});
    return y;
  }
  Sto block(const training::LayerFlags& f, const models::LayerSpec& l, const Sto& x, bool save, Held& saved) {
    auto ln = [this](const Sto& in, bool sv, Held& h) { return norm(in, false, sv, h); };
    Sto a = maybe(f, "norm", x, save, saved, ln);
    a = attention(f, l, a, save, saved);
    a = dropout(a, l.dropout, save, saved);
    Sto h = fresh(T_ * H_, true);  // x + a
    Sto m = maybe(f, "norm", h, save, saved, ln);
    m = maybe(f, "mlp", m, save, saved, [&](const Sto& in, bool sv, Held& hd) { return mlp(l, in, sv, hd); });
    return fresh(T_ * H_, true);  // h + m
  }
  int64_t ffn(const models::LayerSpec& l) const { return l.ffn_hidden > 0 ? l.ffn_hidden : 4 * H_; }

  Sto kind(const models::LayerSpec& l, const training::LayerFlags& f, const Sto& x, bool save, Held& saved) {
    const std::string& k = l.kind;
    if (k == "linear") return linear(x, H_, save, saved);
    if (k == "gelu") return gelu(x, save, saved);
    if (k == "dropout") return dropout(x, l.dropout, save, saved);
    if (k == "layernorm") return norm(x, false, save, saved);
    if (k == "rmsnorm") return norm(x, true, save, saved);
    if (k == "swiglu") return swiglu(l, x, save, saved);
    if (k == "mlp") return mlp(l, x, save, saved);
    if (k == "attention") return attention(f, l, x, save, saved);
    if (k == "block") return block(f, l, x, save, saved);
    throw std::invalid_argument("memory model: no layer kind '" + k + "'");
  }

  const CaseSpec& s_;
  const int64_t elt_, T_, H_;
  std::vector<Sto> all_;
};

// Trainer::discard_pair: the without-output protocol between layer l and its consumer l + 1.
bool discard_pair(const CaseSpec& s, size_t l) {
  return s.style == CheckpointStyle::WithoutOutput && l + 1 < s.layers.size() &&
         s.layers[l].checkpoint == CheckpointGranularity::Full && s.layers[l + 1].checkpoint != CheckpointGranularity::Full;
}

}  // namespace

std::map<std::string, int64_t> predicted_held_in_graphs(const CaseSpec& spec) {
  std::map<std::string, int64_t> out;
  const size_t L = spec.layers.size();
  if (spec.executor == ExecutorKind::PerLayer) {
    // Each graphed layer's forward graph, per microbatch, from its static input: it holds what it
    // saved and its output (the graph's static output).
    for (size_t l = 0; l < L; ++l) {
      if (!spec.layers[l].graphed) continue;
      for (int m = 0; m < spec.microbatches; ++m) {
        Forward f(spec);
        Held saved, record, output;
        output.push_back(f.layer(l, f.input(), saved, record).id);
        out[spec.model.layers[l].kind + std::to_string(l) + " mb" + std::to_string(m)] =
            f.held_bytes({&saved, &record, &output});
      }
    }
  } else if (spec.executor == ExecutorKind::FullIteration) {
    // Each microbatch's forward through every layer: what the layers saved, with the outputs the
    // without-output protocol discarded (after the consumer's forward) let go.
    for (int m = 0; m < spec.microbatches; ++m) {
      Forward f(spec);
      std::vector<Held> saved(L), record(L);
      std::vector<Sto> in(L), out_of(L);
      Sto x = f.input();
      for (size_t l = 0; l < L; ++l) {
        in[l] = x;
        out_of[l] = f.layer(l, x, saved[l], record[l]);
        if (l > 0 && discard_pair(spec, l - 1) && !record[l - 1].empty() && out_of[l - 1].id != in[l - 1].id) {
          // Checkpoint::discard_output: every reference of the consumer's record becomes a hole,
          // and the checkpoint's record lets its output go (an output that is its input stays).
          const int o = out_of[l - 1].id;
          std::erase(saved[l], o);
          record[l - 1].clear();
        }
        x = out_of[l];
      }
      std::vector<const Held*> holders;
      for (size_t l = 0; l < L; ++l) holders.insert(holders.end(), {&saved[l], &record[l]});
      out["mb" + std::to_string(m)] = f.held_bytes(holders);
    }
  }
  return out;
}


// ---- the capture: storage lifetimes through a model of the graph pools ------------------------
//
// Each storage is a reference-counted handle (as a runtime Tensor shares its Storage): it goes back
// to its pool when its last holder drops it, so the order of frees follows from who holds what,
// written below per layer kind from the design (models/layers.h, training/checkpoint.h): a layer's
// forward allocates its output (and its statistics, masks, probabilities) and saves references to
// what its backward reads; its backward allocates its input gradient (workspace) and clears what
// it saved; a container drops a child's output when the next child's output replaces it.

namespace cap {

class Pools;

struct Buf {
  Pools* owner = nullptr;
  int64_t numel = 0;
  int64_t bytes = 0;
  bool activation = false;
  int pool = -1;      // -1: outside every pool (the executor's static buffers, the batch)
  int64_t block = 0;  // the pool block it holds
  ~Buf();
};
using T = std::shared_ptr<Buf>;

class Pools {
 public:
  int active = -1;
  std::vector<std::multiset<int64_t>> free;  // per pool: its free blocks' sizes
  CaptureMemory m;

  int create() {
    free.emplace_back();
    ++m.pools;
    return static_cast<int>(free.size()) - 1;
  }
  // A tensor of `numel` elements of `elt` bytes from the active pool: the smallest free block that
  // is large enough, else a new block of the request rounded up to 512 bytes. (Among free blocks of
  // one size, which one is taken changes no figure: blocks are never split.)
  T alloc(int64_t numel, int64_t elt, bool activation) {
    auto b = std::make_shared<Buf>();
    b->owner = this;
    b->numel = numel;
    b->bytes = numel * elt;
    b->activation = activation;
    b->pool = active;
    if (active >= 0) {
      ++m.allocations;
      if (b->bytes > 0) {
        const int64_t need = (b->bytes + 511) / 512 * 512;
        auto& f = free[static_cast<size_t>(active)];
        if (auto it = f.lower_bound(need); it != f.end()) {
          b->block = *it;
          f.erase(it);
        } else {
          b->block = need;
          m.pool_reserved += need;
        }
        m.pool_used += b->block;
      }
    }
    if (activation) {
      live_ += b->bytes;
      m.activations_peak = std::max(m.activations_peak, live_);
    }
    return b;
  }
  void release(const Buf& b) {
    if (b.activation) live_ -= b.bytes;
    if (b.pool >= 0 && b.bytes > 0) {
      free[static_cast<size_t>(b.pool)].insert(b.block);
      m.pool_used -= b.block;
    }
  }
  int64_t live_activations() const { return live_; }

 private:
  int64_t live_ = 0;
};

Buf::~Buf() {
  if (owner != nullptr) owner->release(*this);
}

struct Rec;
// A layer's saved record (models::Saved); a checkpoint's also carries its Record (the checkpoint
// keeps it by its token, created at forward and erased at the end of its backward, as here).
struct Sv {
  std::vector<T> t;
  std::vector<Sv> c;
  std::shared_ptr<Rec> rec;
  void clear() {
    t.clear();
    c.clear();
  }
};
struct Rec {
  T output;  // without-output style: the output, until discarded
  Sv inner;  // the recompute's record
  std::vector<T*> holes;
  bool discarded = false, recomputed = false;
};

class Run {
 public:
  Run(const CaseSpec& s, Pools& p)
      : s_(s), p_(p), elt_(s.model.dtype == models::DType::BF16 ? 2 : 4), T_(s.model.tokens), H_(s.model.hidden) {}

  // A [tokens, hidden] buffer outside the pools (a graph's static input, a microbatch's batch).
  T outside() {
    auto b = std::make_shared<Buf>();
    b->numel = T_ * H_;
    return b;
  }

  // Top-level layer l: its kind, wrapped in a checkpoint (role "block") when Full.
  T forward(size_t l, const T& x, Sv& s) {
    if (s_.layers[l].checkpoint == CheckpointGranularity::Full)
      return ckpt_f(x, s, [this, l](const T& in, Sv& sv) { return kind_f(l, in, sv); });
    return kind_f(l, x, s);
  }

  // Checkpoint::discard_output and ::recompute_output (full-iteration: both units captured).
  void discard_output(Sv& own, Sv& consumer) {
    if (bypassed(own) || own.t.size() != 2 || !own.rec) return;
    Rec& rec = *own.rec;
    if (rec.discarded || !rec.output) return;
    if (rec.output == own.t[0]) return;  // an output that is its input is kept (Megatron-LM #4497)
    collect_holes(consumer, rec.output.get(), rec.holes);
    for (T* h : rec.holes) h->reset();
    rec.output.reset();
    rec.discarded = true;
  }
  void recompute_output(size_t l, Sv& own) {
    if (bypassed(own) || own.t.size() != 2 || !own.rec) return;
    Rec& rec = *own.rec;
    if (!rec.discarded || rec.recomputed) return;
    T y = recompute(own.t[0], rec, [this, l](const T& in, Sv& sv) { return kind_f(l, in, sv); });
    for (T* h : rec.holes) *h = y;
    rec.holes.clear();
    rec.recomputed = true;
  }

 private:
  using Fn = std::function<T(const T&, Sv&)>;

  static bool bypassed(const Sv& s) { return s.t.empty() && s.c.size() == 1; }
  static void collect_holes(Sv& s, const Buf* target, std::vector<T*>& out) {
    for (T& t : s.t)
      if (t.get() == target) out.push_back(&t);
    for (Sv& c : s.c) collect_holes(c, target, out);
  }

  T act(int64_t numel) { return p_.alloc(numel, elt_, true); }
  T work(int64_t numel) { return p_.alloc(numel, elt_, false); }
  T f32(int64_t numel, bool activation) { return p_.alloc(numel, 4, activation); }

  // Checkpoint::forward and ::backward.
  T ckpt_f(const T& x, Sv& s, const Fn& inner) {
    s.clear();
    if (!save_) {
      Sv scratch;
      return inner(x, scratch);
    }
    const bool bypass = s_.policy == CheckpointPolicy::Skip && s_.style == CheckpointStyle::Reentrant &&
                        s_.executor == ExecutorKind::PerLayer;  // capturing: GraphCaptureScope
    if (bypass) {
      s.c.resize(1);
      return inner(x, s.c[0]);
    }
    // graph-safe: the 16-byte device pair (an activation); naive, skip: a 4-byte key (other),
    // their RNG states being handles of the graph-safe generator (a host generator cannot capture)
    T token = s_.policy == CheckpointPolicy::GraphSafe ? f32(4, true) : f32(1, false);
    T y;
    {
      Sv scratch;
      save_ = false;
      y = inner(x, scratch);
      save_ = true;
    }
    s.t = {x, token};
    s.rec = std::make_shared<Rec>();
    if (s_.style == CheckpointStyle::WithoutOutput) s.rec->output = y;
    return y;
  }
  T recompute(const T& x, Rec& rec, const Fn& inner) {
    rec.inner.clear();
    const bool old = save_;
    save_ = true;
    T y = inner(x, rec.inner);
    save_ = old;
    return y;
  }
  T ckpt_b(const T& dy, Sv& s, const Fn& inner_f, const Fn& inner_b) {
    if (bypassed(s)) {
      T dx = inner_b(dy, s.c[0]);
      s.clear();
      return dx;
    }
    Rec& rec = *s.rec;
    if (!rec.recomputed) recompute(s.t[0], rec, inner_f);  // its output dropped at once
    T dx = inner_b(dy, rec.inner);
    s.rec.reset();  // records_.erase
    s.clear();
    return dx;
  }

  // A sub-module wrapped in a checkpoint when the layer's selective checkpoint names its role.
  bool wrapped(size_t l, const char* role) const {
    const training::LayerFlags& f = s_.layers[l];
    return f.checkpoint == CheckpointGranularity::Selective &&
           std::find(f.modules.begin(), f.modules.end(), role) != f.modules.end();
  }
  T maybe_f(size_t l, const char* role, const T& x, Sv& s, const Fn& f) { return wrapped(l, role) ? ckpt_f(x, s, f) : f(x, s); }
  T maybe_b(size_t l, const char* role, const T& dy, Sv& s, const Fn& f, const Fn& b) {
    return wrapped(l, role) ? ckpt_b(dy, s, f, b) : b(dy, s);
  }

  // ---- the layer kinds (models/layers.cpp) ----
  T linear_f(const T& x, int64_t out, Sv& s) {
    T y = act(T_ * out);
    s.clear();
    if (save_) s.t = {x};
    return y;
  }
  T linear_b(Sv& s, int64_t in) {
    T x = s.t.at(0);
    T dx = work(T_ * in);
    s.clear();
    return dx;
  }
  T norm_f(const T& x, bool rms, Sv& s) {
    T y = act(x->numel);
    T mean, rstd;
    if (save_) {
      if (!rms) mean = f32(T_, true);
      rstd = f32(T_, true);
    }
    s.clear();
    if (save_) s.t = rms ? std::vector<T>{x, rstd} : std::vector<T>{x, rstd, mean};
    return y;
  }
  T norm_b(Sv& s) {
    T x = s.t.at(0);
    T rstd = s.t.at(1);
    T dx = work(x->numel);
    s.clear();
    return dx;
  }
  T gelu_f(const T& x, Sv& s) {
    T y = act(x->numel);
    s.clear();
    if (save_) s.t = {x};
    return y;
  }
  T gelu_b(Sv& s) {
    T x = s.t.at(0);
    T dx = work(x->numel);
    s.clear();
    return dx;
  }
  static int64_t words(int64_t n) { return (n + 31) / 32; }
  T dropout_f(const T& x, float p, Sv& s) {
    s.clear();
    if (p == 0.0f) return x;
    T y = act(x->numel);
    T mask = f32(words(x->numel), save_);
    if (save_) s.t = {mask};
    return y;
  }
  T dropout_b(const T& dy, Sv& s) {
    T dx = work(dy->numel);
    s.clear();
    return dx;
  }
  T core_f(const T& qkv, int64_t heads, float p, Sv& s) {
    s.clear();
    T P = act_or_work(heads * T_ * T_, elt_);
    T mask;
    if (p > 0.0f) mask = act_or_work(words(heads * T_ * T_), 4);
    T out = act(T_ * H_);
    if (save_) {
      s.t = {qkv, P};
      if (mask) s.t.push_back(mask);
    }
    return out;
  }
  T act_or_work(int64_t numel, int64_t elt) { return p_.alloc(numel, elt, save_); }
  T core_b(int64_t heads, Sv& s) {
    T qkv = s.t.at(0);
    T P = s.t.at(1);
    T dS = f32(heads * T_ * T_, false);
    T dqkv = work(qkv->numel);
    s.clear();
    return dqkv;
  }
  // A chain of children (Attention, Mlp): each output replaces the previous one.
  T chain_f(const std::vector<Fn>& chain, const T& x, Sv& s) {
    s.clear();
    s.c.resize(chain.size());
    T h = x;
    for (size_t i = 0; i < chain.size(); ++i) h = chain[i](h, s.c[i]);
    if (!save_) s.clear();
    return h;
  }
  T chain_b(const std::vector<Fn>& chain, const T& dy, Sv& s) {
    T d = dy;
    for (size_t i = chain.size(); i-- > 0;) d = chain[i](d, s.c[i]);
    s.clear();
    return d;
  }
  int64_t ffn(size_t l) const {
    const models::LayerSpec& k = s_.model.layers[l];
    return k.ffn_hidden > 0 ? k.ffn_hidden : 4 * H_;
  }
  std::vector<Fn> attention_chain(size_t l, bool fwd) {
    const models::LayerSpec& k = s_.model.layers[l];
    Fn core_f_ = [this, &k](const T& in, Sv& sv) { return core_f(in, k.heads, k.dropout, sv); };
    Fn core_b_ = [this, &k](const T& d, Sv& sv) { (void)d; return core_b(k.heads, sv); };
    if (fwd)
      return {[this](const T& in, Sv& sv) { return linear_f(in, 3 * H_, sv); },
              [this, l, core_f_](const T& in, Sv& sv) { return maybe_f(l, "attn_core", in, sv, core_f_); },
              [this](const T& in, Sv& sv) { return linear_f(in, H_, sv); }};
    return {[this](const T&, Sv& sv) { return linear_b(sv, H_); },
            [this, l, core_f_, core_b_](const T& d, Sv& sv) { return maybe_b(l, "attn_core", d, sv, core_f_, core_b_); },
            [this](const T&, Sv& sv) { return linear_b(sv, H_); }};
  }
  std::vector<Fn> mlp_chain(size_t l, bool fwd) {
    const int64_t F = ffn(l);
    const float p = s_.model.layers[l].dropout;
    if (fwd)
      return {[this, F](const T& in, Sv& sv) { return linear_f(in, F, sv); },
              [this](const T& in, Sv& sv) { return gelu_f(in, sv); },
              [this](const T& in, Sv& sv) { return linear_f(in, H_, sv); },
              [this, p](const T& in, Sv& sv) { return dropout_f(in, p, sv); }};
    return {[this](const T&, Sv& sv) { return linear_b(sv, H_); }, [this](const T&, Sv& sv) { return gelu_b(sv); },
            [this, F](const T&, Sv& sv) { return linear_b(sv, F); },
            [this](const T& d, Sv& sv) { return dropout_b(d, sv); }};
  }
  T swiglu_f(size_t l, const T& x, Sv& s) {
    const int64_t F = ffn(l);
    s.clear();
    s.c.resize(3);
    T g = linear_f(x, F, s.c[0]);
    T u = linear_f(x, F, s.c[1]);
    T h = act(T_ * F);
    T y = linear_f(h, H_, s.c[2]);
    if (save_) s.t = {g, u};
    else s.clear();
    return y;
  }
  T swiglu_b(size_t l, Sv& s) {
    const int64_t F = ffn(l);
    T g = s.t.at(0);
    T u = s.t.at(1);
    T dh = linear_b(s.c[2], F);
    T dg = work(g->numel);
    T du = work(u->numel);
    T dx_up = linear_b(s.c[1], H_);
    T dx_gate = linear_b(s.c[0], H_);
    T dx = work(T_ * H_);  // add(dx_gate, dx_up)
    s.clear();
    return dx;
  }
  T block_f(size_t l, const T& x, Sv& s) {
    const float p = s_.model.layers[l].dropout;
    Fn ln = [this](const T& in, Sv& sv) { return norm_f(in, false, sv); };
    Fn mlp = [this, l](const T& in, Sv& sv) { return chain_f(mlp_chain(l, true), in, sv); };
    s.clear();
    s.c.resize(5);
    T a = maybe_f(l, "norm", x, s.c[0], ln);
    a = chain_f(attention_chain(l, true), a, s.c[1]);
    a = dropout_f(a, p, s.c[2]);
    T h = act(T_ * H_);  // x + a
    T m = maybe_f(l, "norm", h, s.c[3], ln);
    m = maybe_f(l, "mlp", m, s.c[4], mlp);
    T y = act(T_ * H_);  // h + m
    if (!save_) s.clear();
    return y;
  }
  T block_b(size_t l, const T& dy, Sv& s) {
    Fn ln_f = [this](const T& in, Sv& sv) { return norm_f(in, false, sv); };
    Fn ln_b = [this](const T&, Sv& sv) { return norm_b(sv); };
    Fn mlp_f = [this, l](const T& in, Sv& sv) { return chain_f(mlp_chain(l, true), in, sv); };
    Fn mlp_b = [this, l](const T& d, Sv& sv) { return chain_b(mlp_chain(l, false), d, sv); };
    T dm = maybe_b(l, "mlp", dy, s.c[4], mlp_f, mlp_b);
    dm = maybe_b(l, "norm", dm, s.c[3], ln_f, ln_b);
    T dh = work(T_ * H_);  // dy + dm
    T da = dropout_b(dh, s.c[2]);
    da = chain_b(attention_chain(l, false), da, s.c[1]);
    da = maybe_b(l, "norm", da, s.c[0], ln_f, ln_b);
    T dx = work(T_ * H_);  // dh + da
    s.clear();
    return dx;
  }

  T kind_f(size_t l, const T& x, Sv& s) {
    const models::LayerSpec& k = s_.model.layers[l];
    const std::string& n = k.kind;
    if (n == "linear") return linear_f(x, H_, s);
    if (n == "gelu") return gelu_f(x, s);
    if (n == "dropout") return dropout_f(x, k.dropout, s);
    if (n == "layernorm") return norm_f(x, false, s);
    if (n == "rmsnorm") return norm_f(x, true, s);
    if (n == "swiglu") return swiglu_f(l, x, s);
    if (n == "mlp") return chain_f(mlp_chain(l, true), x, s);
    if (n == "attention") return chain_f(attention_chain(l, true), x, s);
    if (n == "block") return block_f(l, x, s);
    throw std::invalid_argument("memory model: no layer kind '" + n + "'");
  }
  T kind_b(size_t l, const T& dy, Sv& s) {
    const std::string& n = s_.model.layers[l].kind;
    if (n == "linear") return linear_b(s, H_);
    if (n == "gelu") return gelu_b(s);
    if (n == "dropout") return dropout_b(dy, s);
    if (n == "layernorm" || n == "rmsnorm") return norm_b(s);
    if (n == "swiglu") return swiglu_b(l, s);
    if (n == "mlp") return chain_b(mlp_chain(l, false), dy, s);
    if (n == "attention") return chain_b(attention_chain(l, false), dy, s);
    if (n == "block") return block_b(l, dy, s);
    throw std::invalid_argument("memory model: no layer kind '" + n + "'");
  }

  const CaseSpec& s_;
  Pools& p_;
  const int64_t elt_, T_, H_;
  bool save_ = true;

 public:
  // The top-level backward's checkpoint recomputes through the layer's own forward.
  T backward_top(size_t l, const T& dy, Sv& s) {
    if (s_.layers[l].checkpoint == CheckpointGranularity::Full)
      return ckpt_b(dy, s, [this, l](const T& in, Sv& sv) { return kind_f(l, in, sv); },
                    [this, l](const T& d, Sv& sv) { return kind_b(l, d, sv); });
    return kind_b(l, dy, s);
  }
  // A full-iteration microbatch's loss: its value and its gradient (models::mse_loss).
  void loss(T* value, T* dy) {
    *value = f32(1, false);
    *dy = work(T_ * H_);
  }
};

}  // namespace cap

std::optional<CaptureMemory> predicted_capture_memory(const CaseSpec& spec) {
  cap::Pools pools;
  const size_t L = spec.layers.size();
  const int M = spec.microbatches;
  const std::vector<int> order = spec.effective_order();
  if (spec.executor == ExecutorKind::PerLayer) {
    bool any = false;
    for (const auto& f : spec.layers) any = any || f.graphed;
    if (!any) return std::nullopt;
    cap::Run run(spec, pools);
    using Grid = std::vector<std::vector<cap::T>>;
    Grid in(L, std::vector<cap::T>(M)), out(L, std::vector<cap::T>(M)), gout(L, std::vector<cap::T>(M)),
        gin(L, std::vector<cap::T>(M));
    std::vector<std::vector<cap::Sv>> saved(L, std::vector<cap::Sv>(M));
    const int shared = spec.shared_pool ? pools.create() : -1;
    for (size_t l = 0; l < L; ++l)
      for (int m = 0; m < M; ++m) {
        in[l][m] = run.outside();
        gout[l][m] = run.outside();
      }
    // Each graphed layer's forward graph per microbatch, then the backward graphs in reverse, in
    // the replay order; each unit in the shared pool or a pool of its own.
    auto unit = [&](size_t l, int m, bool forward) {
      pools.active = shared >= 0 ? shared : pools.create();
      if (forward) out[l][m] = run.forward(l, in[l][m], saved[l][m]);
      else gin[l][m] = run.backward_top(l, gout[l][m], saved[l][m]);
      pools.active = -1;
    };
    int f = 0, b = 0;
    for (int e : order) {
      if (e > 0) {
        for (size_t l = 0; l < L; ++l)
          if (spec.layers[l].graphed) unit(l, f, true);
        ++f;
      } else {
        for (size_t l = L; l-- > 0;)
          if (spec.layers[l].graphed) unit(l, b, false);
        ++b;
      }
    }
    CaptureMemory m = pools.m;
    return m;
  }
  if (spec.executor != ExecutorKind::FullIteration) return std::nullopt;
  // One graph: every microbatch's forward through the layers (the without-output protocol between
  // a checkpointed layer and its consumer), its loss, and its backward, in the replay order.
  cap::Run run(spec, pools);
  std::vector<cap::T> input(static_cast<size_t>(M)), loss(static_cast<size_t>(M)), dy(static_cast<size_t>(M));
  for (auto& x : input) x = run.outside();
  std::vector<std::vector<cap::Sv>> saved(static_cast<size_t>(M));
  auto discard_pair = [&](size_t l) {
    return spec.style == CheckpointStyle::WithoutOutput && l + 1 < L &&
           spec.layers[l].checkpoint == CheckpointGranularity::Full &&
           spec.layers[l + 1].checkpoint != CheckpointGranularity::Full;
  };
  pools.active = pools.create();
  int f = 0, b = 0;
  for (int e : order) {
    if (e > 0) {
      auto& sv = saved[static_cast<size_t>(f)];
      sv.assign(L, cap::Sv{});
      cap::T x = input[static_cast<size_t>(f)];
      for (size_t l = 0; l < L; ++l) {
        cap::T y = run.forward(l, x, sv[l]);
        if (l > 0 && discard_pair(l - 1)) run.discard_output(sv[l - 1], sv[l]);
        x = y;
      }
      run.loss(&loss[static_cast<size_t>(f)], &dy[static_cast<size_t>(f)]);
      ++f;
    } else {
      auto& sv = saved[static_cast<size_t>(b)];
      {
        cap::T g = dy[static_cast<size_t>(b)];
        for (size_t l = L; l-- > 0;) {
          if (l > 0 && discard_pair(l - 1)) run.recompute_output(l - 1, sv[l - 1]);
          g = run.backward_top(l, g, sv[l]);
        }
      }
      dy[static_cast<size_t>(b)].reset();
      ++b;
    }
  }
  pools.active = -1;
  return pools.m;
}

}  // namespace recap::properties
