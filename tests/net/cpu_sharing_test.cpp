// Executors that share a CPU while serving I/O (parking.md, "Executors that share a CPU"), on
// both reactor backends: the higher-index executor goes on standby with connections whose I/O
// is in flight on its reactor, and what their completions wake runs on the other; every byte
// still comes back; work addressed to the standby executor (spawn_on), its timers and foreign
// spawns all run meanwhile; executors on different CPUs never stand by; standby_first = 0 turns
// it off. Workers are pinned with on_worker_start, which makes the sharing certain. Liveness
// with generous bounds; no test times performance.
#include <sched.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "net/net_test_support.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::testing::join_bounded;

class NetCpuSharing : public on_backend {
 public:
  // Options with executor i pinned to cpus[i % cpus.size()].
  spindle::runtime_options pinned(std::vector<int> cpus) const {
    spindle::runtime_options result = options();
    result.on_worker_start = [cpus](std::uint32_t index) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[index % cpus.size()], &one);
      sched_setaffinity(0, sizeof one, &one);
    };
    return result;
  }
};
SPINDLE_NET_ON_BOTH_BACKENDS(NetCpuSharing);

std::uint64_t standbys_of(spindle::runtime& rt, std::uint32_t index) {
  return rt.core().executor_at(index).stats().standbys.load();
}

bool on_standby(spindle::runtime& rt, std::uint32_t index) {
  return rt.core().executor_at(index).on_standby_at(rt.core().coarse_now_ns());
}

// Rounds of loopback echo (every byte checked) until `stop()` holds or `rounds` ran.
template <class Stop>
void echo_rounds(spindle::runtime& rt, Stop stop, int rounds) {
  const int connections = scaled(64, 64, 16);
  std::size_t expected = 0;
  for (int i = 0; i < connections; ++i) expected += echo_size(std::uint32_t(i));
  for (int round = 0; round < rounds && !stop(); ++round) {
    auto listener = spindle::net::tcp_listener::bind(spindle::net::endpoint::loopback_v4(0), 4096);
    auto served = rt.spawn(echo_server(listener, connections));
    auto verified = rt.spawn(run_echo_clients(listener.local_endpoint(), connections));
    ASSERT_EQ(join_bounded(std::move(verified), 60s), connections);
    ASSERT_EQ(join_bounded(std::move(served), 60s), expected);
  }
}

TEST_P(NetCpuSharing, EchoWhileTwoExecutorsShareOneCpu) {
  const std::vector<int> cpus = spindle::testing::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  spindle::runtime rt(pinned({cpus[0]}));
  echo_rounds(rt, [&] { return standbys_of(rt, 1) != 0; }, 50);
  EXPECT_GT(standbys_of(rt, 1), 0u);
  // Executor 0 has no lower-index sibling: the co-location rule never puts it on standby, so
  // someone always serves.
  EXPECT_EQ(standbys_of(rt, 0), 0u);
  echo_rounds(rt, [] { return false; }, 3);  // and after the standby, as before
}

spindle::task<int> sleep_ticks(int count) {
  int ticks = 0;
  for (int i = 0; i < count; ++i) {
    co_await spindle::sleep_for(1ms);
    ++ticks;
  }
  co_return ticks;
}

spindle::task<void> yielder(std::atomic<int>& finished) {
  for (int i = 0; i < 10; ++i) co_await spindle::yield_now();
  finished.fetch_add(1);
}

