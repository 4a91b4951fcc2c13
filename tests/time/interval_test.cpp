// interval: ticks on the start + k * period grid, the skip policy for missed ticks, cancellation.
// Virtual time only; the test thread advances the clock once the ticking task has armed its
// timer (read from the executors' timer services), never sleeping.
#include "spindle/time/interval.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_duration;
using spindle::clock_time;
using spindle::task;
using namespace spindle::testing;

struct tick_record {
  clock_time scheduled;   // what tick() returned
  clock_time woke_at;     // now() when it returned
  clock_time next_tick;   // the interval's next tick afterwards
};

struct tick_log {
  std::mutex mutex;
  std::vector<tick_record> records;
  std::atomic<int> count{0};
};

task<void> tick_times(clock_duration period, int ticks, tick_log* log) {
  spindle::interval every(period);
  for (int i = 0; i < ticks; ++i) {
    const clock_time scheduled = co_await every.tick();
    {
      std::lock_guard lock(log->mutex);
      log->records.push_back({scheduled, spindle::now(), every.next_tick()});
    }
    log->count.fetch_add(1);
  }
}

TEST(Interval, TicksOnceEveryPeriodFromTheStart) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  tick_log log;
  auto handle = rt.spawn(tick_times(10ms, 4, &log));
  for (int k = 1; k <= 4; ++k) {
    ASSERT_TRUE(eventually([&] { return log.count.load() == k - 1 && armed_timers(rt) == 1; }));
    clock.advance(4ms);
    clock.advance(6ms);
    ASSERT_TRUE(eventually([&] { return log.count.load() == k; })) << "tick " << k;
  }
  handle.join();
  ASSERT_EQ(log.records.size(), 4u);
  for (int k = 1; k <= 4; ++k) {
    EXPECT_EQ(log.records[k - 1].scheduled, virtual_start + k * 10ms);
    EXPECT_EQ(log.records[k - 1].woke_at, virtual_start + k * 10ms);
  }
}

TEST(Interval, MissedTicksAreSkippedToTheNextGridPoint) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  tick_log log;
  auto handle = rt.spawn(tick_times(10ms, 3, &log));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  clock.advance(10ms);  // tick 1 at +10
  ASSERT_TRUE(eventually([&] { return log.count.load() == 1 && armed_timers(rt) == 1; }));
  clock.advance(35ms);  // now +45: tick 2 (due +20) is late; +30 and +40 are missed
  ASSERT_TRUE(eventually([&] { return log.count.load() == 2; }));
  // Skip: the next tick is +50, not an immediate burst for +30 and +40.
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  EXPECT_EQ(log.count.load(), 2);
  clock.advance(5ms);
  handle.join();
  ASSERT_EQ(log.records.size(), 3u);
  EXPECT_EQ(log.records[0].scheduled, virtual_start + 10ms);
  EXPECT_EQ(log.records[0].next_tick, virtual_start + 20ms);
  EXPECT_EQ(log.records[1].scheduled, virtual_start + 20ms);
  EXPECT_EQ(log.records[1].woke_at, virtual_start + 45ms);
  EXPECT_EQ(log.records[1].next_tick, virtual_start + 50ms);
  EXPECT_EQ(log.records[2].scheduled, virtual_start + 50ms);
  EXPECT_EQ(log.records[2].woke_at, virtual_start + 50ms);
}

TEST(Interval, LateExactlyOnAGridPointSkipsThatPointToo) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  tick_log log;
  auto handle = rt.spawn(tick_times(10ms, 2, &log));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  clock.advance(30ms);  // tick 1 (+10) completes at +30: +20 and +30 are missed
  ASSERT_TRUE(eventually([&] { return log.count.load() == 1; }));
  clock.advance(10ms);
  handle.join();
  EXPECT_EQ(log.records[0].next_tick, virtual_start + 40ms);
  EXPECT_EQ(log.records[1].scheduled, virtual_start + 40ms);
}

task<clock_time> cancelled_tick(std::atomic<bool>* cancelled) {
  spindle::interval every(10ms);
  try {
    co_await every.tick();
  } catch (const spindle::task_cancelled&) {
    cancelled->store(true);
  }
  co_return every.next_tick();
}

TEST(Interval, ACancelledTickIsNotConsumed) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> cancelled{false};
  auto handle = rt.spawn(cancelled_tick(&cancelled));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  handle.cancel();
  EXPECT_EQ(handle.join(), virtual_start + 10ms);
  EXPECT_TRUE(cancelled.load());
}

// issue 14, attack: a period wider than clock_duration used to wrap to a negative one (and be
// rejected); it saturates: the first tick is at the end of time.
TEST(Interval, TheLongestPeriodSaturatesInsteadOfWrapping) {
  const spindle::interval every(virtual_start, std::chrono::milliseconds::max());
  EXPECT_EQ(every.period(), clock_duration::max());
  EXPECT_EQ(every.next_tick(), clock_time::max());
}

TEST(Interval, RejectsANonPositivePeriod) {
  EXPECT_THROW(spindle::interval(virtual_start, 0s), spindle::usage_error);
  EXPECT_THROW(spindle::interval(virtual_start, -1s), spindle::usage_error);
  spindle::interval explicit_start(virtual_start, 5s);  // no clock needed with a start
  EXPECT_EQ(explicit_start.next_tick(), virtual_start + 5s);
  EXPECT_THROW(spindle::interval(1s), spindle::usage_error);  // now() off a worker
}

}  // namespace
