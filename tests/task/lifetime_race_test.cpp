// Regression tests for issue 14, items 1 and 2 and the attack on them: spawns from plain threads
// racing shutdown(), joins across runtimes racing the joiner's runtime destruction, and the gate's
// wait limited to its own entrants. (Item 3 is in join_handle_sharing_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::testing::spin_until;

spindle::task<int> one() { co_return 1; }

// Runs `spawn_one(t)` in a loop on each of `spawners` plain threads until it throws
// runtime_stopped, while this thread shuts `rt` down once a few spawns were accepted.
template <class SpawnOne>
void spawn_from_plain_threads_during_shutdown(spindle::runtime& rt, int spawners,
                                              SpawnOne spawn_one) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < spawners; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      spin_until([&] { return go.load(); });
      for (;;) {
        try {
          spawn_one(t);
          accepted.fetch_add(1);
        } catch (const spindle::runtime_stopped&) {
          return;
        }
      }
    });
  }
  spin_until([&] { return ready.load() == spawners; });
  go.store(true);
  spin_until([&] { return accepted.load() > 32; });
  rt.shutdown();
  for (auto& thread : threads) thread.join();
}

// Item 1: four plain threads spawn in a loop while the main thread shuts the runtime down. Every
// spawn either throws runtime_stopped, or its handle finishes (completed or cancelled) by the time
// shutdown() returned: none is left pending (its join would block for ever), nothing crashes.
TEST(SpawnDuringShutdown, EverySpawnRunsEndsCancelledOrThrowsRuntimeStopped) {
  constexpr int rounds = 40;
  constexpr int spawners = 4;
  for (int round = 0; round < rounds; ++round) {
    spindle::runtime rt({.workers = 2});
    std::vector<std::vector<spindle::join_handle<int>>> handles(spawners);
    spawn_from_plain_threads_during_shutdown(rt, spawners, [&](int t) {
      if (t % 2 == 0) {
        handles[t].push_back(rt.spawn(one()));
      } else {
        handles[t].push_back(rt.spawn([] { return 1; }));
      }
    });
    for (int t = 0; t < spawners; ++t) {
      for (auto& h : handles[t]) {
        ASSERT_TRUE(h.is_finished()) << "round " << round << ": a spawn accepted before shutdown "
                                     << "is still pending after it";
        const auto status = h.status();
        EXPECT_TRUE(status == spindle::task_status::completed ||
                    status == spindle::task_status::cancelled);
      }
    }
  }
}

}  // namespace

namespace {

spindle::task<int> waits_then_returns(spindle::event& e) {
  co_await e.wait();
  co_return 2;
}

spindle::task<int> joins(spindle::join_handle<int> other) { co_return co_await std::move(other); }

// Item 2's sibling across runtimes: tasks of runtime B join tasks of runtime A; A's worker completes
// them (waking B's joiners) while B is destroyed. The completer must not read a joiner's frame that
// B's shutdown destroys (TSan/ASan presets), and every joiner ends.
TEST(JoinAcrossRuntimes, CompletionsInOneRuntimeRacingTheJoinersRuntimeDestruction) {
  constexpr int rounds = 40;
  constexpr int pairs = 32;
  spindle::runtime a({.workers = 1});
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::unique_ptr<spindle::event>> events;
    for (int i = 0; i < pairs; ++i) events.push_back(std::make_unique<spindle::event>());
    auto b = std::make_unique<spindle::runtime>(spindle::runtime_options{.workers = 1});
    std::vector<spindle::join_handle<int>> joiners;
    for (int i = 0; i < pairs; ++i) {
      joiners.push_back(b->spawn(joins(a.spawn(waits_then_returns(*events[i])))));
    }
    // Every joiner is suspended on its join before the race starts.
    for (int i = 0; i < pairs; ++i) spin_until([&] { return events[i]->waiting() == 1; });
    std::atomic<bool> go{false};
    std::thread setter([&] {
      spin_until([&] { return go.load(); });
      for (auto& e : events) e->set();
    });
    go.store(true);
    b.reset();
    setter.join();
    for (auto& h : joiners) {
      ASSERT_TRUE(h.is_finished()) << "round " << round;
    }
  }
}

}  // namespace

