// examples/http_hello.cpp under bad input, driven as a process (issue 5): the test forks and execs
// the built server (SPINDLE_EXAMPLE_PROGRAM) on a free port ("0": the server names the port it got
// on stderr), talks to it with plain blocking sockets and stops it with SIGTERM, expecting exit
// status 0. Every case runs on both I/O backends (SPINDLE_IO_BACKEND=uring|epoll in the child's
// environment); short request/idle limits come in through SPINDLE_HTTP_REQUEST_TIMEOUT_MS and
// SPINDLE_HTTP_IDLE_TIMEOUT_MS.
//
// Nothing here sleeps to synchronise: a wait is a poll()/recv() for something the server does
// (an answer, a close), bounded by a generous limit that only turns a hang into a failure. The
// server's descriptor table (/proc/<pid>/fd) shows what it has accepted and closed.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "support/descriptors.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <openssl/ssl.h>

#include "support/tls_support.hpp"

#ifndef SPINDLE_EXAMPLE_PROGRAM
#error "SPINDLE_EXAMPLE_PROGRAM (the path of spindle-example-http_hello) must be defined"
#endif

extern char** environ;

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr std::string_view hello_response =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
constexpr std::string_view bad_request_response =
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
constexpr std::string_view get_request = "GET / HTTP/1.1\r\nHost: test\r\n\r\n";

// How long a wait for something that must happen may take before the test calls it a hang.
constexpr auto patience = 20s;

std::string repeat(std::string_view text, std::size_t times) {
  std::string out;
  out.reserve(text.size() * times);
  for (std::size_t i = 0; i < times; ++i) out.append(text);
  return out;
}

int remaining_ms(clock_type::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  return int(std::max<std::chrono::milliseconds::rep>(left.count(), 0));
}

// --- the server process -------------------------------------------------------------------------

struct server_options {
  std::vector<std::pair<std::string, std::string>> environment;  // added to the child's
  std::optional<rlim_t> fd_limit;  // soft RLIMIT_NOFILE of the child
  int threads = 2;
  std::vector<std::string> arguments;  // after "0 <threads>" (--tls cert key)
};

class server_process {
 public:
  server_process() = default;
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;
  ~server_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (log_fd_ >= 0) ::close(log_fd_);
  }

  // Starts the server and waits until it accepts connections. Failures are gtest assertions.
  void start(const std::string& backend, const server_options& options) {
    ASSERT_NO_FATAL_FAILURE(launch(backend, options));
    ASSERT_NO_FATAL_FAILURE(await_listening());
  }

  // Starts the server with a configuration it must refuse: it must exit without ever listening.
  // Returns its wait status (-1 if it started listening or did not exit in time; the log says).
  int start_expecting_refusal(const std::string& backend, const server_options& options) {
    launch(backend, options);
    if (pid_ <= 0) return -1;
    // Its stderr until the end of the stream (the exit) or the "listening" line.
    const auto deadline = clock_type::now() + patience;
    while (log_.find("listening on") == std::string::npos) {
      pollfd p{log_fd_, POLLIN, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) != 1) return -1;
      char chunk[512];
      const ssize_t n = ::read(log_fd_, chunk, sizeof chunk);
      if (n <= 0) {
        int status = -1;
        if (!wait_for_exit(status)) return -1;
        pid_ = -1;
        return status;
      }
      log_.append(chunk, std::size_t(n));
    }
    return -1;
  }

 private:
  void launch(const std::string& backend, const server_options& options) {
    // Everything the child needs is built before fork: after it only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      if (entry.starts_with("SPINDLE_IO_BACKEND=") || entry.starts_with("SPINDLE_HTTP_")) continue;
      env_strings.emplace_back(entry);
    }
    env_strings.push_back("SPINDLE_IO_BACKEND=" + backend);
    for (const auto& [name, value] : options.environment) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string program = SPINDLE_EXAMPLE_PROGRAM, port_arg = "0",
                threads_arg = std::to_string(options.threads);
    std::vector<std::string> arguments = options.arguments;
    std::vector<char*> argv = {program.data(), port_arg.data(), threads_arg.data()};
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    rlimit limit{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
    if (options.fd_limit) limit.rlim_cur = *options.fd_limit;

    int log[2];
    ASSERT_EQ(::pipe2(log, O_CLOEXEC), 0);
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      // stderr goes to the pipe; nothing else is inherited beyond stdin and stdout (the test's
      // own descriptors are close-on-exec, but whatever ran the test may have left some open:
      // they would blur the server's descriptor accounting).
      if (::dup2(log[1], STDERR_FILENO) < 0) ::_exit(126);
#ifdef SYS_close_range
      ::syscall(SYS_close_range, 3u, ~0u, 0u);
#endif
      if (options.fd_limit && ::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(125);
      ::execve(program.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(log[1]);
    log_fd_ = log[0];
  }

  void await_listening() {
    // The server names its port: "http_hello listening on 127.0.0.1:PORT".
    const auto deadline = clock_type::now() + patience;
    constexpr std::string_view marker = "listening on 127.0.0.1:";
    std::size_t at = std::string::npos;
    while ((at = log_.find(marker)) == std::string::npos ||
           log_.find('\n', at) == std::string::npos) {
      pollfd p{log_fd_, POLLIN, 0};
      ASSERT_EQ(::poll(&p, 1, remaining_ms(deadline)), 1) << "no port named; log: " << log_;
      char chunk[512];
      const ssize_t n = ::read(log_fd_, chunk, sizeof chunk);
      ASSERT_GT(n, 0) << "server ended before listening; log: " << log_;
      log_.append(chunk, std::size_t(n));
    }
    port_ = std::uint16_t(std::atoi(log_.c_str() + at + marker.size()));
    ASSERT_NE(port_, 0) << log_;
    // Descriptors of the idle server (executors' reactors, signalfd, listener): the baseline for
    // the accounting below. Taken before the first connection.
    baseline_fds_ = open_fds();
    ASSERT_GT(baseline_fds_, 0);
    // Accepting: connect until it works (it does at once, the listener exists before the line).
    for (;;) {
      const int fd = try_connect();
      if (fd >= 0) {
        ::close(fd);
        break;
      }
      ASSERT_LT(clock_type::now(), deadline) << "server never accepted; log: " << log_;
      std::this_thread::yield();
    }
    // ... and has let that connection go again: tests count the server's descriptors.
    ASSERT_TRUE(fds_become(baseline_fds_))
        << open_fds() << " descriptors open, " << baseline_fds_ << " before the first connection";
  }


 public:
  std::uint16_t port() const noexcept { return port_; }
  pid_t pid() const noexcept { return pid_; }
  int baseline_fds() const noexcept { return baseline_fds_; }

  // A blocking client socket connected to the server, or -1. Send and receive are bounded by
  // `patience` (SO_SNDTIMEO / SO_RCVTIMEO), so a server that hangs fails the test instead.
  int try_connect() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    const timeval tv{std::chrono::duration_cast<std::chrono::seconds>(patience).count(), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  bool started() const noexcept { return pid_ > 0; }

  // True while the process has not exited (a zombie has).
  bool running() const {
    if (pid_ <= 0) return false;
    siginfo_t info{};
    if (::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
    return info.si_pid == 0;
  }

  // Descriptors the server has open (-1 if it cannot be read).
  int open_fds() const { return spindle::testing::open_descriptor_count(pid_); }

  // Waits until the server has exactly `count` descriptors open; false after `limit`.
  bool fds_become(int count, std::chrono::milliseconds limit = patience) const {
    const auto deadline = clock_type::now() + limit;
    while (open_fds() != count) {
      if (clock_type::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // SIGTERM, then waits for the exit; returns the wait status (-1: it did not exit in time and
  // was killed). Collects the rest of the log.
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = -1;
    const bool exited = wait_for_exit(status);
    if (!exited) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      status = -1;
    }
    pid_ = -1;
    drain_log();
    return status;
  }

  const std::string& log() const noexcept { return log_; }

 private:
  // Waits for the exit through a pidfd (poll), so the wait is bounded without sleeping.
  bool wait_for_exit(int& status) {
    const int pidfd = int(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      const int ready = ::poll(&p, 1, int(std::chrono::milliseconds(patience).count()));
      ::close(pidfd);
      if (ready != 1) return false;
      return ::waitpid(pid_, &status, 0) == pid_;
    }
    const auto deadline = clock_type::now() + patience;
    while (clock_type::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return true;
      std::this_thread::yield();
    }
    return false;
  }

  void drain_log() {
    if (log_fd_ < 0) return;
    char chunk[512];
    for (;;) {
      pollfd p{log_fd_, POLLIN, 0};
      if (::poll(&p, 1, 0) != 1) break;
      const ssize_t n = ::read(log_fd_, chunk, sizeof chunk);
      if (n <= 0) break;
      log_.append(chunk, std::size_t(n));
    }
  }

  pid_t pid_ = -1;
  int log_fd_ = -1;  // the read end of the server's stderr, open until the end (no SIGPIPE)
  std::string log_;
  std::uint16_t port_ = 0;
  int baseline_fds_ = -1;
};

// --- client helpers -------------------------------------------------------------------------------

// Closes a descriptor at the end of a scope.
struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(std::size_t(n));
  }
  return true;
}

// Reads until `size` bytes arrived, the stream ended or failed, or `limit` passed.
std::string receive(int fd, std::size_t size, std::chrono::milliseconds limit = patience) {
  std::string got;
  const auto deadline = clock_type::now() + limit;
  char chunk[4096];
  while (got.size() < size) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) != 1) break;
    const ssize_t n = ::recv(fd, chunk, std::min(sizeof chunk, size - got.size()), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got.append(chunk, std::size_t(n));
  }
  return got;
}

