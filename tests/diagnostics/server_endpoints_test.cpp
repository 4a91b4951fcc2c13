// The live view's endpoints (diagnostics/server.hpp): status lines, content types, what each
// serves, its settings (SPINDLE_DIAGNOSTICS), and the runtime and the embedded executor serving
// themselves.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/http_test_client.hpp"
#include "support/test_support.hpp"
#include "spindle/diagnostics/server.hpp"
#include "spindle/embed/embedded_executor.hpp"
#include "spindle/spindle.hpp"

namespace {

using spindle::diagnostics::resolve_server_setting;
using spindle::diagnostics::server;
using spindle::diagnostics::server_providers;
using spindle::diagnostics::server_setting;
using spindle::test::get;

server_providers sample_providers(std::atomic<long>* trace_ms = nullptr) {
  server_providers p;
  p.metrics = [] {
    return std::string(
        "# HELP sample_total A sample.\n# TYPE sample_total counter\nsample_total 7\n");
  };
  p.snapshot = [] { return std::string(R"({"executors":[{"index":0}],"tasks":[]})"); };
  p.trace = [trace_ms](std::chrono::milliseconds last) {
    if (trace_ms != nullptr) trace_ms->store(last.count());
    return std::string(R"({"traceEvents":[]})");
  };
  return p;
}

TEST(DiagnosticsServer, ServesEachEndpointWithItsContentType) {
  std::atomic<long> trace_ms{0};
  server s("127.0.0.1:0", sample_providers(&trace_ms));
  ASSERT_NE(s.port(), 0);
  EXPECT_EQ(s.address(), "127.0.0.1:" + std::to_string(s.port()));

  auto metrics = get(s.port(), "/metrics");
  EXPECT_EQ(metrics.status, 200) << metrics.head;
  EXPECT_EQ(metrics.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(metrics.body, "# HELP sample_total A sample.\n# TYPE sample_total counter\nsample_total 7\n");
  EXPECT_EQ(metrics.header("Content-Length"), std::to_string(metrics.body.size()));
  EXPECT_EQ(metrics.header("Connection"), "close");
  EXPECT_TRUE(metrics.closed);

  auto snapshot = get(s.port(), "/api/snapshot?t=123");  // a cache-busting query is fine
  EXPECT_EQ(snapshot.status, 200);
  EXPECT_EQ(snapshot.header("Content-Type"), "application/json");
  EXPECT_EQ(nlohmann::json::parse(snapshot.body)["executors"][0]["index"], 0);

  auto trace = get(s.port(), "/api/trace?ms=250");
  EXPECT_EQ(trace.status, 200);
  EXPECT_EQ(trace.header("Content-Type"), "application/json");
  EXPECT_NE(trace.header("Content-Disposition").find("attachment"), std::string::npos);
  EXPECT_EQ(trace_ms.load(), 250);
  EXPECT_EQ(get(s.port(), "/api/trace").status, 200);
  EXPECT_EQ(trace_ms.load(), 0);  // no window: everything (TraceWithZeroOrNoMs...)

  auto page = get(s.port(), "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page.header("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(page.body, server::page());
  EXPECT_EQ(get(s.port(), "/index.html").status, 200);

  auto unknown = get(s.port(), "/nothing-here");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.header("Content-Type"), "text/plain; charset=utf-8");
  const auto stats = s.statistics();
  EXPECT_EQ(stats.requests_answered, 7u);
  EXPECT_EQ(stats.requests_rejected, 1u);
}

// Issue 15, G5 attack: ?ms=0 was 400 on the server while diagnostics::trace_json(r, 0ms) means
// "everything the rings hold"; the server now says what the API says, and so does no ms.
TEST(DiagnosticsServer, TraceWithZeroOrNoMsMeansEverythingAsInTheApi) {
  std::atomic<long> trace_ms{-1};
  server s("127.0.0.1:0", sample_providers(&trace_ms));
  const auto zero = get(s.port(), "/api/trace?ms=0");
  EXPECT_EQ(zero.status, 200) << zero.body;
  EXPECT_EQ(trace_ms.load(), 0);
  trace_ms.store(-1);
  EXPECT_EQ(get(s.port(), "/api/trace").status, 200);
  EXPECT_EQ(trace_ms.load(), 0);
  EXPECT_EQ(get(s.port(), "/api/trace?ms=60000").status, 200);
  EXPECT_EQ(trace_ms.load(), 60000);
  trace_ms.store(-1);
  EXPECT_EQ(get(s.port(), "/api/trace?ms=60001").status, 400);
  EXPECT_EQ(trace_ms.load(), -1);

  // And in a runtime with tracing on, ?ms=0 serves the events the API's zero duration exports.
  spindle::runtime_options options;
  options.workers = 1;
  options.diagnostics.tracing = true;
  options.diagnostics.server_address = "127.0.0.1:0";
  testing::internal::CaptureStderr();
  spindle::runtime rt(options);
  testing::internal::GetCapturedStderr();
  for (int i = 0; i < 20; ++i) rt.block_on([]() -> spindle::task<int> { co_return 1; }());
  const auto served = get(rt.diagnostics_port(), "/api/trace?ms=0");
  ASSERT_EQ(served.status, 200) << served.body;
  const auto events = nlohmann::json::parse(served.body)["traceEvents"];
  std::size_t polls = 0;
  for (const auto& e : events) polls += e.value("ph", "") == "X" ? 1 : 0;
  EXPECT_GE(polls, 20u) << served.body.substr(0, 2000);
}

TEST(DiagnosticsServer, ThePageIsSelfContained) {
  const std::string_view page = server::page();
  EXPECT_NE(page.find("<title>spindle live view</title>"), std::string_view::npos);
  EXPECT_NE(page.find("uPlot"), std::string_view::npos);  // the chart library is inlined
  EXPECT_EQ(page.find("@UPLOT_JS@"), std::string_view::npos);
  EXPECT_EQ(page.find("@UPLOT_CSS@"), std::string_view::npos);
  EXPECT_NE(page.find("/api/snapshot"), std::string_view::npos);
  EXPECT_NE(page.find("/api/trace?ms=2000"), std::string_view::npos);
  // Nothing is loaded from elsewhere.
  for (const char* outside : {"src=\"http", "href=\"http", "src='http", "@import", "//cdn"}) {
    EXPECT_EQ(page.find(outside), std::string_view::npos) << outside;
  }
}

TEST(DiagnosticsServer, MissingProviderIs404AndThrowingProviderIs500) {
  server_providers p;
  p.snapshot = []() -> std::string { throw std::runtime_error("snapshot exploded"); };
  server s("127.0.0.1:0", p);
  EXPECT_EQ(get(s.port(), "/metrics").status, 404);
  EXPECT_EQ(get(s.port(), "/api/trace?ms=5").status, 404);
  auto failed = get(s.port(), "/api/snapshot");
  EXPECT_EQ(failed.status, 500);
  EXPECT_NE(failed.body.find("snapshot exploded"), std::string::npos);
  EXPECT_EQ(get(s.port(), "/").status, 200);  // the server goes on
}

TEST(DiagnosticsServer, StopClosesThePortAndIsIdempotent) {
  server s("127.0.0.1:0", sample_providers());
  const auto port = s.port();
  EXPECT_EQ(get(port, "/metrics").status, 200);
  s.stop();
  s.stop();
  EXPECT_EQ(spindle::test::connect_loopback(port), -1);
}

TEST(DiagnosticsServer, BindingABusyPortThrows) {
  server first("127.0.0.1:0", sample_providers());
  EXPECT_THROW(server("127.0.0.1:" + std::to_string(first.port()), sample_providers()),
               std::system_error);
  EXPECT_THROW(server("not an address", sample_providers()), std::invalid_argument);
}

TEST(DiagnosticsServerSetting, ReadsTheOptionThenTheVariable) {
  spindle::core::diagnostics_options options;
  EXPECT_EQ(resolve_server_setting(options, nullptr).what, server_setting::kind::off);
  for (const char* off : {"", "0", "off", "OFF", "no", "false", "  "}) {
    EXPECT_EQ(resolve_server_setting(options, off).what, server_setting::kind::off) << off;
  }
  struct accepted_case {
    const char* value;
    const char* address;
  };
  for (const accepted_case& c : {accepted_case{"127.0.0.1:9100", "127.0.0.1:9100"},
                                 accepted_case{"127.0.0.1:0", "127.0.0.1:0"},
                                 accepted_case{" 127.0.0.1:0\n", "127.0.0.1:0"},
                                 accepted_case{"localhost:80", "127.0.0.1:80"},
                                 accepted_case{"127.1.2.3:5", "127.1.2.3:5"},
                                 accepted_case{":9100", "127.0.0.1:9100"},
                                 accepted_case{"9100", "127.0.0.1:9100"},
                                 accepted_case{"[::1]:9100", "[::1]:9100"}}) {
    const auto s = resolve_server_setting(options, c.value);
    EXPECT_EQ(s.what, server_setting::kind::serve) << c.value << ": " << s.error;
    EXPECT_EQ(s.address, c.address) << c.value;
  }
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:12ab", "example.com:80", "::1:80", "[::1]", "[::1]80",
                          "0.0.0.0:9100", "10.1.2.3:9100", "[::]:9100", "1.2.3.4.5:1",
                          "127.0.0.1:99999999999999999999"}) {
    const auto s = resolve_server_setting(options, bad);
    EXPECT_EQ(s.what, server_setting::kind::invalid) << bad;
    EXPECT_NE(s.error.find("SPINDLE_DIAGNOSTICS"), std::string::npos) << s.error;
    EXPECT_NE(s.error.find("No diagnostics server started"), std::string::npos) << s.error;
  }
  // Beyond loopback only when told.
  options.serve_beyond_loopback = true;
  EXPECT_EQ(resolve_server_setting(options, "0.0.0.0:9100").what, server_setting::kind::serve);
  // The option wins over the variable, and "off" there disables the variable.
  options.server_address = "127.0.0.1:7";
  EXPECT_EQ(resolve_server_setting(options, "127.0.0.1:8").address, "127.0.0.1:7");
  options.server_address = "off";
  EXPECT_EQ(resolve_server_setting(options, "127.0.0.1:8").what, server_setting::kind::off);
}

