// Deadlines on the socket calls other than stream reads and writes (deadline_test.cpp has those),
// on both reactor backends: accept (TCP and unix), connect (to an address, and to a host name
// whose lookup is held), UDP send_to/receive_from and unix datagrams. Each call that waits past
// its deadline throws timeout_error and leaves its socket usable; a deadline racing with a
// connection's or a datagram's arrival never loses it (it is returned, or still queued for the
// next call); the runtime's clock decides; nothing leaks.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "net/net_test_support.hpp"
#include "spindle/net/resolve.hpp"
#include "spindle/net/unix.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::timeout_error;
using spindle::net::deadline;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::net::udp_socket;
using spindle::net::unix_datagram;
using spindle::net::unix_endpoint;
using spindle::net::unix_listener;
using spindle::net::unix_stream;
using spindle::testing::join_bounded;

class NetOperationDeadline : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetOperationDeadline);

// A fresh abstract unix name per call (no file to clean up; unique across tests and runs).
unix_endpoint operation_deadline_name() {
  static std::atomic<int> next{0};
  // relaxed: only the number's uniqueness matters.
  return unix_endpoint::abstract("spindle-op-deadline-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(next.fetch_add(1, std::memory_order_relaxed)));
}

task<tcp_stream> deadline_connect_to(const tcp_listener& listener) {
  co_return co_await tcp_stream::connect(listener.local_endpoint());
}
task<unix_stream> deadline_connect_to(const unix_listener& listener) {
  co_return co_await unix_stream::connect(listener.local_endpoint());
}

// Ends the helper task of a race (the other side: clients, a sender), which refers to the racing
// task's frame: cancelled when the race stopped early (`outcome` is not "ok"), awaited either way.
task<std::string> end_race_helper(spindle::join_handle<void> helper, std::string outcome) {
  if (outcome != "ok") helper.cancel();
  try {
    co_await std::move(helper);
  } catch (const spindle::task_cancelled&) {
  }
  co_return outcome;
}

// --- accept -----------------------------------------------------------------------------------

// An accept with nobody connecting times out after at least its deadline; then a connection made
// afterwards is accepted by the next call.
template <class Listener>
task<std::string> accept_times_out_then_works(Listener listener) {
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)co_await listener.accept(deadline::after(20ms));
    co_return "accepted nothing?";
  } catch (const timeout_error&) {
  }
  if (std::chrono::steady_clock::now() - start < 20ms) co_return "too early";
  auto client = co_await deadline_connect_to(listener);
  auto server = co_await listener.accept(deadline::after(30s));
  co_await client.write_all(std::string_view("hi"), deadline::after(30s));
  std::array<std::byte, 2> buffer;
  co_await server.read_exact(buffer, deadline::after(30s));
  co_return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
}

TEST_P(NetOperationDeadline, TcpAcceptTimesOutAndTheListenerStaysUsable) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(accept_times_out_then_works(
                             tcp_listener::bind(endpoint::loopback_v4(0)))),
                         30s),
            "hi");
}

TEST_P(NetOperationDeadline, UnixAcceptTimesOutAndTheListenerStaysUsable) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(accept_times_out_then_works(
                             unix_listener::bind(operation_deadline_name()))),
                         30s),
            "hi");
}

// The clients of the race stay at most this many connections ahead of the acceptor (a permit
// per connection, given back when it is accepted): a bounded backlog.
constexpr std::size_t accept_race_window = 32;

template <class Listener>
task<void> accept_race_clients(const Listener& listener, int count,
                               spindle::semaphore& window) {
  for (int i = 0; i < count; ++i) {
    co_await window.acquire();
    auto client = co_await deadline_connect_to(listener);
    const std::uint32_t id = std::uint32_t(i);
    std::array<std::byte, 4> bytes;
    std::memcpy(bytes.data(), &id, sizeof id);
    co_await client.write_all(std::span<const std::byte>(bytes));
    // The client closes here: its number and its end stay readable on the server side.
    if (i % 4 == 0) co_await spindle::yield_now();
  }
}

