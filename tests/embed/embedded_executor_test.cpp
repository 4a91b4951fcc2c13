// The embedded executor: ticks, phases, wake-ups from other threads, timers in host time,
// shutdown (SPEC E1-E5).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "embed/embed_test_support.hpp"
#include "spindle/io/file.hpp"
#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::embed::embedded_executor;
using spindle::testing::test_host;

spindle::task<int> add(int a, int b) { co_return a + b; }

spindle::task<int> sum_of_children() {
  auto a = spindle::spawn(add(1, 2));
  auto b = spindle::spawn(add(3, 4));
  co_return co_await std::move(a) + co_await std::move(b);
}

TEST(EmbeddedExecutor, SpawnAsksForATickAndRunsOnlyInsideTicks) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(sum_of_children());
  EXPECT_GE(host.take_soon_requests(), 1u);
  EXPECT_FALSE(h.is_finished());
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 10);
}

spindle::task<int> sleeper(spindle::clock_duration d) {
  co_await spindle::sleep_for(d);
  co_return 7;
}

TEST(EmbeddedExecutor, SleepsInHostTimeAndAsksForATickAtTheDeadline) {
  test_host host;
  embedded_executor executor(host);
  const auto start = host.now();
  auto h = executor.spawn(sleeper(50ms));
  host.run_until_idle(executor);
  EXPECT_FALSE(h.is_finished());
  EXPECT_EQ(host.requested_at, start + 50ms);
  host.advance(49ms);
  executor.tick();
  EXPECT_FALSE(h.is_finished());
  host.advance(1ms);
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 7);
  EXPECT_EQ(host.requested_at, spindle::clock_time::max());
}

TEST(EmbeddedExecutor, WakeFromAnotherThreadQueuesAndAsksForReentry) {
  test_host host;
  embedded_executor executor(host);
  spindle::event ready;
  std::atomic<int> stage{0};
  auto h = executor.spawn([](spindle::event& e, std::atomic<int>& s) -> spindle::task<void> {
    s.store(1);
    co_await e.wait();
    s.store(2);
  }(ready, stage));
  host.run_until_idle(executor);
  ASSERT_EQ(stage.load(), 1);
  std::thread setter([&] { ready.set(); });
  setter.join();
  EXPECT_EQ(stage.load(), 1);  // nothing runs outside a tick
  EXPECT_GE(host.take_soon_requests(), 1u);
  executor.tick();
  EXPECT_EQ(stage.load(), 2);
  EXPECT_TRUE(h.is_finished());
}

TEST(EmbeddedExecutor, DestructorCancelsWhatIsLeft) {
  test_host host;
  spindle::join_handle<int> sleeping;
  {
    embedded_executor executor(host);
    sleeping = executor.spawn(sleeper(1h));
    host.run_until_idle(executor);
  }
  ASSERT_TRUE(sleeping.is_finished());
  EXPECT_EQ(sleeping.status(), spindle::task_status::cancelled);
}


// ================================================================================================
// Shared small tasks
// ================================================================================================

using spindle::embed::embedded_options;
using spindle::embed::phase;
using spindle::testing::frame_counter;
using spindle::testing::phase_log;

using spindle::testing::sleep_then;

spindle::task<int> sleep_until_then(spindle::clock_time t, int v) {
  co_await spindle::sleep_until(t);
  co_return v;
}

spindle::task<int> counted_sleep_then(frame_counter, spindle::clock_duration d, int v) {
  co_await spindle::sleep_for(d);
  co_return v;
}

// Records the number of the phase it runs in.
spindle::task<void> note_phase(const phase_log& log, std::vector<std::uint64_t>& ran_in) {
  ran_in.push_back(log.phase_number());
  co_return;
}

// Checks the phase rules of E3 on every tick recorded so far.
void expect_phase_rules(const phase_log& log) {
  for (std::size_t t = 0; t < log.ticks().size(); ++t) {
    const std::vector<phase>& phases = log.ticks()[t];
    ASSERT_FALSE(phases.empty()) << "tick " << t;
    EXPECT_EQ(phases.front(), phase::service) << "tick " << t << " does not start with service";
    EXPECT_EQ(phases.back(), phase::service) << "tick " << t << " does not end with service";
    for (std::size_t i = 1; i < phases.size(); ++i) {
      EXPECT_FALSE(phases[i] == phase::execute && phases[i - 1] == phase::execute)
          << "tick " << t << ": two execute phases in a row at " << i;
      EXPECT_FALSE(phases[i] == phase::service && phases[i - 1] == phase::service)
          << "tick " << t << ": two service phases in a row at " << i;
    }
  }
}

bool no_consecutive_duplicates(const std::vector<spindle::clock_time>& requests) {
  return std::adjacent_find(requests.begin(), requests.end()) == requests.end();
}

// ================================================================================================
// 1. Phases and limits
// ================================================================================================

spindle::task<void> mixed_worker(int id, spindle::event& gate, spindle::mutex& m, int& counter) {
  for (int i = 0; i < id % 4; ++i) co_await spindle::yield_now();
  if (id % 3 == 0) co_await gate.wait();
  if (id == 7) gate.set();
  {
    auto held = co_await m.lock();
    co_await spindle::yield_now();
    ++counter;
  }
  if (id % 5 == 0) {
    auto child = spindle::spawn(spindle::testing::value(id));
    counter += co_await std::move(child) - id;
  }
  co_await spindle::sleep_for(std::chrono::milliseconds(1 + id % 7));
}

spindle::task<int> mixed_root(int n) {
  spindle::event gate;
  spindle::mutex m;
  int counter = 0;
  spindle::join_set<void> set;
  for (int i = 0; i < n; ++i) set.spawn(mixed_worker(i, gate, m, counter));
  co_await set.join_all();
  co_return counter;
}

TEST(EmbeddedPhases, EveryTickStartsAndEndsWithServiceAndPhasesAlternate) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 7, .tasks_per_execute_phase = 3});
  phase_log log(executor);
  auto h = executor.spawn(mixed_root(40));
  spindle::testing::drive_until_finished(host, executor, h);
  EXPECT_EQ(h.join(), 40);
  ASSERT_GT(log.ticks().size(), 5u);
  EXPECT_EQ(log.ticks().size(), executor.statistics().ticks);
  expect_phase_rules(log);
  // Wherever a tick ran tasks, the counters agree with the recorded phases.
  const auto s = executor.statistics();
  EXPECT_EQ(s.execute_phases, log.execute_phases());
  EXPECT_EQ(s.service_phases + s.execute_phases, log.phase_number());
}

