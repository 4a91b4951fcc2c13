// G2 metrics: the per-executor counters, gauges and histograms move as the work says, read the
// way a reader does (diagnostics::metrics_text on the runtime's registry, and the executor's
// stats directly).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "io/io_test_support.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/diagnostics/metrics.hpp"
#include "spindle/fork/fork.hpp"
#include "spindle/io/io.hpp"
#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;
using spindle::core::executor_stats;

using spindle::testing::sample_value;

std::string metrics_of(spindle::runtime& rt) {
  return spindle::diagnostics::metrics_text(spindle::detail::state_of(rt).diagnostics_registry);
}

// Sum over the executors of one counter.
std::uint64_t total(spindle::runtime& rt, std::atomic<std::uint64_t> executor_stats::*field) {
  std::uint64_t sum = 0;
  for (std::uint32_t i = 0; i < rt.executor_count(); ++i) {
    sum += (rt.core().executor_at(i).stats().*field).load(std::memory_order_relaxed);
  }
  return sum;
}

void spin_for(std::chrono::microseconds length) {
  const auto end = std::chrono::steady_clock::now() + length;
  while (std::chrono::steady_clock::now() < end) {
  }
}

spindle::task<void> spinning(std::chrono::microseconds length) {
  spin_for(length);
  co_return;
}

// Two workers, all the work spawned by one task on one executor: the other one steals it.
TEST(MetricsExecutor, StealsHappenWhenOneExecutorSpawnsEverything) {
  spindle::runtime rt({.workers = 2});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::uint32_t spawner = 0;
  while (total(rt, &executor_stats::steals) == 0 && std::chrono::steady_clock::now() < deadline) {
    spawner = rt.block_on([]() -> spindle::task<std::uint32_t> {
      // Where the spawns happen (the task may resume elsewhere once its children finish).
      const std::uint32_t here = spindle::core::executor::current()->index();
      std::vector<spindle::join_handle<void>> children;
      for (int i = 0; i < 64; ++i) children.push_back(spindle::spawn(spinning(50us)));
      for (auto& child : children) co_await child;
      co_return here;
    }());
  }
  EXPECT_GT(total(rt, &executor_stats::steals), 0u);
  const std::string text = metrics_of(rt);
  EXPECT_GT(sample_value(text, "spindle_executor_steals_total{executor=\"0\"}") +
                sample_value(text, "spindle_executor_steals_total{executor=\"1\"}"),
            0)
      << text;
  // The spawns were local schedules of the spawner's executor.
  EXPECT_GE(sample_value(text, "spindle_executor_local_schedules_total{executor=\"" +
                                   std::to_string(spawner) + "\"}"),
            64)
      << text;
  // block_on spawned from this (plain) thread: through the injector.
  EXPECT_GE(sample_value(text, "spindle_executor_injector_runnables_total{executor=\"0\"}") +
                sample_value(text, "spindle_executor_injector_runnables_total{executor=\"1\"}"),
            1)
      << text;
}

// A task awaiting an event that is already set never suspends: its cooperative budget forces a
// yield every 128 awaits at the latest.
TEST(MetricsExecutor, BudgetExhaustionForcesYieldsThatAreCounted) {
  spindle::runtime rt({.workers = 1});
  const std::uint64_t before = total(rt, &executor_stats::forced_yields);
  rt.block_on([]() -> spindle::task<void> {
    spindle::event ready(true);
    for (int i = 0; i < 1000; ++i) co_await ready.wait();
  }());
  // 1000 awaits, at most 128 per run (fewer when the run's time slice ends first).
  EXPECT_GE(total(rt, &executor_stats::forced_yields) - before, 1000u / 129u);
  EXPECT_GE(sample_value(metrics_of(rt), "spindle_executor_forced_yields_total{executor=\"0\"}"),
            double(1000 / 129));
}

TEST(MetricsExecutor, IdleExecutorsPark) {
  spindle::runtime rt({.workers = 2});
  // Idle from the start: both park.
  ASSERT_TRUE(eventually([&] { return total(rt, &executor_stats::parks) >= 2; }, 10s));
  const std::uint64_t parks = total(rt, &executor_stats::parks);
  rt.block_on(immediate());  // wakes one, which parks again afterwards
  ASSERT_TRUE(eventually([&] { return total(rt, &executor_stats::parks) > parks; }, 10s));
  const std::string text = metrics_of(rt);
  EXPECT_GE(sample_value(text, "spindle_executor_parks_total{executor=\"0\"}") +
                sample_value(text, "spindle_executor_parks_total{executor=\"1\"}"),
            double(parks + 1));
}

