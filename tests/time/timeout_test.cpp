// with_timeout / with_deadline: the four outcomes (value, timeout, the child's exception, the
// caller's cancellation), in virtual time. The test thread advances the manual clock once both
// timers (the timeout and the child's sleep) are armed, never sleeping.
#include "spindle/time/timeout.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "spindle/spindle.hpp"
#include "spindle/time/time.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_duration;
using spindle::clock_time;
using spindle::task;
using namespace spindle::testing;

// Sleeps, then returns `value`; records whether it saw its cancellation.
task<int> slow_value(clock_duration duration, int value, std::atomic<bool>* saw_cancel) {
  try {
    co_await spindle::sleep_for(duration);
  } catch (const spindle::task_cancelled&) {
    saw_cancel->store(true);
    throw;
  }
  co_return value;
}

TEST(Timeout, InnerFinishingFirstGivesItsValue) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> saw_cancel{false};
  auto handle = rt.spawn(spindle::with_timeout(1s, slow_value(10ms, 42, &saw_cancel)));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(10ms);
  EXPECT_EQ(handle.join(), 42);
  EXPECT_FALSE(saw_cancel.load());
  EXPECT_EQ(armed_timers(rt), 0u);  // the timeout was disarmed after the join
}

TEST(Timeout, SlowInnerIsCancelledAndTimesOut) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> saw_cancel{false};
  auto handle = rt.spawn(spindle::with_timeout(1s, slow_value(10s, 42, &saw_cancel)));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(1s);
  EXPECT_THROW(handle.join(), spindle::timeout_error);
  EXPECT_TRUE(saw_cancel.load());   // the child unwound before with_timeout returned
  EXPECT_EQ(armed_timers(rt), 0u);  // its sleep was disarmed by the cancellation
}

// The conversion happens at run time, in the task (a constant argument may be folded).
template <class Duration>
task<int> slow_value_within(Duration timeout, std::atomic<bool>* saw_cancel) {
  co_return co_await spindle::with_timeout(timeout, slow_value(2h, 42, saw_cancel));
}

// issue 14, attack: with_timeout(milliseconds::max(), ...) used to wrap to a negative timeout
// in the conversion to nanoseconds and time out at once; it saturates (never times out).
TEST(Timeout, TheLongestTimeoutSaturatesInsteadOfWrapping) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> saw_cancel{false};
  auto handle = rt.spawn(slow_value_within(std::chrono::milliseconds::max(), &saw_cancel));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2 || handle.is_finished(); }));
  clock.advance(1h);  // the timers are checked: a timeout that wrapped into the past fires here
  clock.advance(1h);
  EXPECT_EQ(handle.join(), 42);
  EXPECT_FALSE(saw_cancel.load());
}

TEST(Timeout, DeadlineVariant) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> saw_cancel{false};
  auto handle =
      rt.spawn(spindle::with_deadline(virtual_start + 5s, slow_value(1h, 1, &saw_cancel)));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(5s);
  EXPECT_THROW(handle.join(), spindle::timeout_error);
  EXPECT_TRUE(saw_cancel.load());
}

task<int> throws_after(clock_duration duration) {
  co_await spindle::sleep_for(duration);
  throw boom();
}

TEST(Timeout, InnerExceptionPropagates) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  auto immediately = rt.spawn(spindle::with_timeout(1s, throws_after(0s)));
  EXPECT_THROW(immediately.join(), boom);
  auto later = rt.spawn(spindle::with_timeout(1s, throws_after(10ms)));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(10ms);
  EXPECT_THROW(later.join(), boom);
}

TEST(Timeout, CancellingTheCallerCancelsTheChild) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> saw_cancel{false};
  auto handle = rt.spawn(spindle::with_timeout(1h, slow_value(10h, 1, &saw_cancel)));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  handle.cancel();
  EXPECT_THROW(handle.join(), spindle::task_cancelled);
  // with_timeout waited for the child: it has already seen the cancellation.
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(armed_timers(rt), 0u);
  EXPECT_EQ(rt.live_tasks(), 0u);
  EXPECT_EQ(clock.now(), virtual_start);
}

task<int> swallows_cancellation() {
  try {
    co_await spindle::sleep_for(10s);
  } catch (const spindle::task_cancelled&) {
    co_return 7;  // the child decides: its value wins over the timeout
  }
  co_return 0;
}

TEST(Timeout, AChildThatHandlesTheSignalReturnsItsValue) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  auto handle = rt.spawn(spindle::with_timeout(1s, swallows_cancellation()));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(1s);
  EXPECT_EQ(handle.join(), 7);
}

task<void> sleep_void(clock_duration duration) { co_await spindle::sleep_for(duration); }

// A caller that handles the timeout itself, and a void inner task.
task<int> caller_handling_timeouts() {
  int outcome = 0;
  co_await spindle::with_timeout(1s, sleep_void(1ms));
  outcome += 1;
  try {
    co_await spindle::with_timeout(1s, sleep_void(1h));
  } catch (const spindle::timeout_error&) {
    outcome += 10;
  }
  co_return outcome;
}

TEST(Timeout, NestedInATaskWithVoidInner) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  auto handle = rt.spawn(caller_handling_timeouts());
  // Advance 1 ms at a time, each time both timers of the current with_timeout are armed.
  ASSERT_TRUE(eventually([&] {
    if (handle.is_finished()) return true;
    if (armed_timers(rt) == 2) clock.advance(1ms);
    return false;
  }));
  EXPECT_EQ(handle.join(), 11);
}

TEST(Timeout, ZeroTimeoutCancelsAtTheFirstSuspension) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> saw_cancel{false};
  auto handle = rt.spawn(spindle::with_timeout(0s, slow_value(1s, 1, &saw_cancel)));
  EXPECT_THROW(handle.join(), spindle::timeout_error);  // without advancing the clock
  EXPECT_EQ(clock.now(), virtual_start);
}

TEST(Timeout, ManyTimeoutsRacingCompletions) {
  // Timeouts due at the same virtual instant as the children's own wake-ups: each call yields
  // either the value or timeout_error, and nothing leaks or hangs.
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<bool> ignored{false};
  std::vector<spindle::join_handle<int>> handles;
  for (int i = 0; i < 200; ++i) {
    handles.push_back(rt.spawn(spindle::with_timeout(10ms, slow_value(10ms, i, &ignored))));
  }
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 400; }));
  clock.advance(10ms);
  int values = 0, timeouts = 0;
  for (int i = 0; i < 200; ++i) {
    try {
      EXPECT_EQ(handles[i].join(), i);
      ++values;
    } catch (const spindle::timeout_error&) {
      ++timeouts;
    }
  }
  EXPECT_EQ(values + timeouts, 200);
  EXPECT_TRUE(eventually([&] { return rt.live_tasks() == 0 && armed_timers(rt) == 0; }));
}

}  // namespace

namespace {

TEST(Timeout, RuntimeShutdownWhileWaiting) {
  // The caller (suspended in the join) and the child (suspended in its sleep) are abandoned at
  // shutdown in either order; nothing may touch a destroyed frame (run under the sanitizers).
  spindle::manual_clock clock(virtual_start);
  std::atomic<bool> saw_cancel{false};
  for (int round = 0; round < 20; ++round) {
    spindle::runtime rt({.workers = 2, .clock = &clock});
    auto handle = rt.spawn(spindle::with_timeout(1h, slow_value(10h, 1, &saw_cancel)));
    ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  }
  EXPECT_FALSE(saw_cancel.load());  // abandoned, never resumed
}

}  // namespace