TEST(EmbeddedPhases, TickWithoutWorkIsExactlyOneServicePhase) {
  test_host host;
  embedded_executor executor(host);
  phase_log log(executor);
  executor.tick();
  executor.tick();
  // A sleeping task is no work either until its timer is due.
  auto h = executor.spawn(sleep_then(1h, 1));
  executor.tick();  // runs the task until it sleeps
  executor.tick();
  ASSERT_EQ(log.ticks().size(), 4u);
  EXPECT_EQ(log.ticks()[0], std::vector<phase>{phase::service});
  EXPECT_EQ(log.ticks()[1], std::vector<phase>{phase::service});
  EXPECT_EQ(log.ticks()[2], (std::vector<phase>{phase::service, phase::execute, phase::service}));
  EXPECT_EQ(log.ticks()[3], std::vector<phase>{phase::service});
  const auto s = executor.statistics();
  EXPECT_EQ(s.ticks, 4u);
  EXPECT_EQ(s.service_phases, 5u);
  EXPECT_EQ(s.execute_phases, 1u);
  EXPECT_EQ(s.tasks_run, 1u);
}

TEST(EmbeddedPhases, ExecutePhaseRunsAtMostTasksPerExecutePhase) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 256, .tasks_per_execute_phase = 3});
  phase_log log(executor);
  std::vector<std::uint64_t> ran_in;
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 10; ++i) handles.push_back(executor.spawn(note_phase(log, ran_in)));
  executor.tick();
  const auto s = executor.statistics();
  EXPECT_EQ(s.tasks_run, 10u);
  EXPECT_EQ(s.execute_phases, 4u);  // 3 + 3 + 3 + 1
  ASSERT_EQ(ran_in.size(), 10u);
  std::vector<std::uint64_t> distinct = ran_in;
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  EXPECT_EQ(distinct.size(), 4u);
  for (std::uint64_t p : distinct) {
    EXPECT_LE(std::count(ran_in.begin(), ran_in.end(), p), 3) << "phase " << p;
  }
  ASSERT_EQ(log.ticks().size(), 1u);
  EXPECT_EQ(log.ticks()[0].size(), 9u);  // s e s e s e s e s
  expect_phase_rules(log);
  for (auto& h : handles) EXPECT_TRUE(h.is_finished());
}

TEST(EmbeddedPhases, TickRunsAtMostTasksPerTickAndAsksForReentry) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 5, .tasks_per_execute_phase = 2});
  phase_log log(executor);
  std::vector<std::uint64_t> ran_in;
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 12; ++i) handles.push_back(executor.spawn(note_phase(log, ran_in)));
  host.take_soon_requests();  // the spawns' requests
  const auto finished = [&handles] {
    return std::count_if(handles.begin(), handles.end(), [](auto& h) { return h.is_finished(); });
  };

  executor.tick();
  EXPECT_EQ(executor.statistics().tasks_run, 5u);
  EXPECT_EQ(finished(), 5);
  EXPECT_EQ(host.take_soon_requests(), 1u);  // work is left: exactly one re-entry request
  EXPECT_TRUE(executor.has_ready_work());

  executor.tick();  // continues where the last one stopped
  EXPECT_EQ(executor.statistics().tasks_run, 10u);
  EXPECT_EQ(finished(), 10);
  EXPECT_EQ(host.take_soon_requests(), 1u);

  executor.tick();
  EXPECT_EQ(executor.statistics().tasks_run, 12u);
  EXPECT_EQ(finished(), 12);
  EXPECT_EQ(host.take_soon_requests(), 0u);  // nothing left: no re-entry
  EXPECT_FALSE(executor.has_ready_work());
  EXPECT_EQ(executor.statistics().execute_phases, 3u + 3u + 1u);  // 2+2+1, 2+2+1, 2
  expect_phase_rules(log);
}

TEST(EmbeddedPhases, TaskThatYieldsForeverNeverHangsATick) {
  test_host host;
  std::atomic<int> destroyed{0};
  embedded_executor executor(host, {.tasks_per_tick = 64, .tasks_per_execute_phase = 8});
  phase_log log(executor);
  auto h = executor.spawn(spindle::testing::forever_yielding(frame_counter(destroyed)));
  host.take_soon_requests();
  for (std::uint64_t i = 1; i <= 3; ++i) {
    executor.tick();
    EXPECT_EQ(executor.statistics().tasks_run, 64u * i);
    EXPECT_EQ(host.take_soon_requests(), 1u);
  }
  // A yield is a wake-up on the ticking thread: one run per execute phase, never two.
  EXPECT_EQ(executor.statistics().execute_phases, 3u * 64u);
  expect_phase_rules(log);
  EXPECT_FALSE(h.is_finished());
  h.cancel();
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
  // A completed task's frame goes with its last reference (here: the handle).
  EXPECT_TRUE(spindle::testing::joined_cancelled(h));
  EXPECT_EQ(destroyed.load(), 1);
}

// ================================================================================================
// 2. A task woken during an execute phase runs in a later one
// ================================================================================================

struct wake_record {
  std::uint64_t waker_phase = 0;     // the phase in which the wake-up happened
  std::uint64_t woken_phase = 0;     // the phase in which the woken task ran again
  bool woken_ran_before_waker_went_on = false;  // seen by the waker right after the wake-up
};

spindle::task<void> event_waiter(spindle::event& e, const phase_log& log, wake_record& r) {
  co_await e.wait();
  r.woken_phase = log.phase_number();
}
spindle::task<void> event_setter(spindle::event& e, const phase_log& log, wake_record& r) {
  r.waker_phase = log.phase_number();
  e.set();
  r.woken_ran_before_waker_went_on = r.woken_phase != 0;
  co_return;
}

spindle::task<void> channel_receiver(spindle::channel<int>& ch, const phase_log& log,
                                     wake_record& r) {
  std::optional<int> v = co_await ch.receive();
  if (v == 42) r.woken_phase = log.phase_number();
}
spindle::task<void> channel_sender(spindle::channel<int>& ch, const phase_log& log,
                                   wake_record& r) {
  r.waker_phase = log.phase_number();
  co_await ch.send(42);  // a receiver waits: handed over without suspending
  r.woken_ran_before_waker_went_on = r.woken_phase != 0;
}

spindle::task<void> mutex_holder(spindle::mutex& m, const phase_log& log, wake_record& r) {
  auto held = co_await m.lock();
  co_await spindle::yield_now();  // the waiter queues meanwhile
  r.waker_phase = log.phase_number();
  held.unlock();
  r.woken_ran_before_waker_went_on = r.woken_phase != 0;
}
spindle::task<void> mutex_waiter(spindle::mutex& m, const phase_log& log, wake_record& r) {
  auto held = co_await m.lock();
  r.woken_phase = log.phase_number();
}

void expect_woken_later(const phase_log& log, const wake_record& r) {
  EXPECT_NE(r.waker_phase, 0u);
  EXPECT_NE(r.woken_phase, 0u);
  EXPECT_FALSE(r.woken_ran_before_waker_went_on);
  // Not the same execute phase: a service phase (at least) lies between.
  EXPECT_GE(r.woken_phase, r.waker_phase + 2);
  EXPECT_EQ(log.ticks().size(), 1u);  // but still in the same tick
  expect_phase_rules(log);
}

