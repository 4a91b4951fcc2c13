// Liveness beside busy actors (issue 13, items 1, 2 and 8c): an actor that keeps its executor
// busy must not starve the tasks, timers and other actors there, and a CPU-hungry crowd must not
// starve an actor that is pinged, nor light actors that share an executor with heavy ones.
//
// Every busy actor runs until the test tells it to stop (a flag released on every exit path), and
// every wait is bounded (support/liveness_support.hpp): a starved probe fails the test at its
// bound instead of hanging it. The bounds are generous liveness bounds, not timings.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/liveness_support.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;
using spindle::actor_context;
using spindle::actor_ref;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::spawn_options;

// An actor that works `cost` per message and sends itself the next message until `stop` is set:
// always runnable, never charging reductions by hand.
// (Constructors rather than aggregates: clang 14 has no parenthesised aggregate initialisation.)
struct self_sending {
  using message_type = int;
  self_sending(std::atomic<bool>* stop_flag, liveness_clock::duration message_cost,
               std::atomic<std::uint64_t>* handled_count) noexcept
      : stop(stop_flag), cost(message_cost), handled(handled_count) {}
  std::atomic<bool>* stop;
  liveness_clock::duration cost;
  std::atomic<std::uint64_t>* handled;
  void receive(int, actor_context<int>& ctx) {
    busy_for(cost);
    handled->fetch_add(1, std::memory_order_relaxed);
    if (!stop->load(std::memory_order_relaxed)) ctx.self().send(0);
  }
};

// Answers every question with 42.
actor_ref<spindle::reply_to<int>> spawn_answerer(runtime& rt) {
  return spawn_actor<spindle::reply_to<int>>(rt, [](spindle::reply_to<int>& reply) { reply(42); });
}

// --- item 1: one busy actor on a 1-worker runtime --------------------------------------------

// A 1-worker runtime with one actor that sends itself a message after ~1 us of work, forever
// (until the test ends).
class BusyActorOnOneWorker : public ::testing::Test {
 protected:
  void SetUp() override {
    busy = spawn_actor<self_sending>(rt, &stop, liveness_clock::duration(1us), &handled);
    busy.send(0);
    ASSERT_TRUE(eventually([this] { return handled.load() >= 1000; }, liveness_wait))
        << "the busy actor does not run";
  }
  // The busy actor still runs after the probe succeeded: it was not stopped or stuck meanwhile.
  void expect_busy_actor_still_running() {
    EXPECT_FALSE(stop.load());
    const std::uint64_t now = handled.load();
    EXPECT_TRUE(eventually([&] { return handled.load() > now; }, liveness_wait))
        << "the busy actor stopped";
  }

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> handled{0};
  runtime rt{{.workers = 1}};
  set_on_exit stop_busy_actor{stop};  // destroyed before rt: the actor stops sending
  actor_ref<int> busy;
};

TEST_F(BusyActorOnOneWorker, AskFromAPlainThreadToAnotherActorIsAnswered) {
  auto answerer = spawn_answerer(rt);
  auto answer = rt.spawn(answerer.ask<int>([](spindle::reply_to<int> r) { return r; }));
  ASSERT_TRUE(eventually([&] { return answer.is_finished(); }, liveness_wait))
      << "an ask() to an idle actor is not answered within 3 s while one busy actor runs on the "
         "only worker";
  expect_busy_actor_still_running();
  EXPECT_EQ(answer.join(), 42);
}

spindle::task<void> sleep_one_millisecond(std::atomic<int>* stage) {
  stage->store(1);
  co_await spindle::sleep_for(1ms);
  stage->store(2);
}

TEST_F(BusyActorOnOneWorker, TaskSleepOfOneMillisecondReturns) {
  std::atomic<int> stage{0};
  auto sleeper = rt.spawn(sleep_one_millisecond(&stage));
  ASSERT_TRUE(eventually([&] { return stage.load() >= 1; }, liveness_wait))
      << "a task spawned from a plain thread does not start within 3 s beside a busy actor";
  ASSERT_TRUE(eventually([&] { return stage.load() == 2; }, liveness_wait))
      << "sleep_for(1ms) has not returned after 3 s beside a busy actor";
  expect_busy_actor_still_running();
  EXPECT_TRUE(eventually([&] { return sleeper.is_finished(); }, liveness_wait));
}

spindle::task<int> sleep_ten_seconds() {
  co_await spindle::sleep_for(10s);
  co_return 0;
}

