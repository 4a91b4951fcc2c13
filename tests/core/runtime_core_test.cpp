// Behaviour of runtime_core through spindle::runtime: option validation, the executor registry
// (add_executor while running, dense ids, capacity), the utilisation statistic, and the idle
// coordination (no executor is left parked while work waits).
#include <spindle/spindle.hpp>
#include <spindle/core/executor.hpp>
#include <spindle/core/runtime_core.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;

using spindle::testing::utilisation_of;

// (Coroutine lambdas must not capture: the closure dies before the frame. Free functions here.)
spindle::task<int> count_yields_until(std::atomic<bool>& stop) {
  int n = 0;
  while (!stop.load()) {
    co_await spindle::yield_now();
    ++n;
  }
  co_return n;
}

// --- options ---------------------------------------------------------------------------------

TEST(RuntimeOptions, InvalidOptionsAreUsageErrors) {
  EXPECT_THROW(spindle::runtime({.workers = 100000}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 4097}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 8, .max_executors = 4}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1, .max_executors = 0}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1, .max_executors = 5000}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1, .budget = 0}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1, .injector_check_interval = 0}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1, .local_fairness_interval = 0}), spindle::usage_error);
  EXPECT_THROW(spindle::core::runtime_core({.workers = 1, .budget = 0}), spindle::usage_error);
}

TEST(RuntimeOptions, ZeroWorkersMeansOnePerHardwareThread) {
  // runtime_options documents workers = 0 as "one per hardware thread" (the default).
  spindle::runtime rt;
  const unsigned hw = std::thread::hardware_concurrency();
  EXPECT_EQ(rt.executor_count(), hw == 0 ? 1u : std::min(hw, 256u));
  EXPECT_EQ(rt.block_on(where_am_i()) < rt.executor_count(), true);
}

TEST(RuntimeOptions, SmallBudgetAndIntervalsStillRunEverything) {
  spindle::runtime rt({.workers = 2, .budget = 1, .injector_check_interval = 1,
                       .local_fairness_interval = 1});
  std::atomic<int> ran{0};
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 1000; ++i) handles.push_back(rt.spawn([&ran] { ran.fetch_add(1); }));
  for (auto& h : handles) h.join();
  EXPECT_EQ(ran.load(), 1000);
}

// --- registry --------------------------------------------------------------------------------

TEST(Registry, WorkerStartHookSeesEveryIndexOnce) {
  std::mutex mutex;
  std::multiset<std::uint32_t> started;
  spindle::runtime rt({.workers = 3, .on_worker_start = [&](std::uint32_t i) {
                         std::lock_guard lock(mutex);
                         started.insert(i);
                       }});
  EXPECT_EQ(rt.executor_count(), 3u);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return started.size() == 3;
  }));
  rt.add_executor();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return started.size() == 4;
  }));
  std::lock_guard lock(mutex);
  EXPECT_EQ(started, (std::multiset<std::uint32_t>{0, 1, 2, 3}));
}

TEST(Registry, AddExecutorWhileRunningGivesDenseIds) {
  spindle::runtime rt({.workers = 1, .max_executors = 8});
  EXPECT_EQ(rt.executor_count(), 1u);
  // Keep the runtime busy while executors are added.
  std::atomic<bool> stop{false};
  auto busy = rt.spawn(count_yields_until(stop));
  for (std::uint32_t expected = 1; expected < 8; ++expected) {
    EXPECT_EQ(rt.add_executor(), expected);
    EXPECT_EQ(rt.executor_count(), expected + 1);
  }
  EXPECT_THROW(rt.add_executor(), spindle::usage_error);  // registry full
  EXPECT_EQ(rt.executor_count(), 8u);
  for (std::uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(join_bounded(rt.spawn_on(i, where_am_i())), i);
    EXPECT_EQ(rt.core().executor_at(i).index(), i);
  }
  EXPECT_THROW((void)rt.spawn_on(8, where_am_i()), spindle::usage_error);
  stop.store(true);
  EXPECT_GE(busy.join(), 0);
}

TEST(Registry, ConcurrentAddExecutorGivesEachIndexOnce) {
  spindle::runtime rt({.workers = 1, .max_executors = 64});
  std::mutex mutex;
  std::vector<std::uint32_t> ids;
  std::vector<std::thread> adders;
  for (int t = 0; t < 3; ++t) {
    adders.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        const std::uint32_t id = rt.add_executor();
        std::lock_guard lock(mutex);
        ids.push_back(id);
      }
    });
  }
  // Spawns race with the additions: P2C must only ever pick registered executors.
  std::vector<spindle::join_handle<std::uint32_t>> handles;
  for (int i = 0; i < 2000; ++i) handles.push_back(rt.spawn(where_am_i()));
  for (auto& t : adders) t.join();
  for (auto& h : handles) EXPECT_LT(h.join(), 16u);
  std::sort(ids.begin(), ids.end());
  std::vector<std::uint32_t> expected(15);
  for (std::uint32_t i = 0; i < 15; ++i) expected[i] = i + 1;
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(rt.executor_count(), 16u);
}

