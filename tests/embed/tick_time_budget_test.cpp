// The embedded executor's time budget per tick (E3): with `time_per_tick` set, a tick starts no
// task once that much real time has passed, ends with a service phase and asks for re-entry, even
// though its count budget (tasks_per_tick) would let it run on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "embed/embed_test_support.hpp"
#include "spindle/spindle.hpp"
#include "support/immediate_awaits.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::embed::embedded_executor;
using spindle::testing::test_host;
namespace immediate = spindle::testing::immediate_awaits;

// Keeps the thread busy for `duration` of real time (work between two awaits).
void burn(std::chrono::steady_clock::duration duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) spindle::core::cpu_relax();
}

// Burns 200 us between yields until `stop` (or gives up after 5 s: then a tick held it).
spindle::task<bool> busy(std::atomic<bool>& stop) {
  const auto give_up = std::chrono::steady_clock::now() + immediate::give_up_after;
  while (!stop.load()) {
    if (std::chrono::steady_clock::now() > give_up) co_return false;
    burn(200us);
    co_await spindle::yield_now();
  }
  co_return true;
}

// Counts large enough never to end a tick here: only the time budget can.
const spindle::embed::embedded_options time_bound_only{
    .tasks_per_tick = 1'000'000, .tasks_per_execute_phase = 1'000'000, .time_per_tick = 1ms};

TEST(TickTimeBudget, ATickWithATinyTimeBudgetReturnsBesideBusyTasks) {
  test_host host;
  embedded_executor executor(host, time_bound_only);
  spindle::testing::phase_log phases(executor);
  std::atomic<bool> stop{false};
  std::vector<spindle::join_handle<bool>> tasks;
  for (int i = 0; i < 4; ++i) tasks.push_back(executor.spawn(busy(stop)));
  host.take_soon_requests();
  executor.tick();
  const auto after_one = executor.statistics();
  EXPECT_EQ(after_one.ticks_out_of_time, 1u);
  // 1 ms of 200 us runs: a handful, whatever the machine's load (the bound only says "not the
  // million the count budget allows").
  EXPECT_GE(after_one.tasks_run, 1u);
  EXPECT_LT(after_one.tasks_run, 1000u);
  for (const auto& t : tasks) EXPECT_FALSE(t.is_finished());
  EXPECT_GE(host.take_soon_requests(), 1u);  // work is left: re-entry
  ASSERT_EQ(phases.ticks().size(), 1u);
  EXPECT_EQ(phases.ticks()[0].back(), spindle::embed::phase::service);  // ends with a service
  stop.store(true);
  host.run_until_idle(executor);
  for (auto& t : tasks) {
    ASSERT_TRUE(t.is_finished());
    EXPECT_TRUE(t.join()) << "a busy task gave up: a tick held it for 5 s";
  }
}

// The two budgets together: a loop of awaits that never suspend yields every cooperative budget,
// and the tick ends on time although its count would let it go on for a million runs.
TEST(TickTimeBudget, ATickWithATimeBudgetReturnsBesideALoopOfImmediateAwaits) {
  immediate::mutex_lock awaits;
  test_host host;
  embedded_executor executor(host, time_bound_only);
  std::atomic<bool> stop{false};
  auto looping = executor.spawn(immediate::await_until([&awaits] { return awaits.step(); },
                                                       [&stop] { return stop.load(); }));
  executor.tick();
  EXPECT_EQ(executor.statistics().ticks_out_of_time, 1u);
  EXPECT_FALSE(looping.is_finished());
  stop.store(true);
  host.run_until_idle(executor);
  ASSERT_TRUE(looping.is_finished());
  EXPECT_TRUE(looping.join()) << "the loop gave up: a tick held it for 5 s";
}

// Without a time budget (the default) only the counts end a tick: it never reads the clock for
// that, and runs every ready task of a short burst in one tick.
TEST(TickTimeBudget, WithoutATimeBudgetOnlyTheCountsEndATick) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 1'000'000, .tasks_per_execute_phase = 4});
  std::vector<spindle::join_handle<void>> tasks;
  for (int i = 0; i < 100; ++i) tasks.push_back(executor.spawn(immediate::nothing()));
  executor.tick();
  for (const auto& t : tasks) EXPECT_TRUE(t.is_finished());
  EXPECT_EQ(executor.statistics().ticks_out_of_time, 0u);
}

}  // namespace
