// Issue 14, item 2 on the embedded executor: plain threads setting events and cancelling tasks
// while the executor's destructor runs (its shutdown step 1 closes the gate to other threads,
// core/outside_gate.hpp). A wake or a cancel never touches a destroyed frame or a destroyed
// executor (ASan/TSan presets), and every task ends. (A spawn racing the destructor is a call on
// an object being destroyed, the caller's bug; the runtime, which has shutdown(), is tested for
// spawns in tests/task/lifetime_race_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::embed::embedded_executor;
using spindle::testing::spin_until;
using spindle::testing::test_host;

spindle::task<int> waits_for(spindle::event& e) {
  co_await e.wait();
  co_return 1;
}

TEST(EmbeddedShutdownRace, WakesAndCancelsFromPlainThreadsRacingTheDestructor) {
  constexpr int rounds = 60;
  constexpr int waiters = 32;
  constexpr int threads_per_kind = 2;
  for (int round = 0; round < rounds; ++round) {
    test_host host;
    // Outlive the executor: what other threads wake with must itself be alive.
    std::vector<std::unique_ptr<spindle::event>> events;
    for (int i = 0; i < waiters; ++i) events.push_back(std::make_unique<spindle::event>());
    auto executor = std::make_unique<embedded_executor>(host);
    std::vector<spindle::join_handle<int>> waiting;
    for (int i = 0; i < waiters; ++i) waiting.push_back(executor->spawn(waits_for(*events[i])));
    host.run_until_idle(*executor);

    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_per_kind; ++t) {
      threads.emplace_back([&, t] {  // waker: half of the events
        ready.fetch_add(1);
        spin_until([&] { return go.load(); });
        for (int i = t; i < waiters; i += 2 * threads_per_kind) events[i]->set();
      });
      threads.emplace_back([&, t] {  // canceller: the other half
        ready.fetch_add(1);
        spin_until([&] { return go.load(); });
        for (int i = t + threads_per_kind; i < waiters; i += 2 * threads_per_kind) {
          waiting[i].cancel();
        }
      });
    }
    spin_until([&] { return ready.load() == 2 * threads_per_kind; });
    go.store(true);
    executor.reset();
    for (auto& thread : threads) thread.join();
    for (auto& h : waiting) {
      // No tick ran after the wake or the cancel: the destructor ended each one.
      ASSERT_TRUE(h.is_finished()) << "round " << round;
      EXPECT_EQ(h.status(), spindle::task_status::cancelled) << "round " << round;
    }
  }
}

}  // namespace
