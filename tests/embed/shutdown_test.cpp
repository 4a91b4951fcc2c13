// The embedded executor's destructor (embedded_executor.hpp, "Shutdown"): every task still live,
// whatever it waits on or whichever queue holds it, ends exactly once as cancelled, its frames
// destroyed; join handles outlive the executor.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "embed/embed_test_support.hpp"
#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::embed::embedded_executor;
using spindle::testing::frame_counter;
using spindle::testing::test_host;

template <class T>
void expect_cancelled(const spindle::join_handle<T>& h) {
  ASSERT_TRUE(h.valid());
  EXPECT_TRUE(h.is_finished());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
}

spindle::task<int> records_start(frame_counter, std::atomic<bool>& ran) {
  ran.store(true);
  co_return 1;
}

spindle::task<int> blocked_on(frame_counter, spindle::event& e) {
  co_await e.wait();
  co_return 1;
}

spindle::task<int> sleeping(frame_counter, spindle::clock_duration d) {
  co_await spindle::sleep_for(d);
  co_return 1;
}

spindle::task<int> under_timeout(frame_counter, spindle::clock_duration timeout,
                                 spindle::task<int> inner) {
  co_return co_await spindle::with_timeout(timeout, std::move(inner));
}

spindle::task<int> hold_mutex_until(frame_counter, spindle::mutex& m, spindle::event& release) {
  auto held = co_await m.lock();
  co_await release.wait();
  co_return 1;
}

spindle::task<int> lock_once(frame_counter, spindle::mutex& m) {
  auto held = co_await m.lock();
  co_return 2;
}

spindle::task<int> join_other(frame_counter, spindle::join_handle<int> target) {
  co_return co_await std::move(target);
}

spindle::task<int> sum_of_set(frame_counter, std::atomic<int>& destroyed, int n) {
  spindle::join_set<int> set;
  for (int i = 0; i < n; ++i) set.spawn(sleeping(frame_counter(destroyed), 1h));
  int sum = 0;
  for (int v : co_await set.join_all()) sum += v;
  co_return sum;
}

TEST(EmbeddedShutdown, QueuedTasksNeverRunAndEndCancelled) {
  test_host host;
  std::atomic<int> destroyed{0};
  std::atomic<bool> ran{false};
  std::vector<spindle::join_handle<int>> handles;
  {
    embedded_executor executor(host);
    for (int i = 0; i < 5; ++i) {
      handles.push_back(executor.spawn(records_start(frame_counter(destroyed), ran)));
    }
    EXPECT_EQ(executor.statistics().live_tasks, 5u);
  }
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(destroyed.load(), 5);
  for (auto& h : handles) expect_cancelled(h);
}

TEST(EmbeddedShutdown, TasksBlockedOnAnEventEndCancelledAndUnlinkThemselves) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::event e;  // outlives the executor
  std::vector<spindle::join_handle<int>> handles;
  {
    embedded_executor executor(host);
    for (int i = 0; i < 4; ++i) {
      handles.push_back(executor.spawn(blocked_on(frame_counter(destroyed), e)));
    }
    host.run_until_idle(executor);
    EXPECT_EQ(e.waiting(), 4u);
  }
  EXPECT_EQ(destroyed.load(), 4);
  EXPECT_EQ(e.waiting(), 0u);
  for (auto& h : handles) expect_cancelled(h);
  e.set();  // harmless: nobody is queued any more
}

TEST(EmbeddedShutdown, SleepingTasksEndCancelled) {
  test_host host;
  std::atomic<int> destroyed{0};
  std::vector<spindle::join_handle<int>> handles;
  {
    embedded_executor executor(host);
    handles.push_back(executor.spawn(sleeping(frame_counter(destroyed), 5ms)));
    handles.push_back(executor.spawn(sleeping(frame_counter(destroyed), 1h)));
    handles.push_back(executor.spawn(sleeping(frame_counter(destroyed), 24h * 400)));
    host.run_until_idle(executor);
    EXPECT_EQ(executor.statistics().blocked_tasks, 3u);
  }
  EXPECT_EQ(destroyed.load(), 3);
  for (auto& h : handles) expect_cancelled(h);
}

TEST(EmbeddedShutdown, TaskInTheMiddleOfWithTimeoutEndsCancelledWithItsChild) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::join_handle<int> h;
  {
    embedded_executor executor(host);
    h = executor.spawn(under_timeout(frame_counter(destroyed), 50ms,
                                     sleeping(frame_counter(destroyed), 1h)));
    host.run_until_idle(executor);
    EXPECT_EQ(executor.statistics().live_tasks, 2u);  // the parent and with_timeout's child
    host.advance(10ms);  // not yet due
    executor.tick();
  }
  EXPECT_EQ(destroyed.load(), 2);
  expect_cancelled(h);
}

