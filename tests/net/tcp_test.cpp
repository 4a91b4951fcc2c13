// TCP on both reactor backends: loopback echo with many concurrent connections (every byte
// checked), one-byte reads and writes, short writes, read_exact, peer reset mid-transfer,
// accept under a connection storm, connection refused, endpoints, close, IPv6, and shutting a
// runtime down with operations in flight.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
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
using spindle::testing::join_bounded;

class NetTcp : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetTcp);

// --- echo ------------------------------------------------------------------------------------

TEST_P(NetTcp, EchoWithAThousandConcurrentConnections) {
  const int connections = scaled(1000, 1000, 500);
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0), 4096);
  const endpoint server = listener.local_endpoint();
  EXPECT_EQ(server.to_string().rfind("127.0.0.1:", 0), 0u);
  EXPECT_NE(server.port(), 0);

  auto served = rt.spawn(echo_server(listener, connections));
  auto verified = rt.spawn(run_echo_clients(server, connections));
  EXPECT_EQ(join_bounded(std::move(verified), 120s), connections);
  std::size_t expected = 0;
  for (int i = 0; i < connections; ++i) expected += echo_size(std::uint32_t(i));
  EXPECT_EQ(join_bounded(std::move(served), 60s), expected);
  EXPECT_TRUE(spindle::testing::eventually([&] { return rt.live_tasks() == 0; }));
}

TEST_P(NetTcp, EchoOverIPv6Loopback) {
  spindle::runtime rt(options());
  tcp_listener listener;
  try {
    listener = tcp_listener::bind(endpoint("::1", 0));
  } catch (const std::system_error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  const endpoint server = listener.local_endpoint();
  EXPECT_EQ(server.family(), AF_INET6);
  EXPECT_EQ(server.to_string().rfind("[::1]:", 0), 0u);
  auto served = rt.spawn(echo_server(listener, 8));
  EXPECT_EQ(join_bounded(rt.spawn(run_echo_clients(server, 8)), 60s), 8);
  join_bounded(std::move(served), 60s);
}

// --- one byte at a time, short writes, read_exact ----------------------------------------------

struct bytewise_result {
  std::vector<std::byte> received;
  int reads = 0;
  int reads_not_one = 0;
};

task<bytewise_result> read_bytewise(tcp_stream& stream) {
  bytewise_result result;
  std::array<std::byte, 1> buffer;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    ++result.reads;
    if (n != 1) ++result.reads_not_one;
    result.received.push_back(buffer[0]);
  }
  co_return result;
}

struct one_byte_outcome {
  int size = 0;
  int writes_not_one = 0;
  bytewise_result server;
  std::vector<std::byte> echoed;  // read back with read_exact in odd-sized pieces
};

task<one_byte_outcome> one_byte_exchange(tcp_listener& listener, int size) {
  one_byte_outcome outcome;
  outcome.size = size;
  auto [client, server] = co_await connected_pair(listener);
  client.set_no_delay(true);
  auto reader = spindle::spawn(read_bytewise(server));
  const std::vector<std::byte> data = pattern(7, std::size_t(size));
  for (int i = 0; i < size; ++i) {
    const std::size_t n = co_await client.write(std::span<const std::byte>(&data[std::size_t(i)], 1));
    if (n != 1) ++outcome.writes_not_one;
  }
  client.shutdown(SHUT_WR);
  outcome.server = co_await std::move(reader);

  // Back the other way in one write_all; read it with read_exact in pieces of 1..13 bytes.
  co_await server.write_all(outcome.server.received);
  server.shutdown(SHUT_WR);
  outcome.echoed.resize(std::size_t(size));
  std::size_t done = 0;
  for (std::size_t piece = 1; done < outcome.echoed.size(); piece = piece % 13 + 1) {
    const std::size_t n = std::min(piece, outcome.echoed.size() - done);
    co_await client.read_exact(std::span<std::byte>(outcome.echoed).subspan(done, n));
    done += n;
  }
  std::array<std::byte, 4> rest;
  if (co_await client.read(rest) != 0) outcome.echoed.push_back(std::byte{0xEE});  // extra data
  co_return outcome;
}

TEST_P(NetTcp, OneByteWritesAndOneByteReads) {
  const int size = scaled(20000, 5000, 2000);
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  const one_byte_outcome outcome = join_bounded(rt.spawn(one_byte_exchange(listener, size)), 120s);
  EXPECT_EQ(outcome.writes_not_one, 0);
  EXPECT_EQ(outcome.server.reads, size);
  EXPECT_EQ(outcome.server.reads_not_one, 0);
  ASSERT_EQ(outcome.server.received.size(), std::size_t(size));
  EXPECT_EQ(first_mismatch(outcome.server.received, 7), std::size_t(size));
  ASSERT_EQ(outcome.echoed.size(), std::size_t(size));
  EXPECT_EQ(first_mismatch(outcome.echoed, 7), std::size_t(size));
}

