// spindle::mutex: exclusion, FIFO handoff, guards, cancellation, destruction, cancel/wake races.
#include "spindle/sync/mutex.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

TEST(Mutex, TryLockAndUnlockFromAPlainThread) {
  spindle::mutex m;
  EXPECT_FALSE(m.is_locked());
  EXPECT_TRUE(m.try_lock());
  EXPECT_TRUE(m.is_locked());
  EXPECT_FALSE(m.try_lock());
  m.unlock();
  EXPECT_FALSE(m.is_locked());
  EXPECT_THROW(m.unlock(), spindle::usage_error);
}

TEST(Mutex, GuardUnlocksMovesAndReleases) {
  spindle::mutex m;
  {
    spindle::mutex::guard g = m.try_lock_guard();
    ASSERT_TRUE(g.owns_lock());
    EXPECT_FALSE(m.try_lock_guard().owns_lock());
    spindle::mutex::guard moved = std::move(g);
    EXPECT_FALSE(g.owns_lock());
    EXPECT_EQ(moved.get(), &m);
    EXPECT_TRUE(m.is_locked());
  }
  EXPECT_FALSE(m.is_locked());
  spindle::mutex::guard g = m.try_lock_guard();
  g.unlock();
  EXPECT_FALSE(m.is_locked());
  EXPECT_THROW(g.unlock(), spindle::usage_error);
  g = m.try_lock_guard();
  spindle::mutex* raw = g.release();
  EXPECT_TRUE(m.is_locked());
  raw->unlock();
}

spindle::task<int> lock_and_return(spindle::mutex& m, int value) {
  auto held = co_await m.lock();
  co_return value;
}

TEST(Mutex, AwaitingOutsideASpawnedTaskIsAUsageError) {
  spindle::mutex m;
  ASSERT_TRUE(m.try_lock());
  spindle::task<int> t = lock_and_return(m, 1);
  t.handle().resume();  // runs on this plain thread: no spawned task to suspend
  ASSERT_TRUE(t.handle().done());
  EXPECT_THROW(t.handle().promise().take_result(), spindle::usage_error);
  EXPECT_EQ(m.waiting(), 0u);
  m.unlock();
}

TEST(Mutex, UncontendedLockInsideATask) {
  spindle::runtime rt({.workers = 2});
  spindle::mutex m;
  EXPECT_EQ(rt.block_on(lock_and_return(m, 7)), 7);
  EXPECT_FALSE(m.is_locked());
}

spindle::task<void> add_under_lock(spindle::mutex& m, std::uint64_t& counter,
                                   std::atomic<int>& inside, std::atomic<int>& max_inside,
                                   std::uint64_t increments) {
  for (std::uint64_t i = 0; i < increments; ++i) {
    auto held = co_await m.lock();
    const int now = inside.fetch_add(1) + 1;
    raise_max(max_inside, now);
    ++counter;  // not atomic: the mutex is the only protection
    if (i % 64 == 0) co_await spindle::yield_now();  // hold the lock across a suspension
    inside.fetch_sub(1);
  }
}

TEST(Mutex, MutualExclusionUnderContention) {
  spindle::runtime rt({.workers = 4});
  spindle::mutex m;
  std::uint64_t counter = 0;
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  constexpr int tasks = 8;
  const std::uint64_t increments = scaled(20000);
  rt.block_on([&]() -> spindle::task<void> {
    std::vector<spindle::join_handle<void>> handles;
    for (int i = 0; i < tasks; ++i) {
      handles.push_back(spindle::spawn(add_under_lock(m, counter, inside, max_inside, increments)));
    }
    for (auto& h : handles) co_await std::move(h);
  }());
  EXPECT_EQ(counter, tasks * increments);
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_FALSE(m.is_locked());
  EXPECT_EQ(m.waiting(), 0u);
}

spindle::task<void> record_arrival_and_lock(spindle::mutex& m, int id, std::vector<int>& arrivals,
                                            std::vector<int>& acquisitions) {
  arrivals.push_back(id);  // immediately followed by the lock: arrival order = queue order
  auto held = co_await m.lock();
  acquisitions.push_back(id);
}

TEST(Mutex, HandsTheLockOverInFifoOrder) {
  // One worker: the tasks interleave only at suspension points, so the vectors need no lock.
  spindle::runtime rt({.workers = 1});
  spindle::mutex m;
  std::vector<int> arrivals;
  std::vector<int> acquisitions;
  constexpr int waiters = 16;
  rt.block_on([&]() -> spindle::task<void> {
    std::vector<spindle::join_handle<void>> handles;
    {
      auto held = co_await m.lock();
      for (int id = 0; id < waiters; ++id) {
        handles.push_back(spindle::spawn(record_arrival_and_lock(m, id, arrivals, acquisitions)));
      }
      co_await until([&] { return m.waiting() == waiters; });
      // A newcomer's try_lock must not barge in ahead of the queue.
      EXPECT_FALSE(m.try_lock());
    }
    for (auto& h : handles) co_await std::move(h);
  }());
  ASSERT_EQ(arrivals.size(), std::size_t(waiters));
  EXPECT_EQ(acquisitions, arrivals);
}