// How a wait for the server to close ended.
enum class ending { closed, data, timeout };

// Waits for the end of the stream: recv() returning 0 or failing with ECONNRESET (a close with
// unread bytes sends a reset). Any bytes that come first are an `ending::data`.
ending wait_for_close(int fd, std::chrono::milliseconds limit = patience,
                      std::string* data = nullptr) {
  const auto deadline = clock_type::now() + limit;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) != 1) return ending::timeout;
    char chunk[512];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return ending::closed;
    if (n > 0) {
      if (data) data->append(chunk, std::size_t(n));
      return ending::data;
    }
  }
}

// How gtest prints an `ending` in a failed expectation.
void PrintTo(ending e, std::ostream* out) {
  switch (e) {
    case ending::closed: *out << "closed"; return;
    case ending::data: *out << "data before the close"; return;
    case ending::timeout: *out << "still open"; return;
  }
}

// Resets the connection on close (SO_LINGER 0): the server sees ECONNRESET, not an end of file.
void close_with_reset(int fd) {
  const linger hard{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  ::close(fd);
}

// One request on a new connection; the answer (the "hello" response when all is well).
std::string fresh_get(const server_process& server) {
  const int fd = server.try_connect();
  if (fd < 0) return "connect failed: " + std::string(std::strerror(errno));
  fd_closer closer{fd};
  if (!send_all(fd, get_request)) return "send failed";
  return receive(fd, hello_response.size());
}

// --- the fixture ----------------------------------------------------------------------------------

class HttpHello : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    if (stopped_ || !server_.started()) return;
    const int status = server_.stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the server did not exit cleanly on SIGTERM (wait status " << status << "); log:\n"
        << server_.log();
  }

  // Stops the server now (SIGTERM) and checks it exits with status 0.
  void stop_server() {
    stopped_ = true;
    const int status = server_.stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the server did not exit cleanly on SIGTERM (wait status " << status << "); log:\n"
        << server_.log();
    EXPECT_NE(server_.log().find("stopping"), std::string::npos) << server_.log();
  }

  server_process server_;
  bool stopped_ = false;
};

