// Interleaving behaviours and awaiting handlers' steps (actor_await.hpp, issue 17): other
// messages are handled while a handler awaits, one step or message at a time, on the home
// executor; kills, crashes and stops cancel the handlers in flight and halt once they unwound;
// a handler's steps are charged to the actor's quantum (time and ctx.charge), interleaving or
// not. The stress test sends to many interleaving actors with handlers in flight, with kills.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
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

// A step's guard: counts the steps inside the behaviour at once (must stay 1) and checks that
// the step runs on the actor's home executor.
struct step_guard {
  std::atomic<int>& inside;
  std::atomic<int>& overlaps;
  step_guard(std::atomic<int>& in, std::atomic<int>& over, std::uint32_t home)
      : inside(in), overlaps(over) {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    const spindle::core::executor* here = spindle::core::executor::current();
    if (here == nullptr || here->index() != home) overlaps.fetch_add(1000);
  }
  ~step_guard() { inside.fetch_sub(1); }
};

// Negative messages wait for `gate` inside their handler; others are logged at once. With
// `stashes`, message 0 waits for `gate` instead, then opens and unstashes from that later step;
// the others are stashed until it opens.
struct interleaver {
  using message_type = int;
  static constexpr bool interleaves = true;
  spindle::event* gate;
  std::mutex* mutex;
  std::vector<int>* log;
  std::atomic<int>* cancelled = nullptr;
  bool stashes = false;
  bool open = false;
  spindle::task<void> receive(int n, actor_context<int>& ctx) {
    if (stashes) {
      if (n == 0) {
        co_await gate->wait();  // the others are stashed meanwhile
        open = true;
        ctx.unstash_all();  // a step outside any run
        co_return;
      }
      if (!open) {
        ctx.stash(std::move(n));
        co_return;
      }
    } else if (n < 0) {
      try {
        co_await gate->wait();
      } catch (const spindle::task_cancelled&) {
        cancelled->fetch_add(1);
        throw;
      }
    }
    std::lock_guard lock(*mutex);
    log->push_back(n);
  }
};

// The log (written under `mutex`) holds `size` messages within 10 s.
bool log_reaches(std::mutex& mutex, const std::vector<int>& log, std::size_t size) {
  return eventually([&] {
    std::lock_guard lock(mutex);
    return log.size() == size;
  }, 10s);
}

TEST(ActorInterleave, OtherMessagesAreHandledWhileAHandlerAwaits) {
  spindle::event gate;
  std::mutex mutex;
  std::vector<int> log;
  std::atomic<int> cancelled{0};
  runtime rt({.workers = 2});
  auto ref = spawn_actor<interleaver>(rt, &gate, &mutex, &log, &cancelled);
  ref.send(-1);
  ref.send(-2);
  for (int n = 1; n <= 5; ++n) ref.send(n);
  ASSERT_TRUE(log_reaches(mutex, log, 5));
  // Not parked Running while its handlers await: it goes Receiving once its run ends.
  EXPECT_TRUE(eventually([&] { return ref.state() == actor_state::receiving; }, 10s));
  gate.set();
  ASSERT_TRUE(log_reaches(mutex, log, 7));
  std::lock_guard lock(mutex);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3, 4, 5, -1, -2}));
}

TEST(ActorInterleave, AKillCancelsEveryHandlerInFlightAndHaltsAfterThem) {
  spindle::event gate;
  std::mutex mutex;
  std::vector<int> log;
  std::atomic<int> cancelled{0};
  runtime rt({.workers = 2});
  auto ref = spawn_actor<interleaver>(rt, &gate, &mutex, &log, &cancelled);
  for (int n = 1; n <= 10; ++n) ref.send(-n);
  ref.send(1);
  ASSERT_TRUE(log_reaches(mutex, log, 1));
  auto down = spindle::monitor_actor(ref);
  ref.kill();
  EXPECT_EQ(spindle::testing::receive_within(std::move(down)).kind, exit_kind::killed);
  EXPECT_EQ(cancelled.load(), 10);  // all unwound before the halt (their frames refer to it)
}

// Message 0 stops (or crashes, per `crash`) in its first step while the others await.
struct stopper {
  using message_type = int;
  static constexpr bool interleaves = true;
  spindle::event* gate;
  std::atomic<int>* unwound;
  std::atomic<bool>* stopped_with_all_unwound;
  bool crash = false;
  int expected = 0;
  spindle::task<void> receive(int n, actor_context<int>& ctx) {
    if (n == 0) {
      if (crash) throw std::runtime_error("first crash");
      ctx.stop();
      co_return;
    }
    try {
      co_await gate->wait();
    } catch (...) {
      unwound->fetch_add(1);
      if (n == 1) throw std::runtime_error("second crash: not the reason");
      throw;
    }
  }
  void on_stop(const spindle::exit_reason&) {
    stopped_with_all_unwound->store(unwound->load() == expected);
  }
};

