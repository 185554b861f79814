// The memory model (memory_model.h). A forward is played on symbolic storages: each has its bytes
// and whether it is an activation (the category the allocator counts); a top-level layer's saved
// record is the set of storages it references (children flattened), and what a forward leaves
// allocated is every distinct activation some record, checkpoint record or static output still
// references once it is over. Sizes follow the layers' own tensors: outputs in the model's dtype,
// layernorm statistics and dropout masks (32 elements a word) in fp32.
#include "properties/memory_model.h"

#include <algorithm>
#include <functional>
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

}  // namespace recap::properties