INSTANTIATE_TEST_SUITE_P(Backends, HttpHello, ::testing::Values("uring", "epoll"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// 1. A malformed request gets "400 Bad Request" and its connection is closed; the requests before
// it on the same connection are answered first; other connections keep being served.
TEST_P(HttpHello, MalformedRequestGets400AndClose) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  // A keep-alive connection opened before the bad ones, used again after them.
  const int keeper = server_.try_connect();
  ASSERT_GE(keeper, 0);
  fd_closer keeper_closer{keeper};
  ASSERT_TRUE(send_all(keeper, get_request));
  ASSERT_EQ(receive(keeper, hello_response.size()), hello_response);

  const std::vector<std::pair<const char*, std::string>> malformed = {
      {"not HTTP", "GARBAGE\r\n\r\n"},
      {"bad method", "G@T / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"not an HTTP version", "GET / FTP/1.1\r\nHost: x\r\n\r\n"},
      {"bad version number", "GET / HTTP/1.x\r\nHost: x\r\n\r\n"},
      {"separator in a header name", "GET / HTTP/1.1\r\nHost: x\r\nBad(Header): x\r\n\r\n"},
      {"header line without a colon", "GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n"},
      {"non-numeric Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"},
      {"two Content-Lengths",
       "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
      {"bad chunk size", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
      {"binary", std::string("\x00\x01\x02\xff\xfe\r\n\r\n", 9)},
      // Over http-parser's 80 KiB header limit: the server stops reading at the limit.
      {"oversized header",
       "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100 * 1024, 'a') + "\r\n\r\n"},
  };
  for (const auto& [what, request] : malformed) {
    SCOPED_TRACE(what);
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    // A long request may be cut short by the server's close (reset): that is fine.
    send_all(fd, request);
    EXPECT_EQ(receive(fd, bad_request_response.size()), bad_request_response);
    std::string extra;
    EXPECT_EQ(wait_for_close(fd, patience, &extra), ending::closed) << extra;
  }

  // In order: the valid requests before the bad one are answered, then the 400, then the close.
  {
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    ASSERT_TRUE(send_all(fd, repeat(get_request, 2) + "GARBAGE\r\n\r\n"));
    const std::string expected = repeat(hello_response, 2) + std::string(bad_request_response);
    EXPECT_EQ(receive(fd, expected.size()), expected);
    EXPECT_EQ(wait_for_close(fd), ending::closed);
  }

  // The server kept serving: the old keep-alive connection and a new one.
  EXPECT_TRUE(server_.running());
  ASSERT_TRUE(send_all(keeper, get_request));
  EXPECT_EQ(receive(keeper, hello_response.size()), hello_response);
  EXPECT_EQ(fresh_get(server_), hello_response);
}

// 2. Pipelining: N requests in one write get N answers, in order, and the connection stays open;
// the same bytes split at every boundary (inside "\r\n\r\n", inside a body, between requests)
// are answered the same; a request with "Connection: close" is answered and ends the connection
// (the requests after it are not).
TEST_P(HttpHello, PipelinedRequestsAreAnsweredInOrder) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  const int fd = server_.try_connect();
  ASSERT_GE(fd, 0);
  fd_closer closer{fd};

  // N identical requests in one write.
  constexpr std::size_t n = 64;
  ASSERT_TRUE(send_all(fd, repeat(get_request, n)));
  EXPECT_EQ(receive(fd, n * hello_response.size()), repeat(hello_response, n));

  // Requests of several shapes (bodies, chunked, HTTP/1.0 with keep-alive, empty lines between
  // requests, which RFC 9112 2.2 lets a server ignore).
  const std::vector<std::string> shapes = {
      std::string(get_request),
      "POST /submit HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\n\r\nhello world",
      "POST /chunks HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n4\r\n\r\n\r\n\r\n0\r\n\r\n",
      "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
      "\r\nHEAD /h HTTP/1.1\r\nHost: test\r\nX-Empty:\r\n\r\n",
      std::string(get_request),
  };
  std::string stream;
  for (const auto& s : shapes) stream += s;
  // HEAD is answered with the header alone: the GET after it shows the framing held.
  const std::string head_response(hello_response.substr(0, hello_response.size() - 5));
  const std::string answers = repeat(hello_response, 4) + head_response + std::string(hello_response);
  ASSERT_TRUE(send_all(fd, stream));
  ASSERT_EQ(receive(fd, answers.size()), answers);

  // Written in pieces of 1, 2, 3, 5, 7 and 13 bytes (TCP_NODELAY: a piece per segment, though
  // the server may still read several at once).
  for (const std::size_t piece : {1, 2, 3, 5, 7, 13}) {
    SCOPED_TRACE("pieces of " + std::to_string(piece));
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      ASSERT_TRUE(send_all(fd, std::string_view(stream).substr(at, piece)));
    }
    ASSERT_EQ(receive(fd, answers.size()), answers);
  }
  // Two writes, split at every position of two requests (the first with a body).
  const std::string pair = shapes[1] + std::string(get_request);
  const std::string two_answers = repeat(hello_response, 2);
  for (std::size_t split = 1; split < pair.size(); ++split) {
    SCOPED_TRACE("split at " + std::to_string(split));
    ASSERT_TRUE(send_all(fd, std::string_view(pair).substr(0, split)));
    ASSERT_TRUE(send_all(fd, std::string_view(pair).substr(split)));
    ASSERT_EQ(receive(fd, two_answers.size()), two_answers);
  }

  // Still a keep-alive connection: nothing more arrives, and a last batch ends with a request
  // that closes the connection: the answers up to it, then the end of the stream.
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  const std::string closing = repeat(get_request, 3) +
                              "GET /last HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n" +
                              std::string(get_request);
  ASSERT_TRUE(send_all(fd, closing));
  EXPECT_EQ(receive(fd, 4 * hello_response.size()), repeat(hello_response, 4));
  std::string extra;
  EXPECT_EQ(wait_for_close(fd, patience, &extra), ending::closed)
      << "answered a request after Connection: close: " << extra;
  EXPECT_EQ(fresh_get(server_), hello_response);
}

// 3. Slowloris: with a 300 ms request limit and a 600 ms idle limit, connections that trickle
// bytes (one per 20 ms: each byte well within either limit) are closed, whatever they trickle: a
// request's header, its body, or empty lines that begin no request; so is a silent connection.
// A new connection is still answered. (The limits are bounds the server must enforce; the test
// only waits, up to `patience`, for the close.)
TEST_P(HttpHello, SlowClientsAreCutOff) {
  server_options options;
  options.environment = {{"SPINDLE_HTTP_REQUEST_TIMEOUT_MS", "300"},
                         {"SPINDLE_HTTP_IDLE_TIMEOUT_MS", "600"}};
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), options));

  struct slow_client {
    const char* what;
    std::string prefix;   // sent at once
    std::string trickle;  // then one byte per interval, cycling ("" sends nothing)
    int fd = -1;
    std::size_t trickled = 0;
    std::string received;
    bool closed = false;
  };
  std::vector<slow_client> clients = {
      {"request header, a byte at a time", "GET / HTTP/1.1\r\nHost: test\r\nX-Slow: ", "a"},
      {"request body, a byte at a time",
       "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 1000000\r\n\r\n", "b"},
      {"empty lines, a byte at a time", "", "\r\n"},
      {"an answered request, then a header a byte at a time",
       std::string(get_request) + "GET / HTTP/1.1\r\nHost: test\r\nX-Slow: ", "c"},
      {"silent", "", ""},
  };
  for (auto& c : clients) {
    c.fd = server_.try_connect();
    ASSERT_GE(c.fd, 0) << c.what;
    ASSERT_TRUE(send_all(c.fd, c.prefix)) << c.what;
  }
  // One byte per client per round; the poll for a close is the interval between bytes.
  const auto deadline = clock_type::now() + patience;
  const auto all_closed = [&] {
    return std::all_of(clients.begin(), clients.end(), [](const slow_client& c) { return c.closed; });
  };
  while (!all_closed() && clock_type::now() < deadline) {
    std::vector<pollfd> polled;
    for (auto& c : clients) {
      if (c.closed) continue;
      if (!c.trickle.empty()) {
        const char byte = c.trickle[c.trickled++ % c.trickle.size()];
        if (::send(c.fd, &byte, 1, MSG_NOSIGNAL) != 1) {
          const int error = errno;  // EPIPE, ECONNRESET: the server has closed the connection
          EXPECT_TRUE(error == EPIPE || error == ECONNRESET) << c.what << ": " << std::strerror(error);
          c.closed = true;
          continue;
        }
      }
      polled.push_back({c.fd, POLLIN, 0});
    }
    if (polled.empty()) continue;
    if (::poll(polled.data(), polled.size(), 20) <= 0) continue;
    for (const pollfd& p : polled) {
      if (p.revents == 0) continue;
      auto& c = *std::find_if(clients.begin(), clients.end(), [&](auto& x) { return x.fd == p.fd; });
      char chunk[512];
      const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) {
        c.received.append(chunk, std::size_t(n));
      } else if (n == 0 || errno == ECONNRESET) {
        c.closed = true;
      }
    }
  }
  for (auto& c : clients) {
    SCOPED_TRACE(c.what);
    EXPECT_TRUE(c.closed) << "still open after " << c.trickled << " bytes trickled";
    // Only the complete request was answered; the slow one got nothing (no 400 either).
    const std::string expected = c.prefix.starts_with(get_request) ? std::string(hello_response) : "";
    EXPECT_EQ(c.received, expected);
    ::close(c.fd);
  }
  EXPECT_TRUE(server_.running());
  EXPECT_EQ(fresh_get(server_), hello_response);
  // Every cut-off connection's descriptor was released by the server.
  EXPECT_TRUE(server_.fds_become(server_.baseline_fds()))
      << server_.open_fds() << " open, " << server_.baseline_fds() << " at the start";
}

