// Stream-order exploration and the race check, including the acceptance tests: a planted missing
// event wait is found within 100 seeds (a race report naming both launches, and a stale value for
// at least one seed); the correctly joined program is clean and right over 1,000 seeds.
#include <cstdio>
#include <set>
#include <string>

#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace k = kernels;

constexpr size_t kWords = 64;
constexpr uint32_t kProduced = 42;

struct ProducerConsumerRun {
  std::vector<sim::RaceReport> races;
  bool stale = false;  // the consumer read the buffer before the producer wrote it
};

// Producer kernel on stream A writes buf; consumer kernel on stream B copies buf to out. With
// `joined` an event recorded on A after the producer is waited on by B before the consumer.
ProducerConsumerRun producer_consumer(uint64_t seed, bool joined) {
  auto dev = make_sim(seed, /*race_check=*/true);
  Stream a = new_stream(*dev), b = new_stream(*dev);
  uint32_t* buf = new_buffer(*dev, kWords);
  uint32_t* out = new_buffer(*dev, kWords);
  Event produced = new_event(*dev);
  EXPECT_STATUS(Status::Success, dev->launch(k::fill_u32(buf, kWords, kProduced), a));
  if (joined) {
    EXPECT_STATUS(Status::Success, dev->event_record(produced, a));
    EXPECT_STATUS(Status::Success, dev->stream_wait_event(b, produced));
  }
  EXPECT_STATUS(Status::Success, dev->launch(k::copy_u32(out, buf, kWords), b));
  EXPECT_STATUS(Status::Success, dev->device_synchronize());
  ProducerConsumerRun run;
  for (uint32_t v : read_back(*dev, out, kWords))
    if (v != kProduced) run.stale = true;
  run.races = sim::races(*dev);
  return run;
}

TEST(SimExplore, PlantedMissingEventWaitIsFoundWithin100Seeds) {
  bool reported = false, stale = false;
  uint64_t first_stale_seed = 0;
  std::string first_report;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    ProducerConsumerRun run = producer_consumer(seed, /*joined=*/false);
    for (const sim::RaceReport& r : run.races) {
      std::string text = r.describe();
      // Both launches are named: kernel, sequence number, stream.
      bool names_both = text.find("kernel fill_u32 #") != std::string::npos &&
                        text.find("kernel copy_u32 #") != std::string::npos &&
                        r.first.find("on stream 2") != std::string::npos &&
                        r.second.find("on stream 3") != std::string::npos;
      EXPECT_TRUE(names_both) << text;
      EXPECT_TRUE(r.first_writes && !r.second_writes) << text;
      EXPECT_EQ(r.bytes, kWords * sizeof(uint32_t)) << text;
      reported = reported || names_both;
      if (first_report.empty()) first_report = "seed " + std::to_string(seed) + ": " + text;
    }
    if (run.stale && !stale) first_stale_seed = seed;
    stale = stale || run.stale;
  }
  std::printf("    first race report: %s\n    first seed where the consumer read the stale value: %llu\n",
              first_report.c_str(), static_cast<unsigned long long>(first_stale_seed));
  EXPECT_TRUE(reported) << "no race report naming the producer and the consumer";
  EXPECT_TRUE(stale) << "no seed let the consumer observe the stale value";
}

TEST(SimExplore, JoinedProducerConsumerIsCleanOver1000Seeds) {
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    ProducerConsumerRun run = producer_consumer(seed, /*joined=*/true);
    ASSERT_TRUE(run.races.empty()) << "seed " << seed << ": " << run.races.front().describe();
    ASSERT_FALSE(run.stale) << "seed " << seed;
  }
}

TEST(SimExplore, RaceIsReportedEvenWhenTheScheduleHappensToBeRight) {
  // Happens-before comes from dependencies, not from the order things ran: program order (seed 0)
  // runs the producer first, and the race is still reported.
  auto dev = make_sim(/*seed=*/0, /*race_check=*/true);
  Stream a = new_stream(*dev), b = new_stream(*dev);
  uint32_t* buf = new_buffer(*dev, 4);
  uint32_t* out = new_buffer(*dev, 4);
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), a));
  ASSERT_OK(dev->launch(k::copy_u32(out, buf, 4), b));
  ASSERT_OK(dev->stream_synchronize(b));  // (without it, reading `out` back would race too)
  EXPECT_EQ(read_word(*dev, out), 1u);
  std::vector<sim::RaceReport> r = sim::races(*dev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].first.substr(0, 15), "kernel fill_u32");
  EXPECT_EQ(r[0].second.substr(0, 15), "kernel copy_u32");
}

