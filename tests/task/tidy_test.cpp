// Tidy destructors (T4): asynchronous clean-up that completes before a task's outcome is
// published, whether the task returned, threw or was cancelled (a cancel, with_timeout).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;

// A log the clean-ups and bodies append to (one task at a time touches it in these tests).
struct journal {
  std::vector<std::string> lines;
};

spindle::task<void> note_after_yield(journal* j, std::string line) {
  co_await spindle::yield_now();  // really asynchronous: suspends once
  j->lines.push_back(std::move(line));
}

spindle::task<int> returns_with_two_cleanups(journal* j) {
  spindle::tidy([j] { return note_after_yield(j, "first registered"); });
  spindle::tidy([j] { return note_after_yield(j, "second registered"); });
  j->lines.push_back("body done");
  co_return 42;
}

TEST(Tidy, RunsInReverseOrderAfterTheBodyBeforeTheResult) {
  spindle::runtime rt({.workers = 1});
  journal j;
  EXPECT_EQ(rt.block_on(returns_with_two_cleanups(&j)), 42);
  EXPECT_EQ(j.lines, (std::vector<std::string>{"body done", "second registered", "first registered"}));
}

spindle::task<void> waits_forever_with_cleanup(journal* j, spindle::event* started) {
  spindle::tidy([j]() -> spindle::task<void> {
    // Awaits inside a clean-up are not cancellation points: this sleep completes.
    co_await spindle::sleep_for(1ms);
    co_await spindle::yield_now();
    j->lines.push_back("cleaned up");
  });
  started->set();
  spindle::event never;
  co_await never.wait();
}

TEST(Tidy, CancellationCompletesOnlyAfterTheCleanupRanShielded) {
  spindle::runtime rt({.workers = 2});
  journal j;
  spindle::event started;
  auto h = rt.spawn(waits_forever_with_cleanup(&j, &started));
  rt.block_on([](spindle::event& e) -> spindle::task<void> { co_await e.wait(); }(started));
  h.cancel();
  EXPECT_THROW(h.join(), spindle::task_cancelled);
  EXPECT_EQ(j.lines, std::vector<std::string>{"cleaned up"});
}

spindle::task<int> timed_out_with_cleanup(journal* j) {
  try {
    co_return co_await spindle::with_timeout(5ms, [](journal* jj) -> spindle::task<int> {
      spindle::tidy([jj]() -> spindle::task<void> {
        co_await spindle::sleep_for(2ms);
        jj->lines.push_back("cleaned up");
      });
      spindle::event never;
      co_await never.wait();
      co_return 0;
    }(j));
  } catch (const spindle::timeout_error&) {
    j->lines.push_back("timeout seen");
    co_return -1;
  }
}

TEST(Tidy, WithTimeoutReportsTheTimeoutOnlyAfterTheCleanup) {
  spindle::runtime rt({.workers = 2});
  journal j;
  EXPECT_EQ(rt.block_on(timed_out_with_cleanup(&j)), -1);
  EXPECT_EQ(j.lines, (std::vector<std::string>{"cleaned up", "timeout seen"}));
}

spindle::task<int> throws_with_cleanup(journal* j) {
  spindle::tidy([j] { return note_after_yield(j, "cleaned up"); });
  throw std::runtime_error("body failed");
  co_return 0;
}

TEST(Tidy, RunsWhenTheBodyThrowsAndTheExceptionStillPropagates) {
  spindle::runtime rt({.workers = 1});
  journal j;
  EXPECT_THROW(rt.block_on(throws_with_cleanup(&j)), std::runtime_error);
  EXPECT_EQ(j.lines, std::vector<std::string>{"cleaned up"});
}

spindle::task<int> dismisses_one(journal* j) {
  [[maybe_unused]] auto kept = spindle::tidy([j] { return note_after_yield(j, "kept"); });
  auto dropped = spindle::tidy([j] { return note_after_yield(j, "dismissed"); });
  dropped.dismiss();
  co_return 1;
}

TEST(Tidy, DismissedRegistrationDoesNotRun) {
  spindle::runtime rt({.workers = 1});
  journal j;
  EXPECT_EQ(rt.block_on(dismisses_one(&j)), 1);
  EXPECT_EQ(j.lines, std::vector<std::string>{"kept"});
}

spindle::task<void> failing_cleanup() {
  co_await spindle::yield_now();
  throw std::runtime_error("clean-up failed");
}

spindle::task<int> cleanup_throws(journal* j) {
  spindle::tidy([j] { return note_after_yield(j, "second still runs"); });
  spindle::tidy([] { return failing_cleanup(); });
  co_return 5;
}

TEST(Tidy, AFailingCleanupNeitherStopsTheOthersNorChangesTheOutcome) {
  spindle::runtime rt({.workers = 1});
  journal j;
  EXPECT_EQ(rt.block_on(cleanup_throws(&j)), 5);
  EXPECT_EQ(j.lines, std::vector<std::string>{"second still runs"});
}

spindle::task<void> registers_in_nested(journal* j) {
  spindle::tidy([j] { return note_after_yield(j, "registered in the child"); });
  j->lines.push_back("child returns");
  co_return;
}

spindle::task<int> parent_of_nested(journal* j) {
  co_await registers_in_nested(j);
  j->lines.push_back("parent continues");
  co_return 3;
}

TEST(Tidy, ARegistrationBelongsToTheSpawnedTaskNotTheNestedCoroutine) {
  spindle::runtime rt({.workers = 1});
  journal j;
  EXPECT_EQ(rt.block_on(parent_of_nested(&j)), 3);
  EXPECT_EQ(j.lines, (std::vector<std::string>{"child returns", "parent continues",
                                               "registered in the child"}));
}

TEST(Tidy, OutsideASpawnedTaskIsAUsageError) {
  EXPECT_THROW(spindle::tidy([] { return failing_cleanup(); }), spindle::usage_error);
  spindle::runtime rt({.workers = 1});
  auto h = rt.spawn([] { spindle::tidy([] { return failing_cleanup(); }); });
  EXPECT_THROW(h.join(), spindle::usage_error);
}

spindle::task<void> blocked_with_cleanup(std::atomic<bool>* callable_destroyed,
                                         std::atomic<bool>* cleanup_ran, spindle::event* started) {
  spindle::tidy([flag = spindle::testing::make_destroy_flag(*callable_destroyed),
                 cleanup_ran]() -> spindle::task<void> {
    cleanup_ran->store(true);
    co_return;
  });
  started->set();
  spindle::event never;
  co_await never.wait();
}

TEST(Tidy, AbandonedAtShutdownDestroysTheCallableWithoutRunningIt) {
  std::atomic<bool> destroyed{false}, ran{false};
  spindle::join_handle<void> h;
  {
    spindle::runtime rt({.workers = 1});
    spindle::event started;
    h = rt.spawn(blocked_with_cleanup(&destroyed, &ran, &started));
    rt.block_on([](spindle::event& e) -> spindle::task<void> { co_await e.wait(); }(started));
  }
  EXPECT_TRUE(destroyed.load());
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
}

}  // namespace