struct short_write_outcome {
  std::size_t first_write = 0;
  std::vector<std::byte> received;
  std::size_t reads = 0;
};

task<std::size_t> read_all_small(tcp_stream& stream, std::vector<std::byte>& sink, std::size_t piece) {
  std::vector<std::byte> buffer(piece);
  std::size_t reads = 0;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    ++reads;
    sink.insert(sink.end(), buffer.begin(), buffer.begin() + std::ptrdiff_t(n));
  }
  co_return reads;
}

task<short_write_outcome> short_writes(tcp_listener& listener, std::size_t size) {
  short_write_outcome outcome;
  auto [client, server] = co_await connected_pair(listener);
  // A small send buffer; the receive buffer stays large enough for the window to move (below
  // one segment, TCP's silly-window avoidance would make each refill wait for a probe timer).
  set_buffer_sizes(client.native_handle(), 4096, 0);
  set_buffer_sizes(server.native_handle(), 0, 64 * 1024);
  const std::vector<std::byte> data = pattern(3, size);
  // One write of everything: the kernel takes what fits (a short write), nothing blocks.
  outcome.first_write = co_await client.write(data);
  auto reader = spindle::spawn(read_all_small(server, outcome.received, 7));
  co_await client.write_all(std::span<const std::byte>(data).subspan(outcome.first_write));
  client.shutdown(SHUT_WR);
  outcome.reads = co_await std::move(reader);
  co_return outcome;
}

TEST_P(NetTcp, ShortWritesAndSmallReads) {
  const std::size_t size = std::size_t(scaled(1 << 20, 1 << 19, 1 << 18));
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  const short_write_outcome outcome = join_bounded(rt.spawn(short_writes(listener, size)), 120s);
  EXPECT_GT(outcome.first_write, 0u);
  EXPECT_LT(outcome.first_write, size);  // a short write
  ASSERT_EQ(outcome.received.size(), size);
  EXPECT_EQ(first_mismatch(outcome.received, 3), size);
  EXPECT_GE(outcome.reads, size / 7);
}

task<std::string> read_exact_past_the_end(tcp_listener& listener, std::vector<std::byte>& into) {
  auto [client, server] = co_await connected_pair(listener);
  co_await server.write_all("0123456789");
  co_await server.close();
  into.assign(100, std::byte{0});
  try {
    co_await client.read_exact(into);
  } catch (const std::system_error& e) {
    if (e.code().value() != ECONNRESET || e.code().category() != std::system_category()) {
      co_return std::string("wrong error: ") + e.what();
    }
    co_return e.what();
  }
  co_return "no exception";
}

TEST_P(NetTcp, ReadExactThrowsWhenTheStreamEndsEarly) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  std::vector<std::byte> buffer;
  const std::string message = join_bounded(rt.spawn(read_exact_past_the_end(listener, buffer)), 30s);
  EXPECT_NE(message.find("spindle: read_exact"), std::string::npos) << message;
  EXPECT_NE(message.find("10 of 100"), std::string::npos) << message;
  EXPECT_EQ(std::memcmp(buffer.data(), "0123456789", 10), 0);
}

// --- peer reset --------------------------------------------------------------------------------

void reset_on_close(tcp_stream& stream) {
  const linger abort_on_close{1, 0};
  ::setsockopt(stream.native_handle(), SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
}

struct reset_outcome {
  int write_errors = 0;      // writes that threw EPIPE / ECONNRESET
  int read_errors = 0;       // reads that threw ECONNRESET (or another system_error)
  int read_ends = 0;         // reads that returned 0
  int connect_resets = 0;    // the reset came before connect reported success (ECONNRESET)
  int unexpected = 0;        // anything else (a write that never failed, another exception)
};

// Connects; a reset racing the handshake's completion may fail the connect with ECONNRESET.
task<tcp_stream> connect_or_reset(endpoint server, reset_outcome& outcome) {
  try {
    co_return co_await tcp_stream::connect(server);
  } catch (const std::system_error& e) {
    ++(error_of(e) == ECONNRESET ? outcome.connect_resets : outcome.unexpected);
  }
  co_return tcp_stream();
}

// Server side: reads until `threshold` bytes arrived, then resets the connection.
task<void> read_then_reset(tcp_listener& listener, std::size_t threshold) {
  tcp_stream stream = co_await listener.accept();
  std::array<std::byte, 4096> buffer;
  std::size_t total = 0;
  while (total < threshold) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    total += n;
  }
  reset_on_close(stream);
  // The destructor closes synchronously: RST.
}