TEST(SimExplore, RepeatedRaceIsReportedOnce) {
  auto dev = make_sim(/*seed=*/5, /*race_check=*/true);
  Stream a = new_stream(*dev), b = new_stream(*dev);
  uint32_t* buf = new_buffer(*dev, 4);
  uint32_t* out = new_buffer(*dev, 4);
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(dev->launch(k::fill_u32(buf, 4, static_cast<uint32_t>(i)), a));
    ASSERT_OK(dev->launch(k::copy_u32(out, buf, 4), b));
    ASSERT_OK(dev->device_synchronize());
  }
  // Every iteration repeats one conflict (the fill on A against the copy on B); the
  // device_synchronize between iterations orders each iteration after the previous one.
  std::vector<sim::RaceReport> r = sim::races(*dev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].describe().find("fill_u32"), std::string::npos);
}

TEST(SimExplore, HostSynchronizationIsHappensBefore) {
  // Work issued after the host waited for other work is ordered after it, whatever the streams.
  auto sync_a = [](Device& d, Stream a, Event) { return d.stream_synchronize(a); };
  auto sync_ev = [](Device& d, Stream, Event e) { return d.event_synchronize(e); };
  auto sync_dev = [](Device& d, Stream, Event) { return d.device_synchronize(); };
  auto none = [](Device&, Stream, Event) { return Status::Success; };
  int i = 0;
  for (auto wait : std::vector<std::function<Status(Device&, Stream, Event)>>{sync_a, sync_ev, sync_dev, none}) {
    SCOPED_TRACE(i);
    auto dev = make_sim(/*seed=*/11, /*race_check=*/true);
    Stream a = new_stream(*dev), b = new_stream(*dev);
    Event e = new_event(*dev);
    uint32_t* buf = new_buffer(*dev, 4);
    uint32_t* out = new_buffer(*dev, 4);
    ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 3), a));
    ASSERT_OK(dev->event_record(e, a));
    ASSERT_OK(wait(*dev, a, e));
    ASSERT_OK(dev->launch(k::copy_u32(out, buf, 4), b));
    ASSERT_OK(dev->device_synchronize());
    EXPECT_EQ(sim::races(*dev).size(), i == 3 ? 1u : 0u);
    ++i;
  }
}

TEST(SimExplore, TwoReadsDoNotRaceAndStreamOrderIsHappensBefore) {
  auto dev = make_sim(/*seed=*/9, /*race_check=*/true);
  Stream a = new_stream(*dev), b = new_stream(*dev);
  uint32_t* src = new_buffer(*dev, 4);
  uint32_t* x = new_buffer(*dev, 4);
  uint32_t* y = new_buffer(*dev, 4);
  ASSERT_OK(dev->device_synchronize());
  ASSERT_OK(dev->launch(k::copy_u32(x, src, 4), a));  // both read src
  ASSERT_OK(dev->launch(k::copy_u32(y, src, 4), b));
  ASSERT_OK(dev->launch(k::increment_u32(x, 4), a));  // same stream: ordered after the copy
  ASSERT_OK(dev->device_synchronize());
  EXPECT_TRUE(sim::races(*dev).empty()) << sim::races(*dev).front().describe();
}