TEST(EmbeddedWakeOrder, TaskWokenByEventSetRunsInALaterExecutePhase) {
  test_host host;
  embedded_executor executor(host);  // 32 per execute phase: room for both in one
  phase_log log(executor);
  spindle::event e;
  wake_record r;
  auto a = executor.spawn(event_waiter(e, log, r));
  auto b = executor.spawn(event_setter(e, log, r));
  executor.tick();
  ASSERT_TRUE(a.is_finished() && b.is_finished());
  expect_woken_later(log, r);
}

TEST(EmbeddedWakeOrder, TaskWokenByChannelSendRunsInALaterExecutePhase) {
  test_host host;
  embedded_executor executor(host);
  phase_log log(executor);
  spindle::channel<int> ch(4);
  wake_record r;
  auto a = executor.spawn(channel_receiver(ch, log, r));
  auto b = executor.spawn(channel_sender(ch, log, r));
  executor.tick();
  ASSERT_TRUE(a.is_finished() && b.is_finished());
  expect_woken_later(log, r);
}

TEST(EmbeddedWakeOrder, TaskWokenByMutexUnlockRunsInALaterExecutePhase) {
  test_host host;
  embedded_executor executor(host);
  phase_log log(executor);
  spindle::mutex m;
  wake_record r;
  auto a = executor.spawn(mutex_holder(m, log, r));
  auto b = executor.spawn(mutex_waiter(m, log, r));
  executor.tick();
  ASSERT_TRUE(a.is_finished() && b.is_finished());
  expect_woken_later(log, r);
}

spindle::task<void> record_phase(const phase_log& log, std::uint64_t& at) {
  at = log.phase_number();
  co_return;
}
spindle::task<void> spawn_and_yield(const phase_log& log, std::uint64_t& spawned_at,
                                    std::uint64_t& child_at, std::uint64_t& resumed_at) {
  spawned_at = log.phase_number();
  spindle::spawn(record_phase(log, child_at)).detach();
  co_await spindle::yield_now();
  resumed_at = log.phase_number();
}

TEST(EmbeddedWakeOrder, SpawnedAndYieldingTasksRunInALaterExecutePhase) {
  test_host host;
  embedded_executor executor(host);
  phase_log log(executor);
  std::uint64_t spawned_at = 0, child_at = 0, resumed_at = 0;
  auto h = executor.spawn(spawn_and_yield(log, spawned_at, child_at, resumed_at));
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_GE(child_at, spawned_at + 2);
  EXPECT_GE(resumed_at, spawned_at + 2);
  EXPECT_EQ(child_at, resumed_at);  // both from the request list, in the next execute phase
  EXPECT_EQ(log.ticks().size(), 1u);
}

// --- the two ends of the run queue ---------------------------------------------------------

// A binary tree of spawns; `in_flight` counts tasks spawned and not yet completed.
spindle::task<long> spawn_tree(int depth, std::atomic<long>& in_flight,
                               std::atomic<int>& max_in_flight) {
  long leaves = 1;
  if (depth > 0) {
    in_flight.fetch_add(2);
    spindle::testing::raise_max(max_in_flight, int(in_flight.load()));
    auto left = spindle::spawn(spawn_tree(depth - 1, in_flight, max_in_flight));
    auto right = spindle::spawn(spawn_tree(depth - 1, in_flight, max_in_flight));
    leaves = co_await std::move(left) + co_await std::move(right);
  }
  in_flight.fetch_sub(1);
  co_return leaves;
}

spindle::task<void> count_yields_until(std::atomic<bool>& stop, std::uint64_t& runs) {
  while (!stop.load()) {
    ++runs;
    co_await spindle::yield_now();
  }
}

spindle::task<long> tree_then_stop(int depth, std::atomic<long>& in_flight,
                                   std::atomic<int>& max_in_flight, std::atomic<bool>& stop) {
  const long leaves = co_await spawn_tree(depth, in_flight, max_in_flight);
  stop.store(true);
  co_return leaves;
}

TEST(EmbeddedRunQueue, SpawnTreeRunsDepthFirstSoFewTasksAreAliveAtOnce) {
  test_host host;
  embedded_executor executor(host);
  constexpr int depth = 14;
  std::atomic<long> in_flight{1};
  std::atomic<int> max_in_flight{1};
  auto h = executor.spawn(spawn_tree(depth, in_flight, max_in_flight));
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 1L << depth);
  // Breadth-first, every leaf would be alive at once (2^depth); newest first keeps it to a few
  // execute phases' worth per level.
  EXPECT_LT(max_in_flight.load(), (1 << depth) / 4) << "max in flight " << max_in_flight.load();
}

TEST(EmbeddedRunQueue, YieldingTaskRunsInEveryExecutePhaseWhileTheNewestEndIsBusy) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 256, .tasks_per_execute_phase = 8});
  std::atomic<bool> stop{false};
  std::uint64_t yielder_runs = 0;
  std::atomic<long> in_flight{1};
  std::atomic<int> max_in_flight{1};
  auto yielder = executor.spawn(count_yields_until(stop, yielder_runs));
  auto tree = executor.spawn(tree_then_stop(11, in_flight, max_in_flight, stop));
  host.run_until_idle(executor);
  ASSERT_TRUE(tree.is_finished() && yielder.is_finished());
  const auto s = executor.statistics();
  // The oldest end gets the first slot of every execute phase: the yielder is never starved by
  // the spawn tree (at most the phase that ended the tree and the last one go without it).
  EXPECT_GE(yielder_runs + 2, s.execute_phases);
}

spindle::task<void> record_phase_after_event(spindle::event& e, const phase_log& log,
                                             std::uint64_t& at) {
  co_await e.wait();
  at = log.phase_number();
}

TEST(EmbeddedRunQueue, ForeignWakeRunsInTheFirstExecutePhaseOfTheNextTickEvenWhenBusy) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 64, .tasks_per_execute_phase = 4});
  phase_log log(executor);
  spindle::event e;
  std::uint64_t woken_at = 0;
  std::atomic<long> in_flight{1};
  std::atomic<int> max_in_flight{1};
  std::atomic<bool> stop{false};
  auto waiter = executor.spawn(record_phase_after_event(e, log, woken_at));
  auto tree = executor.spawn(tree_then_stop(10, in_flight, max_in_flight, stop));
  executor.tick();
  executor.tick();
  ASSERT_FALSE(tree.is_finished());  // plenty left on the newest end
  std::thread setter([&e] { e.set(); });
  setter.join();
  const std::uint64_t before = log.phase_number();
  executor.tick();
  EXPECT_EQ(woken_at, before + 2);  // service, then the first task of the first execute phase
  host.run_until_idle(executor);
  EXPECT_TRUE(tree.is_finished());
}

// ================================================================================================
// 3. Wake-ups and cancellation from other threads
// ================================================================================================

spindle::task<void> wait_and_count(spindle::event& e, std::atomic<int>& done) {
  co_await e.wait();
  done.fetch_add(1);
}

