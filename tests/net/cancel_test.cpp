// Cancelling TCP reads and writes in flight, thousands of times, on both backends: through
// join_handle::cancel (from a task and from a plain thread) and through with_timeout. Every
// outcome is accounted for (completed or cancelled, nothing else), no byte is lost or
// duplicated (the bytes the completed operations report are exactly the bytes that crossed),
// and nothing leaks (descriptors, tasks).
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "net/net_test_support.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::testing::join_bounded;

class NetCancel : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetCancel);

struct tally {
  int completed = 0;
  int cancelled = 0;
  int other = 0;
  // Reads: what the completed reads reported / what they put in the buffer. Writes: what the
  // completed writes reported / what the reader received in the end. Equal: a cancelled
  // operation moved no byte, a completed one moved exactly what it said.
  std::size_t transferred = 0;
  std::size_t crossed = 0;
  bool content_ok = false;
};

// One read of up to `size` bytes, appended to `sink`.
task<std::size_t> read_into(tcp_stream& stream, std::vector<std::byte>& sink, std::size_t size) {
  std::vector<std::byte> buffer(size);
  const std::size_t n = co_await stream.read(buffer);
  sink.insert(sink.end(), buffer.begin(), buffer.begin() + std::ptrdiff_t(n));
  co_return n;
}

task<void> send_byte(tcp_stream& stream, std::size_t& sent) {
  const std::byte b = pattern_byte(0, sent);
  if (co_await stream.write(std::span<const std::byte>(&b, 1)) == 1) ++sent;
}

task<void> drain(tcp_stream& stream, std::vector<std::byte>& sink) {
  std::array<std::byte, 4096> buffer;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    sink.insert(sink.end(), buffer.begin(), buffer.begin() + std::ptrdiff_t(n));
  }
}

// Reads cancelled at different points: before the read task runs, while it waits in the
// kernel, racing a byte that arrives just before the cancel.
task<tally> cancel_reads(tcp_stream& reader, tcp_stream& writer, int iterations) {
  tally result;
  std::vector<std::byte> received;
  std::size_t sent = 0;
  for (int i = 0; i < iterations; ++i) {
    auto h = spindle::spawn(read_into(reader, received, 64));
    switch (i % 5) {
      case 0:
        break;
      case 1:
        co_await spindle::yield_now();
        break;
      case 2:
        co_await send_byte(writer, sent);
        break;
      case 3:
        co_await send_byte(writer, sent);
        co_await spindle::yield_now();
        break;
      default:
        for (int k = 0; k < 3; ++k) co_await spindle::yield_now();
        break;
    }
    h.cancel();
    try {
      result.transferred += co_await std::move(h);
      ++result.completed;
    } catch (const spindle::task_cancelled&) {
      ++result.cancelled;
    } catch (...) {
      ++result.other;
    }
  }
  writer.shutdown(SHUT_WR);
  const std::size_t before_drain = received.size();
  co_await drain(reader, received);
  result.crossed = before_drain;  // what the loop's reads delivered
  result.content_ok = received.size() == sent && first_mismatch(received, 0) == sent;
  co_return result;
}

// Writes cancelled at different points, with the peer's buffer mostly full; the peer drains
// from time to time so some writes complete (often partially: short writes).
task<std::size_t> write_from(tcp_stream& stream, std::span<const std::byte> chunk) {
  co_return co_await stream.write(chunk);
}

task<tally> cancel_writes(tcp_stream& writer, tcp_stream& reader, int iterations) {
  constexpr std::size_t chunk_size = 48 * 1024;
  const std::vector<std::byte> source = pattern(0, 251 + chunk_size);  // period 251
  tally result;
  std::vector<std::byte> received;
  std::size_t offset = 0;  // bytes the completed writes took
  for (int i = 0; i < iterations; ++i) {
    const auto chunk = std::span<const std::byte>(source).subspan(offset % 251, chunk_size);
    auto h = spindle::spawn(write_from(writer, chunk));
    const bool pending = offset > received.size();  // bytes the reader can still get
    switch (i % 5) {
      case 0:
        break;
      case 1:
        co_await spindle::yield_now();
        break;
      case 2:
        if (pending) co_await read_into(reader, received, 32 * 1024);
        break;
      case 3:
        co_await spindle::yield_now();
        if (pending) co_await read_into(reader, received, 8 * 1024);
        break;
      default:
        for (int k = 0; k < 3; ++k) co_await spindle::yield_now();
        break;
    }
    h.cancel();
    try {
      offset += co_await std::move(h);
      ++result.completed;
    } catch (const spindle::task_cancelled&) {
      ++result.cancelled;
    } catch (...) {
      ++result.other;
    }
  }
  result.transferred = offset;
  writer.shutdown(SHUT_WR);
  co_await drain(reader, received);
  result.crossed = received.size();
  result.content_ok = received.size() == offset && first_mismatch(received, 0) == offset;
  co_return result;
}

struct cancel_setup {
  tcp_listener listener = tcp_listener::bind(endpoint::loopback_v4(0));
  tcp_stream client, server;
};

void expect_accounted(const tally& t, int iterations) {
  EXPECT_EQ(t.completed + t.cancelled, iterations);
  EXPECT_EQ(t.other, 0);
  EXPECT_GT(t.completed, 0);
  EXPECT_GT(t.cancelled, 0);
  EXPECT_EQ(t.transferred, t.crossed);
  EXPECT_TRUE(t.content_ok);
}

