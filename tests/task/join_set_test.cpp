// join_set: results in completion order, exceptions, cancel_all, structured cancellation when the
// set is destroyed or its owner cancelled, shutdown(). Children that must stay running sleep on a
// manual clock; the test thread advances it once the expected timers are armed, never sleeping.
#include "spindle/task/join_set.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "spindle/spindle.hpp"
#include "spindle/time/sleep.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_duration;
using spindle::clock_time;
using spindle::join_set;
using spindle::task;
using namespace spindle::testing;

task<int> value_after_yields(int value, int yields) {
  for (int i = 0; i < yields; ++i) co_await spindle::yield_now();
  co_return value;
}

task<long> sum_of_children(int count) {
  join_set<int> set;
  for (int i = 0; i < count; ++i) set.spawn(value_after_yields(i, i % 4));
  EXPECT_EQ(set.size(), std::size_t(count));
  std::vector<int> values = co_await set.join_all();
  EXPECT_TRUE(set.empty());
  long sum = 0;
  for (int v : values) sum += v;
  co_return sum;
}

TEST(JoinSet, JoinAllCollectsEveryChild) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.block_on(sum_of_children(100)), 4950);
  EXPECT_EQ(rt.block_on(sum_of_children(0)), 0);
}

task<int> next_until_empty(int count) {
  join_set<int> set;
  for (int i = 0; i < count; ++i) set.spawn(value_after_yields(1, i % 3));
  int total = 0;
  while (std::optional<int> v = co_await set.next()) total += *v;
  EXPECT_FALSE((co_await set.next()).has_value());  // empty stays empty
  co_return total;
}

TEST(JoinSet, NextReturnsNulloptWhenEmpty) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.block_on(next_until_empty(50)), 50);
}

task<int> sleep_then_return(clock_duration duration) {
  co_await spindle::sleep_for(duration);
  co_return int(duration / 1ms);
}

task<std::vector<int>> in_completion_order(std::atomic<int>* received) {
  join_set<int> set;
  set.spawn(sleep_then_return(30ms));
  set.spawn(sleep_then_return(10ms));
  set.spawn(sleep_then_return(20ms));
  std::vector<int> order;
  while (std::optional<int> v = co_await set.next()) {
    order.push_back(*v);
    received->fetch_add(1);
  }
  co_return order;
}

TEST(JoinSet, NextYieldsChildrenInCompletionOrder) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<int> received{0};
  auto handle = rt.spawn(in_completion_order(&received));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 3; }));
  for (int step = 1; step <= 3; ++step) {
    clock.advance(10ms);
    ASSERT_TRUE(eventually([&] { return received.load() == step; })) << "step " << step;
  }
  EXPECT_EQ(handle.join(), (std::vector<int>{10, 20, 30}));
}

task<int> value_or_throw(int value) {
  co_await spindle::yield_now();
  if (value < 0) throw boom();
  co_return value;
}

struct outcome_counts {
  int value_sum = 0;
  int exceptions = 0;
};

task<outcome_counts> count_outcomes() {
  join_set<int> set;
  set.spawn(value_or_throw(1));
  set.spawn(value_or_throw(-1));
  set.spawn(value_or_throw(2));
  set.spawn(value_or_throw(-1));
  outcome_counts counts;
  for (;;) {
    try {
      std::optional<int> v = co_await set.next();
      if (!v) break;
      counts.value_sum += *v;
    } catch (const boom&) {
      ++counts.exceptions;  // rethrown by next() for that child; the others are still there
    }
  }
  co_return counts;
}

TEST(JoinSet, ChildExceptionsAreRethrownByNext) {
  spindle::runtime rt({.workers = 2});
  const outcome_counts counts = rt.block_on(count_outcomes());
  EXPECT_EQ(counts.value_sum, 3);
  EXPECT_EQ(counts.exceptions, 2);
}

task<void> join_all_with_a_failure() {
  join_set<void> set;
  set.spawn([]() -> task<void> { co_return; }());
  set.spawn([]() -> task<void> { throw boom(); co_return; }());
  co_await set.join_all();
}

TEST(JoinSet, JoinAllPropagatesAChildException) {
  spindle::runtime rt({.workers = 2});
  EXPECT_THROW(rt.block_on(join_all_with_a_failure()), boom);
}

// Sleeps "forever"; counts the cancellations it sees, then rethrows.
task<void> sleep_forever(std::atomic<int>* cancelled) {
  try {
    co_await spindle::sleep_for(10h);
  } catch (const spindle::task_cancelled&) {
    cancelled->fetch_add(1);
    throw;
  }
}

task<int> cancel_all_then_drain() {
  join_set<void> set;
  std::atomic<int> ignored{0};
  for (int i = 0; i < 3; ++i) set.spawn(sleep_forever(&ignored));
  set.cancel_all();  // some may not have started: they never will, and still report
  int cancelled = 0;
  for (;;) {
    try {
      if (!co_await set.next()) break;
    } catch (const spindle::task_cancelled&) {
      ++cancelled;
    }
  }
  co_return cancelled;
}