TEST(EmbeddedForeign, WakeFromAnotherThreadOnlyQueuesAndIsCountedAsForeign) {
  test_host host;
  embedded_executor executor(host);
  spindle::event e;
  std::atomic<int> done{0};
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 5; ++i) handles.push_back(executor.spawn(wait_and_count(e, done)));
  host.run_until_idle(executor);
  const auto before = executor.statistics();
  // Spawns from outside a tick come in through the action queue too.
  EXPECT_EQ(before.foreign_wakes, 5u);
  EXPECT_EQ(before.blocked_tasks, 5u);
  EXPECT_FALSE(executor.has_ready_work());

  std::thread setter([&e] { e.set(); });
  setter.join();
  EXPECT_EQ(done.load(), 0);  // nothing ran outside a tick
  EXPECT_GE(host.take_soon_requests(), 1u);
  EXPECT_TRUE(executor.has_ready_work());
  EXPECT_EQ(executor.statistics().tasks_run, before.tasks_run);

  executor.tick();
  EXPECT_EQ(done.load(), 5);
  const auto after = executor.statistics();
  EXPECT_EQ(after.foreign_wakes, before.foreign_wakes + 5);
  EXPECT_EQ(after.tasks_run, before.tasks_run + 5);
  EXPECT_EQ(after.live_tasks, 0u);
  for (auto& h : handles) EXPECT_TRUE(h.is_finished());
}

spindle::task<int> event_wait_reporting_cancel(spindle::event& e, std::atomic<bool>& saw_cancel) {
  try {
    co_await e.wait();
  } catch (const spindle::task_cancelled&) {
    saw_cancel.store(true);
    throw;
  }
  co_return 1;
}

spindle::task<int> sleep_reporting_cancel(std::atomic<bool>& saw_cancel) {
  try {
    co_await spindle::sleep_for(1h);
  } catch (const spindle::task_cancelled&) {
    saw_cancel.store(true);
    throw;
  }
  co_return 1;
}

TEST(EmbeddedForeign, CancelFromAnotherThreadOfATaskBlockedOnAnEventCompletesAtTheNextTick) {
  test_host host;
  embedded_executor executor(host);
  spindle::event e;
  std::atomic<bool> saw_cancel{false};
  auto h = executor.spawn(event_wait_reporting_cancel(e, saw_cancel));
  host.run_until_idle(executor);
  host.take_soon_requests();
  std::thread canceller([&h] { h.cancel(); });
  canceller.join();
  EXPECT_FALSE(h.is_finished());
  EXPECT_FALSE(saw_cancel.load());
  EXPECT_GE(host.take_soon_requests(), 1u);
  EXPECT_EQ(e.waiting(), 0u);  // unlinked by the canceller
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
  EXPECT_TRUE(spindle::testing::joined_cancelled(h));
}

TEST(EmbeddedForeign, CancelFromAnotherThreadOfASleepingTaskCompletesAtTheNextTick) {
  test_host host;
  embedded_executor executor(host);
  std::atomic<bool> saw_cancel{false};
  auto h = executor.spawn(sleep_reporting_cancel(saw_cancel));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, host.now() + 1h);
  host.take_soon_requests();
  std::thread canceller([&h] { h.cancel(); });
  canceller.join();
  EXPECT_FALSE(h.is_finished());
  EXPECT_GE(host.take_soon_requests(), 1u);
  executor.tick();  // no time passed
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
  EXPECT_EQ(executor.next_deadline(), spindle::clock_time::max());
  EXPECT_EQ(host.requested_at, spindle::clock_time::max());  // the timed request withdrawn
  EXPECT_EQ(executor.statistics().timers_fired, 0u);
}

spindle::task<int> acquire_many(spindle::semaphore& s, int n, embedded_executor* ex,
                                std::atomic<bool>& ran_outside_tick) {
  for (int i = 0; i < n; ++i) {
    co_await s.acquire();
    if (embedded_executor::current() != ex) ran_outside_tick.store(true);
  }
  co_return n;
}

TEST(EmbeddedForeign, ManyThreadsWakingATaskWhileTheHostTicksLoseNothing) {
  test_host host;
  embedded_executor executor(host);
  spindle::semaphore permits(0);
  constexpr int per_thread = spindle::testing::under_tsan ? 300 : 2000;
  constexpr int threads = 3;
  std::atomic<bool> ran_outside_tick{false};
  auto h = executor.spawn(acquire_many(permits, threads * per_thread, &executor, ran_outside_tick));
  std::vector<std::thread> releasers;
  for (int t = 0; t < threads; ++t) {
    releasers.emplace_back([&permits] {
      for (int i = 0; i < per_thread; ++i) permits.release();
    });
  }
  spindle::testing::drive_until_finished(host, executor, h);
  for (auto& t : releasers) t.join();
  EXPECT_EQ(h.join(), threads * per_thread);
  EXPECT_FALSE(ran_outside_tick.load());
  const auto s = executor.statistics();
  // One spawn plus at most one foreign wake-up per permit handed to a blocked acquire.
  EXPECT_LE(s.foreign_wakes, std::uint64_t(threads * per_thread) + 1);
  EXPECT_GE(s.foreign_wakes, 1u);
}

// ================================================================================================
// 4. Timers in host time
// ================================================================================================

TEST(EmbeddedTimers, SleepForAndSleepUntilFollowHostTime) {
  test_host host;
  embedded_executor executor(host);
  const auto start = host.now();
  auto a = executor.spawn(sleep_then(30ms, 1));
  auto b = executor.spawn(sleep_until_then(start + 10ms, 2));
  auto c = executor.spawn(sleep_then(20ms, 3));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, start + 10ms);
  EXPECT_EQ(executor.next_deadline(), start + 10ms);
  EXPECT_FALSE(executor.has_ready_work());

  host.advance(9ms);
  EXPECT_FALSE(executor.has_ready_work());
  executor.tick();
  EXPECT_FALSE(a.is_finished() || b.is_finished() || c.is_finished());

  host.advance(1ms);
  EXPECT_TRUE(executor.has_ready_work());  // a timer is due
  executor.tick();
  EXPECT_TRUE(b.is_finished());
  EXPECT_FALSE(a.is_finished() || c.is_finished());
  EXPECT_EQ(host.requested_at, start + 20ms);

  host.advance(10ms);
  executor.tick();
  EXPECT_TRUE(c.is_finished());
  EXPECT_FALSE(a.is_finished());
  EXPECT_EQ(host.requested_at, start + 30ms);

  host.set(start + 45ms);  // late: still fires
  executor.tick();
  EXPECT_TRUE(a.is_finished());
  EXPECT_EQ(host.requested_at, spindle::clock_time::max());
  EXPECT_EQ(a.join() + b.join() + c.join(), 6);
  EXPECT_EQ(host.tick_at_requests,
            (std::vector<spindle::clock_time>{start + 10ms, start + 20ms, start + 30ms,
                                              spindle::clock_time::max()}));
  EXPECT_EQ(executor.statistics().timers_fired, 3u);
}

