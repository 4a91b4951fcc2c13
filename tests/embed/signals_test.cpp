// E6: timeouts, tidy destructors, slots and named tasks on the embedded executor, in host time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "embed/embed_test_support.hpp"
#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::embed::embedded_executor;
using spindle::testing::test_host;

spindle::task<void> never_finishes(std::vector<std::string>* log) {
  spindle::tidy([log]() -> spindle::task<void> {
    co_await spindle::sleep_for(10ms);  // host time: only the host's clock moves it
    log->push_back("tidied");
  });
  spindle::event never;
  co_await never.wait();
}

spindle::task<int> with_timeout_and_tidy(std::vector<std::string>* log) {
  try {
    co_await spindle::with_timeout(50ms, never_finishes(log));
  } catch (const spindle::timeout_error&) {
    log->push_back("timed out");
    co_return 1;
  }
  co_return 0;
}

TEST(EmbeddedSignals, TimeoutWaitsForTheTidyDestructorInHostTime) {
  test_host host;
  embedded_executor executor(host);
  std::vector<std::string> log;
  auto h = executor.spawn(with_timeout_and_tidy(&log));
  host.run_until_idle(executor);
  host.advance(50ms);  // the timeout fires: the child is cancelled, its clean-up sleeps 10 ms
  host.run_until_idle(executor);
  EXPECT_FALSE(h.is_finished());
  EXPECT_TRUE(log.empty());
  host.advance(10ms);
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 1);
  EXPECT_EQ(log, (std::vector<std::string>{"tidied", "timed out"}));
}

spindle::task<int> slot_occupant(std::vector<std::string>* log, int id) {
  log->push_back("start " + std::to_string(id));
  spindle::tidy([log, id]() -> spindle::task<void> {
    co_await spindle::sleep_for(5ms);
    log->push_back("tidy " + std::to_string(id));
  });
  co_await spindle::sleep_for(1h);
  co_return id;
}

TEST(EmbeddedSignals, ASlotsNewOccupantStartsAfterTheOldOneTidiedUp) {
  test_host host;
  embedded_executor executor(host);
  spindle::task_slot slot("screen");
  std::vector<std::string> log;
  auto first = executor.spawn_in_slot(slot, slot_occupant(&log, 1));
  host.run_until_idle(executor);
  auto second = executor.spawn_in_slot(slot, slot_occupant(&log, 2));
  host.run_until_idle(executor);
  EXPECT_EQ(log, (std::vector<std::string>{"start 1"}));  // 1 is cleaning up: 2 waits
  host.advance(5ms);
  host.run_until_idle(executor);
  EXPECT_EQ(log, (std::vector<std::string>{"start 1", "tidy 1", "start 2"}));
  ASSERT_TRUE(first.is_finished());
  EXPECT_EQ(first.status(), spindle::task_status::cancelled);
  EXPECT_FALSE(second.is_finished());
  EXPECT_EQ(slot.occupants(), 1u);
}

spindle::task<void> named_sleeper() { co_await spindle::sleep_for(20ms); }

spindle::task<int> waits_for_loader(std::atomic<int>* woke) {
  co_await spindle::wait_named("loader");
  woke->store(1);
  co_return 1;
}

TEST(EmbeddedSignals, NamedTasksAreWaitedForByName) {
  test_host host;
  embedded_executor executor(host);
  std::atomic<int> woke{0};
  auto loader = executor.spawn_named("loader", named_sleeper());
  EXPECT_EQ(executor.live_named("loader"), 1u);
  auto waiter = executor.spawn(waits_for_loader(&woke));
  host.run_until_idle(executor);
  EXPECT_EQ(woke.load(), 0);
  host.advance(20ms);
  host.run_until_idle(executor);
  EXPECT_EQ(woke.load(), 1);
  EXPECT_EQ(executor.live_named("loader"), 0u);
  ASSERT_TRUE(waiter.is_finished());
  loader.join();
}

}  // namespace
