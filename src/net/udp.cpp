// udp_socket (include/spindle/net/net.hpp): the calls are datagram_calls.hpp's (sendmsg/recvmsg
// on io::submit_and_wait). Retry policy and buffer lifetimes: net_common.hpp.
#include <cstring>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/net/net.hpp"
#include "net/datagram_calls.hpp"
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

// The datagram calls are shared with unix_datagram (datagram_calls.hpp). These forward rather
// than await, so no extra coroutine frame is made; the destination is copied into the shared
// call's frame.
task<std::size_t> udp_socket::send_to(std::span<const std::byte> datagram, endpoint remote,
                                      deadline limit) {
  sockaddr_storage destination{};
  std::memcpy(&destination, remote.native(), remote.native_length());
  return detail::datagram_send_to(fd_, datagram, destination, remote.native_length(),
                                  "spindle: udp_socket::send_to an unspecified endpoint", limit);
}

task<udp_socket::received> udp_socket::receive_from(std::span<std::byte> buffer, deadline limit) {
  return detail::datagram_receive_from<received>(fd_, buffer, limit);
}

task<void> udp_socket::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0) co_await detail::close_through_reactor(fd);
}

endpoint udp_socket::local_endpoint() const { return detail::socket_name(fd_, false); }

}  // namespace spindle::net
