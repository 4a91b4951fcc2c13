// Attack C (issue 17): a hostile user of become / stash / interleaving and of spawns racing a
// shutdown, from outside the library. Each test here is a defect the attack found (shown failing
// before its fix), or a race it probed that holds and is worth keeping.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::actor_context;
using spindle::testing::eventually;

// A capture that counts its live copies.
struct attack_c_capture {
  static inline std::atomic<long> alive{0};
  attack_c_capture() { alive.fetch_add(1); }
  attack_c_capture(const attack_c_capture&) { alive.fetch_add(1); }
  attack_c_capture(attack_c_capture&&) noexcept { alive.fetch_add(1); }
  ~attack_c_capture() { alive.fetch_sub(1); }
};

// A receive that awaits (returns task<void>) and installs then removes a handler in one step.
// The handler never handles anything, so it has ended at once; f16b479 freed such handlers
// after a synchronous receive only: with an awaiting receive they stayed retired for the actor's
// life, one per message (1000 alive after 1000 messages, interleaving or not).
template <bool Interleaves>
struct awaiting_receive_become_then_unbecome {
  using message_type = int;
  static constexpr bool interleaves = Interleaves;
  std::atomic<int>* handled;
  spindle::task<void> receive(int& n, actor_context<int>& ctx) {
    attack_c_capture capture;
    ctx.become([capture](int&) {});
    ctx.unbecome();
    if (n < 0) co_await spindle::yield_now();
    handled->fetch_add(1);
  }
};

template <bool Interleaves>
void check_awaiting_receive_keeps_no_handler_per_message() {
  attack_c_capture::alive.store(0);
  std::atomic<int> handled{0};
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<awaiting_receive_become_then_unbecome<Interleaves>>(rt, &handled);
  constexpr int messages = 1000;
  for (int i = 0; i < messages; ++i) ref.send(i % 2 == 0 ? i : -i);
  ASSERT_TRUE(eventually([&] { return handled.load() == messages; }, 20s));
  EXPECT_LE(attack_c_capture::alive.load(), 2) << "retired handlers alive after " << messages
                                               << " messages";
}

TEST(ActorAttackC, AwaitingReceiveThatBecomesThenUnbecomesKeepsNoHandlerPerMessage) {
  check_awaiting_receive_keeps_no_handler_per_message<false>();
}

TEST(ActorAttackC, InterleavingReceiveThatBecomesThenUnbecomesKeepsNoHandlerPerMessage) {
  check_awaiting_receive_keeps_no_handler_per_message<true>();
}

// An interleaving actor whose become handler replaces itself and then awaits for long: each
// retired handler stays (its coroutine is in flight), as it must. But each message's handling
// then cost time in proportion to how many were parked: every become grew the retired list by
// exactly one (reserve(size + 1): a copy of the whole list), and every message swept the whole
// list for ended handlers though none had ended. 50,000 messages took 5.3 s (release), against
// 0.1 s for the same actor parking its receive's coroutines without become. Asserted as a ratio
// of the fastest of a few batches (noise only slows a batch): late batches, with tens of
// thousands parked, must cost about what early ones did (within 10x).
// EveryOther: only every other handler parks, the others end at once (so at every message a
// retired handler has ended, and a sweep that scanned the whole list was quadratic again: 100,000
// messages 3.2 s, against 0.2 s).
template <bool EveryOther>
struct attack_c_parked_handler {
  std::atomic<int>* handled;
  spindle::task<void> operator()(int& n, actor_context<int>& ctx) {
    ctx.become(attack_c_parked_handler{handled});
    handled->fetch_add(1);
    if (!EveryOther || n % 2 == 0) co_await spindle::sleep_for(1h);
  }
};

template <bool EveryOther>
struct attack_c_parker {
  using message_type = int;
  static constexpr bool interleaves = true;
  std::atomic<int>* handled;
  void receive(int&, actor_context<int>& ctx) {
    ctx.become(attack_c_parked_handler<EveryOther>{handled});
    handled->fetch_add(1);
  }
};

