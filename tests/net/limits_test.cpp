// Descriptor limits on both backends: accept keeps serving once a full descriptor table is
// freed (EMFILE), and ten thousand idle connections (each a task waiting in read) stay served.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "net/net_test_support.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::testing::eventually;
using spindle::testing::join_bounded;

class NetLimits : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetLimits);

// Reads one byte, sends it back, waits for the end of the stream.
task<bool> ping_session(tcp_stream stream, std::atomic<int>& waiting) {
  std::array<std::byte, 1> byte;
  waiting.fetch_add(1);
  const std::size_t n = co_await stream.read(byte);
  waiting.fetch_sub(1);
  if (n != 1) co_return false;
  co_await stream.write_all(byte);
  std::array<std::byte, 8> rest;
  co_return co_await stream.read(rest) == 0;
}

task<int> ping_server(tcp_listener& listener, int count, std::atomic<int>& accepted,
                      std::atomic<int>& waiting) {
  std::vector<join_handle<bool>> sessions;
  sessions.reserve(std::size_t(count));
  for (int i = 0; i < count; ++i) {
    tcp_stream stream = co_await listener.accept();
    accepted.fetch_add(1);
    sessions.push_back(spindle::spawn(ping_session(std::move(stream), waiting)));
  }
  int ok = 0;
  for (auto& session : sessions) ok += (co_await std::move(session)) ? 1 : 0;
  co_return ok;
}

task<void> nap() { co_await spindle::sleep_for(1ms); }

TEST_P(NetLimits, AcceptKeepsServingAfterTheDescriptorTableWasFull) {
  constexpr int clients = 8;
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  const endpoint server = listener.local_endpoint();
  std::atomic<int> accepted{0}, waiting{0};
  // While the table is full, UBSan's vptr check cannot probe memory (it uses a pipe) and reports
  // any type it has not seen yet as "invalid vptr": a sleep now puts the types of the waiting
  // accept into its cache.
  join_bounded(rt.spawn(nap()), 30s);
  // A first connection is served normally.
  {
    auto first = rt.spawn(ping_server(listener, 1, accepted, waiting));
    const int fd = blocking_connect(server);
    ASSERT_GE(fd, 0);
    const unsigned char b = 42;
    ASSERT_EQ(::send(fd, &b, 1, MSG_NOSIGNAL), 1);
    ASSERT_TRUE(readable_within(fd, 30s));
    unsigned char echo = 0;
    EXPECT_EQ(::recv(fd, &echo, 1, 0), 1);
    EXPECT_EQ(echo, 42);
    ::close(fd);
    EXPECT_EQ(join_bounded(std::move(first), 30s), 1);
    accepted = 0;
  }

  // Client sockets exist before the table fills: connecting needs no new descriptor.
  std::vector<int> fds;
  for (int i = 0; i < clients; ++i) fds.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  for (int fd : fds) ASSERT_GE(fd, 0);
  spindle::join_handle<int> served;
  {
    fd_exhaustion full;
    ASSERT_TRUE(full.exhausted());
    ASSERT_LT(::socket(AF_INET, SOCK_STREAM, 0), 0);
    ASSERT_EQ(errno, EMFILE);
    // Started only now: io_uring reads RLIMIT_NOFILE when it prepares an accept, so an accept
    // submitted before the limit was lowered would still get a descriptor above it.
    served = rt.spawn(ping_server(listener, clients, accepted, waiting));
    for (int i = 0; i < clients; ++i) {
      ASSERT_EQ(::connect(fds[std::size_t(i)], server.native(), server.native_length()), 0);
      const unsigned char b = static_cast<unsigned char>(i + 1);
      ASSERT_EQ(::send(fds[std::size_t(i)], &b, 1, MSG_NOSIGNAL), 1);
    }
    // The connections wait in the backlog: accept gets EMFILE, waits, tries again.
    std::this_thread::sleep_for(150ms);
    EXPECT_EQ(accepted.load(), 0);
    EXPECT_FALSE(served.is_finished());  // accept did not fail
    full.release();
  }
  for (int i = 0; i < clients; ++i) {
    const int fd = fds[std::size_t(i)];
    ASSERT_TRUE(readable_within(fd, 30s)) << "connection " << i << " was never served";
    unsigned char b = 0;
    EXPECT_EQ(::recv(fd, &b, 1, 0), 1);
    EXPECT_EQ(b, i + 1);
    ::close(fd);
  }
  EXPECT_EQ(join_bounded(std::move(served), 30s), clients);
  EXPECT_EQ(accepted.load(), clients);
}

