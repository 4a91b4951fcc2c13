// Behaviour of spawn / join_handle / runtime: results and exceptions through join and co_await,
// usage errors, spawn_on, block_on, status polling, generational ids, runtime lifecycle
// (thousands of runtimes, destruction from one of its own workers).
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <latch>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

spindle::task<int> fail_with(int code) {
  throw custom_error{code};
  co_return 0;
}

// --- spawn and join --------------------------------------------------------------------------

TEST(Spawn, JoinReturnsTheValue) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.spawn(value(5)).join(), 5);
  auto h = rt.spawn([] { return std::string("callable"); });
  EXPECT_EQ(h.join(), "callable");
  std::atomic<int> ran{0};
  rt.spawn([&ran] { ran.store(1); }).join();
  EXPECT_EQ(ran.load(), 1);
  auto p = rt.spawn([] { return std::make_unique<int>(3); }).join();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 3);
}

TEST(Spawn, BlockOn) {
  spindle::runtime rt({.workers = 1});
  EXPECT_EQ(rt.block_on(value(11)), 11);
  EXPECT_THROW(rt.block_on(fail_with(1)), custom_error);
}

TEST(Spawn, ExceptionsPropagateThroughJoin) {
  spindle::runtime rt({.workers = 2});
  try {
    rt.spawn(fail_with(3)).join();
    FAIL();
  } catch (const custom_error& e) {
    EXPECT_EQ(e.code, 3);
  }
  EXPECT_THROW(rt.spawn([]() -> int { throw std::out_of_range("x"); }).join(), std::out_of_range);
}

spindle::task<int> await_children(int n) {
  std::vector<spindle::join_handle<int>> children;
  for (int i = 0; i < n; ++i) children.push_back(spindle::spawn(value(i)));
  int sum = 0;
  for (auto& c : children) sum += co_await std::move(c);
  co_return sum;
}
spindle::task<int> await_failing_child(int code) {
  auto child = spindle::spawn(fail_with(code));
  try {
    co_await std::move(child);
  } catch (const custom_error& e) {
    co_return e.code * 2;
  }
  co_return -1;
}
spindle::task<int> rethrow_failing_child(int code) { co_return co_await spindle::spawn(fail_with(code)); }

TEST(Spawn, AwaitHandlesInsideTasks) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.block_on(await_children(100)), 99 * 100 / 2);
  EXPECT_EQ(rt.block_on(await_failing_child(21)), 42);
  try {
    rt.block_on(rethrow_failing_child(8));
    FAIL();
  } catch (const custom_error& e) {
    EXPECT_EQ(e.code, 8);
  }
}

// A child that is still running when its parent awaits it (the parent really suspends).
spindle::task<int> slow_child(std::atomic<bool>& go) {
  co_await yield_until(go);
  co_return 9;
}
spindle::task<int> parent_of_slow(std::atomic<bool>& go, std::atomic<bool>& parent_waiting) {
  auto child = spindle::spawn(slow_child(go));
  parent_waiting.store(true);
  co_return co_await std::move(child);
}

TEST(Spawn, AwaitingAChildThatIsStillRunning) {
  spindle::runtime rt({.workers = 2});
  std::atomic<bool> go{false}, parent_waiting{false};
  auto h = rt.spawn(parent_of_slow(go, parent_waiting));
  ASSERT_TRUE(eventually([&] { return parent_waiting.load(); }));
  EXPECT_FALSE(h.is_finished());
  go.store(true);
  EXPECT_EQ(h.join(), 9);
}

// --- usage errors ----------------------------------------------------------------------------

spindle::task<int> await_twice() {
  auto h = spindle::spawn(value(1));
  int first = co_await h;
  try {
    co_await h;
  } catch (const spindle::usage_error&) {
    co_return first + 100;
  }
  co_return -1;
}

TEST(SpawnUsage, AwaitingAHandleTwiceIsAUsageError) {
  spindle::runtime rt({.workers = 1});
  EXPECT_EQ(rt.block_on(await_twice()), 101);
}

