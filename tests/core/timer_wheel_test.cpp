// Timing wheel and timer service, in virtual time (spindle::manual_clock, or times passed in).
#include "spindle/core/timer_wheel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "spindle/core/clock.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_duration;
using spindle::clock_time;
using spindle::core::timer_entry;
using spindle::core::timer_service;
using spindle::core::timer_wheel;

// Wheel tests receive entries from expire(); the fire callback is the service's business.
void never_fired(timer_entry*) noexcept {}

struct wheel_timer : timer_entry {
  wheel_timer() : timer_entry(&never_fired) {}
};

// Not at zero, so that tick arithmetic relative to the origin is exercised.
constexpr clock_time wheel_origin = clock_time{} + 1000s;
constexpr clock_duration tick = 1ms;

std::vector<timer_entry*> expire_at(timer_wheel& wheel, clock_time now) {
  std::vector<timer_entry*> expired;
  wheel.expire(now, [&](timer_entry& entry) {
    EXPECT_FALSE(entry.linked());  // unlinked before it is handed out
    expired.push_back(&entry);
  });
  return expired;
}

// The deadline's tick, as the wheel rounds it (deadlines before the origin are tick 0).
std::int64_t tick_of(clock_time deadline, clock_time origin) {
  return deadline <= origin ? 0 : (deadline - origin) / tick;
}

TEST(TimerWheel, EmptyWheelHasNothingToExpire) {
  timer_wheel wheel(wheel_origin);
  EXPECT_EQ(wheel.size(), 0u);
  EXPECT_FALSE(wheel.next_deadline().has_value());
  EXPECT_EQ(wheel.expire(wheel_origin + 24h, [](timer_entry&) { FAIL(); }), 0u);
  EXPECT_FALSE(wheel.next_deadline().has_value());
}

TEST(TimerWheel, FiresExactlyAtDeadlineAndNotBefore) {
  timer_wheel wheel(wheel_origin);
  wheel_timer timer;
  const clock_time deadline = wheel_origin + 10ms + 300ns;  // not on a tick boundary
  wheel.insert(timer, deadline);
  EXPECT_TRUE(timer.linked());
  EXPECT_EQ(timer.deadline(), deadline);
  EXPECT_EQ(wheel.size(), 1u);
  EXPECT_EQ(wheel.next_deadline(), deadline);

  EXPECT_TRUE(expire_at(wheel, wheel_origin).empty());
  EXPECT_TRUE(expire_at(wheel, wheel_origin + 10ms).empty());
  EXPECT_TRUE(expire_at(wheel, deadline - 1ns).empty());
  EXPECT_TRUE(timer.linked());
  EXPECT_EQ(expire_at(wheel, deadline), std::vector<timer_entry*>{&timer});
  EXPECT_FALSE(timer.linked());
  EXPECT_EQ(wheel.size(), 0u);
  EXPECT_TRUE(expire_at(wheel, deadline + 1h).empty());
}

