// Timers to actors (actor_timers.hpp): send_after, send_interval, ctx timers, cancel, and the
// races: cancel against the fire from foreign threads, halting while a periodic timer fires,
// destroying the runtime with timers armed. Virtual time (manual_clock) where the test is about
// when; real time only with bounded waits. No test sleeps to synchronise.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;
using spindle::actor_context;
using spindle::actor_ref;
using spindle::runtime;
using spindle::spawn_actor;

struct timed_ping {
  int id = 0;
};
struct timed_work {};
struct timed_how_many {
  spindle::reply_to<int> reply;
};
using timed_message = std::variant<timed_ping, timed_work, timed_how_many>;

// Counts pings (and remembers the clock at each); answers how many.
struct ping_counter {
  using message_type = timed_message;
  spindle::clock* clock = nullptr;
  std::shared_ptr<std::atomic<int>> seen = std::make_shared<std::atomic<int>>(0);
  std::vector<spindle::clock_time>* at = nullptr;
  void receive(message_type& m, actor_context<message_type>&) {
    if (std::holds_alternative<timed_ping>(m)) {
      if (at != nullptr) at->push_back(clock->now());
      seen->fetch_add(1);
    } else if (auto* q = std::get_if<timed_how_many>(&m)) {
      q->reply(seen->load());
    }
  }
};

int pings_handled(runtime& rt, const actor_ref<timed_message>& ref) {
  return rt.block_on(ref.ask<int>([](spindle::reply_to<int> r) { return timed_how_many{std::move(r)}; }));
}

TEST(ActorTimers, SendAfterDeliversOnceAtTheDeadline) {
  spindle::manual_clock clock(virtual_start);
  runtime rt({.workers = 2, .clock = &clock});
  auto seen = std::make_shared<std::atomic<int>>(0);
  std::vector<spindle::clock_time> at;
  auto ref = spawn_actor<ping_counter>(rt, ping_counter{&clock, seen, &at});
  auto timer = spindle::send_after(ref, 10ms, timed_ping{});
  EXPECT_TRUE(timer.pending());
  EXPECT_EQ(armed_timers(rt), 1u);
  clock.advance(9ms);
  EXPECT_EQ(pings_handled(rt, ref), 0);
  EXPECT_TRUE(timer.pending());
  clock.advance(1ms);
  ASSERT_TRUE(eventually([&] { return seen->load() == 1; }));
  EXPECT_FALSE(timer.pending());
  EXPECT_FALSE(timer.cancel());  // it was sent: nothing left to prevent
  EXPECT_EQ(armed_timers(rt), 0u);
  clock.advance(100ms);
  EXPECT_EQ(pings_handled(rt, ref), 1);
  EXPECT_EQ(rt.block_on(ref.ask<int>([](spindle::reply_to<int> r) { return timed_how_many{std::move(r)}; })), 1);
  ASSERT_EQ(at.size(), 1u);
  EXPECT_EQ(at[0], virtual_start + 10ms);
}

TEST(ActorTimers, CancelBeforeTheDeadlinePreventsTheSend) {
  spindle::manual_clock clock(virtual_start);
  runtime rt({.workers = 1, .clock = &clock});
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto ref = spawn_actor<ping_counter>(rt, ping_counter{&clock, seen, nullptr});
  auto cancelled = spindle::send_after(ref, 10ms, timed_ping{});
  auto marker = spindle::send_after(ref, 11ms, timed_ping{});
  EXPECT_TRUE(cancelled.cancel());
  EXPECT_FALSE(cancelled.cancel());  // once
  EXPECT_FALSE(cancelled.pending());
  EXPECT_EQ(armed_timers(rt), 1u);
  clock.advance(20ms);
  ASSERT_TRUE(eventually([&] { return !marker.pending(); }));
  EXPECT_EQ(pings_handled(rt, ref), 1);  // the marker only
}

TEST(ActorTimers, DroppingTheHandleKeepsTheTimer) {
  spindle::manual_clock clock(virtual_start);
  runtime rt({.workers = 1, .clock = &clock});
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto ref = spawn_actor<ping_counter>(rt, ping_counter{&clock, seen, nullptr});
  (void)spindle::send_after(ref, 5ms, timed_ping{});
  EXPECT_EQ(armed_timers(rt), 1u);
  clock.advance(5ms);
  ASSERT_TRUE(eventually([&] { return seen->load() == 1; }));
}