// Clients connect one after another while the acceptor uses deadlines of 0 to 2 ms: every
// accept returns a connection or times out, and every connection is accepted exactly once
// (one lost at a deadline would leave the loop waiting: join_bounded turns that into a failure).
template <class Listener>
task<std::string> accept_racing_connections(Listener listener, int count) {
  spindle::semaphore window(accept_race_window);
  auto clients = spindle::spawn(accept_race_clients(listener, count, window));
  std::vector<bool> seen(std::size_t(count), false);
  std::string outcome = "ok";
  for (int round = 0, accepted = 0; accepted < count; ++round) {
    try {
      auto server =
          co_await listener.accept(deadline::after(std::chrono::microseconds(round % 2000)));
      std::array<std::byte, 4> bytes;
      co_await server.read_exact(bytes, deadline::after(30s));
      std::uint32_t id = 0;
      std::memcpy(&id, bytes.data(), sizeof id);
      if (id >= std::uint32_t(count) || seen[id]) {
        outcome = "connection " + std::to_string(id) + " twice";
        break;
      }
      seen[id] = true;
      ++accepted;
      window.release();
    } catch (const timeout_error&) {
      // how many raced depends on the machine; the connections may not
    }
  }
  // The clients refer to `listener` and `window` in this frame: they end before it does.
  co_return co_await end_race_helper(std::move(clients), std::move(outcome));
}

TEST_P(NetOperationDeadline, TcpAcceptRacingArrivingConnectionsLosesNone) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(accept_racing_connections(
                             tcp_listener::bind(endpoint::loopback_v4(0)), scaled(400, 200, 100))),
                         120s),
            "ok");
}

TEST_P(NetOperationDeadline, UnixAcceptRacingArrivingConnectionsLosesNone) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(accept_racing_connections(
                             unix_listener::bind(operation_deadline_name()), scaled(400, 200, 100))),
                         120s),
            "ok");
}

task<std::string> accept_on_manual_clock(tcp_listener& listener) {
  try {
    (void)co_await listener.accept(deadline::after(1s));
  } catch (const timeout_error&) {
    co_return "timeout";
  }
  co_return "connection";
}

// The runtime's clock decides: with a manual clock the deadline passes only when advanced.
TEST_P(NetOperationDeadline, AnAcceptDeadlineFollowsTheRuntimeClock) {
  spindle::manual_clock clock(spindle::testing::virtual_start);
  spindle::runtime_options opts = options();
  opts.clock = &clock;
  spindle::runtime rt(opts);
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto accepting = rt.spawn(accept_on_manual_clock(listener));
  ASSERT_TRUE(spindle::testing::eventually([&] { return spindle::testing::armed_timers(rt) == 1; }));
  clock.advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(accepting.is_finished());
  clock.advance(std::chrono::milliseconds(2));
  EXPECT_EQ(join_bounded(std::move(accepting), 30s), "timeout");
}

// --- connect ----------------------------------------------------------------------------------

// A listener with backlog 0 that never accepts: its queue fills after a connection or two, and
// the kernel then drops the next SYN, so that connect waits (for the SYN's retransmission, a
// second later) and its deadline passes. The listener is still usable afterwards.
task<std::string> connect_into_a_full_backlog() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0), 0);
  std::vector<tcp_stream> queued;
  bool timed_out = false;
  for (int attempt = 0; attempt < 16 && !timed_out; ++attempt) {
    try {
      queued.push_back(co_await tcp_stream::connect(listener.local_endpoint(), deadline::after(50ms)));
    } catch (const timeout_error&) {
      timed_out = true;
    }
  }
  if (!timed_out) co_return "no connect waited";
  if (queued.empty()) co_return "nothing was queued";
  auto server = co_await listener.accept(deadline::after(30s));
  co_await queued.front().write_all(std::string_view("q"), deadline::after(30s));
  std::array<std::byte, 1> buffer;
  co_await server.read_exact(buffer, deadline::after(30s));
  co_return std::string(1, char(buffer[0]));
}

TEST_P(NetOperationDeadline, ConnectTimesOutWhileTheHandshakeWaits) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(connect_into_a_full_backlog()), 30s), "q");
}

// Connects with deadlines of 0 to 50 us to a listener that accepts: each either connects or
// times out (its socket closed), never anything else.
task<int> connect_racing_the_handshake(int count) {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  int connected = 0;
  for (int i = 0; i < count; ++i) {
    try {
      tcp_stream client = co_await tcp_stream::connect(
          listener.local_endpoint(), deadline::after(std::chrono::microseconds(i % 50)));
      ++connected;
      (void)co_await listener.accept(deadline::after(30s));
    } catch (const timeout_error&) {
      // the connection, if the kernel completed it, waits in the backlog until the listener closes
    }
  }
  co_return connected;
}

TEST_P(NetOperationDeadline, ConnectsRacingTheirDeadlinesConnectOrTimeOut) {
  spindle::runtime rt(options());
  const int count = scaled(200, 100, 50);
  const int connected = join_bounded(rt.spawn(connect_racing_the_handshake(count)), 60s);
  EXPECT_GE(connected, 0);
  EXPECT_LE(connected, count);
}