TEST(Mutex, CancelledWaiterGetsTaskCancelledAndTheMutexStaysUsable) {
  spindle::runtime rt({.workers = 2});
  spindle::mutex m;
  ASSERT_TRUE(m.try_lock());
  auto victim = rt.spawn(lock_and_return(m, 1));
  auto survivor = rt.spawn(lock_and_return(m, 2));
  spin_until([&] { return m.waiting() == 2; });
  victim.cancel();
  EXPECT_TRUE(joined_cancelled(victim));
  EXPECT_EQ(m.waiting(), 1u);
  EXPECT_TRUE(m.is_locked());  // still ours: the cancelled waiter never owned it
  m.unlock();                  // hands it to the survivor
  EXPECT_EQ(survivor.join(), 2);
  EXPECT_FALSE(m.is_locked());
  EXPECT_EQ(rt.block_on(lock_and_return(m, 3)), 3);
}

TEST(Mutex, DestroyingAMutexWakesItsWaitersWithTaskCancelled) {
  spindle::runtime rt({.workers = 2});
  auto m = std::make_unique<spindle::mutex>();
  ASSERT_TRUE(m->try_lock());
  auto waiter = rt.spawn(lock_and_return(*m, 1));
  spin_until([&] { return m->waiting() == 1; });
  m.reset();
  EXPECT_TRUE(joined_cancelled(waiter));
}

TEST(Mutex, ShutdownDestroysAQueuedWaiterWhichUnlinksItself) {
  spindle::mutex m;  // outlives the runtime
  ASSERT_TRUE(m.try_lock());
  spindle::join_handle<int> waiter;
  {
    spindle::runtime rt({.workers = 2});
    waiter = rt.spawn(lock_and_return(m, 1));
    spin_until([&] { return m.waiting() == 1; });
  }
  EXPECT_EQ(m.waiting(), 0u);
  EXPECT_EQ(waiter.status(), spindle::task_status::cancelled);
  m.unlock();
  EXPECT_FALSE(m.is_locked());
}

TEST(Mutex, ShutdownPassesOnALockHandedToATaskThatNeverResumed) {
  spindle::mutex m;  // outlives the runtime
  ASSERT_TRUE(m.try_lock());
  spindle::join_handle<int> waiter;
  {
    spindle::runtime rt({.workers = 1});
    waiter = rt.spawn(lock_and_return(m, 1));
    spin_until([&] { return m.waiting() == 1; });
    // Occupy the only worker until the shutdown begins, so the woken waiter stays queued.
    occupy_a_worker_until_shutdown(rt);
    m.unlock();  // hands the lock to the waiter, which never gets to run
  }
  // Either the frame was destroyed holding the handed-over lock (its awaiter passed it on) or
  // the waiter ran and released it: in both cases nobody owns the mutex now.
  EXPECT_FALSE(m.is_locked());
  EXPECT_EQ(m.waiting(), 0u);
  EXPECT_NE(waiter.status(), spindle::task_status::pending);
  std::printf("[   info   ] the waiter %s\n", waiter.status() == spindle::task_status::cancelled ? "was destroyed at shutdown" : "ran");
}

TEST(Mutex, CancelRacingHandoffHasExactlyOneOutcome) {
  spindle::runtime rt({.workers = 2});
  spindle::mutex m;
  const std::uint64_t iterations = scaled(10000);
  std::uint64_t acquired = 0;
  std::uint64_t cancelled = 0;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    ASSERT_TRUE(m.try_lock());
    auto waiter = rt.spawn(lock_and_return(m, 1));
    if (i % 2 == 0) spin_until([&] { return m.waiting() == 1; });  // else race registration too
    auto canceller = rt.spawn(cancel_task(&waiter));
    m.unlock();  // races the cancel: hands off to the waiter, or frees the mutex
    canceller.join();
    if (joined_cancelled(waiter)) {
      ++cancelled;
    } else {
      ++acquired;
    }
    ASSERT_EQ(m.waiting(), 0u);
    ASSERT_FALSE(m.is_locked()) << "iteration " << i;  // the winner released it, or nobody took it
  }
  EXPECT_EQ(acquired + cancelled, iterations);
  // Both outcomes should normally occur; not asserted (it depends on timing), only reported.
  std::printf("[   info   ] %llu acquired, %llu cancelled\n", (unsigned long long)acquired, (unsigned long long)cancelled);
}

}  // namespace
