// The cooperative budget counts every await (C6), not only joins of child tasks: a task looping
// on awaits that never suspend (a free mutex, a set event, a channel with items, sleep_for(0),
// joins of finished tasks, ...) still lets the other tasks and the timers of its executor run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/immediate_awaits.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace immediate = spindle::testing::immediate_awaits;
using spindle::testing::join_bounded;

constexpr int enough_ticks = 5;

// Sleeps 1 ms at a time until `stop`, counting its ticks.
spindle::task<void> ticker(std::atomic<int>& ticks, std::atomic<bool>& stop) {
  while (!stop.load()) {
    co_await spindle::sleep_for(1ms);
    ticks.fetch_add(1);
  }
}

template <class Case>
class CooperativeBudgetOnRuntime : public ::testing::Test {};
TYPED_TEST_SUITE(CooperativeBudgetOnRuntime, immediate::all_cases, immediate::case_names);

// One worker: the ticker and the loop share it. The loop runs until the ticker has ticked
// `enough_ticks` times (or gives up after 5 s, a failure: the loop held the worker).
TYPED_TEST(CooperativeBudgetOnRuntime, ATickerKeepsTickingBesideALoopOfImmediateAwaits) {
  TypeParam awaits;  // outlives the runtime's tasks
  spindle::runtime rt({.workers = 1});
  std::atomic<int> ticks{0};
  std::atomic<bool> stop{false};
  auto ticking = rt.spawn(ticker(ticks, stop));
  auto enough = [&ticks] { return ticks.load() >= enough_ticks; };
  auto looping =
      rt.spawn(immediate::await_until([&awaits] { return awaits.step(); }, std::move(enough)));
  const bool ticked = join_bounded(std::move(looping), 30s);
  stop.store(true);
  join_bounded(std::move(ticking));
  EXPECT_TRUE(ticked) << "the ticker made " << ticks.load()
                      << " ticks while the loop ran for 5 s";
}

// T3: a cancelled task meets its cancellation at its next suspension point, including an await
// that would complete at once (a free mutex, a set event, ...), not only at sleeps and yields
// (issue 14, item 9: before, an already-cancelled task passed through these).
template <class Case>
spindle::task<bool> await_once_after_cancel(Case& awaits, std::atomic<bool>& running,
                                            std::atomic<bool>& cancelled) {
  running.store(true);
  while (!cancelled.load()) {
  }
  try {
    static_cast<void>(co_await awaits.step());
  } catch (const spindle::task_cancelled&) {
    co_return true;
  }
  co_return false;
}

TYPED_TEST(CooperativeBudgetOnRuntime, AnImmediateAwaitDeliversAPendingCancellation) {
  TypeParam awaits;  // outlives the runtime's tasks
  spindle::runtime rt({.workers = 1});
  std::atomic<bool> running{false}, cancelled{false};
  auto handle = rt.spawn(await_once_after_cancel(awaits, running, cancelled));
  spindle::testing::spin_until([&running] { return running.load(); });  // cancelled while running
  handle.cancel();
  cancelled.store(true);
  EXPECT_TRUE(join_bounded(std::move(handle), 30s))
      << "the await completed although the task was cancelled";
}

spindle::task<bool> join_finished_after_cancel(spindle::join_handle<void> finished,
                                               std::atomic<bool>& running,
                                               std::atomic<bool>& cancelled) {
  running.store(true);
  while (!cancelled.load()) {
  }
  try {
    co_await std::move(finished);
  } catch (const spindle::task_cancelled&) {
    co_return true;
  }
  co_return false;
}

TEST(CooperativeBudgetOnRuntime, JoiningAFinishedTaskDeliversAPendingCancellation) {
  spindle::runtime rt({.workers = 1});
  auto finished = rt.spawn(immediate::nothing());
  ASSERT_TRUE(spindle::testing::eventually([&finished] { return finished.is_finished(); }));
  std::atomic<bool> running{false}, cancelled{false};
  auto handle = rt.spawn(join_finished_after_cancel(std::move(finished), running, cancelled));
  spindle::testing::spin_until([&running] { return running.load(); });
  handle.cancel();
  cancelled.store(true);
  EXPECT_TRUE(join_bounded(std::move(handle), 30s));
}

