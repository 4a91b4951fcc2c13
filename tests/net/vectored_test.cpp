// Vectored writes on both reactor backends: every byte of many small buffers arrives in order,
// more than IOV_MAX buffers, empty lists and empty buffers, short writes across iovec boundaries
// (a tiny SO_SNDBUF), a peer closing in the middle of a vectored write, one operation per burst
// on io_uring, and no descriptor left behind.
#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "net/net_test_support.hpp"
#include "spindle/io/io_wait.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::net::buffer_list;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::testing::join_bounded;

class NetVectored : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetVectored);

// Splits `bytes` into pieces of sizes 0, 1, 2, ... 40, 0, 1, ... (empty pieces included).
std::vector<std::span<const std::byte>> vectored_pieces(const std::vector<std::byte>& bytes) {
  std::vector<std::span<const std::byte>> pieces;
  std::size_t at = 0;
  for (std::size_t n = 0; at < bytes.size(); n = (n + 1) % 41) {
    const std::size_t size = std::min(n, bytes.size() - at);
    pieces.emplace_back(bytes.data() + at, size);
    at += size;
  }
  return pieces;
}

task<std::vector<std::byte>> vectored_read_to_end(tcp_stream& stream) {
  std::vector<std::byte> received;
  std::array<std::byte, 4096> buffer;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    received.insert(received.end(), buffer.begin(), buffer.begin() + std::ptrdiff_t(n));
  }
  co_return received;
}

task<bool> vectored_round_trip(std::size_t size, int send_buffer) {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  // Only the send side is made tiny: a tiny receive window as well makes loopback TCP crawl
  // (delayed acknowledgements), without making the writes any shorter.
  if (send_buffer > 0) set_buffer_sizes(client.native_handle(), send_buffer, 0);
  const std::vector<std::byte> bytes = pattern(7, size);
  const auto pieces = vectored_pieces(bytes);
  auto reading = spindle::spawn(vectored_read_to_end(server));
  co_await client.write_all(buffer_list(pieces));
  client.shutdown(SHUT_WR);
  const std::vector<std::byte> received = co_await std::move(reading);
  co_return received.size() == size && first_mismatch(received, 7) == size;
}

TEST_P(NetVectored, WriteAllDeliversEveryByteOfManySmallBuffersInOrder) {
  spindle::runtime rt(options());
  // 200 KiB in ~10,000 pieces: many more than IOV_MAX per call.
  EXPECT_TRUE(join_bounded(rt.spawn(vectored_round_trip(200 * 1024, 0)), 60s));
}

TEST_P(NetVectored, ShortWritesAcrossIovecBoundariesResumeAtTheNextByte) {
  spindle::runtime rt(options());
  // A tiny send buffer: every sendmsg stops somewhere inside the list.
  EXPECT_TRUE(join_bounded(rt.spawn(vectored_round_trip(1024 * 1024, 4096)), 60s));
}

task<std::pair<std::size_t, std::size_t>> vectored_one_short_write() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  set_buffer_sizes(client.native_handle(), 4096, 0);
  set_buffer_sizes(server.native_handle(), 0, 4096);
  const std::vector<std::byte> bytes = pattern(3, 4 * 1024 * 1024);
  std::vector<std::span<const std::byte>> pieces;
  for (std::size_t at = 0; at < bytes.size(); at += 1000) {
    pieces.emplace_back(bytes.data() + at, std::min<std::size_t>(1000, bytes.size() - at));
  }
  // One sendmsg: nobody reads, so the kernel takes what fits and stops inside some buffer.
  const std::size_t sent = co_await client.write_vectored(buffer_list(pieces));
  client.shutdown(SHUT_WR);
  const std::vector<std::byte> received = co_await vectored_read_to_end(server);
  co_return std::pair{sent, received.size() == sent && first_mismatch(received, 3) == sent
                                ? sent
                                : std::size_t(0)};
}

TEST_P(NetVectored, OneVectoredWriteMayBeShortAndSendsAnExactPrefix) {
  spindle::runtime rt(options());
  const auto [sent, verified] = join_bounded(rt.spawn(vectored_one_short_write()), 60s);
  EXPECT_GT(sent, 0u);
  EXPECT_LT(sent, 4u * 1024 * 1024);
  EXPECT_EQ(verified, sent);
}