spindle::task<std::int32_t> read_one_byte(int fd, std::atomic<bool>* waiting) {
  char byte = 0;
  spindle::core::io_operation op;
  op.opcode = spindle::core::io_opcode::read;
  op.fd = fd;
  op.buffer = &byte;
  op.length = 1;
  waiting->store(true);
  co_return co_await spindle::io::submit_and_wait(op);
}

class MetricsIo : public ::testing::TestWithParam<spindle::core::io_backend> {};

// A pipe read that waits is in flight on its executor until a byte arrives.
TEST_P(MetricsIo, AWaitingPipeReadIsInFlight) {
  fd_pair pipe;
  make_pipe(pipe);
  spindle::runtime rt({.workers = 2, .io_backend = GetParam()});
  auto in_flight = [&] {
    const std::string text = metrics_of(rt);
    return sample_value(text, "spindle_executor_io_in_flight{executor=\"0\"}") +
           sample_value(text, "spindle_executor_io_in_flight{executor=\"1\"}");
  };
  EXPECT_EQ(in_flight(), 0);
  std::atomic<bool> waiting{false};
  auto reader = rt.spawn(read_one_byte(pipe.read_end, &waiting));
  ASSERT_TRUE(eventually([&] { return waiting.load() && in_flight() == 1; }, 10s))
      << metrics_of(rt);
  ASSERT_EQ(::write(pipe.write_end, "x", 1), 1);
  EXPECT_EQ(join_bounded(std::move(reader)), 1);
  EXPECT_TRUE(eventually([&] { return in_flight() == 0; }, 10s));
  const std::string text = metrics_of(rt);
  EXPECT_GE(sample_value(text, "spindle_executor_io_completed_total{executor=\"0\"}") +
                sample_value(text, "spindle_executor_io_completed_total{executor=\"1\"}"),
            1);
  ::close(pipe.read_end);
  ::close(pipe.write_end);
}

INSTANTIATE_TEST_SUITE_P(Backends, MetricsIo,
                         ::testing::Values(spindle::core::io_backend::uring,
                                           spindle::core::io_backend::epoll));

// Work queued behind a busy executor shows in the queue-depth gauges while it waits.
TEST(MetricsExecutor, QueueDepthsShowWorkWaitingBehindABusyExecutor) {
  spindle::runtime rt({.workers = 1});
  std::vector<spindle::join_handle<int>> waiting;
  {
    executor_blocker blocker(rt);
    for (int i = 0; i < 5; ++i) waiting.push_back(rt.spawn(immediate()));  // the injector
    for (int i = 0; i < 3; ++i) waiting.push_back(rt.spawn_on(0, immediate()));  // the inbox
    const std::string text = metrics_of(rt);
    EXPECT_EQ(sample_value(text, "spindle_executor_injector_queue_depth{executor=\"0\"}"), 5)
        << text;
    EXPECT_EQ(sample_value(text, "spindle_executor_inbox_queue_depth{executor=\"0\"}"), 3)
        << text;
  }
  for (auto& h : waiting) EXPECT_EQ(join_bounded(std::move(h)), 1);
  const std::string text = metrics_of(rt);
  EXPECT_EQ(sample_value(text, "spindle_executor_injector_queue_depth{executor=\"0\"}"), 0);
  EXPECT_EQ(sample_value(text, "spindle_executor_inbox_queue_depth{executor=\"0\"}"), 0);
  EXPECT_EQ(sample_value(text, "spindle_executor_local_queue_depth{executor=\"0\"}"), 0);
}

spindle::task<void> sleep_long() { co_await spindle::sleep_for(std::chrono::seconds(30)); }

TEST(MetricsExecutor, ASleepingTaskIsATimerPending) {
  spindle::runtime rt({.workers = 2});
  auto pending = [&] {
    const std::string text = metrics_of(rt);
    return sample_value(text, "spindle_executor_timers_pending{executor=\"0\"}") +
           sample_value(text, "spindle_executor_timers_pending{executor=\"1\"}");
  };
  EXPECT_EQ(pending(), 0);
  auto sleeper = rt.spawn(sleep_long());
  ASSERT_TRUE(eventually([&] { return pending() == 1; }, 10s)) << metrics_of(rt);
  sleeper.cancel();
  EXPECT_TRUE(joined_cancelled(sleeper));
  EXPECT_TRUE(eventually([&] { return pending() == 0; }, 10s)) << metrics_of(rt);
}

TEST(MetricsExecutor, SpawnOnGoesThroughTheInbox) {
  spindle::runtime rt({.workers = 2});
  for (int i = 0; i < 10; ++i) rt.spawn_on(1, immediate()).join();
  const std::string text = metrics_of(rt);
  EXPECT_GE(sample_value(text, "spindle_executor_inbox_runnables_total{executor=\"1\"}"), 10);
  EXPECT_EQ(sample_value(text, "spindle_executor_inbox_queue_depth{executor=\"1\"}"), 0);
}

