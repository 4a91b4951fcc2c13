// with_timeout / with_deadline over awaitables that are not tasks (a channel receive, a sleep, a
// join, another with_timeout): no child task, a cancellation scope of the caller (S6). Outcomes,
// nesting, the scope ending cleanly (later waits are not cancelled), and the timer firing as
// the operand completes. Virtual time: the test thread advances the manual clock once the
// timers it expects are armed, never sleeping.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_duration;
using spindle::task;
using namespace spindle::testing;

constexpr int scoped_timed_out = -1;
constexpr int scoped_cancelled = -2;
constexpr int scoped_closed = -3;

// One receive within `timeout`: the value, or what ended it.
task<int> scoped_receive(spindle::channel<int>* ch, clock_duration timeout) {
  try {
    std::optional<int> value = co_await spindle::with_timeout(timeout, ch->receive());
    co_return value ? *value : scoped_closed;
  } catch (const spindle::timeout_error&) {
    co_return scoped_timed_out;
  } catch (const spindle::task_cancelled&) {
    co_return scoped_cancelled;
  }
}

TEST(TimeoutAwaitable, ReceiveTimesOutAndLeavesNoReceiverBehind) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  spindle::channel<int> ch(4);
  auto handle = rt.spawn(scoped_receive(&ch, 1s));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));  // the timeout only: no child
  EXPECT_EQ(rt.live_tasks(), 1u);
  clock.advance(1s);
  EXPECT_EQ(handle.join(), scoped_timed_out);
  EXPECT_EQ(armed_timers(rt), 0u);
  // The timed-out receive unlinked itself: an item sent now stays in the channel.
  ASSERT_TRUE(ch.try_send(5));
  EXPECT_EQ(ch.try_receive(), std::optional<int>(5));
}

TEST(TimeoutAwaitable, ValueBeforeTheDeadlineWinsAndDisarms) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  spindle::channel<int> ch(4);
  auto handle = rt.spawn(scoped_receive(&ch, 1s));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  ASSERT_TRUE(ch.try_send(7));
  EXPECT_EQ(handle.join(), 7);
  EXPECT_EQ(armed_timers(rt), 0u);
}

TEST(TimeoutAwaitable, AReadyOperandWinsEvenAtZeroTimeout) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  spindle::channel<int> ch(4);
  ASSERT_TRUE(ch.try_send(3));
  EXPECT_EQ(rt.spawn(scoped_receive(&ch, 0s)).join(), 3);
  // An empty channel and a zero timeout: times out without the clock moving.
  EXPECT_EQ(rt.spawn(scoped_receive(&ch, 0s)).join(), scoped_timed_out);
  EXPECT_EQ(clock.now(), virtual_start);
}

TEST(TimeoutAwaitable, CancellingTheCallerIsNotATimeout) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  spindle::channel<int> ch(4);
  auto handle = rt.spawn(scoped_receive(&ch, 1h));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  handle.cancel();
  EXPECT_EQ(handle.join(), scoped_cancelled);
  EXPECT_EQ(armed_timers(rt), 0u);
}

task<int> scoped_sleep(clock_duration timeout, clock_duration sleep) {
  try {
    co_await spindle::with_timeout(timeout, spindle::sleep_for(sleep));
    co_return 1;
  } catch (const spindle::timeout_error&) {
    co_return scoped_timed_out;
  }
}

TEST(TimeoutAwaitable, OverASleep) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  auto slow = rt.spawn(scoped_sleep(1s, 10s));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(1s);
  EXPECT_EQ(slow.join(), scoped_timed_out);
  EXPECT_EQ(armed_timers(rt), 0u);  // the sleep was disarmed by the scope's cancellation
  auto fast = rt.spawn(scoped_sleep(10s, 1s));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(1s);
  EXPECT_EQ(fast.join(), 1);
}

task<int> scoped_sleeper() {
  co_await spindle::sleep_for(1h);
  co_return 9;
}

// An lvalue join handle: a timed-out join leaves the handle as it was (join_handle.hpp).
task<int> scoped_join_twice(spindle::join_handle<int>* child) {
  try {
    co_await spindle::with_timeout(1s, *child);
    co_return 0;
  } catch (const spindle::timeout_error&) {
  }
  child->cancel();
  try {
    co_await *child;
  } catch (const spindle::task_cancelled&) {
    co_return scoped_timed_out;
  }
  co_return 0;
}

TEST(TimeoutAwaitable, OverAJoinLeavesTheHandleUsable) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  auto child = rt.spawn(scoped_sleeper());
  auto handle = rt.spawn(scoped_join_twice(&child));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(1s);
  EXPECT_EQ(handle.join(), scoped_timed_out);
  EXPECT_EQ(rt.live_tasks(), 0u);
}

