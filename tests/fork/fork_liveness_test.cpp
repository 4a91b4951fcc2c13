// Liveness around fork-join computations (issue 13, items 3 and 7): a long fork-join
// computation must not freeze the timers and newly spawned tasks of the executors it runs on, a
// timer armed on an executor that then runs a long fork-join must fire while another executor
// is idle, and coarse loops (few long elements) must run their elements at the same time, also
// right after a fine-grained computation ran on the runtime.
//
// The busy computations run until the probe succeeded or a generous deadline passed
// (support/liveness_support.hpp), so a starved probe fails the test at its bound instead of
// hanging it. The runtimes use the default fork quantum: what a user gets.
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "support/liveness_support.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;

// --- item 3: a fine-grained fork-join computation on both workers ----------------------------

// Sleeps 1 ms in a loop until `stop`, counting the ticks that completed while `loop` was running.
spindle::task<void> tick_every_millisecond(const freezing_loop* loop, const std::atomic<bool>* stop,
                                           std::atomic<int>* ticks,
                                           std::atomic<int>* ticks_during_loop) {
  while (!stop->load()) {
    co_await spindle::sleep_for(1ms);
    ticks->fetch_add(1);
    if (loop->busy()) ticks_during_loop->fetch_add(1);
  }
}

// Starts `loop` in a task of `rt` and waits until it runs on every executor; the handle of
// that task.
spindle::join_handle<void> start_freezing_loop(spindle::runtime& rt, freezing_loop& loop) {
  auto handle = rt.spawn([&loop] { loop.run(); });
  EXPECT_TRUE(eventually([&] { return loop.spread_over(rt.executor_count()) || loop.finished.load(); },
                         liveness_wait));
  return handle;
}

// A task sleeping 1 ms in a loop keeps ticking while a fine-grained parallel_for keeps both
// workers of a 2-worker runtime busy: 20 ticks before the loop's 3 s deadline (today: at most one
// tick, hundreds of milliseconds late, while the loop runs).
TEST(ForkJoinLiveness, TickerKeepsTickingDuringAFineGrainedParallelFor) {
  freezing_loop loop;
  std::atomic<bool> stop{false};
  std::atomic<int> ticks{0}, ticks_during_loop{0};
  spindle::runtime rt({.workers = 2});
  set_on_exit stop_ticker(stop);
  set_on_exit end_loop(loop.probe_done);
  auto ticker = rt.spawn(tick_every_millisecond(&loop, &stop, &ticks, &ticks_during_loop));
  ASSERT_TRUE(eventually([&] { return ticks.load() >= 3; }, liveness_wait)) << "no ticks at all";
  auto computation = start_freezing_loop(rt, loop);
  ASSERT_TRUE(loop.busy() && loop.spread_over(2)) << "the loop does not run on both workers";
  eventually([&] { return ticks_during_loop.load() >= 20 || !loop.busy(); },
             liveness_wait + 2s);
  loop.probe_done.store(true);
  EXPECT_GE(ticks_during_loop.load(), 20)
      << "the 1 ms ticker ticked " << ticks_during_loop.load()
      << " times while the parallel_for ran (it ran until its 3 s deadline: "
      << (loop.expired.load() ? "yes" : "no") << ")";
  join_bounded(std::move(computation));
  stop.store(true);
  join_bounded(std::move(ticker));
}

// Records that it started, and whether the loop was running then.
spindle::task<void> report_start(const freezing_loop* loop, std::atomic<int>* started,
                                 std::atomic<bool>* started_during_loop) {
  started_during_loop->store(loop->busy());
  started->store(1);
  co_return;
}

// A task spawned from a plain thread starts while a fine-grained parallel_for keeps both workers
// busy (today it waits until the loop ends).
TEST(ForkJoinLiveness, TaskSpawnedFromAPlainThreadStartsDuringAFineGrainedParallelFor) {
  freezing_loop loop;
  std::atomic<int> started{0};
  std::atomic<bool> started_during_loop{false};
  spindle::runtime rt({.workers = 2});
  set_on_exit end_loop(loop.probe_done);
  auto computation = start_freezing_loop(rt, loop);
  ASSERT_TRUE(loop.busy() && loop.spread_over(2)) << "the loop does not run on both workers";
  auto spawned = rt.spawn(report_start(&loop, &started, &started_during_loop));
  eventually([&] { return started.load() == 1 || !loop.busy(); }, liveness_wait + 2s);
  loop.probe_done.store(true);
  join_bounded(std::move(computation));
  join_bounded(std::move(spawned));
  EXPECT_TRUE(started_during_loop.load())
      << "the spawned task started only after the parallel_for ran into its 3 s deadline";
}

// Sleeps `duration` (armed on the executor it runs on), then records whether `leaf_running` was
// still set when it resumed.
spindle::task<void> sleep_then_report(spindle::clock_duration duration, std::atomic<int>* stage,
                                      const std::atomic<bool>* leaf_running,
                                      std::atomic<bool>* resumed_while_running) {
  stage->store(1);
  co_await spindle::sleep_for(duration);
  resumed_while_running->store(leaf_running->load());
  stage->store(2);
}

// fork_join whose left branch is one long leaf (it spins until `release` or its deadline) and
// whose right branch is trivial: the executor running it is held by the leaf.
spindle::task<void> fork_join_with_a_long_leaf(std::atomic<bool>* leaf_running,
                                               const std::atomic<bool>* release) {
  const auto deadline = liveness_clock::now() + liveness_deadline;
  spindle::fork_join(
      [&] {
        leaf_running->store(true);
        spin_until_set(*release, deadline);
        leaf_running->store(false);
      },
      [] {});
  co_return;
}