// 4. Many idle connections (10,000 where RLIMIT_NOFILE allows; see below) stay open and served
// while a new client is answered.
TEST_P(HttpHello, ManyIdleConnectionsAndANewClient) {
  // Both this process and the server (which inherits the limit) hold one descriptor per
  // connection: raise the soft limit to the hard one. Where the hard limit is below 10,000 plus
  // a margin of 256 (the server's own descriptors, gtest's, the pipe), the test uses as many
  // connections as the limit allows minus that margin.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct restore_limit {
    rlimit saved;
    ~restore_limit() { ::setrlimit(RLIMIT_NOFILE, &saved); }
  } restore{saved};
  rlimit raised = saved;
  raised.rlim_cur = saved.rlim_max == RLIM_INFINITY ? std::max<rlim_t>(saved.rlim_cur, 20000)
                                                    : saved.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &raised);
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &raised), 0);
  constexpr rlim_t margin = 256;
  const int connections = int(std::min<rlim_t>(10000, raised.rlim_cur > 2 * margin ? raised.rlim_cur - margin : 0));
  ASSERT_GE(connections, 100) << "RLIMIT_NOFILE " << raised.rlim_cur << " leaves too few descriptors";
  if (connections < 10000) {
    std::printf("RLIMIT_NOFILE hard limit %llu: %d idle connections instead of 10000\n",
                static_cast<unsigned long long>(raised.rlim_cur), connections);
  }

  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  const int baseline = server_.baseline_fds();
  std::vector<int> fds;
  fds.reserve(std::size_t(connections));
  struct close_all {
    std::vector<int>& fds;
    ~close_all() {
      for (int fd : fds) ::close(fd);
    }
  } closer{fds};
  for (int i = 0; i < connections; ++i) {
    // Keeps the accept backlog (1024) from overflowing: every 256 connections, wait until the
    // server has taken all but 256 of them.
    if (i % 256 == 0 && i > 0) {
      const auto deadline = clock_type::now() + patience;
      while (server_.open_fds() < baseline + i - 256) {
        ASSERT_LT(clock_type::now(), deadline) << "the server stopped accepting at " << i;
        std::this_thread::yield();
      }
    }
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    fds.push_back(fd);
  }
  // All accepted and held: one descriptor each in the server.
  ASSERT_TRUE(server_.fds_become(baseline + connections))
      << server_.open_fds() << " open in the server, expected " << baseline + connections;

  // A new client is answered while they idle.
  EXPECT_EQ(fresh_get(server_), hello_response);
  // None of the idle connections was dropped: each answers a request now.
  for (int fd : fds) ASSERT_TRUE(send_all(fd, get_request));
  int answered = 0;
  for (int fd : fds) answered += receive(fd, hello_response.size()) == hello_response ? 1 : 0;
  EXPECT_EQ(answered, connections);
  // SIGTERM with all of them open: the runtime cancels their tasks, the exit status is 0.
  stop_server();
}

// 5. Out of descriptors: the server runs with a soft RLIMIT_NOFILE of 64. Connections are served
// until its descriptor table is full; more connections then wait unanswered in the backlog
// (accept fails with EMFILE); once some clients leave, the waiting ones and new ones are served.
TEST_P(HttpHello, AcceptKeepsServingAfterRunningOutOfDescriptors) {
  constexpr rlim_t fd_limit = 64;
  server_options options;
  options.fd_limit = fd_limit;
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), options));
  const int baseline = server_.baseline_fds();
  ASSERT_LT(baseline + 8, int(fd_limit)) << "the idle server already holds " << baseline;

  std::vector<int> served;
  struct close_all {
    std::vector<int>& fds;
    ~close_all() {
      for (int fd : fds) ::close(fd);
    }
  } closer{served};
  // Fill the table with keep-alive connections, each proven accepted by an answer.
  while (server_.open_fds() < int(fd_limit)) {
    ASSERT_LT(served.size(), std::size_t(fd_limit)) << "more connections than descriptors?";
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    served.push_back(fd);
    ASSERT_TRUE(send_all(fd, get_request));
    ASSERT_EQ(receive(fd, hello_response.size()), hello_response) << "connection " << served.size();
  }
  ASSERT_EQ(server_.open_fds(), int(fd_limit));
  ASSERT_EQ(served.size(), std::size_t(int(fd_limit) - baseline));

  // Full: new connections complete in the kernel's backlog, but accept() fails with EMFILE and
  // their requests stay unanswered. The server lives on.
  constexpr int waiting_count = 4;
  std::vector<int> waiting;
  struct close_waiting {
    std::vector<int>& fds;
    ~close_waiting() {
      for (int fd : fds) ::close(fd);
    }
  } waiting_closer{waiting};
  for (int i = 0; i < waiting_count; ++i) {
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    waiting.push_back(fd);
    ASSERT_TRUE(send_all(fd, get_request));
  }
  {
    std::vector<pollfd> polled;
    for (int fd : waiting) polled.push_back({fd, POLLIN, 0});
    // Not a synchronisation: a window in which an answer would show a descriptor out of nowhere.
    EXPECT_EQ(::poll(polled.data(), polled.size(), 100), 0) << "answered while the table was full";
  }
  EXPECT_TRUE(server_.running());
  EXPECT_EQ(server_.open_fds(), int(fd_limit));

  // Half the served clients leave: the server closes their descriptors, accept() succeeds again.
  const std::size_t leaving = served.size() / 2;
  for (std::size_t i = 0; i < leaving; ++i) ::close(served[i]);
  served.erase(served.begin(), served.begin() + std::ptrdiff_t(leaving));
  for (int fd : waiting) {
    EXPECT_EQ(receive(fd, hello_response.size()), hello_response) << "a waiting client was never served";
  }
  EXPECT_EQ(fresh_get(server_), hello_response);
  // The clients that stayed are still served.
  for (int fd : served) {
    ASSERT_TRUE(send_all(fd, get_request));
    EXPECT_EQ(receive(fd, hello_response.size()), hello_response);
  }
}