TEST(TimerWheel, DeadlinesWithinOneTickFireOneByOne) {
  timer_wheel wheel(wheel_origin);
  const clock_time base = wheel_origin + 5ms;
  const std::vector<clock_duration> offsets{0ns, 1ns, 100us, 500us, 999'999ns};
  std::vector<wheel_timer> timers(offsets.size());
  for (std::size_t i = 0; i < offsets.size(); ++i) wheel.insert(timers[i], base + offsets[i]);
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    EXPECT_EQ(wheel.next_deadline(), base + offsets[i]);
    if (offsets[i] > 0ns) {
      EXPECT_TRUE(expire_at(wheel, base + offsets[i] - 1ns).empty());
    }
    EXPECT_EQ(expire_at(wheel, base + offsets[i]), std::vector<timer_entry*>{&timers[i]});
  }
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(TimerWheel, PastDeadlinesFireAtTheNextExpire) {
  timer_wheel wheel(wheel_origin);
  EXPECT_TRUE(expire_at(wheel, wheel_origin + 100ms).empty());  // the wheel is now at 100 ms

  wheel_timer earlier, before_origin, now_exactly, just_after;
  wheel.insert(earlier, wheel_origin + 50ms);
  wheel.insert(before_origin, wheel_origin - 1h);
  wheel.insert(now_exactly, wheel_origin + 100ms);
  wheel.insert(just_after, wheel_origin + 100ms + 1ns);
  EXPECT_EQ(wheel.next_deadline(), wheel_origin - 1h);

  std::vector<timer_entry*> expired = expire_at(wheel, wheel_origin + 100ms);
  ASSERT_EQ(expired.size(), 3u);
  // Already late entries come before those of the current tick.
  EXPECT_EQ(expired.back(), &now_exactly);
  std::sort(expired.begin(), expired.end());
  std::vector<timer_entry*> expected{&earlier, &before_origin, &now_exactly};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(expired, expected);
  EXPECT_TRUE(just_after.linked());
  EXPECT_EQ(wheel.next_deadline(), wheel_origin + 100ms + 1ns);
}

TEST(TimerWheel, DeadlineBeforeOriginIsDueAtOnce) {
  timer_wheel wheel(wheel_origin);
  wheel_timer timer;
  wheel.insert(timer, wheel_origin - 1s);
  EXPECT_EQ(wheel.next_deadline(), wheel_origin - 1s);
  EXPECT_EQ(expire_at(wheel, wheel_origin), std::vector<timer_entry*>{&timer});
}

TEST(TimerWheel, RemovedEntryNeverFires) {
  timer_wheel wheel(wheel_origin);
  wheel_timer first, removed, last, never_inserted;
  wheel.insert(first, wheel_origin + 3ms);
  wheel.insert(removed, wheel_origin + 3ms);
  wheel.insert(last, wheel_origin + 2h);
  EXPECT_TRUE(wheel.remove(removed));
  EXPECT_FALSE(removed.linked());
  EXPECT_FALSE(wheel.remove(removed));
  EXPECT_FALSE(wheel.remove(never_inserted));
  EXPECT_EQ(wheel.size(), 2u);
  EXPECT_EQ(expire_at(wheel, wheel_origin + 3h), (std::vector<timer_entry*>{&first, &last}));
}

TEST(TimerWheel, RemoveAfterFireReturnsFalse) {
  timer_wheel wheel(wheel_origin);
  wheel_timer timer;
  wheel.insert(timer, wheel_origin + 1ms);
  EXPECT_EQ(expire_at(wheel, wheel_origin + 1ms).size(), 1u);
  EXPECT_FALSE(wheel.remove(timer));
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(TimerWheel, ReinsertingMovesTheDeadline) {
  timer_wheel wheel(wheel_origin);
  wheel_timer timer;
  wheel.insert(timer, wheel_origin + 10ms);
  ASSERT_TRUE(wheel.remove(timer));
  wheel.insert(timer, wheel_origin + 20ms);  // later
  EXPECT_TRUE(expire_at(wheel, wheel_origin + 10ms).empty());
  EXPECT_EQ(expire_at(wheel, wheel_origin + 20ms).size(), 1u);

  wheel.insert(timer, wheel_origin + 5h);
  ASSERT_TRUE(wheel.remove(timer));
  wheel.insert(timer, wheel_origin + 21ms);  // earlier, from a coarse level to level 0
  EXPECT_EQ(wheel.next_deadline(), wheel_origin + 21ms);
  EXPECT_EQ(expire_at(wheel, wheel_origin + 21ms).size(), 1u);
}

TEST(TimerWheel, StaleBoundAfterRemovalCostsOneEarlyExpire) {
  timer_wheel wheel(wheel_origin);
  wheel_timer removed, kept;
  // Both in the same ~4 s slot of a coarse level.
  wheel.insert(removed, wheel_origin + 5s);
  wheel.insert(kept, wheel_origin + 6s);
  EXPECT_EQ(wheel.next_deadline(), wheel_origin + 5s);
  ASSERT_TRUE(wheel.remove(removed));
  ASSERT_TRUE(wheel.next_deadline().has_value());
  EXPECT_LE(*wheel.next_deadline(), wheel_origin + 6s);
  EXPECT_TRUE(expire_at(wheel, *wheel.next_deadline()).empty());
  EXPECT_EQ(wheel.next_deadline(), wheel_origin + 6s);
  EXPECT_EQ(expire_at(wheel, wheel_origin + 6s), std::vector<timer_entry*>{&kept});
}

TEST(TimerWheel, EqualDeadlinesFireTogether) {
  timer_wheel wheel(wheel_origin);
  std::vector<wheel_timer> timers(1000);
  const clock_time deadline = wheel_origin + 7s + 3us;
  for (auto& timer : timers) wheel.insert(timer, deadline);
  EXPECT_TRUE(expire_at(wheel, deadline - 1ns).empty());
  std::vector<timer_entry*> expired = expire_at(wheel, deadline);
  EXPECT_EQ(expired.size(), timers.size());
  std::sort(expired.begin(), expired.end());
  EXPECT_EQ(std::adjacent_find(expired.begin(), expired.end()), expired.end());
}

TEST(TimerWheel, OnExpiredMayFreeTheEntry) {
  timer_wheel wheel(wheel_origin);
  for (int i = 0; i < 100; ++i) wheel.insert(*new wheel_timer, wheel_origin + (i % 10) * 1ms);
  const std::size_t expired =
      wheel.expire(wheel_origin + 1s, [](timer_entry& entry) { delete static_cast<wheel_timer*>(&entry); });
  EXPECT_EQ(expired, 100u);
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(TimerWheel, ThrowingOnExpiredLeavesTheRestLinkedAndDue) {
  timer_wheel wheel(wheel_origin);
  std::vector<wheel_timer> timers(10);
  for (auto& timer : timers) wheel.insert(timer, wheel_origin + 2ms + 10us);
  int handed_out = 0;
  EXPECT_THROW(wheel.expire(wheel_origin + 3ms,
                            [&](timer_entry&) {
                              if (++handed_out == 3) throw std::runtime_error("callback failed");
                            }),
               std::runtime_error);
  EXPECT_EQ(wheel.size(), 7u);
  ASSERT_TRUE(wheel.next_deadline().has_value());
  EXPECT_LE(*wheel.next_deadline(), wheel_origin + 2ms + 10us);
  const auto still_linked = std::find_if(timers.begin(), timers.end(), [](auto& t) { return t.linked(); });
  ASSERT_NE(still_linked, timers.end());
  EXPECT_TRUE(wheel.remove(*still_linked));
  EXPECT_EQ(expire_at(wheel, wheel_origin + 3ms).size(), 6u);
  EXPECT_EQ(wheel.size(), 0u);
}

// 100k timers spread from before the origin to hours ahead, expired with steps from nanoseconds
// to minutes: each fires once, at the first expire whose time has reached its deadline, and the
// ticks come out in non-decreasing order.
TEST(TimerWheel, RandomDeadlinesFireOnceInOrderAndOnTime) {
  constexpr std::size_t count = 100'000;
  std::mt19937_64 random(12345);
  const std::vector<clock_duration> ranges{1ms, 100ms, 10s, 1h, 10h};
  timer_wheel wheel(wheel_origin);
  std::vector<wheel_timer> timers(count);
  std::vector<clock_time> sorted_deadlines;
  for (auto& timer : timers) {
    const clock_duration range = ranges[random() % ranges.size()];
    const auto offset = std::uniform_int_distribution<std::int64_t>(-1'000'000, range.count())(random);
    wheel.insert(timer, wheel_origin + clock_duration(offset));
    sorted_deadlines.push_back(timer.deadline());
  }
  std::sort(sorted_deadlines.begin(), sorted_deadlines.end());

  const std::vector<clock_duration> steps{1us, 1ms, 100ms, 1min};
  std::vector<bool> fired(count, false);
  std::size_t fired_count = 0;
  std::int64_t last_tick = 0;
  clock_time previous_now = wheel_origin - 1h;
  clock_time now = wheel_origin - 2ms;
  while (fired_count < count) {
    wheel.expire(now, [&](timer_entry& entry) {
      const auto index = static_cast<std::size_t>(static_cast<wheel_timer*>(&entry) - timers.data());
      ASSERT_FALSE(fired[index]) << "fired twice";
      fired[index] = true;
      ++fired_count;
      ASSERT_LE(entry.deadline(), now) << "fired before its deadline";
      ASSERT_GT(entry.deadline(), previous_now) << "not fired at the first expire that reached it";
      const std::int64_t entry_tick = tick_of(entry.deadline(), wheel_origin);
      ASSERT_GE(entry_tick, last_tick) << "out of order";
      last_tick = entry_tick;
    });
    const auto due = static_cast<std::size_t>(
        std::upper_bound(sorted_deadlines.begin(), sorted_deadlines.end(), now) - sorted_deadlines.begin());
    ASSERT_EQ(fired_count, due);
    ASSERT_EQ(wheel.size(), count - due);
    if (due < count) {
      ASSERT_LE(wheel.next_deadline(), sorted_deadlines[due]);
    }
    previous_now = now;
    const clock_duration step = steps[random() % steps.size()];
    now += clock_duration(std::uniform_int_distribution<std::int64_t>(0, step.count())(random));
  }
}

// The wheel against a brute-force reference (a set ordered by deadline) under random inserts,
// removals, re-inserts and expires; deadlines from the past to years ahead.
void run_against_reference(bool with_removals, std::uint64_t seed) {
  constexpr std::size_t pool_size = 2000;
  constexpr int operations = 30'000;
  std::mt19937_64 random(seed);
  const std::vector<clock_duration> ranges{2ms, 100ms, 5s, 10min, 6h, 30 * 24h, 3 * 365 * 24h};
  // About 20 years in all over the run, far from overflowing clock_time.
  const std::vector<clock_duration> steps{10us, 1ms, 50ms, 2s, 5min, 2h, 10 * 24h};
  timer_wheel wheel(wheel_origin);
  std::vector<wheel_timer> timers(pool_size);
  std::set<std::pair<clock_time, std::size_t>> reference;
  clock_time now = wheel_origin;

  auto random_deadline = [&] {
    const clock_duration range = ranges[random() % ranges.size()];
    return now + clock_duration(std::uniform_int_distribution<std::int64_t>(-range.count() / 8, range.count())(random));
  };
  auto insert = [&](std::size_t index) {
    wheel.insert(timers[index], random_deadline());
    reference.emplace(timers[index].deadline(), index);
  };

  for (int operation = 0; operation < operations; ++operation) {
    const std::size_t index = random() % pool_size;
    const unsigned choice = random() % 10;
    if (choice < 4) {
      if (!timers[index].linked()) insert(index);
    } else if (with_removals && choice < 6) {
      const bool was_linked = reference.erase({timers[index].deadline(), index}) > 0;
      ASSERT_EQ(wheel.remove(timers[index]), was_linked);
    } else if (with_removals && choice < 7) {
      if (wheel.remove(timers[index])) reference.erase({timers[index].deadline(), index});
      insert(index);
    } else {
      const clock_duration step = steps[random() % steps.size()];
      now += clock_duration(std::uniform_int_distribution<std::int64_t>(0, step.count())(random));
      std::vector<std::size_t> expired;
      wheel.expire(now, [&](timer_entry& entry) {
        expired.push_back(static_cast<std::size_t>(static_cast<wheel_timer*>(&entry) - timers.data()));
      });
      std::vector<std::size_t> expected;
      while (!reference.empty() && reference.begin()->first <= now) {
        expected.push_back(reference.begin()->second);
        reference.erase(reference.begin());
      }
      std::sort(expired.begin(), expired.end());
      std::sort(expected.begin(), expected.end());
      ASSERT_EQ(expired, expected) << "operation " << operation;
    }

    ASSERT_EQ(wheel.size(), reference.size());
    const std::optional<clock_time> next = wheel.next_deadline();
    if (reference.empty()) {
      ASSERT_FALSE(next.has_value());
    } else if (with_removals) {
      ASSERT_TRUE(next.has_value());
      ASSERT_LE(*next, reference.begin()->first) << "operation " << operation;
    } else {
      ASSERT_EQ(next, reference.begin()->first) << "operation " << operation;
    }
  }
}

TEST(TimerWheel, NextDeadlineNeverLaterThanReferenceUnderRandomOperations) {
  run_against_reference(true, 2024);
}

TEST(TimerWheel, NextDeadlineExactWithoutRemovals) { run_against_reference(false, 7); }

// Deadlines on both sides of every level's span (64^k ms), days and years ahead, and the largest
// representable time: each fires exactly at its deadline, whether time jumps straight there or
// the caller steps from one next_deadline() to the next.
std::vector<clock_time> far_deadlines(clock_time origin) {
  std::vector<clock_time> deadlines;
  std::int64_t span_ms = 1;
  for (int level = 0; level <= 7; ++level, span_ms *= 64) {
    const clock_time boundary = origin + std::chrono::milliseconds(span_ms);
    deadlines.insert(deadlines.end(), {boundary - 1ns, boundary, boundary + 1ns, boundary + 1ms});
  }
  for (const clock_duration ahead : {std::chrono::duration_cast<clock_duration>(3 * 24h),
                                     std::chrono::duration_cast<clock_duration>(400 * 24h),
                                     std::chrono::duration_cast<clock_duration>(3 * 365 * 24h + 17ms),
                                     std::chrono::duration_cast<clock_duration>(200 * 365 * 24h)})
    deadlines.push_back(origin + ahead);
  deadlines.push_back(clock_time::max());
  std::sort(deadlines.begin(), deadlines.end());
  return deadlines;
}

TEST(TimerWheel, FarFutureDeadlinesFireExactlyWhenTimeJumps) {
  const clock_time origin{};
  const std::vector<clock_time> deadlines = far_deadlines(origin);
  timer_wheel wheel(origin);
  std::vector<wheel_timer> timers(deadlines.size());
  for (std::size_t i = 0; i < deadlines.size(); ++i) wheel.insert(timers[i], deadlines[i]);
  for (std::size_t i = 0; i < deadlines.size(); ++i) {
    EXPECT_LE(wheel.next_deadline(), deadlines[i]);
    EXPECT_TRUE(expire_at(wheel, deadlines[i] - 1ns).empty()) << i;
    EXPECT_EQ(expire_at(wheel, deadlines[i]), std::vector<timer_entry*>{&timers[i]}) << i;
  }
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(TimerWheel, FarFutureDeadlinesFireWhenSteppingByNextDeadline) {
  const clock_time origin = clock_time{} - 100 * 24h;  // below zero: extremes of the tick arithmetic
  const std::vector<clock_time> deadlines = far_deadlines(origin);
  timer_wheel wheel(origin);
  std::vector<wheel_timer> timers(deadlines.size());
  for (std::size_t i = 0; i < deadlines.size(); ++i) wheel.insert(timers[i], deadlines[i]);
  std::size_t next = 0;
  while (wheel.size() > 0) {
    const std::optional<clock_time> wake_at = wheel.next_deadline();
    ASSERT_TRUE(wake_at.has_value());
    // No removals: the bound is exact, so every step fires the next deadline.
    ASSERT_EQ(*wake_at, deadlines[next]);
    ASSERT_EQ(expire_at(wheel, *wake_at), std::vector<timer_entry*>{&timers[next]});
    ++next;
  }
  EXPECT_EQ(next, deadlines.size());
}

// ---------------------------------------------------------------------------------------------

struct counted_timer : timer_entry {
  counted_timer() : timer_entry(&on_fire) {}
  static void on_fire(timer_entry* entry) noexcept {
    static_cast<counted_timer*>(entry)->fired.fetch_add(1, std::memory_order_relaxed);
  }
  std::atomic<int> fired{0};
};

// Far from zero: a service that read the real steady clock would see nothing due.
constexpr clock_time service_start = clock_time{} + 200'000h;  // ~23 years of uptime

TEST(TimerService, FiresWhenTheManualClockReachesTheDeadline) {
  spindle::manual_clock clock(service_start);
  timer_service service(clock);
  EXPECT_EQ(&service.clock(), &clock);
  counted_timer timer;
  service.arm(timer, service_start + 10ms);
  EXPECT_EQ(service.size(), 1u);
  EXPECT_EQ(service.next_deadline(), service_start + 10ms);
  EXPECT_EQ(service.fire_due(), 0u);
  clock.advance(10ms - 1ns);
  EXPECT_EQ(service.fire_due(), 0u);
  EXPECT_EQ(timer.fired, 0);
  clock.advance(1ns);
  EXPECT_EQ(service.fire_due(), 1u);
  EXPECT_EQ(timer.fired, 1);
  EXPECT_EQ(service.size(), 0u);
  EXPECT_FALSE(service.next_deadline().has_value());
  EXPECT_FALSE(service.disarm(timer));
  clock.advance(1h);
  EXPECT_EQ(service.fire_due(), 0u);
  EXPECT_EQ(timer.fired, 1);
}

TEST(TimerService, DisarmBeforeFireReturnsTrueAndItNeverFires) {
  spindle::manual_clock clock(service_start);
  timer_service service(clock);
  counted_timer timer, never_armed;
  service.arm(timer, service_start + 1s);
  EXPECT_TRUE(service.disarm(timer));
  EXPECT_FALSE(service.disarm(timer));
  EXPECT_FALSE(service.disarm(never_armed));
  clock.advance(2s);
  EXPECT_EQ(service.fire_due(), 0u);
  EXPECT_EQ(timer.fired, 0);
}

TEST(TimerService, ArmingAnArmedEntryMovesItsDeadline) {
  spindle::manual_clock clock(service_start);
  timer_service service(clock);
  counted_timer timer;
  service.arm(timer, service_start + 10ms);
  service.arm(timer, service_start + 20ms);
  EXPECT_EQ(service.size(), 1u);
  clock.advance(10ms);
  EXPECT_EQ(service.fire_due(), 0u);
  service.arm(timer, service_start + 15ms);  // and back earlier
  clock.advance(5ms);
  EXPECT_EQ(service.fire_due(), 1u);
  clock.advance(10ms);
  EXPECT_EQ(service.fire_due(), 0u);
  EXPECT_EQ(timer.fired, 1);
}

TEST(TimerService, PastDeadlineFiresAtTheNextFireDue) {
  spindle::manual_clock clock(service_start);
  timer_service service(clock);
  clock.advance(1h);
  EXPECT_EQ(service.fire_due(), 0u);
  counted_timer timer;
  service.arm(timer, service_start);
  EXPECT_EQ(service.fire_due(), 1u);
  EXPECT_EQ(timer.fired, 1);
}

// Several threads arm and disarm while the owner advances the clock and fires. Each entry is armed
// once and disarmed once, then freed at once: disarm() == true means it never fired (and never
// will: it is freed), false means its callback has already completed, exactly once.
TEST(TimerService, ConcurrentArmAndDisarmWhileTheOwnerFires) {
  constexpr int thread_count = 4;
  constexpr int timers_per_thread = 5000;
  spindle::manual_clock clock(service_start);
  timer_service service(clock);
  std::atomic<int> threads_done{0};
  std::atomic<int> disarmed_before_fire{0};
  std::atomic<int> disarmed_after_fire{0};
  std::atomic<int> violations{0};
  std::latch start(thread_count + 1);

  auto disarm_and_free = [&](counted_timer* timer) {
    if (service.disarm(*timer)) {
      if (timer->fired.load(std::memory_order_relaxed) != 0) violations.fetch_add(1);
      disarmed_before_fire.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (timer->fired.load(std::memory_order_relaxed) != 1) violations.fetch_add(1);
      disarmed_after_fire.fetch_add(1, std::memory_order_relaxed);
    }
    delete timer;
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t) + 1);
      start.arrive_and_wait();
      // One entry certain to fire before it is disarmed: already due, and waited for.
      auto* due = new counted_timer;
      service.arm(*due, clock.now() - 1ms);
      while (due->fired.load(std::memory_order_acquire) == 0) std::this_thread::yield();
      disarm_and_free(due);
      // One certain to be disarmed first.
      auto* far = new counted_timer;
      service.arm(*far, clock.now() + 24h);

      std::vector<counted_timer*> armed;
      for (int i = 0; i < timers_per_thread; ++i) {
        auto* timer = new counted_timer;
        service.arm(*timer, clock.now() + clock_duration(random() % 3'000'000));
        armed.push_back(timer);
        if (random() % 3 == 0) {  // disarm a random earlier one
          const std::size_t victim = random() % armed.size();
          disarm_and_free(armed[victim]);
          armed[victim] = armed.back();
          armed.pop_back();
        }
      }
      for (counted_timer* timer : armed) disarm_and_free(timer);
      disarm_and_free(far);
      threads_done.fetch_add(1, std::memory_order_release);
    });
  }

  start.arrive_and_wait();
  std::size_t fired = 0;
  while (threads_done.load(std::memory_order_acquire) < thread_count) {
    clock.advance(20us);
    fired += service.fire_due();
  }
  for (auto& thread : threads) thread.join();

  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(service.size(), 0u);
  EXPECT_EQ(disarmed_before_fire.load() + disarmed_after_fire.load(), thread_count * (timers_per_thread + 2));
  EXPECT_EQ(static_cast<int>(fired), disarmed_after_fire.load());
  EXPECT_GE(disarmed_before_fire.load(), thread_count);
  EXPECT_GE(disarmed_after_fire.load(), thread_count);
}

}  // namespace
