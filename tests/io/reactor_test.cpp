// The reactor on both backends (io_uring, epoll), through a runtime and io::submit_and_wait, and
// directly (the test thread as the owner): pipes, socketpairs, TCP accept/connect, regular files
// at random offsets against a reference, poll/close/fsync, recvmsg/sendmsg, reads that wait for a
// writer on another thread, blocking descriptors, cancellation (mid-read, a 10k loop with every
// outcome accounted, never a buffer written after), shutdown with reads pending, fault injection
// (the raw await surfaces EAGAIN/ENOBUFS/short transfers: retrying is the net layer's job),
// 1000 operations queued at once (more than the ring holds), descriptor numbers reused after an
// outside close, and the backend choice (automatic, SPINDLE_IO_BACKEND).
#include <spindle/spindle.hpp>
#include <spindle/io/io_wait.hpp>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/io_test_support.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::core::io_backend;
using spindle::core::io_opcode;
using spindle::core::io_operation;
using namespace spindle::testing;

// --- operations ------------------------------------------------------------------------------

io_operation make_op(io_opcode opcode, int fd, void* buffer = nullptr, std::uint32_t length = 0,
                     std::int64_t offset = -1, std::int32_t flags = 0) {
  io_operation op;
  op.opcode = opcode;
  op.fd = fd;
  op.buffer = buffer;
  op.length = length;
  op.offset = offset;
  op.flags = flags;
  return op;
}

// One operation awaited by a task: its raw result (>= 0, or -errno).
spindle::task<std::int32_t> run_op(io_operation op) {
  co_return co_await spindle::io::submit_and_wait(op);
}

// Reads up to `length` bytes of `fd` into `buffer`, setting `waiting` just before the await.
spindle::task<std::int32_t> read_into(int fd, char* buffer, std::uint32_t length,
                                      std::atomic<bool>* waiting = nullptr) {
  io_operation op = make_op(io_opcode::read, fd, buffer, length);
  if (waiting != nullptr) waiting->store(true);
  co_return co_await spindle::io::submit_and_wait(op);
}

// Sends all of `data` through `fd` (send opcode, looping over short sends).
spindle::task<std::size_t> send_all(int fd, const std::string* data, std::uint32_t chunk) {
  std::size_t sent = 0;
  while (sent < data->size()) {
    const auto length = std::uint32_t(std::min<std::size_t>(chunk, data->size() - sent));
    io_operation op = make_op(io_opcode::send, fd, const_cast<char*>(data->data() + sent), length);
    const std::int32_t r = co_await spindle::io::submit_and_wait(op);
    if (r <= 0) co_return sent;
    sent += std::size_t(r);
  }
  co_return sent;
}

// Receives until `expected` bytes arrived or the peer closed.
spindle::task<std::string> recv_all(int fd, std::size_t expected, std::uint32_t chunk) {
  std::string got;
  std::vector<char> buffer(chunk);
  while (got.size() < expected) {
    io_operation op = make_op(io_opcode::recv, fd, buffer.data(), chunk);
    const std::int32_t r = co_await spindle::io::submit_and_wait(op);
    if (r <= 0) break;
    got.append(buffer.data(), std::size_t(r));
  }
  co_return got;
}

spindle::task<io_backend> current_backend() {
  co_return spindle::io::current_reactor().backend();
}

spindle::task<std::size_t> current_in_flight() {
  co_return spindle::io::current_reactor().in_flight();
}

std::string seeded_text(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xff);
  return s;
}

const char* name_of(io_backend backend) {
  return backend == io_backend::uring ? "uring" : "epoll";
}

// --- runtime tests, both backends ------------------------------------------------------------

class IoReactor : public ::testing::TestWithParam<io_backend> {
 protected:
  std::unique_ptr<spindle::runtime> runtime(std::uint32_t workers) {
    return std::make_unique<spindle::runtime>(
        spindle::runtime_options{.workers = workers, .io_backend = GetParam()});
  }
  // Operations in flight on every executor of `rt` (asked on each executor's own thread).
  static std::size_t total_in_flight(spindle::runtime& rt) {
    std::size_t total = 0;
    for (std::uint32_t i = 0; i < rt.executor_count(); ++i) {
      total += join_bounded(rt.spawn_on(i, current_in_flight()));
    }
    return total;
  }
};

TEST_P(IoReactor, RuntimeUsesTheRequestedBackend) {
  auto rt = runtime(2);
  for (std::uint32_t i = 0; i < rt->executor_count(); ++i) {
    EXPECT_EQ(join_bounded(rt->spawn_on(i, current_backend())), GetParam());
  }
}

TEST_P(IoReactor, PipeWriteThenRead) {
  fd_pair p;
  make_pipe(p);
  auto rt = runtime(2);
  std::string data = "hello, reactor";
  EXPECT_EQ(join_bounded(rt->spawn(run_op(make_op(io_opcode::write, p.write_end, data.data(),
                                                   std::uint32_t(data.size()))))),
            std::int32_t(data.size()));
  char buffer[64] = {};
  EXPECT_EQ(join_bounded(rt->spawn(read_into(p.read_end, buffer, sizeof buffer))),
            std::int32_t(data.size()));
  EXPECT_EQ(std::string(buffer, data.size()), data);
  EXPECT_EQ(total_in_flight(*rt), 0u);
}

TEST_P(IoReactor, EndOfStreamIsAZeroByteRead) {
  fd_pair p;
  make_pipe(p);
  auto rt = runtime(1);
  std::atomic<bool> waiting{false};
  char buffer[8];
  auto reader = rt->spawn(read_into(p.read_end, buffer, sizeof buffer, &waiting));
  ASSERT_TRUE(eventually([&] { return waiting.load(); }));
  std::this_thread::sleep_for(5ms);  // likely parked in the reactor; correct either way
  ::close(p.write_end);
  p.write_end = -1;
  EXPECT_EQ(join_bounded(std::move(reader)), 0);
}