// 6. Peers that go away in the middle of things (a close or a reset mid-request, a reset before
// the server accepted, a reset while the server is blocked writing answers nobody reads) end
// their own connection only: the server stays up, releases every descriptor and answers a new
// client. A client that half-closes after a complete request still gets its answer.
TEST_P(HttpHello, PeersThatCloseOrResetMidRequest) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  constexpr int rounds = 20;
  const std::string partial = "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\nabc";
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Close (FIN) in the middle of a request.
    {
      const int fd = server_.try_connect();
      ASSERT_GE(fd, 0);
      ASSERT_TRUE(send_all(fd, std::string_view(partial).substr(0, 8 + std::size_t(round) % 40)));
      ::close(fd);
    }
    // Reset in the middle of a request.
    {
      const int fd = server_.try_connect();
      ASSERT_GE(fd, 0);
      ASSERT_TRUE(send_all(fd, partial));
      close_with_reset(fd);
    }
    // Reset straight after connecting (the server may not have accepted yet).
    {
      const int fd = server_.try_connect();
      ASSERT_GE(fd, 0);
      close_with_reset(fd);
    }
    // Half-close mid-request: the server sees the end of the stream, sends nothing, closes.
    {
      const int fd = server_.try_connect();
      ASSERT_GE(fd, 0);
      fd_closer closer{fd};
      ASSERT_TRUE(send_all(fd, partial));
      ::shutdown(fd, SHUT_WR);
      std::string extra;
      EXPECT_EQ(wait_for_close(fd, patience, &extra), ending::closed) << extra;
    }
    // Half-close after a complete request: answered, then closed.
    {
      const int fd = server_.try_connect();
      ASSERT_GE(fd, 0);
      fd_closer closer{fd};
      ASSERT_TRUE(send_all(fd, get_request));
      ::shutdown(fd, SHUT_WR);
      EXPECT_EQ(receive(fd, hello_response.size()), hello_response);
      EXPECT_EQ(wait_for_close(fd), ending::closed);
    }
  }
  // Many pipelined requests whose answers are never read (a small receive buffer: the server's
  // writes block), then a reset.
  for (int round = 0; round < 4; ++round) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    const int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(server_.port());
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    // ~1.6 MB of answers. Sent while there is room: the rest would wait for a server that is
    // stuck writing to this client (what the reset below should find it doing).
    const std::string flood = repeat(get_request, 20000);
    std::string_view rest = flood;
    while (!rest.empty()) {
      const ssize_t n = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n <= 0) break;
      rest.remove_prefix(std::size_t(n));
    }
    close_with_reset(fd);
  }

  EXPECT_TRUE(server_.running());
  EXPECT_EQ(fresh_get(server_), hello_response);
  EXPECT_TRUE(server_.fds_become(server_.baseline_fds()))
      << server_.open_fds() << " open, " << server_.baseline_fds() << " at the start";
}

// 7. The request limit is enforced on its own, not only when the idle limit ends (issue 14): with
// a 2 s request limit and a 30 s idle limit, a request that stalls (a partial request line, partial
// headers, after an answered request too) or never ends (an upload trickling a byte per 100 ms) is
// cut 2 s after its first byte: the test accepts a close between 1.5 s and 5 s. Nothing is
// answered to the cut requests (no 400 either).
TEST_P(HttpHello, RequestTimeoutCutsAStalledRequest) {
  server_options options;
  options.environment = {{"SPINDLE_HTTP_REQUEST_TIMEOUT_MS", "2000"},
                         {"SPINDLE_HTTP_IDLE_TIMEOUT_MS", "30000"}};
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), options));

  struct stalled_client {
    const char* what;
    std::string answered;  // a complete request sent first, and its expected answer
    std::string partial;   // then the first bytes of a request, at `begun`
    bool trickles = false;  // then a byte per interval, for ever
    int fd = -1;
    clock_type::time_point begun{};
    std::optional<clock_type::duration> closed_after;
    std::string received;
  };
  std::vector<stalled_client> clients = {
      {"partial request line", "", "GET / HT"},
      {"partial headers", "", "GET / HTTP/1.1\r\nHost: test\r\nX-Stall: "},
      {"an answered request, then partial headers", std::string(get_request),
       "GET / HTTP/1.1\r\nHost: test\r\n"},
      {"endless upload", "", "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 1000000000\r\n\r\n",
       true},
  };
  struct close_all {
    std::vector<stalled_client>& clients;
    ~close_all() {
      for (auto& c : clients) {
        if (c.fd >= 0) ::close(c.fd);
      }
    }
  } closer{clients};
  for (auto& c : clients) {
    c.fd = server_.try_connect();
    ASSERT_GE(c.fd, 0) << c.what;
    if (!c.answered.empty()) {
      ASSERT_TRUE(send_all(c.fd, c.answered)) << c.what;
      ASSERT_EQ(receive(c.fd, hello_response.size()), hello_response) << c.what;
    }
    c.begun = clock_type::now();
    ASSERT_TRUE(send_all(c.fd, c.partial)) << c.what;
  }
  // The poll for a close is the interval between the upload's bytes.
  const auto give_up = clock_type::now() + 5s;
  const auto all_closed = [&] {
    return std::all_of(clients.begin(), clients.end(),
                       [](const stalled_client& c) { return c.closed_after.has_value(); });
  };
  while (!all_closed() && clock_type::now() < give_up) {
    std::vector<pollfd> polled;
    for (auto& c : clients) {
      if (c.closed_after) continue;
      if (c.trickles && ::send(c.fd, "x", 1, MSG_NOSIGNAL) != 1) {
        c.closed_after = clock_type::now() - c.begun;  // EPIPE, ECONNRESET: closed
        continue;
      }
      polled.push_back({c.fd, POLLIN, 0});
    }
    if (polled.empty() || ::poll(polled.data(), polled.size(), 100) <= 0) continue;
    for (const pollfd& p : polled) {
      if (p.revents == 0) continue;
      auto& c = *std::find_if(clients.begin(), clients.end(), [&](auto& x) { return x.fd == p.fd; });
      char chunk[512];
      const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) {
        c.received.append(chunk, std::size_t(n));
      } else if (n == 0 || errno == ECONNRESET) {
        c.closed_after = clock_type::now() - c.begun;
      }
    }
  }
  for (const auto& c : clients) {
    SCOPED_TRACE(c.what);
    ASSERT_TRUE(c.closed_after.has_value()) << "still open 5 s after the request began";
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*c.closed_after).count();
    EXPECT_GE(ms, 1500) << "cut before the request limit";
    EXPECT_LE(ms, 5000);
    EXPECT_EQ(c.received, "");
  }
  EXPECT_EQ(fresh_get(server_), hello_response);
}

// 8. Upgrade (with "Connection: upgrade") and CONNECT, which this server does not speak, get
// "501 Not Implemented" and the close, never a 2xx (to CONNECT: "tunnel established") nor a 101;
// the requests before them on the connection are answered first.
TEST_P(HttpHello, UpgradeAndConnectAreRefused) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  constexpr std::string_view not_implemented =
      "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  const std::vector<std::pair<const char*, std::string>> refused = {
      {"websocket upgrade",
       "GET /chat HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"},
      {"h2c upgrade",
       "GET / HTTP/1.1\r\nHost: test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
       "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"},
      {"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"},
      {"CONNECT, tunnel bytes after it",
       "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01"},
      {"a GET, then CONNECT",
       std::string(get_request) + "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n"},
  };
  for (const auto& [what, request] : refused) {
    SCOPED_TRACE(what);
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    send_all(fd, request);
    const std::string expected =
        (std::string_view(request).starts_with(get_request) ? std::string(hello_response) : "") +
        std::string(not_implemented);
    EXPECT_EQ(receive(fd, expected.size(), 5s), expected);
    std::string extra;
    EXPECT_EQ(wait_for_close(fd, patience, &extra), ending::closed) << extra;
  }
  EXPECT_EQ(fresh_get(server_), hello_response);
}