namespace {

// Item 1 through the other spawn paths (attack on issue 14): a slot's and a join set's spawns from
// plain threads racing shutdown(). Every accepted spawn runs or ends cancelled; after shutdown() no
// task is live (one entered after the drain stayed pending for ever, its join() blocked).
TEST(SpawnDuringShutdown, SlotAndJoinSetSpawnsRunEndCancelledOrThrow) {
  constexpr int rounds = 40;
  constexpr int spawners = 4;
  for (int round = 0; round < rounds; ++round) {
    spindle::runtime rt({.workers = 2});
    std::vector<spindle::task_slot> slots(spawners);
    std::vector<spindle::join_set<int>> sets(spawners);  // set t is used by thread t only
    std::vector<std::vector<spindle::join_handle<int>>> handles(spawners);
    spawn_from_plain_threads_during_shutdown(rt, spawners, [&](int t) {
      if (t % 2 == 0) {
        handles[t].push_back(slots[t].spawn(rt, one()));
      } else {
        sets[t].spawn(rt, one());
      }
    });
    EXPECT_EQ(rt.live_tasks(), 0u) << "round " << round << ": a spawn is pending after shutdown";
    for (auto& per_thread : handles) {
      for (auto& h : per_thread) ASSERT_TRUE(h.is_finished()) << "round " << round;
    }
  }
}

// The gate's wait is for its own entrants only (attack on issue 14): a thread inside runtime A's
// gate, running a callable's move constructor that waits for a lock, must not hold up the shutdown
// of an unrelated runtime B by the thread holding that lock.
std::mutex user_lock;
std::atomic<int> moves_made{0};
std::atomic<int> blocking_move{0};  // 0: none blocks; n: the n-th move waits for user_lock
std::atomic<bool> blocked_in_move{false};

struct locks_while_moving {
  locks_while_moving() = default;
  locks_while_moving(const locks_while_moving&) = default;
  locks_while_moving(locks_while_moving&&) noexcept {
    if (moves_made.fetch_add(1) + 1 != blocking_move.load()) return;
    blocked_in_move.store(true);
    std::lock_guard guard(user_lock);
  }
  int operator()() const { return 1; }
};

TEST(OutsideGate, ClosingOneRuntimeDoesNotWaitForAThreadInsideAnotherRuntimesGate) {
  spindle::runtime a({.workers = 1});
  auto b = std::make_unique<spindle::runtime>(spindle::runtime_options{.workers = 1});
  // The spawn's last move of the callable is the one into the task, inside A's gate.
  {
    locks_while_moving counted;
    EXPECT_EQ(a.spawn(std::move(counted)).join(), 1);
  }
  const int moves_per_spawn = moves_made.exchange(0);
  ASSERT_GT(moves_per_spawn, 0);
  std::unique_lock held(user_lock);
  blocking_move.store(moves_per_spawn);
  locks_while_moving callable;
  std::thread spawner([&] {
    auto handle = a.spawn(std::move(callable));
    EXPECT_EQ(handle.join(), 1);
  });
  spin_until([&] { return blocked_in_move.load(); });
  std::atomic<bool> b_down{false};
  std::thread watchdog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!b_down.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "DEADLOCK: B's shutdown waits for a thread inside A's gate\n");
        std::_Exit(1);
      }
      std::this_thread::yield();
    }
  });
  b->shutdown();  // with user_lock held: the spawner cannot leave A's gate until we release it
  b_down.store(true);
  held.unlock();
  spawner.join();
  watchdog.join();
  b.reset();
}

}  // namespace