TEST(SimExplore, AWriteStillConflictsAfterALaterReadOnItsOwnStream) {
  // A writes buf then reads it back; B reads buf unordered: B's read races with A's write (the
  // checker must not forget a write because an ordered read covered it).
  auto dev = make_sim(/*seed=*/6, /*race_check=*/true);
  Stream a = new_stream(*dev), b = new_stream(*dev);
  uint32_t* buf = new_buffer(*dev, 4);
  uint32_t* x = new_buffer(*dev, 4);
  uint32_t* y = new_buffer(*dev, 4);
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), a));
  ASSERT_OK(dev->launch(k::copy_u32(x, buf, 4), a));
  ASSERT_OK(dev->launch(k::copy_u32(y, buf, 4), b));
  ASSERT_OK(dev->device_synchronize());
  std::vector<sim::RaceReport> r = sim::races(*dev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].first.substr(0, 15), "kernel fill_u32") << r[0].describe();
}

TEST(SimExplore, FreedMemoryDoesNotRaceWithItsNextUse) {
  auto dev = make_sim(/*seed=*/2, /*race_check=*/true);
  Stream a = new_stream(*dev), b = new_stream(*dev);
  void* p = nullptr;
  ASSERT_OK(dev->malloc(&p, 256, MemCategory::Other));
  ASSERT_OK(dev->launch(k::fill_u32(static_cast<uint32_t*>(p), 64, 1), a));
  ASSERT_OK(dev->free(p));  // synchronizes
  ASSERT_OK(dev->malloc(&p, 256, MemCategory::Other));  // likely the same block, reused
  ASSERT_OK(dev->launch(k::fill_u32(static_cast<uint32_t*>(p), 64, 2), b));
  ASSERT_OK(dev->device_synchronize());
  EXPECT_TRUE(sim::races(*dev).empty());
}

TEST(SimExplore, FreeNotOrderedAfterAUseOnAnotherStreamIsReported) {
  for (bool joined : {false, true}) {
    auto dev = make_sim(/*seed=*/4, /*race_check=*/true);
    Stream a = new_stream(*dev), b = new_stream(*dev);
    Event used = new_event(*dev);
    void* p = nullptr;
    ASSERT_OK(dev->malloc_async(&p, 256, a, MemCategory::Activations));
    ASSERT_OK(dev->launch(k::fill_u32(static_cast<uint32_t*>(p), 64, 1), b));
    if (joined) {
      ASSERT_OK(dev->event_record(used, b));
      ASSERT_OK(dev->stream_wait_event(a, used));
    }
    ASSERT_OK(dev->free_async(p, a));
    ASSERT_OK(dev->device_synchronize());
    std::vector<sim::RaceReport> r = sim::races(*dev);
    if (joined) {
      EXPECT_TRUE(r.empty()) << r.front().describe();
    } else {
      ASSERT_EQ(r.size(), 1u);
      EXPECT_EQ(r[0].second.substr(0, 8), "mem free") << r[0].describe();
    }
  }
}

TEST(SimExplore, RaceBetweenGraphBranchesIsReported) {
  auto dev = make_sim(/*seed=*/0, /*race_check=*/true);
  Stream s1 = new_stream(*dev), s2 = new_stream(*dev);
  uint32_t* a = new_buffer(*dev, 1);
  Event fork = new_event(*dev), join = new_event(*dev);
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(dev->event_record(fork, s1));
  ASSERT_OK(dev->stream_wait_event(s2, fork));
  ASSERT_OK(dev->launch(k::increment_u32(a, 1), s1));  // both branches write `a`, unordered
  ASSERT_OK(dev->launch(k::scale_u32(a, 1, 2), s2));
  ASSERT_OK(dev->event_record(join, s2));
  ASSERT_OK(dev->stream_wait_event(s1, join));
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_TRUE(sim::races(*dev).empty()) << "capture runs nothing";
  GraphExec e;
  ASSERT_OK(dev->graph_instantiate(&e, g));
  ASSERT_OK(dev->graph_launch(e, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  std::vector<sim::RaceReport> r = sim::races(*dev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].describe().find("graph exec"), std::string::npos) << r[0].describe();
}

TEST(SimExplore, LaunchesOfOneExecutableNeverInterleave) {
  // Two launches of one executable on different streams, no events: each launch is ordered behind
  // the previous one, so x = ((0*2)+1)*2+1 = 3 for every seed, and no race is reported.
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    auto dev = make_sim(seed, /*race_check=*/true);
    Stream s1 = new_stream(*dev), s2 = new_stream(*dev);
    uint32_t* x = new_buffer(*dev, 1);
    ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
    ASSERT_OK(dev->launch(k::scale_u32(x, 1, 2), s1));
    ASSERT_OK(dev->launch(k::increment_u32(x, 1), s1));
    Graph g;
    ASSERT_OK(dev->stream_end_capture(s1, &g));
    GraphExec e;
    ASSERT_OK(dev->graph_instantiate(&e, g));
    ASSERT_OK(dev->graph_launch(e, s1));
    ASSERT_OK(dev->graph_launch(e, s2));
    ASSERT_OK(dev->device_synchronize());
    ASSERT_EQ(read_word(*dev, x), 3u) << "seed " << seed;
    ASSERT_TRUE(sim::races(*dev).empty()) << sim::races(*dev).front().describe();
  }
}

