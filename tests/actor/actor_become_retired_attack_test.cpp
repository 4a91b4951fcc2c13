// Attack (issue 17, become): replaced handlers are retired and only destroyed when a message is
// handled by a become handler with no handler in flight. Two shapes never reach that point, so
// the retired handlers (and their captures) pile up for the actor's whole life:
//   - become(h) followed by unbecome() in the same receive (h never handles anything);
//   - an interleaving actor that always has a handler in flight, whose become handler replaces
//     itself on every message.
// "Replace, not a stack" (actor_become.hpp) promises neither grows with the messages handled.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "spindle/spindle.hpp"
#include "actor/live_copies.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::actor_context;
using spindle::testing::eventually;

using retired_capture = spindle::testing::live_copies;

struct become_then_unbecome {
  using message_type = int;
  std::atomic<int>* handled;
  void receive(int&, actor_context<int>& ctx) {
    retired_capture capture;
    ctx.become([capture](int&) {});
    ctx.unbecome();
    handled->fetch_add(1);
  }
};

TEST(ActorBecomeRetiredAttack, BecomeThenUnbecomeInOneReceiveKeepsNoHandlerPerMessage) {
  retired_capture::alive.store(0);
  std::atomic<int> handled{0};
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<become_then_unbecome>(rt, &handled);
  constexpr int messages = 1000;
  for (int i = 0; i < messages; ++i) ref.send(i);
  ASSERT_TRUE(eventually([&] { return handled.load() == messages; }, 10s));
  // At most a couple of handlers kept, not one per message.
  EXPECT_LE(retired_capture::alive.load(), 2) << "retired handlers alive after " << messages
                                               << " messages";
}

struct self_replacing_handler {
  std::atomic<int>* handled;
  retired_capture capture;
  void operator()(int&, actor_context<int>& ctx) {
    handled->fetch_add(1);
    ctx.become(self_replacing_handler{handled, {}});
  }
};

struct interleaving_with_one_handler_parked {
  using message_type = int;
  static constexpr bool interleaves = true;
  std::atomic<int>* handled;
  spindle::task<void> receive(int& n, actor_context<int>& ctx) {
    // The first message installs the self-replacing handler and stays in flight (until halt).
    ctx.become(self_replacing_handler{handled, {}});
    if (n == -1) co_await spindle::sleep_for(1h);
  }
};

// Retired handlers were freed only with no handler of the actor in flight, so an interleaving
// actor that always had one (here parked for an hour) kept every handler it retired: 1,000 after
// 1,000 messages. Each handler now counts its own coroutines in flight (actor_become.hpp).
TEST(ActorBecomeRetiredAttack, InterleavingActorWithAHandlerInFlightKeepsNoHandlerPerMessage) {
  retired_capture::alive.store(0);
  std::atomic<int> handled{0};
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<interleaving_with_one_handler_parked>(rt, &handled);
  ref.send(-1);
  constexpr int messages = 1000;
  for (int i = 0; i < messages; ++i) ref.send(i);
  ASSERT_TRUE(eventually([&] { return handled.load() == messages; }, 10s));
  // The last handler counts before it replaces itself: seen at once, it may still be inside its
  // become (itself, its replacement and the temporary it was made from: 3, seen 2 runs in 15
  // under ThreadSanitizer). A leak keeps ~1000, so a bounded wait for the call to end is enough.
  EXPECT_TRUE(eventually([&] { return retired_capture::alive.load() <= 2; }, 10s))
      << "retired handlers alive after " << messages << " messages: "
      << retired_capture::alive.load();
}

// An awaiting handler that replaces itself is retired while its coroutine is suspended: it must
// stay alive until that coroutine ends (its frame refers to the handler's members), and go then.
// Interleaving, so many of its coroutines are suspended at once, each in a different handler.
struct awaiting_self_replacing_handler {
  std::atomic<int>* finished;
  retired_capture capture;
  int canary = 0x5eed;
  spindle::task<void> operator()(int&, actor_context<int>& ctx) {
    ctx.become(awaiting_self_replacing_handler{finished, {}});
    co_await spindle::sleep_for(2ms);
    EXPECT_EQ(canary, 0x5eed) << "a retired handler was destroyed while its coroutine ran";
    finished->fetch_add(1);
  }
};

template <bool Interleaves>
struct installs_awaiting_handler {
  using message_type = int;
  static constexpr bool interleaves = Interleaves;
  std::atomic<int>* finished;
  void receive(int&, actor_context<int>& ctx) {
    ctx.become(awaiting_self_replacing_handler{finished, {}});
    finished->fetch_add(1);
  }
};

template <bool Interleaves>
void check_awaiting_handlers_replacing_themselves() {
  retired_capture::alive.store(0);
  std::atomic<int> finished{0};
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<installs_awaiting_handler<Interleaves>>(rt, &finished);
  constexpr int messages = 300;
  for (int i = 0; i < messages; ++i) ref.send(i);
  ASSERT_TRUE(eventually([&] { return finished.load() == messages; }, 20s));
  // One more message: its handling starts with every earlier coroutine ended.
  ref.send(0);
  ASSERT_TRUE(eventually([&] { return finished.load() == messages + 1; }, 10s));
  EXPECT_LE(retired_capture::alive.load(), 3) << "retired handlers alive after " << messages
                                              << " messages";
}

TEST(ActorBecomeRetiredAttack, AwaitingHandlerThatReplacesItselfLivesUntilItsCoroutineEnds) {
  check_awaiting_handlers_replacing_themselves<false>();
}

TEST(ActorBecomeRetiredAttack, InterleavedAwaitingHandlersThatReplaceThemselvesLiveUntilTheyEnd) {
  check_awaiting_handlers_replacing_themselves<true>();
}

}  // namespace