// Ticks stay on the grid start + k * period; a late check fires once and the next tick is
// still on the grid (deadline = previous deadline + period, not now + period).
TEST(ActorTimers, SendIntervalKeepsItsPhaseAndSkipsMissedTicks) {
  spindle::manual_clock clock(virtual_start);
  runtime rt({.workers = 1, .clock = &clock});
  auto seen = std::make_shared<std::atomic<int>>(0);
  std::vector<spindle::clock_time> at;
  auto ref = spawn_actor<ping_counter>(rt, ping_counter{&clock, seen, &at});
  auto every = spindle::send_interval(ref, 10ms, timed_ping{});
  for (int k = 1; k <= 3; ++k) {
    clock.advance(10ms);
    ASSERT_TRUE(eventually([&] { return seen->load() == k; })) << "tick " << k;
  }
  clock.advance(35ms);  // now start + 65: 40, 50, 60 were missed
  ASSERT_TRUE(eventually([&] { return seen->load() == 4; }));
  clock.advance(4ms);  // start + 69: the next grid point is 70, not 65 + 10 = 75
  EXPECT_EQ(pings_handled(rt, ref), 4);
  clock.advance(1ms);  // start + 70
  ASSERT_TRUE(eventually([&] { return seen->load() == 5; }));
  EXPECT_TRUE(every.pending());
  EXPECT_TRUE(every.cancel());
  EXPECT_FALSE(every.pending());
  clock.advance(100ms);
  EXPECT_EQ(pings_handled(rt, ref), 5);
  ASSERT_EQ(at.size(), 5u);
  EXPECT_EQ(at[0], virtual_start + 10ms);
  EXPECT_EQ(at[2], virtual_start + 30ms);
  EXPECT_EQ(at[3], virtual_start + 65ms);
  EXPECT_EQ(at[4], virtual_start + 70ms);
}

// A slow actor: its mailbox holds a long backlog while virtual time runs through many periods.
// The timer fires at every timer check of the executor, but at most one tick of it is ever
// queued: the actor gets at most two ticks, not one per fire (no pile-up).
struct backlog_actor {
  using message_type = timed_message;
  spindle::manual_clock* clock;
  std::shared_ptr<std::atomic<int>> ticks;
  std::shared_ptr<std::atomic<int>> work_left;
  std::shared_ptr<std::atomic<int>> ticks_during_backlog;
  void receive(message_type& m, actor_context<message_type>&) {
    if (std::holds_alternative<timed_work>(m)) {
      clock->advance(1ms);  // the work takes virtual time: the timer comes due again and again
      work_left->fetch_sub(1);
    } else if (std::holds_alternative<timed_ping>(m)) {
      if (work_left->load() > 0) ticks_during_backlog->fetch_add(1);
      ticks->fetch_add(1);
    } else if (auto* q = std::get_if<timed_how_many>(&m)) {
      q->reply(ticks->load());
    }
  }
};

TEST(ActorTimers, SlowActorGetsTicksSkippedNotPiledUp) {
  spindle::manual_clock clock(virtual_start);
  runtime rt({.workers = 1, .clock = &clock});
  constexpr int work = 3000;
  auto ticks = std::make_shared<std::atomic<int>>(0);
  auto left = std::make_shared<std::atomic<int>>(work);
  auto during = std::make_shared<std::atomic<int>>(0);
  spindle::spawn_options options;
  options.quantum = 1;  // back to the executor (and its timer checks) after every message
  auto ref = spawn_actor<backlog_actor>(rt, options, backlog_actor{&clock, ticks, left, during});
  auto every = spindle::send_interval(ref, 2ms, timed_ping{});
  {
    // The backlog is queued before the executor can handle any of it.
    executor_blocker hold(rt);
    for (int i = 0; i < work; ++i) ref.send(timed_work{});
  }
  ASSERT_TRUE(eventually([&] { return left->load() == 0; }));
  const int total = rt.block_on(
      ref.ask<int>([](spindle::reply_to<int> r) { return timed_how_many{std::move(r)}; }));
  // 6 s of virtual time went by in 2 ms periods: 3000 periods, fired at every timer check.
  EXPECT_LE(total, 2) << "ticks piled up in the mailbox";
  EXPECT_TRUE(eventually([&] { return ticks->load() >= 1; }));  // skipped, not stopped
  EXPECT_LE(during->load(), 1);
  EXPECT_TRUE(every.cancel());
}

struct self_timing {
  using message_type = timed_message;
  explicit self_timing(std::promise<int>* finished) : done(finished) {}
  std::promise<int>* done;
  int pings = 0;
  spindle::actor_timer periodic;
  void on_start(actor_context<message_type>& ctx) {
    ctx.send_after(1ms, timed_ping{1});
    periodic = ctx.send_interval(1ms, timed_ping{2});
  }
  void receive(message_type& m, actor_context<message_type>& ctx) {
    auto* p = std::get_if<timed_ping>(&m);
    if (p == nullptr) return;
    if (p->id == 1) pings += 100;
    if (p->id == 2) ++pings;
    if (pings >= 103) {
      EXPECT_TRUE(periodic.cancel());
      done->set_value(pings);
      ctx.stop();
    }
  }
};