TEST(ActorInterleave, AStopOrACrashWaitsForTheCancelledHandlers) {
  for (const bool crash : {false, true}) {
    SCOPED_TRACE(crash ? "crash" : "stop");
    runtime rt({.workers = 2});
    spindle::event never;
    std::atomic<int> unwound{0};
    std::atomic<bool> all_unwound{false};
    auto ref = spawn_actor<stopper>(rt, &never, &unwound, &all_unwound, crash, 5);
    auto down = spindle::monitor_actor(ref);
    for (int n = 1; n <= 5; ++n) ref.send(n);
    ref.send(0);
    ref.send(7);  // after the halt began: never handled
    const spindle::exit_reason why = spindle::testing::receive_within(std::move(down));
    EXPECT_EQ(why.kind, crash ? exit_kind::crashed : exit_kind::normal);
    if (crash) {
      EXPECT_NE(why.describe().find("first crash"), std::string::npos) << why.describe();
    }
    EXPECT_EQ(unwound.load(), 5);
    EXPECT_TRUE(all_unwound.load());
  }
}

// Shutdown with interleaved handlers suspended forever: frames, envelopes and cells all go.
TEST(ActorInterleave, ShutdownWithHandlersInFlightFreesEverything) {
  const std::uint64_t baseline = spindle::actor_system::live_cells();
  std::atomic<int> cancelled{0};
  {
    runtime rt({.workers = 2});
    spindle::event never;
    std::mutex mutex;
    std::vector<int> log;
    auto ref = spawn_actor<interleaver>(rt, &never, &mutex, &log, &cancelled);
    for (int n = 1; n <= 5; ++n) ref.send(-n);
    ref.send(1);
    ASSERT_TRUE(log_reaches(mutex, log, 1));
  }
  EXPECT_EQ(spindle::actor_system::live_cells(), baseline);
}

// Each message: a step, an await woken from elsewhere (a timer, another actor's reply, a
// yield), another step; the guard checks one step at a time, at home.
struct guarded {
  using message_type = int;
  static constexpr bool interleaves = true;
  std::atomic<int>* inside;
  std::atomic<int>* overlaps;
  std::atomic<int>* handled;
  std::atomic<int>* max_in_flight;
  spindle::actor_ref<spindle::reply_to<int>> echo;
  int in_flight = 0;  // plain: only ever touched one step at a time
  spindle::task<void> receive(int n, actor_context<int>& ctx) {
    {
      step_guard g(*inside, *overlaps, ctx.executor_index());
      ++in_flight;
      spindle::testing::raise_max(*max_in_flight, in_flight);
    }
    switch (n % 3) {
      case 0: co_await spindle::sleep_for(std::chrono::microseconds(50 + n % 200)); break;
      case 1: co_await echo.ask<int>([](spindle::reply_to<int> r) { return r; }); break;
      default: co_await spindle::yield_now(); break;
    }
    step_guard g(*inside, *overlaps, ctx.executor_index());
    --in_flight;
    handled->fetch_add(1);
  }
};

struct echo_actor {
  using message_type = spindle::reply_to<int>;
  void receive(spindle::reply_to<int>& r) { r(1); }
};

TEST(ActorInterleave, StepsRunOneAtATimeOnTheHomeExecutor) {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> handled{0};
  std::atomic<int> max_in_flight{0};
  runtime rt({.workers = 4});
  auto echo = spawn_actor<echo_actor>(rt);
  auto ref = spawn_actor<guarded>(rt, &inside, &overlaps, &handled, &max_in_flight, echo);
  for (int n = 0; n < 300; ++n) ref.send(n);
  ASSERT_TRUE(eventually([&] { return handled.load() == 300; }, 20s)) << handled.load();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(max_in_flight.load(), 1);  // it did interleave
}

// Not interleaving: the steps of an awaiting handler run at home too (woken by a plain thread).
struct home_checker {
  using message_type = int;
  spindle::event* gate;
  std::atomic<int>* away;
  std::atomic<int>* handled;
  spindle::task<void> receive(int, actor_context<int>& ctx) {
    co_await gate->wait();
    if (spindle::core::executor::current()->index() != ctx.executor_index()) away->fetch_add(1);
    co_await spindle::sleep_for(100us);
    if (spindle::core::executor::current()->index() != ctx.executor_index()) away->fetch_add(1);
    handled->fetch_add(1);
  }
};

TEST(ActorAwaitSteps, StepsOfAnAwaitingHandlerRunOnTheHomeExecutor) {
  std::atomic<int> away{0};
  std::atomic<int> handled{0};
  runtime rt({.workers = 4});
  for (int round = 0; round < 20; ++round) {
    spindle::event gate;
    auto ref = spawn_actor<home_checker>(rt, &gate, &away, &handled);
    ref.send(round);
    ASSERT_TRUE(eventually([&] { return ref.state() == actor_state::running; }, 10s));
    gate.set();  // from this plain thread: the wake lands on some executor
    ASSERT_TRUE(eventually([&] { return handled.load() == round + 1; }, 10s));
  }
  EXPECT_EQ(away.load(), 0);
}

