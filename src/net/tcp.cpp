// tcp_stream and tcp_listener (include/spindle/net/net.hpp), on io::submit_and_wait.
// Retry policy and buffer lifetimes: net_common.hpp.
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/io/io_wait.hpp"
#include "spindle/net/net.hpp"
#include "spindle/task/cancellation.hpp"
#include "net/net_common.hpp"
#include "net/stream_calls.hpp"

namespace spindle::net {

using core::io_opcode;
using core::io_operation;

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

task<tcp_stream> tcp_stream::connect(endpoint remote, deadline limit) {
  // `remote` is a parameter: it lives in this frame, which the address points into.
  if (remote.native_length() == 0) {
    throw usage_error("spindle: tcp_stream::connect to an unspecified endpoint");
  }
  const std::optional<clock_time> when = detail::resolve_limit(limit);
  // On a timeout (or any failure) `stream` closes the socket as the exception leaves.
  tcp_stream stream(detail::open_socket(remote.family(), SOCK_STREAM));
  for (;;) {
    io_operation op = detail::make_operation(io_opcode::connect, stream.fd_);
    op.address = remote.native();
    op.connect_length = remote.native_length();
    const std::int32_t result = detail::checked(co_await io::submit_and_wait(op, when));
    if (result == 0 || result == -EISCONN) co_return stream;
    if (detail::would_block(result)) {
      io_operation ready = detail::make_poll(stream.fd_, POLLOUT);
      detail::check_poll(detail::checked(co_await io::submit_and_wait(ready, when)));
      continue;
    }
    if (result != -EINPROGRESS && result != -EALREADY && result != -EINTR) {
      detail::throw_error(-result, "connect");
    }
    // The handshake goes on in the kernel: writable means it ended; SO_ERROR says how.
    for (;;) {
      io_operation ready = detail::make_poll(stream.fd_, POLLOUT);
      const std::int32_t revents = detail::checked(co_await io::submit_and_wait(ready, when));
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

// The stream calls are shared with unix_stream (stream_calls.hpp). These forward rather than
// await, so no extra coroutine frame is made.
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

task<tcp_stream> tcp_listener::accept(deadline limit) {
  return detail::accept_stream<tcp_stream>(fd_, limit);
}

task<void> tcp_listener::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

endpoint tcp_listener::local_endpoint() const { return detail::socket_name(fd_, false); }

}  // namespace spindle::net
