// when_all / when_any over tasks and other awaitables: typed results, the first failure or the
// first completion ending the wait, the others cancelled and waited for before the call returns,
// the caller's cancellation while waiting, and a winner and a loser completing together.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <variant>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::task;
using namespace spindle::testing;

task<int> when_yielded_value(int value) {
  co_await spindle::yield_now();
  co_return value;
}

task<void> when_void_after_yield() { co_await spindle::yield_now(); }

task<int> when_throws_after_yield() {
  co_await spindle::yield_now();
  throw boom();
}

// Waits on `ch` until cancelled; records that it saw the cancellation before unwinding.
task<int> when_receive_noting_cancel(spindle::channel<int>* ch, std::atomic<bool>* saw_cancel) {
  try {
    std::optional<int> value = co_await ch->receive();
    co_return value.value_or(-1);
  } catch (const spindle::task_cancelled&) {
    saw_cancel->store(true);
    throw;
  }
}

task<int> when_all_mixed(spindle::channel<int>* ch) {
  int three = 3;
  auto [one, two, nothing, three_ref] =
      co_await spindle::when_all(when_yielded_value(1), ch->receive(), when_void_after_yield(),
                                 when_yielded_value(three));
  static_assert(std::is_same_v<decltype(nothing), std::monostate>);
  co_return one * 1000 + two.value_or(0) * 100 + three_ref;
}

TEST(WhenAll, TasksAndAwaitablesGiveATupleInOperandOrder) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  ASSERT_TRUE(ch.try_send(2));
  EXPECT_EQ(rt.block_on(when_all_mixed(&ch)), 1203);
  EXPECT_EQ(rt.live_tasks(), 0u);
}

task<int> when_all_failing(spindle::channel<int>* ch, std::atomic<bool>* saw_cancel) {
  try {
    (void)co_await spindle::when_all(when_receive_noting_cancel(ch, saw_cancel),
                                     when_throws_after_yield());
  } catch (const boom&) {
    // The other operand was cancelled and has unwound before when_all rethrew.
    co_return saw_cancel->load() ? 1 : 0;
  }
  co_return -1;
}

TEST(WhenAll, FirstFailureCancelsTheOthersAndWaitsForThem) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  std::atomic<bool> saw_cancel{false};
  EXPECT_EQ(rt.block_on(when_all_failing(&ch, &saw_cancel)), 1);
  EXPECT_EQ(rt.live_tasks(), 0u);
}

task<int> when_all_two_receives(spindle::channel<int>* a, spindle::channel<int>* b) {
  auto [x, y] = co_await spindle::when_all(a->receive(), b->receive());
  co_return x.value_or(0) + y.value_or(0);
}

TEST(WhenAll, CancellingTheCallerCancelsAndAwaitsEveryOperand) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> a(1), b(1);
  auto caller = rt.spawn(when_all_two_receives(&a, &b));
  ASSERT_TRUE(eventually([&] { return rt.live_tasks() == 3; }));  // the caller and two children
  caller.cancel();
  EXPECT_THROW(caller.join(), spindle::task_cancelled);
  EXPECT_EQ(rt.live_tasks(), 0u);  // the children completed before the caller did
  // Neither receive is left queued: items sent now stay in their channels.
  ASSERT_TRUE(a.try_send(1));
  ASSERT_TRUE(b.try_send(2));
  EXPECT_EQ(a.try_receive(), std::optional<int>(1));
  EXPECT_EQ(b.try_receive(), std::optional<int>(2));
}

task<std::size_t> when_any_receive_or_sleep(spindle::channel<int>* ch) {
  auto first = co_await spindle::when_any(ch->receive(), spindle::sleep_for(1ms));
  co_return first.index();
}

TEST(WhenAny, FirstCompletionWinsAndTheLoserIsCancelled) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  EXPECT_EQ(rt.block_on(when_any_receive_or_sleep(&ch)), 1u);  // nothing to receive: the sleep
  EXPECT_EQ(rt.live_tasks(), 0u);
  ASSERT_TRUE(ch.try_send(5));  // the cancelled receive left no receiver behind
  EXPECT_EQ(ch.try_receive(), std::optional<int>(5));
}

