// Stream socket calls shared by tcp_stream and unix_stream (src/net/stream_calls.hpp).
#include "net/stream_calls.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "spindle/io/io_wait.hpp"
#include "io/buffer_vectors.hpp"
#include "spindle/net/unix.hpp"
#include "spindle/time/sleep.hpp"
#include "spindle/time/timeout.hpp"
#include "net/net_common.hpp"

namespace spindle::net::detail {

using core::io_opcode;
using core::io_operation;
using io::detail::advance;
using io::detail::fill_vectors;
using io::detail::vector_position;

namespace {

// How long accept waits before trying again when the process or system is out of file
// descriptors (or socket memory): the pending connection stays queued in the meantime.
constexpr auto fd_exhaustion_pause = std::chrono::milliseconds(10);

}  // namespace

task<std::size_t> stream_read(int fd, std::span<std::byte> buffer, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "recv");
  if (buffer.empty()) co_return 0;
  const std::optional<clock_time> when = resolve_limit(limit);
  for (;;) {
    io_operation op = make_transfer(io_opcode::recv, fd, buffer.data(), buffer.size());
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result >= 0) co_return static_cast<std::size_t>(result);
    if (result == -EINTR) continue;
    if (!would_block(result)) throw_error(-result, "recv");
    io_operation ready = make_poll(fd, POLLIN);
    check_poll(checked(co_await io::submit_and_wait(ready, when)));
  }
}

task<void> stream_read_exact(int fd, std::span<std::byte> buffer, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "recv");
  const std::optional<clock_time> when = resolve_limit(limit);
  std::size_t done = 0;
  while (done < buffer.size()) {
    const std::span<std::byte> rest = buffer.subspan(done);
    io_operation op = make_transfer(io_opcode::recv, fd, rest.data(), rest.size());
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result > 0) {
      done += static_cast<std::size_t>(result);
    } else if (result == 0) {
      const std::string call = "read_exact: stream ended after " + std::to_string(done) + " of " +
                               std::to_string(buffer.size()) + " bytes";
      throw_error(ECONNRESET, call.c_str());
    } else if (would_block(result)) {
      io_operation ready = make_poll(fd, POLLIN);
      check_poll(checked(co_await io::submit_and_wait(ready, when)));
    } else if (result != -EINTR) {
      throw_error(-result, "recv");
    }
  }
}

task<std::size_t> stream_write(int fd, std::span<const std::byte> buffer, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "send");
  if (buffer.empty()) co_return 0;
  const std::optional<clock_time> when = resolve_limit(limit);
  for (;;) {
    io_operation op = make_transfer(io_opcode::send, fd, buffer.data(), buffer.size());
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result > 0) co_return static_cast<std::size_t>(result);
    if (result < 0 && result != -EINTR && !would_block(result)) throw_error(-result, "send");
    if (result != -EINTR) {
      io_operation ready = make_poll(fd, POLLOUT);
      check_poll(checked(co_await io::submit_and_wait(ready, when)));
    }
  }
}

task<void> stream_write_all(int fd, std::span<const std::byte> buffer, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "send");
  const std::optional<clock_time> when = resolve_limit(limit);
  std::size_t done = 0;
  // The speculative send on epoll: see the top of stream_calls.hpp.
  if (!buffer.empty() && io::current_reactor().backend() == core::io_backend::epoll) {
    for (;;) {
      const ssize_t sent =
          ::send(fd, buffer.data() + done, buffer.size() - done, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent > 0) {
        done += static_cast<std::size_t>(sent);
        if (done == buffer.size()) co_return;
        continue;
      }
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw_errno("send");
      break;
    }
  }
  while (done < buffer.size()) {
    // send: the reactor adds MSG_NOSIGNAL (a gone peer is EPIPE, not SIGPIPE).
    const std::span<const std::byte> rest = buffer.subspan(done);
    io_operation op = make_transfer(io_opcode::send, fd, rest.data(), rest.size());
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result > 0) {
      done += static_cast<std::size_t>(result);
      continue;
    }
    if (result < 0 && result != -EINTR && !would_block(result)) throw_error(-result, "send");
    if (result != -EINTR) {  // would block (or sent nothing): wait for room
      io_operation ready = make_poll(fd, POLLOUT);
      check_poll(checked(co_await io::submit_and_wait(ready, when)));
    }
  }
}

