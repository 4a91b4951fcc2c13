// turnstile: poll-style code in a task (SPEC E5, the seed's non-main block). Any number of
// wake() calls from any thread become one wake-up of the task per block; a wake() during the
// poll means "poll again" without suspending; cancellation interrupts a blocked turnstile. On the
// embedded executor and on a spindle::runtime.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "embed/embed_test_support.hpp"
#include "spindle/embed/turnstile.hpp"
#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::embed::embedded_executor;
using spindle::embed::waker;
using spindle::testing::test_host;

// Where a poll publishes its waker for the threads that wake it.
class waker_slot {
 public:
  void publish(const waker& w) {
    std::lock_guard guard(mutex_);
    if (!waker_) waker_.emplace(w);
    published_.store(true, std::memory_order_release);
  }
  // Spins (yielding) until a poll published its waker.
  waker get() {
    spindle::testing::spin_until([this] { return published_.load(std::memory_order_acquire); });
    std::lock_guard guard(mutex_);
    return *waker_;
  }

 private:
  std::mutex mutex_;
  std::optional<waker> waker_;
  std::atomic<bool> published_{false};
};

// The state a poll reads: ready once `ready_after` wake-ups were announced (announced: counted
// in `announced` before the wake() call, so a poll that misses the count gets the wake()).
struct wake_source {
  std::atomic<int> announced{0};
  std::atomic<int> polls{0};
  int ready_after = 0;
  int polls_that_wake_themselves = 0;  // the first n polls call wake() before returning nullopt
  const spindle::join_handle<int>* cancel_from_poll = nullptr;  // cancels this in the first poll
  waker_slot slot;

  void wake_once() {
    announced.fetch_add(1);
    slot.get().wake();
  }
};

// The poll: returns the number of polls so far once ready.
struct source_poll {
  wake_source* source;
  std::optional<int> operator()(const waker& w) const {
    const int n = source->polls.fetch_add(1) + 1;
    source->slot.publish(w);
    if (source->announced.load() >= source->ready_after) return n;
    if (n == 1 && source->cancel_from_poll != nullptr) source->cancel_from_poll->cancel();
    if (n <= source->polls_that_wake_themselves) w.wake();
    return std::nullopt;
  }
};

spindle::task<int> poll_until_ready(wake_source& source) {
  co_return co_await spindle::embed::turnstile(source_poll{&source});
}

spindle::task<int> poll_reporting_cancel(wake_source& source, std::atomic<bool>& saw_cancel) {
  try {
    co_return co_await spindle::embed::turnstile(source_poll{&source});
  } catch (const spindle::task_cancelled&) {
    saw_cancel.store(true);
    throw;
  }
}

// --- on the embedded executor ----------------------------------------------------------------

TEST(Turnstile, BecomesReadyAfterNWakesFromAnotherThreadPollingOncePerWake) {
  test_host host;
  embedded_executor executor(host);
  wake_source source;
  source.ready_after = 5;
  auto h = executor.spawn(poll_until_ready(source));
  executor.tick();
  EXPECT_EQ(source.polls.load(), 1);
  EXPECT_EQ(executor.statistics().blocked_tasks, 1u);
  for (int i = 1; i <= 5; ++i) {
    host.take_soon_requests();
    std::thread waker_thread([&source] { source.wake_once(); });
    waker_thread.join();
    EXPECT_EQ(source.polls.load(), i);  // not polled outside a tick
    EXPECT_EQ(host.take_soon_requests(), 1u);
    executor.tick();
    EXPECT_EQ(source.polls.load(), i + 1);
  }
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 6);
  EXPECT_EQ(executor.statistics().tasks_run, 6u);
}