// Nested scopes: whichever deadline comes first ends the receive; an outer one's firing passes
// through the inner scope as task_cancelled and becomes the outer's timeout_error.
task<int> scoped_nested(spindle::channel<int>* ch, clock_duration outer, clock_duration inner) {
  try {
    std::optional<int> value =
        co_await spindle::with_timeout(outer, spindle::with_timeout(inner, ch->receive()));
    co_return value ? *value : scoped_closed;
  } catch (const spindle::timeout_error&) {
    co_return scoped_timed_out;
  } catch (const spindle::task_cancelled&) {
    co_return scoped_cancelled;
  }
}

TEST(TimeoutAwaitable, NestedScopesEitherDeadlineTimesOut) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  spindle::channel<int> ch(4);
  auto outer_first = rt.spawn(scoped_nested(&ch, 1s, 1h));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(1s);
  EXPECT_EQ(outer_first.join(), scoped_timed_out);
  EXPECT_EQ(armed_timers(rt), 0u);
  auto inner_first = rt.spawn(scoped_nested(&ch, 1h, 1s));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 2; }));
  clock.advance(1s);
  EXPECT_EQ(inner_first.join(), scoped_timed_out);
  EXPECT_EQ(armed_timers(rt), 0u);
}

// After a timeout the task waits normally again: the scope's cancellation ended with it.
task<int> scoped_then_plain(spindle::channel<int>* ch, std::atomic<int>* timeouts_seen) {
  int timeouts = 0;
  for (int i = 0; i < 3; ++i) {
    try {
      (void)co_await spindle::with_timeout(1ms, ch->receive());
    } catch (const spindle::timeout_error&) {
      ++timeouts;
    }
    timeouts_seen->store(timeouts);
  }
  co_await spindle::yield_now();  // a cancellation point: throws if the task were cancelled
  std::optional<int> value = co_await ch->receive();
  co_return timeouts * 100 + value.value_or(scoped_closed);
}

TEST(TimeoutAwaitable, LaterWaitsAreNotCancelled) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  spindle::channel<int> ch(4);
  std::atomic<int> timeouts_seen{0};
  auto handle = rt.spawn(scoped_then_plain(&ch, &timeouts_seen));
  // Advance 1 ms whenever a with_timeout's timer is armed, until all three have timed out.
  ASSERT_TRUE(eventually([&] {
    if (timeouts_seen.load() == 3) return true;
    if (armed_timers(rt) == 1) clock.advance(1ms);
    return false;
  }));
  ASSERT_TRUE(ch.try_send(4));
  EXPECT_EQ(handle.join(), 304);
}

// The timer fires as the operand completes (the test thread sends while the workers expire the
// timers due at the same instant): every item is either received by its task or still in its
// channel, and a task whose scope's signal runs late is not cancelled afterwards.
task<int> scoped_receive_then_yield(spindle::channel<int>* ch) {
  const int got = co_await scoped_receive(ch, 10ms);
  for (int i = 0; i < 4; ++i) co_await spindle::yield_now();  // throws if a late signal hit us
  co_return got;
}

TEST(TimeoutAwaitable, TimerFiringAsTheOperandCompletes) {
  constexpr int tasks = 200;
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::vector<std::unique_ptr<spindle::channel<int>>> channels;
  std::vector<spindle::join_handle<int>> handles;
  for (int i = 0; i < tasks; ++i) {
    channels.push_back(std::make_unique<spindle::channel<int>>(1));
    handles.push_back(rt.spawn(scoped_receive_then_yield(channels.back().get())));
  }
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == tasks; }));
  clock.advance(10ms);
  for (int i = 0; i < tasks; ++i) ASSERT_TRUE(channels[i]->try_send(int(i)));
  int received = 0, timed_out = 0;
  for (int i = 0; i < tasks; ++i) {
    const int got = handles[i].join();  // task_cancelled here: a late signal cancelled a yield
    if (got == i) {
      ++received;
      EXPECT_FALSE(channels[i]->try_receive().has_value());
    } else {
      EXPECT_EQ(got, scoped_timed_out);
      ++timed_out;
      EXPECT_EQ(channels[i]->try_receive(), std::optional<int>(i));  // still there, once
    }
  }
  EXPECT_EQ(received + timed_out, tasks);
  EXPECT_TRUE(eventually([&] { return rt.live_tasks() == 0 && armed_timers(rt) == 0; }));
}

}  // namespace