TEST(ActorTimers, HandlerArmsTimersToItself) {
  runtime rt({.workers = 2});
  std::promise<int> done;
  auto finished = done.get_future();
  auto ref = spawn_actor<self_timing>(rt, &done);
  ASSERT_EQ(finished.wait_for(30s), std::future_status::ready);
  EXPECT_GE(finished.get(), 103);
  ASSERT_TRUE(eventually([&] { return ref.state() == spindle::actor_state::halted; }));
  EXPECT_TRUE(eventually([&] { return armed_timers(rt) == 0; }));
}

TEST(ActorTimers, HaltingCancelsEveryTimerAimedAtTheActor) {
  spindle::manual_clock clock(virtual_start);
  runtime rt({.workers = 2, .clock = &clock});
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto ref = spawn_actor<ping_counter>(rt, ping_counter{&clock, seen, nullptr});
  auto later = spindle::send_after(ref, 1h, timed_ping{});
  auto every = spindle::send_interval(ref, 5ms, timed_ping{});
  std::thread foreign([&] { (void)spindle::send_after(ref, 1h, timed_ping{}); });
  foreign.join();
  EXPECT_EQ(armed_timers(rt), 3u);
  auto down = spindle::monitor_actor(ref);
  ref.stop();
  (void)down.blocking_receive();
  EXPECT_EQ(armed_timers(rt), 0u);  // the closer ran before the monitor was told (halt order)
  EXPECT_FALSE(later.pending());
  EXPECT_FALSE(every.pending());
  EXPECT_FALSE(later.cancel());
  EXPECT_FALSE(every.cancel());
  // Armed on a halted actor: never armed.
  auto late = spindle::send_after(ref, 1ms, timed_ping{});
  EXPECT_FALSE(late.pending());
  EXPECT_FALSE(late.cancel());
  EXPECT_EQ(armed_timers(rt), 0u);
}

TEST(ActorTimers, TimersHoldNoCellPastTheActor) {
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  {
    spindle::manual_clock clock(virtual_start);
    runtime rt({.workers = 1, .clock = &clock});
    auto seen = std::make_shared<std::atomic<int>>(0);
    auto ref = spawn_actor<ping_counter>(rt, ping_counter{&clock, seen, nullptr});
    std::vector<spindle::actor_timer> kept;
    for (int i = 0; i < 100; ++i) {
      kept.push_back(spindle::send_after(ref, std::chrono::milliseconds(i), timed_ping{i}));
      (void)spindle::send_interval(ref, std::chrono::milliseconds(i + 1), timed_ping{i});
    }
    clock.advance(50ms);
    ASSERT_TRUE(eventually([&] { return seen->load() >= 50; }));
    auto down = spindle::monitor_actor(ref);
    ref.kill();
    (void)down.blocking_receive();
    EXPECT_EQ(armed_timers(rt), 0u);
    for (auto& t : kept) EXPECT_FALSE(t.pending());
  }
  EXPECT_TRUE(eventually([&] { return spindle::actor_system::live_cells() == cells_before; }));
}

// --- races -----------------------------------------------------------------------------------

struct tally_actor {
  using message_type = timed_message;
  std::vector<std::atomic<int>>* delivered;
  void receive(message_type& m, actor_context<message_type>&) {
    if (auto* p = std::get_if<timed_ping>(&m)) (*delivered)[std::size_t(p->id)].fetch_add(1);
  }
};

// Foreign threads cancel one-shots around their deadlines: every timer is delivered xor
// cancelled (cancel() true), never both, never neither.
TEST(ActorTimers, CancelRacingTheFireIsDeliveredXorCancelled) {
  runtime rt({.workers = 2});
  constexpr int threads = 4;
  constexpr int per_thread = 400;
  std::vector<std::atomic<int>> delivered(threads * per_thread);
  std::vector<std::atomic<int>> cancelled(threads * per_thread);
  auto ref = spawn_actor<tally_actor>(rt, tally_actor{&delivered});
  std::vector<std::thread> cancellers;
  for (int t = 0; t < threads; ++t) {
    cancellers.emplace_back([&, t] {
      std::mt19937 random(std::uint32_t(t) * 7919u + 1u);
      for (int i = 0; i < per_thread; ++i) {
        const int id = t * per_thread + i;
        auto timer = spindle::send_after(ref, std::chrono::microseconds(random() % 1500),
                                         timed_ping{id});
        // Cancel at a random moment around the deadline: before, during or after the fire.
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(random() % 1500);
        while (std::chrono::steady_clock::now() < until) std::this_thread::yield();
        if (timer.cancel()) cancelled[std::size_t(id)].fetch_add(1);
      }
    });
  }
  for (auto& c : cancellers) c.join();
  int expected = 0;
  for (auto& c : cancelled) expected += c.load() == 0 ? 1 : 0;
  ASSERT_TRUE(eventually([&] {
    int sum = 0;
    for (auto& d : delivered) sum += d.load();
    return sum >= expected;
  }));
  // Drain: one more message after everything that can still be queued (all fired or cancelled).
  ASSERT_TRUE(eventually([&] { return armed_timers(rt) == 0; }));
  int both = 0, neither = 0, twice = 0;
  for (std::size_t id = 0; id < delivered.size(); ++id) {
    const int d = delivered[id].load();
    const int c = cancelled[id].load();
    if (d > 1) ++twice;
    if (d == 1 && c == 1) ++both;
    if (d == 0 && c == 0) ++neither;
  }
  EXPECT_EQ(twice, 0);
  EXPECT_EQ(both, 0);
  EXPECT_EQ(neither, 0);
}