TEST(Turnstile, ManyConcurrentWakesWhileBlockedWakeTheTaskOnce) {
  test_host host;
  embedded_executor executor(host);
  wake_source source;
  source.ready_after = 1'000'000;  // not by count: the test makes it ready at the end
  auto h = executor.spawn(poll_until_ready(source));
  executor.tick();
  ASSERT_EQ(source.polls.load(), 1);
  host.take_soon_requests();
  const waker w = source.slot.get();
  std::vector<std::thread> wakers;
  for (int t = 0; t < 3; ++t) {
    wakers.emplace_back([&w] {
      for (int i = 0; i < 50; ++i) w.wake();
    });
  }
  for (auto& t : wakers) t.join();
  EXPECT_EQ(host.take_soon_requests(), 1u);  // one wake-up of the task, one tick request
  EXPECT_EQ(source.polls.load(), 1);
  executor.tick();
  EXPECT_EQ(source.polls.load(), 2);  // polled once for all 150 wakes
  EXPECT_FALSE(h.is_finished());
  executor.tick();
  EXPECT_EQ(source.polls.load(), 2);  // blocked again: no spurious poll
  EXPECT_EQ(executor.statistics().blocked_tasks, 1u);
  source.ready_after = 0;  // ticking thread, before the wake-up that publishes it
  w.wake();
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 3);
  EXPECT_EQ(executor.statistics().tasks_run, 3u);
}

TEST(Turnstile, ConcurrentWakersWhileTheHostTicksNeverPollMoreThanWakesPlusOne) {
  test_host host;
  embedded_executor executor(host);
  constexpr int threads = 3;
  constexpr int per_thread = spindle::testing::under_tsan ? 200 : 2000;
  wake_source source;
  source.ready_after = threads * per_thread;
  auto h = executor.spawn(poll_until_ready(source));
  std::vector<std::thread> wakers;
  for (int t = 0; t < threads; ++t) {
    wakers.emplace_back([&source] {
      for (int i = 0; i < per_thread; ++i) source.wake_once();
    });
  }
  spindle::testing::drive_until_finished(host, executor, h);
  for (auto& t : wakers) t.join();
  const int polls = h.join();
  EXPECT_EQ(polls, source.polls.load());
  EXPECT_LE(polls, threads * per_thread + 1);
  // Each run of the task polls at least once: a second wake-up for one block would show here
  // (and as a resumption of a running or finished coroutine).
  EXPECT_LE(executor.statistics().tasks_run, std::uint64_t(polls));
}

TEST(Turnstile, WakeDuringThePollPollsAgainWithoutSuspending) {
  test_host host;
  embedded_executor executor(host);
  wake_source source;
  source.ready_after = 1'000'000;
  source.polls_that_wake_themselves = 3;
  auto h = executor.spawn(poll_until_ready(source));
  executor.tick();
  EXPECT_EQ(source.polls.load(), 4);  // polls 1-3 woke themselves, poll 4 blocked
  EXPECT_EQ(executor.statistics().tasks_run, 1u);  // all in one run: it never suspended
  EXPECT_EQ(executor.statistics().blocked_tasks, 1u);
  EXPECT_FALSE(h.is_finished());
  source.ready_after = 0;
  source.slot.get().wake();
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 5);
}

TEST(Turnstile, CancelFromAnotherThreadWhileBlockedThrowsTaskCancelledInsideTheTask) {
  test_host host;
  embedded_executor executor(host);
  wake_source source;
  source.ready_after = 1'000'000;
  std::atomic<bool> saw_cancel{false};
  auto h = executor.spawn(poll_reporting_cancel(source, saw_cancel));
  executor.tick();
  ASSERT_EQ(source.polls.load(), 1);
  host.take_soon_requests();
  std::thread canceller([&h] { h.cancel(); });
  canceller.join();
  EXPECT_FALSE(h.is_finished());
  EXPECT_EQ(host.take_soon_requests(), 1u);
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
  EXPECT_EQ(source.polls.load(), 1);  // not polled again
  // Wakes after the cancellation find the turnstile finished: no tick is asked for.
  source.slot.get().wake();
  EXPECT_EQ(host.take_soon_requests(), 0u);
}