// Client side: writes until the reset shows, then reads.
task<void> write_until_reset(endpoint server, reset_outcome& outcome) {
  tcp_stream stream = co_await connect_or_reset(server, outcome);
  if (!stream.is_open()) co_return;
  const std::vector<std::byte> chunk = pattern(1, 256 * 1024);
  bool failed = false;
  try {
    for (int i = 0; i < 4096 && !failed; ++i) co_await stream.write_all(chunk);  // 1 GiB cap
  } catch (const std::system_error& e) {
    failed = true;
    if (error_of(e) == EPIPE || error_of(e) == ECONNRESET) {
      ++outcome.write_errors;
    } else {
      ++outcome.unexpected;
    }
  }
  if (!failed) ++outcome.unexpected;
  std::array<std::byte, 64> buffer;
  try {
    for (;;) {
      if (co_await stream.read(buffer) == 0) {
        ++outcome.read_ends;
        break;
      }
    }
  } catch (const std::system_error&) {
    ++outcome.read_errors;
  }
}

// Server side: sends `before` bytes, then resets while the client is (probably) waiting in read.
task<void> send_then_reset(tcp_listener& listener, std::size_t before) {
  tcp_stream stream = co_await listener.accept();
  const std::vector<std::byte> data = pattern(2, before);
  co_await stream.write_all(data);
  co_await spindle::yield_now();
  reset_on_close(stream);
}

task<void> read_until_reset(endpoint server, reset_outcome& outcome) {
  tcp_stream stream = co_await connect_or_reset(server, outcome);
  if (!stream.is_open()) co_return;
  std::array<std::byte, 512> buffer;
  try {
    for (;;) {
      if (co_await stream.read(buffer) == 0) {
        ++outcome.read_ends;
        break;
      }
    }
  } catch (const std::system_error& e) {
    if (error_of(e) == ECONNRESET) {
      ++outcome.read_errors;
    } else {
      ++outcome.unexpected;
    }
  }
  // Writing after the reset fails too (and raises no SIGPIPE).
  try {
    co_await stream.write_all("after the reset");
    co_await stream.write_all("after the reset");
  } catch (const std::system_error&) {
    ++outcome.write_errors;
  }
}

TEST_P(NetTcp, PeerResetMidTransferGivesAnErrorOrEndOfStream) {
  // SIGPIPE keeps its default action (death): only MSG_NOSIGNAL keeps this process alive.
  struct sigaction current{};
  ::sigaction(SIGPIPE, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);

  const int rounds = scaled(40, 16, 8);
  spindle::runtime rt(options());
  for (int round = 0; round < rounds; ++round) {
    auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
    const endpoint server = listener.local_endpoint();

    reset_outcome writing;
    auto resetter = rt.spawn(read_then_reset(listener, std::size_t(round) * 37 * 1024));
    join_bounded(rt.spawn(write_until_reset(server, writing)), 60s);
    join_bounded(std::move(resetter), 60s);
    EXPECT_EQ(writing.write_errors + writing.connect_resets, 1) << "round " << round;
    EXPECT_EQ(writing.read_errors + writing.read_ends, writing.write_errors) << "round " << round;
    EXPECT_EQ(writing.unexpected, 0) << "round " << round;

    reset_outcome reading;
    auto sender = rt.spawn(send_then_reset(listener, std::size_t(round % 4) * 1000));
    join_bounded(rt.spawn(read_until_reset(server, reading)), 60s);
    join_bounded(std::move(sender), 60s);
    EXPECT_EQ(reading.read_errors + reading.read_ends + reading.connect_resets, 1)
        << "round " << round;
    EXPECT_EQ(reading.unexpected, 0) << "round " << round;
  }
}

// --- connection storm --------------------------------------------------------------------------

constexpr std::uint32_t reply_key = 0x5A5AA5A5u;

task<bool> storm_session(tcp_stream stream) {
  std::uint32_t id = 0;
  co_await stream.read_exact(std::as_writable_bytes(std::span(&id, 1)));
  const std::uint32_t reply = id ^ reply_key;
  co_await stream.write_all(std::as_bytes(std::span(&reply, 1)));
  std::array<std::byte, 8> rest;
  co_return co_await stream.read(rest) == 0;
}

