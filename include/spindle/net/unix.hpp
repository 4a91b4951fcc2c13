// Unix domain sockets for tasks: streams (unix_listener / unix_stream, the calls of tcp_stream)
// and datagrams (unix_datagram), on both reactor backends, with the conventions of net.hpp
// (errors, cancellation, deadlines, ownership, one reader plus one writer at a time).
//
// Addresses (unix_endpoint): a path in the file system ("/run/app.sock", at most 107 bytes, no
// NUL), or a Linux abstract name (unix_endpoint::abstract("app"): no file, any bytes, at most
// 107; it disappears with the last socket bound to it), or unnamed (a socket never bound, e.g.
// the client side of a connection, or either end of pair()).
//
// Unlink semantics (a path stays in the file system after its socket is closed, and a later bind
// to it fails with EADDRINUSE):
//   - bind() never removes an existing file: a stale socket file is EADDRINUSE, and the caller
//     decides (remove it with ::unlink if it knows the path is its own);
//   - a listener or datagram socket bound to a path unlinks that path when it is closed
//     (close() or the destructor), but only if the path still names the socket it bound (same
//     device and inode, checked with stat): a file some other process put there since is kept;
//   - a moved-from object unlinks nothing (the path goes with the move); abstract names and
//     unnamed sockets have nothing to unlink.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "spindle/net/net.hpp"

namespace spindle::net {

class unix_endpoint {
 public:
  // Unnamed (the unspecified address: connect/bind/send_to refuse it with usage_error).
  unix_endpoint() = default;
  // usage_error for an empty path, one of 108 bytes or more, or one containing NUL.
  static unix_endpoint path(std::string_view file_system_path);
  // usage_error for a name of 108 bytes or more (the empty name is allowed, as by Linux).
  static unix_endpoint abstract(std::string_view name);
  // Copies an AF_UNIX address of `length` bytes; usage_error for null or another family.
  static unix_endpoint from_native(const sockaddr* address, socklen_t length);

  bool is_unnamed() const noexcept { return length_ <= sizeof(sa_family_t); }
  bool is_abstract() const noexcept { return !is_unnamed() && address_.sun_path[0] == '\0'; }
  // The file system path ("" unless a path address).
  std::string path() const;
  // The abstract name without its leading NUL ("" unless abstract).
  std::string name() const;
  // The path, "@name" for an abstract name, "" for unnamed.
  std::string to_string() const;

  const sockaddr* native() const noexcept { return reinterpret_cast<const sockaddr*>(&address_); }
  socklen_t native_length() const noexcept { return length_; }
  friend bool operator==(const unix_endpoint& a, const unix_endpoint& b) noexcept;

 private:
  sockaddr_un address_{AF_UNIX, {}};
  socklen_t length_ = sizeof(sa_family_t);
};

class unix_stream {
 public:
  unix_stream() = default;
  explicit unix_stream(int fd) noexcept : fd_(fd) {}
  unix_stream(unix_stream&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unix_stream& operator=(unix_stream&& other) noexcept;
  ~unix_stream();

  // Connects to a listener (ECONNREFUSED if none; EAGAIN if its backlog is full: unix sockets
  // have no readiness event for that, so it is reported rather than waited for).
  static task<unix_stream> connect(unix_endpoint remote, deadline limit = {});
  // socketpair(2): two connected, unnamed streams. Synchronous.
  static std::pair<unix_stream, unix_stream> pair();

  task<std::size_t> read(std::span<std::byte> buffer, deadline limit = {});
  task<void> read_exact(std::span<std::byte> buffer, deadline limit = {});
  task<std::size_t> write(std::span<const std::byte> buffer, deadline limit = {});
  task<void> write_all(std::span<const std::byte> buffer, deadline limit = {});
  task<void> write_all(std::string_view text, deadline limit = {});
  task<std::size_t> write_vectored(buffer_list buffers, deadline limit = {});
  task<void> write_all(buffer_list buffers, deadline limit = {});
  void shutdown(int how = SHUT_WR);
  task<void> close();

  bool is_open() const noexcept { return fd_ >= 0; }
  int native_handle() const noexcept { return fd_; }
  unix_endpoint local_endpoint() const;
  unix_endpoint remote_endpoint() const;

 private:
  int fd_ = -1;
};

namespace detail {
// The path a listener or datagram socket bound, and the inode it named then: unlinked on close
// only while it still names that inode (see the top). Moving hands the duty over; `unlink_if_ours`
// clears it, so a second call does nothing. Owned by one socket object, on its owner's thread.
struct bound_unix_path {
  std::string path;  // "" if none
  dev_t device = 0;
  ino_t inode = 0;

  bound_unix_path() = default;
  bound_unix_path(bound_unix_path&& other) noexcept
      : path(std::exchange(other.path, {})), device(other.device), inode(other.inode) {}
  bound_unix_path& operator=(bound_unix_path&& other) noexcept {
    if (this != &other) {
      unlink_if_ours();
      path = std::exchange(other.path, {});
      device = other.device;
      inode = other.inode;
    }
    return *this;
  }
  ~bound_unix_path() { unlink_if_ours(); }
  void unlink_if_ours() noexcept;
};
}  // namespace detail

class unix_listener {
 public:
  unix_listener() = default;
  unix_listener(unix_listener&& other) noexcept;
  unix_listener& operator=(unix_listener&& other) noexcept;
  ~unix_listener();  // closes and unlinks (see the top)

  // socket + bind + listen. Synchronous. usage_error for the unnamed endpoint; EADDRINUSE if
  // the path exists.
  static unix_listener bind(unix_endpoint local, int backlog = 1024);
  task<unix_stream> accept(deadline limit = {});
  task<void> close();  // unlinks the path (see the top)

  bool is_open() const noexcept { return fd_ >= 0; }
  int native_handle() const noexcept { return fd_; }
  unix_endpoint local_endpoint() const;

 private:
  int fd_ = -1;
  detail::bound_unix_path bound_;  // the path to unlink on close
};

class unix_datagram {
 public:
  unix_datagram() = default;
  unix_datagram(unix_datagram&& other) noexcept;
  unix_datagram& operator=(unix_datagram&& other) noexcept;
  ~unix_datagram();  // closes and unlinks (see the top)

  // socket + bind. Synchronous. usage_error for the unnamed endpoint.
  static unix_datagram bind(unix_endpoint local);
  // A socket with no address: it can send; replies need an address (bind) or pair().
  static unix_datagram unbound();
  // socketpair(2): two connected datagram sockets (send/receive without addresses).
  static std::pair<unix_datagram, unix_datagram> pair();

  // Sends one datagram to `remote` (usage_error for unnamed; ECONNREFUSED if nothing is bound
  // there, ENOENT for a missing path).
  task<std::size_t> send_to(std::span<const std::byte> datagram, unix_endpoint remote,
                            deadline limit = {});
  // Sends one datagram to the connected peer (pair()).
  task<std::size_t> send(std::span<const std::byte> datagram, deadline limit = {});
  struct received {
    std::size_t size;
    unix_endpoint sender;  // unnamed if the sender never bound
    bool truncated = false;
  };
  task<received> receive_from(std::span<std::byte> buffer, deadline limit = {});
  task<void> close();

  bool is_open() const noexcept { return fd_ >= 0; }
  int native_handle() const noexcept { return fd_; }
  unix_endpoint local_endpoint() const;

 private:
  int fd_ = -1;
  detail::bound_unix_path bound_;  // the path to unlink on close
};

}  // namespace spindle::net