TEST_P(IoReactor, SocketpairSendRecvExactData) {
  fd_pair s;
  make_socketpair(s);
  auto rt = runtime(2);
  // Larger than the socket buffers: the sender waits for the receiver, both make progress.
  const std::string data = seeded_text(4 << 20, 1);
  auto sender = rt->spawn(send_all(s.write_end, &data, 256 * 1024));
  auto receiver = rt->spawn(recv_all(s.read_end, data.size(), 64 * 1024 + 7));
  EXPECT_EQ(join_bounded(std::move(sender), 60s), data.size());
  const std::string got = join_bounded(std::move(receiver), 60s);
  ASSERT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
}

spindle::task<std::string> sendmsg_recvmsg(int a, int b) {
  char part1[] = "scatter-";
  char part2[] = "gather";
  iovec out[2] = {{part1, 8}, {part2, 6}};
  msghdr sent{};
  sent.msg_iov = out;
  sent.msg_iovlen = 2;
  io_operation send_op = make_op(io_opcode::sendmsg, a);
  send_op.message = &sent;
  const std::int32_t n = co_await spindle::io::submit_and_wait(send_op);
  EXPECT_EQ(n, 14);
  char in1[5], in2[20];
  iovec in[2] = {{in1, sizeof in1}, {in2, sizeof in2}};
  msghdr received{};
  received.msg_iov = in;
  received.msg_iovlen = 2;
  io_operation recv_op = make_op(io_opcode::recvmsg, b);
  recv_op.message = &received;
  const std::int32_t m = co_await spindle::io::submit_and_wait(recv_op);
  if (m < 0) co_return "error " + std::to_string(m);
  std::string got(in1, std::min<std::size_t>(std::size_t(m), sizeof in1));
  if (std::size_t(m) > sizeof in1) got.append(in2, std::size_t(m) - sizeof in1);
  co_return got;
}

TEST_P(IoReactor, SendmsgRecvmsgScatterGather) {
  fd_pair s;
  make_socketpair(s, SOCK_SEQPACKET);
  auto rt = runtime(1);
  EXPECT_EQ(join_bounded(rt->spawn(sendmsg_recvmsg(s.write_end, s.read_end))), "scatter-gather");
}

TEST_P(IoReactor, ReadWaitsUntilAnotherThreadWrites) {
  for (const bool nonblocking : {true, false}) {
    SCOPED_TRACE(nonblocking ? "O_NONBLOCK pipe" : "blocking pipe");
    fd_pair p;
    make_pipe(p, nonblocking);
    auto rt = runtime(2);
    for (int round = 0; round < 20; ++round) {
      std::atomic<bool> waiting{false};
      char buffer[32] = {};
      auto reader = rt->spawn(read_into(p.read_end, buffer, sizeof buffer, &waiting));
      ASSERT_TRUE(eventually([&] { return waiting.load(); }));
      if (round % 2 == 0) std::this_thread::sleep_for(2ms);  // let it park in the kernel
      const std::string message = "round " + std::to_string(round);
      ASSERT_EQ(::write(p.write_end, message.data(), message.size()), ssize_t(message.size()));
      EXPECT_EQ(join_bounded(std::move(reader)), std::int32_t(message.size()));
      EXPECT_EQ(std::string(buffer, message.size()), message);
    }
  }
}

TEST_P(IoReactor, BlockingPipeWriteNeverBlocksTheExecutor) {
  fd_pair p;
  make_pipe(p, /*nonblocking=*/false);
  auto rt = runtime(1);
  std::string data(256 * 1024, 'x');  // more than the pipe holds
  // epoll writes at most PIPE_BUF to a blocking pipe (a short write); io_uring blocks a kernel
  // worker, not the executor, until a reader drains. Either way the executor keeps running.
  auto writer = rt->spawn(run_op(make_op(io_opcode::write, p.write_end, data.data(),
                                         std::uint32_t(data.size()))));
  std::atomic<bool> ran{false};
  join_bounded(rt->spawn([&ran] { ran.store(true); }));
  EXPECT_TRUE(ran.load());
  std::size_t drained = 0;
  while (!writer.is_finished() && drained < data.size()) drained += read_available(p.read_end).size();
  const std::int32_t written = join_bounded(std::move(writer));
  EXPECT_GT(written, 0);
  EXPECT_LE(std::size_t(written), data.size());
}

TEST_P(IoReactor, PollOpcodeReportsReadiness) {
  fd_pair p;
  make_pipe(p);
  auto rt = runtime(2);
  // Writable at once.
  EXPECT_EQ(join_bounded(rt->spawn(run_op(make_op(io_opcode::poll, p.write_end, nullptr, 0, -1,
                                                  POLLOUT)))) & POLLOUT,
            POLLOUT);
  // Readable only once written.
  std::atomic<bool> waiting{false};
  auto poller = rt->spawn([](int fd, std::atomic<bool>* flag) -> spindle::task<std::int32_t> {
    io_operation op = make_op(io_opcode::poll, fd, nullptr, 0, -1, POLLIN);
    flag->store(true);
    co_return co_await spindle::io::submit_and_wait(op);
  }(p.read_end, &waiting));
  ASSERT_TRUE(eventually([&] { return waiting.load(); }));
  std::this_thread::sleep_for(2ms);
  EXPECT_FALSE(poller.is_finished());
  ASSERT_EQ(::write(p.write_end, "!", 1), 1);
  EXPECT_EQ(join_bounded(std::move(poller)) & POLLIN, POLLIN);
  EXPECT_EQ(read_available(p.read_end), "!");
  // Hang-up: the write end closed.
  ::close(p.write_end);
  p.write_end = -1;
  EXPECT_NE(join_bounded(rt->spawn(run_op(make_op(io_opcode::poll, p.read_end, nullptr, 0, -1,
                                                  POLLIN)))) & (POLLIN | POLLHUP),
            0);
}

