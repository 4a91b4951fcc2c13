// Deadlines on socket operations, on both reactor backends: a read, a write and an accept that
// wait past their deadline throw timeout_error and leave the socket usable (no byte lost), a
// deadline that does not pass changes nothing, a deadline racing with the data's arrival never
// loses or duplicates a byte, a cancellation wins over a deadline, and nothing leaks.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <vector>

#include "net/net_test_support.hpp"
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
using spindle::testing::join_bounded;

class NetDeadline : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetDeadline);

// A read with no data times out after at least the deadline; afterwards the stream still works.
task<std::string> deadline_read_times_out() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  std::array<std::byte, 16> buffer;
  const auto start = std::chrono::steady_clock::now();
  bool timed_out = false;
  try {
    (void)co_await server.read(buffer, deadline::after(20ms));
  } catch (const timeout_error&) {
    timed_out = true;
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  if (!timed_out) co_return "no timeout";
  if (waited < 20ms) co_return "too early";
  co_await client.write_all(std::string_view("after"));
  const std::size_t n = co_await server.read(buffer, deadline::after(30s));
  co_return std::string(reinterpret_cast<const char*>(buffer.data()), n);
}

TEST_P(NetDeadline, ReadWithoutDataTimesOutAndTheStreamStaysUsable) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(deadline_read_times_out()), 30s), "after");
}

task<std::size_t> deadline_not_reached() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  co_await client.write_all(std::string_view("12345"), deadline::after(30s));
  std::array<std::byte, 5> buffer;
  co_await server.read_exact(buffer, deadline::after(30s));
  co_return buffer.size();
}

TEST_P(NetDeadline, AnOperationThatCompletesFirstIsUnaffected) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(deadline_not_reached()), 30s), 5u);
}

// The peer sends `total` bytes in small pieces while the reader uses deadlines of 0 to 2 ms:
// every read either returns bytes or times out; all bytes arrive exactly once, in order.
task<bool> deadline_race_writer(tcp_stream& stream, std::size_t total) {
  const std::vector<std::byte> bytes = pattern(5, total);
  for (std::size_t at = 0; at < total; at += 97) {
    co_await stream.write_all(std::span(bytes).subspan(at, std::min<std::size_t>(97, total - at)));
    if (at % (97 * 8) == 0) co_await spindle::yield_now();
  }
  stream.shutdown(SHUT_WR);
  co_return true;
}

task<std::pair<bool, int>> deadline_racing_data(std::size_t total) {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  auto writing = spindle::spawn(deadline_race_writer(client, total));
  std::vector<std::byte> received;
  std::array<std::byte, 64> buffer;
  int timeouts = 0;
  for (int round = 0;; ++round) {
    try {
      const std::size_t n =
          co_await server.read(buffer, deadline::after(std::chrono::microseconds(round % 2000)));
      if (n == 0) break;
      received.insert(received.end(), buffer.begin(), buffer.begin() + std::ptrdiff_t(n));
    } catch (const timeout_error&) {
      ++timeouts;
    }
  }
  co_await std::move(writing);
  co_return std::pair{received.size() == total && first_mismatch(received, 5) == total, timeouts};
}

TEST_P(NetDeadline, DeadlinesRacingWithArrivingDataLoseNoByte) {
  spindle::runtime rt(options());
  const auto [intact, timeouts] =
      join_bounded(rt.spawn(deadline_racing_data(std::size_t(scaled(400000, 100000, 50000)))), 120s);
  EXPECT_TRUE(intact);
  (void)timeouts;  // how many raced depends on the machine; the bytes may not
}

task<bool> deadline_write_times_out() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  set_buffer_sizes(client.native_handle(), 4096, 0);
  set_buffer_sizes(server.native_handle(), 0, 4096);
  const std::vector<std::byte> bytes(8 * 1024 * 1024, std::byte{9});
  bool timed_out = false;
  try {
    co_await client.write_all(bytes, deadline::after(30ms));  // nobody reads
  } catch (const timeout_error&) {
    timed_out = true;
  }
  const std::vector<std::span<const std::byte>> pieces{std::span(bytes).first(4 * 1024 * 1024),
                                                       std::span(bytes).last(4 * 1024 * 1024)};
  bool vectored_timed_out = false;
  try {
    co_await client.write_all(spindle::net::buffer_list(pieces), deadline::after(30ms));
  } catch (const timeout_error&) {
    vectored_timed_out = true;
  }
  co_return timed_out && vectored_timed_out;
}

TEST_P(NetDeadline, WriteIntoAFullSocketTimesOut) {
  spindle::runtime rt(options());
  EXPECT_TRUE(join_bounded(rt.spawn(deadline_write_times_out()), 30s));
}

task<bool> deadline_accept() {
  auto listener = spindle::net::unix_listener::bind(
      spindle::net::unix_endpoint::abstract("spindle-deadline-" + std::to_string(::getpid())));
  try {
    (void)co_await listener.accept(deadline::after(10ms));
  } catch (const timeout_error&) {
    co_return true;
  }
  co_return false;
}

