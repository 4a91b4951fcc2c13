// std::stop_token interop: this_task::stop_token() stops when the task is cancelled (before or
// after the token was taken, and its callbacks run outside the task lock), not when a
// with_timeout scope fires; spawn(body, token) cancels the task on request_stop(), before it
// ran or while it waits, and a source stopping as the task completes is harmless.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stop_token>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::task;
using namespace spindle::testing;

// Takes the token, then waits on `ch` until cancelled; reports what the token said.
task<int> token_watcher(spindle::channel<int>* ch, std::atomic<int>* callback_runs,
                        std::atomic<bool>* took_token) {
  std::stop_token token = spindle::this_task::stop_token();
  std::stop_callback on_stop(token, [callback_runs] { callback_runs->fetch_add(1); });
  took_token->store(true);
  try {
    (void)co_await ch->receive();
  } catch (const spindle::task_cancelled&) {
    co_return token.stop_requested() ? 1 : 0;
  }
  co_return -1;
}

TEST(StopToken, TheTasksTokenStopsWhenTheTaskIsCancelled) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  std::atomic<int> callback_runs{0};
  std::atomic<bool> took_token{false};
  auto handle = rt.spawn(token_watcher(&ch, &callback_runs, &took_token));
  ASSERT_TRUE(eventually([&] { return took_token.load(); }));
  handle.cancel();
  EXPECT_EQ(handle.join(), 1);
  EXPECT_EQ(callback_runs.load(), 1);
}

// The cancellation comes first (once the task runs), the token after: it is stopped at once.
task<int> token_after_cancel(std::atomic<bool>* go) {
  go->store(true);
  for (;;) {
    try {
      co_await spindle::yield_now();
    } catch (const spindle::task_cancelled&) {
      break;  // swallowed on purpose: take the token afterwards
    }
  }
  co_return spindle::this_task::stop_token().stop_requested() ? 1 : 0;
}

TEST(StopToken, ATokenTakenAfterTheCancellationIsStopped) {
  spindle::runtime rt({.workers = 2});
  std::atomic<bool> go{false};
  auto handle = rt.spawn(token_after_cancel(&go));
  ASSERT_TRUE(eventually([&] { return go.load(); }));  // running: it will not take the token
  handle.cancel();
  EXPECT_EQ(handle.join(), 1);
}

// A with_timeout scope firing is not the task's cancellation.
task<int> token_through_timeout(spindle::channel<int>* ch) {
  std::stop_token token = spindle::this_task::stop_token();
  try {
    (void)co_await spindle::with_timeout(1ms, ch->receive());
  } catch (const spindle::timeout_error&) {
    co_return token.stop_requested() ? 1 : 0;
  }
  co_return -1;
}

TEST(StopToken, ATimeoutDoesNotStopTheToken) {
  spindle::manual_clock clock(virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  spindle::channel<int> ch(1);
  auto handle = rt.spawn(token_through_timeout(&ch));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  clock.advance(1ms);
  EXPECT_EQ(handle.join(), 0);
}

TEST(StopToken, OutsideATaskIsAUsageError) {
  EXPECT_THROW((void)spindle::this_task::stop_token(), spindle::usage_error);
}

task<int> stoppable_receiver(spindle::channel<int>* ch, std::atomic<bool>* started) {
  started->store(true);
  std::optional<int> value = co_await ch->receive();
  co_return value.value_or(-1);
}

TEST(StopToken, RequestStopCancelsAWaitingTask) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  std::stop_source source;
  std::atomic<bool> started{false};
  auto handle = rt.spawn(stoppable_receiver(&ch, &started), source.get_token());
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  EXPECT_TRUE(source.request_stop());
  EXPECT_THROW(handle.join(), spindle::task_cancelled);
}

TEST(StopToken, AStoppedTokenMeansTheTaskNeverRuns) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  std::stop_source source;
  source.request_stop();
  std::atomic<bool> started{false};
  auto handle = rt.spawn(stoppable_receiver(&ch, &started), source.get_token());
  EXPECT_THROW(handle.join(), spindle::task_cancelled);
  EXPECT_FALSE(started.load());
}

task<int> spawns_stoppable_child(spindle::channel<int>* ch, std::stop_token token,
                                 std::atomic<bool>* started) {
  auto child = spindle::spawn(stoppable_receiver(ch, started), std::move(token));
  co_return co_await std::move(child);
}

// The source stops as the tasks complete (the test thread stops while the items arrive): each
// task either returns its item or ends cancelled, and nothing hangs or crashes.
TEST(StopToken, StopRacingCompletion) {
  spindle::runtime rt({.workers = 2});
  int values = 0, cancelled = 0;
  for (int round = 0; round < 200; ++round) {
    spindle::channel<int> ch(1);
    std::stop_source source;
    std::atomic<bool> started{false};
    auto handle = rt.spawn(spawns_stoppable_child(&ch, source.get_token(), &started));
    ASSERT_TRUE(eventually([&] { return started.load(); }));
    ASSERT_TRUE(ch.try_send(int(round)));
    source.request_stop();
    try {
      EXPECT_EQ(handle.join(), round);
      ++values;
    } catch (const spindle::task_cancelled&) {
      ++cancelled;
    }
  }
  EXPECT_EQ(values + cancelled, 200);
}

}  // namespace