// While executor 1 stands by: work addressed to it (its inbox) runs there, the timers that work
// arms there fire and what they wake runs on executor 0, and tasks spawned from a plain thread
// (placement avoids the standby executor, wake-ups skip it) all run.
TEST_P(NetCpuSharing, WorkAddressedToAStandbyExecutorAndForeignSpawnsRun) {
  const std::vector<int> cpus = spindle::testing::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  spindle::runtime_options options = pinned({cpus[0]});
  options.standby_first = 2s;  // still on standby when the work below arrives
  options.standby_longest = 8s;
  spindle::runtime rt(std::move(options));
  echo_rounds(rt, [&] { return on_standby(rt, 1); }, 50);
  ASSERT_TRUE(on_standby(rt, 1));
  auto ticks = rt.spawn_on(1, sleep_ticks(20));
  std::atomic<int> finished{0};
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 200; ++i) handles.push_back(rt.spawn(yielder(finished)));
  for (auto& h : handles) join_bounded(std::move(h), 20s);
  EXPECT_EQ(finished.load(), 200);
  EXPECT_EQ(join_bounded(std::move(ticks), 20s), 20);
}

std::uint64_t contention_standbys_of(spindle::runtime& rt, std::uint32_t index) {
  return rt.core().executor_at(index).stats().contention_standbys.load();
}

// Executors on different CPUs do not share one: the co-location rule never puts them on
// standby. (The contention rule may, where something outside this test loads one of the two
// CPUs while the other stays free, and probation after such a standby may repeat it: an
// executor the monitor never asked stays out of standby.)
TEST_P(NetCpuSharing, ExecutorsOnDifferentCpusNeverStandBy) {
  const std::vector<int> cpus = spindle::testing::allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  spindle::runtime rt(pinned({cpus[0], cpus[1]}));
  echo_rounds(rt, [] { return false; }, 5);
  for (std::uint32_t i = 0; i < 2; ++i) {
    if (contention_standbys_of(rt, i) == 0) {
      EXPECT_EQ(standbys_of(rt, i), 0u) << "executor " << i;
    }
  }
}