TEST_P(NetDeadline, UnixAcceptTimesOut) {
  spindle::runtime rt(options());
  EXPECT_TRUE(join_bounded(rt.spawn(deadline_accept()), 30s));
}

task<void> deadline_long_read(tcp_stream& stream) {
  std::array<std::byte, 16> buffer;
  (void)co_await stream.read(buffer, deadline::after(3600s));
}

task<bool> deadline_cancel_wins() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  auto reading = spindle::spawn(deadline_long_read(server));
  co_await spindle::yield_now();
  reading.cancel();
  try {
    co_await std::move(reading);
  } catch (const spindle::task_cancelled&) {
    co_return true;
  } catch (...) {
  }
  co_return false;
}

TEST_P(NetDeadline, CancellationWinsOverAFarDeadline) {
  spindle::runtime rt(options());
  EXPECT_TRUE(join_bounded(rt.spawn(deadline_cancel_wins()), 30s));
  // The far deadline's timer was disarmed with the operation.
  EXPECT_TRUE(spindle::testing::eventually([&] { return spindle::testing::armed_timers(rt) == 0; }));
}

task<std::string> deadline_on_manual_clock(tcp_stream& server) {
  std::array<std::byte, 16> buffer;
  try {
    (void)co_await server.read(buffer, deadline::after(1s));
  } catch (const timeout_error&) {
    co_return "timeout";
  }
  co_return "data";
}

// The runtime's clock decides: with a manual clock the deadline passes only when advanced.
TEST_P(NetDeadline, ADeadlineFollowsTheRuntimeClock) {
  spindle::manual_clock clock(spindle::testing::virtual_start);
  spindle::runtime_options opts = options();
  opts.clock = &clock;
  spindle::runtime rt(opts);
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = rt.block_on(connected_pair(listener));
  auto reading = rt.spawn(deadline_on_manual_clock(server));
  ASSERT_TRUE(spindle::testing::eventually([&] { return spindle::testing::armed_timers(rt) == 1; }));
  clock.advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(reading.is_finished());
  clock.advance(std::chrono::milliseconds(2));
  EXPECT_EQ(join_bounded(std::move(reading), 30s), "timeout");
}

// A timeout too far for the clock's nanoseconds saturates: never, not a wrapped-around past
// (attack16: after(seconds::max()) overflowed in the conversion and timed out at once), as
// with_timeout and sleep_for do; a floating-point one too.
TEST(NetDeadlineValue, AFarTimeoutSaturatesInsteadOfWrapping) {
  const spindle::clock_time now{std::chrono::seconds(5)};
  const spindle::clock_time never = spindle::clock_time::max();
  EXPECT_EQ(deadline::after(std::chrono::hours::max()).resolve(now), never);
  EXPECT_EQ(deadline::after(std::chrono::seconds::max()).resolve(now), never);
  EXPECT_EQ(deadline::after(std::chrono::milliseconds::max()).resolve(now), never);
  EXPECT_EQ(deadline::after(std::chrono::nanoseconds::max()).resolve(now), never);
  EXPECT_EQ(deadline::after(std::chrono::duration<double>(1e300)).resolve(now), never);
  EXPECT_LE(deadline::after(std::chrono::hours::min()).resolve(now), now);
  EXPECT_LE(deadline::after(std::chrono::duration<double>(-1e300)).resolve(now), now);
  // Within range: exact, a fraction of a nanosecond rounded up.
  EXPECT_EQ(deadline::after(std::chrono::milliseconds(1500)).resolve(now), now + 1500ms);
  EXPECT_EQ(deadline::after(std::chrono::duration<double, std::nano>(1.5)).resolve(now),
            now + std::chrono::nanoseconds(2));
}

task<std::string> deadline_far_read(spindle::net::unix_stream& stream) {
  std::array<std::byte, 4> buffer;
  try {
    const std::size_t n = co_await stream.read(buffer, deadline::after(std::chrono::seconds::max()));
    co_return std::string(reinterpret_cast<const char*>(buffer.data()), n);
  } catch (const timeout_error&) {
    co_return "timeout";
  }
}

TEST_P(NetDeadline, AReadWithAFarDeadlineWaitsForItsData) {
  spindle::runtime rt(options());
  auto [writer, reader] = spindle::net::unix_stream::pair();
  auto reading = rt.spawn(deadline_far_read(reader));
  // Waiting (its deadline armed), or, wrongly, already timed out.
  ASSERT_TRUE(spindle::testing::eventually(
      [&] { return reading.is_finished() || spindle::testing::armed_timers(rt) == 1; }));
  ASSERT_EQ(::write(writer.native_handle(), "data", 4), 4);
  EXPECT_EQ(join_bounded(std::move(reading), 30s), "data");
}

TEST_P(NetDeadline, LeavesNoDescriptorBehind) {
  const int before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    EXPECT_EQ(join_bounded(rt.spawn(deadline_read_times_out()), 30s), "after");
    EXPECT_TRUE(join_bounded(rt.spawn(deadline_write_times_out()), 30s));
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

}  // namespace
