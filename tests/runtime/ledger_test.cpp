// The RNG ledger (rng_ledger.h) through Ctx (context.h): eager draws, graph replays per step
// (graph-safe vs host-mode baked), the recompute oracle; and Ctx/DeviceError/LayerScope.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/runtime/context.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/rng_kernels.h"
#include "tests/runtime/core_test_util.h"

namespace recap::runtime {
namespace {

using coretest::CoreTest;
using coretest::philox_values;
using LedgerTest = CoreTest;
using ContextTest = CoreTest;

constexpr uint64_t kSeed = 77;

// Every field spelled out: a partial brace-init of the aggregate warns under -Wextra.
Ctx make_ctx(device::Device& dev, device::Stream s, Allocator& alloc, RngTracker& rng, RngLedger* ledger) {
  return Ctx{dev, s, alloc, rng, ledger, "", Phase::Forward, 0, 0, true, std::nullopt};
}

// What a dropout layer does: reserve, launch its drawing kernel, record what it used.
Draw draw_into(Ctx& ctx, const std::string& op, uint32_t* out, uint64_t n) {
  Draw d = ctx.draw(op, n);
  ctx.launch(philox_draw_kernel(out, d.args, n));
  ctx.record_draw(d);
  return d;
}

TEST(LedgerNames, PhaseNames) {
  EXPECT_EQ(phase_name(Phase::Forward), "forward");
  EXPECT_EQ(phase_name(Phase::Recompute), "recompute");
  EXPECT_EQ(phase_name(Phase::Backward), "backward");
}

// Eager draws: each recorded once per step with the values used, the site, count and generator;
// a site that does not draw in a step leaves its slot at the sentinel and gets no entry.
TEST_P(LedgerTest, EagerDrawsRecordedWithRealizedValues) {
  Allocator alloc(dev());
  RngTracker rng(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  RngLedger ledger(dev(), 8);
  Ctx ctx = make_ctx(dev(), stream(), alloc, rng, &ledger);
  uint32_t* out = buffer<uint32_t>(16);

  CORE_ASSERT_OK(ledger.begin_step(0, stream()));
  {
    LayerScope l(ctx, "block0");
    draw_into(ctx, "attn_dropout", out, 10);  // default state: offset 0 -> 12
    RngTracker::Fork f(rng, kModelParallelRngName);
    draw_into(ctx, "mlp_dropout", out, 3);    // model-parallel state: offset 0 -> 4
  }
  CORE_ASSERT_OK(dev().stream_synchronize(stream()));
  CORE_ASSERT_OK(ledger.collect(0));
  ASSERT_EQ(ledger.entries().size(), 2u);
  const LedgerEntry& a = ledger.entries()[0];
  EXPECT_EQ(a.site.layer, "block0");
  EXPECT_EQ(a.site.op, "attn_dropout");
  EXPECT_EQ(a.site.phase, Phase::Forward);
  EXPECT_EQ(a.step, 0);
  EXPECT_EQ(a.seed, kSeed);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.count, 10u);
  EXPECT_EQ(a.generator, "default");
  const LedgerEntry& b = ledger.entries()[1];
  EXPECT_EQ(b.site.op, "mlp_dropout");
  EXPECT_EQ(b.seed, kSeed + 2718);
  EXPECT_EQ(b.offset, 0u);
  EXPECT_EQ(b.count, 3u);
  EXPECT_EQ(b.generator, "model-parallel-rng");

  // Step 1: only attn_dropout draws (at offset 12); mlp_dropout's slot was cleared by begin_step.
  CORE_ASSERT_OK(ledger.begin_step(1, stream()));
  {
    LayerScope l(ctx, "block0");
    draw_into(ctx, "attn_dropout", out, 10);
  }
  CORE_ASSERT_OK(dev().stream_synchronize(stream()));
  CORE_ASSERT_OK(ledger.collect(1));
  ASSERT_EQ(ledger.entries().size(), 3u);
  EXPECT_EQ(ledger.entries()[2].step, 1);
  EXPECT_EQ(ledger.entries()[2].site.op, "attn_dropout");
  EXPECT_EQ(ledger.entries()[2].offset, 12u);
  EXPECT_TRUE(ledger.reused_across_steps().empty());  // 0 then 12
  EXPECT_EQ(ledger.summary(), "3 draws (3 forward, 0 recompute), 0 recompute mismatches, 0 reused, 0 overlapping");
}

TEST_P(LedgerTest, SlotsAreStablePerSiteAndBounded) {
  RngLedger ledger(dev(), 2);
  DrawSite s1{"l", "op", Phase::Forward, 0}, s2{"l", "op", Phase::Recompute, 0}, s3{"l", "op", Phase::Forward, 1};
  uint64_t* p1 = ledger.slot(s1, 4, "default");
  uint64_t* p2 = ledger.slot(s2, 4, "default");
  EXPECT_EQ(p2, p1 + 2);  // two words per slot, in order of first use
  // The same site: the same slot (a graph captured once keeps writing it).
  EXPECT_EQ(ledger.slot(s2, 8, "model-parallel-rng"), p2);
  EXPECT_EQ(ledger.slot(s1, 4, "default"), p1);
  EXPECT_THROW(ledger.slot(s3, 4, "default"), std::runtime_error);  // a third site: over max_slots
}

// A graph captured once and replayed each step writes the same slot with the values it really
// used. Graph-safe: a new offset each step. Host mode: the capture-time offset, every step.
TEST_P(LedgerTest, GraphReplaysRecordedPerStep) {
  for (GeneratorMode mode : {GeneratorMode::GraphSafe, GeneratorMode::Host}) {
    SCOPED_TRACE(generator_mode_name(mode));
    Allocator alloc(dev());
    RngTracker rng(dev(), kSeed, mode, DeviceStateModel::Shared);
    RngLedger ledger(dev());
    Ctx ctx = make_ctx(dev(), stream(), alloc, rng, &ledger);
    ctx.layer = "block0.attn";
    uint32_t* out = buffer<uint32_t>(8);
    rng.capture_begin();
    device::GraphExec exec = capture([&] { draw_into(ctx, "attn_dropout", out, 8); });
    auto st = rng.capture_end();
    for (int step = 0; step < 3; ++step) {
      CORE_ASSERT_OK(ledger.begin_step(step, stream()));
      CORE_ASSERT_OK(rng.replay_prologue(st, stream()));
      CORE_ASSERT_OK(dev().graph_launch(exec, stream()));
      CORE_ASSERT_OK(dev().stream_synchronize(stream()));
      CORE_ASSERT_OK(ledger.collect(step));
      ASSERT_EQ(ledger.entries().size(), static_cast<size_t>(step + 1));
      const LedgerEntry& e = ledger.entries().back();
      EXPECT_EQ(e.step, step);
      // The record is what the kernel used: its output is the draw at the recorded (seed, offset).
      EXPECT_EQ(read(out, 8), philox_values(e.seed, e.offset, 8)) << "step " << step;
      // Graph-safe: 0, 8, 16 (increment 8 per replay). Host: 0 baked at capture, every step.
      EXPECT_EQ(e.offset, mode == GeneratorMode::GraphSafe ? 8u * step : 0u) << "step " << step;
    }
    auto reused = ledger.reused_across_steps();
    if (mode == GeneratorMode::GraphSafe) {
      EXPECT_TRUE(reused.empty());
      EXPECT_EQ(ledger.summary(), "3 draws (3 forward, 0 recompute), 0 recompute mismatches, 0 reused, 0 overlapping");
    } else {
      // Steps 1 and 2 each repeat step 0's (seed, offset): the baked mask, flagged.
      ASSERT_EQ(reused.size(), 2u);
      EXPECT_EQ(reused[0].first.step, 0);
      EXPECT_EQ(reused[0].second.step, 1);
      EXPECT_EQ(reused[1].second.step, 2);
      EXPECT_EQ(ledger.summary(), "3 draws (3 forward, 0 recompute), 0 recompute mismatches, 2 reused, 0 overlapping");
    }
  }
}

// A checkpoint-like sequence on three layers: block0 saves snapshots (correct), block1 saves
// handles (the planted bug: the live state is "restored", so the recompute draws new numbers),
// block2 recomputes from its forward's realized (seed, offset) through a DrawOverride (the
// graph-safe policy). Only block1 is a mismatch.
TEST_P(LedgerTest, RecomputeMismatchesFindsPlantedMismatch) {
  Allocator alloc(dev());
  RngTracker rng(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  RngLedger ledger(dev());
  Ctx ctx = make_ctx(dev(), stream(), alloc, rng, &ledger);
  uint32_t* out = buffer<uint32_t>(16);
  CORE_ASSERT_OK(ledger.begin_step(0, stream()));

  ctx.phase = Phase::Forward;
  ctx.layer = "block0";
  auto saved0 = rng.save(/*as_handles=*/false);
  draw_into(ctx, "dropout", out, 16);  // offset 0
  ctx.layer = "block1";
  auto saved1 = rng.save(/*as_handles=*/true);
  draw_into(ctx, "dropout", out, 16);  // offset 16
  ctx.layer = "block2";
  Draw fwd2 = draw_into(ctx, "dropout", out, 16);  // offset 32; its record holds (seed, 32)

  ctx.phase = Phase::Recompute;  // as CheckpointFunction's backward: restore, redo, put back
  ctx.layer = "block0";
  auto now = rng.save(false);
  rng.restore(saved0);
  draw_into(ctx, "dropout", out, 16);  // offset 0 again
  rng.restore(now);
  ctx.layer = "block1";
  now = rng.save(false);
  rng.restore(saved1);                 // a handle: nothing rewinds
  draw_into(ctx, "dropout", out, 16);  // offset 48 (the live state), not 16
  rng.restore(now);
  ctx.layer = "block2";
  ctx.draw_override = DrawOverride{fwd2.record, fwd2.record + 1, 0};
  Draw rec2 = draw_into(ctx, "dropout", out, 16);  // reads (seed, 32) from the forward's record
  EXPECT_EQ(ctx.draw_override->next, 16u);         // the override advanced, not the generator
  ctx.draw_override.reset();
  EXPECT_TRUE(rec2.args.graph_safe);

  CORE_ASSERT_OK(dev().stream_synchronize(stream()));
  CORE_ASSERT_OK(ledger.collect(0));
  ASSERT_EQ(ledger.entries().size(), 6u);
  auto mm = ledger.recompute_mismatches();
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_EQ(mm[0].first.site.layer, "block1");
  EXPECT_EQ(mm[0].first.site.phase, Phase::Forward);
  EXPECT_EQ(mm[0].second.site.phase, Phase::Recompute);
  EXPECT_EQ(mm[0].first.offset, 16u);
  EXPECT_EQ(mm[0].second.offset, 48u);
  for (const LedgerEntry& e : ledger.entries())
    if (e.site.layer == "block2" && e.site.phase == Phase::Recompute) {
      EXPECT_EQ(e.offset, 32u);
      EXPECT_EQ(e.generator, "override");
    }
  EXPECT_EQ(ledger.summary(), "6 draws (3 forward, 3 recompute), 1 recompute mismatches, 0 reused, 0 overlapping");
}

// One step of draws in layer block0 on a graph-safe tracker, its ledger collected by collect().
struct OneStep {
  explicit OneStep(CoreTest& t)
      : test(t), alloc(t.dev()), rng(t.dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared),
        ledger(t.dev()), ctx(make_ctx(t.dev(), t.stream(), alloc, rng, &ledger)), out(t.buffer<uint32_t>(16)) {
    EXPECT_TRUE(device::ok(ledger.begin_step(0, t.stream())));
    ctx.layer = "block0";
  }
  void collect() {
    ASSERT_TRUE(device::ok(test.dev().stream_synchronize(test.stream())));
    ASSERT_TRUE(device::ok(ledger.collect(0)));
  }
  CoreTest& test;
  Allocator alloc;
  RngTracker rng;
  RngLedger ledger;
  Ctx ctx;
  uint32_t* out;
};

// Value ranges (class 26): draws of one stream never share a value; with philox-increment-short
// the offset advances by counter blocks, so the next draw starts inside the previous one.
TEST_P(LedgerTest, OverlappingDrawsFoundOnlyWithShortIncrement) {
  for (bool fault : {false, true}) {
    SCOPED_TRACE(fault ? "philox-increment-short" : "no fault");
    FaultScope scope(fault ? std::vector<std::string>{"philox-increment-short"} : std::vector<std::string>{});
    OneStep t(*this);
    draw_into(t.ctx, "attn_dropout", t.out, 16);  // [0, 16)
    draw_into(t.ctx, "mlp_dropout", t.out, 16);   // [16, 32), or [4, 20) with the fault
    {
      RngTracker::Fork f(t.rng, kModelParallelRngName);  // another stream: never compared with these
      draw_into(t.ctx, "tp_dropout", t.out, 16);
    }
    t.collect();
    const RngLedger& ledger = t.ledger;
    EXPECT_EQ(ledger.streams(), 2u);
    auto ov = ledger.overlapping_draws();
    if (!fault) {
      EXPECT_TRUE(ov.empty());
      continue;
    }
    ASSERT_EQ(ov.size(), 1u);
    EXPECT_EQ(ov[0].first.site.op, "attn_dropout");
    EXPECT_EQ(ov[0].second.site.op, "mlp_dropout");
    EXPECT_EQ(ov[0].second.offset, 4u);
    EXPECT_NE(ledger.summary().find("1 overlapping"), std::string::npos) << ledger.summary();
  }
}

// A recompute must cover exactly its forward draw's range: the same (seed, offset) with another
// count is a mismatch.
TEST_P(LedgerTest, RecomputeOfAnotherCountIsAMismatch) {
  OneStep t(*this);
  auto saved = t.rng.save(false);
  draw_into(t.ctx, "dropout", t.out, 16);
  t.ctx.phase = Phase::Recompute;
  t.rng.restore(saved);
  draw_into(t.ctx, "dropout", t.out, 8);  // same start, half the values
  t.collect();
  auto mm = t.ledger.recompute_mismatches();
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_EQ(mm[0].first.offset, mm[0].second.offset);
  EXPECT_EQ(mm[0].first.count, 16u);
  EXPECT_EQ(mm[0].second.count, 8u);
}

// ---- Ctx, DeviceError, LayerScope -------------------------------------------------------------

TEST(DeviceErrorTest, MessageNamesApiErrorAndWhere) {
  DeviceError e("cudaMalloc", device::Status::StreamCaptureUnsupported, "block1.mlp");
  EXPECT_EQ(std::string(e.what()), "cudaMalloc failed: cudaErrorStreamCaptureUnsupported (block1.mlp)");
  EXPECT_EQ(e.api, "cudaMalloc");
  EXPECT_EQ(e.status, device::Status::StreamCaptureUnsupported);
  DeviceError bare("cudaMemcpy", device::Status::InvalidValue, "");
  EXPECT_EQ(std::string(bare.what()), "cudaMemcpy failed: cudaErrorInvalidValue");
}

TEST_P(ContextTest, LayerScopeNestsAndRestores) {
  Allocator alloc(dev());
  RngTracker rng(dev(), kSeed, GeneratorMode::Host, DeviceStateModel::Shared);
  Ctx ctx = make_ctx(dev(), stream(), alloc, rng, nullptr);
  {
    LayerScope a(ctx, "block1");
    EXPECT_EQ(ctx.layer, "block1");  // no leading dot at the root
    {
      LayerScope b(ctx, "mlp");
      EXPECT_EQ(ctx.layer, "block1.mlp");
    }
    EXPECT_EQ(ctx.layer, "block1");
  }
  EXPECT_EQ(ctx.layer, "");
}

TEST_P(ContextTest, DrawWithoutLedgerAndLaunchFailure) {
  Allocator alloc(dev());
  RngTracker rng(dev(), kSeed, GeneratorMode::Host, DeviceStateModel::Shared);
  Ctx ctx = make_ctx(dev(), stream(), alloc, rng, nullptr);
  ctx.layer = "block0";
  Draw d = ctx.draw("dropout", 5);
  EXPECT_EQ(d.record, nullptr);  // no ledger attached
  EXPECT_EQ(d.args.offset, 0u);
  EXPECT_EQ(rng.current().host_offset(), 8u);  // 5 -> 8
  EXPECT_NO_THROW(ctx.record_draw(d));          // nothing to record

  Tensor t = ctx.alloc_tensor({2, 3}, DType::BF16, device::MemCategory::Activations);
  EXPECT_EQ(t.bytes(), 12u);
  EXPECT_EQ(t.category(), device::MemCategory::Activations);

  ctx.stream = device::Stream{987654};  // no such stream: the launch fails
  try {
    ctx.launch(philox_draw_kernel(t.as<uint32_t>(), d.args, 3));
    ADD_FAILURE() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.api, "kernel philox_draw");
    EXPECT_EQ(e.status, device::Status::InvalidResourceHandle);
    EXPECT_EQ(std::string(e.what()), "kernel philox_draw failed: cudaErrorInvalidResourceHandle (block0)");
  }
  dev().get_last_error();
}

}  // namespace
}  // namespace recap::runtime
