// The layer registry: every layer kind a case may name, once, with what it uses of a LayerSpec,
// the sub-module roles it offers a selective checkpoint, its factory and its fp64 reference's
// factory. The case spec, the model, the reference and the generators all read this table, so a
// new kind is one entry here (and its classes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/layer.h"
#include "models/model.h"

namespace recap::models {

struct Builder;
namespace reference {
class RefLayer;
struct Store;
}  // namespace reference

// A layer's construction arguments, resolved from the model and its LayerSpec.
struct LayerArgs {
  std::string name;     // "block0": the layer path its parameters and draws are named under
  int64_t hidden = 0;
  int64_t heads = 1;
  int64_t ffn = 0;      // the inner width (LayerSpec::ffn_hidden, 0 meaning 4 * hidden)
  float dropout = 0.0f;
};
LayerArgs layer_args(const ModelSpec& model, const LayerSpec& layer, const std::string& name);

struct LayerKind {
  const char* kind;  // as case files name it
  bool uses_heads;   // LayerSpec::heads matters (hidden % heads == 0)
  bool uses_ffn;     // LayerSpec::ffn_hidden matters
  bool draws;        // LayerSpec::dropout matters (the layer draws a dropout mask)
  std::vector<std::string> roles;  // sub-module roles a selective checkpoint may wrap (WrapFn roles)
  std::unique_ptr<Layer> (*make)(Builder& b, const LayerArgs& a);
  std::unique_ptr<reference::RefLayer> (*make_reference)(reference::Store& s, const LayerArgs& a);
};

// Every kind, simplest first (generators shrink towards the front: a linear layer).
const std::vector<LayerKind>& layer_kinds();
// The kind named `kind`, or null.
const LayerKind* find_layer_kind(const std::string& kind);
// "linear, gelu, ...", for error messages.
std::string layer_kind_list();

}  // namespace recap::models