// 9. A limit too large for the clock (9223372036854775807 ms overflowed into a deadline in the
// past: the server listened and answered nothing) is refused at start: exit status 2, a message
// naming the variable, never a listening server. So are the usual bad values.
TEST_P(HttpHello, OversizedTimeoutIsRefusedAtStart) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"SPINDLE_HTTP_REQUEST_TIMEOUT_MS", "9223372036854775807"},
      {"SPINDLE_HTTP_IDLE_TIMEOUT_MS", "9223372036854775807"},
      {"SPINDLE_HTTP_REQUEST_TIMEOUT_MS", "99999999999999999999"},
      {"SPINDLE_HTTP_IDLE_TIMEOUT_MS", "0"},
      {"SPINDLE_HTTP_REQUEST_TIMEOUT_MS", "-5"},
  };
  for (const auto& [name, value] : refused) {
    SCOPED_TRACE(name + "=" + value);
    server_process refusing;
    server_options options;
    options.environment = {{name, value}};
    const int status = refusing.start_expecting_refusal(GetParam(), options);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2)
        << "wait status " << status << "; log:\n" << refusing.log();
    EXPECT_NE(refusing.log().find(name), std::string::npos) << refusing.log();
  }
  // The largest accepted value (a day) starts a server that answers.
  server_options options;
  options.environment = {{"SPINDLE_HTTP_REQUEST_TIMEOUT_MS", "86400000"},
                         {"SPINDLE_HTTP_IDLE_TIMEOUT_MS", "86400000"}};
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), options));
  EXPECT_EQ(fresh_get(server_), hello_response);
}

// 10. Requests RFC 9112 says to reject, which the lenient Debian http-parser build accepts: white
// space between a header field name and its colon (5.1: "MUST reject ... with 400") and an HTTP
// major version other than 1 ("505 HTTP Version Not Supported", RFC 9110 15.6.6). Each gets its
// answer and the close.
TEST_P(HttpHello, LenientParserLeniencyIsRejected) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  constexpr std::string_view version_not_supported =
      "HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  const std::vector<std::tuple<const char*, std::string, std::string_view>> rejected = {
      {"space before the colon", "GET / HTTP/1.1\r\nHost : test\r\n\r\n", bad_request_response},
      {"tab before the colon", "GET / HTTP/1.1\r\nHost\t: test\r\n\r\n", bad_request_response},
      {"space inside a field name", "GET / HTTP/1.1\r\nHost: test\r\nX Y: z\r\n\r\n",
       bad_request_response},
      {"HTTP/9.9", "GET / HTTP/9.9\r\nHost: test\r\n\r\n", version_not_supported},
      {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: test\r\n\r\n", version_not_supported},
  };
  for (const auto& [what, request, answer] : rejected) {
    SCOPED_TRACE(what);
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    send_all(fd, request);
    EXPECT_EQ(receive(fd, answer.size(), 5s), answer);
    std::string extra;
    EXPECT_EQ(wait_for_close(fd, 5s, &extra), ending::closed) << extra;
  }
  EXPECT_EQ(fresh_get(server_), hello_response);
}


// 11-17. What the lenient Debian http-parser build takes and RFC 9112 rejects: each request gets
// "400 Bad Request" and the close (the answer is read, then the end of the stream awaited), on a
// fresh connection per request; a GET on a new connection is still answered afterwards.
void expect_each_rejected(const server_process& server,
                          const std::vector<std::pair<const char*, std::string>>& requests) {
  for (const auto& [what, request] : requests) {
    SCOPED_TRACE(what);
    const int fd = server.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    send_all(fd, request);
    EXPECT_EQ(receive(fd, bad_request_response.size(), 5s), bad_request_response);
    std::string extra;
    EXPECT_EQ(wait_for_close(fd, 5s, &extra), ending::closed) << extra;
  }
  EXPECT_EQ(fresh_get(server), hello_response);
}

// A chunked POST: `chunks` is the body as sent (chunk lines, data, last chunk, trailers, end).
std::string chunked_post(std::string_view chunks) {
  return "POST /c HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(chunks);
}

// 11. Obsolete line folding (a field line beginning with SP or HTAB, RFC 9112 5.2): 400, in the
// header section and in a chunked message's trailer section alike.
TEST_P(HttpHello, ObsoleteLineFoldingGets400) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"folded with a space", "GET / HTTP/1.1\r\nHost: test\r\nX-A: a\r\n b\r\n\r\n"},
      {"folded with a tab", "GET / HTTP/1.1\r\nHost: test\r\nX-A: a\r\n\tb\r\n\r\n"},
      {"white space before the first field line", "GET / HTTP/1.1\r\n Host: test\r\n\r\n"},
      {"folded trailer", chunked_post("0\r\nX-T: a\r\n b\r\n\r\n")},
  });
}

// 12. Bare LF (and bare CR) as a line terminator: 400 wherever a line ends (request line, field
// line, the empty line, a chunk line, after chunk data, between pipelined requests).
TEST_P(HttpHello, BareLineFeedGets400) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"after the request line", "GET / HTTP/1.1\nHost: test\r\n\r\n"},
      {"after a field line", "GET / HTTP/1.1\r\nHost: test\n\r\n"},
      {"as the empty line", "GET / HTTP/1.1\r\nHost: test\r\n\n"},
      {"everywhere", "GET / HTTP/1.1\nHost: test\n\n"},
      {"after a chunk size", chunked_post("3\nabc\r\n0\r\n\r\n")},
      {"after chunk data", chunked_post("3\r\nabc\n0\r\n\r\n")},
      {"after the trailer section", chunked_post("0\r\n\n")},
      {"bare CR in a field value", "GET / HTTP/1.1\r\nHost: te\rst\r\n\r\n"},
      {"bare CR ending the header section", "GET / HTTP/1.1\r\nHost: test\r\n\rX"},
  });
  // Between pipelined requests: the one before is answered, then the 400.
  const int fd = server_.try_connect();
  ASSERT_GE(fd, 0);
  fd_closer closer{fd};
  ASSERT_TRUE(send_all(fd, std::string(get_request) + "\n" + std::string(get_request)));
  const std::string expected = std::string(hello_response) + std::string(bad_request_response);
  EXPECT_EQ(receive(fd, expected.size(), 5s), expected);
  EXPECT_EQ(wait_for_close(fd, 5s), ending::closed);
}

// 13. Chunk framing (RFC 9112 7.1): chunk data must be followed by CRLF, and a chunk size by
// nothing but a chunk extension (";" after optional white space) and CRLF.
TEST_P(HttpHello, BadChunkFramingGets400) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"data followed by other bytes", chunked_post("3\r\nabcXY0\r\n\r\n")},
      {"data followed by CR and another byte", chunked_post("3\r\nabc\rX0\r\n\r\n")},
      {"data longer than its size", chunked_post("3\r\nabcd\r\n0\r\n\r\n")},
      {"junk after the size", chunked_post("3 junk\r\nabc\r\n0\r\n\r\n")},
      {"bare CR after the size", chunked_post("3\rabc\r\n0\r\n\r\n")},
      {"control character in an extension", chunked_post("3;a\x01\r\nabc\r\n0\r\n\r\n")},
  });
  // Extensions (with white space before the ";") are allowed, and so is any byte in chunk data.
  const int fd = server_.try_connect();
  ASSERT_GE(fd, 0);
  fd_closer closer{fd};
  ASSERT_TRUE(send_all(fd, chunked_post("3;a=b\r\nabc\r\n4 ;x\r\n\n \r\n\r\n0\r\nX-T: t\r\n\r\n")));
  EXPECT_EQ(receive(fd, hello_response.size(), 5s), hello_response);
}

// 14. Content-Length together with Transfer-Encoding (RFC 9112 6.1: request smuggling) gets 400,
// whichever comes first.
TEST_P(HttpHello, ContentLengthWithTransferEncodingGets400) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"Content-Length first",
       "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
       "0\r\n\r\n"},
      {"Transfer-Encoding first",
       "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
       "0\r\n\r\n"},
  });
}