TEST(SpawnUsage, JoinTwiceOrAfterDetachIsAUsageError) {
  spindle::runtime rt({.workers = 1});
  auto h = rt.spawn(value(1));
  EXPECT_EQ(h.join(), 1);
  EXPECT_FALSE(h.valid());
  EXPECT_THROW(h.join(), spindle::usage_error);
  EXPECT_THROW((void)h.status(), spindle::usage_error);
  EXPECT_THROW((void)h.is_finished(), spindle::usage_error);
  EXPECT_THROW((void)h.id(), spindle::usage_error);
  EXPECT_THROW(h.cancel(), spindle::usage_error);

  auto d = rt.spawn(value(2));
  d.detach();
  EXPECT_FALSE(d.valid());
  EXPECT_THROW(d.join(), spindle::usage_error);

  spindle::join_handle<int> empty;
  EXPECT_THROW(empty.join(), spindle::usage_error);
  auto moved_from = rt.spawn(value(3));
  auto target = std::move(moved_from);
  EXPECT_THROW(moved_from.join(), spindle::usage_error);
  EXPECT_EQ(target.join(), 3);
}

spindle::task<bool> join_on_worker() {
  auto h = spindle::spawn(value(1));
  bool refused = false;
  try {
    (void)h.join();
  } catch (const spindle::usage_error&) {
    refused = true;
  }
  // The handle is still usable after the refused join.
  const int v = co_await std::move(h);
  co_return refused && v == 1;
}

TEST(SpawnUsage, BlockingJoinOnAWorkerIsAUsageError) {
  spindle::runtime rt({.workers = 2});
  EXPECT_TRUE(rt.block_on(join_on_worker()));
  // Also from a plain callable running on a worker, and for block_on.
  EXPECT_THROW(rt.spawn([&rt] { return rt.block_on(value(1)); }).join(), spindle::usage_error);
}

TEST(SpawnUsage, WorkerCounts) {
  EXPECT_THROW(spindle::runtime({.workers = 100000}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 300}), spindle::usage_error);  // > max_executors
  spindle::runtime defaulted({.workers = 0});                               // one per hardware thread
  EXPECT_GE(defaulted.executor_count(), 1u);
}

TEST(SpawnUsage, SpawnOutsideARuntimeOrOfAnEmptyTask) {
  EXPECT_THROW((void)spindle::spawn(value(1)), spindle::usage_error);
  spindle::runtime rt({.workers = 1});
  EXPECT_THROW((void)rt.spawn(spindle::task<int>()), spindle::usage_error);
  EXPECT_THROW((void)rt.spawn_on(0, spindle::task<int>()), spindle::usage_error);
  EXPECT_THROW((void)rt.spawn_on(1, value(1)), spindle::usage_error);
}

TEST(SpawnUsage, SpawnAfterShutdownIsRefused) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.block_on(value(1)), 1);
  rt.shutdown();
  EXPECT_THROW((void)rt.spawn(value(1)), spindle::runtime_stopped);
  EXPECT_THROW((void)rt.spawn([] { return 1; }), spindle::runtime_stopped);
  EXPECT_THROW((void)rt.spawn_on(0, value(1)), spindle::runtime_stopped);
  EXPECT_THROW((void)rt.block_on(value(1)), spindle::runtime_stopped);
  rt.shutdown();  // idempotent
}

spindle::task<int> spawn_until_refused(std::atomic<bool>& started) {
  started.store(true);
  int spawned = 0;
  for (;;) {
    try {
      spindle::spawn(value(1)).detach();
      ++spawned;
    } catch (const spindle::runtime_stopped&) {
      co_return spawned;
    }
    co_await spindle::yield_now();
  }
}

TEST(SpawnUsage, SpawnInsideATaskDuringShutdownIsRefused) {
  auto rt = std::make_unique<spindle::runtime>(spindle::runtime_options{.workers = 2});
  std::atomic<bool> started{false};
  auto h = rt->spawn(spawn_until_refused(started));
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  rt.reset();
  // Either the task saw runtime_stopped and finished, or it was dropped while queued.
  try {
    EXPECT_GE(h.join(), 0);
  } catch (const spindle::task_cancelled&) {
  }
}

// --- spawn_on --------------------------------------------------------------------------------

TEST(SpawnOn, RunsOnTheChosenExecutor) {
  spindle::runtime rt({.workers = 3});
  for (int round = 0; round < 100; ++round) {
    for (std::uint32_t i = 0; i < 3; ++i) EXPECT_EQ(join_bounded(rt.spawn_on(i, where_am_i())), i);
  }
}

spindle::task<std::uint32_t> spawn_on_from_inside(spindle::runtime& rt, std::uint32_t target) {
  co_return co_await rt.spawn_on(target, where_am_i());
}

