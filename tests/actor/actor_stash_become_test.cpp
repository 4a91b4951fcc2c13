// The stash and become (actor_stash.hpp, actor_become.hpp; issue 17): stashed messages come back
// in order before newer ones, each once; the bound throws stash_overflow; halts destroy the stash
// (stop, crash, kill, shutdown); bounded mailboxes and diagnostics count them; become replaces the
// handler (also from inside itself, also with coroutine handlers), unbecome returns to receive,
// and the handlers go at halt. The stress test races kills against senders and stash/unstash.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "spindle/spindle.hpp"
#include "actor/ledger_stress.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::actor_context;
using spindle::actor_state;
using spindle::exit_kind;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::testing::eventually;

// Stashes every message while closed; 0 opens (and unstashes), -1 closes.
struct gatekeeper {
  using message_type = int;
  std::mutex* mutex;
  std::vector<int>* log;
  bool open = false;
  void receive(int& n, actor_context<int>& ctx) {
    if (n == 0) {
      open = true;
      ctx.unstash_all();
      return;
    }
    if (n == -1) {
      open = false;
      return;
    }
    if (!open) {
      ctx.stash(std::move(n));
      return;
    }
    std::lock_guard lock(*mutex);
    log->push_back(n);
  }
};

TEST(ActorStash, StashedMessagesComeBackInOrderBeforeNewerOnes) {
  std::mutex mutex;
  std::vector<int> log;
  runtime rt({.workers = 2});
  auto ref = spawn_actor<gatekeeper>(rt, &mutex, &log);
  for (int n = 1; n <= 5; ++n) ref.send(n);
  ref.send(0);  // opens: 1..5 come back ahead of 6..8, whenever those were taken
  for (int n = 6; n <= 8; ++n) ref.send(n);
  ref.send(-1);  // closes: 9, 10 wait in the stash
  ref.send(9);
  ref.send(10);
  ref.send(0);
  ref.send(11);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return log.size() == 11;
  }, 10s));
  std::lock_guard lock(mutex);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(log[i], i + 1) << "at " << i;
}

// Stashes each message once (the first time it sees it), and unstashes every third message:
// every message is handled exactly once, after it came back.
struct restasher {
  using message_type = int;
  std::atomic<int>* handled_sum;
  std::atomic<int>* handled_count;
  std::vector<int> seen;  // stashed once already
  void receive(int n, actor_context<int>& ctx) {
    if (std::find(seen.begin(), seen.end(), n) == seen.end()) {
      seen.push_back(n);
      ctx.stash(std::move(n));
      if (seen.size() % 3 == 0) ctx.unstash_all();
      return;
    }
    handled_sum->fetch_add(n);
    handled_count->fetch_add(1);
  }
};

TEST(ActorStash, AMessageTakenByValueIsStashedAndHandledOnce) {
  std::atomic<int> sum{0};
  std::atomic<int> count{0};
  runtime rt({.workers = 2});
  auto ref = spawn_actor<restasher>(rt, &sum, &count);
  for (int n = 1; n <= 30; ++n) ref.send(n);
  ASSERT_TRUE(eventually([&] { return count.load() == 30; }, 10s)) << count.load();
  EXPECT_EQ(sum.load(), 30 * 31 / 2);
}

// Stashes up to the bound; the next stash throws, and the message is left with the handler.
struct overflow_probe {
  using message_type = std::string;
  std::vector<std::string>* refused;
  bool catches = true;
  void receive(std::string& text, actor_context<std::string>& ctx) {
    if (!catches) {
      ctx.stash(std::move(text));
      return;
    }
    try {
      ctx.stash(std::move(text));
    } catch (const spindle::stash_overflow& e) {
      EXPECT_EQ(e.capacity, 2u);
      refused->push_back(text);  // not moved from: still the message
    }
  }
};

TEST(ActorStash, OverflowThrowsAndLeavesTheMessageWithTheHandler) {
  runtime rt({.workers = 1});
  std::vector<std::string> refused;
  spindle::spawn_options options;
  options.stash_capacity = 2;
  auto ref = spawn_actor<overflow_probe>(rt, options, &refused);
  ref.send("a long enough text not to fit a small string 1");
  ref.send("a long enough text not to fit a small string 2");
  ref.send("a long enough text not to fit a small string 3");
  ref.stop();
  EXPECT_EQ(spindle::testing::receive_within(spindle::monitor_actor(ref)).kind, exit_kind::normal);
  ASSERT_EQ(refused.size(), 1u);  // the actor halted: its handlers are done with `refused`
  EXPECT_EQ(refused[0], "a long enough text not to fit a small string 3");
}