TEST(Registry, AddExecutorFromInsideATask) {
  spindle::runtime rt({.workers = 1, .max_executors = 4});
  auto h = rt.spawn([&rt] { return rt.add_executor(); });
  EXPECT_EQ(h.join(), 1u);
  EXPECT_EQ(rt.executor_count(), 2u);
  EXPECT_EQ(join_bounded(rt.spawn_on(1, where_am_i())), 1u);
}

TEST(Registry, AddExecutorAfterShutdownIsRefused) {
  spindle::runtime rt({.workers = 1});
  rt.shutdown();
  EXPECT_THROW(rt.add_executor(), spindle::runtime_stopped);
  EXPECT_EQ(rt.executor_count(), 1u);
}

// Threads of this process (a field of /proc/self/status).
long thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

long descriptor_count() { return spindle::testing::open_descriptor_count(); }

// A runtime whose construction fails after some workers started (here: descriptors run out
// while the executors' reactors are made) must not leave them behind. The started workers hold
// the core alive, and nobody shut them down: each failed construction leaked its running
// worker threads, their reactors' descriptors and the core, for the life of the process.
// The tests' descriptor count (support/descriptors.hpp) leaves out a /proc file another thread
// opens and closes meanwhile, as a worker reads a thread's schedstat: counted when it closed
// between the listing and the reading of its link, it made exact counts in NetTcp and HttpHello
// one too high on CI now and then.
TEST(TestSupport, DescriptorCountIgnoresProcFilesOpenedAndClosedMeanwhile) {
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
    }
  });
  const int before = open_descriptor_count();
  int differing = 0;
  for (int scan = 0; scan < 20'000; ++scan) differing += open_descriptor_count() != before;
  stop.store(true, std::memory_order_relaxed);
  reader.join();
  EXPECT_EQ(differing, 0);
}

TEST(Registry, AConstructionThatFailsPartWayLeavesNoThreadsBehind) {
#if defined(__SANITIZE_ADDRESS__)
  // UBSan's vptr check misreports any exception constructed while no descriptor is free
  // ("member access within address ... which does not point to an object of type
  // 'system_error'"; a five-line program that lowers RLIMIT_NOFILE to 3 and throws
  // std::system_error shows it): the test's own lowered limit trips the sanitizer, not spindle.
  // Release and TSan run it.
  GTEST_SKIP() << "UBSan's vptr check misfires with the descriptor limit exhausted";
#endif
  // One runtime first: what the process starts once with its first threads (ThreadSanitizer's
  // background thread) is then in the baseline.
  { spindle::runtime warm_up({.workers = 1, .io_backend = spindle::core::io_backend::epoll}); }
  const long threads_before = thread_count();
  const long descriptors_before = descriptor_count();
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  bool failed_after_a_worker_started = false;
  // Raise the limit one descriptor at a time, from "no executor fits" to "all eight fit".
  for (long spare = 0; spare < 40 && !failed_after_a_worker_started; ++spare) {
    std::atomic<int> started{0};
    rlimit lowered = original;
    lowered.rlim_cur = rlim_t(descriptors_before + spare);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
    bool threw = false;
    try {
      spindle::runtime rt({.workers = 8,
                           .io_backend = spindle::core::io_backend::epoll,
                           .on_worker_start = [&started](std::uint32_t) { started.fetch_add(1); }});
    } catch (const std::exception&) {
      threw = true;
    }
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
    if (!threw) break;  // every executor fitted
    // A worker counted itself only if its thread ran; the runtime had started at least one.
    failed_after_a_worker_started = started.load() > 0 || thread_count() > threads_before;
    EXPECT_EQ(thread_count(), threads_before) << "with " << spare << " spare descriptors";
    EXPECT_EQ(descriptor_count(), descriptors_before) << "with " << spare << " spare descriptors";
  }
  EXPECT_TRUE(failed_after_a_worker_started) << "no construction failed part-way: nothing tested";
}

TEST(Registry, NewRuntimeStartsIdsAtZero) {
  for (int round = 0; round < 3; ++round) {
    spindle::runtime rt({.workers = 2});
    EXPECT_EQ(rt.add_executor(), 2u);
    EXPECT_EQ(join_bounded(rt.spawn_on(0, where_am_i())), 0u);
  }
}

// --- utilisation -----------------------------------------------------------------------------

// Waits until every executor of `rt` is parked (the executors update the statistic when they
// wake, so a poke only counts once they are asleep).
bool all_parked(spindle::runtime& rt) {
  return eventually([&rt] { return rt.core().unparked_count() == 0; });
}

// A single runnable that keeps the executor busy, never returning to its loop, must be seen as
// busy while it runs (utilisation once read 0.00 for ~1.5 s so, and P2C sent work to it), just
// as a yielding loop is; a long parked stretch must read idle. The statistic is an EWMA with a
// 4 ms time constant, so it is read while the stretch lasts, not after it: a reading taken after
// the runnable ended decays with every millisecond the test thread is kept off a CPU (CI's
// sanitizer runs read 0.27 and 0.42 so). Bounds are generous; the figures are benchmarks'.
bool spin_until_seen_busy(spindle::runtime& rt, std::chrono::milliseconds bound) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < bound) {
    if (utilisation_of(rt, 0) > 0.5) return true;
  }
  return false;
}

