// A tiny blocking HTTP client for the diagnostics server's tests (tests/diagnostics, and the
// live view example's test): sends raw bytes (well-formed or hostile) and reads the answer until
// the server closes, with a deadline. Never sleeps: every wait is a poll() with a timeout.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace spindle::test {

// A connected socket to 127.0.0.1:port (-1 on failure). The caller closes it. A nonzero
// `receive_buffer` is set before connecting (a client that reads slowly or not at all: the
// window it offers stays that small).
inline int connect_loopback(std::uint16_t port, int receive_buffer = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (receive_buffer > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

struct read_result {
  std::string bytes;
  bool closed = false;  // the server closed (EOF or reset) before the deadline
  bool reset = false;   // ... with a reset (ECONNRESET), not an orderly FIN
};

// Reads until the server closes the connection or `deadline` passes.
inline read_result read_until_close(int fd, std::chrono::milliseconds deadline) {
  read_result r;
  const auto until = std::chrono::steady_clock::now() + deadline;
  char buffer[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return r;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      r.closed = true;
      r.reset = n < 0 && errno == ECONNRESET;
      return r;
    }
    r.bytes.append(buffer, static_cast<std::size_t>(n));
  }
}

// Reads until the answer's head (status line and headers) is complete, the server closes, or
// `deadline` passes; the rest of the answer is left unread.
inline read_result read_head(int fd, std::chrono::milliseconds deadline) {
  read_result r;
  const auto until = std::chrono::steady_clock::now() + deadline;
  char buffer[512];
  while (r.bytes.find("\r\n\r\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return r;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      r.closed = true;
      r.reset = n < 0 && errno == ECONNRESET;
      return r;
    }
    r.bytes.append(buffer, static_cast<std::size_t>(n));
  }
  return r;
}

struct http_answer {
  int status = 0;  // 0: no status line came back
  std::string head;
  std::string body;
  bool closed = false;
  bool reset = false;  // the connection ended with a reset (whatever was read before it is kept)
  std::string header(std::string_view name) const {
    // Case-sensitive on the server's own spelling (it writes each header once).
    const std::string key = "\r\n" + std::string(name) + ": ";
    const auto at = head.find(key);
    if (at == std::string::npos) return {};
    const auto end = head.find("\r\n", at + key.size());
    return head.substr(at + key.size(), end - at - key.size());
  }
};

inline http_answer parse_answer(const read_result& r) {
  http_answer a;
  a.closed = r.closed;
  a.reset = r.reset;
  const auto end_of_head = r.bytes.find("\r\n\r\n");
  if (r.bytes.rfind("HTTP/1.1 ", 0) != 0 || end_of_head == std::string::npos) return a;
  a.status = std::stoi(r.bytes.substr(9, 3));
  a.head = r.bytes.substr(0, end_of_head + 2);
  a.body = r.bytes.substr(end_of_head + 4);
  return a;
}

// Sends `request` as it is and reads the whole answer.
inline http_answer http_exchange(std::uint16_t port, std::string_view request,
                            std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  const int fd = connect_loopback(port);
  if (fd < 0) return {};
  send_all(fd, request);
  const http_answer a = parse_answer(read_until_close(fd, deadline));
  ::close(fd);
  return a;
}

inline http_answer get(std::uint16_t port, std::string_view target) {
  return http_exchange(port, "GET " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

}  // namespace spindle::test