// A host name whose lookup the test holds on its helper (net_test::resolve_gate_scope): the
// deadline covers resolution, so connect(host, port, deadline) times out while the lookup waits.
task<std::string> connect_to_a_held_name(std::uint16_t port) {
  try {
    (void)co_await tcp_stream::connect("spindle-held-lookup.invalid", port, deadline::after(30ms));
  } catch (const timeout_error&) {
    co_return "timeout";
  } catch (const std::exception& e) {
    co_return e.what();
  }
  co_return "connected?";
}

task<std::string> connect_to_a_numeric_host(const tcp_listener& listener) {
  auto client = co_await tcp_stream::connect("127.0.0.1", listener.local_endpoint().port(),
                                             deadline::after(30s));
  co_return client.remote_endpoint().to_string();
}

TEST_P(NetOperationDeadline, ConnectToAHostTimesOutWhileItsLookupWaits) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  net_test::resolve_gate_scope gate(/*closed=*/true);
  const std::string outcome =
      join_bounded(rt.spawn(connect_to_a_held_name(listener.local_endpoint().port())), 30s);
  // The lookup reaches the held hook (it may get there after the deadline passed: the helper
  // thread starts on demand); then the gate opens and the helper finishes it into its job.
  EXPECT_TRUE(spindle::testing::eventually([] { return net_test::resolve_gate_entered() == 1; }));
  gate.open();
  EXPECT_EQ(outcome, "timeout");
  // A deadline that does not pass changes nothing.
  EXPECT_EQ(join_bounded(rt.spawn(connect_to_a_numeric_host(listener)), 30s),
            listener.local_endpoint().to_string());
}

// --- datagrams --------------------------------------------------------------------------------

template <class Socket, class Address>
task<std::string> receive_times_out_then_works(Socket receiver, Socket sender, Address to) {
  std::array<std::byte, 16> buffer;
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)co_await receiver.receive_from(buffer, deadline::after(20ms));
    co_return "received nothing?";
  } catch (const timeout_error&) {
  }
  if (std::chrono::steady_clock::now() - start < 20ms) co_return "too early";
  const std::size_t sent =
      co_await sender.send_to(spindle::net::as_bytes("later"), to, deadline::after(30s));
  if (sent != 5) co_return "short send";
  const auto got = co_await receiver.receive_from(buffer, deadline::after(30s));
  co_return std::string(reinterpret_cast<const char*>(buffer.data()), got.size);
}

TEST_P(NetOperationDeadline, UdpReceiveTimesOutAndTheSocketStaysUsable) {
  spindle::runtime rt(options());
  auto receiver = udp_socket::bind(endpoint::loopback_v4(0));
  const endpoint to = receiver.local_endpoint();
  EXPECT_EQ(join_bounded(rt.spawn(receive_times_out_then_works(
                             std::move(receiver), udp_socket::bind(endpoint::loopback_v4(0)), to)),
                         30s),
            "later");
}

TEST_P(NetOperationDeadline, UnixDatagramReceiveTimesOutAndTheSocketStaysUsable) {
  spindle::runtime rt(options());
  const unix_endpoint name = operation_deadline_name();
  EXPECT_EQ(join_bounded(rt.spawn(receive_times_out_then_works(
                             unix_datagram::bind(name), unix_datagram::unbound(), name)),
                         30s),
            "later");
}

// The sender of a datagram race stays at most this many datagrams ahead of the receiver (a permit
// per datagram, given back when it is received): UDP drops what a full receive queue cannot take
// (a loss must not be mistaken for the deadline's), and a unix datagram socket's queue holds
// net.unix.max_dgram_qlen (10 by default) + 1 datagrams.
constexpr std::size_t datagram_race_window = 8;

template <class Socket, class Address>
task<void> datagram_race_sender(Socket& sender, Address to, int count,
                                spindle::semaphore& window) {
  for (int i = 0; i < count; ++i) {
    co_await window.acquire();
    const std::uint32_t id = std::uint32_t(i);
    std::array<std::byte, 4> bytes;
    std::memcpy(bytes.data(), &id, sizeof id);
    (void)co_await sender.send_to(std::span<const std::byte>(bytes), to, deadline::after(30s));
    if (i % 4 == 0) co_await spindle::yield_now();
  }
}