TEST(EmbeddedTimers, AnEarlierTimerMovesTheRequestedTickForward) {
  test_host host;
  embedded_executor executor(host);
  const auto start = host.now();
  auto slow = executor.spawn(sleep_then(1h, 1));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, start + 1h);
  auto fast = executor.spawn(sleep_then(5ms, 2));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, start + 5ms);
  host.advance(5ms);
  host.run_until_idle(executor);
  EXPECT_TRUE(fast.is_finished());
  EXPECT_EQ(host.requested_at, start + 1h);
  EXPECT_EQ(host.tick_at_requests,
            (std::vector<spindle::clock_time>{start + 1h, start + 5ms, start + 1h}));
  EXPECT_FALSE(slow.is_finished());
}

spindle::task<std::vector<spindle::clock_duration>> interval_ticks(int n) {
  const spindle::clock_time start = spindle::now();
  spindle::interval every(10ms);
  std::vector<spindle::clock_duration> scheduled;
  for (int i = 0; i < n; ++i) scheduled.push_back(co_await every.tick() - start);
  co_return scheduled;
}

TEST(EmbeddedTimers, IntervalTicksOnTheHostTimeGridAndSkipsMissedTicks) {
  test_host host;
  embedded_executor executor(host);
  const auto start = host.now();
  auto h = executor.spawn(interval_ticks(4));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, start + 10ms);
  host.advance(10ms);
  executor.tick();
  EXPECT_EQ(host.requested_at, start + 20ms);
  host.advance(10ms);
  executor.tick();
  EXPECT_EQ(host.requested_at, start + 30ms);
  host.advance(35ms);  // now = start + 55ms: the tick at 30 is late, 40 and 50 are skipped
  executor.tick();
  EXPECT_EQ(host.requested_at, start + 60ms);
  host.advance(5ms);
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), (std::vector<spindle::clock_duration>{10ms, 20ms, 30ms, 60ms}));
}

TEST(EmbeddedTimers, SleepCatcherTellsTheHostAnUnchangedDeadlineOnlyOnce) {
  test_host host;
  std::atomic<int> destroyed{0};
  embedded_executor executor(host, {.tasks_per_tick = 4, .tasks_per_execute_phase = 2});
  const auto start = host.now();
  auto sleeper = executor.spawn(sleep_then(1h, 1));
  auto yielder = executor.spawn(spindle::testing::forever_yielding(frame_counter(destroyed)));
  for (int i = 0; i < 100; ++i) executor.tick();  // every tick ends with tick_at(start + 1h)
  EXPECT_EQ(executor.statistics().ticks, 100u);
  EXPECT_EQ(host.tick_at_requests, std::vector<spindle::clock_time>{start + 1h});
  yielder.cancel();
  executor.tick();
  EXPECT_TRUE(yielder.is_finished());
  EXPECT_EQ(host.tick_at_requests, std::vector<spindle::clock_time>{start + 1h});
  EXPECT_FALSE(sleeper.is_finished());
}

TEST(EmbeddedTimers, HostNeverSeesTwoIdenticalTickAtRequestsInARow) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 5, .tasks_per_execute_phase = 2});
  auto h = executor.spawn(mixed_root(60));
  spindle::testing::drive_until_finished(host, executor, h);
  EXPECT_EQ(h.join(), 60);
  EXPECT_GT(executor.statistics().ticks, 20u);
  EXPECT_GE(host.tick_at_requests.size(), 2u);
  EXPECT_TRUE(no_consecutive_duplicates(host.tick_at_requests));
  EXPECT_EQ(host.tick_at_requests.back(), spindle::clock_time::max());
}

spindle::task<int> value_or_minus_one_on_timeout(spindle::clock_duration timeout,
                                                 spindle::task<int> inner) {
  try {
    co_return co_await spindle::with_timeout(timeout, std::move(inner));
  } catch (const spindle::timeout_error&) {
    co_return -1;
  }
}

TEST(EmbeddedTimers, WithTimeoutThrowsTimeoutErrorOnceHostTimePassesTheDeadline) {
  test_host host;
  embedded_executor executor(host);
  std::atomic<int> destroyed{0};
  const auto start = host.now();
  auto h = executor.spawn(
      value_or_minus_one_on_timeout(50ms, counted_sleep_then(frame_counter(destroyed), 1h, 5)));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, start + 50ms);  // the timeout's timer is the earliest
  host.advance(49ms);
  executor.tick();
  EXPECT_FALSE(h.is_finished());
  host.advance(1ms);
  executor.tick();  // fire, cancel the child, the child unwinds, the parent resumes: one tick
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), -1);
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(host.requested_at, spindle::clock_time::max());
  EXPECT_EQ(executor.statistics().live_tasks, 0u);
}

TEST(EmbeddedTimers, WithTimeoutReturnsTheValueWhenTheInnerTaskIsInTime) {
  test_host host;
  embedded_executor executor(host);
  const auto start = host.now();
  auto h = executor.spawn(value_or_minus_one_on_timeout(1h, sleep_then(10ms, 5)));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, start + 10ms);
  host.advance(10ms);
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 5);
  EXPECT_EQ(executor.next_deadline(), spindle::clock_time::max());  // the timeout was disarmed
  EXPECT_EQ(host.requested_at, spindle::clock_time::max());
}

// ================================================================================================
// 6. What an embedded task must not do
// ================================================================================================

spindle::task<bool> tick_from_inside(embedded_executor& target) {
  try {
    target.tick();
  } catch (const spindle::usage_error&) {
    co_return true;
  }
  co_return false;
}

TEST(EmbeddedUsage, TickFromInsideATaskThrowsUsageError) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(tick_from_inside(executor));
  auto other = executor.spawn(spindle::testing::value(4));
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(h.join());
  EXPECT_EQ(other.join(), 4);  // the tick itself went on
  EXPECT_EQ(executor.statistics().ticks, 1u);
  EXPECT_EQ(embedded_executor::current(), nullptr);
}

TEST(EmbeddedUsage, TickingAnotherEmbeddedExecutorFromInsideATaskThrowsUsageError) {
  test_host host_a;
  test_host host_b;
  embedded_executor a(host_a);
  embedded_executor b(host_b);
  auto h = a.spawn(tick_from_inside(b));
  a.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(h.join());
  EXPECT_EQ(b.statistics().ticks, 0u);
}

spindle::task<bool> join_from_inside() {
  auto child = spindle::spawn(spindle::testing::value(3));
  bool refused = false;
  try {
    (void)child.join();
  } catch (const spindle::usage_error&) {
    refused = true;
  }
  const int v = co_await std::move(child);  // the handle is still usable
  co_return refused && v == 3;
}

TEST(EmbeddedUsage, BlockingJoinFromInsideATaskThrowsUsageError) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(join_from_inside());
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(h.join());
}

spindle::task<bool> read_from_inside(int fd) {
  spindle::io::file f(fd);
  std::byte buffer[8];
  try {
    (void)co_await f.read_at(std::span<std::byte>(buffer), 0);
  } catch (const spindle::usage_error&) {
    co_return true;
  }
  co_return false;
}

