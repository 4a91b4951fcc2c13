// TCP and UDP for tasks (I5): every call is awaitable, cancellable (task cancellation cancels
// the operation in flight, with_timeout works) and runs on the reactor of the executor running
// the task (core/reactor.hpp, io/io_wait.hpp).
//
// Errors (the vocabulary of core/errors.hpp): what the kernel refuses is std::system_error
// carrying the errno (std::system_category()), the same everywhere (an operation on a closed or
// moved-from socket included: EBADF, as the system call would say); end of stream is not an
// error (read returns 0, read_exact throws std::system_error(ECONNRESET-style) only if the
// stream ends early: see each call). A malformed argument spindle checks itself (an address
// that does not parse, the unspecified endpoint{} given to connect/bind/send_to) is
// spindle::usage_error, thrown before any system call, as in every other module (it is a
// std::invalid_argument, which these calls threw before).
// Cancellation: task_cancelled, as for every other wait.
// Objects own their file descriptor (closed by close() or, synchronously, by the destructor);
// they are movable, not copyable. Using one from two tasks at once is allowed for one reader plus
// one writer (full duplex), not for two readers.
// Deadlines (io/deadline.hpp): every call that waits takes an optional io::deadline as its last
// argument (connect, accept, read, read_exact, write, write_all, write_vectored, send_to,
// receive_from; unix.hpp's calls too); when it passes first, the operation in flight is cancelled
// and the call throws spindle::timeout_error (the same exception as with_timeout). An operation
// that completed before the cancellation took effect keeps its result: a connection accepted at
// the deadline is returned, or stays in the backlog for the next accept; a datagram is returned,
// or stays queued for the next receive. After a timeout the bytes a stream read or write moved
// are unknown (a read_exact's buffer holds them; a write_all may have sent a prefix); a timed-out
// connect closed its socket. The default, deadline::none(), arms nothing and costs nothing.
// Vectored writes (write_vectored, write_all over a buffer_list): one sendmsg(2) carries up to
// IOV_MAX buffers, so a burst of small writes is one system call (docs/design/io.md, "Vectored
// writes"); write_all over a list resumes exactly where a short write stopped, across buffer
// boundaries. Empty buffers are skipped; an empty list sends nothing. The buffers (and the list
// itself) must stay valid until the call's task completes.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "spindle/core/errors.hpp"
#include "spindle/io/buffer_list.hpp"
#include "spindle/io/deadline.hpp"
#include "spindle/task/task.hpp"
#include "spindle/time/timeout.hpp"

namespace spindle::net {

using io::deadline;

// The buffers of a vectored write, e.g. a std::array or std::vector of std::span<const byte>
// (io/buffer_list.hpp: the same type as io::file's vectored writes).
using io::buffer_list;

// An IPv4 or IPv6 address with a port.
class endpoint {
 public:
  endpoint() = default;
  // Parses a numeric IPv4 or IPv6 address ("127.0.0.1", "::1", "0.0.0.0", "fe80::1"); throws
  // usage_error on anything else (host names, ports, brackets, empty text). Host names need a
  // lookup, which may block: co_await net::resolve(host, port) (net/resolve.hpp).
  endpoint(std::string_view address, std::uint16_t port);
  static endpoint loopback_v4(std::uint16_t port);
  static endpoint any_v4(std::uint16_t port);
  // Copies an AF_INET / AF_INET6 address; usage_error for null, another family or a length too
  // short for the family.
  static endpoint from_native(const sockaddr* address, socklen_t length);

  std::uint16_t port() const noexcept;
  std::string to_string() const;  // "127.0.0.1:8080", "[::1]:8080"; "" for endpoint{}
  const sockaddr* native() const noexcept { return reinterpret_cast<const sockaddr*>(&storage_); }
  sockaddr* native() noexcept { return reinterpret_cast<sockaddr*>(&storage_); }
  socklen_t native_length() const noexcept { return length_; }
  int family() const noexcept { return storage_.ss_family; }

  // Same family, address, port (and IPv6 scope).
  friend bool operator==(const endpoint& a, const endpoint& b) noexcept;

 private:
  sockaddr_storage storage_{};
  socklen_t length_ = 0;
};

class tcp_stream {
 public:
  tcp_stream() = default;
  explicit tcp_stream(int fd) noexcept : fd_(fd) {}
  tcp_stream(tcp_stream&& other) noexcept;
  tcp_stream& operator=(tcp_stream&& other) noexcept;
  ~tcp_stream();