TEST_P(IoReactor, CloseOpcodeClosesTheDescriptor) {
  fd_pair p;
  make_pipe(p);
  auto rt = runtime(1);
  struct stat before {};
  ASSERT_EQ(::fstat(p.read_end, &before), 0);
  EXPECT_EQ(join_bounded(rt->spawn(run_op(make_op(io_opcode::close, p.read_end)))), 0);
  // The number may already name another file (anything in the process may open one), so the
  // check is that it no longer names this pipe end.
  struct stat after {};
  const bool same_file = ::fstat(p.read_end, &after) == 0 && after.st_ino == before.st_ino &&
                         after.st_dev == before.st_dev;
  EXPECT_FALSE(same_file);
  p.read_end = -1;
  EXPECT_EQ(join_bounded(rt->spawn(run_op(make_op(io_opcode::close, 1 << 20)))), -EBADF);
}

TEST_P(IoReactor, BadDescriptorIsAnErrorResult) {
  auto rt = runtime(1);
  char buffer[4];
  EXPECT_EQ(join_bounded(rt->spawn(read_into(1 << 20, buffer, sizeof buffer))), -EBADF);
  EXPECT_EQ(join_bounded(rt->spawn(run_op(make_op(io_opcode::recv, -1, buffer, 4)))), -EBADF);
}

// TCP over loopback: accept and connect through the reactor (connect waits for the handshake).
spindle::task<std::string> tcp_round_trip(int listener, sockaddr_in address) {
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in peer{};
  socklen_t peer_length = sizeof peer;
  io_operation accept_op = make_op(io_opcode::accept, listener);
  accept_op.address = reinterpret_cast<sockaddr*>(&peer);
  accept_op.address_length = &peer_length;
  auto acceptor = spindle::spawn(run_op(accept_op));
  io_operation connect_op = make_op(io_opcode::connect, client);
  connect_op.address = reinterpret_cast<sockaddr*>(&address);
  connect_op.connect_length = sizeof address;
  const std::int32_t connected = co_await spindle::io::submit_and_wait(connect_op);
  const std::int32_t server = co_await std::move(acceptor);
  if (connected != 0 || server < 0) {
    ::close(client);
    if (server >= 0) ::close(server);
    co_return "connect " + std::to_string(connected) + " accept " + std::to_string(server);
  }
  EXPECT_EQ(peer.sin_family, AF_INET);
  EXPECT_NE(::fcntl(server, F_GETFL) & O_NONBLOCK, 0);  // accept4 with SOCK_NONBLOCK
  EXPECT_NE(::fcntl(server, F_GETFD) & FD_CLOEXEC, 0);
  std::string data = "ping over tcp";
  io_operation send_op = make_op(io_opcode::send, client, data.data(), std::uint32_t(data.size()));
  EXPECT_EQ(co_await spindle::io::submit_and_wait(send_op), std::int32_t(data.size()));
  const std::string got = co_await recv_all(server, data.size(), 64);
  EXPECT_EQ(co_await run_op(make_op(io_opcode::close, client)), 0);
  EXPECT_EQ(co_await run_op(make_op(io_opcode::close, server)), 0);
  co_return got;
}

TEST_P(IoReactor, TcpAcceptConnectSendRecv) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  {
    auto rt = runtime(2);
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(join_bounded(rt->spawn(tcp_round_trip(listener, address))), "ping over tcp");
    }
  }
  ::close(listener);
}

TEST_P(IoReactor, ConnectToAClosedPortFails) {
  // A port that was just bound and released: nobody listens there.
  const int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(probe);
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  auto rt = runtime(1);
  io_operation op = make_op(io_opcode::connect, client);
  op.address = reinterpret_cast<sockaddr*>(&address);
  op.connect_length = sizeof address;
  EXPECT_EQ(join_bounded(rt->spawn(run_op(op))), -ECONNREFUSED);
  ::close(client);
}

// --- regular files ---------------------------------------------------------------------------