// A 250 ms timer armed on executor 0, which then runs a fork-join computation held by a long
// leaf, fires while the computation runs: executor 1 is idle (the timer used to wait for the
// computation to end). 250 ms, far below the leaf's 3 s, and long enough that the test sees the
// timer armed and starts the computation before it is due: with 10 ms, TSan on a loaded machine
// once missed the armed timer altogether (it had fired before the first look).
TEST(ForkJoinLiveness, TimerOfAnExecutorRunningALongForkJoinFiresWhileAnotherIsIdle) {
  std::atomic<bool> release{false}, leaf_running{false}, resumed_while_running{false};
  std::atomic<int> stage{0};
  spindle::runtime rt({.workers = 2});
  set_on_exit release_leaf(release);
  auto sleeper = rt.spawn_on(0, sleep_then_report(250ms, &stage, &leaf_running,
                                                  &resumed_while_running));
  ASSERT_TRUE(eventually(
      [&] { return stage.load() == 1 && rt.core().executor_at(0).timers().size() == 1; },
      liveness_wait));
  auto computation = rt.spawn_on(0, fork_join_with_a_long_leaf(&leaf_running, &release));
  ASSERT_TRUE(eventually([&] { return leaf_running.load(); }, liveness_wait));
  ASSERT_TRUE(eventually([&] { return stage.load() == 2; }, liveness_wait + 2s))
      << "the sleeper never resumed";
  EXPECT_TRUE(resumed_while_running.load())
      << "the 250 ms timer of executor 0 fired only after its fork-join leaf ran into its 3 s "
         "deadline, although executor 1 was idle";
  release.store(true);
  join_bounded(std::move(computation));
  join_bounded(std::move(sleeper));
}

// --- item 7: coarse loops run their elements at the same time --------------------------------

// Elements that each wait (bounded: a deadline shared by the whole loop) until some other
// element runs at the same time as one of them; `overlapped` says whether that happened.
struct overlap_probe {
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  liveness_clock::time_point deadline = liveness_clock::now() + liveness_deadline;
  void element() {
    if (running.fetch_add(1) >= 1) overlapped.store(true);
    spin_until_set(overlapped, deadline);
    running.fetch_sub(1);
  }
};

// A fine-grained loop (tiny elements): the heartbeat countdown grows to its maximum meanwhile.
std::uint64_t fine_grained_sum() {
  std::atomic<std::uint64_t> total{0};
  spindle::parallel_for(std::uint64_t(0), std::uint64_t(1) << 24, [&total](std::uint64_t i) {
    if ((i & 0xfffff) == 0) total.fetch_add(i, std::memory_order_relaxed);
  });
  return total.load();
}

// Runs parallel_for over `items` elements of `probe` in a task of a 2-worker runtime (after a
// fine-grained loop on the same worker if `after_fine_grained`); true if two elements overlapped.
bool coarse_elements_overlap(std::size_t items, bool after_fine_grained) {
  overlap_probe probe;
  spindle::runtime rt({.workers = 2});
  auto computation = rt.spawn([&probe, items, after_fine_grained] {
    if (after_fine_grained) fine_grained_sum();
    probe.deadline = liveness_clock::now() + liveness_deadline;
    spindle::parallel_for(std::size_t(0), items, [&probe](std::size_t) { probe.element(); });
  });
  join_bounded(std::move(computation), std::chrono::seconds(30));
  return probe.overlapped.load();
}

// parallel_for over 2 elements, each waiting until the other has started: passes only if both
// run at the same time (today they run one after the other, so the first waits out its 3 s).
TEST(CoarseForkJoin, TwoElementsRunAtTheSameTime) {
  EXPECT_TRUE(coarse_elements_overlap(2, /*after_fine_grained=*/false))
      << "the two elements of a coarse parallel_for ran one after the other";
}

// parallel_for over 8 elements: at least two of them run at the same time.
TEST(CoarseForkJoin, SomeOfEightElementsRunAtTheSameTime) {
  EXPECT_TRUE(coarse_elements_overlap(8, /*after_fine_grained=*/false))
      << "the eight elements of a coarse parallel_for ran one after the other";
}

// The same, right after a fine-grained computation on the same worker (today the heartbeat
// countdown carries over from it: the whole coarse loop is one block).
TEST(CoarseForkJoin, TwoElementsRunAtTheSameTimeAfterAFineGrainedLoop) {
  EXPECT_TRUE(coarse_elements_overlap(2, /*after_fine_grained=*/true))
      << "the two elements of a coarse parallel_for ran one after the other";
}

TEST(CoarseForkJoin, SomeOfEightElementsRunAtTheSameTimeAfterAFineGrainedLoop) {
  EXPECT_TRUE(coarse_elements_overlap(8, /*after_fine_grained=*/true))
      << "the eight elements of a coarse parallel_for ran one after the other";
}

// Eight elements of 20 ms of work each (no waiting on one another), right after a fine-grained
// loop on the same worker: the other worker takes some of them, so at least two run at the same
// time (the issue: 1.0x the serial time today, against 0.7x on a fresh runtime).
TEST(CoarseForkJoin, EightTwentyMillisecondElementsOverlapAfterAFineGrainedLoop) {
  std::atomic<int> running{0}, most_at_once{0};
  spindle::runtime rt({.workers = 2});
  auto computation = rt.spawn([&running, &most_at_once] {
    fine_grained_sum();
    spindle::parallel_for(0, 8, [&](int) {
      raise_max(most_at_once, running.fetch_add(1) + 1);
      busy_for(20ms);
      running.fetch_sub(1);
    });
  });
  join_bounded(std::move(computation));
  EXPECT_GE(most_at_once.load(), 2)
      << "the eight 20 ms elements of a parallel_for ran one after the other on 2 workers";
}

}  // namespace