task<int> when_any_duplicate_types(spindle::channel<int>* a, spindle::channel<int>* b,
                                   std::atomic<bool>* saw_cancel) {
  std::variant<int, int> first = co_await spindle::when_any(
      when_receive_noting_cancel(a, saw_cancel), when_receive_noting_cancel(b, saw_cancel));
  // The loser was cancelled (before it ran, or while it waited: then saw_cancel is set).
  co_return int(first.index()) * 100 + (first.index() == 0 ? std::get<0>(first)
                                                           : std::get<1>(first));
}

TEST(WhenAny, IndexTellsWhichOfTheSameTypeWonAndTheLoserHasUnwound) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> a(1), b(1);
  ASSERT_TRUE(b.try_send(7));
  std::atomic<bool> saw_cancel{false};
  EXPECT_EQ(rt.block_on(when_any_duplicate_types(&a, &b, &saw_cancel)), 107);
  EXPECT_EQ(rt.live_tasks(), 0u);  // and has completed
  ASSERT_TRUE(a.try_send(1));      // leaving no receiver queued on `a`
  EXPECT_EQ(a.try_receive(), std::optional<int>(1));
}

task<int> when_any_failing(spindle::channel<int>* ch) {
  try {
    (void)co_await spindle::when_any(ch->receive(), when_throws_after_yield());
  } catch (const boom&) {
    co_return 1;
  }
  co_return 0;
}

TEST(WhenAny, TheWinnersExceptionPropagates) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  EXPECT_EQ(rt.block_on(when_any_failing(&ch)), 1);
  EXPECT_EQ(rt.live_tasks(), 0u);
}

task<int> when_any_two_receives(spindle::channel<int>* a, spindle::channel<int>* b) {
  auto first = co_await spindle::when_any(a->receive(), b->receive());
  co_return first.index() == 0 ? std::get<0>(first).value_or(-1) * 10
                               : std::get<1>(first).value_or(-1) * 10 + 1;
}

TEST(WhenAny, CancellingTheCallerCancelsAndAwaitsEveryOperand) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> a(1), b(1);
  auto caller = rt.spawn(when_any_two_receives(&a, &b));
  ASSERT_TRUE(eventually([&] { return rt.live_tasks() == 3; }));
  caller.cancel();
  EXPECT_THROW(caller.join(), spindle::task_cancelled);
  EXPECT_EQ(rt.live_tasks(), 0u);
}

// Join handles passed as lvalues: the losing join is interrupted and its handle stays usable.
task<int> when_any_joins(spindle::join_handle<int>* fast, spindle::join_handle<void>* slow) {
  auto first = co_await spindle::when_any(*slow, *fast);
  if (first.index() != 1) co_return -1;
  slow->cancel();
  try {
    co_await *slow;
  } catch (const spindle::task_cancelled&) {
    co_return std::get<1>(first);
  }
  co_return -2;
}

task<void> when_sleep_long() { co_await spindle::sleep_for(1h); }

TEST(WhenAny, LosingJoinLeavesItsHandleUsable) {
  spindle::runtime rt({.workers = 2});
  auto fast = rt.spawn(when_yielded_value(8));
  auto slow = rt.spawn(when_sleep_long());
  EXPECT_EQ(rt.block_on(when_any_joins(&fast, &slow)), 8);
}

// A winner and a loser completing at the same time on two workers: exactly one result comes
// out, matching its channel's item; the other item is still in its channel or was taken by the
// loser before its cancellation (then dropped: the documented cost); nothing is left running.
TEST(WhenAny, WinnerAndLoserCompletingTogether) {
  spindle::runtime rt({.workers = 2});
  int a_wins = 0, b_wins = 0, dropped = 0;
  for (int round = 0; round < 200; ++round) {
    spindle::channel<int> a(1), b(1);
    auto caller = rt.spawn(when_any_two_receives(&a, &b));
    ASSERT_TRUE(eventually([&] { return rt.live_tasks() == 3; }));
    ASSERT_TRUE(a.try_send(1));
    ASSERT_TRUE(b.try_send(2));
    const int got = caller.join();
    ASSERT_TRUE(got == 10 || got == 21) << got;
    if (got == 10) {
      ++a_wins;
      if (!b.try_receive().has_value()) ++dropped;
    } else {
      ++b_wins;
      if (!a.try_receive().has_value()) ++dropped;
    }
    ASSERT_TRUE(eventually([&] { return rt.live_tasks() == 0; }));
  }
  EXPECT_EQ(a_wins + b_wins, 200);
  RecordProperty("dropped", dropped);
}

}  // namespace
