// Shared by the io tests: pipe and socket pairs that close themselves, a non-blocking look at
// what a descriptor holds, and operations whose completions are recorded.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "spindle/core/reactor.hpp"

namespace spindle::testing {

struct fd_pair {
  struct pipe_tag {};
  int read_end = -1;
  int write_end = -1;
  fd_pair() = default;
  // A non-blocking pipe at once (read_end stays -1 if pipe2 fails: callers assert on it).
  explicit fd_pair(pipe_tag) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
      read_end = fds[0];
      write_end = fds[1];
    }
  }
  fd_pair(const fd_pair&) = delete;
  fd_pair& operator=(const fd_pair&) = delete;
  ~fd_pair() { close_both(); }
  void close_both() {
    if (read_end >= 0) ::close(read_end);
    if (write_end >= 0) ::close(write_end);
    read_end = write_end = -1;
  }
};
inline constexpr fd_pair::pipe_tag nonblocking_pipe{};

inline void make_pipe(fd_pair& p, bool nonblocking = true) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC | (nonblocking ? O_NONBLOCK : 0)), 0) << std::strerror(errno);
  p.read_end = fds[0];
  p.write_end = fds[1];
}

inline void make_socketpair(fd_pair& p, int type = SOCK_STREAM) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0)
      << std::strerror(errno);
  p.read_end = fds[0];
  p.write_end = fds[1];
}

// What `fd` holds now, read without blocking (plain system calls, outside any runtime).
inline std::string read_available(int fd) {
  std::string out;
  char chunk[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0 || (p.revents & POLLIN) == 0) break;
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    out.append(chunk, std::size_t(n));
  }
  return out;
}

// An operation driven by a reactor directly (no task): its completion is counted and recorded.
struct recorded {
  int calls = 0;
  std::int32_t result = 0;
};

inline void record(core::io_operation* op) noexcept {
  auto* r = static_cast<recorded*>(op->context);
  ++r->calls;
  r->result = op->result;
}

inline core::io_operation recorded_op(core::io_opcode opcode, int fd, recorded& r,
                                      void* buffer = nullptr, std::uint32_t length = 0) {
  core::io_operation op;
  op.opcode = opcode;
  op.fd = fd;
  op.buffer = buffer;
  op.length = length;
  op.on_complete = &record;
  op.context = &r;
  return op;
}

}  // namespace spindle::testing