TEST(ActorStash, AnUncaughtOverflowCrashesTheActor) {
  runtime rt({.workers = 1});
  std::vector<std::string> refused;
  spindle::spawn_options options;
  options.stash_capacity = 2;
  auto ref = spawn_actor<overflow_probe>(rt, options, &refused, false);
  for (int i = 0; i < 3; ++i) ref.send(std::to_string(i));
  const spindle::exit_reason why = spindle::testing::receive_within(spindle::monitor_actor(ref));
  EXPECT_EQ(why.kind, exit_kind::crashed);
  EXPECT_NE(why.describe().find("stash is full"), std::string::npos) << why.describe();
}

// A message that counts its destruction (moved-from ones do not count).
struct counted_message {
  std::atomic<int>* destroyed = nullptr;
  explicit counted_message(std::atomic<int>& d) : destroyed(&d) {}
  counted_message(counted_message&& other) noexcept
      : destroyed(std::exchange(other.destroyed, nullptr)) {}
  counted_message& operator=(counted_message&& other) noexcept {
    std::swap(destroyed, other.destroyed);
    return *this;
  }
  ~counted_message() {
    if (destroyed != nullptr) destroyed->fetch_add(1);
  }
};

// Stashes everything; a message with no counter crashes it.
struct hoarder {
  using message_type = counted_message;
  void receive(counted_message& c, actor_context<counted_message>& ctx) {
    if (c.destroyed == nullptr) throw std::runtime_error("crash with a full stash");
    ctx.stash(std::move(c));
  }
};

TEST(ActorStash, AHaltDestroysTheStashWhateverItsReason) {
  for (const char* how : {"stop", "kill", "crash", "shutdown"}) {
    SCOPED_TRACE(how);
    const std::uint64_t baseline = spindle::actor_system::live_cells();
    std::atomic<int> destroyed{0};
    {
      runtime rt({.workers = 2});
      auto ref = spawn_actor<hoarder>(rt);
      for (int i = 0; i < 10; ++i) ref.send(counted_message(destroyed));
      ASSERT_TRUE(eventually([&] { return ref.cell()->stash_length.load() == 10; }, 10s));
      const std::string reason = how;
      auto down = spindle::monitor_actor(ref);
      if (reason == "stop") ref.stop();
      if (reason == "kill") ref.kill();
      if (reason == "crash") {
        counted_message poison(destroyed);
        poison.destroyed = nullptr;  // crashes the hoarder; counts nothing
        ref.send(std::move(poison));
      }
      if (reason != "shutdown") spindle::testing::receive_within(std::move(down));
    }
    EXPECT_EQ(destroyed.load(), 10);
    EXPECT_EQ(spindle::actor_system::live_cells(), baseline);
  }
}

// Bounded mailbox: stashed messages leave the bound's count, and unstashed ones are counted_message
// until handled, so the count ends at 0 (sends are accepted again).
TEST(ActorStash, ABoundedMailboxCountsUnstashedMessagesUntilHandled) {
  std::mutex mutex;
  std::vector<int> log;
  runtime rt({.workers = 1});
  spindle::spawn_options options;
  options.mailbox_capacity = 4;
  auto ref = spawn_actor<gatekeeper>(rt, options, &mutex, &log);
  // Stashed as they come: the bound counts only what is not handled yet.
  for (int n = 1; n <= 12; ++n) {
    ASSERT_TRUE(eventually([&] { return ref.send(n) == spindle::send_result::queued; }, 10s));
  }
  ASSERT_TRUE(eventually([&] { return ref.send(0) == spindle::send_result::queued; }, 10s));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return log.size() == 12;
  }, 10s));
  EXPECT_EQ(ref.cell()->queued.load(), 0u);
  for (int n = 13; n <= 16; ++n) EXPECT_EQ(ref.send(n), spindle::send_result::queued);
}