// 1 if a 50 ms timeout around a 10 s sleep timed out, 0 if the sleep completed.
spindle::task<int> time_out_after_50ms() {
  try {
    co_return co_await spindle::with_timeout(50ms, sleep_ten_seconds());
  } catch (const spindle::timeout_error&) {
    co_return 1;
  }
}

TEST_F(BusyActorOnOneWorker, FiftyMillisecondTimeoutTimesOut) {
  auto timed = rt.spawn(time_out_after_50ms());
  ASSERT_TRUE(eventually([&] { return timed.is_finished(); }, liveness_wait))
      << "a 50 ms with_timeout is still pending after 3 s beside a busy actor";
  expect_busy_actor_still_running();
  EXPECT_EQ(timed.join(), 1);
}

// --- item 2: a pinged actor beside 100 CPU-hungry actors --------------------------------------

// Records the sequence number of the last ping it handled.
struct pinged {
  using message_type = int;
  explicit pinged(std::atomic<int>* answered_sequence) noexcept : answered(answered_sequence) {}
  std::atomic<int>* answered;
  void receive(int sequence) { answered->store(sequence, std::memory_order_release); }
};

// 100 actors spending 10 us per message (no manual charge) keep both workers busy; a light actor
// pinged from a plain thread, one ping at a time, must answer each. 20 pings within 2 s in all
// (100 ms per ping on average: generous against a quantum bounded in time, which the issue puts
// at about 1 ms; today a quantum is 1,000 messages whatever they cost, and the woken actor waits
// for a slice of up to 64 such quanta: the issue measured p50 230 ms, p99 520 ms per ping).
TEST(HungryActors, PingedActorAnswersBesideAHundredHungryActors) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> handled{0};
  std::atomic<int> answered{0};
  runtime rt({.workers = 2});
  set_on_exit stop_hungry(stop);
  std::vector<actor_ref<int>> hungry;
  for (int i = 0; i < 100; ++i) {
    hungry.push_back(spawn_actor<self_sending>(rt, &stop, liveness_clock::duration(10us), &handled));
  }
  for (auto& actor : hungry) actor.send(0);
  ASSERT_TRUE(eventually([&] { return handled.load() >= 10000; }, liveness_wait))
      << "the hungry actors do not run";
  auto light = spawn_actor<pinged>(rt, &answered);

  constexpr int pings = 20;
  const auto deadline = liveness_clock::now() + 2s;
  std::vector<double> latency_ms;
  for (int i = 1; i <= pings; ++i) {
    const auto sent = liveness_clock::now();
    light.send(i);
    if (!eventually([&] { return answered.load(std::memory_order_acquire) >= i; },
                    std::max(deadline - sent, liveness_clock::duration(0)))) {
      break;
    }
    latency_ms.push_back(std::chrono::duration<double, std::milli>(liveness_clock::now() - sent).count());
  }
  const std::uint64_t hungry_messages = handled.load();
  EXPECT_EQ(answered.load(), pings)
      << "only " << answered.load() << " of " << pings
      << " pings were answered within 2 s beside 100 hungry actors";
  EXPECT_GT(hungry_messages, 10000u);
  // Diagnostics only (tests never time performance): what each answered ping took.
  std::sort(latency_ms.begin(), latency_ms.end());
  if (!latency_ms.empty()) {
    std::printf("[pinged actor] %zu pings answered; median %.1f ms, max %.1f ms\n",
                latency_ms.size(), latency_ms[latency_ms.size() / 2], latency_ms.back());
  }
}

// --- an actor homed on an executor that runs a long fork-join -----------------------------------

// An actor homed on executor 0, which then runs a fine-grained fork-join for seconds (a task that
// occupies its worker): a ping from a plain thread is an executor message to executor 0, and
// only executor 0's wheel runs the actor. At the computation's heartbeats (service points) the
// executor, flagged in a long runnable, delivers the wake and hands the actor to executor 1,
// which serves it between its own pieces of the loop. Every ping must be answered while the
// computation still runs (before, the first one waited for the whole computation).
spindle::task<void> run_loop(freezing_loop* loop) {
  loop->run();
  co_return;
}