class temp_file {
 public:
  temp_file() {
    std::string path =
        (std::filesystem::temp_directory_path() / "spindle-reactor-test-XXXXXX").string();
    fd_ = ::mkstemp(path.data());
    if (fd_ >= 0) ::unlink(path.c_str());
  }
  ~temp_file() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

spindle::task<int> random_file_round_trip(int fd, std::uint64_t seed, std::vector<char>* reference,
                                          int rounds) {
  std::mt19937_64 rng(seed);
  int mismatches = 0;
  std::vector<char> buffer(64 * 1024);
  for (int i = 0; i < rounds; ++i) {
    const std::size_t offset = rng() % (reference->size() + 4096);
    const std::size_t length = 1 + rng() % buffer.size();
    if (rng() % 2 == 0) {
      for (std::size_t j = 0; j < length; ++j) buffer[j] = char(rng() & 0xff);
      io_operation op = make_op(io_opcode::write, fd, buffer.data(), std::uint32_t(length),
                                std::int64_t(offset));
      const std::int32_t r = co_await spindle::io::submit_and_wait(op);
      EXPECT_EQ(r, std::int32_t(length));
      if (offset + length > reference->size()) reference->resize(offset + length, '\0');
      std::copy_n(buffer.begin(), length, reference->begin() + std::ptrdiff_t(offset));
    } else {
      io_operation op = make_op(io_opcode::read, fd, buffer.data(), std::uint32_t(length),
                                std::int64_t(offset));
      const std::int32_t r = co_await spindle::io::submit_and_wait(op);
      const std::size_t expected =
          offset >= reference->size() ? 0 : std::min(length, reference->size() - offset);
      EXPECT_EQ(r, std::int32_t(expected));
      if (r > 0 && !std::equal(buffer.begin(), buffer.begin() + r,
                               reference->begin() + std::ptrdiff_t(offset))) {
        ++mismatches;
      }
    }
  }
  EXPECT_EQ(co_await run_op(make_op(io_opcode::fsync, fd)), 0);
  EXPECT_EQ(co_await run_op(make_op(io_opcode::fsync, fd, nullptr, 0, -1, 1)), 0);  // datasync
  co_return mismatches;
}

TEST_P(IoReactor, RegularFilePreadPwriteAtRandomOffsets) {
  temp_file f;
  ASSERT_GE(f.fd(), 0);
  auto rt = runtime(2);
  std::vector<char> reference;
  EXPECT_EQ(join_bounded(rt->spawn(random_file_round_trip(f.fd(), 42, &reference, 400)), 60s), 0);
  // The file itself matches the reference.
  std::vector<char> whole(reference.size() + 1);
  EXPECT_EQ(::pread(f.fd(), whole.data(), whole.size(), 0), ssize_t(reference.size()));
  EXPECT_TRUE(std::equal(reference.begin(), reference.end(), whole.begin()));
}

// --- cancellation ----------------------------------------------------------------------------

TEST_P(IoReactor, CancelMidReadLeavesTheBufferUntouched) {
  fd_pair p;
  make_pipe(p);
  auto rt = runtime(2);
  for (int round = 0; round < 50; ++round) {
    std::array<char, 16> buffer;
    buffer.fill('#');
    std::atomic<bool> waiting{false};
    auto reader = rt->spawn(read_into(p.read_end, buffer.data(), buffer.size(), &waiting));
    ASSERT_TRUE(eventually([&] { return waiting.load(); }));
    if (round % 2 == 0) std::this_thread::sleep_for(1ms);
    reader.cancel();
    EXPECT_TRUE(joined_cancelled(reader));
    // Data written after the cancel stays in the pipe, and nothing lands in the buffer.
    ASSERT_EQ(::write(p.write_end, "data", 4), 4);
    std::this_thread::sleep_for(200us);
    EXPECT_EQ(read_available(p.read_end), "data");
    EXPECT_TRUE(std::all_of(buffer.begin(), buffer.end(), [](char c) { return c == '#'; }));
  }
  EXPECT_EQ(total_in_flight(*rt), 0u);
}

spindle::task<int> read_one_byte(int fd, std::atomic<int>* started) {
  char byte = 0;
  io_operation op = make_op(io_opcode::read, fd, &byte, 1);
  started->fetch_add(1);
  const std::int32_t r = co_await spindle::io::submit_and_wait(op);
  if (r != 1) co_return -1000 + r;
  co_return static_cast<unsigned char>(byte);
}

TEST_P(IoReactor, CancelLoopAccountsForEveryOutcome) {
  const int rounds = under_tsan ? 2000 : 10000;
  fd_pair p;
  make_pipe(p);
  auto rt = runtime(2);
  std::mt19937 rng(7);
  int cancelled = 0, completed = 0, left_in_pipe = 0;
  for (int i = 0; i < rounds; ++i) {
    std::atomic<int> started{0};
    const unsigned char value = static_cast<unsigned char>(i & 0xff);
    auto reader = rt->spawn(read_one_byte(p.read_end, &started));
    const unsigned mode = rng() % 4;
    if (mode >= 1) spin_until([&] { return started.load() == 1; });
    if (mode == 2) std::this_thread::yield();
    const bool written = mode == 3 || (mode == 1 && rng() % 2 == 0);
    if (written) {
      ASSERT_EQ(::write(p.write_end, &value, 1), 1);
    }
    reader.cancel();
    try {
      const int got = join_bounded(std::move(reader));
      ASSERT_TRUE(written) << "a read completed with no data written: " << got;
      ASSERT_EQ(got, int(value)) << "round " << i;
      ++completed;
    } catch (const spindle::task_cancelled&) {
      ++cancelled;
      if (written) {
        // The byte was not consumed: it is still in the pipe.
        ASSERT_EQ(read_available(p.read_end), std::string(1, char(value))) << "round " << i;
        ++left_in_pipe;
      }
    }
  }
  EXPECT_EQ(cancelled + completed, rounds);
  EXPECT_EQ(read_available(p.read_end), "");
  EXPECT_EQ(total_in_flight(*rt), 0u);
  EXPECT_EQ(rt->live_tasks(), 0u);
  std::printf("[%s] cancel loop: %d cancelled (%d with the byte left in the pipe), %d completed\n",
              name_of(GetParam()), cancelled, left_in_pipe, completed);
}

TEST_P(IoReactor, ShutdownWithReadsPendingDrains) {
  constexpr int readers = 64;
  std::vector<std::unique_ptr<fd_pair>> pipes;
  std::vector<std::array<char, 8>> buffers(readers);
  for (auto& b : buffers) b.fill('#');
  for (int i = 0; i < readers; ++i) {
    pipes.push_back(std::make_unique<fd_pair>());
    make_pipe(*pipes.back(), /*nonblocking=*/i % 2 == 0);
  }
  std::vector<spindle::join_handle<std::int32_t>> handles;
  std::vector<std::atomic<bool>> waiting(readers);
  {
    auto rt = runtime(2);
    for (int i = 0; i < readers; ++i) {
      handles.push_back(rt->spawn(read_into(pipes[i]->read_end, buffers[i].data(), 8, &waiting[i])));
    }
    ASSERT_TRUE(eventually([&] {
      return std::all_of(waiting.begin(), waiting.end(), [](auto& w) { return w.load(); });
    }));
    std::this_thread::sleep_for(2ms);
  }  // the runtime drains its reactors: no hang, no crash
  // Each reader either was dropped as a task (cancelled), or saw its read cancelled by the drain:
  // a worker still in its loop may run a reader that another worker's drain just woke.
  for (auto& h : handles) {
    try {
      EXPECT_EQ(h.join(), -ECANCELED);
    } catch (const spindle::task_cancelled&) {
    }
  }
  for (int i = 0; i < readers; ++i) {
    ASSERT_EQ(::write(pipes[i]->write_end, "late", 4), 4);
    EXPECT_EQ(read_available(pipes[i]->read_end), "late");
    EXPECT_TRUE(std::all_of(buffers[i].begin(), buffers[i].end(), [](char c) { return c == '#'; }));
  }
}

// --- fault injection -------------------------------------------------------------------------

std::atomic<int> eagain_remaining{0};
void eagain_once(io_operation* op) noexcept {
  if (eagain_remaining.fetch_sub(1) > 0) op->result = -EAGAIN;
}
void enobufs_always(io_operation* op) noexcept { op->result = -ENOBUFS; }
void short_transfer(io_operation* op) noexcept {
  if (op->result > 3) op->result = 3;
}

struct fault_results {
  std::int32_t eagain_first = 0, eagain_second = 0, enobufs = 0, short_read = 0, clean = 0;
};

spindle::task<fault_results> faults(int read_fd, int write_fd) {
  spindle::core::reactor& reactor = spindle::io::current_reactor();
  fault_results out;
  char buffer[16];
  std::string text = "0123456789";
  const auto length = std::uint32_t(text.size());

  eagain_remaining.store(1);
  reactor.set_fault_hook(&eagain_once);
  out.eagain_first = co_await run_op(make_op(io_opcode::write, write_fd, text.data(), length));
  out.eagain_second = co_await run_op(make_op(io_opcode::write, write_fd, text.data(), length));

  reactor.set_fault_hook(&enobufs_always);
  out.enobufs = co_await run_op(make_op(io_opcode::send, write_fd, text.data(), length));

  reactor.set_fault_hook(&short_transfer);
  out.short_read = co_await run_op(make_op(io_opcode::recv, read_fd, buffer, sizeof buffer));

  reactor.set_fault_hook(nullptr);
  out.clean = co_await run_op(make_op(io_opcode::recv, read_fd, buffer, sizeof buffer));
  co_return out;
}

TEST_P(IoReactor, FaultHookResultsSurfaceRaw) {
  fd_pair s;
  make_socketpair(s);
  auto rt = runtime(1);  // one executor: the hook is on the reactor the task runs on
  const fault_results r = join_bounded(rt->spawn(faults(s.read_end, s.write_end)));
  EXPECT_EQ(r.eagain_first, -EAGAIN);
  EXPECT_EQ(r.eagain_second, 10);
  EXPECT_EQ(r.enobufs, -ENOBUFS);
  EXPECT_EQ(r.short_read, 3);
  // The write the hook reported as EAGAIN and the send it reported as ENOBUFS really happened:
  // 30 bytes went out, the short read consumed up to 16, the clean read the rest.
  EXPECT_EQ(r.clean, 30 - 16);
}

// --- many operations at once -----------------------------------------------------------------

spindle::task<std::uint32_t> read_record(int fd, std::atomic<int>* started) {
  std::uint32_t record = 0;
  io_operation op = make_op(io_opcode::read, fd, &record, sizeof record);
  started->fetch_add(1);
  const std::int32_t r = co_await spindle::io::submit_and_wait(op);
  EXPECT_EQ(r, std::int32_t(sizeof record));
  co_return record;
}

spindle::task<std::uint64_t> thousand_readers(int read_fd, int write_fd, int count) {
  std::atomic<int> started{0};
  std::vector<spindle::join_handle<std::uint32_t>> children;
  for (int i = 0; i < count; ++i) children.push_back(spindle::spawn(read_record(read_fd, &started)));
  co_await until([&] { return started.load() == count; });
  // Every child has submitted (one executor: each ran to its await before we resumed).
  EXPECT_GE(spindle::io::current_reactor().in_flight(), std::size_t(count));
  std::vector<std::uint32_t> records(static_cast<std::size_t>(count));
  std::iota(records.begin(), records.end(), 0u);
  io_operation op = make_op(io_opcode::write, write_fd, records.data(),
                            std::uint32_t(records.size() * sizeof(std::uint32_t)));
  EXPECT_EQ(co_await spindle::io::submit_and_wait(op), std::int32_t(op.length));
  std::vector<bool> seen(static_cast<std::size_t>(count));
  std::uint64_t distinct = 0;
  for (auto& child : children) {
    const std::uint32_t record = co_await std::move(child);
    if (record < seen.size() && !seen[record]) {
      seen[record] = true;
      ++distinct;
    }
  }
  co_return distinct;
}

TEST_P(IoReactor, AThousandQueuedOperationsAreNeverDropped) {
  fd_pair p;
  make_pipe(p);
  auto rt = runtime(1);
  EXPECT_EQ(join_bounded(rt->spawn(thousand_readers(p.read_end, p.write_end, 1000)), 60s), 1000u);
  EXPECT_EQ(read_available(p.read_end), "");
}

// A descriptor closed outside the reactor and its number reused for a new file: the new file's
// operations still wait and complete (epoll must not trust its old registration).
TEST_P(IoReactor, DescriptorNumberReusedAfterAnOutsideClose) {
  auto rt = runtime(1);
  for (int round = 0; round < 10; ++round) {
    fd_pair s;
    make_socketpair(s);
    std::atomic<bool> waiting{false};
    char buffer[8] = {};
    auto reader = rt->spawn(read_into(s.read_end, buffer, sizeof buffer, &waiting));
    ASSERT_TRUE(eventually([&] { return waiting.load(); }));
    std::this_thread::sleep_for(1ms);
    ASSERT_EQ(::write(s.write_end, "abc", 3), 3);
    EXPECT_EQ(join_bounded(std::move(reader)), 3);
    s.close_both();  // behind the reactor's back; the next pair most likely reuses the numbers
  }
}

// The same across kinds: a socket's number reused by a regular file (positioned reads and writes
// must reach the file), then the file's number reused by a socket (reads must wait for data).
spindle::task<std::string> positioned_round_trip(int fd) {
  std::string text = "positioned";
  EXPECT_EQ(co_await run_op(make_op(io_opcode::write, fd, text.data(), std::uint32_t(text.size()),
                                    100)),
            std::int32_t(text.size()));
  char buffer[32] = {};
  const std::int32_t n = co_await run_op(make_op(io_opcode::read, fd, buffer, 6, 104));
  co_return n < 0 ? "error " + std::to_string(n) : std::string(buffer, std::size_t(n));
}

TEST_P(IoReactor, DescriptorNumberReusedAcrossKinds) {
  auto rt = runtime(1);
  for (int round = 0; round < 4; ++round) {
    int number = -1;
    {
      fd_pair s;
      make_socketpair(s);
      std::atomic<bool> waiting{false};
      char buffer[8] = {};
      auto reader = rt->spawn(read_into(s.read_end, buffer, sizeof buffer, &waiting));
      ASSERT_TRUE(eventually([&] { return waiting.load(); }));
      std::this_thread::sleep_for(1ms);
      ASSERT_EQ(::write(s.write_end, "abc", 3), 3);
      EXPECT_EQ(join_bounded(std::move(reader)), 3);
      number = s.read_end;
    }  // both ends closed behind the reactor's back
    {
      temp_file f;  // most likely the socket's old number
      ASSERT_GE(f.fd(), 0);
      if (f.fd() != number) std::printf("note: the file got %d, not %d\n", f.fd(), number);
      EXPECT_EQ(join_bounded(rt->spawn(positioned_round_trip(f.fd()))), "tioned");
    }
    {
      fd_pair s;  // and now a socket again where the file was
      make_socketpair(s);
      std::atomic<bool> waiting{false};
      char buffer[8] = {};
      auto reader = rt->spawn(read_into(s.read_end, buffer, sizeof buffer, &waiting));
      ASSERT_TRUE(eventually([&] { return waiting.load(); }));
      std::this_thread::sleep_for(1ms);
      EXPECT_FALSE(reader.is_finished());
      ASSERT_EQ(::write(s.write_end, "xyz", 3), 3);
      EXPECT_EQ(join_bounded(std::move(reader)), 3);
      EXPECT_EQ(std::string(buffer, 3), "xyz");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, IoReactor,
                         ::testing::Values(io_backend::uring, io_backend::epoll),
                         [](const ::testing::TestParamInfo<io_backend>& info) {
                           return std::string(name_of(info.param));
                         });

// --- the reactor alone: the test thread is the owner -----------------------------------------

// Drives `reactor` (waits of at most 10 ms) until `done()` holds; false after 10 s.
template <class Done>
bool drive(spindle::core::reactor& reactor, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    reactor.wait(std::chrono::milliseconds(10));
  }
  return true;
}

class ReactorDirect : public ::testing::TestWithParam<io_backend> {
 protected:
  void SetUp() override {
    reactor_ = spindle::core::make_reactor(GetParam());
    reactor_->attach_owner();  // this thread is the owner
  }
  std::unique_ptr<spindle::core::reactor> reactor_;
};

TEST_P(ReactorDirect, SubmitNeverCompletesInline) {
  fd_pair p;
  make_pipe(p);
  char data[] = "x";
  recorded r;
  io_operation op = recorded_op(io_opcode::write, p.write_end, r, data, 1);
  reactor_->submit(&op);
  EXPECT_EQ(r.calls, 0);
  EXPECT_EQ(reactor_->in_flight(), 1u);
  ASSERT_TRUE(drive(*reactor_, [&] { return r.calls == 1; }));
  EXPECT_EQ(r.result, 1);
  EXPECT_EQ(reactor_->in_flight(), 0u);
}

TEST_P(ReactorDirect, CancelOfAnUnknownOrCompletedOperationIsHarmless) {
  fd_pair p;
  make_pipe(p);
  recorded r;
  char data[] = "y";
  io_operation op = recorded_op(io_opcode::write, p.write_end, r, data, 1);
  reactor_->submit(&op);
  ASSERT_TRUE(drive(*reactor_, [&] { return r.calls == 1; }));
  reactor_->cancel(reinterpret_cast<std::uintptr_t>(&op));  // completed already
  reactor_->cancel(0x12345678);                              // never ours
  for (int i = 0; i < 3; ++i) reactor_->wait(std::chrono::milliseconds(1));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.result, 1);
}

TEST_P(ReactorDirect, CancelCompletesAWaitingReadWithEcanceled) {
  fd_pair p;
  make_pipe(p);
  recorded r;
  char buffer[4] = {'#', '#', '#', '#'};
  io_operation op = recorded_op(io_opcode::read, p.read_end, r, buffer, sizeof buffer);
  reactor_->submit(&op);
  reactor_->poll();
  reactor_->wait(std::chrono::milliseconds(1));
  EXPECT_EQ(r.calls, 0);
  reactor_->cancel(reinterpret_cast<std::uintptr_t>(&op));
  ASSERT_TRUE(drive(*reactor_, [&] { return r.calls == 1; }));
  EXPECT_EQ(r.result, -ECANCELED);
  ASSERT_EQ(::write(p.write_end, "data", 4), 4);
  reactor_->wait(std::chrono::milliseconds(1));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(std::string(buffer, 4), "####");
  EXPECT_EQ(read_available(p.read_end), "data");
}

TEST_P(ReactorDirect, DrainCompletesEverythingOnce) {
  constexpr int count = 300;  // more than the ring's 256 entries
  std::vector<std::unique_ptr<fd_pair>> pipes;
  std::vector<recorded> records(count);
  std::vector<io_operation> ops(count);
  std::vector<char> buffers(count);
  for (int i = 0; i < count; ++i) {
    if (i % 30 == 0) {
      pipes.push_back(std::make_unique<fd_pair>());
      make_pipe(*pipes.back());
    }
    ops[i] = recorded_op(io_opcode::read, pipes.back()->read_end, records[i], &buffers[i], 1);
    reactor_->submit(&ops[i]);
    if (i % 100 == 99) reactor_->poll();  // some attempted (waiting), some only queued
  }
  reactor_->drain();
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(records[i].calls, 1) << i;
    EXPECT_EQ(records[i].result, -ECANCELED) << i;
  }
  EXPECT_EQ(reactor_->in_flight(), 0u);
}

