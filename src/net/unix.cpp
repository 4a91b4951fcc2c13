// Unix domain sockets (include/spindle/net/unix.hpp). Stream calls and accept: stream_calls.hpp;
// datagram calls: datagram_calls.hpp; retry policy and buffer lifetimes: net_common.hpp.
#include "spindle/net/unix.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "spindle/core/errors.hpp"
#include "spindle/io/io_wait.hpp"
#include "net/datagram_calls.hpp"
#include "net/net_common.hpp"
#include "net/stream_calls.hpp"

namespace spindle::net {

using core::io_opcode;
using core::io_operation;

namespace {

constexpr std::size_t max_name = sizeof(sockaddr_un::sun_path) - 1;  // 107

unix_endpoint unix_socket_name(int fd, bool peer) {
  sockaddr_un address{};
  socklen_t length = sizeof address;
  auto* native = reinterpret_cast<sockaddr*>(&address);
  const int rc = peer ? ::getpeername(fd, native, &length) : ::getsockname(fd, native, &length);
  if (rc != 0) detail::throw_errno(peer ? "getpeername" : "getsockname");
  return unix_endpoint::from_native(native, length);
}

// Binds `fd` to `local`; for a path, records what close() may unlink later.
void bind_unix(int fd, const unix_endpoint& local, detail::bound_unix_path& bound) {
  if (::bind(fd, local.native(), local.native_length()) != 0) detail::throw_errno("bind");
  if (!local.is_abstract()) {
    struct stat info{};
    if (::stat(local.path().c_str(), &info) == 0) {
      bound.path = local.path();
      bound.device = info.st_dev;
      bound.inode = info.st_ino;
    }
  }
}

std::pair<int, int> socket_pair(int type) {
  int fds[2];
  if (::socketpair(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    detail::throw_errno("socketpair");
  }
  return {fds[0], fds[1]};
}

}  // namespace

// Unlinks the path if it still names the socket that was bound there (unix.hpp, the top).
void detail::bound_unix_path::unlink_if_ours() noexcept {
  if (path.empty()) return;
  struct stat info{};
  if (::stat(path.c_str(), &info) == 0 && info.st_dev == device && info.st_ino == inode) {
    ::unlink(path.c_str());
  }
  path.clear();
}

// --- unix_endpoint ----------------------------------------------------------------------------

unix_endpoint unix_endpoint::path(std::string_view file_system_path) {
  if (file_system_path.empty() || file_system_path.size() > max_name ||
      file_system_path.find('\0') != std::string_view::npos) {
    throw usage_error("spindle: not a unix socket path (1 to 107 bytes, no NUL): \"" +
                      std::string(file_system_path) + "\"");
  }
  unix_endpoint result;
  std::memcpy(result.address_.sun_path, file_system_path.data(), file_system_path.size());
  result.length_ = socklen_t(offsetof(sockaddr_un, sun_path) + file_system_path.size() + 1);
  return result;
}

unix_endpoint unix_endpoint::abstract(std::string_view name) {
  if (name.size() > max_name) {
    throw usage_error("spindle: an abstract unix socket name has at most 107 bytes");
  }
  unix_endpoint result;
  result.address_.sun_path[0] = '\0';
  std::memcpy(result.address_.sun_path + 1, name.data(), name.size());
  result.length_ = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return result;
}

unix_endpoint unix_endpoint::from_native(const sockaddr* address, socklen_t length) {
  if (address == nullptr || address->sa_family != AF_UNIX) {
    throw usage_error("spindle: unix_endpoint::from_native needs an AF_UNIX address");
  }
  unix_endpoint result;
  length = std::min<socklen_t>(length, sizeof(sockaddr_un));
  std::memcpy(&result.address_, address, length);
  result.length_ = std::max<socklen_t>(length, sizeof(sa_family_t));
  return result;
}

std::string unix_endpoint::path() const {
  if (is_unnamed() || is_abstract()) return {};
  const std::size_t room = length_ - offsetof(sockaddr_un, sun_path);
  return std::string(address_.sun_path, strnlen(address_.sun_path, room));
}

std::string unix_endpoint::name() const {
  if (!is_abstract()) return {};
  return std::string(address_.sun_path + 1, length_ - offsetof(sockaddr_un, sun_path) - 1);
}

std::string unix_endpoint::to_string() const {
  if (is_unnamed()) return {};
  return is_abstract() ? "@" + name() : path();
}

bool operator==(const unix_endpoint& a, const unix_endpoint& b) noexcept {
  if (a.is_unnamed() || b.is_unnamed()) return a.is_unnamed() && b.is_unnamed();
  if (a.is_abstract() != b.is_abstract()) return false;
  return a.is_abstract() ? a.name() == b.name() : a.path() == b.path();
}

// --- unix_stream ------------------------------------------------------------------------------

unix_stream& unix_stream::operator=(unix_stream&& other) noexcept {
  if (this != &other) {
    detail::close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

unix_stream::~unix_stream() { detail::close_quietly(fd_); }

task<unix_stream> unix_stream::connect(unix_endpoint remote, deadline limit) {
  // `remote` is a parameter: it lives in this frame, which the address points into.
  if (remote.is_unnamed()) throw usage_error("spindle: unix_stream::connect to an unnamed endpoint");
  const std::optional<clock_time> when = detail::resolve_limit(limit);
  unix_stream stream(detail::open_socket(AF_UNIX, SOCK_STREAM));
  for (;;) {
    io_operation op = detail::make_operation(io_opcode::connect, stream.fd_);
    op.address = const_cast<sockaddr*>(remote.native());
    op.connect_length = remote.native_length();
    const std::int32_t result = detail::checked(co_await io::submit_and_wait(op, when));
    if (result == 0 || result == -EISCONN) co_return stream;
    if (result == -EINTR) continue;
    // EAGAIN (a full backlog) included: nothing on this socket would announce room.
    detail::throw_error(-result, "connect");
  }
}

std::pair<unix_stream, unix_stream> unix_stream::pair() {
  const auto [a, b] = socket_pair(SOCK_STREAM);
  return {unix_stream(a), unix_stream(b)};
}

task<std::size_t> unix_stream::read(std::span<std::byte> buffer, deadline limit) {
  return detail::stream_read(fd_, buffer, limit);
}
task<void> unix_stream::read_exact(std::span<std::byte> buffer, deadline limit) {
  return detail::stream_read_exact(fd_, buffer, limit);
}
task<std::size_t> unix_stream::write(std::span<const std::byte> buffer, deadline limit) {
  return detail::stream_write(fd_, buffer, limit);
}
task<void> unix_stream::write_all(std::span<const std::byte> buffer, deadline limit) {
  return detail::stream_write_all(fd_, buffer, limit);
}
task<void> unix_stream::write_all(std::string_view text, deadline limit) {
  return detail::stream_write_all(fd_, as_bytes(text), limit);
}
task<std::size_t> unix_stream::write_vectored(buffer_list buffers, deadline limit) {
  return detail::stream_write_vectored(fd_, buffers, limit);
}
task<void> unix_stream::write_all(buffer_list buffers, deadline limit) {
  return detail::stream_write_all_vectored(fd_, buffers, limit);
}

void unix_stream::shutdown(int how) {
  if (::shutdown(fd_, how) != 0) detail::throw_errno("shutdown");
}

task<void> unix_stream::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

unix_endpoint unix_stream::local_endpoint() const { return unix_socket_name(fd_, false); }
unix_endpoint unix_stream::remote_endpoint() const { return unix_socket_name(fd_, true); }

// --- unix_listener ----------------------------------------------------------------------------

unix_listener::unix_listener(unix_listener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), bound_(std::move(other.bound_)) {}

unix_listener& unix_listener::operator=(unix_listener&& other) noexcept {
  if (this != &other) {
    bound_.unlink_if_ours();  // before the close, as the destructor
    detail::close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
    bound_ = std::move(other.bound_);
  }
  return *this;
}

unix_listener::~unix_listener() {
  bound_.unlink_if_ours();
  detail::close_quietly(fd_);
}

unix_listener unix_listener::bind(unix_endpoint local, int backlog) {
  if (local.is_unnamed()) throw usage_error("spindle: unix_listener::bind to an unnamed endpoint");
  unix_listener listener;
  listener.fd_ = detail::open_socket(AF_UNIX, SOCK_STREAM);
  bind_unix(listener.fd_, local, listener.bound_);
  if (::listen(listener.fd_, backlog) != 0) detail::throw_errno("listen");
  return listener;
}

task<unix_stream> unix_listener::accept(deadline limit) {
  return detail::accept_stream<unix_stream>(fd_, limit);
}

task<void> unix_listener::close() {
  bound_.unlink_if_ours();
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

unix_endpoint unix_listener::local_endpoint() const { return unix_socket_name(fd_, false); }

// --- unix_datagram ----------------------------------------------------------------------------

unix_datagram::unix_datagram(unix_datagram&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), bound_(std::move(other.bound_)) {}

unix_datagram& unix_datagram::operator=(unix_datagram&& other) noexcept {
  if (this != &other) {
    bound_.unlink_if_ours();  // before the close, as the destructor
    detail::close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
    bound_ = std::move(other.bound_);
  }
  return *this;
}

unix_datagram::~unix_datagram() {
  bound_.unlink_if_ours();
  detail::close_quietly(fd_);
}

unix_datagram unix_datagram::bind(unix_endpoint local) {
  if (local.is_unnamed()) throw usage_error("spindle: unix_datagram::bind to an unnamed endpoint");
  unix_datagram socket;
  socket.fd_ = detail::open_socket(AF_UNIX, SOCK_DGRAM);
  bind_unix(socket.fd_, local, socket.bound_);
  return socket;
}

unix_datagram unix_datagram::unbound() {
  unix_datagram socket;
  socket.fd_ = detail::open_socket(AF_UNIX, SOCK_DGRAM);
  return socket;
}

std::pair<unix_datagram, unix_datagram> unix_datagram::pair() {
  const auto [a, b] = socket_pair(SOCK_DGRAM);
  std::pair<unix_datagram, unix_datagram> result;
  result.first.fd_ = a;
  result.second.fd_ = b;
  return result;
}

// The datagram calls are shared with udp_socket (datagram_calls.hpp); the destination is copied
// into the shared call's frame.
task<std::size_t> unix_datagram::send_to(std::span<const std::byte> datagram, unix_endpoint remote,
                                         deadline limit) {
  static_assert(sizeof(sockaddr_un) <= sizeof(sockaddr_storage));
  sockaddr_storage destination{};
  std::memcpy(&destination, remote.native(), remote.native_length());
  return detail::datagram_send_to(fd_, datagram, destination, remote.native_length(),
                                  "spindle: unix_datagram::send_to an unnamed endpoint", limit);
}

task<std::size_t> unix_datagram::send(std::span<const std::byte> datagram, deadline limit) {
  return detail::stream_write(fd_, datagram, limit);
}

task<unix_datagram::received> unix_datagram::receive_from(std::span<std::byte> buffer,
                                                          deadline limit) {
  return detail::datagram_receive_from<received>(fd_, buffer, limit);
}

task<void> unix_datagram::close() {
  bound_.unlink_if_ours();
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

unix_endpoint unix_datagram::local_endpoint() const { return unix_socket_name(fd_, false); }

}  // namespace spindle::net
