// udp_socket (include/spindle/net/net.hpp), on io::submit_and_wait with sendmsg/recvmsg.
// Retry policy and buffer lifetimes: net_common.hpp.
#include <sys/uio.h>

#include <cerrno>
#include <stdexcept>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/io/io_wait.hpp"
#include "spindle/net/net.hpp"
#include "net/net_common.hpp"

namespace spindle::net {

using core::io_opcode;
using core::io_operation;

udp_socket::udp_socket(udp_socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

udp_socket& udp_socket::operator=(udp_socket&& other) noexcept {
  if (this != &other) {
    detail::close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

udp_socket::~udp_socket() { detail::close_quietly(fd_); }

udp_socket udp_socket::bind(endpoint local) {
  if (local.native_length() == 0) {
    throw usage_error("spindle: udp_socket::bind to an unspecified endpoint");
  }
  udp_socket socket;
  socket.fd_ = detail::open_socket(local.family(), SOCK_DGRAM);
  if (::bind(socket.fd_, local.native(), local.native_length()) != 0) detail::throw_errno("bind");
  return socket;
}

task<std::size_t> udp_socket::send_to(std::span<const std::byte> datagram, endpoint remote) {
  if (fd_ < 0) detail::throw_error(EBADF, "sendmsg");
  if (remote.native_length() == 0) {
    throw usage_error("spindle: udp_socket::send_to an unspecified endpoint");
  }
  // The iovec, the msghdr and `remote` (a parameter) live in this frame until the kernel is done.
  iovec vector{const_cast<std::byte*>(datagram.data()), datagram.size()};
  for (;;) {
    msghdr message{};
    message.msg_name = remote.native();
    message.msg_namelen = remote.native_length();
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    io_operation op = detail::make_operation(io_opcode::sendmsg, fd_);
    op.message = &message;
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result >= 0) co_return static_cast<std::size_t>(result);
    if (result == -EINTR) continue;
    if (!detail::would_block(result)) detail::throw_error(-result, "sendmsg");
    io_operation ready = detail::make_poll(fd_, POLLOUT);
    detail::check_poll(co_await io::submit_and_wait(ready));
  }
}

task<udp_socket::received> udp_socket::receive_from(std::span<std::byte> buffer) {
  if (fd_ < 0) detail::throw_error(EBADF, "recvmsg");
  iovec vector{buffer.data(), buffer.size()};
  sockaddr_storage sender{};
  for (;;) {
    msghdr message{};
    message.msg_name = &sender;
    message.msg_namelen = sizeof sender;
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    io_operation op = detail::make_operation(io_opcode::recvmsg, fd_);
    op.message = &message;
    // MSG_TRUNC: the result is the datagram's real length, so truncation shows on every backend
    // (whether or not it copies msg_flags back).
    op.flags = MSG_TRUNC;
    const std::int32_t result = co_await io::submit_and_wait(op);
    if (result >= 0) {
      const auto length = static_cast<std::size_t>(result);
      const bool truncated = length > buffer.size() || (message.msg_flags & MSG_TRUNC) != 0;
      // msg_namelen may not be copied back by every backend: the family tells the length.
      co_return received{truncated ? buffer.size() : length,
                         endpoint::from_native(reinterpret_cast<const sockaddr*>(&sender),
                                               sizeof sender),
                         truncated};
    }
    if (result == -EINTR) continue;
    if (!detail::would_block(result)) detail::throw_error(-result, "recvmsg");
    io_operation ready = detail::make_poll(fd_, POLLIN);
    detail::check_poll(co_await io::submit_and_wait(ready));
  }
}

task<void> udp_socket::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

endpoint udp_socket::local_endpoint() const { return detail::socket_name(fd_, false); }

}  // namespace spindle::net
