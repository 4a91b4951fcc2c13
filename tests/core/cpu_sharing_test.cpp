// Executors that share a CPU (parking.md, "Executors that share a CPU"), the part without I/O:
// executors with CPU work alone never stand by; invalid standby options. The standby itself is
// tested where it applies, with I/O on both backends: tests/net/cpu_sharing_test.cpp. Workers
// are pinned with on_worker_start to make the sharing certain. No test times performance.
#include <sched.h>

#include <spindle/spindle.hpp>
#include <spindle/core/executor.hpp>
#include <spindle/core/runtime_core.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;

// Options for `workers` executors, all pinned to `cpu`.
spindle::runtime_options pinned(std::uint32_t workers, int cpu) {
  spindle::runtime_options options{.workers = workers};
  options.on_worker_start = [cpu](std::uint32_t) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
  };
  return options;
}

std::uint64_t standbys_of(spindle::runtime& rt, std::uint32_t index) {
  return rt.core().executor_at(index).stats().standbys.load();
}

// A task that yields a few times: keeps both executors busy enough to be woken and to meet.
spindle::task<void> yielder(std::atomic<int>& finished) {
  for (int i = 0; i < 20; ++i) co_await spindle::yield_now();
  finished.fetch_add(1);
}

// Spawns `rounds` batches of yielders from this plain thread; every task must finish.
void run_batches(spindle::runtime& rt, int rounds) {
  for (int batch = 0; batch < rounds; ++batch) {
    std::atomic<int> finished{0};
    std::vector<spindle::join_handle<void>> handles;
    for (int i = 0; i < 200; ++i) handles.push_back(rt.spawn(yielder(finished)));
    for (auto& h : handles) join_bounded(std::move(h), 20s);
    EXPECT_EQ(finished.load(), 200);
  }
}

// Without I/O two executors on one CPU only take turns, which costs context switches, and the
// kernel moves one of them as soon as another CPU has room; on standby one would give that CPU
// share away (parking.md). So they never stand by, and all their work runs.
TEST(CpuSharing, ExecutorsWithoutIoDoNotStandByOnASharedCpu) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  spindle::runtime rt(pinned(2, cpus[0]));
  run_batches(rt, 50);
  EXPECT_EQ(standbys_of(rt, 0), 0u);
  EXPECT_EQ(standbys_of(rt, 1), 0u);
}

TEST(CpuSharing, InvalidStandbyOptionsAreUsageErrors) {
  spindle::runtime_options options{.workers = 1};
  options.standby_first = 100ms;
  options.standby_longest = 10ms;
  EXPECT_THROW(spindle::runtime{options}, spindle::usage_error);
  options.standby_first = -1ms;
  EXPECT_THROW(spindle::runtime{options}, spindle::usage_error);
}

}  // namespace
