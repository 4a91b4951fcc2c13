// Handlers that await (actor_await.hpp, issue 17): one message at a time while a handler
// awaits, asks and sleeps inside handlers, crashes and stops after a suspension, kills that
// wait for the handler, and runtime shutdown with handlers suspended forever.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::actor_context;
using spindle::actor_state;
using spindle::exit_kind;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::testing::eventually;

// Each message: "start n", a sleep, "end n". Handled one at a time, the log alternates.
struct sleepy_logger {
  using message_type = int;
  std::mutex* mutex;
  std::vector<std::string>* log;
  spindle::task<void> receive(int n, actor_context<int>&) {
    {
      std::lock_guard lock(*mutex);
      log->push_back("start " + std::to_string(n));
    }
    co_await spindle::sleep_for(2ms);
    co_await spindle::yield_now();
    std::lock_guard lock(*mutex);
    log->push_back("end " + std::to_string(n));
  }
};

TEST(ActorAwait, MessagesWaitWhileAHandlerAwaits) {
  runtime rt({.workers = 2});
  std::mutex mutex;
  std::vector<std::string> log;
  auto ref = spawn_actor<sleepy_logger>(rt, &mutex, &log);
  for (int n = 0; n < 5; ++n) ASSERT_EQ(ref.send(n), spindle::send_result::queued);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return log.size() == 10;
  }));
  std::lock_guard lock(mutex);
  for (int n = 0; n < 5; ++n) {
    EXPECT_EQ(log[2 * n], "start " + std::to_string(n));
    EXPECT_EQ(log[2 * n + 1], "end " + std::to_string(n));
  }
}

// A store answering asks; a front that, for each question, asks the store inside its handler
// and answers with the store's reply plus one.
struct store {
  using message_type = spindle::reply_to<int>;
  int value = 41;
  void receive(spindle::reply_to<int>& reply) { reply(value); }
};
struct front {
  using message_type = spindle::reply_to<int>;
  spindle::actor_ref<spindle::reply_to<int>> backend;
  spindle::task<void> receive(spindle::reply_to<int> reply, actor_context<message_type>&) {
    const int stored = co_await backend.ask<int>([](spindle::reply_to<int> r) { return r; });
    reply(stored + 1);
  }
};

TEST(ActorAwait, AHandlerAsksAnotherActorAndReplies) {
  runtime rt({.workers = 2});
  auto backend = spawn_actor<store>(rt);
  auto ref = spawn_actor<front>(rt, backend);
  for (int i = 0; i < 20; ++i) {
    const int answer =
        rt.block_on(ref.ask<int>([](spindle::reply_to<int> r) { return r; }));
    EXPECT_EQ(answer, 42);
  }
}

// Throws after its first suspension on a negative message.
struct crashes_later {
  using message_type = int;
  std::atomic<int>* handled;
  spindle::task<void> receive(int n) {
    co_await spindle::yield_now();
    if (n < 0) throw std::runtime_error("crashed after a suspension");
    handled->fetch_add(1);
  }
};

TEST(ActorAwait, AnExceptionAfterASuspensionCrashesTheActor) {
  runtime rt({.workers = 2});
  std::atomic<int> handled{0};
  auto ref = spawn_actor<crashes_later>(rt, &handled);
  auto down = spindle::monitor_actor(ref);
  ref.send(1);
  ref.send(-1);
  ref.send(2);  // queued behind the crash: never handled
  const spindle::exit_reason why = down.blocking_receive();
  EXPECT_EQ(why.kind, exit_kind::crashed);
  ASSERT_TRUE(why.error);
  EXPECT_NE(why.describe().find("crashed after a suspension"), std::string::npos) << why.describe();
  EXPECT_EQ(handled.load(), 1);
  EXPECT_EQ(ref.send(3), spindle::send_result::halted);
}

// Stops itself after a suspension on message 0; later messages are not handled.
struct stops_later {
  using message_type = int;
  std::atomic<int>* handled;
  spindle::task<void> receive(int n, actor_context<int>& ctx) {
    co_await spindle::yield_now();
    handled->fetch_add(1);
    if (n == 0) ctx.stop();
  }
};

TEST(ActorAwait, StopInAnAwaitingHandlerHaltsWhenItEnds) {
  runtime rt({.workers = 1});
  std::atomic<int> handled{0};
  auto ref = spawn_actor<stops_later>(rt, &handled);
  auto down = spindle::monitor_actor(ref);
  ref.send(0);
  ref.send(1);
  EXPECT_EQ(down.blocking_receive().kind, exit_kind::normal);
  EXPECT_EQ(handled.load(), 1);
}

// Waits for an event in its handler.
struct waits_for_event {
  using message_type = int;
  spindle::event* go;
  std::atomic<int>* handled;
  std::atomic<bool>* stopped;
  spindle::task<void> receive(int) {
    co_await go->wait();
    handled->fetch_add(1);
  }
  void on_stop(const spindle::exit_reason&) { stopped->store(true); }
};

// A kill cancels the handler in progress (its await throws task_cancelled) and halts the actor,
// killed, before anything queued. Before, it waited for the handler to end: a child stuck in a
// handler hung its supervisor's stop past the stop timeout (the attack on the installed package).
TEST(ActorAwait, AKillCancelsTheHandlerAndNothingQueuedIsHandled) {
  runtime rt({.workers = 2});
  spindle::event never;
  std::atomic<int> handled{0};
  std::atomic<bool> stopped{false};
  auto ref = spawn_actor<waits_for_event>(rt, &never, &handled, &stopped);
  auto down = spindle::monitor_actor(ref);
  ref.send(1);
  ref.send(2);
  // The handler is suspended on the event: the actor stays Running, the next message waits.
  ASSERT_TRUE(eventually([&] { return ref.state() == actor_state::running; }));
  ref.kill();
  EXPECT_EQ(down.blocking_receive().kind, exit_kind::killed);
  EXPECT_EQ(handled.load(), 0);  // the handler unwound at its await; message 2 never handled
  EXPECT_TRUE(stopped.load());
}