TEST(MetricsExecutor, ForkPromotionsAndTheftsArePerExecutor) {
  spindle::runtime rt({.workers = 2});
  const auto before = spindle::fork_statistics();
  const std::uint64_t promotions = total(rt, &executor_stats::fork_promotions);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (spindle::fork_statistics().delegated == before.delegated &&
         std::chrono::steady_clock::now() < deadline) {
    std::atomic<std::int64_t> sum{0};
    spindle::run_on(rt, [&] {
      spindle::parallel_for(0, 200'000, [&](int i) { sum.fetch_add(i, std::memory_order_relaxed); });
    });
  }
  rt.shutdown();  // workers joined: every count is final
  const auto after = spindle::fork_statistics();
  ASSERT_GT(after.delegated, before.delegated) << "no piece was stolen in 10 s";
  // This runtime's executors are the only ones forking in this process now.
  EXPECT_EQ(total(rt, &executor_stats::fork_promotions) - promotions,
            after.promoted - before.promoted);
  EXPECT_EQ(total(rt, &executor_stats::fork_thefts), after.delegated - before.delegated);
  const std::string text = metrics_of(rt);
  EXPECT_GT(sample_value(text, "spindle_executor_fork_thefts_total{executor=\"0\"}") +
                sample_value(text, "spindle_executor_fork_thefts_total{executor=\"1\"}"),
            0);
}

TEST(MetricsExecutor, HistogramsAreOffByDefault) {
  spindle::runtime rt({.workers = 1});
  for (int i = 0; i < 10; ++i) rt.block_on(immediate());
  const auto& h = rt.core().executor_at(0).histograms();
  EXPECT_EQ(h.poll_time.snapshot().count(), 0u);
  EXPECT_EQ(h.wake_to_poll.snapshot().count(), 0u);
  EXPECT_EQ(metrics_of(rt).find("spindle_executor_poll_time_seconds"), std::string::npos);
}

TEST(MetricsExecutor, HistogramsRecordPollTimeAndWakeToPoll) {
  spindle::runtime_options options{.workers = 1};
  options.diagnostics.histograms = true;
  spindle::runtime rt(options);
  // 200 polls of at least 20 us each (plus block_on's own task).
  rt.block_on([]() -> spindle::task<void> {
    std::vector<spindle::join_handle<void>> children;
    for (int i = 0; i < 200; ++i) children.push_back(spindle::spawn(spinning(20us)));
    for (auto& child : children) co_await child;
  }());
  rt.shutdown();
  const auto& h = rt.core().executor_at(0).histograms();
  const auto poll = h.poll_time.snapshot();
  const auto wake = h.wake_to_poll.snapshot();
  EXPECT_GE(poll.count(), 201u);
  EXPECT_GE(wake.count(), 201u);  // each child was scheduled (spawned) once
  // The median poll is a child: at least 20 us, well below a second.
  EXPECT_GE(poll.quantile(0.5), 20'000u);
  EXPECT_LT(poll.quantile(0.5), 1'000'000'000u);
  // The children queued behind each other: the last waited for most of the others.
  EXPECT_GE(wake.max_ns, 100u * 20'000u);
  const std::string text = metrics_of(rt);
  EXPECT_GE(sample_value(text, "spindle_executor_poll_time_seconds_count{executor=\"0\"}"), 201);
  EXPECT_GE(sample_value(text,
                         "spindle_executor_poll_time_quantiles_seconds{executor=\"0\",quantile=\"0.5\"}"),
            20e-6);
  EXPECT_GE(sample_value(text, "spindle_executor_wake_to_poll_seconds_count{executor=\"0\"}"), 201);
}

TEST(MetricsExecutor, HistogramsCanBeSwitchedOnWhileRunning) {
  spindle::runtime rt({.workers = 1});
  rt.block_on(immediate());
  rt.core().set_histograms(true);
  for (int i = 0; i < 10; ++i) rt.block_on(immediate());
  rt.core().set_histograms(false);
  const std::uint64_t polls = rt.core().executor_at(0).histograms().poll_time.snapshot().count();
  EXPECT_GE(polls, 10u);
  for (int i = 0; i < 10; ++i) rt.block_on(immediate());
  EXPECT_EQ(rt.core().executor_at(0).histograms().poll_time.snapshot().count(), polls);
  // Recorded figures stay in the exposition after the switch goes off.
  EXPECT_NE(metrics_of(rt).find("spindle_executor_poll_time_seconds_bucket"), std::string::npos);
}

}  // namespace