spindle::task<int> wait_for_an_order(spindle::channel<int>& orders) {
  auto order = co_await orders.receive();
  co_return order ? *order : -1;
}

spindle::task<void> spawn_waiting_clerk(spindle::channel<int>& orders,
                                        spindle::join_handle<int>& clerk) {
  clerk = spindle::spawn_named("clerk-waiting-for-orders", wait_for_an_order(orders));
  co_return;
}

TEST(DiagnosticsServerInRuntime, ServesItsExecutorsTasksAndMetrics) {
  spindle::runtime_options options;
  options.workers = 2;
  options.diagnostics.server_address = "127.0.0.1:0";
  testing::internal::CaptureStderr();
  spindle::runtime rt(options);
  const std::string said = testing::internal::GetCapturedStderr();
  const auto port = rt.diagnostics_port();
  ASSERT_NE(port, 0);
  EXPECT_NE(said.find("http://127.0.0.1:" + std::to_string(port) + "/"), std::string::npos) << said;

  spindle::channel<int> orders(1);
  spindle::join_handle<int> clerk;
  rt.block_on(spawn_waiting_clerk(orders, clerk));
  // Spawned is not yet suspended on the channel: the server is asked once the clerk waits there.
  ASSERT_TRUE(spindle::testing::eventually(
      [&] {
        const spindle::runtime_snapshot snap = rt.snapshot();
        const spindle::task_info* t = snap.find_task("clerk-waiting-for-orders");
        return t != nullptr && t->state == spindle::task_state::suspended &&
               t->waiting_on.kind != spindle::wait_kind::none;
      },
      std::chrono::seconds(10)));

  auto snapshot = get(port, "/api/snapshot");
  ASSERT_EQ(snapshot.status, 200) << snapshot.head;
  const auto json = nlohmann::json::parse(snapshot.body);
  ASSERT_EQ(json["executors"].size(), 2u);
  EXPECT_EQ(json["executors"][1]["index"], 1);
  EXPECT_TRUE(json["executors"][0]["utilisation"].is_number());
  EXPECT_TRUE(json["tasks"].is_array());
  EXPECT_TRUE(json["sections"].is_object());
  EXPECT_TRUE(json["sections"]["warnings"]["current"].is_array());
  EXPECT_TRUE(json["executors"][0]["queues"]["local"].is_number());
  bool named = false;
  for (const auto& t : json["tasks"]) {
    if (t["name"] == "clerk-waiting-for-orders") {
      named = true;
      EXPECT_EQ(t["state"], "suspended");
      EXPECT_NE(t["waiting_on"].get<std::string>().find("channel#"), std::string::npos) << t;
    }
  }
  EXPECT_TRUE(named) << snapshot.body;

  auto metrics = get(port, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("spindle_executor_utilisation_ratio{executor=\"1\"}"), std::string::npos);
  EXPECT_NE(metrics.body.find("spindle_tasks_live "), std::string::npos);
  // What promtool, Prometheus' own checker, says of it (Debian: prometheus).
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    const std::string file = testing::TempDir() + "spindle-live-view-metrics.txt";
    std::ofstream(file) << metrics.body;
    EXPECT_EQ(std::system(("promtool check metrics < " + file + " > /dev/null 2>&1").c_str()), 0)
        << metrics.body;
  }

  auto trace = nlohmann::json::parse(get(port, "/api/trace?ms=100").body);
  EXPECT_TRUE(trace["traceEvents"].is_array());

  orders.close();
  EXPECT_EQ(clerk.join(), -1);
  rt.shutdown();
  EXPECT_EQ(spindle::test::connect_loopback(port), -1);  // stopped with the runtime
}