TEST_P(ReactorDirect, UnparkWakesAWaitFromAnotherThread) {
  for (const bool with_io : {false, true}) {
    SCOPED_TRACE(with_io ? "parked in the kernel (I/O in flight)" : "parked on the futex");
    fd_pair p;
    make_pipe(p);
    recorded r;
    char buffer[1];
    io_operation op = recorded_op(io_opcode::read, p.read_end, r, buffer, 1);
    if (with_io) {
      reactor_->submit(&op);
      reactor_->poll();
    }
    for (int round = 0; round < 50; ++round) {
      std::atomic<bool> woken{false};
      std::thread waker([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100 * (round % 5)));
        woken.store(true);
        reactor_->unpark();
      });
      // No timeout: only the unpark (or a spurious return) ends each wait.
      while (!woken.load()) reactor_->wait(std::nullopt);
      waker.join();
    }
    if (with_io) {
      ASSERT_EQ(::write(p.write_end, "z", 1), 1);
      ASSERT_TRUE(drive(*reactor_, [&] { return r.calls == 1; }));
      EXPECT_EQ(r.result, 1);
    }
  }
}

TEST_P(ReactorDirect, WaitWithATimeoutReturns) {
  fd_pair p;
  make_pipe(p);
  recorded r;
  char buffer[1];
  io_operation op = recorded_op(io_opcode::read, p.read_end, r, buffer, 1);
  reactor_->wait(std::chrono::microseconds(300));  // nothing in flight: the futex path
  reactor_->wait(std::chrono::nanoseconds(0));
  reactor_->submit(&op);
  reactor_->wait(std::chrono::microseconds(300));  // waiting for readiness: the kernel path
  reactor_->wait(std::chrono::milliseconds(2));
  EXPECT_EQ(r.calls, 0);
  reactor_->drain();
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.result, -ECANCELED);
}