TEST(EmbeddedUsage, IoFromAnEmbeddedTaskThrowsUsageError) {
  test_host host;
  embedded_executor executor(host);
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto h = executor.spawn(read_from_inside(fd));  // the file closes the descriptor
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(h.join());
}

// ================================================================================================
// 7. Spawning and synchronising between embedded tasks
// ================================================================================================

spindle::task<bool> runs_on(const embedded_executor* ex) {
  co_return embedded_executor::current() == ex;
}

struct spawn_report {
  std::uint64_t live_after_spawns = 0;
  int children_on_same_executor = 0;
};

spindle::task<spawn_report> spawn_children(const embedded_executor* ex, int n) {
  spawn_report report;
  std::vector<spindle::join_handle<bool>> children;
  for (int i = 0; i < n; ++i) children.push_back(spindle::spawn(runs_on(ex)));
  report.live_after_spawns = embedded_executor::current()->statistics().live_tasks;
  for (auto& child : children) {
    if (co_await std::move(child)) ++report.children_on_same_executor;
  }
  co_return report;
}

TEST(EmbeddedTasks, SpawnFromInsideAnEmbeddedTaskLandsOnTheSameExecutor) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(spawn_children(&executor, 6));
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  const spawn_report report = h.join();
  EXPECT_EQ(report.live_after_spawns, 7u);
  EXPECT_EQ(report.children_on_same_executor, 6);
  EXPECT_EQ(executor.statistics().live_tasks, 0u);
}

spindle::task<std::vector<int>> join_set_in_sleep_order() {
  spindle::join_set<int> set;
  // Spawned in reverse order of their deadlines: completion order is host-time order.
  for (int i = 5; i >= 1; --i) set.spawn(sleep_then(std::chrono::milliseconds(i), i));
  co_return co_await set.join_all();
}

TEST(EmbeddedTasks, JoinSetCollectsChildrenInCompletionOrder) {
  test_host host;
  embedded_executor executor(host);
  EXPECT_EQ(spindle::testing::run_embedded(host, executor, join_set_in_sleep_order()),
            (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(executor.statistics().live_tasks, 0u);
}

spindle::task<void> locked_increments(spindle::mutex& m, int& counter, int& inside,
                                      int& max_inside, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    auto held = co_await m.lock();
    max_inside = std::max(max_inside, ++inside);
    co_await spindle::yield_now();  // others run (and queue on the mutex) meanwhile
    ++counter;
    --inside;
  }
}

TEST(EmbeddedTasks, MutexSerialisesEmbeddedTasks) {
  test_host host;
  embedded_executor executor(host);
  spindle::mutex m;
  int counter = 0, inside = 0, max_inside = 0;
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 8; ++i) {
    handles.push_back(executor.spawn(locked_increments(m, counter, inside, max_inside, 25)));
  }
  host.run_until_idle(executor);
  for (auto& h : handles) ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(counter, 200);
  EXPECT_EQ(max_inside, 1);
  EXPECT_FALSE(m.is_locked());
}

spindle::task<void> limited_section(spindle::semaphore& s, int& inside, int& max_inside) {
  for (int r = 0; r < 10; ++r) {
    co_await s.acquire();
    max_inside = std::max(max_inside, ++inside);
    co_await spindle::yield_now();
    --inside;
    s.release();
  }
}

TEST(EmbeddedTasks, SemaphoreLimitsConcurrentEmbeddedTasks) {
  test_host host;
  embedded_executor executor(host);
  spindle::semaphore slots(2);
  int inside = 0, max_inside = 0;
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 6; ++i) {
    handles.push_back(executor.spawn(limited_section(slots, inside, max_inside)));
  }
  host.run_until_idle(executor);
  for (auto& h : handles) ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(max_inside, 2);
  EXPECT_EQ(slots.available(), 2u);
}

spindle::task<void> produce(spindle::channel<int>& ch, int n) {
  for (int i = 1; i <= n; ++i) co_await ch.send(i);
  ch.close();
}
spindle::task<long> consume(spindle::channel<int>& ch) {
  long sum = 0;
  int previous = 0;
  for (;;) {
    std::optional<int> v = co_await ch.receive();
    if (!v) break;
    if (*v != previous + 1) co_return -1;  // out of order
    previous = *v;
    sum += *v;
  }
  co_return sum;
}

TEST(EmbeddedTasks, ChannelCarriesItemsInOrderBetweenEmbeddedTasks) {
  test_host host;
  embedded_executor executor(host);
  spindle::channel<int> ch(4);
  auto consumer = executor.spawn(consume(ch));
  auto producer = executor.spawn(produce(ch, 500));
  host.run_until_idle(executor);
  ASSERT_TRUE(consumer.is_finished() && producer.is_finished());
  EXPECT_EQ(consumer.join(), 500L * 501 / 2);
}

spindle::task<void> send_later(spindle::oneshot_sender<int> tx) {
  co_await spindle::yield_now();
  tx.send(42);
}
spindle::task<int> receive_one(spindle::oneshot_receiver<int> rx) { co_return co_await rx; }

TEST(EmbeddedTasks, OneshotDeliversBetweenEmbeddedTasks) {
  test_host host;
  embedded_executor executor(host);
  auto [tx, rx] = spindle::oneshot<int>();
  auto receiver = executor.spawn(receive_one(std::move(rx)));
  auto sender = executor.spawn(send_later(std::move(tx)));
  host.run_until_idle(executor);
  ASSERT_TRUE(receiver.is_finished());
  EXPECT_EQ(receiver.join(), 42);
}

spindle::task<void> work_then_done(spindle::wait_group& wg, int ms, std::atomic<int>& finished) {
  co_await spindle::sleep_for(std::chrono::milliseconds(ms));
  finished.fetch_add(1);
  wg.done();
}
spindle::task<int> wait_for_group(spindle::wait_group& wg, std::atomic<int>& finished) {
  co_await wg.wait();
  co_return finished.load();
}

TEST(EmbeddedTasks, WaitGroupWaitsForAllEmbeddedTasks) {
  test_host host;
  embedded_executor executor(host);
  spindle::wait_group wg;
  std::atomic<int> finished{0};
  wg.add(5);
  auto waiter = executor.spawn(wait_for_group(wg, finished));
  std::vector<spindle::join_handle<void>> workers;
  for (int i = 1; i <= 5; ++i) workers.push_back(executor.spawn(work_then_done(wg, i, finished)));
  spindle::testing::drive_until_finished(host, executor, waiter);
  EXPECT_EQ(waiter.join(), 5);
}

// ================================================================================================
// 10. Long chains of synchronously completing awaits
// ================================================================================================

spindle::task<void> immediate_void() { co_return; }

spindle::task<long> loop_of_awaits(long n) {
  long total = 0;
  for (long i = 0; i < n; ++i) total += co_await spindle::testing::immediate();
  for (long i = 0; i < n; ++i) co_await immediate_void();
  co_return total;
}

