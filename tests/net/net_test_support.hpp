// Helpers for the net tests: the backend parameter, counts scaled for sanitizers, byte patterns,
// descriptor accounting and RLIMIT_NOFILE handling.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "support/test_support.hpp"

#include <algorithm>
#include <array>
#include <exception>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <condition_variable>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "spindle/core/reactor.hpp"
#include "spindle/net/net.hpp"
#include "spindle/net/resolve.hpp"
#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace net_test {

using spindle::core::io_backend;

// Every net test runs on both reactor backends.
class on_backend : public ::testing::TestWithParam<io_backend> {
 protected:
  spindle::runtime_options options() const {
    return spindle::runtime_options{.workers = 2, .io_backend = GetParam()};
  }
};

using ::spindle::testing::backend_name;

#define SPINDLE_NET_ON_BOTH_BACKENDS(suite)                                                  \
  INSTANTIATE_TEST_SUITE_P(Backends, suite,                                                  \
                           ::testing::Values(::spindle::core::io_backend::uring,             \
                                             ::spindle::core::io_backend::epoll),            \
                           ::net_test::backend_name)

// Sanitizer builds run fewer iterations (the flags live in the shared test support).
using ::spindle::testing::under_asan;
using ::spindle::testing::under_tsan;

// The count for this build: `release`, or the smaller ASan / TSan figure.
inline int scaled(int release, int asan, int tsan) {
  if (under_tsan) return tsan;
  if (under_asan) return asan;
  return release;
}

// The byte at `offset` of connection `id`'s stream: differs between connections and shows a
// shifted, dropped or repeated byte (period 251, a prime, offset by the id).
inline std::byte pattern_byte(std::uint32_t id, std::size_t offset) {
  return static_cast<std::byte>((offset + id * 17u) % 251u);
}

inline std::vector<std::byte> pattern(std::uint32_t id, std::size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = pattern_byte(id, i);
  return bytes;
}

// Index of the first byte of `got` that differs from the pattern (got.size() if none).
inline std::size_t first_mismatch(std::span<const std::byte> got, std::uint32_t id,
                                  std::size_t start = 0) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != pattern_byte(id, start + i)) return i;
  }
  return got.size();
}

// The highest descriptor number open in this process.
inline int highest_open_fd() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int highest = -1;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') highest = std::max(highest, std::atoi(entry->d_name));
  }
  ::closedir(dir);
  return highest;
}

// Restores RLIMIT_NOFILE when it goes out of scope.
class fd_limit_guard {
 public:
  fd_limit_guard() { ::getrlimit(RLIMIT_NOFILE, &saved_); }
  ~fd_limit_guard() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  fd_limit_guard(const fd_limit_guard&) = delete;
  fd_limit_guard& operator=(const fd_limit_guard&) = delete;
  const rlimit& saved() const noexcept { return saved_; }
  // Raises the soft limit to min(wanted, hard); returns the soft limit now in force.
  rlim_t raise_soft_to(rlim_t wanted) {
    rlimit now = saved_;
    now.rlim_cur = std::min(wanted, saved_.rlim_max);
    if (now.rlim_cur > saved_.rlim_cur) ::setrlimit(RLIMIT_NOFILE, &now);
    ::getrlimit(RLIMIT_NOFILE, &now);
    return now.rlim_cur;
  }

 private:
  rlimit saved_{};
};

// Fills the descriptor table: lowers the soft RLIMIT_NOFILE to just above the highest open
// descriptor and dup()s until EMFILE. release() (or the destructor) frees the descriptors and
// restores the limit.
class fd_exhaustion {
 public:
  fd_exhaustion() {
    spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    rlimit lowered = limit_.saved();
    lowered.rlim_cur = rlim_t(highest_open_fd()) + 1 + 16;
    ::setrlimit(RLIMIT_NOFILE, &lowered);
    for (;;) {
      const int fd = ::fcntl(spare_, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) {
        exhausted_ = errno == EMFILE;
        break;
      }
      fillers_.push_back(fd);
    }
  }
  ~fd_exhaustion() { release(); }
  fd_exhaustion(const fd_exhaustion&) = delete;
  fd_exhaustion& operator=(const fd_exhaustion&) = delete;

  bool exhausted() const noexcept { return exhausted_; }
  void release() {
    for (int fd : fillers_) ::close(fd);
    fillers_.clear();
    if (spare_ >= 0) ::close(spare_);
    spare_ = -1;
    ::setrlimit(RLIMIT_NOFILE, &limit_.saved());
  }

 private:
  fd_limit_guard limit_;
  int spare_ = -1;
  std::vector<int> fillers_;
  bool exhausted_ = false;
};

// A plain blocking TCP client (for tests that drive a server from a thread or another process).
inline int blocking_connect(const spindle::net::endpoint& server) {
  const int fd = ::socket(server.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, server.native(), server.native_length()) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Waits up to `timeout` for `fd` to become readable; true if it did.
inline bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, int(timeout.count())) == 1;
}

// A connected pair through `listener`: {client, server side}.
inline spindle::task<std::pair<spindle::net::tcp_stream, spindle::net::tcp_stream>> connected_pair(
    spindle::net::tcp_listener& listener) {
  auto accepting = spindle::spawn(listener.accept());
  spindle::net::tcp_stream client =
      co_await spindle::net::tcp_stream::connect(listener.local_endpoint());
  spindle::net::tcp_stream server = co_await std::move(accepting);
  co_return std::pair{std::move(client), std::move(server)};
}