// An actor that halts itself while its periodic timer keeps firing (1 ms real period, many
// actors, killed from a foreign thread or stopping themselves): nothing is handled after the
// halt, every timer ends cancelled, no cell is left.
struct halting_ticker {
  using message_type = timed_message;
  halting_ticker(std::shared_ptr<std::atomic<int>> counter, int stop_at)
      : after_halt(std::move(counter)), stop_after(stop_at) {}
  std::shared_ptr<std::atomic<int>> after_halt;
  std::shared_ptr<std::atomic<bool>> halted_flag = std::make_shared<std::atomic<bool>>(false);
  int ticks = 0;
  int stop_after;
  void on_start(actor_context<message_type>& ctx) { (void)ctx.send_interval(1ms, timed_ping{}); }
  void receive(message_type& m, actor_context<message_type>& ctx) {
    if (halted_flag->load()) after_halt->fetch_add(1);
    if (std::holds_alternative<timed_ping>(m) && ++ticks == stop_after) ctx.stop();
  }
  void on_stop(const spindle::exit_reason&) { halted_flag->store(true); }
};

TEST(ActorTimers, ActorHaltingWhileItsPeriodicTimerFires) {
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  {
    runtime rt({.workers = 2});
    auto after_halt = std::make_shared<std::atomic<int>>(0);
    std::vector<spindle::oneshot_receiver<spindle::exit_reason>> downs;
    std::vector<actor_ref<timed_message>> refs;
    for (int i = 0; i < 64; ++i) {
      refs.push_back(spawn_actor<halting_ticker>(rt, after_halt, 1 + i % 4));
      downs.push_back(spindle::monitor_actor(refs.back()));
      if (i % 3 == 0) {
        std::thread killer([r = refs.back()] { r.kill(); });
        killer.join();
      }
    }
    for (auto& d : downs) (void)d.blocking_receive();
    EXPECT_EQ(after_halt->load(), 0);
    EXPECT_TRUE(eventually([&] { return armed_timers(rt) == 0; }));
  }
  EXPECT_TRUE(eventually([&] { return spindle::actor_system::live_cells() == cells_before; }));
}

// The runtime goes with timers armed (one-shots, periodic, from handlers and from outside), and
// handles outlive it: no crash, no leak (the asan-ubsan preset checks), cancel() answers false.
TEST(ActorTimers, RuntimeDestroyedWithTimersArmed) {
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  std::vector<spindle::actor_timer> outliving;
  {
    runtime rt({.workers = 2});
    for (int i = 0; i < 16; ++i) {
      auto ref = spawn_actor<halting_ticker>(rt, std::make_shared<std::atomic<int>>(0), 1'000'000);
      outliving.push_back(spindle::send_after(ref, 1h, timed_ping{}));
      outliving.push_back(spindle::send_interval(ref, 1ms, timed_ping{}));
      outliving.push_back(spindle::send_after(ref, 0ms, timed_ping{}));
    }
    ASSERT_TRUE(eventually([&] { return armed_timers(rt) >= 32; }));
  }
  for (auto& t : outliving) {
    EXPECT_FALSE(t.pending());
    EXPECT_FALSE(t.cancel());
  }
  outliving.clear();
  EXPECT_TRUE(eventually([&] { return spindle::actor_system::live_cells() == cells_before; }));
}

TEST(ActorTimers, EmptyReferenceAndBadPeriodAreUsageErrors) {
  runtime rt({.workers = 1});
  actor_ref<timed_message> empty;
  EXPECT_THROW((void)spindle::send_after(empty, 1ms, timed_ping{}), spindle::usage_error);
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto ref = spawn_actor<ping_counter>(rt, ping_counter{nullptr, seen, nullptr});
  EXPECT_THROW((void)spindle::send_interval(ref, 0ms, timed_ping{}), spindle::usage_error);
  spindle::actor_timer none;
  EXPECT_FALSE(none.cancel());
  EXPECT_FALSE(none.pending());
}

}  // namespace