TEST(JoinSet, CancelAllReportsEveryChildAsCancelled) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  EXPECT_EQ(rt.block_on(cancel_all_then_drain()), 3);
  EXPECT_EQ(rt.live_tasks(), 0u);
}

task<void> drop_set_after_sleeping(std::atomic<int>* cancelled) {
  {
    join_set<void> set;
    for (int i = 0; i < 3; ++i) set.spawn(sleep_forever(cancelled));
    co_await spindle::sleep_for(1h);
  }  // destroyed with three children still sleeping
  co_return;
}

TEST(JoinSet, DestroyingTheSetCancelsRunningChildren) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<int> cancelled{0};
  auto handle = rt.spawn(drop_set_after_sleeping(&cancelled));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 4; }));
  clock.advance(1h);
  handle.join();
  // Destruction cannot wait: the children unwind on their own, promptly.
  ASSERT_TRUE(eventually([&] { return cancelled.load() == 3 && rt.live_tasks() == 0; }));
  EXPECT_EQ(armed_timers(rt), 0u);
}

task<std::vector<int>> owner_joining(std::atomic<int>* cancelled) {
  join_set<int> set;
  for (int i = 0; i < 3; ++i) {
    set.spawn([](std::atomic<int>* c) -> task<int> {
      co_await sleep_forever(c);
      co_return 1;
    }(cancelled));
  }
  co_return co_await set.join_all();
}

TEST(JoinSet, CancellingTheOwnerCancelsTheChildren) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<int> cancelled{0};
  auto handle = rt.spawn(owner_joining(&cancelled));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 3; }));
  handle.cancel();
  EXPECT_THROW(handle.join(), spindle::task_cancelled);
  ASSERT_TRUE(eventually([&] { return cancelled.load() == 3 && rt.live_tasks() == 0; }));
  EXPECT_EQ(clock.now(), virtual_start);
}

task<void> owner_shutting_down(std::atomic<int>* cancelled, bool* owner_saw_cancel) {
  join_set<void> set;
  for (int i = 0; i < 3; ++i) set.spawn(sleep_forever(cancelled));
  try {
    co_await set.join_all();
  } catch (const spindle::task_cancelled&) {
    *owner_saw_cancel = true;
  }
  // Structured cleanup, even though the owner is cancelled: waits for every child.
  co_await set.shutdown();
  EXPECT_EQ(cancelled->load(), 3);
  EXPECT_TRUE(set.empty());
  throw spindle::task_cancelled();
}

TEST(JoinSet, ShutdownWaitsForCancelledChildrenEvenInACancelledOwner) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<int> cancelled{0};
  bool owner_saw_cancel = false;
  auto handle = rt.spawn(owner_shutting_down(&cancelled, &owner_saw_cancel));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 3; }));
  handle.cancel();
  EXPECT_THROW(handle.join(), spindle::task_cancelled);
  EXPECT_TRUE(owner_saw_cancel);
  EXPECT_EQ(cancelled.load(), 3);  // no waiting needed: shutdown() already waited
  EXPECT_EQ(rt.live_tasks(), 0u);
}

task<void> count_up(std::atomic<int>* counter) {
  co_await spindle::yield_now();
  counter->fetch_add(1);
}

TEST(JoinSet, SpawnFromOutsideTheRuntime) {
  spindle::runtime rt({.workers = 2});
  std::atomic<int> counter{0};
  join_set<void> set;
  for (int i = 0; i < 20; ++i) set.spawn(rt, count_up(&counter));
  EXPECT_EQ(set.size(), 20u);
  rt.block_on(set.join_all());
  EXPECT_EQ(counter.load(), 20);
  EXPECT_TRUE(set.empty());
  EXPECT_THROW(set.spawn(count_up(&counter)), spindle::usage_error);  // no current runtime
}

TEST(JoinSet, DestroyedOutsideTheRuntimeCancelsChildren) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  std::atomic<int> cancelled{0};
  {
    join_set<void> set;
    for (int i = 0; i < 4; ++i) set.spawn(rt, sleep_forever(&cancelled));
    ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 4; }));
  }
  ASSERT_TRUE(eventually([&] { return cancelled.load() == 4 && rt.live_tasks() == 0; }));
}

TEST(JoinSet, ManyChildrenCompletingConcurrently) {
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < 20; ++round) {
    EXPECT_EQ(rt.block_on(sum_of_children(500)), 500L * 499 / 2);
  }
}

TEST(JoinSet, RuntimeShutdownWithALiveSet) {
  // The owner and its children are all abandoned at shutdown, in any order; nothing leaks or
  // touches freed memory (run under the sanitizers).
  spindle::manual_clock clock(virtual_start);
  std::atomic<int> cancelled{0};
  {
    spindle::runtime rt({.workers = 2, .clock = &clock});
    auto handle = rt.spawn(owner_joining(&cancelled));
    ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 3; }));
  }
  EXPECT_EQ(cancelled.load(), 0);  // abandoned, never resumed
}

}  // namespace
