// Warnings planted on a real runtime and a real embedded executor (diagnostics/warnings.hpp,
// G4): a stall names its task, queued work behind it is woken_not_polled, an embedded tick over
// budget is reported; each through the hook, in the metrics text and in the snapshot section.
// And a clean mixed workload in strict mode raises nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/warnings_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::diagnostics::warning;
using spindle::diagnostics::warning_kind;
using spindle::diagnostics::warning_subject;

// Spins (a planted stall: never suspends) until `until` is set, or 5 s pass.
void spin_until(const std::atomic<bool>& until) {
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!until.load() && std::chrono::steady_clock::now() < give_up) spindle::core::cpu_relax();
}

std::string metrics_of(spindle::runtime& rt) {
  std::string text;
  spindle::detail::state_of(rt).diagnostics_registry.write_metrics(text);
  return text;
}

nlohmann::json warnings_section(spindle::runtime& rt) {
  std::string text;
  spindle::diagnostics::json_writer out(text);
  spindle::detail::state_of(rt).diagnostics_registry.write_snapshot_sections(out);
  return nlohmann::json::parse(text)["warnings"];
}

spindle::runtime_options one_worker(std::chrono::nanoseconds stall, std::chrono::nanoseconds woken) {
  spindle::runtime_options options;
  options.workers = 1;
  options.diagnostics.stall_threshold = stall;
  options.diagnostics.woken_threshold = woken;
  return options;
}

TEST(WarningsRuntime, AStallIsReportedOnceNamingItsTaskAndLoweredWhenItReturns) {
  spindle::runtime rt(one_worker(10ms, 10s));
  spindle::testing::warning_catcher caught(rt.warnings());
  std::atomic<bool> reported{false};
  auto spinner = rt.spawn([&] { spin_until(reported); });
  warning stall;
  ASSERT_TRUE(caught.wait_for(warning_kind::stall, &stall));
  const spindle::task_id id = spinner.id();
  // The monitor names the task by its table slot while it still runs.
  EXPECT_EQ(stall.subject.what, warning_subject::kind::task);
  EXPECT_EQ(stall.subject.id, (std::uint64_t(id.index) << 32) | id.serial);
  EXPECT_EQ(stall.subject.executor, 0);
  EXPECT_NE(stall.message.find("without returning to its executor"), std::string::npos);
  EXPECT_NE(metrics_of(rt).find("spindle_warnings_total{kind=\"stall\"} 1\n"), std::string::npos);
  nlohmann::json section = warnings_section(rt);
  ASSERT_EQ(section["current"].size(), 1u);
  EXPECT_EQ(section["current"][0]["kind"], "stall");
  EXPECT_EQ(section["current"][0]["subject"]["id"],
            std::to_string(id.index) + "." + std::to_string(id.serial));
  reported = true;
  spinner.join();
  // Lowered at the monitor's first tick after the runnable returned (bounded wait, no sleep).
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!rt.warnings().current().empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(rt.warnings().current().empty());
  ASSERT_EQ(rt.warnings().recent().size(), 1u);
  EXPECT_FALSE(rt.warnings().recent()[0].active);
  EXPECT_EQ(rt.warnings().raised(warning_kind::stall), 1u);  // once per stall, not per tick
}

spindle::task<void> mark(std::atomic<bool>& ran) {
  ran = true;
  co_return;
}

spindle::task<void> spin_with_a_queued_child(std::atomic<bool>& until, std::atomic<bool>& child_ran) {
  // The child goes to this worker's local queue; with one worker nobody else can take it.
  auto child = spindle::spawn(mark(child_ran));
  spin_until(until);
  co_await std::move(child);
}

TEST(WarningsRuntime, WorkQueuedBehindAStuckExecutorIsWokenNotPolled) {
  spindle::runtime rt(one_worker(10s, 20ms));
  spindle::testing::warning_catcher caught(rt.warnings());
  std::atomic<bool> reported{false}, child_ran{false};
  auto parent = rt.spawn(spin_with_a_queued_child(reported, child_ran));
  warning woken;
  const bool seen = caught.wait_for(warning_kind::woken_not_polled, &woken);
  reported = true;
  ASSERT_TRUE(seen);
  parent.join();
  EXPECT_TRUE(child_ran.load());
  EXPECT_EQ(woken.subject.what, warning_subject::kind::executor);
  EXPECT_EQ(woken.subject.id, 0u);
  EXPECT_NE(woken.message.find("queued on executor 0"), std::string::npos) << woken.message;
  EXPECT_NE(metrics_of(rt).find("spindle_warnings_total{kind=\"woken_not_polled\"} 1\n"),
            std::string::npos);
  EXPECT_FALSE(caught.seen(warning_kind::stall));  // its threshold is 10 s here
}

spindle::task<int> leaf(int n) {
  if (n % 7 == 0) co_await spindle::yield_now();
  co_return n;
}