TEST(EmbeddedShutdown, TaskWhoseTimeoutFiredButHasNotRunEndsCancelled) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::join_handle<int> h;
  {
    // One task per tick: the timeout fires in the tick's first service phase, its deferred
    // cancel runs, and the child's unwinding is still queued when the executor goes.
    embedded_executor executor(host, {.tasks_per_tick = 1, .tasks_per_execute_phase = 1});
    h = executor.spawn(under_timeout(frame_counter(destroyed), 50ms,
                                     sleeping(frame_counter(destroyed), 1h)));
    host.run_until_idle(executor);
    host.advance(50ms);
    executor.tick();
    EXPECT_FALSE(h.is_finished());
  }
  EXPECT_EQ(destroyed.load(), 2);
  expect_cancelled(h);
}

TEST(EmbeddedShutdown, MutexHolderAndItsWaitersEndCancelledAndTheMutexEndsUnlocked) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::mutex m;          // outlive the executor
  spindle::event never;
  spindle::join_handle<int> holder;
  std::vector<spindle::join_handle<int>> waiters;
  {
    embedded_executor executor(host);
    holder = executor.spawn(hold_mutex_until(frame_counter(destroyed), m, never));
    for (int i = 0; i < 3; ++i) {
      waiters.push_back(executor.spawn(lock_once(frame_counter(destroyed), m)));
    }
    host.run_until_idle(executor);
    EXPECT_TRUE(m.is_locked());
    EXPECT_EQ(m.waiting(), 3u);
  }
  // Destroying the holder's frame unlocks, which hands the lock to a waiter that will never run;
  // destroying that waiter passes it on, and so on: nothing is left locked or queued.
  EXPECT_EQ(destroyed.load(), 4);
  EXPECT_FALSE(m.is_locked());
  EXPECT_EQ(m.waiting(), 0u);
  expect_cancelled(holder);
  for (auto& h : waiters) expect_cancelled(h);
}

TEST(EmbeddedShutdown, JoinedTaskAndItsJoinersEndCancelled) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::event never;
  spindle::join_handle<int> outer;
  {
    embedded_executor executor(host);
    auto target = executor.spawn(blocked_on(frame_counter(destroyed), never));
    auto middle = executor.spawn(join_other(frame_counter(destroyed), std::move(target)));
    outer = executor.spawn(join_other(frame_counter(destroyed), std::move(middle)));
    host.run_until_idle(executor);
    EXPECT_EQ(executor.statistics().blocked_tasks, 3u);
  }
  EXPECT_EQ(destroyed.load(), 3);
  expect_cancelled(outer);
}

TEST(EmbeddedShutdown, JoinSetOwnerAndChildrenEndCancelled) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::join_handle<int> owner;
  {
    embedded_executor executor(host);
    owner = executor.spawn(sum_of_set(frame_counter(destroyed), destroyed, 4));
    host.run_until_idle(executor);
    EXPECT_EQ(executor.statistics().live_tasks, 5u);
  }
  EXPECT_EQ(destroyed.load(), 5);
  expect_cancelled(owner);
}

TEST(EmbeddedShutdown, TasksOnTheRunQueueAndTheActionQueueEndOnce) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::event wake;
  spindle::join_handle<void> yielder;
  spindle::join_handle<int> woken;
  {
    embedded_executor executor(host, {.tasks_per_tick = 8, .tasks_per_execute_phase = 2});
    woken = executor.spawn(blocked_on(frame_counter(destroyed), wake));
    yielder = executor.spawn(spindle::testing::forever_yielding(frame_counter(destroyed)));
    executor.tick();
    std::thread setter([&wake] { wake.set(); });  // onto the action queue
    setter.join();
    const auto s = executor.statistics();
    EXPECT_EQ(s.queued_tasks, 1u);  // the yielder, left on the run queue by the tick's budget
    EXPECT_TRUE(executor.has_ready_work());
  }
  EXPECT_EQ(destroyed.load(), 2);
  expect_cancelled(yielder);
  expect_cancelled(woken);
}

TEST(EmbeddedShutdown, EverythingAtOnceEndsExactlyOnce) {
  test_host host;
  std::atomic<int> destroyed{0};
  std::atomic<bool> ran{false};
  spindle::event never;
  spindle::event woken_later;
  spindle::mutex m;
  std::vector<spindle::join_handle<int>> handles;
  int frames = 0;
  {
    embedded_executor executor(host, {.tasks_per_tick = 16, .tasks_per_execute_phase = 4});
    for (int round = 0; round < 3; ++round) {
      handles.push_back(executor.spawn(blocked_on(frame_counter(destroyed), never)));
      handles.push_back(executor.spawn(sleeping(frame_counter(destroyed), 1h)));
      handles.push_back(executor.spawn(under_timeout(frame_counter(destroyed), 1h,
                                                     sleeping(frame_counter(destroyed), 2h))));
      handles.push_back(executor.spawn(hold_mutex_until(frame_counter(destroyed), m, never)));
      handles.push_back(executor.spawn(lock_once(frame_counter(destroyed), m)));
      handles.push_back(executor.spawn(blocked_on(frame_counter(destroyed), woken_later)));
      auto target = executor.spawn(sleeping(frame_counter(destroyed), 3h));
      handles.push_back(executor.spawn(join_other(frame_counter(destroyed), std::move(target))));
      frames += 9;
    }
    host.run_until_idle(executor);
    woken_later.set();  // three wake-ups left on the action queue
    for (int i = 0; i < 3; ++i) {
      handles.push_back(executor.spawn(records_start(frame_counter(destroyed), ran)));
      frames += 1;
    }
  }
  EXPECT_EQ(destroyed.load(), frames);
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(m.is_locked());
  for (auto& h : handles) expect_cancelled(h);
}

