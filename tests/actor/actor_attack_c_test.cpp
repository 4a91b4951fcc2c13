// Attack C (issue 17): a hostile user of become / stash / interleaving and of spawns racing a
// shutdown, from outside the library. Each test here is a defect the attack found (shown failing
// before its fix), or a race it probed that holds and is worth keeping.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

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

}  // namespace
