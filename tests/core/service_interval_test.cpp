// The executor serves its timers whatever it is running (issue 13, items 4 and 6): tasks woken by
// their timers keep running while a plain thread floods the runtime with small tasks, and a task
// that never yields does not hold the timers of its executor while another executor is idle.
//
// What keeps the runtime busy does so until the probe succeeded or a generous deadline passed
// (support/liveness_support.hpp): a starved probe fails the test at that bound, never hangs it.
#include <spindle/spindle.hpp>
#include <spindle/core/executor.hpp>
#include <spindle/core/runtime_core.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/liveness_support.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;

// --- item 4: woken tasks are not buried behind a foreign flood -------------------------------

// Sleeps 1 ms in a loop until `stop`, counting in `ticks` the ticks completed while `flooding`.
spindle::task<void> tick_during_flood(const std::atomic<bool>* flooding,
                                      const std::atomic<bool>* stop,
                                      std::atomic<int>* ticks, std::atomic<int>* started) {
  started->fetch_add(1);
  while (!stop->load()) {
    co_await spindle::sleep_for(1ms);
    if (flooding->load()) ticks->fetch_add(1, std::memory_order_relaxed);
  }
}

// 100 tasks sleep 1 ms in a loop on a 1-worker runtime while a plain thread floods it with small
// tasks (about 1 us of work each), spawning as fast as it can while fewer than 500,000 are
// outstanding, so the flood keeps a deep backlog. Every sleeper ticks 20 times during the flood,
// within 3 s (a woken sleeper that waits behind the backlog gets a tick every ~0.5 s). Today a
// woken sleeper is pushed below the batches that the periodic injector checks take, overflows
// back into the injector behind the flood, and waits for the backlog to drain.
TEST(ServiceInterval, SleepingTasksKeepTickingDuringAForeignFlood) {
  constexpr int sleepers = 100;
  constexpr int ticks_wanted = 20;
  const std::uint64_t most_outstanding = under_tsan || under_asan ? 200'000 : 500'000;
  std::atomic<bool> flooding{false}, stop{false};
  std::atomic<int> started{0};
  std::vector<std::atomic<int>> ticks(sleepers);
  std::atomic<std::uint64_t> flood_done{0};
  spindle::runtime rt({.workers = 1});
  set_on_exit stop_sleepers(stop);
  for (int i = 0; i < sleepers; ++i) {
    rt.spawn(tick_during_flood(&flooding, &stop, &ticks[std::size_t(i)], &started)).detach();
  }
  ASSERT_TRUE(eventually([&] { return started.load() == sleepers; }, liveness_wait));

  auto every_sleeper_ticked = [&] {
    return std::all_of(ticks.begin(), ticks.end(),
                       [&](const std::atomic<int>& t) { return t.load() >= ticks_wanted; });
  };
  flooding.store(true);
  const auto deadline = liveness_clock::now() + liveness_deadline;
  std::uint64_t submitted = 0;
  bool ticked = false;
  for (std::uint64_t round = 1;; ++round) {
    if (submitted - flood_done.load(std::memory_order_relaxed) < most_outstanding) {
      rt.spawn([&flood_done, submitted] {
          if (burn_a_microsecond(submitted) == 0) std::this_thread::yield();  // practically never
          flood_done.fetch_add(1, std::memory_order_relaxed);
        }).detach();
      ++submitted;
    } else {
      std::this_thread::yield();
    }
    if (round % 1024 == 0) {
      if ((ticked = every_sleeper_ticked())) break;
      if (liveness_clock::now() > deadline) break;
    }
  }
  flooding.store(false);
  int fewest = ticks_wanted;
  for (auto& t : ticks) fewest = std::min(fewest, t.load());
  EXPECT_TRUE(ticked) << "a sleeper ticked only " << fewest << " times in 3 s while "
                      << submitted << " small tasks were spawned from a plain thread ("
                      << flood_done.load() << " ran)";
  EXPECT_GT(flood_done.load(), 0u);
}

// --- item 6: a task that never yields does not hold its executor's timers ---------------------

// Sleeps `duration` on the executor it runs on, then records whether `spinning` was still set.
spindle::task<void> sleep_then_report(spindle::clock_duration duration, std::atomic<int>* stage,
                                      const std::atomic<bool>* spinning,
                                      std::atomic<bool>* resumed_while_spinning) {
  stage->store(1);
  co_await spindle::sleep_for(duration);
  resumed_while_spinning->store(spinning->load());
  stage->store(2);
}

// Spins without yielding until `release` or the liveness deadline.
spindle::task<void> spin_until_released(std::atomic<bool>* spinning,
                                        const std::atomic<bool>* release) {
  spinning->store(true);
  spin_until_set(*release, liveness_clock::now() + liveness_deadline);
  spinning->store(false);
  co_return;
}

// A 10 ms sleep armed on executor 0, then a task on executor 0 that spins without yielding: the
// sleep returns while the spinner spins, executor 1 being idle (today it returns only when the
// spinner does: the stuck-owner watch rescues queued tasks, not timers).
TEST(ServiceInterval, TimerOfAnExecutorHeldByANonYieldingTaskFires) {
  std::atomic<bool> release{false}, spinning{false}, resumed_while_spinning{false};
  std::atomic<int> stage{0};
  spindle::runtime rt({.workers = 2});
  set_on_exit release_spinner(release);
  auto sleeper = rt.spawn_on(0, sleep_then_report(10ms, &stage, &spinning,
                                                  &resumed_while_spinning));
  ASSERT_TRUE(eventually(
      [&] { return stage.load() == 1 && rt.core().executor_at(0).timers().size() == 1; },
      liveness_wait));
  auto spinner = rt.spawn_on(0, spin_until_released(&spinning, &release));
  ASSERT_TRUE(eventually([&] { return spinning.load(); }, liveness_wait));
  ASSERT_TRUE(eventually([&] { return stage.load() == 2; }, liveness_wait + 2s))
      << "the sleeper never resumed";
  EXPECT_TRUE(resumed_while_spinning.load())
      << "the 10 ms timer of executor 0 fired only after the non-yielding task ran into its 3 s "
         "deadline, although executor 1 was idle";
  release.store(true);
  join_bounded(std::move(spinner));
  join_bounded(std::move(sleeper));
}

}  // namespace
