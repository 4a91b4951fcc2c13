// The embedded executor: ticks, phases, wake-ups from other threads, timers in host time,
// shutdown (SPEC E1-E5).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::embed::embedded_executor;
using spindle::testing::test_host;

spindle::task<int> add(int a, int b) { co_return a + b; }

spindle::task<int> sum_of_children() {
  auto a = spindle::spawn(add(1, 2));
  auto b = spindle::spawn(add(3, 4));
  co_return co_await std::move(a) + co_await std::move(b);
}

TEST(EmbeddedExecutor, SpawnAsksForATickAndRunsOnlyInsideTicks) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(sum_of_children());
  EXPECT_GE(host.take_soon_requests(), 1u);
  EXPECT_FALSE(h.is_finished());
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 10);
}

spindle::task<int> sleeper(spindle::clock_duration d) {
  co_await spindle::sleep_for(d);
  co_return 7;
}

TEST(EmbeddedExecutor, SleepsInHostTimeAndAsksForATickAtTheDeadline) {
  test_host host;
  embedded_executor executor(host);
  const auto start = host.now();
  auto h = executor.spawn(sleeper(50ms));
  host.run_until_idle(executor);
  EXPECT_FALSE(h.is_finished());
  EXPECT_EQ(host.requested_at, start + 50ms);
  host.advance(49ms);
  executor.tick();
  EXPECT_FALSE(h.is_finished());
  host.advance(1ms);
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 7);
  EXPECT_EQ(host.requested_at, spindle::clock_time::max());
}

TEST(EmbeddedExecutor, WakeFromAnotherThreadQueuesAndAsksForReentry) {
  test_host host;
  embedded_executor executor(host);
  spindle::event ready;
  std::atomic<int> stage{0};
  auto h = executor.spawn([](spindle::event& e, std::atomic<int>& s) -> spindle::task<void> {
    s.store(1);
    co_await e.wait();
    s.store(2);
  }(ready, stage));
  host.run_until_idle(executor);
  ASSERT_EQ(stage.load(), 1);
  std::thread setter([&] { ready.set(); });
  setter.join();
  EXPECT_EQ(stage.load(), 1);  // nothing runs outside a tick
  EXPECT_GE(host.take_soon_requests(), 1u);
  executor.tick();
  EXPECT_EQ(stage.load(), 2);
  EXPECT_TRUE(h.is_finished());
}

TEST(EmbeddedExecutor, DestructorCancelsWhatIsLeft) {
  test_host host;
  spindle::join_handle<int> sleeping;
  {
    embedded_executor executor(host);
    sleeping = executor.spawn(sleeper(1h));
    host.run_until_idle(executor);
  }
  ASSERT_TRUE(sleeping.is_finished());
  EXPECT_EQ(sleeping.status(), spindle::task_status::cancelled);
}

}  // namespace