task<int> storm_server(tcp_listener& listener, int count) {
  std::vector<join_handle<bool>> sessions;
  sessions.reserve(std::size_t(count));
  for (int i = 0; i < count; ++i) sessions.push_back(spindle::spawn(storm_session(co_await listener.accept())));
  int ok = 0;
  for (auto& session : sessions) ok += (co_await std::move(session)) ? 1 : 0;
  co_return ok;
}

task<bool> storm_client(endpoint server, std::uint32_t id) {
  tcp_stream stream = co_await tcp_stream::connect(server);
  co_await stream.write_all(std::as_bytes(std::span(&id, 1)));
  std::uint32_t reply = 0;
  co_await stream.read_exact(std::as_writable_bytes(std::span(&reply, 1)));
  co_await stream.close();
  co_return reply == (id ^ reply_key);
}

TEST_P(NetTcp, AcceptUnderAConnectionStorm) {
  const int task_clients = scaled(2000, 1000, 500);
  const int thread_clients = scaled(100, 40, 20);  // per plain thread, blocking connects
  constexpr int threads = 4;
  const int total = task_clients + threads * thread_clients;
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0), 4096);
  const endpoint server = listener.local_endpoint();

  // Every client starts connecting before the server accepts anything.
  std::vector<join_handle<bool>> clients;
  clients.reserve(std::size_t(task_clients));
  for (int i = 0; i < task_clients; ++i) clients.push_back(rt.spawn(storm_client(server, std::uint32_t(i))));
  std::atomic<int> thread_ok{0};
  std::vector<std::thread> storm;
  for (int t = 0; t < threads; ++t) {
    storm.emplace_back([&, t] {
      for (int i = 0; i < thread_clients; ++i) {
        const int fd = blocking_connect(server);
        if (fd < 0) continue;
        const std::uint32_t id = std::uint32_t(1'000'000 + t * 10'000 + i);
        std::uint32_t reply = 0;
        if (::send(fd, &id, sizeof id, MSG_NOSIGNAL) == sizeof id &&
            ::recv(fd, &reply, sizeof reply, MSG_WAITALL) == sizeof reply && reply == (id ^ reply_key)) {
          thread_ok.fetch_add(1);
        }
        ::close(fd);
      }
    });
  }
  auto served = rt.spawn(storm_server(listener, total));
  int ok = 0;
  for (auto& client : clients) ok += join_bounded(std::move(client), 120s) ? 1 : 0;
  for (auto& thread : storm) thread.join();
  EXPECT_EQ(ok, task_clients);
  EXPECT_EQ(thread_ok.load(), threads * thread_clients);
  EXPECT_EQ(join_bounded(std::move(served), 60s), total);
}

// --- connect errors, endpoints, close ----------------------------------------------------------

task<int> connect_only(endpoint remote) {
  tcp_stream stream = co_await tcp_stream::connect(remote);
  co_return stream.native_handle();
}

TEST_P(NetTcp, ConnectToAClosedPortIsRefused) {
  spindle::runtime rt(options());
  endpoint closed;
  {
    auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
    closed = listener.local_endpoint();
  }
  const int fds_before = spindle::testing::open_descriptor_count();
  for (int i = 0; i < 20; ++i) {
    try {
      rt.block_on(connect_only(closed));
      ADD_FAILURE() << "connected to a closed port";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), ECONNREFUSED) << e.what();
      EXPECT_EQ(e.code().category(), std::system_category());
      EXPECT_EQ(std::string(e.what()).rfind("spindle: connect", 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), fds_before);  // the failed sockets were closed
  EXPECT_THROW(rt.block_on(connect_only(endpoint())), spindle::usage_error);
}

struct endpoints_seen {
  endpoint client_local, client_remote, server_local, server_remote;
  bool no_delay = false;
  bool closed_is_not_open = false;
  int read_after_close_error = 0;
};

task<endpoints_seen> look_at_endpoints(tcp_listener& listener) {
  endpoints_seen seen;
  auto [client, server] = co_await connected_pair(listener);
  seen.client_local = client.local_endpoint();
  seen.client_remote = client.remote_endpoint();
  seen.server_local = server.local_endpoint();
  seen.server_remote = server.remote_endpoint();
  client.set_no_delay(true);
  int value = 0;
  socklen_t length = sizeof value;
  ::getsockopt(client.native_handle(), IPPROTO_TCP, TCP_NODELAY, &value, &length);
  seen.no_delay = value != 0;
  co_await client.close();
  seen.closed_is_not_open = !client.is_open() && client.native_handle() < 0;
  co_await client.close();  // closing twice does nothing
  std::array<std::byte, 4> buffer;
  try {
    co_await client.read(buffer);
  } catch (const std::system_error& e) {
    seen.read_after_close_error = error_of(e);
  }
  co_return seen;
}