// The client side of the idle test, in a child process (so each process needs only about one
// descriptor per connection): connects `count` times, reports 'r', waits for 'g', then sends one
// byte on each connection, checks each echo and closes everything. The exit code says where it
// failed (0: success).
int idle_clients(const endpoint& server, int count, int ready_fd, int go_fd) {
  std::vector<int> fds;
  fds.reserve(std::size_t(count));
  for (int i = 0; i < count; ++i) {
    const int fd = blocking_connect(server);
    if (fd < 0) return 10;
    fds.push_back(fd);
  }
  if (::write(ready_fd, "r", 1) != 1) return 11;
  char go = 0;
  if (::read(go_fd, &go, 1) != 1 || go != 'g') return 12;
  for (int i = 0; i < count; ++i) {
    const unsigned char b = static_cast<unsigned char>(i % 251);
    if (::send(fds[std::size_t(i)], &b, 1, MSG_NOSIGNAL) != 1) return 13;
  }
  for (int i = 0; i < count; ++i) {
    unsigned char b = 0;
    if (::recv(fds[std::size_t(i)], &b, 1, MSG_WAITALL) != 1 || b != i % 251) return 14;
  }
  for (int fd : fds) ::close(fd);
  return 0;
}

TEST_P(NetLimits, TenThousandIdleConnections) {
  const int connections = scaled(10000, 5000, 2000);
  fd_limit_guard limit;
  const rlim_t needed = rlim_t(connections) + 512;
  if (limit.raise_soft_to(needed) < needed) {
    GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << limit.saved().rlim_max << " is below " << needed;
  }
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0), 4096);
  const endpoint server = listener.local_endpoint();
  int ready[2], go[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);

  // Forked before the runtime exists: the child is a plain single-threaded client.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(listener.native_handle());
    ::close(ready[0]);
    ::close(go[1]);
    ::_exit(idle_clients(server, connections, ready[1], go[0]));
  }
  ::close(ready[1]);
  ::close(go[0]);
  auto reap = [child](std::chrono::seconds limit_s) {
    int status = -1;
    const bool exited = eventually([&] { return ::waitpid(child, &status, WNOHANG) == child; }, limit_s);
    if (!exited) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  };

  {
    spindle::runtime rt(options());
    std::atomic<int> accepted{0}, waiting{0};
    auto served = rt.spawn(ping_server(listener, connections, accepted, waiting));
    char r = 0;
    const bool child_ready = ::read(ready[0], &r, 1) == 1 && r == 'r';
    EXPECT_TRUE(child_ready);
    const bool all_waiting =
        child_ready && eventually([&] { return waiting.load() == connections; }, 120s);
    EXPECT_TRUE(all_waiting) << accepted.load() << " accepted, " << waiting.load() << " waiting";
    if (all_waiting) {
      // Idle: every connection is a task suspended in read; nothing moves.
      std::this_thread::sleep_for(200ms);
      EXPECT_EQ(waiting.load(), connections);
      EXPECT_FALSE(served.is_finished());
      EXPECT_EQ(rt.live_tasks(), std::size_t(connections) + 1);
      ASSERT_EQ(::write(go[1], "g", 1), 1);
      EXPECT_EQ(join_bounded(std::move(served), 120s), connections);
      EXPECT_EQ(reap(60s), 0);
    } else {
      served.cancel();
      ::kill(child, SIGKILL);
      reap(10s);
    }
  }
  ::close(ready[0]);
  ::close(go[1]);
}

}  // namespace
