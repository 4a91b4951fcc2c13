// tcp_stream and tcp_listener (include/spindle/net/net.hpp), on io::submit_and_wait.
// Retry policy and buffer lifetimes: net_common.hpp.
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/io/io_wait.hpp"
#include "spindle/net/net.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/time/sleep.hpp"
#include "net/net_common.hpp"
#include "net/stream_calls.hpp"

namespace spindle::net {

using core::io_opcode;
using core::io_operation;

namespace {

// How long accept() waits before trying again when the process or system is out of file
// descriptors (or socket memory): the pending connection stays queued in the meantime.
constexpr auto fd_exhaustion_pause = std::chrono::milliseconds(10);

}  // namespace

task<void> detail::close_through_reactor(int fd) {
  io_operation op = detail::make_operation(io_opcode::close, fd);
  std::int32_t result;
  try {
    result = co_await io::submit_and_wait(op);
  } catch (const task_cancelled&) {
    ::close(fd);
    throw;
  }
  // EINTR: Linux has released the descriptor anyway; nothing to retry.
  if (result < 0 && result != -EINTR) detail::throw_error(-result, "close");
}

// --- tcp_stream -----------------------------------------------------------------------------

tcp_stream::tcp_stream(tcp_stream&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

tcp_stream& tcp_stream::operator=(tcp_stream&& other) noexcept {
  if (this != &other) {
    detail::close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

tcp_stream::~tcp_stream() { detail::close_quietly(fd_); }

task<tcp_stream> tcp_stream::connect(endpoint remote) {
  // `remote` is a parameter: it lives in this frame, which the address points into.
  if (remote.native_length() == 0) {
    throw usage_error("spindle: tcp_stream::connect to an unspecified endpoint");
  }
  tcp_stream stream(detail::open_socket(remote.family(), SOCK_STREAM));
  for (;;) {
    io_operation op = detail::make_operation(io_opcode::connect, stream.fd_);
    op.address = remote.native();
    op.connect_length = remote.native_length();
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result == 0 || result == -EISCONN) co_return stream;
    if (detail::would_block(result)) {
      io_operation ready = detail::make_poll(stream.fd_, POLLOUT);
      detail::check_poll(co_await io::submit_and_wait(ready));
      continue;
    }
    if (result != -EINPROGRESS && result != -EALREADY && result != -EINTR) {
      detail::throw_error(-result, "connect");
    }
    // The handshake goes on in the kernel: writable means it ended; SO_ERROR says how.
    for (;;) {
      io_operation ready = detail::make_poll(stream.fd_, POLLOUT);
      const std::int32_t revents = co_await io::submit_and_wait(ready);
      detail::check_poll(revents);
      if (revents > 0) break;  // an EINTR/EAGAIN poll said nothing about the handshake
    }
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(stream.fd_, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      detail::throw_errno("getsockopt");
    }
    if (error != 0) detail::throw_error(error, "connect");
    co_return stream;
  }
}

task<std::size_t> tcp_stream::read(std::span<std::byte> buffer) {
  if (fd_ < 0) detail::throw_error(EBADF, "recv");
  if (buffer.empty()) co_return 0;
  for (;;) {
    io_operation op = detail::make_transfer(io_opcode::recv, fd_, buffer.data(), buffer.size());
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result >= 0) co_return static_cast<std::size_t>(result);
    if (result == -EINTR) continue;
    if (!detail::would_block(result)) detail::throw_error(-result, "recv");
    io_operation ready = detail::make_poll(fd_, POLLIN);
    detail::check_poll(co_await io::submit_and_wait(ready));
  }
}

task<void> tcp_stream::read_exact(std::span<std::byte> buffer) {
  if (fd_ < 0) detail::throw_error(EBADF, "recv");
  std::size_t done = 0;
  while (done < buffer.size()) {
    const std::span<std::byte> rest = buffer.subspan(done);
    io_operation op = detail::make_transfer(io_opcode::recv, fd_, rest.data(), rest.size());
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result > 0) {
      done += static_cast<std::size_t>(result);
    } else if (result == 0) {
      const std::string call = "read_exact: stream ended after " + std::to_string(done) + " of " +
                               std::to_string(buffer.size()) + " bytes";
      detail::throw_error(ECONNRESET, call.c_str());
    } else if (detail::would_block(result)) {
      io_operation ready = detail::make_poll(fd_, POLLIN);
      detail::check_poll(co_await io::submit_and_wait(ready));
    } else if (result != -EINTR) {
      detail::throw_error(-result, "recv");
    }
  }
}

task<std::size_t> tcp_stream::write(std::span<const std::byte> buffer) {
  if (fd_ < 0) detail::throw_error(EBADF, "send");
  if (buffer.empty()) co_return 0;
  for (;;) {
    // send: the reactor adds MSG_NOSIGNAL (a gone peer is EPIPE, not SIGPIPE).
    io_operation op = detail::make_transfer(io_opcode::send, fd_, buffer.data(), buffer.size());
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result > 0) co_return static_cast<std::size_t>(result);
    if (result < 0 && result != -EINTR && !detail::would_block(result)) {
      detail::throw_error(-result, "send");
    }
    if (result != -EINTR) {  // would block (or sent nothing): wait for room
      io_operation ready = detail::make_poll(fd_, POLLOUT);
      detail::check_poll(co_await io::submit_and_wait(ready));
    }
  }
}

