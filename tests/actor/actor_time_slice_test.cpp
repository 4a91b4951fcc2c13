// Actors and time (issue #13; A3, A4, A5; actor_scheduler.hpp): the quantum is bounded in time
// as well as reductions, a wheel slice is bounded in time, the wheel is a peer of the tasks on
// its executor, a woken actor runs beside busy ones, and migration follows CPU demand.
//
// Liveness is asserted with generous bounds (seconds: a hang becomes a failure, nothing is
// timed); no test sleeps to synchronise: actors report through atomics and promises.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <thread>
#include <variant>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::actor_context;
using spindle::actor_ref;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::spawn_options;
using spindle::testing::eventually;
using spindle::testing::join_bounded;
using spindle::testing::spin_until;

// The bound on every wait below: only turns a hang into a failure.
constexpr auto hang = 20s;

// Keeps the CPU busy for `duration` (real time, whatever the sanitizer costs).
void burn_for(std::chrono::nanoseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// A CPU-hungry actor: every message burns `work`, then it sends itself the next one, until
// `stop` is set. It never charges reductions by hand.
struct busy {
  using message_type = int;
  std::chrono::nanoseconds work;
  const std::atomic<bool>* stop;
  std::atomic<long>* handled;
  std::atomic<int>* stopped;
  void receive(int, actor_context<int>& ctx) {
    burn_for(work);
    handled->fetch_add(1, std::memory_order_relaxed);
    if (stop->load()) {
      ctx.stop();
      stopped->fetch_add(1);
      return;
    }
    ctx.self().send(0);
  }
};

// A group of busy actors, running from construction until destruction.
class busy_actors {
 public:
  busy_actors(runtime& rt, int count, std::chrono::nanoseconds work, spawn_options options = {}) {
    for (int i = 0; i < count; ++i) add(rt, work, options);
    spin_until([&] { return handled_.load() >= count; });  // they are running
  }
  // Spawns one more and starts it.
  void add(runtime& rt, std::chrono::nanoseconds work, spawn_options options) {
    refs_.push_back(spawn_actor<busy>(rt, options, work, &stop_, &handled_, &stopped_));
    refs_.back().send(0);
  }
  ~busy_actors() {
    stop_.store(true);
    spin_until([&] { return stopped_.load() == int(refs_.size()); });
  }
  const std::vector<actor_ref<int>>& refs() const { return refs_; }
  long handled() const { return handled_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<long> handled_{0};
  std::atomic<int> stopped_{0};
  std::vector<actor_ref<int>> refs_;
};

// A light actor: adds numbers; answers with the total to a plain thread (a promise) or a task
// (reply_to).
struct light {
  using message_type =
      std::variant<int, std::shared_ptr<std::promise<int>>, spindle::reply_to<int>>;
  int total = 0;
  void receive(message_type& message) {
    if (auto* amount = std::get_if<int>(&message)) {
      total += *amount;
    } else if (auto* answer = std::get_if<std::shared_ptr<std::promise<int>>>(&message)) {
      (*answer)->set_value(total);
    } else {
      std::get<spindle::reply_to<int>>(message)(total);
    }
  }
};
using light_ref = actor_ref<light::message_type>;

// Asks from a plain thread: the wake is an executor message. -1 if no answer within `hang`.
int ask_from_thread(const light_ref& ref) {
  auto answer = std::make_shared<std::promise<int>>();
  std::future<int> total = answer->get_future();
  ref.send(light::message_type(answer));
  if (total.wait_for(hang) != std::future_status::ready) return -1;
  return total.get();
}

// Asks from a task (wherever it runs).
spindle::task<int> ask_from_task(light_ref ref) {
  auto question =
      ref.ask<int>([](spindle::reply_to<int> r) { return light::message_type(std::move(r)); });
  co_return co_await std::move(question);
}

using spindle::testing::sleep_then;

// Actors read run times and slices on the coarse clock to a quarter of a service interval: the
// actor system holds a fine-time claim (runtime_core::claim_fine_time) from its first use, so
// the monitor never relaxes its tick under actors (runtime_monitor.hpp, "How often it ticks").
TEST(ActorTimeSlice, TheActorSystemKeepsTheMonitorTickingFinely) {
  runtime rt({.workers = 1});
  EXPECT_FALSE(rt.core().fine_time_claimed()) << "no actors yet: nothing needs fine ticks";
  auto ref = spawn_actor<light>(rt);
  EXPECT_TRUE(rt.core().fine_time_claimed());
  ref.send(light::message_type(1));
  EXPECT_EQ(ask_from_thread(ref), 1);
}

// --- a busy actor does not starve its executor's tasks, timers and other actors --------------

TEST(ActorTimeSlice, BusyActorDoesNotStopAnAsk) {
  runtime rt({.workers = 1});
  busy_actors hog(rt, 1, 1us);
  auto ref = spawn_actor<light>(rt);
  ref.send(light::message_type(40));
  EXPECT_EQ(ask_from_thread(ref), 40);
  ref.send(light::message_type(2));
  EXPECT_EQ(join_bounded(rt.spawn(ask_from_task(ref)), hang), 42);
  EXPECT_GT(hog.handled(), 0);
}

TEST(ActorTimeSlice, BusyActorDoesNotStopATaskSleep) {
  runtime rt({.workers = 1});
  busy_actors hog(rt, 1, 1us);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(join_bounded(rt.spawn(sleep_then(1ms, i)), hang), i);
  }
}

spindle::task<bool> times_out_beside_busy_actor() {
  try {
    co_await spindle::with_timeout(50ms, sleep_then(1h, 0));
  } catch (const spindle::timeout_error&) {
    co_return true;
  }
  co_return false;
}

TEST(ActorTimeSlice, BusyActorDoesNotStopATimeout) {
  runtime rt({.workers = 1});
  busy_actors hog(rt, 1, 1us);
  EXPECT_TRUE(join_bounded(rt.spawn(times_out_beside_busy_actor()), hang));
}

// Hungry actors spread over the wheel's segments, so every slice of the wheel is one time
// slice long: tasks still run between slices (a service must not hand the CPU straight back to
// the wheel that just used it), and their timers fire.
spindle::task<int> ticker(int ticks) {
  for (int i = 0; i < ticks; ++i) co_await spindle::sleep_for(1ms);
  for (int i = 0; i < 200; ++i) co_await spindle::yield_now();
  co_return ticks;
}

TEST(ActorTimeSlice, TasksRunBetweenSlicesOfAWheelFullOfHungryActors) {
  runtime rt({.workers = 1});
  spawn_options on_zero;
  on_zero.executor = 0;
  busy_actors hogs(rt, 1, 50us, on_zero);
  auto& wheel = spindle::actors_of(rt).scheduler(0);
  // One more hungry actor each time the wheel turns a segment: they land in different segments.
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t at = wheel.segment_clock();
    ASSERT_TRUE(eventually([&] { return wheel.segment_clock() > at; }, hang));
    hogs.add(rt, 50us, on_zero);
  }
  EXPECT_EQ(join_bounded(rt.spawn(ticker(10)), hang), 10);
}

