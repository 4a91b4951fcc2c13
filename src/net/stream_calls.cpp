// Stream socket calls shared by tcp_stream and unix_stream (src/net/stream_calls.hpp).
#include "net/stream_calls.hpp"

#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "spindle/io/io_wait.hpp"
#include "spindle/time/timeout.hpp"
#include "net/net_common.hpp"

namespace spindle::net::detail {

using core::io_opcode;
using core::io_operation;

namespace {

// The absolute deadline of a call (read on the worker, at its start), or none.
std::optional<clock_time> resolve_limit(io::deadline limit) {
  if (!limit.is_set()) return std::nullopt;
  return limit.resolve(io::current_time());
}

// Throws timeout_error for an await its deadline cancelled; other results pass through.
std::int32_t checked(std::int32_t result) {
  if (result == io::deadline_expired) throw timeout_error();
  return result;
}

// Bytes one sendmsg may carry: the result is an int32 (and Linux stops at 0x7ffff000 anyway).
constexpr std::size_t max_message = 0x7ffff000;

// Where a vectored write stands: buffers[index] from byte `offset` on is still to be sent.
struct vector_position {
  std::size_t index = 0;
  std::size_t offset = 0;
};

// Fills `vectors` (cleared first) with what is left from `at`, at most IOV_MAX entries and
// max_message bytes, skipping empty buffers.
void fill_vectors(buffer_list buffers, vector_position at, std::vector<iovec>& vectors) {
  vectors.clear();
  std::size_t total = 0;
  for (std::size_t i = at.index; i < buffers.size() && vectors.size() < std::size_t(IOV_MAX); ++i) {
    const std::size_t skip = i == at.index ? at.offset : 0;
    std::size_t length = buffers[i].size() - skip;
    if (length == 0) continue;
    length = std::min(length, max_message - total);
    vectors.push_back(iovec{const_cast<std::byte*>(buffers[i].data() + skip), length});
    total += length;
    if (total == max_message) break;
  }
}

// Moves `at` past `sent` bytes (and past empty buffers).
void advance(buffer_list buffers, vector_position& at, std::size_t sent) {
  while (at.index < buffers.size()) {
    const std::size_t left = buffers[at.index].size() - at.offset;
    if (sent < left) {
      at.offset += sent;
      return;
    }
    sent -= left;
    ++at.index;
    at.offset = 0;
  }
}

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
  // One buffer is a list of one: the same loop (and the same speculative send on epoll).
  const std::span<const std::byte> one[1] = {buffer};
  co_await stream_write_all_vectored(fd, buffer_list(one), limit);
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
  // epoll: a speculative sendmsg first, as tcp_stream::write_all's send (tcp.cpp says why);
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

}  // namespace spindle::net::detail
