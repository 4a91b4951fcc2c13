// The cooperative budget on the embedded executor (C6, E3): a task looping on awaits that never
// suspend yields within its budget, so a tick returns (within tasks_per_tick) instead of being
// held by the loop, and the host's loop stays responsive.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <utility>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/immediate_awaits.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

namespace immediate = spindle::testing::immediate_awaits;
using spindle::embed::embedded_executor;
using spindle::testing::test_host;

template <class Case>
class CooperativeBudgetOnEmbedded : public ::testing::Test {};
TYPED_TEST_SUITE(CooperativeBudgetOnEmbedded, immediate::all_cases, immediate::case_names);

// The loop runs until the host stops it (or gives up after 5 s, a failure: the first tick held
// the host's thread that long).
TYPED_TEST(CooperativeBudgetOnEmbedded, ATickReturnsWhileALoopOfImmediateAwaitsRuns) {
  TypeParam awaits;  // outlives the executor's tasks
  test_host host;
  embedded_executor executor(host);
  std::atomic<bool> stop{false};
  auto looping = executor.spawn(immediate::await_until([&awaits] { return awaits.step(); },
                                                       [&stop] { return stop.load(); }));
  host.take_soon_requests();
  executor.tick();  // returns: the loop yields every budget; the tick's count runs out
  EXPECT_FALSE(looping.is_finished());
  EXPECT_GE(host.take_soon_requests(), 1u);  // work is left: the tick asked for re-entry
  stop.store(true);
  host.run_until_idle(executor);
  ASSERT_TRUE(looping.is_finished());
  EXPECT_TRUE(looping.join()) << "the loop gave up: it held a tick for 5 s";
}

// Joins of finished tasks never suspend; a task spawned beside the loop runs before the loop has
// used up its handles.
TEST(CooperativeBudgetOnEmbedded, ATaskSpawnedBesideALoopOfFinishedJoinsRuns) {
  test_host host;
  embedded_executor executor(host);
  constexpr std::size_t handles = 2000;
  std::vector<spindle::join_handle<void>> finished;
  for (std::size_t i = 0; i < handles; ++i) {
    finished.push_back(executor.spawn(immediate::nothing()));
  }
  host.run_until_idle(executor);
  for (const auto& h : finished) ASSERT_TRUE(h.is_finished());
  auto looping = executor.spawn(immediate::join_finished_until_neighbour_ran(finished));
  host.run_until_idle(executor);
  ASSERT_TRUE(looping.is_finished());
  EXPECT_LT(looping.join(), handles) << "the neighbour ran only after every join";
}

// At the budget's end an await takes what it awaited and then yields holding it (spawned_task.hpp:
// take, then yield). The tick's last run ends in such a yield (the loop runs every budget to its
// end); destroying the executor then destroys the frame, which passes the lock or permit on.
TEST(CooperativeBudgetOnEmbedded, WhatAYieldingAwaitTookIsGivenBackWhenItsFrameIsDestroyed) {
  immediate::mutex_lock lock;
  immediate::semaphore_acquire permit;
  std::atomic<bool> never{false};
  {
    test_host host;
    embedded_executor executor(host);
    auto on_lock = executor.spawn(immediate::await_until([&lock] { return lock.step(); },
                                                         [&never] { return never.load(); }));
    auto on_permit = executor.spawn(immediate::await_until(
        [&permit] { return permit.step(); }, [&never] { return never.load(); }));
    executor.tick();
    EXPECT_FALSE(on_lock.is_finished());
    EXPECT_FALSE(on_permit.is_finished());
    EXPECT_TRUE(lock.mutex.is_locked());              // held across the yield
    EXPECT_EQ(permit.permits.available(), 0u);       // taken, held across the yield
  }  // shutdown: both frames are destroyed while yielding
  EXPECT_FALSE(lock.mutex.is_locked());
  EXPECT_EQ(permit.permits.available(), 1u);
}

}  // namespace