// 15. More than one Content-Length (RFC 9112 6.3: differing values are unrecoverable; equal ones
// may be rejected too) or a list of them gets 400.
TEST_P(HttpHello, MultipleContentLengthsGet400) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"differing", "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"},
      {"equal", "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"},
      {"a list", "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3, 3\r\n\r\nabc"},
  });
}

// 16. Control characters (NUL, other C0 but HTAB, DEL) in a field value or name (RFC 9110 5.5).
TEST_P(HttpHello, ControlCharactersInFieldsGet400) {
  using namespace std::string_literals;  // "..."s keeps the NUL
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"NUL in a value", "GET / HTTP/1.1\r\nHost: test\r\nX-A: a\0b\r\n\r\n"s},
      {"SOH in a value", "GET / HTTP/1.1\r\nHost: test\r\nX-A: a\x01z\r\n\r\n"},
      {"ESC in a value", "GET / HTTP/1.1\r\nHost: test\r\nX-A: a\x1bz\r\n\r\n"},
      {"DEL in a value", "GET / HTTP/1.1\r\nHost: test\r\nX-A: a\x7fz\r\n\r\n"},
      {"NUL in a name", "GET / HTTP/1.1\r\nHost: test\r\nX\0A: a\r\n\r\n"s},
      {"NUL in the target", "GET /a\0b HTTP/1.1\r\nHost: test\r\n\r\n"s},
  });
}

// 17. A Transfer-Encoding whose final coding is not chunked: the body length cannot be known, so
// RFC 9112 6.3 says 400 and close.
TEST_P(HttpHello, TransferCodingNotEndingInChunkedGets400) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"gzip", "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nabc"},
      {"chunked, gzip", "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\nabc"},
      {"identity", "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\n\r\nabc"},
  });
}

// 19. A transfer coding other than chunked before the final chunked one ("gzip, chunked"), which
// this server does not decode: "501 Not Implemented" and the close (RFC 9112 6.1: SHOULD), also
// when the codings come in two field lines; chunked applied twice (6.1: MUST NOT) gets 400.
TEST_P(HttpHello, TransferCodingOtherThanChunkedGets501) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  constexpr std::string_view not_implemented =
      "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  const std::vector<std::tuple<const char*, std::string, std::string_view>> refused = {
      {"gzip, chunked",
       "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
       not_implemented},
      {"two field lines",
       "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n\r\n"
       "0\r\n\r\n",
       not_implemented},
      {"after an empty field",
       "POST / HTTP/1.1\r\nHost: t\r\nX-Empty:\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
       "0\r\n\r\n",
       not_implemented},
      {"a list too long to hold",
       "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: " + repeat("chunked, ", 40) +
           "chunked\r\n\r\n0\r\n\r\n",
       not_implemented},
      {"chunked twice",
       "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
       bad_request_response},
  };
  for (const auto& [what, request, answer] : refused) {
    SCOPED_TRACE(what);
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    send_all(fd, request);
    EXPECT_EQ(receive(fd, answer.size(), 5s), answer);
    std::string extra;
    EXPECT_EQ(wait_for_close(fd, 5s, &extra), ending::closed) << extra;
  }
  // Chunked alone, in any case, is fine.
  const int fd = server_.try_connect();
  ASSERT_GE(fd, 0);
  fd_closer closer{fd};
  ASSERT_TRUE(send_all(fd, "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: CHUNKED\r\n\r\n"
                           "0\r\n\r\n"));
  EXPECT_EQ(receive(fd, hello_response.size(), 5s), hello_response);
}

// 20. Transfer-Encoding in an HTTP/1.0 request: RFC 9112 6.1 says to treat the framing as faulty
// (1.0 has no chunked coding) and close: 400.
TEST_P(HttpHello, TransferEncodingInHttp10Gets400) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"chunked", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
      {"with keep-alive",
       "POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
  });
}

// 18. The strict checks see the bytes as they arrive: a valid pipeline (a chunked request with an
// extension and a trailer, a body holding LF and leading white space, a GET) written in two
// pieces split at every byte position is answered in full on one keep-alive connection; a
// rejected request (folded header, bad chunk terminator) split at every position gets 400.
TEST_P(HttpHello, StrictChecksHoldAtEverySplit) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  const std::string valid = chunked_post("3;e=1\r\nabc\r\n2\r\n\n \r\n0\r\nX-T: t\r\n\r\n") +
                            "POST /b HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n\n x\r\n" +
                            std::string(get_request);
  const std::string answers = repeat(hello_response, 3);
  {
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    for (std::size_t split = 1; split < valid.size(); ++split) {
      SCOPED_TRACE("valid, split at " + std::to_string(split));
      ASSERT_TRUE(send_all(fd, std::string_view(valid).substr(0, split)));
      ASSERT_TRUE(send_all(fd, std::string_view(valid).substr(split)));
      ASSERT_EQ(receive(fd, answers.size(), 5s), answers);
    }
  }
  for (const std::string& rejected :
       {std::string("GET / HTTP/1.1\r\nHost: test\r\nX-A: a\r\n b\r\n\r\n"),
        chunked_post("3\r\nabcXY0\r\n\r\n")}) {
    for (std::size_t split = 1; split < rejected.size(); ++split) {
      SCOPED_TRACE("rejected " + rejected + ", split at " + std::to_string(split));
      const int fd = server_.try_connect();
      ASSERT_GE(fd, 0);
      fd_closer closer{fd};
      send_all(fd, std::string_view(rejected).substr(0, split));
      send_all(fd, std::string_view(rejected).substr(split));
      EXPECT_EQ(receive(fd, bad_request_response.size(), 5s), bad_request_response);
      EXPECT_EQ(wait_for_close(fd, 5s), ending::closed);
    }
  }
  EXPECT_EQ(fresh_get(server_), hello_response);
}