// A supervisor stopping a child whose handler never ends kills it after the stop timeout
// (supervisor.hpp: "one child that never stops cannot hang the supervisor"); before, the kill
// waited for the handler and the supervisor never halted.
TEST(ActorAwait, ASupervisorStopsAChildStuckInAHandler) {
  runtime rt({.workers = 2});
  spindle::event never;
  std::atomic<int> handled{0};
  std::atomic<bool> stopped{false};
  spindle::actor_ref<int> child;
  std::atomic<bool> started{false};
  spindle::supervisor_spec spec;
  spec.children.push_back({.name = "stuck",
                           .stop_timeout = std::chrono::milliseconds(50),
                           .start = [&](const spindle::spawn_options& o) {
                             child = spawn_actor<waits_for_event>(rt, o, &never, &handled, &stopped);
                             started = true;
                             return spindle::actor_handle(child);
                           }});
  auto supervisor = spindle::spawn_supervisor(rt, std::move(spec));
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  child.send(1);
  ASSERT_TRUE(eventually([&] { return child.state() == actor_state::running; }));
  auto down = spindle::monitor_actor(supervisor);
  supervisor.stop();
  ASSERT_TRUE(eventually([&] { return supervisor.state() == actor_state::halted; }, 10s))
      << "the supervisor did not halt: its stuck child was never killed";
  EXPECT_EQ(child.state(), actor_state::halted);
  EXPECT_TRUE(stopped.load());
}

// A function actor whose function returns task<void> awaits like a behaviour's receive (it was
// silently never run: the lazy task was dropped).
TEST(ActorAwait, AFunctionActorReturningATaskAwaits) {
  runtime rt({.workers = 2});
  std::atomic<int> handled{0};
  auto ref = spawn_actor<int>(rt, [&handled](int& n) -> spindle::task<void> {
    co_await spindle::yield_now();
    handled.fetch_add(n);
  });
  for (int i = 1; i <= 10; ++i) ref.send(i);
  ASSERT_TRUE(eventually([&] { return handled.load() == 55; }, 10s)) << handled.load();
}

TEST(ActorAwait, ShutdownWithAHandlerSuspendedForeverFreesEverything) {
  const std::uint64_t baseline = spindle::actor_system::live_cells();
  std::atomic<int> handled{0};
  std::atomic<bool> stopped{false};
  spindle::event never;
  {
    runtime rt({.workers = 2});
    auto ref = spawn_actor<waits_for_event>(rt, &never, &handled, &stopped);
    auto down = spindle::monitor_actor(ref);
    for (int i = 0; i < 3; ++i) ref.send(i);
    ASSERT_TRUE(eventually([&] { return ref.state() == actor_state::running; }));
  }  // the runtime goes with the handler suspended and two messages queued
  EXPECT_EQ(handled.load(), 0);
  EXPECT_TRUE(stopped.load());
  EXPECT_EQ(spindle::actor_system::live_cells(), baseline);
}

// Counts in a plain (non-atomic) field: two handlers of one actor at once would race (TSan)
// and `inside` would catch them.
struct counting_awaiter {
  using message_type = int;
  std::atomic<int>* overlaps;
  std::atomic<long>* total;
  long count = 0;
  bool inside = false;
  spindle::task<void> receive(int) {
    if (inside) overlaps->fetch_add(1);
    inside = true;
    co_await spindle::yield_now();
    ++count;
    inside = false;
    total->fetch_add(1);
  }
};

TEST(ActorAwait, FourThreadsSendingToAwaitingActorsEveryMessageOnceOneAtATime) {
  runtime rt({.workers = 2});
  std::atomic<int> overlaps{0};
  std::atomic<long> total{0};
  std::vector<spindle::actor_ref<int>> refs;
  for (int i = 0; i < 8; ++i) refs.push_back(spawn_actor<counting_awaiter>(rt, &overlaps, &total));
  constexpr int per_thread = 5000;
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) refs[(i + t) % refs.size()].send(i);
    });
  }
  for (auto& s : senders) s.join();
  ASSERT_TRUE(eventually([&] { return total.load() == 4L * per_thread; })) << total.load();
  EXPECT_EQ(overlaps.load(), 0);
}

// A handler suspended in its await shows in a snapshot as the actor's: a task named
// "actor#N handler", waiting on what it awaits (warnings about it say so too).
struct channel_waiter {
  using message_type = int;
  spindle::channel<int>* orders;
  spindle::task<void> receive(int, actor_context<int>&) { (void)co_await orders->receive(); }
};

TEST(ActorAwait, ASuspendedHandlerIsNamedAfterItsActorInSnapshots) {
  runtime rt({.workers = 2});
  spindle::channel<int> orders(1);
  auto ref = spawn_actor<channel_waiter>(rt, &orders);
  ref.send(1);
  const std::string name = "actor#" + std::to_string(ref.id()) + " handler";
  ASSERT_TRUE(eventually([&] {
    const spindle::runtime_snapshot snap = rt.snapshot();
    const spindle::task_info* t = snap.find_task(name);
    return t != nullptr && t->state == spindle::task_state::suspended &&
           t->waiting_on.kind == spindle::wait_kind::channel_receive;
  })) << "no suspended task named " << name;
  orders.close();
}

}  // namespace