TEST(SimExplore, StreamWorkAfterAGraphLaunchIsOrderedBehindIt) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    auto dev = make_sim(seed, /*race_check=*/true);
    Stream s1 = new_stream(*dev), s2 = new_stream(*dev);
    uint32_t* x = new_buffer(*dev, 1);
    uint32_t* y = new_buffer(*dev, 1);
    Event fork = new_event(*dev), join = new_event(*dev);
    ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
    ASSERT_OK(dev->event_record(fork, s1));
    ASSERT_OK(dev->stream_wait_event(s2, fork));
    ASSERT_OK(dev->launch(k::fill_u32(x, 1, 5), s2));  // a branch
    ASSERT_OK(dev->event_record(join, s2));
    ASSERT_OK(dev->stream_wait_event(s1, join));
    Graph g;
    ASSERT_OK(dev->stream_end_capture(s1, &g));
    GraphExec e;
    ASSERT_OK(dev->graph_instantiate(&e, g));
    ASSERT_OK(dev->graph_launch(e, s1));
    ASSERT_OK(dev->launch(k::copy_u32(y, x, 1), s1));  // after the whole launch
    ASSERT_OK(dev->stream_synchronize(s1));
    ASSERT_EQ(read_word(*dev, y), 5u) << "seed " << seed;
    ASSERT_TRUE(sim::races(*dev).empty());
  }
}

// The order host functions run in, as a string: "A0 B0 A1 ...".
std::string interleaving(uint64_t seed) {
  auto dev = make_sim(seed);
  Stream a = new_stream(*dev), b = new_stream(*dev), c = new_stream(*dev);
  std::string log;
  for (int i = 0; i < 4; ++i)
    for (auto [s, name] : {std::pair{a, 'A'}, std::pair{b, 'B'}, std::pair{c, 'C'}}) {
      std::string tag = std::string(1, name) + std::to_string(i) + " ";
      EXPECT_STATUS(Status::Success, dev->launch_host_func(s, [&log, tag] { log += tag; }));
    }
  EXPECT_STATUS(Status::Success, dev->device_synchronize());
  return log;
}

TEST(SimExplore, SameSeedSameOrderAndSeedsDiffer) {
  EXPECT_EQ(interleaving(7), interleaving(7));
  std::set<std::string> orders;
  for (uint64_t seed = 1; seed <= 10; ++seed) orders.insert(interleaving(seed));
  EXPECT_GT(orders.size(), 5u);
  for (const std::string& o : orders) {  // stream order always holds
    EXPECT_LT(o.find("A0"), o.find("A1"));
    EXPECT_LT(o.find("B2"), o.find("B3"));
  }
}

TEST(SimExplore, SeedZeroRunsInProgramOrderAtIssue) {
  std::string expected;
  for (int i = 0; i < 4; ++i)
    for (char n : {'A', 'B', 'C'}) expected += std::string(1, n) + std::to_string(i) + " ";
  EXPECT_EQ(interleaving(0), expected);
  auto dev = make_sim(0);
  Stream s = new_stream(*dev);
  uint32_t* x = new_buffer(*dev, 1);
  ASSERT_OK(dev->launch(k::fill_u32(x, 1, 4), s));
  EXPECT_EQ(*x, 4u) << "ran at issue";  // sim memory is host memory
}

}  // namespace
}  // namespace recap::device::simtest