  // Connects a new socket to `remote` (std::system_error, e.g. ECONNREFUSED, on failure;
  // usage_error for the unspecified endpoint{}). The deadline covers the handshake.
  static task<tcp_stream> connect(endpoint remote, deadline limit = {});
  // Resolves `host` (net/resolve.hpp: numeric hosts at once, names on the resolver's helper
  // threads) and connects to its addresses in order, one after the other (not happy eyeballs),
  // until one accepts; when all fail, the last failure is thrown. One deadline covers the lookup
  // and every attempt. Defined in src/net/resolve.cpp.
  static task<tcp_stream> connect(std::string host, std::uint16_t port, deadline limit = {});

  // Reads at most buffer.size() bytes; 0 means the peer closed its side (an empty buffer also
  // gives 0, at once).
  task<std::size_t> read(std::span<std::byte> buffer, deadline limit = {});
  // Reads exactly buffer.size() bytes; throws std::system_error(ECONNRESET) if the stream ends
  // first (the bytes read so far are in the buffer; the count is in the message).
  task<void> read_exact(std::span<std::byte> buffer, deadline limit = {});
  // Writes at most buffer.size() bytes, returns how many (short writes happen). A peer that is
  // gone gives std::system_error(EPIPE or ECONNRESET), never SIGPIPE.
  task<std::size_t> write(std::span<const std::byte> buffer, deadline limit = {});
  // Writes all of buffer (if it throws, a prefix of unknown length may have been sent).
  task<void> write_all(std::span<const std::byte> buffer, deadline limit = {});
  task<void> write_all(std::string_view text, deadline limit = {});
  // One sendmsg of up to IOV_MAX buffers: the bytes sent (short writes happen; 0 for an empty
  // list, at once).
  task<std::size_t> write_vectored(buffer_list buffers, deadline limit = {});
  // Writes every byte of every buffer, in order, one sendmsg per step.
  task<void> write_all(buffer_list buffers, deadline limit = {});
  // shutdown(2): SHUT_WR after the last write, SHUT_RD, SHUT_RDWR. Synchronous.
  void shutdown(int how = SHUT_WR);
  // Closes through the reactor (awaitable); the destructor closes synchronously if still open.
  task<void> close();

  bool is_open() const noexcept { return fd_ >= 0; }
  int native_handle() const noexcept { return fd_; }
  endpoint local_endpoint() const;
  endpoint remote_endpoint() const;
  void set_no_delay(bool enabled);

 private:
  int fd_ = -1;
};

class tcp_listener {
 public:
  tcp_listener() = default;
  tcp_listener(tcp_listener&& other) noexcept;
  tcp_listener& operator=(tcp_listener&& other) noexcept;
  ~tcp_listener();

  // socket + SO_REUSEADDR + bind + listen; port 0 picks a free port (see local_endpoint()).
  // Synchronous (usable from plain threads too). usage_error for the unspecified endpoint{}.
  static tcp_listener bind(endpoint local, int backlog = 1024);

  // Waits for a connection. When the process is out of file descriptors (EMFILE/ENFILE) it
  // waits briefly and tries again instead of failing, so a server keeps serving.
  task<tcp_stream> accept(deadline limit = {});
  task<void> close();

  bool is_open() const noexcept { return fd_ >= 0; }
  int native_handle() const noexcept { return fd_; }
  endpoint local_endpoint() const;

 private:
  int fd_ = -1;
};

class udp_socket {
 public:
  udp_socket() = default;
  udp_socket(udp_socket&& other) noexcept;
  udp_socket& operator=(udp_socket&& other) noexcept;
  ~udp_socket();

  // socket + bind; port 0 picks a free port. Synchronous. usage_error for endpoint{}.
  static udp_socket bind(endpoint local);

  // Sends one datagram; usage_error for the unspecified endpoint{}, system_error otherwise.
  task<std::size_t> send_to(std::span<const std::byte> datagram, endpoint remote,
                            deadline limit = {});
  // Receives one datagram (truncated to buffer.size()); returns the bytes stored in buffer, the
  // sender, and whether the datagram was longer than the buffer (the rest is discarded).
  struct received {
    std::size_t size;
    endpoint sender;
    bool truncated = false;
  };
  task<received> receive_from(std::span<std::byte> buffer, deadline limit = {});
  task<void> close();

  bool is_open() const noexcept { return fd_ >= 0; }
  int native_handle() const noexcept { return fd_; }
  endpoint local_endpoint() const;

 private:
  int fd_ = -1;
};

// Bytes of a string, for write_all/send_to.
inline std::span<const std::byte> as_bytes(std::string_view text) noexcept {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

}  // namespace spindle::net