spindle::task<long> depth(long n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await depth(n - 1);
}

TEST(EmbeddedChains, MillionAwaitsInALoopRunWithoutStackGrowth) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(loop_of_awaits(1'000'000));
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 1'000'000);
  // The cooperative budget made it yield now and then: many runs, spread over ticks.
  EXPECT_GT(executor.statistics().tasks_run, 1u);
}

TEST(EmbeddedChains, MillionDeepRecursiveChainRunsWithoutStackGrowth) {
  test_host host;
  embedded_executor executor(host);
  // A million frames alive at once: slow under ThreadSanitizer only, and the stack is no
  // different there (AddressSanitizer, whose frames are larger, keeps the full depth).
  const long n = spindle::testing::under_tsan ? 200'000 : 1'000'000;
  auto h = executor.spawn(depth(n));
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), n);
}

// ================================================================================================
// 13. statistics()
// ================================================================================================

TEST(EmbeddedStatistics, CountsLiveQueuedAndBlockedTasks) {
  test_host host;
  std::atomic<int> destroyed{0};
  embedded_executor executor(host, {.tasks_per_tick = 4, .tasks_per_execute_phase = 32});
  spindle::event gate;
  std::atomic<int> done{0};
  std::vector<spindle::join_handle<void>> waiters;
  for (int i = 0; i < 3; ++i) waiters.push_back(executor.spawn(wait_and_count(gate, done)));
  auto yielder = executor.spawn(spindle::testing::forever_yielding(frame_counter(destroyed)));
  auto quick_a = executor.spawn(spindle::testing::value(1));
  auto quick_b = executor.spawn(spindle::testing::value(2));

  auto s = executor.statistics();
  EXPECT_EQ(s.live_tasks, 6u);
  EXPECT_EQ(s.queued_tasks, 0u);  // still on the action queue: not taken by a service phase yet

  // Tick 1 runs the three waiters (they block) and the yielder (budget 4 used up).
  executor.tick();
  s = executor.statistics();
  EXPECT_EQ(s.tasks_run, 4u);
  EXPECT_EQ(s.live_tasks, 6u);
  EXPECT_EQ(s.queued_tasks, 3u);   // quick_a, quick_b, the yielder
  EXPECT_EQ(s.blocked_tasks, 3u);  // the waiters

  // Tick 2: quick_a, quick_b, the yielder twice.
  executor.tick();
  s = executor.statistics();
  EXPECT_EQ(s.tasks_run, 8u);
  EXPECT_EQ(s.live_tasks, 4u);
  EXPECT_EQ(s.queued_tasks, 1u);
  EXPECT_EQ(s.blocked_tasks, 3u);
  EXPECT_TRUE(quick_a.is_finished() && quick_b.is_finished());

  // A foreign wake-up sits on the action queue: the waiters stay blocked until a service phase.
  gate.set();
  s = executor.statistics();
  EXPECT_EQ(s.queued_tasks, 1u);
  EXPECT_EQ(s.blocked_tasks, 3u);
  executor.tick();
  s = executor.statistics();
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(s.live_tasks, 1u);
  EXPECT_EQ(s.queued_tasks, 1u);
  EXPECT_EQ(s.blocked_tasks, 0u);
  EXPECT_EQ(s.foreign_wakes, 6u + 3u);  // six spawns from outside a tick, three wake-ups

  yielder.cancel();
  executor.tick();
  s = executor.statistics();
  EXPECT_EQ(s.live_tasks, 0u);
  EXPECT_EQ(s.queued_tasks, 0u);
  EXPECT_EQ(s.blocked_tasks, 0u);
  EXPECT_TRUE(spindle::testing::joined_cancelled(yielder));
  EXPECT_EQ(destroyed.load(), 1);
}

spindle::task<std::uint64_t> blocked_count_seen_while_running() {
  co_return embedded_executor::current()->statistics().blocked_tasks;
}

// statistics() asked from a task (the ticking thread, as the header allows): the running task is
// not blocked ("live tasks neither queued nor running"); the only live task is that one.
TEST(EmbeddedStatistics, RunningTaskIsNotCountedAsBlocked) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(blocked_count_seen_while_running());
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 0u);
}


// ================================================================================================
// More: timers after cancellation, spawning from threads, ticking threads, plain callables
// ================================================================================================

TEST(EmbeddedTimers, CancelledEarlierTimerCostsTheHostAtMostOneSpareTick) {
  test_host host;
  embedded_executor executor(host);
  const auto start = host.now();
  // Same level-1 slot of the wheel (64 ms slots): removing the earlier one leaves a stale bound.
  std::atomic<bool> saw_cancel{false};
  auto early = executor.spawn(sleep_reporting_cancel(saw_cancel));  // 1 h: replaced below
  auto a = executor.spawn(sleep_then(70ms, 1));
  auto b = executor.spawn(sleep_then(100ms, 2));
  host.run_until_idle(executor);
  EXPECT_EQ(host.requested_at, start + 70ms);
  a.cancel();
  early.cancel();
  host.run_until_idle(executor);
  EXPECT_TRUE(a.is_finished() && early.is_finished());
  // Whatever bound the host was told, a host that ticks whenever a tick is due stops soon and
  // ends up asked for the true deadline.
  host.set(start + 75ms);
  EXPECT_LE(host.run_until_idle(executor), 2u);
  EXPECT_FALSE(b.is_finished());
  EXPECT_EQ(executor.next_deadline(), start + 100ms);
  EXPECT_EQ(host.requested_at, start + 100ms);
  host.set(start + 100ms);
  host.run_until_idle(executor);
  ASSERT_TRUE(b.is_finished());
  EXPECT_EQ(b.join(), 2);
  EXPECT_TRUE(no_consecutive_duplicates(host.tick_at_requests));
}

spindle::task<void> count_run(std::atomic<int>& runs, const embedded_executor* ex,
                              std::atomic<bool>& ran_outside_tick) {
  if (embedded_executor::current() != ex) ran_outside_tick.store(true);
  runs.fetch_add(1);
  co_return;
}

TEST(EmbeddedForeign, SpawnsFromManyThreadsWhileTheHostTicksRunEachTaskOnce) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 16, .tasks_per_execute_phase = 4});
  constexpr int threads = 3;
  constexpr int per_thread = spindle::testing::under_tsan ? 200 : 1000;
  std::atomic<int> runs{0};
  std::atomic<bool> ran_outside_tick{false};
  std::vector<std::vector<spindle::join_handle<void>>> handles(threads);
  std::vector<std::thread> spawners;
  for (int t = 0; t < threads; ++t) {
    spawners.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        handles[t].push_back(executor.spawn(count_run(runs, &executor, ran_outside_tick)));
      }
    });
  }
  while (runs.load() < threads * per_thread) {
    host.wait_for_soon_request();
    host.run_until_idle(executor);
  }
  for (auto& t : spawners) t.join();
  host.run_until_idle(executor);
  EXPECT_EQ(runs.load(), threads * per_thread);
  EXPECT_FALSE(ran_outside_tick.load());
  const auto s = executor.statistics();
  EXPECT_EQ(s.tasks_run, std::uint64_t(threads * per_thread));
  EXPECT_EQ(s.foreign_wakes, std::uint64_t(threads * per_thread));
  EXPECT_EQ(s.live_tasks, 0u);
  for (auto& per : handles) {
    for (auto& h : per) EXPECT_EQ(h.status(), spindle::task_status::completed);
  }
}