task<std::size_t> stream_write_vectored(int fd, buffer_list buffers, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "sendmsg");
  // The iovecs and the msghdr live in this frame until the kernel is done with them (the await
  // returns only after the final completion, io_wait.hpp); the bytes are the caller's.
  std::vector<iovec> vectors;
  fill_vectors(buffers, {}, vectors);
  if (vectors.empty()) co_return 0;
  const std::optional<clock_time> when = resolve_limit(limit);
  for (;;) {
    msghdr message{};
    message.msg_iov = vectors.data();
    message.msg_iovlen = vectors.size();
    io_operation op = make_operation(io_opcode::sendmsg, fd);
    op.message = &message;
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result > 0) co_return static_cast<std::size_t>(result);
    if (result < 0 && result != -EINTR && !would_block(result)) throw_error(-result, "sendmsg");
    if (result != -EINTR) {
      io_operation ready = make_poll(fd, POLLOUT);
      check_poll(checked(co_await io::submit_and_wait(ready, when)));
    }
  }
}

task<void> stream_write_all_vectored(int fd, buffer_list buffers, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "sendmsg");
  std::vector<iovec> vectors;
  vector_position at;
  fill_vectors(buffers, at, vectors);
  if (vectors.empty()) co_return;
  const std::optional<clock_time> when = resolve_limit(limit);
  // epoll: a speculative sendmsg first, as stream_write_all's send (stream_calls.hpp says why);
  // io_uring: every sendmsg through the ring, batched with the slice's other submissions.
  bool speculative = io::current_reactor().backend() == core::io_backend::epoll;
  while (!vectors.empty()) {
    msghdr message{};
    message.msg_iov = vectors.data();
    message.msg_iovlen = vectors.size();
    std::int32_t result;
    if (speculative) {
      const ssize_t sent = ::sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
      result = sent >= 0 ? std::int32_t(sent) : -errno;
      if (would_block(result)) {
        speculative = false;  // full: from now on through the reactor, which waits for room
        continue;
      }
    } else {
      io_operation op = make_operation(io_opcode::sendmsg, fd);
      op.message = &message;
      result = checked(co_await io::submit_and_wait(op, when));
    }
    if (result > 0) {
      advance(buffers, at, static_cast<std::size_t>(result));
      fill_vectors(buffers, at, vectors);
      continue;
    }
    if (result < 0 && result != -EINTR && !would_block(result)) throw_error(-result, "sendmsg");
    if (result != -EINTR) {
      io_operation ready = make_poll(fd, POLLOUT);
      check_poll(checked(co_await io::submit_and_wait(ready, when)));
    }
  }
}

template <class Stream>
task<Stream> accept_stream(int fd, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "accept");
  const std::optional<clock_time> when = resolve_limit(limit);
  for (;;) {
    // No address requested: remote_endpoint() asks the kernel when someone wants it.
    io_operation op = make_operation(io_opcode::accept, fd);
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result >= 0) co_return Stream(result);
    const int error = -result;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
    if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
      // Out of descriptors: pause, never past the deadline (once it has passed, the connection
      // stays in the backlog and the call times out).
      clock_time resume = io::current_time() + fd_exhaustion_pause;
      if (when && *when < resume) resume = *when;
      co_await sleep_until(resume);
      if (when && io::current_time() >= *when) throw timeout_error();
      continue;
    }
    if (!would_block(result)) throw_error(error, "accept");
    io_operation ready = make_poll(fd, POLLIN);
    check_poll(checked(co_await io::submit_and_wait(ready, when)));
  }
}

template task<tcp_stream> accept_stream<tcp_stream>(int fd, io::deadline limit);
template task<unix_stream> accept_stream<unix_stream>(int fd, io::deadline limit);

}  // namespace spindle::net::detail
