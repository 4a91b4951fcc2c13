// The retry policy under fault injection (core::reactor::set_fault_hook), on both backends.
//
// The hook rewrites results only where the rewrite hides no transfer (a rewritten recv that had
// returned data would lose it): readiness polls become -EINTR / -EAGAIN, a successful connect
// becomes -EAGAIN / -EINTR (then: poll, connect again -> EISCONN, or SO_ERROR), an end of stream
// (recv -> 0) becomes -EAGAIN / -EINTR (then: poll, recv again -> 0), and a natural -EAGAIN
// becomes -EINTR. Everything must still work, byte for byte.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <system_error>

#include "net/net_test_support.hpp"
#include "spindle/io/io_wait.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::core::io_opcode;
using spindle::core::io_operation;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::net::udp_socket;
using spindle::testing::join_bounded;

class NetFaults : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetFaults);

std::atomic<std::uint64_t> completions{0};
std::atomic<int> polls_rewritten{0}, connects_rewritten{0}, ends_rewritten{0}, eagain_rewritten{0};

void inject(io_operation* op) noexcept {
  const std::uint64_t n = completions.fetch_add(1, std::memory_order_relaxed);
  const std::int32_t fault = (n & 2) != 0 ? -EINTR : -EAGAIN;
  if ((n & 1) != 0) return;  // every other completion is left alone
  switch (op->opcode) {
    case io_opcode::poll:
      if (op->result >= 0) {
        op->result = fault;
        polls_rewritten.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    case io_opcode::connect:
      if (op->result == 0) {
        op->result = fault;
        connects_rewritten.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    case io_opcode::recv:
      if (op->result == 0 && op->length > 0) {
        op->result = fault;
        ends_rewritten.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      [[fallthrough]];
    case io_opcode::send:
    case io_opcode::accept:
    case io_opcode::recvmsg:
    case io_opcode::sendmsg:
      if (op->result == -EAGAIN) {
        op->result = -EINTR;
        eagain_rewritten.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    default:
      break;
  }
}

// Installs (or removes) the hook on the reactor of the executor it runs on: the hook is read by
// that reactor's owner thread only, so it is set there.
task<void> set_hook(spindle::core::io_fault_hook hook) {
  spindle::io::current_reactor().set_fault_hook(hook);
  co_return;
}

void hook_all(spindle::runtime& rt, spindle::core::io_fault_hook hook) {
  for (std::uint32_t i = 0; i < rt.executor_count(); ++i) join_bounded(rt.spawn_on(i, set_hook(hook)), 10s);
}

task<int> refused(endpoint closed) {
  try {
    tcp_stream stream = co_await tcp_stream::connect(closed);
  } catch (const std::system_error& e) {
    co_return error_of(e);
  }
  co_return 0;
}

task<int> udp_exchange(udp_socket& a, udp_socket& b, int count) {
  int exact = 0;
  std::vector<std::byte> buffer(2000);
  for (int i = 0; i < count; ++i) {
    const auto datagram = pattern(std::uint32_t(i), std::size_t(i * 13 % 1500));
    co_await a.send_to(datagram, b.local_endpoint());
    const auto got = co_await b.receive_from(buffer);
    if (got.size == datagram.size() && got.sender == a.local_endpoint() &&
        first_mismatch(std::span(buffer).first(got.size), std::uint32_t(i)) == got.size) {
      ++exact;
    }
  }
  co_return exact;
}

TEST_P(NetFaults, RetryPolicyHidesInjectedFaults) {
  polls_rewritten = connects_rewritten = ends_rewritten = eagain_rewritten = 0;
  const int connections = scaled(200, 100, 50);
  spindle::runtime rt(options());
  hook_all(rt, &inject);

  auto listener = tcp_listener::bind(endpoint::loopback_v4(0), 1024);
  auto served = rt.spawn(echo_server(listener, connections));
  EXPECT_EQ(join_bounded(rt.spawn(run_echo_clients(listener.local_endpoint(), connections)), 120s),
            connections);
  std::size_t expected = 0;
  for (int i = 0; i < connections; ++i) expected += echo_size(std::uint32_t(i));
  EXPECT_EQ(join_bounded(std::move(served), 60s), expected);

  endpoint closed;
  {
    auto gone = tcp_listener::bind(endpoint::loopback_v4(0));
    closed = gone.local_endpoint();
  }
  EXPECT_EQ(rt.block_on(refused(closed)), ECONNREFUSED);

  auto a = udp_socket::bind(endpoint::loopback_v4(0));
  auto b = udp_socket::bind(endpoint::loopback_v4(0));
  EXPECT_EQ(join_bounded(rt.spawn(udp_exchange(a, b, 200)), 60s), 200);

  hook_all(rt, nullptr);
  EXPECT_GT(connects_rewritten.load(), 0);
  EXPECT_GT(ends_rewritten.load(), 0);
  // Each rewritten connect or end of stream is followed by a readiness poll.
  EXPECT_GT(polls_rewritten.load(), 0);
  RecordProperty("polls_rewritten", polls_rewritten.load());
  RecordProperty("eagain_rewritten", eagain_rewritten.load());
}

}  // namespace