TEST(DiagnosticsServerInRuntime, ABadVariableIsReportedAndTheProgramGoesOn) {
  ASSERT_EQ(::setenv("SPINDLE_DIAGNOSTICS", "127.0.0.1:not-a-port", 1), 0);
  testing::internal::CaptureStderr();
  {
    spindle::runtime rt({.workers = 1});
    EXPECT_EQ(rt.diagnostics_port(), 0);
    EXPECT_EQ(rt.block_on([]() -> spindle::task<int> { co_return 42; }()), 42);
  }
  const std::string said = testing::internal::GetCapturedStderr();
  ::unsetenv("SPINDLE_DIAGNOSTICS");
  EXPECT_NE(said.find("SPINDLE_DIAGNOSTICS=\"127.0.0.1:not-a-port\""), std::string::npos) << said;
}

TEST(DiagnosticsServerInRuntime, TheVariableStartsItAndABusyPortIsReported) {
  ASSERT_EQ(::setenv("SPINDLE_DIAGNOSTICS", "127.0.0.1:0", 1), 0);
  testing::internal::CaptureStderr();
  spindle::runtime first({.workers = 1});
  ::unsetenv("SPINDLE_DIAGNOSTICS");
  ASSERT_NE(first.diagnostics_port(), 0);
  spindle::runtime_options options;
  options.workers = 1;
  options.diagnostics.server_address = "127.0.0.1:" + std::to_string(first.diagnostics_port());
  spindle::runtime second(options);  // the port is taken: no server, no crash
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(second.diagnostics_port(), 0);
  EXPECT_NE(said.find("no diagnostics server"), std::string::npos) << said;
  EXPECT_EQ(get(first.diagnostics_port(), "/api/snapshot").status, 200);
}

