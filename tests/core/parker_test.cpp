// Behaviour of core::futex_parker (park_driver contract in parker.hpp): a notification that
// arrives before wait() is not lost, notifications coalesce, timeouts return, and a blocked
// owner is woken by another thread.
#include <spindle/core/parker.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::core::futex_parker;
using spindle::core::park_driver;
using namespace spindle::testing;

TEST(FutexParker, NotificationBeforeWaitIsConsumedAtOnce) {
  futex_parker p;
  p.unpark();
  p.wait(std::nullopt);  // must not block: the notification is pending
  SUCCEED();
}

TEST(FutexParker, NotificationsCoalesceAndAreConsumed) {
  futex_parker p;
  p.unpark();
  p.unpark();
  p.unpark();
  p.wait(std::nullopt);  // consumes the single pending notification
  // Nothing pending any more: a wait with a timeout returns by timing out (or spuriously).
  p.wait(std::chrono::milliseconds(1));
  SUCCEED();
}

TEST(FutexParker, ZeroAndNegativeTimeoutsReturn) {
  futex_parker p;
  p.wait(std::chrono::nanoseconds(0));
  p.wait(std::chrono::nanoseconds(-5));
  p.wait(std::chrono::microseconds(50));
  // A notification given after timed-out waits is still delivered to the next wait.
  p.unpark();
  p.wait(std::nullopt);
  SUCCEED();
}

TEST(FutexParker, UsableThroughTheDriverInterface) {
  std::unique_ptr<park_driver> driver = std::make_unique<futex_parker>();
  driver->unpark();
  driver->wait(std::nullopt);
  SUCCEED();
}

TEST(FutexParker, BlockedOwnerIsWokenByAnotherThread) {
  futex_parker p;
  std::atomic<int> published{0};
  std::thread notifier([&] {
    published.store(42, std::memory_order_relaxed);
    p.unpark();  // release: publishes `published` to the waiter's acquire
  });
  // wait() may return spuriously: loop on the condition, as the executor does.
  while (published.load(std::memory_order_relaxed) != 42) p.wait(std::nullopt);
  notifier.join();
  EXPECT_EQ(published.load(), 42);
}

// Ping-pong: each side publishes a counter, unparks the other, and waits (no timeout) until the
// other side answered. A lost wake-up hangs the test.
TEST(FutexParker, PingPongLosesNoWakeUp) {
  constexpr std::uint32_t rounds = under_tsan ? 20000 : 200000;
  futex_parker a, b;
  std::atomic<std::uint32_t> ping{0}, pong{0};
  futex_ping_pong(a, b, ping, pong, rounds);
  EXPECT_EQ(pong.load(), rounds);
}

}  // namespace
