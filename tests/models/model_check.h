// Shared gtest checks of the model tests (unit on sim, gpu on cuda) over models/check.h: every
// layer against the fp64 reference, determinism, graph replay vs eager.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "harness/device/device.h"
#include "harness/runtime/context.h"
#include "harness/runtime/generator.h"
#include "harness/runtime/rng_ledger.h"
#include "models/check.h"
#include "models/model.h"

namespace recap::models::testing {

// The machinery lives in the models library (models/check.h, shared with the `reference` oracle);
// this header names it here and adds the gtest checks.
using check::kTolBf16Layer;
using check::kTolBf16Stack;
using check::kTolF32;

using check::all_finite;
using check::backend_usable;
using check::bits_equal;
using check::Comparison;
using check::l2;
using check::rel_l2;
using check::run_model;
using check::RunOptions;
using check::RunOutput;
using check::test_values;

// The cases every backend checks against the reference: each layer kind alone (hidden 16,
// tokens 8, heads 2, ffn 32), fp32 and bf16, with dropout 0 and 0.1 where the kind draws;
// wider attention/blocks (hidden 64, tokens 24, heads 4); a 4-block stack; a mixed stack.
struct LayerCase {
  std::string name;  // "attention_bf16_p10": a valid gtest name
  ModelSpec spec;
  double tol = kTolF32;
  bool dropout = false;  // some layer draws
};
std::vector<LayerCase> layer_cases();
inline void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }  // gtest prints the name
ModelSpec block_stack(int blocks, DType dtype, float p, int hidden = 32, int tokens = 16, int heads = 4);

// gtest checks shared by the unit (sim) and gpu (cuda) suites.
// Parameters, inputs and targets drawn on `backend`'s device (ops::fill_uniform) hold the host
// functions' values bit for bit (init_values, training::step_data; bf16 rounded), fp32 and bf16.
void expect_drawn_values_equal_host(device::Backend backend);
// `c` on `backend` against the reference (check::compare_with_reference; each of its draw
// bookkeeping problems is a failure): within c.tol, finite, gradients and dx not all zero,
// every dropout draw both keeps and drops something, a lone dropout layer zeroes outputs.
void expect_matches_reference(device::Backend backend, const LayerCase& c);
// Two fresh runs of `c` give bitwise-identical outputs, gradients and draws.
void expect_deterministic(device::Backend backend, const LayerCase& c);
// `steps` passes eagerly and `steps` replays of one captured forward+backward (graph-safe
// generator) give bitwise-identical outputs, accumulated gradients and realized draws.
void expect_graph_equals_eager(device::Backend backend, const ModelSpec& spec, int steps);
// Every parameter gradient, y and dx of two runs are bitwise equal (with a message naming `what`).
void expect_runs_equal(const RunOutput& a, const RunOutput& b, const std::string& what);

}  // namespace recap::models::testing
