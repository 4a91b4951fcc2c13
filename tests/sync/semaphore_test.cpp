// spindle::semaphore: permit accounting, bounded concurrency, FIFO handoff, cancellation,
// destruction, cancel/wake races.
#include "spindle/sync/semaphore.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

TEST(Semaphore, TryAcquireAndReleaseCountPermits) {
  spindle::semaphore s(2);
  EXPECT_EQ(s.available(), 2u);
  EXPECT_TRUE(s.try_acquire());
  EXPECT_TRUE(s.try_acquire());
  EXPECT_FALSE(s.try_acquire());
  s.release(3);
  EXPECT_EQ(s.available(), 3u);
  EXPECT_THROW(s.release(spindle::semaphore::max_permits), spindle::usage_error);
  EXPECT_THROW(spindle::semaphore(spindle::semaphore::max_permits + 1), spindle::usage_error);
}

spindle::task<void> acquire_one(spindle::semaphore& s) { co_await s.acquire(); }

spindle::task<void> hold_permits(spindle::semaphore& s, std::atomic<int>& holders,
                                 std::atomic<int>& max_holders, std::uint64_t rounds) {
  for (std::uint64_t i = 0; i < rounds; ++i) {
    co_await s.acquire();
    const int now = holders.fetch_add(1) + 1;
    raise_max(max_holders, now);
    co_await spindle::yield_now();  // hold the permit across a suspension
    holders.fetch_sub(1);
    s.release();
  }
}

TEST(Semaphore, NeverMoreHoldersThanPermits) {
  spindle::runtime rt({.workers = 4});
  constexpr int permits = 3;
  spindle::semaphore s(permits);
  std::atomic<int> holders{0};
  std::atomic<int> max_holders{0};
  const std::uint64_t rounds = scaled(5000);
  rt.block_on([&]() -> spindle::task<void> {
    std::vector<spindle::join_handle<void>> handles;
    for (int i = 0; i < 10; ++i) handles.push_back(spindle::spawn(hold_permits(s, holders, max_holders, rounds)));
    for (auto& h : handles) co_await std::move(h);
  }());
  EXPECT_LE(max_holders.load(), permits);
  EXPECT_GE(max_holders.load(), 1);
  EXPECT_EQ(s.available(), std::size_t(permits));
  EXPECT_EQ(s.waiting(), 0u);
}

TEST(Semaphore, ReleaseHandsPermitsToWaitersInFifoOrder) {
  spindle::runtime rt({.workers = 1});
  spindle::semaphore s(0);
  std::vector<int> arrivals;
  std::vector<int> acquisitions;
  constexpr int waiters = 8;
  rt.block_on([&]() -> spindle::task<void> {
    std::vector<spindle::join_handle<void>> handles;
    for (int id = 0; id < waiters; ++id) {
      handles.push_back(spindle::spawn([](spindle::semaphore& s, int id, std::vector<int>& arrivals,
                                          std::vector<int>& acquisitions) -> spindle::task<void> {
        arrivals.push_back(id);
        co_await s.acquire();
        acquisitions.push_back(id);
      }(s, id, arrivals, acquisitions)));
    }
    co_await until([&] { return s.waiting() == waiters; });
    s.release(3);  // exactly the three oldest
    EXPECT_EQ(s.waiting(), std::size_t(waiters - 3));
    EXPECT_EQ(s.available(), 0u);
    EXPECT_FALSE(s.try_acquire());  // no barging past the queue
    co_await until([&] { return acquisitions.size() == 3; });
    s.release(waiters - 3 + 2);
    for (auto& h : handles) co_await std::move(h);
  }());
  // The permits go to the oldest waiters; the order in which the woken tasks then run is the
  // scheduler's business (wakes go to the LIFO end), so compare the batches as sets.
  ASSERT_EQ(acquisitions.size(), arrivals.size());
  auto batch = [](const std::vector<int>& v, std::size_t from, std::size_t to) {
    return std::set<int>(v.begin() + std::ptrdiff_t(from), v.begin() + std::ptrdiff_t(to));
  };
  EXPECT_EQ(batch(acquisitions, 0, 3), batch(arrivals, 0, 3));
  EXPECT_EQ(batch(acquisitions, 3, waiters), batch(arrivals, 3, waiters));
  EXPECT_EQ(s.available(), 2u);
}

TEST(Semaphore, CancelledWaiterGetsNoPermit) {
  spindle::runtime rt({.workers = 2});
  spindle::semaphore s(0);
  auto victim = rt.spawn(acquire_one(s));
  auto survivor = rt.spawn(acquire_one(s));
  spin_until([&] { return s.waiting() == 2; });
  victim.cancel();
  EXPECT_TRUE(joined_cancelled(victim));
  EXPECT_EQ(s.waiting(), 1u);
  s.release(2);
  survivor.join();
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, DestroyingASemaphoreWakesItsWaitersWithTaskCancelled) {
  spindle::runtime rt({.workers = 2});
  auto s = std::make_unique<spindle::semaphore>(0);
  auto waiter = rt.spawn(acquire_one(*s));
  spin_until([&] { return s->waiting() == 1; });
  s.reset();
  EXPECT_TRUE(joined_cancelled(waiter));
}

TEST(Semaphore, ShutdownReturnsAPermitHandedToATaskThatNeverResumed) {
  spindle::semaphore s(0);  // outlives the runtime
  {
    spindle::runtime rt({.workers = 1});
    auto waiter = rt.spawn(acquire_one(s));
    spin_until([&] { return s.waiting() == 1; });
    occupy_a_worker_until_shutdown(rt);
    s.release();  // hands the permit to the waiter, which never gets to run
    waiter.detach();
  }
  // Either the abandoned awaiter gave the permit back, or the waiter ran and keeps it (a task
  // that finishes holding a permit does not return it): the permit is not duplicated.
  EXPECT_LE(s.available(), 1u);
  EXPECT_EQ(s.waiting(), 0u);
}

TEST(Semaphore, CancelRacingReleaseConservesPermits) {
  spindle::runtime rt({.workers = 2});
  spindle::semaphore s(0);
  const std::uint64_t iterations = scaled(10000);
  std::uint64_t acquired = 0;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    auto waiter = rt.spawn(acquire_one(s));
    if (i % 2 == 0) spin_until([&] { return s.waiting() == 1; });
    auto canceller = rt.spawn(cancel_task(&waiter));
    s.release();  // races the cancel
    canceller.join();
    if (joined_cancelled(waiter)) {
      ASSERT_EQ(s.available(), 1u);  // the permit stayed in the pool
      ASSERT_TRUE(s.try_acquire());
    } else {
      ++acquired;
      ASSERT_EQ(s.available(), 0u);  // the waiter took it (and keeps it)
    }
    ASSERT_EQ(s.waiting(), 0u);
  }
  // Both outcomes should normally occur; not asserted (it depends on timing), only reported.
  std::printf("[   info   ] %llu acquired, %llu cancelled\n", (unsigned long long)acquired,
              (unsigned long long)(iterations - acquired));
}

}  // namespace