// An executor that never parks only polls: poll() alone must deliver a completion that arrives
// after the operation was submitted (io_uring with DEFER_TASKRUN runs the kernel's task work only
// when entered, and poll() enters only when the ring flags work for it). completions_pending()
// says so beforehand without a system call where the backend can tell (io_uring), and is false
// once poll() delivered everything.
TEST_P(ReactorDirect, PollAloneDeliversACompletionThatArrivesLater) {
  for (const bool defer_taskrun : {true, false}) {
    SCOPED_TRACE(defer_taskrun ? "DEFER_TASKRUN" : "older set-up");
    spindle::core::reactor_options options;
    options.uring_defer_taskrun = defer_taskrun;
    auto reactor = spindle::core::make_reactor(GetParam(), options);
    reactor->attach_owner();
    fd_pair p;
    make_pipe(p);
    for (int round = 0; round < 100; ++round) {
      recorded r;
      char buffer[1] = {0};
      io_operation op = recorded_op(io_opcode::read, p.read_end, r, buffer, 1);
      reactor->submit(&op);
      reactor->poll();  // submitted: the read now waits for data
      EXPECT_EQ(r.calls, 0);
      // With DEFER_TASKRUN the completion now waits as task work, flagged in the SQ ring; the
      // older set-up runs that work at the return from this write, putting the CQE on the ring.
      const char byte = char('a' + round % 26);
      ASSERT_EQ(::write(p.write_end, &byte, 1), 1);
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      if (GetParam() == io_backend::uring) {
        while (!reactor->completions_pending()) {
          ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "never flagged";
        }
      }
      while (r.calls == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "poll() never delivered";
        reactor->poll();
      }
      EXPECT_EQ(r.calls, 1);
      EXPECT_EQ(r.result, 1);
      EXPECT_EQ(buffer[0], byte);
      EXPECT_FALSE(reactor->completions_pending());
      EXPECT_EQ(reactor->in_flight(), 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ReactorDirect,
                         ::testing::Values(io_backend::uring, io_backend::epoll),
                         [](const ::testing::TestParamInfo<io_backend>& info) {
                           return std::string(name_of(info.param));
                         });

// --- epoll specifics -------------------------------------------------------------------------

TEST(EpollReactor, OperationsOnOneDescriptorCompleteInSubmissionOrder) {
  auto reactor = spindle::core::make_reactor(io_backend::epoll);
  reactor->attach_owner();
  fd_pair p;
  make_pipe(p);
  constexpr int count = 10;
  std::array<recorded, count> records{};
  std::array<char, count> bytes{};
  std::vector<io_operation> ops(count);
  for (int i = 0; i < count; ++i) {
    ops[i] = recorded_op(io_opcode::read, p.read_end, records[i], &bytes[i], 1);
    reactor->submit(&ops[i]);
    if (i == 3) reactor->poll();  // the rest join the waiting list without an attempt
  }
  reactor->poll();
  ASSERT_EQ(::write(p.write_end, "0123456789", count), count);
  ASSERT_TRUE(drive(*reactor, [&] { return records[count - 1].calls == 1; }));
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(records[i].result, 1);
    EXPECT_EQ(bytes[i], char('0' + i)) << i;
  }
}

TEST(EpollReactor, CloseCancelsTheOperationsWaitingOnTheDescriptor) {
  auto reactor = spindle::core::make_reactor(io_backend::epoll);
  reactor->attach_owner();
  fd_pair s;
  make_socketpair(s);
  recorded reader, closer;
  char buffer[4];
  io_operation read_op = recorded_op(io_opcode::recv, s.read_end, reader, buffer, sizeof buffer);
  io_operation close_op = recorded_op(io_opcode::close, s.read_end, closer);
  reactor->submit(&read_op);
  reactor->poll();
  reactor->submit(&close_op);
  ASSERT_TRUE(drive(*reactor, [&] { return reader.calls == 1 && closer.calls == 1; }));
  EXPECT_EQ(reader.result, -ECANCELED);
  EXPECT_EQ(closer.result, 0);
  s.read_end = -1;
}

TEST(EpollReactor, DrainPerformsQueuedCloses) {
  auto reactor = spindle::core::make_reactor(io_backend::epoll);
  reactor->attach_owner();
  fd_pair p;
  make_pipe(p);
  recorded closer;
  io_operation close_op = recorded_op(io_opcode::close, p.read_end, closer);
  reactor->submit(&close_op);
  reactor->drain();
  EXPECT_EQ(closer.calls, 1);
  EXPECT_EQ(closer.result, 0);  // not cancelled: that would leak the descriptor
  EXPECT_EQ(::fcntl(p.read_end, F_GETFD), -1);
  p.read_end = -1;
}

TEST(EpollReactor, UnpollableDescriptorsAreDoneSynchronously) {
  auto reactor = spindle::core::make_reactor(io_backend::epoll);
  reactor->attach_owner();
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);  // blocking, no poll support
  ASSERT_GE(null_fd, 0);
  recorded reader, writer;
  char buffer[4];
  char data[] = "abc";
  io_operation read_op = recorded_op(io_opcode::read, null_fd, reader, buffer, sizeof buffer);
  io_operation write_op = recorded_op(io_opcode::write, null_fd, writer, data, 3);
  reactor->submit(&read_op);
  reactor->submit(&write_op);
  ASSERT_TRUE(drive(*reactor, [&] { return reader.calls == 1 && writer.calls == 1; }));
  EXPECT_EQ(reader.result, 0);
  EXPECT_EQ(writer.result, 3);
  ::close(null_fd);
}

// --- backend choice --------------------------------------------------------------------------

// Sets SPINDLE_IO_BACKEND for one scope (the runtime reads it when its executors start).
class scoped_backend_env {
 public:
  explicit scoped_backend_env(const char* value) {
    if (const char* old = std::getenv("SPINDLE_IO_BACKEND")) saved_ = old;
    if (value != nullptr) {
      ::setenv("SPINDLE_IO_BACKEND", value, 1);
    } else {
      ::unsetenv("SPINDLE_IO_BACKEND");
    }
  }
  ~scoped_backend_env() {
    if (saved_) {
      ::setenv("SPINDLE_IO_BACKEND", saved_->c_str(), 1);
    } else {
      ::unsetenv("SPINDLE_IO_BACKEND");
    }
  }

 private:
  std::optional<std::string> saved_;
};

TEST(BackendChoice, AutomaticPicksUringHere) {
  scoped_backend_env env(nullptr);
  EXPECT_EQ(spindle::core::make_reactor(io_backend::automatic)->backend(), io_backend::uring);
  spindle::runtime rt({.workers = 1});  // io_backend = automatic by default
  EXPECT_EQ(rt.block_on(current_backend()), io_backend::uring);
}

TEST(BackendChoice, EnvironmentOverridesAutomaticOnly) {
  {
    scoped_backend_env env("epoll");
    EXPECT_EQ(spindle::core::make_reactor(io_backend::automatic)->backend(), io_backend::epoll);
    EXPECT_EQ(spindle::core::make_reactor(io_backend::uring)->backend(), io_backend::uring);
    spindle::runtime rt({.workers = 1});
    EXPECT_EQ(rt.block_on(current_backend()), io_backend::epoll);
  }
  {
    scoped_backend_env env("uring");
    EXPECT_EQ(spindle::core::make_reactor(io_backend::automatic)->backend(), io_backend::uring);
    EXPECT_EQ(spindle::core::make_reactor(io_backend::epoll)->backend(), io_backend::epoll);
  }
  {
    scoped_backend_env env("io_uring");
    EXPECT_EQ(spindle::core::make_reactor(io_backend::automatic)->backend(), io_backend::uring);
  }
}

TEST(BackendChoice, Names) {
  EXPECT_STREQ(spindle::core::to_string(io_backend::automatic), "automatic");
  EXPECT_STREQ(spindle::core::to_string(io_backend::uring), "io_uring");
  EXPECT_STREQ(spindle::core::to_string(io_backend::epoll), "epoll");
}

}  // namespace
