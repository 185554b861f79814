#include "models/registry.h"

#include "models/layers.h"
#include "models/reference/reference.h"

namespace recap::models {

namespace {
namespace ref = reference;

template <class L, class... A>
std::unique_ptr<Layer> make(A&&... a) {
  return std::make_unique<L>(std::forward<A>(a)...);
}
}  // namespace

LayerArgs layer_args(const ModelSpec& model, const LayerSpec& layer, const std::string& name) {
  LayerArgs a;
  a.name = name;
  a.hidden = model.hidden;
  a.heads = layer.heads;
  a.ffn = layer.ffn_hidden > 0 ? layer.ffn_hidden : 4 * static_cast<int64_t>(model.hidden);
  a.dropout = layer.dropout;
  return a;
}

const std::vector<LayerKind>& layer_kinds() {
  //                                 heads  ffn    draws  roles
  static const std::vector<LayerKind> kinds = {
      {"linear", false, false, false, {},
       [](Builder& b, const LayerArgs& a) { return make<Linear>(b, "", a.name, a.hidden, a.hidden); }, ref::make_linear},
      {"gelu", false, false, false, {}, [](Builder& b, const LayerArgs& a) { return make<Gelu>(b, a.name); },
       ref::make_gelu},
      {"dropout", false, false, true, {},
       [](Builder& b, const LayerArgs& a) { return make<Dropout>(b, a.name, a.dropout); }, ref::make_dropout},
      {"layernorm", false, false, false, {},
       [](Builder& b, const LayerArgs& a) { return make<Norm>(b, "", a.name, a.hidden, false); }, ref::make_layernorm},
      {"rmsnorm", false, false, false, {},
       [](Builder& b, const LayerArgs& a) { return make<Norm>(b, "", a.name, a.hidden, true); }, ref::make_rmsnorm},
      {"swiglu", false, true, false, {},
       [](Builder& b, const LayerArgs& a) { return make<SwiGlu>(b, "", a.name, a.hidden, a.ffn); }, ref::make_swiglu},
      {"mlp", false, true, true, {},
       [](Builder& b, const LayerArgs& a) { return make<Mlp>(b, "", a.name, a.hidden, a.ffn, a.dropout); },
       ref::make_mlp_layer},
      {"attention", true, false, true, {"attn_core"},
       [](Builder& b, const LayerArgs& a) { return make<Attention>(b, "", a.name, a.hidden, a.heads, a.dropout); },
       ref::make_attention_layer},
      {"block", true, true, true, {"attn_core", "mlp", "norm"},
       [](Builder& b, const LayerArgs& a) {
         return make<Block>(b, "", a.name, a.hidden, a.heads, a.ffn, a.dropout);
       },
       ref::make_block},
  };
  return kinds;
}

const LayerKind* find_layer_kind(const std::string& kind) {
  for (const LayerKind& k : layer_kinds())
    if (kind == k.kind) return &k;
  return nullptr;
}

std::string layer_kind_list() {
  std::string s;
  for (const LayerKind& k : layer_kinds()) s += (s.empty() ? "" : ", ") + std::string(k.kind);
  return s;
}

}  // namespace recap::models
