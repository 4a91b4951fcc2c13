// Awaits that complete without suspending, one per primitive, for the cooperative-budget tests
// (C6: every await counts, not only joins of child tasks). Header-only; used by
// tests/task/cooperative_budget_test.cpp (the runtime) and tests/embed/cooperative_budget_test.cpp
// (the embedded executor).
//
// Each case owns what it awaits and has step(): one awaitable that completes at once when
// awaited (the mutex is free, the event set, the channel has an item or room, ...). A case is
// declared before the runtime or executor that runs the loop, so it outlives the loop's task.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "spindle/spindle.hpp"

namespace spindle::testing::immediate_awaits {

struct mutex_lock {
  static constexpr const char* name = "MutexLock";
  spindle::mutex mutex;
  auto step() { return mutex.lock(); }  // the guard is dropped at once: free again
};

struct semaphore_acquire {
  static constexpr const char* name = "SemaphoreAcquire";
  spindle::semaphore permits{0};
  auto step() {
    permits.release();
    return permits.acquire();
  }
};

struct event_wait {
  static constexpr const char* name = "EventWait";
  spindle::event set{true};
  auto step() { return set.wait(); }
};

struct wait_group_wait {
  static constexpr const char* name = "WaitGroupWait";
  spindle::wait_group group;  // count zero
  auto step() { return group.wait(); }
};

struct channel_receive {
  static constexpr const char* name = "ChannelReceive";
  spindle::channel<int> items{1};
  auto step() {
    items.try_send(1);  // the previous item was received: there is room
    return items.receive();
  }
};

struct channel_send {
  static constexpr const char* name = "ChannelSend";
  spindle::channel<int> items{1};
  auto step() {
    items.try_receive();  // makes room for the send
    return items.send(1);
  }
};

struct oneshot_receive {
  static constexpr const char* name = "OneshotReceive";
  auto step() {
    auto [sender, receiver] = spindle::oneshot<int>();
    sender.send(1);
    return std::move(receiver);  // awaited as a temporary: alive until the await returns
  }
};

struct sleep_for_zero {
  static constexpr const char* name = "SleepForZero";
  auto step() { return spindle::sleep_for(spindle::clock_duration::zero()); }
};

struct sleep_until_past {
  static constexpr const char* name = "SleepUntilPast";
  auto step() { return spindle::sleep_until(spindle::clock_time::min()); }
};

struct join_set_next_empty {
  static constexpr const char* name = "JoinSetNextOnEmptySet";
  spindle::join_set<int> set;
  auto step() { return set.next(); }
};

struct wait_named_none_live {
  static constexpr const char* name = "WaitNamedNoneLive";
  auto step() { return spindle::wait_named("nobody-has-this-name"); }
};

using all_cases = ::testing::Types<mutex_lock, semaphore_acquire, event_wait, wait_group_wait,
                                   channel_receive, channel_send, oneshot_receive, sleep_for_zero,
                                   sleep_until_past, join_set_next_empty, wait_named_none_live>;

struct case_names {
  template <class Case>
  static std::string GetName(int) {
    return Case::name;
  }
};

// How long a loop may go on before it gives up: only turns a loop that never lets anyone else
// run into a failure instead of a hang; not a timing assertion.
inline constexpr std::chrono::seconds give_up_after{5};

// Awaits `step()` again and again until `done()` holds. False if it gave up first (after
// give_up_after of real time): whatever `done` waits for never happened beside the loop.
template <class Step, class Done>
spindle::task<bool> await_until(Step step, Done done) {
  const auto give_up = std::chrono::steady_clock::now() + give_up_after;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) co_return false;
    static_cast<void>(co_await step());  // a guard, an item, ...: dropped at once
  }
  co_return true;
}

// Sets `flag` when it runs.
inline spindle::task<void> set_flag(std::atomic<bool>& flag) {
  flag.store(true);
  co_return;
}

inline spindle::task<void> nothing() { co_return; }

// Joins `finished` (handles of tasks that have all completed, so no join suspends) one by one,
// after spawning a neighbour onto its own executor; stops as soon as the neighbour has run.
// Returns how many it joined before that (all of them if the neighbour never ran meanwhile).
inline spindle::task<std::size_t> join_finished_until_neighbour_ran(
    std::vector<spindle::join_handle<void>>& finished) {
  std::atomic<bool> neighbour_ran{false};
  auto neighbour = spindle::spawn(set_flag(neighbour_ran));
  std::size_t joined = 0;
  for (auto& handle : finished) {
    if (neighbour_ran.load()) break;
    co_await std::move(handle);
    ++joined;
  }
  co_await std::move(neighbour);  // the flag lives in this frame
  co_return joined;
}

}  // namespace spindle::testing::immediate_awaits
