// G2 metrics: the real exposition of a running runtime (executors with histograms on, actors, a
// dispatcher) and of an embedded executor passes `promtool check metrics` (Debian package
// `prometheus`) with no lint problem, and holds the samples the work implies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "spindle/diagnostics/metrics.hpp"
#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

struct command_result {
  int exit_code = -1;
  std::string output;
};

// Runs `command` through the shell, stdout and stderr together.
command_result run(const std::string& command) {
  command_result result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool promtool_installed() { return run("command -v promtool").exit_code == 0; }

// Writes `text` to a file in the test's temporary directory and runs promtool on it.
command_result promtool_check(const std::string& text, const std::string& name) {
  const std::filesystem::path file = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(file, std::ios::binary) << text;
  return run("promtool check metrics < '" + file.string() + "'");
}

using spindle::testing::sample_value;

struct counter_actor {
  int total = 0;
  void operator()(int& value) { total += value; }
};

TEST(MetricsExposition, ARunningRuntimePassesPromtool) {
  if (!promtool_installed()) GTEST_SKIP() << "promtool (Debian: prometheus) is not installed";
  spindle::runtime_options options{.workers = 2};
  options.diagnostics.histograms = true;
  spindle::runtime rt(options);
  // Actors: messages handled on some executor.
  std::promise<void> handled;
  int seen = 0;
  auto actor = spindle::spawn_actor<int>(rt, [&](int& value) {
    seen += value;
    if (seen == 100) handled.set_value();
  });
  for (int i = 0; i < 100; ++i) actor.send(1);
  handled.get_future().get();
  // A dispatcher: submissions from this (foreign) thread; one still running while we read.
  spindle::dispatcher dispatcher(rt);
  std::vector<spindle::dispatch_future<int>> done;
  for (int i = 0; i < 20; ++i) done.push_back(dispatcher.submit([i] { return i; }));
  for (auto& f : done) f.get();
  std::atomic<bool> release{false};
  auto running = dispatcher.submit([&release] {
    while (!release.load()) {
    }
    return 0;
  });
  // Tasks: a spread of polls for the histograms.
  for (int i = 0; i < 50; ++i) rt.block_on(immediate());

  const std::string text =
      spindle::diagnostics::metrics_text(spindle::detail::state_of(rt).diagnostics_registry);
  release.store(true);
  running.get();

  const command_result check = promtool_check(text, "spindle_runtime_metrics.txt");
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n" << text;
  EXPECT_EQ(check.output, "") << "promtool reported problems:\n" << check.output;

  // What the work implies.
  EXPECT_EQ(sample_value(text, "spindle_runtime_executors"), 2);
  const double messages =
      std::max(0.0, sample_value(text, "spindle_actor_messages_total{executor=\"0\"}")) +
      std::max(0.0, sample_value(text, "spindle_actor_messages_total{executor=\"1\"}"));
  EXPECT_EQ(messages, 100) << text;
  // The dispatcher's label is a process-wide number: 0 when this test runs alone, more after
  // other tests made dispatchers in the same process (--gtest_repeat, the whole executable).
  const std::string label_start = "spindle_dispatcher_submissions_total{dispatcher=\"";
  const std::size_t at = text.find(label_start);
  ASSERT_NE(at, std::string::npos) << text;
  const std::string id =
      text.substr(at + label_start.size(), text.find('"', at + label_start.size()) - at -
                                               label_start.size());
  const std::string labels = "{dispatcher=\"" + id + "\",mode=\"parallel\"}";
  EXPECT_EQ(sample_value(text, "spindle_dispatcher_submissions_total" + labels), 21) << text;
  EXPECT_GE(sample_value(text, "spindle_dispatcher_completed_total" + labels), 20);
  EXPECT_EQ(sample_value(text, "spindle_dispatcher_running" + labels) +
                sample_value(text, "spindle_dispatcher_queued" + labels),
            1)
      << text;
  EXPECT_NE(text.find("spindle_executor_poll_time_seconds_bucket{executor=\"0\",le=\"+Inf\"}"),
            std::string::npos);
  EXPECT_NE(text.find("spindle_executor_wake_to_poll_quantiles_seconds{executor=\"1\","
                      "quantile=\"0.999\"}"),
            std::string::npos);
  // Each family once.
  EXPECT_EQ(text.find("# TYPE spindle_executor_polls_total"),
            text.rfind("# TYPE spindle_executor_polls_total"));
}

TEST(MetricsExposition, AnEmbeddedExecutorPassesPromtool) {
  if (!promtool_installed()) GTEST_SKIP() << "promtool (Debian: prometheus) is not installed";
  test_host host;
  spindle::embed::embedded_executor executor(host);
  auto h = executor.spawn(immediate());
  host.run_until_idle(executor);
  ASSERT_EQ(h.join(), 1);
  const std::string text = spindle::diagnostics::metrics_text(executor.diagnostics_registry());
  const command_result check = promtool_check(text, "spindle_embedded_metrics.txt");
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n" << text;
  EXPECT_EQ(check.output, "") << "promtool reported problems:\n" << check.output;
  EXPECT_GE(sample_value(text, "spindle_embedded_ticks_total"), 1) << text;
  EXPECT_GE(sample_value(text, "spindle_embedded_polls_total"), 1) << text;
  EXPECT_EQ(sample_value(text, "spindle_embedded_live_tasks"), 0) << text;
}

}  // namespace