// A thread that is not ours spins on one executor's CPU (a load generator beside the server):
// that executor waits for its CPU about half its runnable time while its sibling, alone on the
// other CPU, hardly waits, so the monitor has it stand by for the sibling (parking.md, "A CPU
// shared with a thread that is not ours"). Whichever index it has: executor 0 stands by too.
// Every byte still comes back, during and after. Where the sibling's CPU is not free either
// (something else loads the machine), the rule rightly does nothing: the test then says so and
// skips rather than assert what the rule must not do. (Without the rule: the test fails on both
// backends on a quiet machine.)
class SpinnerOnCpu {
 public:
  explicit SpinnerOnCpu(int cpu)
      : thread_([this, cpu] {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(cpu, &one);
          sched_setaffinity(0, sizeof one, &one);
          while (!stop_.load(std::memory_order_relaxed)) {
          }
        }) {}
  ~SpinnerOnCpu() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void expect_stands_by_beside_a_spinner(NetCpuSharing& test, std::uint32_t beside) {
  const std::vector<int> cpus = spindle::testing::allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const std::uint32_t free_one = 1 - beside;
  std::vector<int> placement(2);
  placement[beside] = cpus[1];
  placement[free_one] = cpus[0];
  spindle::runtime rt(test.pinned(placement));
  std::uint64_t free_running = 0, free_waiting = 0;
  echo_rounds(rt, [] { return false; }, 1);  // both loops run: their threads' ids are known
  rt.core().executor_at(free_one).thread_cpu_times(free_running, free_waiting);
  {
    SpinnerOnCpu spinner(cpus[1]);
    echo_rounds(rt, [&] { return contention_standbys_of(rt, beside) != 0; }, 100);
  }
  if (contention_standbys_of(rt, beside) == 0) {
    std::uint64_t running = 0, waiting = 0;
    rt.core().executor_at(free_one).thread_cpu_times(running, waiting);
    const std::uint64_t ran = running - free_running, waited = waiting - free_waiting;
    // The rule asks for a window in which the sibling waited under an eighth; over the whole
    // run a free CPU here still shows 10-20 % (the monitor, the kernel's own work). Over a
    // quarter, the sibling's CPU was plainly busy too.
    if (4 * waited >= ran + waited) {
      GTEST_SKIP() << "the sibling's CPU was not free either (it waited " << waited / 1000
                   << " us of " << (ran + waited) / 1000 << " us): nothing to stand by for";
    }
  }
  EXPECT_GT(contention_standbys_of(rt, beside), 0u);
  echo_rounds(rt, [] { return false; }, 3);  // and after, as before
}

TEST_P(NetCpuSharing, AnExecutorWaitingForItsCpuStandsByForASiblingOnAFreeOne) {
  expect_stands_by_beside_a_spinner(*this, 1);
}

TEST_P(NetCpuSharing, ExecutorZeroStandsByTooWhenItsCpuIsTheBusyOne) {
  expect_stands_by_beside_a_spinner(*this, 0);
}

// Work in the injector while every executor is parked is a lost wake-up, however long it lasts:
// nobody is going to take it. Here it used to last until a standby ended (standby_longest): an
// executor woken to search that went on standby again at that wake-up (watch_probation, after
// the search was passed on) parked still counted as a searcher, and notifiers, seeing one,
// woke nobody for what they placed in its sibling's shard meanwhile. Two executors share one
// CPU (standby comes and goes with probation) while a plain thread spawns (placement and
// wake-ups from outside) and echo keeps I/O in flight. A plain thread samples the state.
TEST_P(NetCpuSharing, WorkNeverWaitsWhileEveryExecutorIsParked) {
  const std::vector<int> cpus = spindle::testing::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  spindle::runtime_options options = pinned({cpus[0]});
  options.standby_longest = 30s;  // what a stranded item waited for, at most
  spindle::runtime rt(std::move(options));
  std::atomic<bool> done{false};
  std::atomic<std::int64_t> longest_stranded_ms{0};
  std::thread watcher([&] {
    std::chrono::steady_clock::time_point since{};
    while (!done.load()) {
      const auto now = std::chrono::steady_clock::now();
      if (rt.core().unparked_count() != 0 || !rt.core().global_injector().any()) {
        since = {};
      } else if (since == std::chrono::steady_clock::time_point{}) {
        since = now;
      } else {
        const auto stranded = std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
        if (stranded.count() > longest_stranded_ms.load()) longest_stranded_ms.store(stranded.count());
      }
      std::this_thread::sleep_for(200us);  // a sampling period, not a synchronisation
    }
  });
  std::atomic<int> finished{0};
  auto spawn_from_outside = [&] {
    while (!done.load()) {
      auto yielded = rt.spawn(yielder(finished));
      auto slept = rt.spawn(sleep_ticks(1));  // a timer: wake-ups from the reactor too
      while (!(yielded.is_finished() && slept.is_finished()) && !done.load()) {
        std::this_thread::yield();
      }
    }
  };
  std::thread spawner(spawn_from_outside);
  std::thread second_spawner(spawn_from_outside);
  const auto start = std::chrono::steady_clock::now();
  // Up to 6 s of echo (8 under sanitizers), on each backend: the lost wake-up came every few
  // seconds on a 2-CPU machine.
  echo_rounds(rt,
              [&] {
                return longest_stranded_ms.load() >= 200 ||
                       std::chrono::steady_clock::now() - start > scaled(6, 8, 8) * 1s;
              },
              100000);
  done.store(true);
  spawner.join();
  second_spawner.join();
  watcher.join();
  // Normally it lasts microseconds (a notifier counts the executor it wakes as unparked).
  EXPECT_LT(longest_stranded_ms.load(), 200) << "work waited with every executor parked";
  EXPECT_GT(finished.load(), 0);
}

TEST_P(NetCpuSharing, StandbyFirstZeroTurnsItOff) {
  const std::vector<int> cpus = spindle::testing::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  spindle::runtime_options options = pinned({cpus[0]});
  options.standby_first = 0ns;
  spindle::runtime rt(std::move(options));
  echo_rounds(rt, [] { return false; }, 5);
  EXPECT_EQ(standbys_of(rt, 1), 0u);
}

}  // namespace