// --- the quantum is bounded in time -----------------------------------------------------------

// Burns 10 µs per message and records, from the reductions it has left, how many messages it
// handled in each quantum (the count restarts when it gets a fresh quantum).
struct slow_worker {
  using message_type = int;
  std::atomic<int>* most_in_a_quantum;
  std::atomic<long>* handled;
  long limit;
  std::atomic<bool>* done;
  std::int32_t last_left = 0;
  int in_this_quantum = 0;
  void receive(int, actor_context<int>& ctx) {
    const std::int32_t left = ctx.reductions_left();
    in_this_quantum = left > last_left ? 1 : in_this_quantum + 1;
    last_left = left;
    spindle::testing::raise_max(*most_in_a_quantum, in_this_quantum);
    burn_for(10us);
    if (handled->fetch_add(1) + 1 >= limit) {
      ctx.stop();
      done->store(true);
      return;
    }
    ctx.self().send(0);
  }
};

TEST(ActorTimeSlice, HungryActorRunIsCutByTime) {
  runtime rt({.workers = 1});
  std::atomic<int> most{0};
  std::atomic<long> handled{0};
  std::atomic<bool> done{false};
  spawn_options on_zero;
  on_zero.executor = 0;
  auto ref = spawn_actor<slow_worker>(rt, on_zero, &most, &handled, 3000L, &done);
  ref.send(0);
  ASSERT_TRUE(eventually([&] { return done.load(); }, hang));
  const auto& stats = spindle::actors_of(rt).scheduler(0).stats();
  // 10 µs a message and a 1 ms slice: about a hundred messages a quantum (fewer when the
  // machine is busy), never the 1,000 reductions of a quantum. The slice is read on the
  // monitor's coarse clock: a monitor kept off the CPU for a few milliseconds (two spinning
  // tests on two cores) stretches one quantum to 500 messages now and then (seen: 501, 502),
  // so the bound for the longest is the reductions; the average bound below is the time one.
  EXPECT_LT(most.load(), 1000) << "messages in one quantum";
  EXPECT_GT(stats.runs_cut_by_time.load(), 0u);
  EXPECT_LT(stats.messages_handled.load(), stats.actor_runs.load() * 500)
      << stats.actor_runs.load() << " runs for " << stats.messages_handled.load() << " messages";
  EXPECT_GT(stats.busy_nanoseconds.load(), 0u);
}