spindle::task<int> spawn_sleep_and_sum(int n) {
  std::vector<spindle::join_handle<int>> children;
  for (int i = 1; i <= n; ++i) {
    children.push_back(spindle::spawn(sleep_then(std::chrono::milliseconds(i), i)));
  }
  int sum = 0;
  for (auto& child : children) sum += co_await std::move(child);
  co_return sum;
}

TEST(EmbeddedExecutor, SuccessiveTicksMayComeFromDifferentThreads) {
  test_host host;
  embedded_executor executor(host, {.tasks_per_tick = 3, .tasks_per_execute_phase = 2});
  auto h = executor.spawn(spawn_sleep_and_sum(10));
  int ticks = 0;
  while (!h.is_finished() && ticks < 1000) {
    // The host orders its ticks (here by joining each thread): any thread may run the next one.
    std::thread ticker([&] {
      executor.tick();
      if (!executor.has_ready_work() && host.take_soon_requests() == 0) {
        host.set(std::max(host.now(), executor.next_deadline()));
      }
    });
    ticker.join();
    ++ticks;
  }
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 55);
  EXPECT_EQ(executor.statistics().live_tasks, 0u);
}

TEST(EmbeddedExecutor, PlainCallableRunsInsideATick) {
  test_host host;
  embedded_executor executor(host);
  const embedded_executor* seen = nullptr;
  auto h = executor.spawn([&seen] {
    seen = embedded_executor::current();
    return 11;
  });
  EXPECT_EQ(seen, nullptr);
  executor.tick();
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(seen, &executor);
  EXPECT_EQ(h.join(), 11);
}

spindle::task<int> throws_after_yield() {
  co_await spindle::yield_now();
  throw spindle::testing::boom();
}
spindle::task<int> catches_child_exception() {
  try {
    co_return co_await spindle::spawn(throws_after_yield());
  } catch (const spindle::testing::boom&) {
    co_return -7;
  }
}

TEST(EmbeddedExecutor, ExceptionsReachJoinersInsideAndOutsideTheExecutor) {
  test_host host;
  embedded_executor executor(host);
  auto inner = executor.spawn(catches_child_exception());
  auto outer = executor.spawn(throws_after_yield());
  host.run_until_idle(executor);
  EXPECT_EQ(inner.join(), -7);
  EXPECT_EQ(outer.status(), spindle::task_status::failed);
  EXPECT_THROW(outer.join(), spindle::testing::boom);
}

// --- an embedded executor driven from inside a runtime task ----------------------------------

struct nested_report {
  bool io_refused = false;
  bool child_on_embedded = false;
  int slept = 0;
};

spindle::task<nested_report> embedded_body(const embedded_executor* ex, int fd) {
  nested_report report;
  report.io_refused = co_await read_from_inside(fd);
  report.child_on_embedded = co_await spindle::spawn(runs_on(ex));
  report.slept = co_await sleep_then(5ms, 3);
  co_return report;
}

// A runtime task that owns a host and an embedded executor and drives it to completion.
spindle::task<nested_report> host_loop_in_a_runtime_task(int fd) {
  test_host host;
  embedded_executor executor(host);
  auto h = executor.spawn(embedded_body(&executor, fd));
  while (!h.is_finished()) {
    host.run_until_idle(executor);
    if (!h.is_finished()) host.set(std::max(host.now(), executor.next_deadline()));
  }
  // The runtime task is itself again: yielding goes to the runtime.
  co_await spindle::yield_now();
  co_return co_await std::move(h);
}

TEST(EmbeddedExecutor, TickedFromARuntimeWorkerItsTasksStillRefuseIoAndStayEmbedded) {
  spindle::runtime rt({.workers = 1});
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const nested_report report = rt.block_on(host_loop_in_a_runtime_task(fd));
  EXPECT_TRUE(report.io_refused);
  EXPECT_TRUE(report.child_on_embedded);
  EXPECT_EQ(report.slept, 3);
}

// --- run_on(rt, ...) from an embedded task --------------------------------------------------

struct counting_function {
  std::atomic<int>* calls;
  int operator()() const {
    calls->fetch_add(1);
    return 0;
  }
};

spindle::task<bool> run_on_from_inside(spindle::runtime& rt, const counting_function& f) {
  try {
    (void)spindle::run_on(rt, f);
  } catch (const spindle::usage_error&) {
    co_return true;
  }
  co_return false;
}

// run_on from an embedded task (a thread that runs a task but is no runtime worker) refuses
// before anything is spawned: a spawned-then-refused call left an orphan holding a reference to
// the caller's callable (found by this test; fixed in fork_join.hpp).
TEST(EmbeddedUsage, RunOnFromAnEmbeddedTaskRefusesBeforeSpawning) {
  spindle::runtime rt({.workers = 1});
  test_host host;
  embedded_executor executor(host);
  std::atomic<int> calls{0};
  const counting_function f{&calls};
  auto h = executor.spawn(run_on_from_inside(rt, f));
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_TRUE(h.join());  // refused...
  EXPECT_TRUE(spindle::testing::eventually([&rt] { return rt.live_tasks() == 0; }));
  EXPECT_EQ(calls.load(), 0);  // ...and `f` never ran
}


spindle::task<bool> run_on_temporary_from_inside(spindle::runtime& rt, std::atomic<int>& calls) {
  try {
    (void)spindle::run_on(rt, [&calls] {
      calls.fetch_add(1);
      return 0;
    });
  } catch (const spindle::usage_error&) {
    co_return true;
  }
  co_return false;
}

// The same with the usual temporary lambda: an orphaned runtime task would call a callable whose
// lifetime ended with run_on's full-expression (AddressSanitizer with
// ASAN_OPTIONS=detect_stack_use_after_return=1 reported a stack-use-after-return before the fix).
TEST(EmbeddedUsage, RunOnWithATemporaryCallableFromAnEmbeddedTaskLeavesNoOrphan) {
  spindle::runtime rt({.workers = 1});
  spindle::testing::executor_blocker blocker(rt);  // the orphan cannot run before we look
  test_host host;
  embedded_executor executor(host);
  std::atomic<int> calls{0};
  auto h = executor.spawn(run_on_temporary_from_inside(rt, calls));
  host.run_until_idle(executor);
  EXPECT_TRUE(h.join());  // the embedded task and its frame are gone
  EXPECT_EQ(rt.live_tasks(), 1u);  // only the blocker: nothing was left spawned
  blocker.release();
  EXPECT_TRUE(spindle::testing::eventually([&rt] { return rt.live_tasks() == 0; }));
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