TEST(SpawnOn, FromInsideATask) {
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < 100; ++round) {
    EXPECT_EQ(join_bounded(rt.spawn(spawn_on_from_inside(rt, 0))), 0u);
    EXPECT_EQ(join_bounded(rt.spawn(spawn_on_from_inside(rt, 1))), 1u);
  }
}

// Tasks of one runtime spawning onto and awaiting tasks of another (wake-ups cross runtimes).
spindle::task<int> across(spindle::runtime& other, int n) {
  std::vector<spindle::join_handle<std::uint32_t>> remote;
  for (int i = 0; i < n; ++i) remote.push_back(other.spawn(where_am_i()));
  int sum = 0;
  for (auto& h : remote) sum += int(co_await std::move(h) < other.executor_count());
  co_return sum;
}

TEST(Spawn, AcrossRuntimes) {
  spindle::runtime a({.workers = 1});
  spindle::runtime b({.workers = 2});
  for (int round = 0; round < 50; ++round) {
    auto from_a = a.spawn(across(b, 20));
    auto from_b = b.spawn(across(a, 20));
    EXPECT_EQ(join_bounded(std::move(from_a)), 20);
    EXPECT_EQ(join_bounded(std::move(from_b)), 20);
  }
}

// --- status and ids --------------------------------------------------------------------------

TEST(Status, ReportsEachOutcome) {
  spindle::runtime rt({.workers = 2});
  std::atomic<bool> flag{false};
  auto pending = rt.spawn(yield_until(flag));
  EXPECT_EQ(pending.status(), spindle::task_status::pending);
  EXPECT_FALSE(pending.is_finished());
  EXPECT_TRUE(rt.is_live(pending.id()));
  flag.store(true);
  ASSERT_TRUE(eventually([&] { return pending.is_finished(); }));
  EXPECT_EQ(pending.status(), spindle::task_status::completed);
  EXPECT_FALSE(rt.is_live(pending.id()));
  pending.join();

  auto failed = rt.spawn(fail_with(1));
  ASSERT_TRUE(eventually([&] { return failed.is_finished(); }));
  EXPECT_EQ(failed.status(), spindle::task_status::failed);
  EXPECT_THROW(failed.join(), custom_error);

  std::atomic<bool> never{false};
  auto cancelled = rt.spawn(yield_until(never));
  cancelled.cancel();
  ASSERT_TRUE(eventually([&] { return cancelled.is_finished(); }));
  EXPECT_EQ(cancelled.status(), spindle::task_status::cancelled);
  EXPECT_THROW(cancelled.join(), spindle::task_cancelled);
}

TEST(TaskIds, GenerationalAndNeverReused) {
  spindle::runtime rt({.workers = 2});
  auto same = [](spindle::task_id a, spindle::task_id b) { return a == b; };
  std::vector<spindle::task_id> ids;
  for (int i = 0; i < 20000; ++i) {
    auto h = rt.spawn(value(i));
    const spindle::task_id id = h.id();
    EXPECT_EQ(h.join(), i);
    EXPECT_FALSE(rt.is_live(id)) << i;
    ids.push_back(id);
  }
  // Batches keep several slots busy at once, from inside tasks too.
  for (int round = 0; round < 50; ++round) {
    std::vector<spindle::join_handle<int>> hs;
    for (int i = 0; i < 100; ++i) hs.push_back(rt.spawn(value(i)));
    for (auto& h : hs) ids.push_back(h.id());
    for (auto& h : hs) h.join();
  }
  std::set<std::pair<std::uint32_t, std::uint32_t>> unique;
  for (auto id : ids) {
    EXPECT_TRUE(unique.insert({id.index, id.serial}).second)
        << "id (" << id.index << ", " << id.serial << ") given to two tasks";
    EXPECT_FALSE(rt.is_live(id));
  }
  EXPECT_FALSE(rt.is_live(spindle::task_id{}));
  EXPECT_FALSE(rt.is_live(spindle::task_id{123456789u, 0}));
  EXPECT_TRUE(same(ids[0], ids[0]));
  EXPECT_EQ(rt.live_tasks(), 0u);
}

// --- exceptions at scale ---------------------------------------------------------------------

struct error_a {
  int i;
};
struct error_b : std::runtime_error {
  int i;
  explicit error_b(int v) : std::runtime_error("b"), i(v) {}
};

spindle::task<int> throw_kind(int kind, int i) {
  switch (kind) {
    case 0: throw error_a{i};
    case 1: throw error_b(i);
    case 2: throw std::logic_error(std::to_string(i));
    case 3: throw i;
    case 4: throw std::string(std::to_string(i));
    default: co_return i;
  }
}