// The time slice is an option: with a long slice (and a long service interval, its default),
// the same actor is cut by reductions again.
TEST(ActorTimeSlice, LongServiceIntervalLeavesTheReductionsBound) {
  runtime rt({.workers = 1, .service_interval = 5s, .long_runnable_after = 5s});
  EXPECT_EQ(spindle::actors_of(rt).time_slice_ns(), std::uint64_t(5'000'000'000));
  std::atomic<int> most{0};
  std::atomic<long> handled{0};
  std::atomic<bool> done{false};
  spawn_options cheap;
  cheap.executor = 0;
  cheap.quantum = 20;
  auto ref = spawn_actor<slow_worker>(rt, cheap, &most, &handled, 200L, &done);
  ref.send(0);
  ASSERT_TRUE(eventually([&] { return done.load(); }, hang));
  EXPECT_EQ(most.load(), 20);  // a full quantum of reductions each time, no time cut
  EXPECT_EQ(spindle::actors_of(rt).scheduler(0).stats().runs_cut_by_time.load(), 0u);
}

// --- woken actors run beside busy ones ---------------------------------------------------------

TEST(ActorTimeSlice, WokenLightActorBesideHundredHungryActorsAnswers) {
  runtime rt({.workers = 2});
  busy_actors hogs(rt, 100, 10us);
  auto ref = spawn_actor<light>(rt);
  for (int i = 1; i <= 20; ++i) {
    ref.send(light::message_type(1));
    ASSERT_EQ(ask_from_thread(ref), 2 * i - 1);
    ref.send(light::message_type(1));
    ASSERT_EQ(join_bounded(rt.spawn(ask_from_task(ref)), hang), 2 * i);
  }
}

// A burst of actors woken together (freshly spawned workers, say) that turn out CPU-hungry,
// and a light actor woken last: the hungry ones' woken runs end after their share of the time
// slice (a 64th, from their second message on), so the light one runs after a share per actor
// ahead of it, not after a whole quantum each, nor a coarse tick each. The slice is long
// (400 ms: service interval 400 ms, ticks of 100 ms, shares of 6.25 ms) so that a share, a tick
// and a quantum differ by far more than the machine's noise; the blocker makes the wakes
// arrive together.
struct hungry_counting {
  using message_type = int;
  std::atomic<long>* handled;
  const std::atomic<bool>* stop;
  std::atomic<int>* stopped;
  void receive(int, actor_context<int>& ctx) {
    burn_for(1ms);
    handled->fetch_add(1);
    if (stop->load()) {
      ctx.stop();
      stopped->fetch_add(1);
      return;
    }
    ctx.self().send(0);
  }
};
struct snapshot_taker {
  using message_type = int;
  const std::vector<std::atomic<long>>* counts;
  std::atomic<long>* most_at_run;
  void receive(int) {
    long most = 0;
    for (const auto& count : *counts) most = std::max(most, count.load());
    most_at_run->store(most);
  }
};

TEST(ActorTimeSlice, WokenActorBehindAWokenBurstWaitsSharesNotQuanta) {
  runtime rt({.workers = 1, .service_interval = 400ms, .long_runnable_after = 10s});
  ASSERT_EQ(spindle::actors_of(rt).time_slice_ns(), std::uint64_t(400'000'000));
  constexpr int hungry = 4;
  std::vector<std::atomic<long>> handled(hungry);
  std::atomic<bool> stop{false};
  std::atomic<int> stopped{0};
  std::atomic<long> most_at_run{-1};
  spawn_options time_bound;
  time_bound.quantum = 100'000;  // the time slice ends every full run, not the reductions
  std::vector<actor_ref<int>> refs;
  for (int i = 0; i < hungry; ++i) {
    refs.push_back(spawn_actor<hungry_counting>(rt, time_bound, &handled[std::size_t(i)], &stop,
                                                &stopped));
  }
  auto probe = spawn_actor<snapshot_taker>(rt, &handled, &most_at_run);
  {
    spindle::testing::executor_blocker block(rt);
    for (auto& ref : refs) ref.send(0);
    probe.send(0);
  }  // released: the five wakes are delivered together, the probe's last
  ASSERT_TRUE(eventually([&] { return most_at_run.load() >= 0; }, hang));
  stop.store(true);
  ASSERT_TRUE(eventually([&] { return stopped.load() == hungry; }, hang));
  // A whole woken run would be 300-400 messages of 1 ms (a 400 ms slice on a 100 ms clock);
  // a run cut at the first tick about 100; a run cut at its share 2 + 7 (the messages spin on
  // the steady clock, the share's clock, so preemption does not stretch it).
  EXPECT_LT(most_at_run.load(), 40) << "messages of one hungry actor before the probe ran";
  EXPECT_GT(spindle::actors_of(rt).scheduler(0).stats().woken_runs_cut.load(), 0u);
}

// The coarse clock stalls when its writer, the monitor thread, does not get a CPU (seen for
// 5-13 ms on a saturated machine). A hungry actor's run must still end near its time slice,
// not after its whole quantum of reductions. The monitor is held in its watcher call; the
// hungry actor counts the messages it handles between two turns of a task that yields on the
// same executor: a run bounded by time is a few dozen messages of 100 µs (32 between looks at
// the steady clock), one bounded by reductions alone the whole quantum (1,000).
class monitor_holder final : public spindle::core::monitor_watcher {
 public:
  void watch_executor(const spindle::core::executor_sample&, std::uint64_t) noexcept override {}
  void tick_done(std::uint64_t) noexcept override {
    held_.store(true);
    while (!released_.load()) std::this_thread::yield();
  }
  bool holding() const { return held_.load(); }
  void release() { released_.store(true); }

 private:
  std::atomic<bool> held_{false};
  std::atomic<bool> released_{false};
};

struct turn_counting_hungry {
  using message_type = int;
  const std::atomic<long>* yielder_turns;
  std::atomic<long>* most_in_a_row;
  std::atomic<long>* handled;
  long in_a_row = 0;
  long last_turns = -1;
  void receive(int, actor_context<int>& ctx) {
    burn_for(100us);
    const long turns = yielder_turns->load();
    in_a_row = turns == last_turns ? in_a_row + 1 : 1;
    last_turns = turns;
    if (in_a_row > most_in_a_row->load()) most_in_a_row->store(in_a_row);
    if (handled->fetch_add(1) < 3000) ctx.self().send(0);
  }
};

spindle::task<void> yield_and_count(std::atomic<long>* turns, const std::atomic<long>* handled) {
  while (handled->load() < 3000) {
    turns->fetch_add(1);
    co_await spindle::yield_now();
  }
}

TEST(ActorTimeSlice, HungryRunEndsOnTimeWhileTheCoarseClockStalls) {
  runtime rt({.workers = 1, .long_runnable_after = 10s});
  monitor_holder holder;
  rt.core().set_monitor_watcher(&holder);
  ASSERT_TRUE(eventually([&] { return holder.holding(); }, hang));
  std::atomic<long> turns{0}, most_in_a_row{0}, handled{0};
  auto yielder = rt.spawn(yield_and_count(&turns, &handled));
  auto ref = spawn_actor<turn_counting_hungry>(rt, &turns, &most_in_a_row, &handled);
  ref.send(0);
  const bool finished = eventually([&] { return handled.load() > 3000; }, hang);
  rt.core().set_monitor_watcher(nullptr);
  holder.release();
  ASSERT_TRUE(finished);
  join_bounded(std::move(yielder), hang);
  EXPECT_LT(most_in_a_row.load(), 500) << "messages of 100 us in one run with the clock stalled";
  EXPECT_GT(spindle::actors_of(rt).scheduler(0).stats().coarse_clock_kept.load(), 0u);
}

// The wake paths of an idle actor whose executor runs a busy actor: from a plain thread (an
// executor message), from a task on the other executor (an executor message), from an actor
// on the other executor, and from a task on its own executor (a direct wake).
struct forwarder {
  using message_type = light::message_type;
  light_ref target;
  void receive(message_type& message) { target.send(std::move(message)); }
};

TEST(ActorTimeSlice, IdleActorWokenFromEverywhereBesideABusyActor) {
  runtime rt({.workers = 2});
  spawn_options pinned_zero, pinned_one;
  pinned_zero.executor = 0;
  pinned_zero.pinned = true;
  pinned_one.executor = 1;
  pinned_one.pinned = true;
  busy_actors hog(rt, 1, 1us, pinned_zero);
  auto ref = spawn_actor<light>(rt, pinned_zero);
  auto relay = spawn_actor<forwarder>(rt, pinned_one, ref);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(ask_from_thread(ref), 0);
    EXPECT_EQ(join_bounded(rt.spawn_on(1, ask_from_task(ref)), hang), 0);
    EXPECT_EQ(join_bounded(rt.spawn_on(0, ask_from_task(ref)), hang), 0);
    auto answer = std::make_shared<std::promise<int>>();
    std::future<int> total = answer->get_future();
    relay.send(light::message_type(answer));
    ASSERT_EQ(total.wait_for(hang), std::future_status::ready);
    EXPECT_EQ(total.get(), 0);
  }
  EXPECT_EQ(ref.home_executor(), 0u);
}

// --- migration follows CPU demand, not actor counts --------------------------------------------

// One half of a pair that bounces a number back and forth until `stop` (a chatty, light load).
struct bouncing_pair_half {
  using message_type = long;
  const actor_ref<long>* partner;
  const std::atomic<bool>* stop;
  std::atomic<int>* stopped;
  void receive(long value, actor_context<long>& ctx) {
    partner->send(value + 1);  // after a stop, the partner sees the flag too (or has halted)
    if (stop->load()) {
      ctx.stop();
      stopped->fetch_add(1);
    }
  }
};

// Executor 0 runs two pinned CPU-hungry actors; executor 1 runs three pinned chatty pairs, so
// its wheel always has about as many actors waiting as executor 0's. Counting actors, the
// light actors spawned on executor 0 would stay there behind millisecond slices; by CPU demand
// (work queued, in time) they move to executor 1.
TEST(ActorTimeSliceMigration, LightActorsLeaveAnExecutorSaturatedByPinnedHeavyActors) {
  runtime rt({.workers = 2});
  spawn_options pinned_zero, pinned_one, on_zero;
  pinned_zero.executor = 0;
  pinned_zero.pinned = true;
  pinned_one.executor = 1;
  pinned_one.pinned = true;
  on_zero.executor = 0;
  busy_actors heavy(rt, 2, 50us, pinned_zero);

  constexpr int pairs = 3;
  std::atomic<bool> stop_bouncing{false};
  std::atomic<int> bouncers_stopped{0};
  std::vector<actor_ref<long>> bouncers(2 * pairs);  // sized once: partners point into it
  for (int i = 0; i < 2 * pairs; ++i) {
    bouncers[std::size_t(i)] = spawn_actor<bouncing_pair_half>(rt, pinned_one, &bouncers[std::size_t(i ^ 1)],
                                                    &stop_bouncing, &bouncers_stopped);
  }
  for (int i = 0; i < pairs; ++i) bouncers[std::size_t(2 * i)].send(0);

  std::vector<light_ref> lights;
  for (int i = 0; i < 3; ++i) lights.push_back(spawn_actor<light>(rt, on_zero));
  auto still_on_zero = [&] {
    int n = 0;
    for (const light_ref& l : lights) n += l.home_executor() == 0 ? 1 : 0;
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + hang;
  while (still_on_zero() != 0 && std::chrono::steady_clock::now() < deadline) {
    for (const light_ref& l : lights) {
      if (l.home_executor() == 0) {
        ASSERT_EQ(ask_from_thread(l), 0);
      }
    }
  }
  EXPECT_EQ(still_on_zero(), 0) << "light actors left beside the heavy ones";
  for (const auto& h : heavy.refs()) EXPECT_EQ(h.home_executor(), 0u) << "a pinned actor moved";
  EXPECT_GT(spindle::actors_of(rt).scheduler(0).stats().migrations_out.load(), 0u);
  // Once there they stay: executor 0 is the busier by far.
  for (int round = 0; round < 20; ++round) {
    for (const light_ref& l : lights) ASSERT_EQ(ask_from_thread(l), 0);
  }
  EXPECT_EQ(still_on_zero(), 0);

  stop_bouncing.store(true);
  spin_until([&] { return bouncers_stopped.load() == 2 * pairs; });
}

// A ping-pong pair alone on a two-worker runtime: only one of them is ever runnable, nothing
// waits behind it, so moving one away gains nothing and never happens (it would turn every
// message into a cross-executor wake).
TEST(ActorTimeSliceMigration, ChattyPairOnAnIdleRuntimeStaysTogether) {
  runtime rt({.workers = 2});
  spawn_options on_zero;
  on_zero.executor = 0;
  std::atomic<bool> stop{false};
  std::atomic<int> stopped{0};
  std::vector<actor_ref<long>> pair(2);
  pair[0] = spawn_actor<bouncing_pair_half>(rt, on_zero, &pair[1], &stop, &stopped);
  pair[1] = spawn_actor<bouncing_pair_half>(rt, on_zero, &pair[0], &stop, &stopped);
  pair[0].send(0);
  auto& wheel = spindle::actors_of(rt).scheduler(0);
  const long messages = spindle::testing::under_tsan ? 20'000 : 200'000;
  ASSERT_TRUE(eventually(
      [&] { return wheel.stats().messages_handled.load() >= std::uint64_t(messages); }, hang));
  stop.store(true);
  spin_until([&] { return stopped.load() == 2; });
  EXPECT_EQ(wheel.stats().migrations_out.load(), 0u);
  EXPECT_EQ(pair[0].home_executor(), 0u);
  EXPECT_EQ(pair[1].home_executor(), 0u);
}

// Many chatty actors (Savina's big: tokens hop between 100 actors at random) on two workers:
// their queued work swings past each other's at nearly every wake, and with a cooldown in runs
// alone every actor moved as often as it allowed (a migration every 4 runs). An actor moves at
// most once per time slice: at most one migration per actor per millisecond of the run (plus
// its first), whatever the machine's speed.
struct random_hopper {
  using message_type = int;
  const std::vector<actor_ref<int>>* all;
  std::atomic<long>* tokens_done;
  std::uint32_t random_state;
  void receive(int hops_left) {
    if (hops_left == 0) {
      tokens_done->fetch_add(1);
      return;
    }
    random_state = random_state * 1664525u + 1013904223u;
    (*all)[(random_state >> 8) % all->size()].send(hops_left - 1);
  }
};

TEST(ActorTimeSliceMigration, ManyChattyActorsMoveAtMostOncePerTimeSlice) {
  runtime rt({.workers = 2});
  constexpr int actors = 100, tokens = 200;
  const int hops = spindle::testing::under_tsan ? 200 : 2'000;
  std::vector<actor_ref<int>> all(actors);
  std::atomic<long> done{0};
  for (int i = 0; i < actors; ++i) {
    all[std::size_t(i)] = spawn_actor<random_hopper>(rt, &all, &done, std::uint32_t(i + 1));
  }
  const auto started = std::chrono::steady_clock::now();
  for (int t = 0; t < tokens; ++t) all[std::size_t(t % actors)].send(hops);
  ASSERT_TRUE(eventually([&] { return done.load() == tokens; }, hang));
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  auto& system = spindle::actors_of(rt);
  const std::uint64_t moved = system.scheduler(0).stats().migrations_out.load() +
                              system.scheduler(1).stats().migrations_out.load();
  const double slice_ms = double(system.time_slice_ns()) / 1e6;
  EXPECT_LE(double(moved), actors * (elapsed_ms / slice_ms + 2))
      << moved << " migrations in " << elapsed_ms << " ms";
}

}  // namespace
