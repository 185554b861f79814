// The case spec: JSON round trip, one-line validation errors naming the field, file errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "executor_test_util.h"
#include "harness/runtime/phase.h"
#include "harness/training/spec.h"

namespace recap::training {
namespace {

using testing::acceptance_spec;

std::string error_of(const std::string& text) {
  CaseSpec s;
  return case_from_json(Json::parse(text), &s);
}

TEST(Spec, RoundTripsThroughJson) {
  CaseSpec a = acceptance_spec(ExecutorKind::PerLayer);
  a.layers[1].checkpoint = CheckpointGranularity::Selective;
  a.layers[1].modules = {"attn_core", "norm"};
  a.layers[2].graphed = false;
  a.expected = Json{{"disposition", "passed"}};
  Json j = case_to_json(a);
  CaseSpec b;
  ASSERT_EQ(case_from_json(j, &b), "");
  EXPECT_EQ(case_to_json(b).dump(), j.dump());
  EXPECT_EQ(b.layers[1].modules, (std::vector<std::string>{"attn_core", "norm"}));
  EXPECT_FALSE(b.layers[2].graphed);
  EXPECT_EQ(b.model.layers[0].dropout, 0.1f);
  EXPECT_EQ(b.lr, 0.05f);
  EXPECT_EQ(b.expected["disposition"], "passed");
  // Floats are written in their shortest form.
  EXPECT_NE(j.dump().find("\"dropout\":0.1,"), std::string::npos) << j.dump();
}

TEST(Spec, DefaultsNeedOnlyLayers) {
  CaseSpec s;
  ASSERT_EQ(case_from_json(Json::parse(R"({"layers": [{"kind": "mlp"}]})"), &s), "");
  EXPECT_EQ(s.executor, ExecutorKind::Eager);
  EXPECT_EQ(s.effective_order(), (std::vector<int>{1, -1}));
  EXPECT_EQ(s.layers[0].checkpoint, CheckpointGranularity::None);
}

TEST(Spec, ErrorsNameTheField) {
  EXPECT_EQ(error_of(R"({"layers": [{"kind": "mlp"}, {"kind": "mlp"}, {"kind": "conv"}]})"),
            "layers[2].kind: unknown layer kind 'conv' (one of: linear, gelu, dropout, layernorm, rmsnorm, swiglu, "
            "mlp, attention, block)");
  EXPECT_EQ(error_of(R"({"hidden": -3, "layers": [{"kind": "mlp"}]})"), "hidden must be in [1, 4096], got -3");
  EXPECT_EQ(error_of(R"({"microbatches": 2, "microbatch_order": [1, 1, 1, -1, -1], "layers": [{"kind": "mlp"}]})"),
            "microbatch_order: 3 forwards but 2 backwards");
  EXPECT_EQ(error_of(R"({"microbatches": 2, "microbatch_order": [1, -1, -1, 1], "layers": [{"kind": "mlp"}]})"),
            "microbatch_order[2]: backward of microbatch 1 before its forward");
  EXPECT_EQ(error_of(R"({"microbatches": 1, "microbatch_order": [2, -2], "layers": [{"kind": "mlp"}]})"),
            "microbatch_order[0]: 2 is not +1 (a forward) or -1 (a backward) of the one model chunk");
  EXPECT_EQ(error_of(R"({"microbatches": 3, "microbatch_order": [1, -1], "layers": [{"kind": "mlp"}]})"),
            "microbatch_order: 1 forwards for microbatches 3");
  EXPECT_EQ(error_of(R"({"warmup": 4, "layers": [{"kind": "mlp"}]})"), "warmup must be in [0, 3], got 4");
  EXPECT_EQ(error_of(R"({"warmup": "3", "layers": [{"kind": "mlp"}]})"), "warmup: expected an integer, got a string");
  EXPECT_EQ(error_of(R"({"policy": "lazy", "layers": [{"kind": "mlp"}]})"),
            "policy: unknown policy 'lazy' (one of: naive, skip, graph-safe)");
  EXPECT_EQ(error_of(R"({"polcy": "naive", "layers": [{"kind": "mlp"}]})"), "polcy: unknown field");
  EXPECT_EQ(error_of(R"({"layers": [{"kind": "mlp", "dropuot": 0.1}]})"), "layers[0].dropuot: unknown field");
  EXPECT_EQ(error_of(R"({"layers": [{"kind": "block", "dropout": 1.5}]})"), "layers[0].dropout must be in [0, 1), got 1.5");
  EXPECT_EQ(error_of(R"({"hidden": 12, "layers": [{"kind": "block", "heads": 5}]})"),
            "layers[0].heads: hidden 12 is not divisible by heads 5");
  EXPECT_EQ(error_of(R"({"layers": [{"kind": "block", "checkpoint": "selective"}]})"),
            "layers[0].checkpoint_modules: a selective checkpoint names at least one module (attn_core, mlp, norm)");
  EXPECT_EQ(error_of(R"({"layers": [{"kind": "mlp", "checkpoint": "selective", "checkpoint_modules": ["norm"]}]})"),
            "layers[0].checkpoint_modules[0]: a 'mlp' layer has no 'norm' module (it has none; checkpoint it whole "
            "with \"full\")");
  EXPECT_EQ(error_of(R"({"checkpoint_style": "without-output",
                         "layers": [{"kind": "block", "checkpoint": "selective", "checkpoint_modules": ["mlp"]}]})"),
            "layers[0].checkpoint: checkpoint_style without-output checkpoints whole layers only (granularity full), "
            "this layer is selective");
  EXPECT_EQ(error_of(R"({"layers": []})"), "layers: a case needs at least one layer");
  EXPECT_EQ(error_of(R"({"hidden": 16})"), "layers: missing (a case needs at least one layer)");
  EXPECT_EQ(error_of(R"([1, 2])"), "case: expected a JSON object, got an array");
  EXPECT_EQ(error_of(R"({"schema": "recap.case/9", "layers": [{"kind": "mlp"}]})"),
            "schema: unsupported schema 'recap.case/9' (this recap reads recap.case/1)");
  // Comments are allowed.
  EXPECT_EQ(error_of(R"({"_comment": "hi", "layers": [{"kind": "mlp", "_why": "x"}]})"), "");
}

TEST(Spec, ErrorsAreOneLine) {
  for (const char* text : {R"({"layers": [{"kind": "conv"}]})", R"({"lr": -1, "layers": [{"kind": "mlp"}]})"}) {
    std::string e = error_of(text);
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Spec, FileErrors) {
  CaseSpec s;
  std::string missing = ::testing::TempDir() + "no-such-case.json";
  EXPECT_EQ(read_case_file(missing, &s), "cannot open '" + missing + "': No such file or directory");

  std::string e = read_case_file(write_temp("malformed.json", "{\"layers\": [{\"kind\": \"mlp\"},]}"), &s);
  EXPECT_NE(e.find("malformed.json: malformed JSON: "), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  e = read_case_file(write_temp("truncated.json", "{\"layers\": [{\"kind\": \"ml"), &s);
  EXPECT_NE(e.find("truncated.json: malformed JSON: "), std::string::npos) << e;

  e = read_case_file(write_temp("empty.json", ""), &s);
  EXPECT_NE(e.find("empty.json: malformed JSON: the file is empty"), std::string::npos) << e;

  e = read_case_file(write_temp("bad-field.json", R"({"layers": [{"kind": "conv"}]})"), &s);
  EXPECT_NE(e.find("bad-field.json: layers[0].kind: unknown layer kind 'conv'"), std::string::npos) << e;

  ASSERT_EQ(read_case_file(write_temp("good.json", case_to_json(acceptance_spec(ExecutorKind::Eager)).dump(2)), &s), "");
  EXPECT_EQ(s.model.layers.size(), 4u);
}

TEST(PhaseFlags, ScopesResetOnEveryExit) {
  ASSERT_TRUE(phase_flags_clear());
  try {
    GraphWarmupScope w;
    GraphCaptureScope c;
    BackwardStyleScope b(true);
    EXPECT_TRUE(is_graph_warmup());
    EXPECT_TRUE(is_graph_capturing());
    EXPECT_FALSE(is_checkpoint_valid());
    throw std::runtime_error("capture failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(phase_flags_clear());
  {
    GraphCaptureScope outer;
    { GraphCaptureScope inner(false); EXPECT_TRUE(is_graph_capturing()); }
    EXPECT_TRUE(is_graph_capturing());
  }
  EXPECT_FALSE(is_graph_capturing());
}

// Issue 22: tp, the tensor-parallel world size. Absent means 1 and is not written (one-rank files
// are unchanged); another value round-trips; a bad one is a one-line error naming the field; recap's
// runtime does not run it (a rank group does).
TEST(Spec, TensorParallelSize) {
  CaseSpec a = acceptance_spec(ExecutorKind::Eager);
  EXPECT_EQ(a.tp, 1);
  EXPECT_FALSE(case_to_json(a).contains("tp"));
  EXPECT_EQ(unmodelled(a), "");
  a.tp = 2;
  Json j = case_to_json(a);
  EXPECT_EQ(j["tp"], 2);
  CaseSpec b;
  ASSERT_EQ(case_from_json(j, &b), "");
  EXPECT_EQ(b.tp, 2);
  EXPECT_EQ(unmodelled(b), "tp 2: recap's runtime runs one rank (a rank group runs it: --sut torch --ranks 2)");
  const std::string layers = R"("layers": [{"kind": "linear"}])";
  EXPECT_EQ(error_of("{" + layers + R"(, "tp": 0})"), "tp must be in [1, 64], got 0");
  EXPECT_EQ(error_of("{" + layers + R"(, "tp": 65})"), "tp must be in [1, 64], got 65");
  EXPECT_EQ(error_of("{" + layers + R"(, "tp": "2"})"), "tp: expected an integer, got a string");
  EXPECT_EQ(error_of("{" + layers + R"(, "tp": 2.5})"), "tp: expected an integer, got a number");
}

// Issue 22: pp, the pipeline stages, as tp: absent means 1 and is not written; another value
// round-trips; a bad one (out of range, tp * pp over 64 ranks) is a one-line error naming the field.
TEST(Spec, PipelineStages) {
  CaseSpec a = acceptance_spec(ExecutorKind::Eager);
  EXPECT_EQ(a.pp, 1);
  EXPECT_FALSE(case_to_json(a).contains("pp"));
  a.pp = 2;
  Json j = case_to_json(a);
  EXPECT_EQ(j["pp"], 2);
  CaseSpec b;
  ASSERT_EQ(case_from_json(j, &b), "");
  EXPECT_EQ(b.pp, 2);
  EXPECT_EQ(unmodelled(b), "pp 2: recap's runtime runs one rank (a rank group runs it: --sut torch --ranks 2)");
  const std::string layers = R"("layers": [{"kind": "linear"}])";
  EXPECT_EQ(error_of("{" + layers + R"(, "pp": 0})"), "pp must be in [1, 64], got 0");
  EXPECT_EQ(error_of("{" + layers + R"(, "pp": 65})"), "pp must be in [1, 64], got 65");
  EXPECT_EQ(error_of("{" + layers + R"(, "pp": "2"})"), "pp: expected an integer, got a string");
  EXPECT_EQ(error_of("{" + layers + R"(, "pp": 8, "tp": 16})"), "pp 8 with tp 16: 128 ranks, at most 64");
}

// Issue 22: sp, sequence parallelism over the tp ranks: absent when false, round-trips when true,
// and needs tp > 1 (one line naming the field otherwise); pipeline stages may hold it.
TEST(Spec, SequenceParallel) {
  CaseSpec a = acceptance_spec(ExecutorKind::Eager);
  EXPECT_FALSE(a.sp);
  EXPECT_FALSE(case_to_json(a).contains("sp"));
  a.tp = 2;
  a.sp = true;
  Json j = case_to_json(a);
  EXPECT_EQ(j["sp"], true);
  CaseSpec b;
  ASSERT_EQ(case_from_json(j, &b), "");
  EXPECT_TRUE(b.sp);
  EXPECT_EQ(b.tp, 2);
  const std::string layers = R"("layers": [{"kind": "linear"}])";
  EXPECT_EQ(error_of("{" + layers + R"(, "sp": true})"),
            "sp: sequence parallelism splits the sequence over tensor-parallel ranks: needs tp > 1, got tp 1");
  EXPECT_EQ(error_of("{" + layers + R"(, "sp": true, "tp": 2, "pp": 2})"), "");
  EXPECT_EQ(error_of("{" + layers + R"(, "sp": 1, "tp": 2})"), "sp: expected true or false, got an integer");
  b.pp = 2;  // tp inside pipeline stages: a group of tp * pp ranks runs it
  EXPECT_EQ(unmodelled(b), "tp 2 pp 2: recap's runtime runs one rank (a rank group runs it: --sut torch --ranks 4)");
}

TEST(Spec, VirtualPipelineStages) {
  CaseSpec a = acceptance_spec(ExecutorKind::Eager);
  EXPECT_EQ(a.vp, 1);
  EXPECT_FALSE(case_to_json(a).contains("vp"));  // absent at 1: files without it are unchanged
  a.pp = 2;
  a.vp = 3;
  Json j = case_to_json(a);
  EXPECT_EQ(j["vp"], 3);
  CaseSpec b;
  ASSERT_EQ(case_from_json(j, &b), "");
  EXPECT_EQ(b.pp, 2);
  EXPECT_EQ(b.vp, 3);
  const std::string layers = R"("layers": [{"kind": "linear"}])";
  EXPECT_EQ(error_of("{" + layers + R"(, "vp": 2})"),
            "vp: virtual pipeline stages interleave the chunks of pipeline ranks: needs pp > 1, got pp 1");
  EXPECT_EQ(error_of("{" + layers + R"(, "vp": 1})"), "");
  EXPECT_EQ(error_of("{" + layers + R"(, "vp": 17, "pp": 2})"), "vp must be in [1, 16], got 17");
  EXPECT_EQ(error_of("{" + layers + R"(, "vp": 0, "pp": 2})"), "vp must be in [1, 16], got 0");
  EXPECT_NE(unmodelled(b), "");  // a rank group runs it
}

TEST(Spec, DataParallelReplicas) {
  CaseSpec a = acceptance_spec(ExecutorKind::Eager);
  EXPECT_EQ(a.dp, 1);
  EXPECT_FALSE(case_to_json(a).contains("dp"));  // absent at 1: files without it are unchanged
  a.tp = 2;
  a.dp = 4;
  Json j = case_to_json(a);
  EXPECT_EQ(j["dp"], 4);
  CaseSpec b;
  ASSERT_EQ(case_from_json(j, &b), "");
  EXPECT_EQ(b.dp, 4);
  EXPECT_EQ(b.ranks(), 8);
  EXPECT_EQ(b.parallel_dims(), "tp 2 dp 4");
  const std::string layers = R"("layers": [{"kind": "linear"}])";
  EXPECT_EQ(error_of("{" + layers + R"(, "dp": 0})"), "dp must be in [1, 64], got 0");
  EXPECT_EQ(error_of("{" + layers + R"(, "dp": 65})"), "dp must be in [1, 64], got 65");
  EXPECT_EQ(error_of("{" + layers + R"(, "dp": 8, "tp": 4, "pp": 4})"), "dp 8 with tp 4 and pp 4: 128 ranks, at most 64");
  EXPECT_EQ(unmodelled(b), "tp 2 dp 4: recap's runtime runs one rank (a rank group runs it: --sut torch --ranks 8)");
  b.tp = 1;
  EXPECT_EQ(unmodelled(b), "dp 4: recap's runtime runs one rank (a rank group runs it: --sut torch --ranks 4)");
}

}  // namespace
}  // namespace recap::training