// A handler's step that computes for `spin` and charges `charge` counts against the quantum:
// the next step sees it (before, both waited for the next message's run).
template <bool Interleaves>
struct charged_handler {
  using message_type = int;
  static constexpr bool interleaves = Interleaves;
  std::atomic<int>* left_after_charge;
  std::atomic<int>* left_after_spin;
  std::atomic<int>* quantum_before;
  spindle::task<void> receive(int, actor_context<int>& ctx) {
    co_await spindle::yield_now();
    quantum_before->store(ctx.reductions_left());
    ctx.charge(100);
    co_await spindle::yield_now();
    left_after_charge->store(ctx.reductions_left());
    // Three time slices, as the coarse clock (which the gate reads) sees them: a monitor kept
    // off the CPU delays its ticks, not this step's charge.
    const spindle::core::runtime_core& core = ctx.system().core();
    const std::uint64_t from = core.coarse_now_ns();
    while (core.coarse_now_ns() - from < std::uint64_t(60'000'000)) {
    }
    co_await spindle::yield_now();
    left_after_spin->store(ctx.reductions_left());
  }
};

template <bool Interleaves>
void check_steps_are_charged() {
  // A 20 ms slice: the short steps' coarse readings (5 ms ticks) do not add up to it, the spin
  // of 60 ms does.
  std::atomic<int> after_charge{-1};
  std::atomic<int> after_spin{-1};
  std::atomic<int> before{-1};
  runtime rt({.workers = 2, .service_interval = 20ms, .long_runnable_after = 500ms});
  auto ref = spawn_actor<charged_handler<Interleaves>>(rt, &after_charge, &after_spin, &before);
  ref.send(1);
  ASSERT_TRUE(eventually([&] { return after_spin.load() != -1; }, 10s));
  EXPECT_GT(before.load(), 100);
  EXPECT_EQ(after_charge.load(), before.load() - 100);
  EXPECT_LE(after_spin.load(), 0);  // the time slice is spent: it waits a turn at its next run
}

TEST(ActorAwaitSteps, AStepsTimeAndChargeCountAgainstTheQuantum) {
  check_steps_are_charged<false>();
}
TEST(ActorInterleave, AStepsTimeAndChargeCountAgainstTheQuantum) {
  check_steps_are_charged<true>();
}

// The interleaver with `stashes`: handlers stash while message 0's unstashes from a later step;
// the unstash happens outside any run, and the actor, Receiving, must still be woken for them.
TEST(ActorInterleave, AnUnstashInALaterStepWakesTheActor) {
  spindle::event gate;
  std::mutex mutex;
  std::vector<int> log;
  runtime rt({.workers = 2});
  auto ref = spawn_actor<interleaver>(rt, &gate, &mutex, &log, nullptr, true);
  ref.send(0);
  for (int n = 1; n <= 4; ++n) ref.send(n);
  ASSERT_TRUE(eventually([&] { return ref.cell()->stash_length.load() == 4; }, 10s));
  ASSERT_TRUE(eventually([&] { return ref.state() == actor_state::receiving; }, 10s));
  gate.set();
  ASSERT_TRUE(log_reaches(mutex, log, 4));
  std::lock_guard lock(mutex);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3, 4}));
}

// --- stress ----------------------------------------------------------------------------------

using spindle_test_ledger::ledger_token;

struct interleave_stress_actor {
  using message_type = ledger_token;
  static constexpr bool interleaves = true;
  std::atomic<int>* overlaps;
  std::atomic<int>* max_in_flight;
  std::atomic<int>* handled;
  std::atomic<int> inside{0};  // this actor's steps in progress
  int in_flight = 0;
  spindle::task<void> receive(ledger_token& t, actor_context<ledger_token>& ctx) {
    {
      step_guard g(inside, *overlaps, ctx.executor_index());
      spindle::testing::raise_max(*max_in_flight, ++in_flight);
    }
    struct count_out {
      int& in_flight;
      ~count_out() { --in_flight; }
    } out{in_flight};
    if (t.id % 2 == 0) {
      co_await spindle::sleep_for(std::chrono::microseconds(t.id % 300));
    } else {
      co_await spindle::yield_now();
    }
    step_guard g(inside, *overlaps, ctx.executor_index());
    if (t.id % 1999 == 0) throw std::runtime_error("planned crash");
    t.consume();
    handled->fetch_add(1);
  }
};

TEST(ActorInterleaveStress, ManySendersManyHandlersInFlightKillsRacingEveryMessageOnce) {
  std::atomic<int> overlaps{0};
  std::atomic<int> max_in_flight{0};
  std::atomic<int> handled{0};
  const int total = spindle_test_ledger::run_ledger_stress(
      {.per_thread = spindle::testing::under_tsan ? 2000 : 15000,
       .killer_seed = 11,
       .halt_within = 30s},
      [&](runtime& rt) {
        return spawn_actor<interleave_stress_actor>(rt, &overlaps, &max_in_flight, &handled);
      });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(max_in_flight.load(), 1);
  EXPECT_GT(handled.load(), total / 50) << "the kills left little to handle";
}

}  // namespace