// Returns the payload if the exception is of the expected kind, else -1.
int observe(int kind, const std::function<int()>& join) {
  try {
    const int v = join();
    return kind == 5 ? v : -1;
  } catch (const error_a& e) {
    return kind == 0 ? e.i : -1;
  } catch (const error_b& e) {
    return kind == 1 ? e.i : -1;
  } catch (const std::logic_error& e) {
    return kind == 2 ? std::stoi(e.what()) : -1;
  } catch (int e) {
    return kind == 3 ? e : -1;
  } catch (const std::string& e) {
    return kind == 4 ? std::stoi(e) : -1;
  } catch (...) {
    return -1;
  }
}

TEST(SpawnExceptions, TenThousandRandomExceptionsEachObservedOnce) {
  spindle::runtime rt({.workers = 2});
  constexpr int n = 10000;
  std::mt19937 rng(12345);
  std::vector<int> kinds(n);
  std::vector<spindle::join_handle<int>> handles;
  for (int i = 0; i < n; ++i) {
    kinds[i] = int(rng() % 6);
    handles.push_back(rt.spawn(throw_kind(kinds[i], i)));
  }
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(observe(kinds[i], [&] { return handles[i].join(); }), i) << "task " << i;
    EXPECT_THROW(handles[i].join(), spindle::usage_error);  // observed once: the handle is spent
  }
}

spindle::task<int> collect_failures(int n) {
  std::vector<spindle::join_handle<int>> children;
  for (int i = 0; i < n; ++i) children.push_back(spindle::spawn(throw_kind(i % 6, i)));
  int correct = 0;
  for (int i = 0; i < n; ++i) {
    try {
      if (co_await std::move(children[i]) == i && i % 6 == 5) ++correct;
    } catch (const error_a& e) {
      correct += (i % 6 == 0 && e.i == i);
    } catch (const error_b& e) {
      correct += (i % 6 == 1 && e.i == i);
    } catch (const std::logic_error& e) {
      correct += (i % 6 == 2 && std::stoi(e.what()) == i);
    } catch (int e) {
      correct += (i % 6 == 3 && e == i);
    } catch (const std::string& e) {
      correct += (i % 6 == 4 && std::stoi(e) == i);
    }
  }
  co_return correct;
}

TEST(SpawnExceptions, ExceptionsThroughAwaitedHandles) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.block_on(collect_failures(3000)), 3000);
}

// --- runtime lifecycle -----------------------------------------------------------------------

TEST(RuntimeLifecycle, CreatedAndDestroyedThousandsOfTimes) {
  constexpr int cycles = under_tsan || under_asan ? 300 : 3000;
  for (int i = 0; i < cycles; ++i) {
    spindle::runtime rt({.workers = std::uint32_t(1 + i % 2)});
    if (i % 3 == 0) {
      EXPECT_EQ(rt.block_on(value(i)), i);
    }
    if (i % 3 == 1) rt.spawn(value(i)).detach();
  }
}

spindle::task<int> destroy_own_runtime(std::unique_ptr<spindle::runtime>& holder,
                                       const std::atomic<bool>& spawn_returned) {
  // Runs on a worker of *holder: destroying it must neither deadlock nor crash. It waits until
  // the spawn that started it has returned: destroying an object while another thread is still
  // inside one of its member functions is the caller's bug, not something to test.
  while (!spawn_returned.load()) spindle::core::cpu_relax();
  holder.reset();
  co_return 1;
}

TEST(RuntimeLifecycle, DestroyedFromOneOfItsOwnWorkers) {
  constexpr int cycles = under_tsan || under_asan ? 50 : 300;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    std::atomic<int> destroyed{0};
    auto holder = std::make_unique<spindle::runtime>(
        spindle::runtime_options{.workers = std::uint32_t(1 + cycle % 2)});
    auto pending = holder->spawn(forever_yielding(frame_counter(destroyed)));
    std::atomic<bool> spawn_returned{false};
    auto killer = holder->spawn(destroy_own_runtime(holder, spawn_returned));
    spawn_returned.store(true);
    EXPECT_EQ(killer.join(), 1);
    // The shutdown finishes on the last worker out: the pending task is destroyed and its joiner
    // woken with task_cancelled.
    EXPECT_THROW(pending.join(), spindle::task_cancelled);
    EXPECT_EQ(destroyed.load(), 1);
    EXPECT_EQ(holder, nullptr);
  }
}

}  // namespace