// Sets SO_SNDBUF / SO_RCVBUF (the kernel doubles and clamps them).
inline void set_buffer_sizes(int fd, int send, int receive) {
  if (send > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send, sizeof send);
  if (receive > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive, sizeof receive);
}

// --- an echo service and its clients ---------------------------------------------------------

// Echoes until the peer shuts its side down; returns the bytes echoed.
inline spindle::task<std::size_t> echo_session(spindle::net::tcp_stream stream) {
  std::array<std::byte, 1024> buffer;
  std::size_t total = 0;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    co_await stream.write_all(std::span<const std::byte>(buffer.data(), n));
    total += n;
  }
  co_await stream.close();
  co_return total;
}

// Accepts `count` connections, one echo task each; returns the bytes echoed in all.
inline spindle::task<std::size_t> echo_server(spindle::net::tcp_listener& listener, int count) {
  std::vector<spindle::join_handle<std::size_t>> sessions;
  sessions.reserve(std::size_t(count));
  for (int i = 0; i < count; ++i) {
    sessions.push_back(spindle::spawn(echo_session(co_await listener.accept())));
  }
  std::size_t total = 0;
  for (auto& session : sessions) total += co_await std::move(session);
  co_return total;
}

inline spindle::task<void> send_pattern(spindle::net::tcp_stream& stream, std::uint32_t id, std::size_t size) {
  const std::vector<std::byte> data = pattern(id, size);
  co_await stream.write_all(data);
  stream.shutdown(SHUT_WR);
}

// Connects, writes connection `id`'s pattern from a second task (full duplex) while reading the
// echo; true if exactly the pattern came back.
inline spindle::task<bool> echo_client(spindle::net::endpoint server, std::uint32_t id, std::size_t size) {
  spindle::net::tcp_stream stream = co_await spindle::net::tcp_stream::connect(server);
  auto writer = spindle::spawn(send_pattern(stream, id, size));
  std::vector<std::byte> received;
  std::exception_ptr failure;
  try {
    std::array<std::byte, 700> buffer;
    for (;;) {
      const std::size_t n = co_await stream.read(buffer);
      if (n == 0) break;
      received.insert(received.end(), buffer.begin(), buffer.begin() + std::ptrdiff_t(n));
    }
  } catch (...) {
    failure = std::current_exception();
  }
  if (failure) {
    // The writer uses `stream`: it must be finished before this frame goes.
    writer.cancel();
    try {
      co_await std::move(writer);
    } catch (...) {
    }
    std::rethrow_exception(failure);
  }
  co_await std::move(writer);
  co_return received.size() == size && first_mismatch(received, id) == size;
}

inline std::size_t echo_size(std::uint32_t id) { return 2048 + (id * 389u) % 4096u; }

inline spindle::task<int> run_echo_clients(spindle::net::endpoint server, int count) {
  std::vector<spindle::join_handle<bool>> clients;
  clients.reserve(std::size_t(count));
  for (int i = 0; i < count; ++i) {
    clients.push_back(spindle::spawn(echo_client(server, std::uint32_t(i), echo_size(std::uint32_t(i)))));
  }
  int verified = 0;
  for (auto& client : clients) verified += (co_await std::move(client)) ? 1 : 0;
  co_return verified;
}

// The errno of a std::system_error (its category is the system category).
inline int error_of(const std::system_error& e) { return e.code().value(); }

// --- the test hook: a gate that holds every lookup on its helper until opened ----------------

struct resolve_gate_state {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = true;
  int entered = 0;  // lookups that reached the hook since the gate was set
};
// Never destroyed: the resolver's helper threads are detached and outlive runtimes and tests;
// one may still be leaving the hook (after its notify) when the process exits, and a gate
// destroyed at exit raced it (TSan: pthread_cond_destroy against pthread_cond_broadcast).
inline resolve_gate_state& resolve_gate = *new resolve_gate_state;

inline void resolve_gate_hook(const char*) noexcept {
  std::unique_lock lock(resolve_gate.mutex);
  ++resolve_gate.entered;
  resolve_gate.changed.notify_all();
  resolve_gate.changed.wait(lock, [] { return resolve_gate.open; });
}

inline int resolve_gate_entered() {
  std::lock_guard lock(resolve_gate.mutex);
  return resolve_gate.entered;
}

// Installs the hook (every lookup counts; closed: every lookup waits) and, on destruction,
// opens the gate and removes the hook, so helpers never stay blocked past a test.
class resolve_gate_scope {
 public:
  explicit resolve_gate_scope(bool closed) {
    {
      std::lock_guard lock(resolve_gate.mutex);
      resolve_gate.open = !closed;
      resolve_gate.entered = 0;
    }
    spindle::net::detail::set_resolve_hook(&resolve_gate_hook);
  }
  ~resolve_gate_scope() {
    open();
    spindle::net::detail::set_resolve_hook(nullptr);
  }
  resolve_gate_scope(const resolve_gate_scope&) = delete;
  resolve_gate_scope& operator=(const resolve_gate_scope&) = delete;
  void open() {
    std::lock_guard lock(resolve_gate.mutex);
    resolve_gate.open = true;
    resolve_gate.changed.notify_all();
  }
};

}  // namespace net_test