task<std::size_t> vectored_empty_lists() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  std::size_t sent = co_await client.write_vectored(buffer_list{});
  co_await client.write_all(buffer_list{});
  const std::vector<std::span<const std::byte>> empties(5);
  sent += co_await client.write_vectored(buffer_list(empties));
  co_await client.write_all(buffer_list(empties));
  client.shutdown(SHUT_WR);
  const std::vector<std::byte> received = co_await vectored_read_to_end(server);
  co_return sent + received.size();
}

TEST_P(NetVectored, EmptyListsAndEmptyBuffersSendNothing) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(vectored_empty_lists()), 30s), 0u);
}

task<std::size_t> vectored_past_iov_max() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  const std::vector<std::byte> bytes = pattern(1, IOV_MAX + 100);
  std::vector<std::span<const std::byte>> pieces;
  for (std::size_t i = 0; i < bytes.size(); ++i) pieces.emplace_back(bytes.data() + i, 1);
  co_return co_await client.write_vectored(buffer_list(pieces));
}

TEST_P(NetVectored, OneVectoredWriteTakesAtMostIovMaxBuffers) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(vectored_past_iov_max()), 30s), std::size_t(IOV_MAX));
}

task<int> vectored_write_to_closing_peer() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  set_buffer_sizes(client.native_handle(), 4096, 0);
  const std::vector<std::byte> bytes(16 * 1024 * 1024, std::byte{1});
  std::vector<std::span<const std::byte>> pieces;
  for (std::size_t at = 0; at < bytes.size(); at += 4096) pieces.emplace_back(bytes.data() + at, 4096);
  // The peer resets (SO_LINGER 0) while the write waits for room.
  linger reset{1, 0};
  ::setsockopt(server.native_handle(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  auto writing = spindle::spawn(client.write_all(buffer_list(pieces)));
  std::array<std::byte, 1000> some;
  (void)co_await server.read(some);  // the write is under way
  co_await server.close();
  try {
    co_await std::move(writing);
  } catch (const std::system_error& e) {
    co_return error_of(e);
  }
  co_return 0;
}

TEST_P(NetVectored, PeerClosingMidVectoredWriteIsAnError) {
  spindle::runtime rt(options());
  const int error = join_bounded(rt.spawn(vectored_write_to_closing_peer()), 60s);
  EXPECT_TRUE(error == EPIPE || error == ECONNRESET) << error;
}

task<std::uint64_t> vectored_operations_per_burst() {
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto [client, server] = co_await connected_pair(listener);
  const std::vector<std::byte> bytes = pattern(2, 64 * 16);
  std::vector<std::span<const std::byte>> pieces;
  for (std::size_t i = 0; i < 16; ++i) pieces.emplace_back(bytes.data() + i * 64, 64);
  spindle::core::reactor& reactor = spindle::io::current_reactor();
  const std::uint64_t before = reactor.operations_submitted();
  co_await client.write_all(buffer_list(pieces));
  // Counted on this executor's reactor: the write_all's operations all went there (a task
  // runs an operation on the reactor of the executor it runs on, and does not move while
  // suspended in it... unless stolen; the bound below allows for none).
  const std::uint64_t used = reactor.operations_submitted() - before;
  std::array<std::byte, 64 * 16> check;
  co_await server.read_exact(check);
  co_return first_mismatch(check, 2) == check.size() ? used : 1000;
}

TEST_P(NetVectored, ABurstOfSmallWritesIsOneOperation) {
  spindle::runtime rt(spindle::runtime_options{.workers = 1, .io_backend = GetParam()});
  const std::uint64_t used = join_bounded(rt.spawn(vectored_operations_per_burst()), 30s);
  // io_uring: one sendmsg through the ring; epoll: the speculative sendmsg, no operation.
  EXPECT_EQ(used, GetParam() == io_backend::uring ? 1u : 0u);
}

TEST_P(NetVectored, LeavesNoDescriptorBehind) {
  const int before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    EXPECT_TRUE(join_bounded(rt.spawn(vectored_round_trip(64 * 1024, 4096)), 60s));
    EXPECT_EQ(join_bounded(rt.spawn(vectored_empty_lists()), 30s), 0u);
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

}  // namespace