TEST(StuckExecutor, ActorHomedOnAForkJoinOwnersExecutorAnswersDuringTheComputation) {
  runtime rt({.workers = 2});
  freezing_loop loop;
  set_on_exit wind_down(loop.probe_done);
  std::atomic<int> answered{0};
  spawn_options on_zero;
  on_zero.executor = 0;
  auto light = spawn_actor<pinged>(rt, on_zero, &answered);
  light.send(1);
  ASSERT_TRUE(eventually([&] { return answered.load() == 1; }, liveness_wait));
  auto computation = rt.spawn_on(0, run_loop(&loop));
  ASSERT_TRUE(eventually([&] { return loop.spread_over(2); }, liveness_wait))
      << "the loop never ran on both executors";

  constexpr int pings = 5;
  bool all_during_the_computation = true;
  for (int i = 2; i <= pings + 1; ++i) {
    light.send(i);
    ASSERT_TRUE(eventually([&] { return answered.load(std::memory_order_acquire) >= i; },
                           liveness_wait))
        << "ping " << i << " was not answered";
    all_during_the_computation = all_during_the_computation && loop.busy();
  }
  loop.probe_done.store(true);
  EXPECT_TRUE(all_during_the_computation)
      << "the pings were answered only after the fork-join stopped occupying executor 0";
  join_bounded(std::move(computation));
  EXPECT_GT(spindle::actors_of(rt).scheduler(0).stats().stuck_hand_offs.load(), 0u);
}

// --- item 8c: light actors beside two pinned heavy actors --------------------------------------

// Two heavy actors (200 us per message) pinned on executor 0; six light actors (2 us per
// message), three starting beside the heavy ones, three on executor 1; all always runnable.
// Whatever the runtime does (a quantum bounded in time, migration by CPU demand), no light actor
// may be starved: over a window in which the busiest light actor handles 20,000 messages, every
// light actor handles at least a quarter of that. A fair time share gives the light actors
// beside the heavy ones 1/5 of executor 0 against 1/3 of executor 1 (0.6) even if none moves;
// today a quantum counts 1,000 messages whatever they cost, so a heavy actor's turn lasts 200 ms
// and a light actor beside it gets 1,000 messages per ~400 ms (the issue: 500 against 32,000
// messages per second), and migration, which compares actor counts, leaves some of them there.
TEST(ActorMigration, LightActorsBesidePinnedHeavyActorsAreNotStarved) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> heavy_handled{0};
  constexpr int lights = 6;
  std::vector<std::atomic<std::uint64_t>> light_handled(lights);
  runtime rt({.workers = 2});
  set_on_exit stop_all(stop);
  std::vector<actor_ref<int>> heavy, light;
  for (int i = 0; i < 2; ++i) {
    spawn_options options;
    options.executor = 0;
    options.pinned = true;
    heavy.push_back(
        spawn_actor<self_sending>(rt, options, &stop, liveness_clock::duration(200us), &heavy_handled));
  }
  for (int i = 0; i < lights; ++i) {
    spawn_options options;
    options.executor = i < lights / 2 ? 0u : 1u;
    light.push_back(spawn_actor<self_sending>(rt, options, &stop, liveness_clock::duration(2us),
                                              &light_handled[std::size_t(i)]));
  }
  for (auto& actor : heavy) actor.send(0);
  for (auto& actor : light) actor.send(0);

  auto snapshot = [&] {
    std::vector<std::uint64_t> counts;
    for (auto& c : light_handled) counts.push_back(c.load());
    return counts;
  };
  auto busiest_gained = [&](const std::vector<std::uint64_t>& since) {
    std::uint64_t most = 0;
    for (int i = 0; i < lights; ++i) {
      most = std::max(most, light_handled[std::size_t(i)].load() - since[std::size_t(i)]);
    }
    return most;
  };
  constexpr std::uint64_t window = 20000;
  // Settling: let migration (if any) happen, then measure one window.
  const std::vector<std::uint64_t> zero(lights, 0);
  ASSERT_TRUE(eventually([&] { return busiest_gained(zero) >= window; }, liveness_wait))
      << "the light actors do not run";
  const std::vector<std::uint64_t> start = snapshot();
  ASSERT_TRUE(eventually([&] { return busiest_gained(start) >= window; }, liveness_wait));
  const std::vector<std::uint64_t> end = snapshot();
  std::uint64_t least = ~std::uint64_t(0), most = 0;
  for (int i = 0; i < lights; ++i) {
    const std::uint64_t gained = end[std::size_t(i)] - start[std::size_t(i)];
    least = std::min(least, gained);
    most = std::max(most, gained);
  }
  int beside_heavy = 0;
  for (auto& actor : light) beside_heavy += actor.home_executor() == 0 ? 1 : 0;
  EXPECT_GE(least * 4, most) << "a light actor handled " << least << " messages while another "
                             << "handled " << most << "; " << beside_heavy << " of " << lights
                             << " light actors live beside the two heavy ones";
  EXPECT_GT(heavy_handled.load(), 0u);
}

}  // namespace
