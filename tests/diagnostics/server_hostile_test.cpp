// Hostile and malformed requests to the live view (diagnostics/server.hpp): each gets its status
// or is cut off, the server and the runtime it serves go on, and no descriptor leaks. And the
// server answers while an executor is stuck in one runnable.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "diagnostics/server_test_client.hpp"
#include "spindle/diagnostics/server.hpp"
#include "spindle/spindle.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::diagnostics::server;
using spindle::diagnostics::server_limits;
using spindle::diagnostics::server_providers;
using spindle::test::http_exchange;
using spindle::test::get;

server_providers plain_providers() {
  server_providers p;
  p.metrics = [] { return std::string("up 1\n"); };
  p.snapshot = [] { return std::string("{}"); };
  p.trace = [](std::chrono::milliseconds) { return std::string(R"({"traceEvents":[]})"); };
  return p;
}

// Waits (bounded) until the process holds `expected` descriptors; returns the last count.
int settle_descriptors(int expected) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  int now = spindle::test::open_descriptors();
  while (now != expected && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
    now = spindle::test::open_descriptors();
  }
  return now;
}

TEST(DiagnosticsServerHostile, EachMalformedRequestGetsItsStatus) {
  server s("127.0.0.1:0", plain_providers());
  const auto port = s.port();
  struct hostile_case {
    const char* what;
    std::string request;
    int status;
  };
  const std::string huge_header = "X-Filler: " + std::string(9000, 'a') + "\r\n";
  std::string many_headers;
  for (int i = 0; i < 400; ++i) many_headers += "X-H" + std::to_string(i) + ": 12345678901234\r\n";
  const std::vector<hostile_case> cases = {
      {"not HTTP", "HELLO THERE\r\n\r\n", 400},
      {"binary", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), 400},
      {"bad version", "GET / HTTP/9.x\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"space in target", "GET /a b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"bad header line", "GET / HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n", 400},
      {"POST", "POST /api/snapshot HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n", 405},
      {"HEAD", "HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405},
      {"DELETE", "DELETE / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405},
      {"a body", "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello", 413},
      {"a chunked body",
       "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
       413},
      {"one huge header", "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + huge_header + "\r\n", 431},
      {"many headers", "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many_headers + "\r\n", 431},
      {"huge target", "GET /" + std::string(10000, 'x') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 431},
      {"rebinding", "GET /api/snapshot HTTP/1.1\r\nHost: attacker.example:8080\r\n\r\n", 403},
      {"ms not a number", "GET /api/trace?ms=abc HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"ms zero", "GET /api/trace?ms=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"ms too large", "GET /api/trace?ms=60001 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"ms negative", "GET /api/trace?ms=-5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"ms empty", "GET /api/trace?ms= HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"ms overflow", "GET /api/trace?ms=99999999999999999999 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400},
      {"absolute target elsewhere", "GET http://attacker.example/ HTTP/1.1\r\nHost: attacker.example\r\n\r\n", 403},
  };
  for (const hostile_case& c : cases) {
    const auto answer = http_exchange(port, c.request);
    EXPECT_EQ(answer.status, c.status) << c.what << "\n" << answer.head << answer.body;
    EXPECT_TRUE(answer.closed) << c.what;
    EXPECT_EQ(answer.header("Connection"), "close") << c.what;
  }
  EXPECT_EQ(http_exchange(port, "HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").header("Allow"), "GET");
  // Loopback names with or without a port are fine; HTTP/1.0 without a Host header too.
  EXPECT_EQ(http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: localhost:1234\r\n\r\n").status, 200);
  EXPECT_EQ(http_exchange(port, "GET /metrics HTTP/1.1\r\nhOsT: [::1]:80\r\n\r\n").status, 200);
  EXPECT_EQ(http_exchange(port, "GET /metrics HTTP/1.0\r\n\r\n").status, 200);
  EXPECT_EQ(get(port, "/api/snapshot").status, 200);  // and the server goes on
}

TEST(DiagnosticsServerHostile, RequestsSplitIntoSmallPiecesStillParse) {
  server s("127.0.0.1:0", plain_providers());
  const int fd = spindle::test::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: x\r\n\r\n";
  for (char ch : request) ASSERT_TRUE(spindle::test::send_all(fd, std::string_view(&ch, 1)));
  const auto answer = spindle::test::parse_answer(spindle::test::read_until_close(fd, 5s));
  ::close(fd);
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, "up 1\n");
}

TEST(DiagnosticsServerHostile, SlowAndSilentClientsAreCutOffAtTheDeadline) {
  server_limits limits;
  limits.request_deadline = 200ms;
  server s("127.0.0.1:0", plain_providers(), limits);
  // Slowloris: part of a request, then nothing.
  const int slow = spindle::test::connect_loopback(s.port());
  ASSERT_GE(slow, 0);
  ASSERT_TRUE(spindle::test::send_all(slow, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: "));
  // Silent: connects and says nothing.
  const int silent = spindle::test::connect_loopback(s.port());
  ASSERT_GE(silent, 0);
  const auto started = std::chrono::steady_clock::now();
  const auto slow_answer = spindle::test::parse_answer(spindle::test::read_until_close(slow, 5s));
  const auto silent_answer = spindle::test::parse_answer(spindle::test::read_until_close(silent, 5s));
  const auto waited = std::chrono::steady_clock::now() - started;
  ::close(slow);
  ::close(silent);
  EXPECT_TRUE(slow_answer.closed);
  EXPECT_TRUE(silent_answer.closed);
  EXPECT_EQ(slow_answer.status, 408);
  EXPECT_EQ(silent_answer.status, 408);
  EXPECT_LT(waited, 4s);  // cut off by the deadline, not by the client's patience
  EXPECT_EQ(get(s.port(), "/metrics").status, 200);
}

TEST(DiagnosticsServerHostile, ConnectionsOverTheCapGet503) {
  server_limits limits;
  limits.max_connections = 4;
  server s("127.0.0.1:0", plain_providers(), limits);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(spindle::test::connect_loopback(s.port()));
    ASSERT_GE(idle.back(), 0);
  }
  // The server has accepted all four once it refuses the fifth.
  const auto until = std::chrono::steady_clock::now() + 5s;
  spindle::test::http_answer refused;
  while (std::chrono::steady_clock::now() < until) {
    refused = get(s.port(), "/metrics");
    if (refused.status == 503) break;
  }
  EXPECT_EQ(refused.status, 503);
  EXPECT_GE(s.statistics().connections_refused, 1u);
  for (int fd : idle) ::close(fd);
  // Room again once they are gone.
  spindle::test::http_answer served;
  while (std::chrono::steady_clock::now() < until) {
    served = get(s.port(), "/metrics");
    if (served.status == 200) break;
  }
  EXPECT_EQ(served.status, 200);
}

TEST(DiagnosticsServerHostile, NoDescriptorLeaksAndTheRuntimeKeepsWorking) {
  spindle::runtime_options options;
  options.workers = 2;
  options.diagnostics.server_address = "127.0.0.1:0";
  testing::internal::CaptureStderr();
  spindle::runtime rt(options);
  testing::internal::GetCapturedStderr();
  const auto port = rt.diagnostics_port();
  ASSERT_NE(port, 0);
  const int baseline = spindle::test::open_descriptors();

  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([port, c] {
      for (int i = 0; i < 10; ++i) {
        switch ((c + i) % 5) {
          case 0: http_exchange(port, "GARBAGE\r\n\r\n"); break;
          case 1: http_exchange(port, "GET / HTTP/1.1\r\nX: " + std::string(20000, 'y') + "\r\n\r\n"); break;
          case 2: http_exchange(port, "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"); break;
          case 3: get(port, "/api/snapshot"); break;
          default: {  // connect, send half a request, hang up
            const int fd = spindle::test::connect_loopback(port);
            if (fd >= 0) {
              spindle::test::send_all(fd, "GET /metr");
              ::close(fd);
            }
          }
        }
      }
    });
  }
  // Meanwhile the runtime does its work.
  long sum = 0;
  for (int round = 0; round < 20; ++round) {
    sum += rt.block_on([](int n) -> spindle::task<long> {
      spindle::join_set<long> parts;
      for (int i = 0; i < 8; ++i) parts.spawn([](long v) -> spindle::task<long> { co_return v; }(n + i));
      long total = 0;
      for (long part : co_await parts.join_all()) total += part;
      co_return total;
    }(round));
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(sum, 20 * 28 + 8 * 190);
  EXPECT_EQ(settle_descriptors(baseline), baseline);
  EXPECT_EQ(get(port, "/api/snapshot").status, 200);
}

TEST(DiagnosticsServerHostile, AnswersWhileAnExecutorIsStuckInOneRunnable) {
  spindle::runtime_options options;
  options.workers = 1;
  options.diagnostics.server_address = "127.0.0.1:0";
  testing::internal::CaptureStderr();
  spindle::runtime rt(options);
  testing::internal::GetCapturedStderr();
  std::atomic<bool> spinning{false};
  std::atomic<bool> done{false};
  // The only executor runs one runnable for a second: no task anywhere can run meanwhile.
  auto stuck = rt.spawn([](std::atomic<bool>& spinning, std::atomic<bool>& done) -> spindle::task<void> {
    spinning.store(true);
    const auto until = std::chrono::steady_clock::now() + 1s;
    while (std::chrono::steady_clock::now() < until) {
    }
    done.store(true);
    co_return;
  }(spinning, done));
  while (!spinning.load()) std::this_thread::yield();
  const auto asked = std::chrono::steady_clock::now();
  const auto snapshot = get(rt.diagnostics_port(), "/api/snapshot");
  const auto answered_in = std::chrono::steady_clock::now() - asked;
  const bool answered_while_stuck = !done.load();
  EXPECT_EQ(snapshot.status, 200);
  EXPECT_NE(snapshot.body.find("\"executors\""), std::string::npos);
  EXPECT_TRUE(answered_while_stuck);
  EXPECT_LT(answered_in, 900ms);
  stuck.join();
}

}  // namespace