TEST(ActorStash, DiagnosticsCountStashedMessagesInTheMailboxLength) {
  std::mutex mutex;
  std::vector<int> log;
  runtime rt({.workers = 1});
  auto ref = spawn_actor<gatekeeper>(rt, &mutex, &log);
  for (int n = 1; n <= 3; ++n) ref.send(n);
  auto stashed = [&] {
    for (const spindle::actor_info& a : spindle::actors_of(rt).snapshot()) {
      if (a.id == ref.id()) return a;
    }
    return spindle::actor_info{};
  };
  ASSERT_TRUE(eventually([&] { return stashed().stashed == 3; }, 10s));
  const spindle::actor_info seen = stashed();
  if (seen.statistics) {
    EXPECT_EQ(seen.mailbox_length, 3u);
  }
  EXPECT_NE(rt.snapshot_json().find("\"stashed\":3"), std::string::npos);
  ref.send(0);
  ASSERT_TRUE(eventually(
      [&] { return stashed().stashed == 0 && stashed().mailbox_length == 0; }, 10s));
  // Handlings: 3 stashes, the 3 again, the 0.
  const std::uint64_t handlings = seen.statistics ? 7u : 0u;
  ASSERT_TRUE(eventually([&] { return stashed().messages_handled == handlings; }, 10s));
}

// An awaiting handler stashes (before and after a suspension); a later one unstashes.
struct awaiting_gatekeeper {
  using message_type = int;
  std::mutex* mutex;
  std::vector<int>* log;
  bool open = false;
  spindle::task<void> receive(int n, actor_context<int>& ctx) {
    co_await spindle::yield_now();
    if (n == 0) {
      open = true;
      ctx.unstash_all();
      co_return;
    }
    if (!open) {
      ctx.stash(std::move(n));
      co_return;
    }
    std::lock_guard lock(*mutex);
    log->push_back(n);
  }
};

TEST(ActorStash, AwaitingHandlersStashAndUnstash) {
  std::mutex mutex;
  std::vector<int> log;
  runtime rt({.workers = 2});
  auto ref = spawn_actor<awaiting_gatekeeper>(rt, &mutex, &log);
  for (int n = 1; n <= 5; ++n) ref.send(n);
  ref.send(0);
  ref.send(6);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return log.size() == 6;
  }, 10s));
  std::lock_guard lock(mutex);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(log[i], i + 1);
}

// --- become ----------------------------------------------------------------------------------

// receive logs "r<n>"; 1 becomes a handler logging "b<n>" whose 2 unbecomes.
struct switcher {
  using message_type = int;
  std::vector<std::string>* log;
  void receive(int n, actor_context<int>& ctx) {
    log->push_back("r" + std::to_string(n));
    if (n == 1) {
      ctx.become([this](int m, actor_context<int>& c) {
        log->push_back("b" + std::to_string(m));
        if (m == 2) c.unbecome();
      });
    }
  }
};

TEST(ActorBecome, BecomeReplacesTheHandlerAndUnbecomeReturnsToReceive) {
  runtime rt({.workers = 1});
  std::vector<std::string> log;
  auto ref = spawn_actor<switcher>(rt, &log);
  for (int n : {0, 1, 5, 2, 3}) ref.send(n);
  ref.stop();
  spindle::testing::receive_within(spindle::monitor_actor(ref));
  EXPECT_EQ(log, (std::vector<std::string>{"r0", "r1", "b5", "b2", "r3"}));
}

// A state machine whose states replace each other from inside themselves: each captures a
// string it reads after the become (ASan catches a handler destroyed while it runs).
struct stepper {
  using message_type = int;
  std::vector<std::string>* log;
  static void enter(actor_context<int>& ctx, std::vector<std::string>* log, int state) {
    auto name = std::make_shared<std::string>("state " + std::to_string(state) +
                                              " with a name too long for small strings");
    ctx.become([log, name, state](int, actor_context<int>& c) {
      enter(c, log, state + 1);  // replaces this handler, which keeps running
      log->push_back(*name);
    });
  }
  void receive(int, actor_context<int>& ctx) { enter(ctx, log, 1); }
};