template <bool EveryOther>
void check_parked_handlers_do_not_make_each_message_cost_more() {
  std::atomic<int> handled{0};
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<attack_c_parker<EveryOther>>(rt, &handled);
  int sent = 0;
  const auto batch = [&](int messages) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < messages; ++i) ref.send(sent++);
    EXPECT_TRUE(eventually([&] { return handled.load() == sent; }, 60s)) << "stuck at " << sent;
    return std::chrono::steady_clock::now() - start;
  };
  constexpr int batch_size = 1000;
  const auto fastest_of_seven = [&] {
    auto fastest = batch(batch_size);
    for (int i = 0; i < 6; ++i) fastest = std::min(fastest, batch(batch_size));
    return fastest;
  };
  const auto early = fastest_of_seven();  // 0 to 7,000 messages handled
  batch(30000);
  const auto late = fastest_of_seven();  // 37,000 to 44,000 handled
  const double ratio = std::chrono::duration<double>(late).count() /
                       std::max(std::chrono::duration<double>(early).count(), 1e-6);
  // Before the fixes: 40x to 45x. Linear: about 1x; 10x leaves room for a loaded machine.
  EXPECT_LT(ratio, 10.0) << "a batch of " << batch_size << " messages took "
                        << std::chrono::duration<double, std::milli>(early).count()
                        << " ms with few handlers parked, "
                        << std::chrono::duration<double, std::milli>(late).count()
                        << " ms with " << (EveryOther ? "18,500" : "37,000") << " parked";
}

TEST(ActorAttackC, ParkedSelfReplacingHandlersDoNotMakeEachMessageCostMore) {
  check_parked_handlers_do_not_make_each_message_cost_more<false>();
}

TEST(ActorAttackC, ParkedHandlersAmongEndedOnesDoNotMakeEachMessageCostMore) {
  check_parked_handlers_do_not_make_each_message_cost_more<true>();
}

// A monitor placed while the actor is halting (Halted published, its behaviour and its become
// handlers still being destroyed) is told at once: add_exit_callback sees Halted and delivers,
// while the halt is still in destroy_behaviour (actor_scheduler.cpp, halt: the state store comes
// before it). A monitor placed before the halt is told after the behaviour is gone. Found by the
// attack: kill, then monitor_actor(ref).blocking_receive() returned with 11,775 of an actor's
// retired handlers' captures still alive. A user who reads "down" as "its resources are released"
// (a file closed, a port free) races the destructor. Not fixed: the Halted store guards the
// mailbox's close and the senders' wakes (invariants X and W), and moving it after the
// behaviour's destruction needs its own argument. Disabled until then.
struct attack_c_slow_to_destroy {
  using message_type = int;
  std::atomic<int>* phase;  // 1: destructor entered, 2: released by the test, 3: destroyed
  ~attack_c_slow_to_destroy() {
    phase->store(1);
    eventually([&] { return phase->load() == 2; }, 10s);
    phase->store(3);
  }
  void receive(int&) {}
};

TEST(ActorAttackC, DISABLED_AMonitorPlacedWhileTheActorHaltsIsToldAfterItsBehaviourIsDestroyed) {
  std::atomic<int> phase{0};
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<attack_c_slow_to_destroy>(rt, &phase);
  ref.kill();
  ASSERT_TRUE(eventually([&] { return phase.load() == 1; }, 10s));
  auto down = spindle::monitor_actor(ref);
  // Bounded look (it should not come while the destructor runs; 1 s to see it if it does).
  const bool told_while_destroying = eventually([&] { return down.is_ready(); }, 1s);
  EXPECT_FALSE(told_while_destroying) << "told 'down' while the behaviour's destructor ran";
  phase.store(2);
  EXPECT_EQ(spindle::testing::receive_within(std::move(down)).kind, spindle::exit_kind::killed);
}

}  // namespace
