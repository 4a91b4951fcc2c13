// UDP on both backends: send_to / receive_from round trips with exact bytes and senders,
// datagram boundaries, truncation, empty datagrams, IPv6, cancellation, errors.
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <string>
#include <system_error>
#include <vector>

#include "net/net_test_support.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::net::endpoint;
using spindle::net::udp_socket;
using spindle::testing::join_bounded;

class NetUdp : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetUdp);

struct round_trip_outcome {
  int exact = 0;          // datagrams that arrived whole, with the right bytes and sender
  int wrong = 0;
  std::size_t sent_sizes_ok = 0;
};

// a sends datagrams of many sizes to b; b checks each and sends it back; a checks the echo.
task<round_trip_outcome> round_trips(udp_socket& a, udp_socket& b, std::vector<std::size_t> sizes) {
  round_trip_outcome outcome;
  const endpoint a_address = a.local_endpoint();
  const endpoint b_address = b.local_endpoint();
  std::vector<std::byte> buffer(65536);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::uint32_t id = std::uint32_t(k);
    const std::vector<std::byte> datagram = pattern(id, sizes[k]);
    if (co_await a.send_to(datagram, b_address) == datagram.size()) ++outcome.sent_sizes_ok;
    const udp_socket::received got = co_await b.receive_from(buffer);
    const bool ok = got.size == sizes[k] && !got.truncated && got.sender == a_address &&
                    first_mismatch(std::span(buffer).first(got.size), id) == got.size;
    ++(ok ? outcome.exact : outcome.wrong);
    co_await b.send_to(std::span(buffer).first(got.size), got.sender);
    const udp_socket::received echo = co_await a.receive_from(buffer);
    const bool echo_ok = echo.size == sizes[k] && !echo.truncated && echo.sender == b_address &&
                         first_mismatch(std::span(buffer).first(echo.size), id) == echo.size;
    ++(echo_ok ? outcome.exact : outcome.wrong);
  }
  co_return outcome;
}

TEST_P(NetUdp, RoundTripsWithExactBytes) {
  spindle::runtime rt(options());
  auto a = udp_socket::bind(endpoint::loopback_v4(0));
  auto b = udp_socket::bind(endpoint::loopback_v4(0));
  EXPECT_NE(a.local_endpoint().port(), 0);
  EXPECT_NE(a.local_endpoint(), b.local_endpoint());
  std::vector<std::size_t> sizes = {0, 1, 2, 100, 512, 1472, 1500, 9000, 32768, 65507};
  for (std::size_t s = 3; s < 4000; s = s * 3 + 1) sizes.push_back(s);
  const auto outcome = join_bounded(rt.spawn(round_trips(a, b, sizes)), 60s);
  EXPECT_EQ(outcome.sent_sizes_ok, sizes.size());
  EXPECT_EQ(outcome.exact, int(2 * sizes.size()));
  EXPECT_EQ(outcome.wrong, 0);
}