TEST_P(NetTcp, EndpointsOptionsAndClose) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::any_v4(0));
  EXPECT_EQ(listener.local_endpoint().to_string().rfind("0.0.0.0:", 0), 0u);
  auto loopback = tcp_listener::bind(endpoint::loopback_v4(0));
  const endpoints_seen seen = join_bounded(rt.spawn(look_at_endpoints(loopback)), 30s);
  EXPECT_EQ(seen.client_remote, loopback.local_endpoint());
  EXPECT_EQ(seen.server_local, loopback.local_endpoint());
  EXPECT_EQ(seen.server_remote, seen.client_local);
  EXPECT_TRUE(seen.no_delay);
  EXPECT_TRUE(seen.closed_is_not_open);
  EXPECT_EQ(seen.read_after_close_error, EBADF);

  // Binding a port in use fails with EADDRINUSE.
  try {
    auto again = tcp_listener::bind(loopback.local_endpoint());
    ADD_FAILURE() << "bound twice";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EADDRINUSE);
    EXPECT_EQ(std::string(e.what()).rfind("spindle: bind", 0), 0u) << e.what();
  }
}

TEST_P(NetTcp, MovesAndDestructorsOwnTheDescriptor) {
  spindle::runtime rt(options());
  const int before = spindle::testing::open_descriptor_count();
  {
    auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
    auto [client, server] = join_bounded(rt.spawn(connected_pair(listener)), 30s);
    EXPECT_EQ(spindle::testing::open_descriptor_count(), before + 3);
    tcp_stream moved(std::move(client));
    EXPECT_FALSE(client.is_open());
    EXPECT_TRUE(moved.is_open());
    tcp_stream target;
    target = std::move(server);
    EXPECT_FALSE(server.is_open());
    target = std::move(moved);  // closes what target held
    EXPECT_EQ(spindle::testing::open_descriptor_count(), before + 2);
    tcp_listener other = std::move(listener);
    EXPECT_FALSE(listener.is_open());
    EXPECT_TRUE(other.is_open());
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

task<void> close_listener(tcp_listener& listener) { co_await listener.close(); }

TEST_P(NetTcp, PendingAcceptIsCancellable) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  for (int i = 0; i < 50; ++i) {
    auto pending = rt.spawn(listener.accept());
    if (i % 2 == 1) std::this_thread::sleep_for(1ms);  // let it reach the kernel
    pending.cancel();
    EXPECT_TRUE(spindle::testing::joined_cancelled(pending));
  }
  // The listener still works.
  auto accepting = rt.spawn(listener.accept());
  const int fd = blocking_connect(listener.local_endpoint());
  ASSERT_GE(fd, 0);
  tcp_stream accepted = join_bounded(std::move(accepting), 30s);
  EXPECT_TRUE(accepted.is_open());
  ::close(fd);
  join_bounded(rt.spawn(close_listener(listener)), 30s);
  EXPECT_FALSE(listener.is_open());
}

// --- shutdown with operations in flight --------------------------------------------------------

task<void> read_forever(tcp_stream stream, std::atomic<int>& waiting) {
  std::array<std::byte, 16> buffer;
  waiting.fetch_add(1);
  while (co_await stream.read(buffer) != 0) {
  }
}

task<void> park_connections(tcp_listener& listener, int count, std::atomic<int>& waiting) {
  for (int i = 0; i < count; ++i) {
    auto [client, server] = co_await connected_pair(listener);
    spindle::spawn(read_forever(std::move(client), waiting)).detach();
    spindle::spawn(read_forever(std::move(server), waiting)).detach();
  }
}

TEST_P(NetTcp, RuntimeShutdownWithReadsInFlightLeaksNothing) {
  const int before = spindle::testing::open_descriptor_count();
  {
    auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
    spindle::runtime rt(options());
    std::atomic<int> waiting{0};
    join_bounded(rt.spawn(park_connections(listener, 64, waiting)), 30s);
    ASSERT_TRUE(spindle::testing::eventually([&] { return waiting.load() == 128; }));
    std::this_thread::sleep_for(5ms);  // let the reads reach the kernel
    EXPECT_EQ(rt.live_tasks(), 128u);
  }  // runtime destroyed: reads cancelled, frames (and their sockets) destroyed
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

}  // namespace