// 21. Host (RFC 9112 3.2): an HTTP/1.1 request without one, any request with more than one Host
// field line, and any request whose Host is not uri-host [":" port] (RFC 3986) gets 400 and the
// close. An HTTP/1.0 request may leave Host out; an empty Host (a target without an authority)
// and the forms of uri-host (a name, IPv4, an IP literal, percent-encoding) are answered.
TEST_P(HttpHello, HostIsRequiredOnceAndValid) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  expect_each_rejected(server_, {
      {"HTTP/1.1 without Host", "GET / HTTP/1.1\r\n\r\n"},
      {"HTTP/1.1 POST without Host", "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"},
      {"absolute-form without Host", "GET http://example.com/ HTTP/1.1\r\n\r\n"},
      {"two Host lines", "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"},
      {"two Host lines, names in other cases",
       "GET / HTTP/1.1\r\nhOsT: a\r\nX-A: b\r\nHOST: a\r\n\r\n"},
      {"two Host lines in HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"},
      {"space inside the value", "GET / HTTP/1.1\r\nHost: exa mple.com\r\n\r\n"},
      {"tab inside the value", "GET / HTTP/1.1\r\nHost: exa\tmple.com\r\n\r\n"},
      {"a path", "GET / HTTP/1.1\r\nHost: example.com/x\r\n\r\n"},
      {"userinfo", "GET / HTTP/1.1\r\nHost: user@example.com\r\n\r\n"},
      {"a port that is not a number", "GET / HTTP/1.1\r\nHost: example.com:8o\r\n\r\n"},
      {"two ports", "GET / HTTP/1.1\r\nHost: example.com:1:2\r\n\r\n"},
      {"an IP literal left open", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"},
      {"an IP literal holding a name", "GET / HTTP/1.1\r\nHost: [example.com]\r\n\r\n"},
      {"junk after an IP literal", "GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n"},
      {"bad percent-encoding", "GET / HTTP/1.1\r\nHost: a%zz\r\n\r\n"},
      {"a list", "GET / HTTP/1.1\r\nHost: a, b\r\n\r\n"},
      {"invalid in HTTP/1.0", "GET / HTTP/1.0\r\nHost: a b\r\n\r\n"},
      {"too long", "GET / HTTP/1.1\r\nHost: " + std::string(2000, 'a') + "\r\n\r\n"},
  });
  // One keep-alive connection, a pipeline of valid ones, then the same without Host: the answers
  // up to it, then the 400.
  const std::vector<std::string> accepted = {
      "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [v1.fe:x]\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a%41-b_c~d!$&'()*+,;=\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: example.com:\r\n\r\n",
      "GET / HTTP/1.1\r\nHost:\r\n\r\n",
      "GET / HTTP/1.1\r\nhost:  example.com \t\r\n\r\n",
      "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
      "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
  };
  std::string pipeline;
  for (const auto& request : accepted) pipeline += request;
  const int fd = server_.try_connect();
  ASSERT_GE(fd, 0);
  fd_closer closer{fd};
  ASSERT_TRUE(
      send_all(fd, pipeline + "GET / HTTP/1.1\r\nX-A: a\r\n\r\n" + std::string(get_request)));
  const std::string expected =
      repeat(hello_response, accepted.size()) + std::string(bad_request_response);
  EXPECT_EQ(receive(fd, expected.size(), 5s), expected);
  EXPECT_EQ(wait_for_close(fd, 5s), ending::closed);
}

// 22. OWS is SP or HTAB (RFC 9110 5.6.3): white space around a field value may be HTAB as well as
// SP. http-parser takes only SP after a Content-Length's digits, after "chunked" and after
// "close": HTAB there got 400 (and kept a "Connection: close<HTAB>" connection open). A pipeline
// with HTAB before and after such values, written in two pieces split at every byte position, is
// answered in full; then "Connection: close<HTAB>" is answered and closes the connection.
TEST_P(HttpHello, TabIsOptionalWhiteSpaceLikeSpace) {
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), {}));
  const std::vector<std::string> accepted = {
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3 \r\n\r\nabc",
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\t\r\n\r\nabc",
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length:\t3\t \t\r\n\r\nabc",
      "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked \r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\t\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\tchunked\t\r\n\r\n0\r\n\r\n",
      "GET / HTTP/1.1\r\nHost:\ttest\t\r\nConnection: keep-alive\t\r\n\r\n",
  };
  std::string pipeline;
  for (const auto& request : accepted) pipeline += request;
  const std::string answers = repeat(hello_response, accepted.size());
  const int fd = server_.try_connect();
  ASSERT_GE(fd, 0);
  fd_closer closer{fd};
  ASSERT_TRUE(send_all(fd, pipeline));
  ASSERT_EQ(receive(fd, answers.size(), 5s), answers);
  for (std::size_t split = 1; split < pipeline.size(); ++split) {
    SCOPED_TRACE("split at " + std::to_string(split));
    ASSERT_TRUE(send_all(fd, std::string_view(pipeline).substr(0, split)));
    ASSERT_TRUE(send_all(fd, std::string_view(pipeline).substr(split)));
    ASSERT_EQ(receive(fd, answers.size(), 5s), answers);
  }
  ASSERT_TRUE(send_all(fd, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\t\r\n\r\n" +
                               std::string(get_request)));
  EXPECT_EQ(receive(fd, hello_response.size(), 5s), hello_response);
  std::string extra;
  EXPECT_EQ(wait_for_close(fd, 5s, &extra), ending::closed)
      << "answered a request after Connection: close<HTAB>: " << extra;
}

}  // namespace

namespace {

// --- HTTPS (--tls cert key) -----------------------------------------------------------------------

// `request` over TLS on `fd` (a blocking socket) with OpenSSL, verifying the server against
// `authority_pem` and the name "localhost"; everything read until the server's close_notify, or
// the failure in brackets.
std::string https_exchange(int fd, const std::string& authority_pem, std::string_view request) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> pem(BIO_new_mem_buf(authority_pem.data(), int(authority_pem.size())),
                                                &BIO_free);
  X509* authority = PEM_read_bio_X509(pem.get(), nullptr, nullptr, nullptr);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(context.get()), authority);
  X509_free(authority);
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context.get()), &SSL_free);
  SSL_set_fd(ssl.get(), fd);
  SSL_set_tlsext_host_name(ssl.get(), "localhost");
  SSL_set1_host(ssl.get(), "localhost");
  if (SSL_connect(ssl.get()) != 1) return "[handshake failed]";
  if (SSL_write(ssl.get(), request.data(), int(request.size())) != int(request.size())) return "[write failed]";
  std::string got;
  char chunk[4096];
  for (;;) {
    const int n = SSL_read(ssl.get(), chunk, sizeof chunk);
    if (n > 0) {
      got.append(chunk, std::size_t(n));
      continue;
    }
    if (SSL_get_error(ssl.get(), n) == SSL_ERROR_ZERO_RETURN) return got;
    return got + "[ended without close_notify]";
  }
}

// 20. HTTPS: the same answers over TLS (keep-alive, then "Connection: close" ended with
// close_notify); a plain-text request on the TLS port is not answered and the server keeps serving.
TEST_P(HttpHello, ServesHttpsWithTheTlsOption) {
  spindle::testing::test_certificate_authority authority;
  const spindle::testing::tls_identity identity = authority.issue("localhost", "DNS:localhost,IP:127.0.0.1");
  spindle::testing::temporary_directory directory;
  server_options options;
  options.arguments = {"--tls", directory.write("cert.pem", identity.certificate_pem).string(),
                       directory.write("key.pem", identity.key_pem).string()};
  ASSERT_NO_FATAL_FAILURE(server_.start(GetParam(), options));
  const std::string close_request = "GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
  for (int round = 0; round < 2; ++round) {
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    EXPECT_EQ(https_exchange(fd, authority.certificate_pem(), std::string(get_request) + close_request),
              repeat(hello_response, 2));
  }
  {
    const int fd = server_.try_connect();
    ASSERT_GE(fd, 0);
    fd_closer closer{fd};
    ASSERT_TRUE(send_all(fd, get_request));
    std::string extra;
    const ending end = wait_for_close(fd, patience, &extra);
    EXPECT_NE(end, ending::timeout);
    EXPECT_EQ(extra.find("HTTP/1.1"), std::string::npos) << extra;
  }
  const int fd = server_.try_connect();
  ASSERT_GE(fd, 0);
  fd_closer closer{fd};
  EXPECT_EQ(https_exchange(fd, authority.certificate_pem(), close_request), hello_response);
  // Back to the idle server's descriptors: every TLS connection was closed.
  EXPECT_TRUE(server_.fds_become(server_.baseline_fds())) << server_.open_fds();
}

}  // namespace
