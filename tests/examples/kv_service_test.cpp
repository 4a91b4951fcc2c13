// examples/kv_service/ run as a process, as the README starts it: on port 0 it names the port
// it got on stderr, answers a client, and on SIGTERM closes the connections it has, says
// "kv_service stopped" and exits with status 0. (The service's behaviour under load, killed
// sessions and shards included, is tested in-process in every preset:
// tests/actor/kv_service_test.cpp.)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#ifndef SPINDLE_EXAMPLE_PROGRAM
#error "SPINDLE_EXAMPLE_PROGRAM (the path of spindle-example-kv_service) must be defined"
#endif

namespace {

using namespace std::chrono_literals;
constexpr int patience_ms = 20000;  // only turns a hang into a failure

// Reads from `fd` into `text` until it holds `marker` followed by a newline (or the stream
// ends, or the patience runs out): false then.
bool read_until(int fd, std::string& text, std::string_view marker) {
  for (;;) {
    const std::size_t at = text.find(marker);
    if (at != std::string::npos && text.find('\n', at) != std::string::npos) return true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, patience_ms) != 1) return false;
    char chunk[512];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) return false;
    text.append(chunk, std::size_t(n));
  }
}

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(KvServiceExample, ServesAClientAndStopsCleanlyOnSigterm) {
  int log[2];
  ASSERT_EQ(::pipe2(log, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(log[1], STDERR_FILENO);
    ::execl(SPINDLE_EXAMPLE_PROGRAM, SPINDLE_EXAMPLE_PROGRAM, "0", "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(log[1]);
  std::string output;
  constexpr std::string_view marker = "listening on 127.0.0.1:";
  ASSERT_TRUE(read_until(log[0], output, marker)) << output;
  const auto port = std::uint16_t(std::atoi(output.c_str() + output.find(marker) + marker.size()));
  ASSERT_NE(port, 0) << output;

  const int fd = connect_to(port);
  ASSERT_GE(fd, 0);
  const std::string requests = "SET greeting hello world\nGET greeting\nDEL greeting\nPING\n";
  ASSERT_EQ(::send(fd, requests.data(), requests.size(), MSG_NOSIGNAL), ssize_t(requests.size()));
  std::string replies;
  ASSERT_TRUE(read_until(fd, replies, "PONG")) << replies;
  EXPECT_EQ(replies, "OK\nVALUE hello world\nDELETED\nPONG\n");

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  // The connection is closed by the server's stop (end of stream, no more bytes).
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, patience_ms), 1);
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);
  ::close(fd);
  EXPECT_TRUE(read_until(log[0], output, "kv_service stopped")) << output;
  int status = -1;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  ::close(log[0]);
}

}  // namespace