TEST(Turnstile, CancelRequestedDuringThePollThrowsWithoutBlocking) {
  test_host host;
  embedded_executor executor(host);
  wake_source source;
  source.ready_after = 1'000'000;
  std::atomic<bool> saw_cancel{false};
  spindle::join_handle<int> h = executor.spawn(poll_reporting_cancel(source, saw_cancel));
  source.cancel_from_poll = &h;
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(source.polls.load(), 1);
  EXPECT_EQ(executor.statistics().tasks_run, 1u);
  EXPECT_TRUE(spindle::testing::joined_cancelled(h));
}

TEST(Turnstile, WakeAfterTheTurnstileCompletedIsHarmless) {
  test_host host;
  wake_source source;
  source.ready_after = 1;
  std::optional<waker> kept;
  {
    embedded_executor executor(host);
    auto h = executor.spawn(poll_until_ready(source));
    executor.tick();
    kept.emplace(source.slot.get());
    source.wake_once();
    executor.tick();
    ASSERT_TRUE(h.is_finished());
    EXPECT_EQ(h.join(), 2);
    host.take_soon_requests();
    std::vector<std::thread> wakers;
    for (int t = 0; t < 3; ++t) {
      wakers.emplace_back([&kept] {
        for (int i = 0; i < 100; ++i) kept->wake();
      });
    }
    for (auto& t : wakers) t.join();
    EXPECT_EQ(host.take_soon_requests(), 0u);
    EXPECT_FALSE(executor.has_ready_work());
    EXPECT_EQ(source.polls.load(), 2);
  }
  kept->wake();  // even once the executor is gone: the waker keeps its block alive
  EXPECT_EQ(source.polls.load(), 2);
}

TEST(Turnstile, BlockedTurnstileEndsCancelledWhenTheExecutorIsDestroyed) {
  test_host host;
  wake_source source;
  source.ready_after = 1'000'000;
  spindle::join_handle<int> h;
  {
    embedded_executor executor(host);
    h = executor.spawn(poll_until_ready(source));
    executor.tick();
  }
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
  source.slot.get().wake();  // harmless afterwards
  EXPECT_EQ(source.polls.load(), 1);
}

spindle::task<int> turnstile_under_timeout(wake_source& source) {
  try {
    co_return co_await spindle::with_timeout(std::chrono::milliseconds(20),
                                             poll_until_ready(source));
  } catch (const spindle::timeout_error&) {
    co_return -1;
  }
}

TEST(Turnstile, BlockedTurnstileUnderWithTimeoutTimesOutInHostTime) {
  test_host host;
  embedded_executor executor(host);
  wake_source source;
  source.ready_after = 1'000'000;
  auto h = executor.spawn(turnstile_under_timeout(source));
  host.run_until_idle(executor);
  EXPECT_EQ(source.polls.load(), 1);
  host.advance(std::chrono::milliseconds(20));
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), -1);
  EXPECT_EQ(source.polls.load(), 1);
  EXPECT_EQ(executor.statistics().live_tasks, 0u);
  source.slot.get().wake();  // the interrupted turnstile finished: harmless
  EXPECT_FALSE(executor.has_ready_work());
}

// Throws from its second poll.
struct throwing_poll {
  wake_source* source;
  std::optional<int> operator()(const waker& w) const {
    source->slot.publish(w);
    if (source->polls.fetch_add(1) + 1 == 2) throw spindle::testing::boom();
    return std::nullopt;
  }
};
spindle::task<int> poll_that_throws(wake_source& source) {
  co_return co_await spindle::embed::turnstile(throwing_poll{&source});
}