TEST(EmbeddedShutdown, HandleOutlivingTheExecutorIsSafeToUse) {
  test_host host;
  std::atomic<int> destroyed{0};
  spindle::event never;
  spindle::join_handle<int> h;
  spindle::join_handle<int> done;
  spindle::task_id id;
  {
    embedded_executor executor(host);
    h = executor.spawn(blocked_on(frame_counter(destroyed), never));
    done = executor.spawn(spindle::testing::value(5));
    id = h.id();
    host.run_until_idle(executor);
  }
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_TRUE(h.is_finished());
  EXPECT_EQ(h.status(), spindle::task_status::cancelled);
  EXPECT_EQ(h.id(), id);
  h.cancel();  // a no-op now
  EXPECT_TRUE(spindle::testing::joined_cancelled(h));
  EXPECT_FALSE(h.valid());
  EXPECT_EQ(done.status(), spindle::task_status::completed);  // finished before: keeps its value
  EXPECT_EQ(done.join(), 5);
}

// Spawns on `executor` from its destructor (run when the frame holding it is destroyed) and
// records whether the spawn was refused with runtime_stopped.
struct spawn_when_destroyed {
  embedded_executor* executor;
  std::atomic<int>* refused;
  spawn_when_destroyed(embedded_executor& e, std::atomic<int>& r) : executor(&e), refused(&r) {}
  spawn_when_destroyed(spawn_when_destroyed&& other) noexcept
      : executor(std::exchange(other.executor, nullptr)), refused(other.refused) {}
  ~spawn_when_destroyed() {
    if (executor == nullptr) return;
    try {
      executor->spawn(spindle::testing::value(1)).detach();
    } catch (const spindle::runtime_stopped&) {
      refused->fetch_add(1);
    }
  }
};

spindle::task<int> holds_spawner(spawn_when_destroyed, spindle::event& e) {
  co_await e.wait();
  co_return 1;
}

TEST(EmbeddedShutdown, SpawnFromAFrameDestroyedDuringShutdownThrowsRuntimeStopped) {
  test_host host;
  spindle::event never;
  std::atomic<int> refused{0};
  spindle::join_handle<int> h;
  {
    embedded_executor executor(host);
    h = executor.spawn(holds_spawner(spawn_when_destroyed(executor, refused), never));
    host.run_until_idle(executor);
  }
  EXPECT_EQ(refused.load(), 1);
  expect_cancelled(h);
}


spindle::task<int> destroy_executor(std::unique_ptr<embedded_executor>& victim) {
  victim.reset();  // from inside a task of another executor, on the same host thread
  co_return 1;
}

spindle::task<bool> join_reporting_cancel(spindle::join_handle<int> target) {
  try {
    (void)co_await std::move(target);
  } catch (const spindle::task_cancelled&) {
    co_return true;
  }
  co_return false;
}

TEST(EmbeddedShutdown, ExecutorDestroyedFromATaskOfAnotherExecutorWakesForeignJoiners) {
  test_host host_a;
  test_host host_b;
  std::atomic<int> destroyed{0};
  spindle::event never;
  auto a = std::make_unique<embedded_executor>(host_a);
  embedded_executor b(host_b);
  spindle::testing::phase_log log(b);
  auto victim = a->spawn(blocked_on(frame_counter(destroyed), never));
  host_a.run_until_idle(*a);
  auto joiner = b.spawn(join_reporting_cancel(std::move(victim)));
  host_b.run_until_idle(b);
  EXPECT_EQ(b.statistics().blocked_tasks, 1u);
  auto destroyer = b.spawn(destroy_executor(a));
  host_b.take_soon_requests();
  const auto before = b.statistics();
  b.tick();
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(destroyed.load(), 1);
  ASSERT_TRUE(destroyer.is_finished());
  // a's task ended cancelled while a owned the thread: the wake-up of b's joiner was a foreign
  // one (b's action queue), taken by b's next service phase of the same tick.
  ASSERT_TRUE(joiner.is_finished());
  EXPECT_TRUE(joiner.join());
  const auto after = b.statistics();
  EXPECT_EQ(after.foreign_wakes, before.foreign_wakes + 2);  // the destroyer's spawn, the joiner
  EXPECT_EQ(after.execute_phases, before.execute_phases + 2);
  EXPECT_EQ(host_b.take_soon_requests(), 1u);  // the foreign wake-up's request, held to the end
  EXPECT_EQ(b.statistics().live_tasks, 0u);
  EXPECT_EQ(log.ticks().back(), (std::vector<spindle::embed::phase>{
                                    spindle::embed::phase::service, spindle::embed::phase::execute,
                                    spindle::embed::phase::service, spindle::embed::phase::execute,
                                    spindle::embed::phase::service}));
}

}  // namespace