TEST(ActorBecome, AHandlerReplacesItselfAndRunsOn) {
  runtime rt({.workers = 1});
  std::vector<std::string> log;
  auto ref = spawn_actor<stepper>(rt, &log);
  for (int n = 0; n < 4; ++n) ref.send(n);
  ref.stop();
  spindle::testing::receive_within(spindle::monitor_actor(ref));
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[2], "state 3 with a name too long for small strings");
}

// A become handler that is a coroutine lambda with captures: its frame refers to them across
// its suspension, while it replaces itself.
TEST(ActorBecome, ACoroutineHandlerKeepsItsCapturesWhileItAwaits) {
  std::atomic<int> total{0};
  runtime rt({.workers = 2});
  auto ref = spawn_actor<int>(rt, [&total](int n, actor_context<int>& ctx) {
    auto weight = std::make_shared<int>(n);
    ctx.become([weight, &total](int m, actor_context<int>& c) -> spindle::task<void> {
      c.become([&total](int k) { total.fetch_add(1000 * k); });
      co_await spindle::sleep_for(1ms);
      co_await spindle::yield_now();
      total.fetch_add(*weight * m);  // the captures outlive the become above
    });
  });
  ref.send(3);
  ref.send(5);
  ref.send(7);
  ASSERT_TRUE(eventually([&] { return total.load() == 15 + 7000; }, 10s)) << total.load();
}

// Only the become handlers hold these: the first is retired (it replaced itself) and destroyed
// when a later message starts; the second, current, at halt.
struct become_owner {
  using message_type = int;
  std::shared_ptr<spindle::testing::destroy_flag> first;
  std::shared_ptr<spindle::testing::destroy_flag> second;
  void receive(int, actor_context<int>& ctx) {
    ctx.become([f = std::move(first), s = std::move(second)](int, actor_context<int>& c) mutable {
      c.become([s = std::move(s)](int) {});  // retires this handler while it runs
    });
  }
};

TEST(ActorBecome, RetiredHandlersGoAtTheNextMessageAndTheCurrentOneAtHalt) {
  std::atomic<bool> retired_gone{false};
  std::atomic<bool> current_gone{false};
  runtime rt({.workers = 1});
  auto ref = spawn_actor<become_owner>(rt, spindle::testing::make_destroy_flag(retired_gone),
                                       spindle::testing::make_destroy_flag(current_gone));
  ref.send(1);
  ref.send(2);
  EXPECT_FALSE(retired_gone.load());
  ref.send(3);
  ASSERT_TRUE(eventually([&] { return retired_gone.load(); }, 10s));
  EXPECT_FALSE(current_gone.load());
  // Watching before the stop: a watch placed once the actor is Halted may report before its
  // behaviour (and its handlers) are destroyed.
  auto down = spindle::monitor_actor(ref);
  ref.stop();
  spindle::testing::receive_within(std::move(down));
  EXPECT_TRUE(current_gone.load());
}

// --- stress ----------------------------------------------------------------------------------

using spindle_test_ledger::ledger_token;

// Closed: stashes; every 5th message toggles (opening unstashes); crashes on id % 997 == 0.
struct stash_stress_actor {
  using message_type = ledger_token;
  std::atomic<int>* handled;
  std::atomic<int>* unstashed;
  int seen = 0;
  bool open = false;
  void receive(ledger_token& t, actor_context<ledger_token>& ctx) {
    if (++seen % 5 == 0) {
      open = !open;
      if (open) unstashed->fetch_add(int(ctx.unstash_all()));
    }
    if (t.id % 997 == 0) throw std::runtime_error("planned crash");
    if (open || ctx.stash_size() >= 200) {
      t.consume();
      handled->fetch_add(1);
      return;
    }
    ctx.stash(std::move(t));
  }
};

TEST(ActorStashStress, SendersKillsAndCrashesRaceStashAndUnstashEveryMessageOnce) {
  std::atomic<int> handled{0};
  std::atomic<int> unstashed{0};
  const int total = spindle_test_ledger::run_ledger_stress(
      {.per_thread = spindle::testing::under_tsan ? 3000 : 20000, .killer_seed = 7},
      [&](runtime& rt) { return spawn_actor<stash_stress_actor>(rt, &handled, &unstashed); });
  EXPECT_GT(handled.load(), total / 50) << "the kills left little to handle";
  EXPECT_GT(unstashed.load(), 0);
}

}  // namespace
