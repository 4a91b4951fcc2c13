// Helping while waiting (issue 14, item 6): an owner waiting for its stolen right branch runs
// only pieces of its own computation, never pieces of an unrelated one. Otherwise a computation
// that holds a lock while it forks (legal: its own pieces never take that lock) could run, on its
// own stack, a piece of another computation that takes the same lock, and deadlock on itself.
//
// The scenario, step by step (fork_quantum 0: every fork is a heartbeat):
//   1. the *holder* (a task) locks a std::mutex and forks; its right branch is stolen by an idle
//      worker (the *thief*), which keeps it running until the locker's piece has run or a while
//      has passed;
//   2. the *locker*, an unrelated computation started on the third worker, forks a right branch
//      that takes the mutex, and keeps its left branch busy (without forking) until the holder
//      is done, so that branch stays published on its board;
//   3. the holder's left branch ends once the locker's piece is published: the holder waits for
//      its stolen branch, with the mutex held, and looks for work to help with.
// Before the fix it took the locker's piece and locked the mutex it holds: deadlock (std::mutex
// relocked by its owner). After it, the holder skips that piece; its stolen branch ends, it
// unlocks, and the locker's piece runs.
//
// Three workers, not two: with two, the waiting holder's thief can only be the locker's owner
// helping in its own wait (so the locker's piece it waits for was stolen by the holder's worker,
// which must have finished it to run the holder), which leaves only a race of a few instructions;
// the third worker makes every step certain. A watchdog bounds the wait: if the holder is not
// done within the deadline the runtime is deadlocked (it cannot be destroyed), so the test
// reports and exits.
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "support/test_support.hpp"
#include "support/fork_support.hpp"

namespace {

using namespace spindle::testing;
using std::chrono::steady_clock;

using spindle::testing::fork_until;

// Spins without forking (no promotion) until `flag` is set or `limit` has passed.
void spin_until_set_or_timeout(const std::atomic<bool>& flag, std::chrono::steady_clock::duration limit) {
  const auto deadline = steady_clock::now() + limit;
  while (!flag.load(std::memory_order_acquire) && steady_clock::now() < deadline) {
  }
}

struct scenario {
  std::mutex lock;  // the holder's
  std::atomic<bool> stolen_started{false};   // the holder's right branch runs on the thief
  std::atomic<bool> locker_published{false};  // the locker's right branch is on its board
  std::atomic<bool> locker_piece_ran{false};
  std::atomic<bool> holder_done{false};
  std::mutex done_lock;
  std::condition_variable done_changed;
  int done = 0;  // guarded by done_lock

  void finished() {
    std::lock_guard guard(done_lock);
    ++done;
    done_changed.notify_all();
  }
};

TEST(ForkJoinHelping, AWaitingOwnerNeverRunsPiecesOfAnUnrelatedComputation) {
  auto* shared = new scenario;  // leaked if the runtime deadlocks (we exit then)
  auto* rt = new spindle::runtime({.workers = 3, .fork_quantum = std::chrono::nanoseconds(0)});
  const auto before = spindle::fork_statistics();

  auto holder = rt->spawn([shared] {
    std::lock_guard guard(shared->lock);  // held while this computation waits for its branch
    auto [left, right] = spindle::fork_join(
        [shared] {
          fork_until(shared->stolen_started);  // the right branch below was stolen
          spin_until_set_or_timeout(shared->locker_published, std::chrono::seconds(20));
          return 1;
        },
        [shared] {
          shared->stolen_started.store(true, std::memory_order_release);
          // Long enough for the waiting holder to look at every board many times.
          spin_until_set_or_timeout(shared->locker_piece_ran, std::chrono::milliseconds(100));
          return 2;
        });
    shared->holder_done.store(true, std::memory_order_release);
    shared->finished();
    return left + right;
  });

  // The locker starts once the holder and its thief occupy two workers: it runs on the third.
  spin_until_set_or_timeout(shared->stolen_started, std::chrono::seconds(20));
  ASSERT_TRUE(shared->stolen_started.load());
  auto locker = rt->spawn([shared] {
    const std::uint64_t promoted_before = spindle::fork_statistics().promoted;
    auto [left, right] = spindle::fork_join(
        [shared, promoted_before] {
          // The right branch's frame is the bottom one: the first promotion of this computation
          // publishes it (the holder and its thief do not fork any more).
          const auto deadline = steady_clock::now() + std::chrono::seconds(20);
          while (spindle::fork_statistics().promoted == promoted_before &&
                 steady_clock::now() < deadline) {
            spindle::fork_join([] {}, [] {});
          }
          shared->locker_published.store(true, std::memory_order_release);
          spin_until_set_or_timeout(shared->holder_done, std::chrono::seconds(20));
          return 10;
        },
        [shared] {
          shared->locker_piece_ran.store(true, std::memory_order_release);
          std::lock_guard guard(shared->lock);  // the holder's lock
          return 20;
        });
    shared->finished();
    return left + right;
  });

  // The watchdog: both finish within a fraction of a second unless they deadlocked.
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  bool all_done = false;
  {
    std::unique_lock guard(shared->done_lock);
    all_done = shared->done_changed.wait_until(guard, deadline, [&] { return shared->done == 2; });
  }
  if (!all_done) {
    std::fprintf(stderr,
                 "DEADLOCK: after 10 s the holder is %s, the locker's piece %s (the waiting "
                 "holder ran the locker's piece on its own stack, holding the lock it takes)\n",
                 shared->holder_done.load() ? "done" : "not done",
                 shared->locker_piece_ran.load() ? "started" : "not started");
    ADD_FAILURE() << "deadlock between two unrelated fork-join computations";
    std::fflush(nullptr);
    std::_Exit(1);  // the runtime's workers are stuck: it cannot be destroyed
  }
  EXPECT_EQ(holder.join(), 3);
  EXPECT_EQ(locker.join(), 30);
  delete rt;
  delete shared;
  // The holder's right branch was really stolen (otherwise the scenario proves nothing).
  EXPECT_GT(spindle::fork_statistics().delegated, before.delegated);
}

}  // namespace