struct manual_host final : spindle::embed::integration {
  spindle::clock_time now() const noexcept override { return spindle::clock_time{}; }
  void tick_at(spindle::clock_time) noexcept override {}
  void tick_soon() noexcept override {}
};

TEST(DiagnosticsServerInEmbeddedExecutor, ServesWhileTheHostDoesNotTick) {
  manual_host host;
  spindle::embed::embedded_options options;
  options.diagnostics.server_address = "127.0.0.1:0";
  testing::internal::CaptureStderr();
  auto ex = std::make_unique<spindle::embed::embedded_executor>(host, options);
  testing::internal::GetCapturedStderr();
  const auto port = ex->diagnostics_port();
  ASSERT_NE(port, 0);
  spindle::channel<int> orders(1);
  auto waiting = ex->spawn(wait_for_an_order(orders));
  ex->tick();  // it runs and waits on the channel
  auto snapshot = get(port, "/api/snapshot");  // no tick while the server answers
  ASSERT_EQ(snapshot.status, 200);
  const auto json = nlohmann::json::parse(snapshot.body);
  ASSERT_EQ(json["executors"].size(), 1u);
  EXPECT_EQ(json["executors"][0]["kind"], "embedded");
  EXPECT_EQ(json["tasks"].size(), 1u);
  ex.reset();
  EXPECT_EQ(spindle::test::connect_loopback(port), -1);
}

}  // namespace