spindle::task<long> mixed_work(int round) {
  std::vector<spindle::join_handle<int>> children;
  for (int i = 0; i < 50; ++i) children.push_back(spindle::spawn(leaf(round * 50 + i)));
  long sum = 0;
  for (auto& child : children) sum += co_await std::move(child);
  co_await spindle::sleep_for(std::chrono::microseconds(200));
  co_return sum;
}

// 100,000 tasks queued behind a stuck worker for longer than woken_threshold: the monitor's
// sweep reports 16 of them one by one and the rest as one warning, and it does so in steps of a
// few tens of microseconds a tick (the pass over the table takes several ticks). Before, one
// sweep visited the whole table at once and raised a warning per task: 100,000 warnings, and on
// the mixed-together benchmark (a million queued tasks) a monitor thread busy for seconds.
TEST(WarningsRuntime, ManyTasksQueuedBehindAStuckWorkerAreOneWarningPastSixteen) {
  spindle::runtime rt(one_worker(10s, 20ms));
  std::atomic<bool> release{false};
  std::atomic<bool> spinning{false};
  auto spinner = rt.spawn([&] {
    spinning = true;
    spin_until(release);
  });
  while (!spinning.load()) std::this_thread::yield();
  constexpr int queued = 100'000;
  std::atomic<int> ran{0};
  for (int i = 0; i < queued; ++i) rt.spawn([&ran] { ran.fetch_add(1); }).detach();
  // Bounded wait (10 s) for the summary; no sleep.
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  bool summarised = false;
  std::size_t one_by_one = 0;
  while (!summarised && std::chrono::steady_clock::now() < give_up) {
    one_by_one = 0;
    for (const warning& w : rt.warnings().current()) {
      if (w.kind != warning_kind::woken_not_polled) continue;
      if (w.subject.what == warning_subject::kind::tasks) summarised = true;
      if (w.subject.what == warning_subject::kind::task) ++one_by_one;
    }
    if (!summarised) std::this_thread::yield();
  }
  const std::uint64_t raised = rt.warnings().raised(warning_kind::woken_not_polled);
  release = true;
  spinner.join();
  EXPECT_TRUE(summarised) << "no summary of the queued tasks within 10 s";
  EXPECT_EQ(one_by_one, spindle::diagnostics::warning_hub::task_warnings_per_kind);
  // 16 tasks, the summary, and the executor's own woken_not_polled (its injector waits).
  EXPECT_LE(raised, spindle::diagnostics::warning_hub::task_warnings_per_kind + 2);
  const auto all_ran_by = std::chrono::steady_clock::now() + 10s;
  while (ran.load() != queued && std::chrono::steady_clock::now() < all_ran_by) {
    std::this_thread::yield();
  }
  EXPECT_EQ(ran.load(), queued);
}

TEST(WarningsRuntime, ACleanMixedWorkloadInStrictModeRaisesNothing) {
  spindle::runtime_options options;
  options.workers = 2;
  options.diagnostics.strict_warnings = true;
  spindle::runtime rt(options);
  spindle::testing::fail_on_warnings guard(rt.warnings());
  const auto until = std::chrono::steady_clock::now() + 1s;
  long total = 0;
  int rounds = 0;
  while (std::chrono::steady_clock::now() < until) {
    std::vector<spindle::join_handle<long>> batch;
    for (int i = 0; i < 8; ++i) batch.push_back(rt.spawn(mixed_work(rounds * 8 + i)));
    for (auto& h : batch) total += h.join();
    ++rounds;
  }
  EXPECT_GT(rounds, 0);
  EXPECT_GT(total, 0);
  guard.check();
  EXPECT_EQ(rt.warnings().raised_total(), 0u);
}

void burn(std::chrono::steady_clock::duration d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) spindle::core::cpu_relax();
}

TEST(WarningsEmbedded, ATickOverItsBudgetIsReported) {
  spindle::testing::test_host host;
  spindle::embed::embedded_options options;
  options.time_per_tick = 1ms;
  spindle::embed::embedded_executor executor(host, options);
  spindle::testing::warning_catcher caught(executor.warnings());
  // Within budget: nothing.
  auto quick = executor.spawn([] {});
  executor.tick();
  EXPECT_FALSE(caught.seen(warning_kind::embedded_tick_over_budget));
  auto slow = executor.spawn([] { burn(5ms); });  // one run of 5x the budget
  executor.tick();
  warning w;
  ASSERT_TRUE(caught.wait_for(warning_kind::embedded_tick_over_budget, &w, 0ms));
  EXPECT_EQ(w.subject.what, warning_subject::kind::embedded_executor);
  EXPECT_NE(w.message.find("its time budget of 1.00 ms"), std::string::npos) << w.message;
  std::string metrics;
  executor.warnings().write_metrics(metrics);
  EXPECT_NE(metrics.find("spindle_warnings_total{kind=\"embedded_tick_over_budget\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(executor.warnings().current().size(), 1u);
}

}  // namespace