TEST_P(NetCancel, CancelMidReadTenThousandTimes) {
  const int iterations = scaled(10000, 10000, 3000);
  const int fds_before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    cancel_setup s;
    std::tie(s.client, s.server) = join_bounded(rt.spawn(connected_pair(s.listener)), 30s);
    const tally t = join_bounded(rt.spawn(cancel_reads(s.server, s.client, iterations)), 300s);
    expect_accounted(t, iterations);
    EXPECT_TRUE(spindle::testing::eventually([&] { return rt.live_tasks() == 0; }));
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), fds_before);
}

TEST_P(NetCancel, CancelMidWriteTenThousandTimes) {
  const int iterations = scaled(10000, 10000, 3000);
  const int fds_before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    cancel_setup s;
    std::tie(s.client, s.server) = join_bounded(rt.spawn(connected_pair(s.listener)), 30s);
    set_buffer_sizes(s.client.native_handle(), 16 * 1024, 0);
    set_buffer_sizes(s.server.native_handle(), 0, 16 * 1024);
    const tally t = join_bounded(rt.spawn(cancel_writes(s.client, s.server, iterations)), 300s);
    expect_accounted(t, iterations);
    EXPECT_TRUE(spindle::testing::eventually([&] { return rt.live_tasks() == 0; }));
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), fds_before);
}

// The canceller is a plain thread: the cancel request crosses threads into the reactor's
// executor while the read is being submitted, waits, or completes.
TEST_P(NetCancel, CancelReadsFromAPlainThread) {
  const int iterations = scaled(10000, 5000, 2000);
  const int fds_before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    cancel_setup s;
    std::tie(s.client, s.server) = join_bounded(rt.spawn(connected_pair(s.listener)), 30s);
    tally t;
    std::vector<std::byte> received;
    std::size_t sent = 0;
    for (int i = 0; i < iterations; ++i) {
      auto h = rt.spawn(read_into(s.server, received, 16));
      if (i % 3 == 1) {
        for (int k = 0; k < (i % 64) * 10; ++k) spindle::core::cpu_relax();
      } else if (i % 3 == 2) {
        const unsigned char b = static_cast<unsigned char>(pattern_byte(0, sent));
        if (::send(s.client.native_handle(), &b, 1, MSG_NOSIGNAL) == 1) ++sent;
      }
      h.cancel();
      try {
        t.transferred += join_bounded(std::move(h), 30s);
        ++t.completed;
      } catch (const spindle::task_cancelled&) {
        ++t.cancelled;
      }
    }
    const std::size_t before_drain = received.size();
    s.client.shutdown(SHUT_WR);
    join_bounded(rt.spawn(drain(s.server, received)), 30s);
    t.crossed = before_drain;
    t.content_ok = received.size() == sent && first_mismatch(received, 0) == sent;
    expect_accounted(t, iterations);
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), fds_before);
}

// with_timeout around reads (the timer cancels them) and writes into a full buffer.
task<tally> timeout_reads(tcp_stream& reader, tcp_stream& writer, int iterations) {
  tally result;
  std::vector<std::byte> received;
  std::size_t sent = 0;
  for (int i = 0; i < iterations; ++i) {
    if (i % 2 == 1) co_await send_byte(writer, sent);
    try {
      result.transferred += co_await spindle::with_timeout(
          std::chrono::microseconds(40 * (i % 4)), read_into(reader, received, 32));
      ++result.completed;
    } catch (const spindle::timeout_error&) {
      ++result.cancelled;
    } catch (...) {
      ++result.other;
    }
  }
  writer.shutdown(SHUT_WR);
  const std::size_t before_drain = received.size();
  co_await drain(reader, received);
  result.crossed = before_drain;  // what the loop's reads delivered
  result.content_ok = received.size() == sent && first_mismatch(received, 0) == sent;
  co_return result;
}

TEST_P(NetCancel, WithTimeoutCancelsReads) {
  const int iterations = scaled(2000, 1000, 300);
  spindle::runtime rt(options());
  cancel_setup s;
  std::tie(s.client, s.server) = join_bounded(rt.spawn(connected_pair(s.listener)), 30s);
  const tally t = join_bounded(rt.spawn(timeout_reads(s.server, s.client, iterations)), 300s);
  expect_accounted(t, iterations);
}

task<std::size_t> write_all_counted(tcp_stream& stream, std::span<const std::byte> data) {
  co_await stream.write_all(data);
  co_return data.size();
}

task<int> timeout_blocked_writes(tcp_stream& writer, int iterations) {
  const std::vector<std::byte> data = pattern(0, 1 << 20);
  int timed_out = 0;
  for (int i = 0; i < iterations; ++i) {
    try {
      co_await spindle::with_timeout(std::chrono::microseconds(100 * (i % 3)),
                                     write_all_counted(writer, data));
    } catch (const spindle::timeout_error&) {
      ++timed_out;
    }
  }
  co_return timed_out;
}

TEST_P(NetCancel, WithTimeoutCancelsWritesIntoAFullBuffer) {
  const int iterations = scaled(500, 200, 100);
  spindle::runtime rt(options());
  cancel_setup s;
  std::tie(s.client, s.server) = join_bounded(rt.spawn(connected_pair(s.listener)), 30s);
  set_buffer_sizes(s.client.native_handle(), 16 * 1024, 0);
  set_buffer_sizes(s.server.native_handle(), 0, 16 * 1024);
  // Nobody reads: every write_all of 1 MiB fills the buffers and then waits until cancelled.
  EXPECT_EQ(join_bounded(rt.spawn(timeout_blocked_writes(s.client, iterations)), 300s), iterations);
}

}  // namespace
