// Typed call/cast (call.hpp): the reply type comes from the request, checked at compile time;
// calls from tasks and plain threads, deadlines and timeouts, an unanswered call, a halted
// actor, and ask() next to it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;
using spindle::actor_context;
using spindle::actor_ref;
using spindle::call_message;
using spindle::runtime;
using spindle::spawn_actor;

struct deposit {
  int amount;
};
struct balance {
  using reply = int;
};
struct owner_name {
  using reply = std::string;
};
struct ignored_question {  // the actor keeps these unanswered
  using reply = int;
};
struct legacy_get {  // the ask() style, next to calls
  spindle::reply_to<int> reply;
};
using account_message = std::variant<deposit, call_message<balance>, call_message<owner_name>,
                                     call_message<ignored_question>, legacy_get>;

static_assert(spindle::call_request<balance>);
static_assert(!spindle::call_request<deposit>);
static_assert(std::is_same_v<call_message<owner_name>::reply_type, std::string>);

struct account {
  using message_type = account_message;
  int total = 0;
  std::vector<call_message<ignored_question>> kept;  // answered never (dropped on halt)
  void receive(message_type& m, actor_context<message_type>&) {
    if (auto* d = std::get_if<deposit>(&m)) {
      total += d->amount;
    } else if (auto* b = std::get_if<call_message<balance>>(&m)) {
      b->reply_with([&](const balance&) { return total; });
    } else if (auto* n = std::get_if<call_message<owner_name>>(&m)) {
      n->reply("ada");
    } else if (auto* q = std::get_if<call_message<ignored_question>>(&m)) {
      kept.push_back(std::move(*q));
    } else if (auto* l = std::get_if<legacy_get>(&m)) {
      l->reply(total);
    }
  }
};

spindle::task<int> call_balance(actor_ref<account_message> ref) {
  balance question;
  co_return co_await ref.call(question);
}

TEST(ActorCall, CallYieldsTheRequestsReplyType) {
  runtime rt({.workers = 2});
  auto ref = spawn_actor<account>(rt);
  deposit five{5};
  EXPECT_EQ(ref.cast(five), spindle::send_result::queued);
  EXPECT_EQ(rt.block_on(call_balance(ref)), 5);
  owner_name who;
  auto name = ref.call(who);
  static_assert(std::is_same_v<decltype(name), spindle::oneshot_receiver<std::string>>);
  EXPECT_EQ(name.blocking_receive(), "ada");  // a plain thread waits without a task
}

TEST(ActorCall, AskStillWorksNextToCalls) {
  runtime rt({.workers = 1});
  auto ref = spawn_actor<account>(rt);
  ref.cast(deposit{3});
  EXPECT_EQ(rt.block_on(ref.ask<int>([](spindle::reply_to<int> r) { return legacy_get{std::move(r)}; })), 3);
}

TEST(ActorCall, CallsFromManyThreadsEachGetTheirAnswer) {
  runtime rt({.workers = 2});
  auto ref = spawn_actor<account>(rt);
  std::vector<std::thread> callers;
  std::atomic<int> answered{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        ref.cast(deposit{1});
        balance question;
        if (ref.call(question).blocking_receive() >= 1) answered.fetch_add(1);
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(answered.load(), 800);
  balance question;
  EXPECT_EQ(ref.call(question).blocking_receive(), 800);
}

spindle::task<int> call_with_timeout(actor_ref<account_message> ref, spindle::clock_duration timeout) {
  ignored_question question;
  co_return co_await ref.call(question, {.timeout = timeout});
}

spindle::task<int> balance_with_deadline(actor_ref<account_message> ref) {
  balance question;
  co_return co_await ref.call(question, {.deadline = spindle::now() + 10s});
}

TEST(ActorCall, CallPastItsTimeoutThrowsTimeoutError) {
  spindle::manual_clock clock(virtual_start);
  runtime rt({.workers = 2, .clock = &clock});
  auto ref = spawn_actor<account>(rt);
  auto waiting = rt.spawn(call_with_timeout(ref, 50ms));
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 1; }));
  clock.advance(50ms);
  EXPECT_THROW(join_bounded(std::move(waiting)), spindle::timeout_error);
  // The actor is fine and answers the next call; a deadline met returns the value.
  ref.cast(deposit{2});
  EXPECT_EQ(rt.block_on(balance_with_deadline(ref)), 2);
  EXPECT_EQ(armed_timers(rt), 0u);  // the deadline's timer was disarmed
}

TEST(ActorCall, UnansweredCallThrowsChannelClosedWhenTheActorHalts) {
  runtime rt({.workers = 1});
  auto ref = spawn_actor<account>(rt);
  ignored_question question;
  auto pending = ref.call(question);
  ref.stop();
  EXPECT_THROW((void)pending.blocking_receive(), spindle::channel_closed);
}

TEST(ActorCall, CallToAHaltedActorThrowsUnavailable) {
  runtime rt({.workers = 1});
  auto ref = spawn_actor<account>(rt);
  auto down = spindle::monitor_actor(ref);
  ref.stop();
  (void)down.blocking_receive();
  balance question;
  try {
    (void)ref.call(question);
    FAIL() << "no actor_unavailable";
  } catch (const spindle::actor_unavailable& e) {
    EXPECT_EQ(e.reason, spindle::send_result::halted);
  }
  actor_ref<account_message> empty;
  EXPECT_THROW((void)empty.call(question), spindle::usage_error);
}

}  // namespace