// Joins of tasks that have already completed never suspend; a task spawned beside the loop on
// the same (only) worker still runs before the loop has used up its handles.
TEST(CooperativeBudgetOnRuntime, ATaskSpawnedBesideALoopOfFinishedJoinsRuns) {
  spindle::runtime rt({.workers = 1});
  constexpr std::size_t handles = 2000;  // many budgets' worth
  std::vector<spindle::join_handle<void>> finished;
  for (std::size_t i = 0; i < handles; ++i) finished.push_back(rt.spawn(immediate::nothing()));
  ASSERT_TRUE(spindle::testing::eventually([&finished] {
    for (const auto& h : finished) {
      if (!h.is_finished()) return false;
    }
    return true;
  }));
  const std::size_t joined =
      join_bounded(rt.spawn(immediate::join_finished_until_neighbour_ran(finished)));
  EXPECT_LT(joined, handles) << "the neighbour ran only after every join";
}

// A pending cancellation reaches a loop of immediate awaits at its budget's yields (before, such
// a loop had no suspension point at all and could not be cancelled).
TEST(CooperativeBudgetOnRuntime, ALoopOfImmediateAwaitsCanBeCancelled) {
  immediate::mutex_lock awaits;
  spindle::runtime rt({.workers = 1});
  std::atomic<bool> started{false};
  auto looping = rt.spawn(immediate::await_until([&awaits] { return awaits.step(); },
                                                 [&started] {
                                                   started.store(true);
                                                   return false;  // loops until cancelled
                                                 }));
  spindle::testing::spin_until([&started] { return started.load(); });
  looping.cancel();
  EXPECT_TRUE(spindle::testing::eventually([&looping] { return looping.is_finished(); }, 30s));
  EXPECT_EQ(looping.status(), spindle::task_status::cancelled);
  EXPECT_FALSE(awaits.mutex.is_locked());  // the cancelled await took nothing
}

}  // namespace

namespace {

// The budget is bounded in time as well as in awaits: a loop whose awaits complete at once but
// each follow 200 µs of work yields once a service interval (1 ms) has passed, at the next
// check (every 16 awaits), not only after 128 awaits (25 ms). Counted, not timed: the most
// iterations the loop runs between two ticks of a 1 ms ticker on the same worker.
spindle::task<int> working_loop(spindle::event& set, std::atomic<int>& ticks, int wanted) {
  int most_between_ticks = 0;
  int since_tick = 0;
  int last_ticks = ticks.load();
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (ticks.load() < wanted && std::chrono::steady_clock::now() < give_up) {
    const auto until = std::chrono::steady_clock::now() + 200us;
    while (std::chrono::steady_clock::now() < until) {
    }
    co_await set.wait();  // never suspends: the event is set
    if (ticks.load() != last_ticks) {
      last_ticks = ticks.load();
      since_tick = 0;
    } else if (++since_tick > most_between_ticks) {
      most_between_ticks = since_tick;
    }
  }
  co_return most_between_ticks;
}

TEST(CooperativeBudgetInTime, ALoopOfSlowImmediateAwaitsYieldsAfterAServiceInterval) {
  spindle::runtime rt({.workers = 1});
  spindle::event set;
  set.set();
  std::atomic<int> ticks{0};
  std::atomic<bool> stop{false};
  auto ticking = rt.spawn(ticker(ticks, stop));
  const int most = join_bounded(rt.spawn(working_loop(set, ticks, 20)), 30s);
  stop.store(true);
  join_bounded(std::move(ticking));
  EXPECT_GE(ticks.load(), 20);
  EXPECT_LE(most, 64) << "iterations of 200 us between two ticks: the budget is not bounded in time";
}

}  // namespace