// The receiver uses deadlines of 0 to 2 ms while datagrams arrive: each receive returns one or
// times out; every datagram is received exactly once, in order (one taken and dropped at a
// deadline would leave the loop waiting or show as a gap).
template <class Socket, class Address>
task<std::string> datagrams_racing_deadlines(Socket receiver, Socket sender, Address to,
                                             int count) {
  spindle::semaphore window(datagram_race_window);
  auto sending = spindle::spawn(datagram_race_sender(sender, to, count, window));
  std::string outcome = "ok";
  for (int round = 0, expected = 0; expected < count; ++round) {
    try {
      std::array<std::byte, 8> buffer;
      const auto got = co_await receiver.receive_from(
          buffer, deadline::after(std::chrono::microseconds(round % 2000)));
      std::uint32_t id = 0;
      std::memcpy(&id, buffer.data(), sizeof id);
      if (got.size != 4 || id != std::uint32_t(expected)) {
        outcome = "expected " + std::to_string(expected) + ", got " + std::to_string(id);
        break;
      }
      ++expected;
      window.release();
    } catch (const timeout_error&) {
      // how many raced depends on the machine; the datagrams may not
    }
  }
  // The sender refers to `sender` and `window` in this frame: it ends before the frame does.
  co_return co_await end_race_helper(std::move(sending), std::move(outcome));
}

TEST_P(NetOperationDeadline, UdpDatagramsRacingDeadlinesAreNeverLost) {
  spindle::runtime rt(options());
  auto receiver = udp_socket::bind(endpoint::loopback_v4(0));
  const endpoint to = receiver.local_endpoint();
  EXPECT_EQ(join_bounded(rt.spawn(datagrams_racing_deadlines(
                             std::move(receiver), udp_socket::bind(endpoint::loopback_v4(0)), to,
                             scaled(4000, 2000, 500))),
                         120s),
            "ok");
}

TEST_P(NetOperationDeadline, UnixDatagramsRacingDeadlinesAreNeverLost) {
  spindle::runtime rt(options());
  const unix_endpoint name = operation_deadline_name();
  EXPECT_EQ(join_bounded(rt.spawn(datagrams_racing_deadlines(unix_datagram::bind(name),
                                                              unix_datagram::unbound(), name,
                                                              scaled(4000, 2000, 500))),
                         120s),
            "ok");
}

// A unix datagram send into a peer whose queue is full waits for room: its deadline passes; once
// the peer takes a datagram, the next send goes through.
task<std::string> unix_send_into_a_full_queue() {
  auto [sender, receiver] = unix_datagram::pair();
  const std::array<std::byte, 64> datagram{};
  bool timed_out = false;
  int sent = 0;
  for (; sent < 100000 && !timed_out; ++sent) {
    try {
      (void)co_await sender.send(datagram, deadline::after(20ms));
    } catch (const timeout_error&) {
      timed_out = true;
    }
  }
  if (!timed_out) co_return "the queue never filled";
  std::array<std::byte, 64> buffer;
  (void)co_await receiver.receive_from(buffer, deadline::after(30s));
  (void)co_await sender.send(datagram, deadline::after(30s));
  co_return "ok";
}

TEST_P(NetOperationDeadline, UnixDatagramSendIntoAFullQueueTimesOut) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(unix_send_into_a_full_queue()), 30s), "ok");
}

// --- descriptors ------------------------------------------------------------------------------

TEST_P(NetOperationDeadline, TimeoutsLeaveNoDescriptorBehind) {
  const int before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    EXPECT_EQ(join_bounded(rt.spawn(accept_times_out_then_works(
                               tcp_listener::bind(endpoint::loopback_v4(0)))),
                           30s),
              "hi");
    EXPECT_EQ(join_bounded(rt.spawn(accept_times_out_then_works(
                               unix_listener::bind(operation_deadline_name()))),
                           30s),
              "hi");
    EXPECT_EQ(join_bounded(rt.spawn(connect_into_a_full_backlog()), 30s), "q");
    (void)join_bounded(rt.spawn(connect_racing_the_handshake(50)), 60s);
    auto receiver = udp_socket::bind(endpoint::loopback_v4(0));
    const endpoint to = receiver.local_endpoint();
    EXPECT_EQ(join_bounded(rt.spawn(receive_times_out_then_works(
                               std::move(receiver), udp_socket::bind(endpoint::loopback_v4(0)), to)),
                           30s),
              "later");
    EXPECT_EQ(join_bounded(rt.spawn(unix_send_into_a_full_queue()), 30s), "ok");
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

}  // namespace