spindle::task<bool> busy_without_yielding(spindle::runtime& rt) {
  co_return spin_until_seen_busy(rt, 2s);
}

spindle::task<bool> busy_yielding(spindle::runtime& rt) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 2s) {
    if (utilisation_of(rt, 0) > 0.5) co_return true;
    co_await spindle::yield_now();
  }
  co_return false;
}

TEST(Utilisation, RisesUnderABusyLoopAndFallsWhenIdle) {
  spindle::runtime rt({.workers = 1});
  // Busy: one task yielding in a loop, so the executor keeps cycling through its loop (and its
  // sampling windows). Read while the loop lasts: a reading taken after it decays with every
  // millisecond the test thread waits for a CPU (CI's ASan run read 0.37 after a 50 ms loop).
  EXPECT_TRUE(rt.block_on(busy_yielding(rt))) << "a yielding loop busy for 2 s, never seen busy";
  EXPECT_LE(utilisation_of(rt, 0), 1.0);
  // Idle: let the executor sleep, then poke it so it takes a sample; repeat (bounded).
  double idle = 1.0;
  for (int poke = 0; poke < 200 && idle >= 0.5; ++poke) {
    ASSERT_TRUE(all_parked(rt));
    std::this_thread::sleep_for(5ms);  // the idle time being measured, not synchronisation
    rt.block_on([]() -> spindle::task<void> { co_return; }());
    idle = utilisation_of(rt, 0);
  }
  EXPECT_LT(idle, 0.5);
  EXPECT_GT(rt.core().executor_at(0).stats().busy_nanoseconds.load(), 0u);
  EXPECT_GT(rt.core().executor_at(0).stats().parks.load(), 0u);
}

TEST(Utilisation, LongBusyAndLongIdleStretchesCountForTheirLength) {
  spindle::runtime rt({.workers = 1});
  EXPECT_TRUE(rt.block_on(busy_without_yielding(rt))) << "one runnable busy for 2 s, never seen busy";
  ASSERT_TRUE(all_parked(rt));
  EXPECT_TRUE(rt.block_on(busy_yielding(rt))) << "a yielding loop busy for 2 s, never seen busy";
  // Idle: parked for 50 ms at a time, then poked so that it samples (bounded).
  double idle = 1.0;
  for (int poke = 0; poke < 40 && idle >= 0.5; ++poke) {
    ASSERT_TRUE(all_parked(rt));
    std::this_thread::sleep_for(50ms);  // the idle stretch being measured, not synchronisation
    rt.block_on([]() -> spindle::task<void> { co_return; }());
    idle = utilisation_of(rt, 0);
  }
  EXPECT_LT(idle, 0.5) << "50 ms parked";
}

// --- idle coordination -----------------------------------------------------------------------

// spawn_on wakes its (parked) target directly. Afterwards every executor parks again; a task
// spawned from outside must still wake one of them.
TEST(IdleCoordination, SpawnOnAParkedExecutorDoesNotBreakLaterWakeUps) {
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(all_parked(rt));
    EXPECT_EQ(join_bounded(rt.spawn_on(1, where_am_i())), 1u);
    ASSERT_TRUE(all_parked(rt));
    auto h = rt.spawn(where_am_i());
    const bool ran = eventually([&h] { return h.is_finished(); }, 10s);
    ASSERT_TRUE(ran) << "round " << round << ": a spawned task stays queued while every executor "
                     << "is parked (lost wake-up)";
    EXPECT_LT(h.join(), 2u);
  }
}

// A manual clock's advance unparks every executor; afterwards wake-ups must still work.
TEST(IdleCoordination, ClockAdvanceDoesNotBreakLaterWakeUps) {
  spindle::manual_clock clock;
  spindle::runtime rt({.workers = 2, .clock = &clock});
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(all_parked(rt));
    clock.advance(1ms);
    ASSERT_TRUE(all_parked(rt));
    auto h = rt.spawn(where_am_i());
    const bool ran = eventually([&h] { return h.is_finished(); }, 10s);
    ASSERT_TRUE(ran) << "round " << round << ": a spawned task stays queued while every executor "
                     << "is parked (lost wake-up)";
    EXPECT_LT(h.join(), 2u);
  }
}

// Many rounds of "everyone asleep, then one task from outside": the task always runs.
TEST(IdleCoordination, ForeignSpawnAlwaysWakesAnExecutor) {
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < 2000; ++round) {
    auto h = rt.spawn(where_am_i());
    ASSERT_TRUE(eventually([&h] { return h.is_finished(); }, 10s)) << "round " << round;
    EXPECT_LT(h.join(), 2u);
  }
}

}  // namespace