task<void> tcp_stream::write_all(std::span<const std::byte> buffer) {
  if (fd_ < 0) detail::throw_error(EBADF, "send");
  // On io_uring every send goes through the ring, so the sends of one time slice reach the
  // kernel in one io_uring_enter (seed 000's batch). A plain send(2) per call (Asio's
  // speculative write) was measured against this: with the server CPU-bound, batched sends serve
  // 15% more requests per CPU second (docs/design/benchmarks.md, "http"). epoll has no batch to
  // join (each send is its own system call there too), so it keeps the speculative send, which
  // saves the suspension: whatever does not fit goes through the reactor below.
  std::size_t done = 0;
  if (io::current_reactor().backend() == core::io_backend::epoll) {
    for (;;) {
      const ssize_t sent = ::send(fd_, buffer.data() + done, buffer.size() - done,
                                  MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent > 0) {
        done += static_cast<std::size_t>(sent);
        if (done == buffer.size()) co_return;
        continue;
      }
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) detail::throw_errno("send");
      break;
    }
  }
  while (done < buffer.size()) {
    const std::span<const std::byte> rest = buffer.subspan(done);
    io_operation op = detail::make_transfer(io_opcode::send, fd_, rest.data(), rest.size());
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result > 0) {
      done += static_cast<std::size_t>(result);
      continue;
    }
    if (result < 0 && result != -EINTR && !detail::would_block(result)) {
      detail::throw_error(-result, "send");
    }
    if (result != -EINTR) {
      io_operation ready = detail::make_poll(fd_, POLLOUT);
      detail::check_poll(co_await io::submit_and_wait(ready));
    }
  }
}

task<void> tcp_stream::write_all(std::string_view text) { co_await write_all(as_bytes(text)); }

// With a deadline, and vectored: the shared stream calls (stream_calls.hpp). These forward
// rather than await, so no extra coroutine frame is made.
task<std::size_t> tcp_stream::read(std::span<std::byte> buffer, deadline limit) {
  return detail::stream_read(fd_, buffer, limit);
}
task<void> tcp_stream::read_exact(std::span<std::byte> buffer, deadline limit) {
  return detail::stream_read_exact(fd_, buffer, limit);
}
task<std::size_t> tcp_stream::write(std::span<const std::byte> buffer, deadline limit) {
  return detail::stream_write(fd_, buffer, limit);
}
task<void> tcp_stream::write_all(std::span<const std::byte> buffer, deadline limit) {
  return detail::stream_write_all(fd_, buffer, limit);
}
task<void> tcp_stream::write_all(std::string_view text, deadline limit) {
  return detail::stream_write_all(fd_, as_bytes(text), limit);
}
task<std::size_t> tcp_stream::write_vectored(buffer_list buffers, deadline limit) {
  return detail::stream_write_vectored(fd_, buffers, limit);
}
task<void> tcp_stream::write_all(buffer_list buffers, deadline limit) {
  return detail::stream_write_all_vectored(fd_, buffers, limit);
}

void tcp_stream::shutdown(int how) {
  if (::shutdown(fd_, how) != 0) detail::throw_errno("shutdown");
}

task<void> tcp_stream::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

endpoint tcp_stream::local_endpoint() const { return detail::socket_name(fd_, false); }
endpoint tcp_stream::remote_endpoint() const { return detail::socket_name(fd_, true); }

void tcp_stream::set_no_delay(bool enabled) {
  const int value = enabled ? 1 : 0;
  if (::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &value, sizeof value) != 0) {
    detail::throw_errno("setsockopt");
  }
}

// --- tcp_listener ---------------------------------------------------------------------------

tcp_listener::tcp_listener(tcp_listener&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

tcp_listener& tcp_listener::operator=(tcp_listener&& other) noexcept {
  if (this != &other) {
    detail::close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

tcp_listener::~tcp_listener() { detail::close_quietly(fd_); }

tcp_listener tcp_listener::bind(endpoint local, int backlog) {
  if (local.native_length() == 0) {
    throw usage_error("spindle: tcp_listener::bind to an unspecified endpoint");
  }
  tcp_listener listener;
  listener.fd_ = detail::open_socket(local.family(), SOCK_STREAM);
  const int one = 1;
  if (::setsockopt(listener.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    detail::throw_errno("setsockopt");
  }
  if (::bind(listener.fd_, local.native(), local.native_length()) != 0) detail::throw_errno("bind");
  if (::listen(listener.fd_, backlog) != 0) detail::throw_errno("listen");
  return listener;
}

task<tcp_stream> tcp_listener::accept() {
  if (fd_ < 0) detail::throw_error(EBADF, "accept");
  for (;;) {
    // No address requested: remote_endpoint() asks the kernel when someone wants it.
    io_operation op = detail::make_operation(io_opcode::accept, fd_);
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result >= 0) co_return tcp_stream(result);
    const int error = -result;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) {
      continue;  // ECONNABORTED: the client gave up before we took it; take the next one
    }
    if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
      // Out of descriptors (or socket memory): the connection waits in the backlog; try again
      // shortly, so the server resumes once descriptors are freed.
      co_await sleep_for(fd_exhaustion_pause);
      continue;
    }
    if (!detail::would_block(result)) detail::throw_error(error, "accept");
    io_operation ready = detail::make_poll(fd_, POLLIN);
    detail::check_poll(co_await io::submit_and_wait(ready));
  }
}

task<void> tcp_listener::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

endpoint tcp_listener::local_endpoint() const { return detail::socket_name(fd_, false); }

}  // namespace spindle::net
