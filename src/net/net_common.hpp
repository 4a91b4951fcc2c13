// Pieces shared by the net sources (private to src/net): errors, socket creation, building
// reactor operations, the retry classification every call uses, and deadlines.
//
// Retry policy (the same for both reactor backends and for results rewritten by a fault hook):
//   -EINTR                 -> submit the same operation again;
//   -EAGAIN / -EWOULDBLOCK -> await an io_opcode::poll for readiness (POLLIN for reads and
//                             accept, POLLOUT for writes and connect), then submit again.
// Every buffer, address and msghdr handed to the kernel lives in the calling coroutine's frame
// or in caller memory that outlives the await.
// Deadlines (io/deadline.hpp): a call resolves its `deadline` once, at its start
// (resolve_limit), hands the same absolute time to every await of the call, and turns an await
// the deadline cancelled into timeout_error (checked).
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "spindle/core/reactor.hpp"
#include "spindle/io/io_wait.hpp"
#include "spindle/net/net.hpp"
#include "spindle/time/timeout.hpp"

namespace spindle::net::detail {

// Throws std::system_error(error, std::system_category(), "spindle: <call>").
[[noreturn]] void throw_error(int error, const char* call);
// The same with errno.
[[noreturn]] void throw_errno(const char* call);

// socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); throws on failure.
int open_socket(int family, int type);

// getsockname (peer = false) or getpeername (peer = true) as an endpoint; throws on failure.
endpoint socket_name(int fd, bool peer);

// Closes `fd` if it is open (synchronously; errors are ignored: the descriptor is gone anyway).
void close_quietly(int fd) noexcept;

// Closes `fd` through the reactor (io_opcode::close). If the close never reached the kernel
// (the task was cancelled before it was submitted, or the request was cancelled before it ran),
// the descriptor is still open: it is closed synchronously before task_cancelled propagates, so
// it never leaks. Errors other than EINTR (after which Linux has released it anyway) throw.
task<void> close_through_reactor(int fd);

inline bool would_block(std::int32_t result) noexcept {
  return result == -EAGAIN || result == -EWOULDBLOCK;
}

// Lengths handed to the reactor: the result is an int32, so at most INT32_MAX per operation.
inline std::uint32_t clamp_length(std::size_t size) noexcept {
  constexpr std::size_t most = std::size_t(std::numeric_limits<std::int32_t>::max());
  return static_cast<std::uint32_t>(size < most ? size : most);
}

inline core::io_operation make_operation(core::io_opcode opcode, int fd) noexcept {
  core::io_operation op{};
  op.opcode = opcode;
  op.fd = fd;
  return op;
}

inline core::io_operation make_transfer(core::io_opcode opcode, int fd, const void* buffer,
                                        std::size_t size) noexcept {
  core::io_operation op = make_operation(opcode, fd);
  op.buffer = const_cast<void*>(buffer);
  op.length = clamp_length(size);
  return op;
}

inline core::io_operation make_poll(int fd, short events) noexcept {
  core::io_operation op = make_operation(core::io_opcode::poll, fd);
  op.flags = events;
  return op;
}

// The result of a readiness poll: revents (> 0), or a retryable error (EINTR, EAGAIN: the
// caller retries its operation, which polls again if needed); anything else throws.
inline void check_poll(std::int32_t result) {
  if (result >= 0 || result == -EINTR || would_block(result)) return;
  throw_error(-result, "poll");
}

// The absolute deadline of a call (the clock read on the worker, at the call's start), or none.
inline std::optional<clock_time> resolve_limit(io::deadline limit) {
  if (!limit.is_set()) return std::nullopt;
  return limit.resolve(io::current_time());
}

// Throws timeout_error for an await its deadline cancelled; other results pass through.
inline std::int32_t checked(std::int32_t result) {
  if (result == io::deadline_expired) throw timeout_error();
  return result;
}

}  // namespace spindle::net::detail