TEST(Turnstile, ExceptionFromThePollPropagatesAndLaterWakesAreHarmless) {
  test_host host;
  embedded_executor executor(host);
  wake_source source;
  auto h = executor.spawn(poll_that_throws(source));
  executor.tick();
  source.slot.get().wake();
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.status(), spindle::task_status::failed);
  EXPECT_THROW(h.join(), spindle::testing::boom);
  host.take_soon_requests();
  source.slot.get().wake();
  EXPECT_EQ(host.take_soon_requests(), 0u);
  EXPECT_EQ(source.polls.load(), 2);
}

// --- on a spindle::runtime -------------------------------------------------------------------

TEST(Turnstile, OnARuntimeBecomesReadyAfterWakesFromAnotherThread) {
  spindle::runtime rt({.workers = 2});
  wake_source source;
  source.ready_after = 5;
  auto h = rt.spawn(poll_until_ready(source));
  for (int i = 0; i < 5; ++i) {
    const int before = source.polls.load();
    source.wake_once();
    // Each announced wake-up (the task blocked or not) is followed by a poll that sees it.
    spindle::testing::spin_until([&] { return source.polls.load() > before || h.is_finished(); });
  }
  const int polls = spindle::testing::join_bounded(std::move(h));
  EXPECT_LE(polls, 6);
  EXPECT_GE(polls, 2);
}

TEST(Turnstile, OnARuntimeConcurrentWakersNeverPollMoreThanWakesPlusOne) {
  spindle::runtime rt({.workers = 2});
  constexpr int threads = 3;
  constexpr int per_thread = spindle::testing::under_tsan ? 200 : 2000;
  wake_source source;
  source.ready_after = threads * per_thread;
  auto h = rt.spawn(poll_until_ready(source));
  std::vector<std::thread> wakers;
  for (int t = 0; t < threads; ++t) {
    wakers.emplace_back([&source] {
      for (int i = 0; i < per_thread; ++i) source.wake_once();
    });
  }
  for (auto& t : wakers) t.join();
  const int polls = spindle::testing::join_bounded(std::move(h));
  EXPECT_EQ(polls, source.polls.load());
  EXPECT_LE(polls, threads * per_thread + 1);
}

TEST(Turnstile, OnARuntimeCancelWhileBlockedThrowsTaskCancelledInsideTheTask) {
  spindle::runtime rt({.workers = 1});
  wake_source source;
  source.ready_after = 1'000'000;
  std::atomic<bool> saw_cancel{false};
  auto h = rt.spawn(poll_reporting_cancel(source, saw_cancel));
  (void)source.slot.get();  // the first poll ran; the task blocks (or is about to)
  h.cancel();
  EXPECT_TRUE(spindle::testing::eventually([&h] { return h.is_finished(); }));
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
  EXPECT_EQ(source.polls.load(), 1);
  source.slot.get().wake();  // after completion: harmless
}

// A poll that wakes itself every time (a "yield by self-wake") never suspends; the cooperative
// budget still makes it yield, so one tick ends (within tasks_per_tick) and others get to run.
spindle::task<long> self_waking_poll(long until) {
  long polls = 0;
  co_return co_await spindle::embed::turnstile([&polls, until](const waker& w) -> std::optional<long> {
    if (++polls >= until) return polls;
    w.wake();
    return std::nullopt;
  });
}

spindle::task<int> neighbour(std::atomic<int>* ran) {
  ran->fetch_add(1);
  co_return 0;
}

TEST(Turnstile, ASelfWakingPollDoesNotHoldTheTick) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 8, .tasks_per_execute_phase = 2});
  std::atomic<int> ran{0};
  auto spinner = executor.spawn(self_waking_poll(100000));
  auto other = executor.spawn(neighbour(&ran));
  executor.tick();  // returns: the spinner yields every cooperative budget
  EXPECT_FALSE(spinner.is_finished());
  EXPECT_EQ(ran.load(), 1);
  host.run_until_idle(executor);
  ASSERT_TRUE(spinner.is_finished());
  EXPECT_EQ(spinner.join(), 100000);
}

}  // namespace
