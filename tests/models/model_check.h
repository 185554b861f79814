// Shared machinery of the model tests (unit on sim, gpu on cuda): build a model on a fresh device,
// run forward and backward (eagerly, or captured into a graph and replayed), read everything back,
// and compare with the fp64 reference run from the same inputs, parameters and dropout masks (the
// masks recomputed on the host from the (seed, offset) each dropout kernel recorded in the ledger).
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
#include "models/model.h"

namespace recap::models::testing {

// Relative L2 error bounds, chosen from the arithmetic (see layers_test.cpp for the reasoning):
//  fp32: every op accumulates in fp32 (unit roundoff u = 2^-24 = 6e-8) over at most a few hundred
//    terms, and errors compound over at most ~40 ops in a 4-block stack: observed 1e-7 .. 1e-6,
//    bound 1e-5 (ten times the worst observed, a thousand times below any real bug's signature).
//  bf16: every stored tensor is rounded to 8 significant bits (u = 2^-9 = 2e-3); a single layer
//    shows 2e-3 .. 6e-3, bound 2e-2; whole blocks and stacks compound a few dozen roundings
//    through normalizations and the softmax, bound 4e-2.
constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16Layer = 2e-2;
constexpr double kTolBf16Stack = 4e-2;

struct RunOptions {
  device::Backend backend = device::Backend::Sim;
  ModelSpec spec;
  uint64_t param_seed = 11;
  uint64_t rng_seed = 1234;
  uint64_t data_seed = 99;
  runtime::GeneratorMode generator = runtime::GeneratorMode::Host;
  WrapFn wrap;     // empty: none
  int steps = 1;   // forward+backward passes (gradients accumulate; fresh draws each pass)
  bool graph = false;  // capture one forward+backward into a graph and replay it `steps` times
  device::DeviceOptions device_options;  // sim: explore seed, race check
};

struct RunOutput {
  std::vector<float> x, dy;                 // inputs as the device holds them (bf16: rounded)
  std::vector<float> y, dx;                 // of the last pass
  std::vector<std::string> names;           // parameter names, in params() order
  std::vector<std::vector<float>> params;   // values (as uploaded)
  std::vector<std::vector<float>> grads;    // accumulated over the passes
  std::vector<runtime::LedgerEntry> draws;  // of the last pass
};

// Whether `backend` can run here (cuda needs a usable GPU); *why says why not.
bool backend_usable(device::Backend backend, std::string* why);

// Runs the model per `o` and reads everything back. Throws on any device or model error.
RunOutput run_model(const RunOptions& o);

struct Comparison {
  double y = 0, dx = 0;                // relative L2 errors
  std::map<std::string, double> grads;  // by parameter name
  double worst = 0;
  std::string worst_what;
  std::string report;  // one line per compared quantity
};

// The fp64 reference from the run's inputs, parameters and recorded draws (one pass: use a run
// with steps = 1). Fails the current test (gtest ADD_FAILURE) on a draw the reference asks for
// that the ledger lacks, a count mismatch, or a recorded draw the reference never used.
Comparison compare_with_reference(const ModelSpec& spec, const RunOutput& run);

// Relative L2 error ||a - ref|| / ||ref|| (0 when both are 0).
double rel_l2(const std::vector<float>& a, const std::vector<double>& ref);
double l2(const std::vector<float>& a);
bool all_finite(const std::vector<float>& a);
// Bitwise equality of two float vectors; *first_diff gets the first differing index.
bool bits_equal(const std::vector<float>& a, const std::vector<float>& b, size_t* first_diff = nullptr);

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
// `c` on `backend` against the reference: within c.tol, finite, gradients and dx not all zero,
// every dropout draw both keeps and drops something, a lone dropout layer zeroes outputs.
void expect_matches_reference(device::Backend backend, const LayerCase& c);
// Two fresh runs of `c` give bitwise-identical outputs, gradients and draws.
void expect_deterministic(device::Backend backend, const LayerCase& c);
// `steps` passes eagerly and `steps` replays of one captured forward+backward (graph-safe
// generator) give bitwise-identical outputs, accumulated gradients and realized draws.
void expect_graph_equals_eager(device::Backend backend, const ModelSpec& spec, int steps);
// Every parameter gradient, y and dx of two runs are bitwise equal (with a message naming `what`).
void expect_runs_equal(const RunOutput& a, const RunOutput& b, const std::string& what);

// Inputs of the tests: values in [-1, 1) from a host Philox stream.
std::vector<float> test_values(uint64_t seed, uint64_t stream, size_t n);

}  // namespace recap::models::testing