TEST_P(NetUdp, RoundTripsOverIPv6) {
  spindle::runtime rt(options());
  udp_socket a, b;
  try {
    a = udp_socket::bind(endpoint("::1", 0));
    b = udp_socket::bind(endpoint("::1", 0));
  } catch (const std::system_error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  EXPECT_EQ(a.local_endpoint().family(), AF_INET6);
  const auto outcome = join_bounded(rt.spawn(round_trips(a, b, {0, 1, 1000, 60000})), 60s);
  EXPECT_EQ(outcome.exact, 8);
  EXPECT_EQ(outcome.wrong, 0);
}

struct truncation_outcome {
  udp_socket::received first{}, second{}, third{};
  std::vector<std::byte> first_bytes, second_bytes, third_bytes;
};

task<truncation_outcome> truncations(udp_socket& a, udp_socket& b) {
  truncation_outcome outcome;
  const endpoint to = b.local_endpoint();
  co_await a.send_to(pattern(1, 100), to);
  co_await a.send_to(pattern(2, 10), to);
  co_await a.send_to(pattern(3, 5000), to);
  std::array<std::byte, 10> small;
  outcome.first = co_await b.receive_from(small);  // 100 bytes into 10: truncated
  outcome.first_bytes.assign(small.begin(), small.begin() + std::ptrdiff_t(outcome.first.size));
  outcome.second = co_await b.receive_from(small);  // exactly 10: not truncated
  outcome.second_bytes.assign(small.begin(), small.begin() + std::ptrdiff_t(outcome.second.size));
  std::array<std::byte, 1> tiny;
  outcome.third = co_await b.receive_from(tiny);  // 5000 into 1
  outcome.third_bytes.assign(tiny.begin(), tiny.begin() + std::ptrdiff_t(outcome.third.size));
  co_return outcome;
}

TEST_P(NetUdp, TruncationKeepsDatagramBoundaries) {
  spindle::runtime rt(options());
  auto a = udp_socket::bind(endpoint::loopback_v4(0));
  auto b = udp_socket::bind(endpoint::loopback_v4(0));
  const auto outcome = join_bounded(rt.spawn(truncations(a, b)), 30s);
  EXPECT_EQ(outcome.first.size, 10u);
  EXPECT_TRUE(outcome.first.truncated);
  EXPECT_EQ(outcome.first.sender, a.local_endpoint());
  EXPECT_EQ(first_mismatch(outcome.first_bytes, 1), 10u);
  EXPECT_EQ(outcome.second.size, 10u);
  EXPECT_FALSE(outcome.second.truncated);
  EXPECT_EQ(first_mismatch(outcome.second_bytes, 2), 10u);
  EXPECT_EQ(outcome.third.size, 1u);
  EXPECT_TRUE(outcome.third.truncated);
  EXPECT_EQ(first_mismatch(outcome.third_bytes, 3), 1u);
}

// Many datagrams from several senders at once: every one arrives once (loopback does not drop
// below the receive buffer size) and says who sent it.
task<void> blast(udp_socket& from, endpoint to, std::uint32_t id, int count) {
  for (int i = 0; i < count; ++i) {
    std::array<std::uint32_t, 2> message{id, std::uint32_t(i)};
    co_await from.send_to(std::as_bytes(std::span(message)), to);
  }
}

task<std::vector<int>> collect(udp_socket& at, int senders, int each, std::vector<endpoint> from) {
  std::vector<int> next(std::size_t(senders), 0);
  int bad = 0;
  for (int k = 0; k < senders * each; ++k) {
    std::array<std::uint32_t, 2> message{};
    const auto got = co_await at.receive_from(std::as_writable_bytes(std::span(message)));
    const std::uint32_t id = message[0];
    if (got.size != sizeof message || id >= std::uint32_t(senders) || got.sender != from[id] ||
        message[1] != std::uint32_t(next[id])) {
      ++bad;
      continue;
    }
    ++next[id];
  }
  next.push_back(bad);
  co_return next;
}

TEST_P(NetUdp, ConcurrentSendersKeepOrderPerSender) {
  constexpr int senders = 4;
  const int each = scaled(2000, 500, 200);
  spindle::runtime rt(options());
  auto receiver = udp_socket::bind(endpoint::loopback_v4(0));
  const int big = 8 << 20;
  ::setsockopt(receiver.native_handle(), SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  std::vector<udp_socket> sockets;
  std::vector<endpoint> addresses;
  for (int i = 0; i < senders; ++i) {
    sockets.push_back(udp_socket::bind(endpoint::loopback_v4(0)));
    addresses.push_back(sockets.back().local_endpoint());
  }
  auto collected = rt.spawn(collect(receiver, senders, each, addresses));
  std::vector<spindle::join_handle<void>> blasts;
  for (int i = 0; i < senders; ++i) {
    blasts.push_back(rt.spawn(blast(sockets[std::size_t(i)], receiver.local_endpoint(), std::uint32_t(i), each)));
  }
  for (auto& b : blasts) join_bounded(std::move(b), 60s);
  const std::vector<int> counts = join_bounded(std::move(collected), 60s);
  for (int i = 0; i < senders; ++i) EXPECT_EQ(counts[std::size_t(i)], each) << "sender " << i;
  EXPECT_EQ(counts.back(), 0);
}

task<std::size_t> receive_one(udp_socket& socket) {
  std::array<std::byte, 16> buffer;
  co_return (co_await socket.receive_from(buffer)).size;
}

task<int> timed_out_receives(udp_socket& socket, int count) {
  int timed_out = 0;
  for (int i = 0; i < count; ++i) {
    try {
      co_await spindle::with_timeout(std::chrono::microseconds(100 * (i % 5)), receive_one(socket));
    } catch (const spindle::timeout_error&) {
      ++timed_out;
    }
  }
  co_return timed_out;
}

task<std::size_t> send_text(udp_socket& socket, endpoint to, std::string text) {
  co_return co_await socket.send_to(spindle::net::as_bytes(text), to);
}

TEST_P(NetUdp, ReceiveIsCancellable) {
  spindle::runtime rt(options());
  auto socket = udp_socket::bind(endpoint::loopback_v4(0));
  const int count = scaled(200, 100, 50);
  EXPECT_EQ(join_bounded(rt.spawn(timed_out_receives(socket, count)), 60s), count);
  for (int i = 0; i < 20; ++i) {
    auto pending = rt.spawn(receive_one(socket));
    pending.cancel();
    EXPECT_TRUE(spindle::testing::joined_cancelled(pending));
  }
  // Still usable afterwards.
  auto sender = udp_socket::bind(endpoint::loopback_v4(0));
  auto receiving = rt.spawn(receive_one(socket));
  const endpoint to = socket.local_endpoint();
  EXPECT_EQ(rt.block_on(send_text(sender, to, "hello")), 5u);
  EXPECT_EQ(join_bounded(std::move(receiving), 30s), 5u);
}

task<int> send_error(udp_socket& socket, std::size_t size, endpoint to) {
  std::vector<std::byte> data(size);
  try {
    co_await socket.send_to(data, to);
  } catch (const std::system_error& e) {
    co_return error_of(e);
  }
  co_return 0;
}

task<void> close_socket(udp_socket& socket) { co_await socket.close(); }

TEST_P(NetUdp, ErrorsAndClose) {
  spindle::runtime rt(options());
  auto socket = udp_socket::bind(endpoint::loopback_v4(0));
  // Larger than any UDP datagram.
  EXPECT_EQ(rt.block_on(send_error(socket, 70000, socket.local_endpoint())), EMSGSIZE);
  // An IPv6 destination from an IPv4 socket.
  EXPECT_NE(rt.block_on(send_error(socket, 4, endpoint("::1", 9))), 0);
  EXPECT_THROW(rt.block_on(send_error(socket, 4, endpoint())), spindle::usage_error);
  try {
    auto again = udp_socket::bind(socket.local_endpoint());
    ADD_FAILURE() << "bound twice";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EADDRINUSE);
  }
  const int before = spindle::testing::open_descriptor_count();
  rt.block_on(close_socket(socket));
  EXPECT_FALSE(socket.is_open());
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before - 1);
  EXPECT_EQ(rt.block_on(send_error(socket, 4, endpoint::loopback_v4(9))), EBADF);
}

}  // namespace
