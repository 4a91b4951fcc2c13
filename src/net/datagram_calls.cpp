// Datagram socket calls shared by udp_socket and unix_datagram (src/net/datagram_calls.hpp).
#include "net/datagram_calls.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <optional>

#include "spindle/core/errors.hpp"
#include "spindle/io/io_wait.hpp"
#include "spindle/net/net.hpp"
#include "spindle/net/unix.hpp"
#include "net/net_common.hpp"

namespace spindle::net::detail {

using core::io_opcode;
using core::io_operation;

task<std::size_t> datagram_send_to(int fd, std::span<const std::byte> datagram,
                                   sockaddr_storage destination, socklen_t length,
                                   const char* unspecified, io::deadline limit) {
  if (fd < 0) throw_error(EBADF, "sendmsg");
  if (length <= socklen_t(sizeof(sa_family_t))) throw usage_error(unspecified);
  const std::optional<clock_time> when = resolve_limit(limit);
  // The iovec, the msghdr and `destination` (a parameter) live in this frame until the kernel
  // is done with them.
  iovec vector{const_cast<std::byte*>(datagram.data()), datagram.size()};
  for (;;) {
    msghdr message{};
    message.msg_name = &destination;
    message.msg_namelen = length;
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    io_operation op = make_operation(io_opcode::sendmsg, fd);
    op.message = &message;
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result >= 0) co_return static_cast<std::size_t>(result);
    if (result == -EINTR) continue;
    if (!would_block(result)) throw_error(-result, "sendmsg");
    // No room (a full send buffer; for unix datagrams, the receiver's full queue): both report
    // writable once it drains.
    io_operation ready = make_poll(fd, POLLOUT);
    check_poll(checked(co_await io::submit_and_wait(ready, when)));
  }
}

template <class Received>
task<Received> datagram_receive_from(int fd, std::span<std::byte> buffer, io::deadline limit) {
  using sender_type = decltype(Received::sender);
  if (fd < 0) throw_error(EBADF, "recvmsg");
  const std::optional<clock_time> when = resolve_limit(limit);
  iovec vector{buffer.data(), buffer.size()};
  sockaddr_storage sender{};
  for (;;) {
    msghdr message{};
    message.msg_name = &sender;
    message.msg_namelen = sizeof sender;
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    io_operation op = make_operation(io_opcode::recvmsg, fd);
    op.message = &message;
    op.flags = MSG_TRUNC;  // the result is the datagram's real length (datagram_calls.hpp)
    const std::int32_t result = checked(co_await io::submit_and_wait(op, when));
    if (result >= 0) {
      const auto length = static_cast<std::size_t>(result);
      const bool truncated = length > buffer.size() || (message.msg_flags & MSG_TRUNC) != 0;
      if (message.msg_namelen == 0) sender.ss_family = AF_UNIX;  // an unnamed unix sender
      const socklen_t sender_length =
          message.msg_namelen == 0 ? socklen_t(sizeof(sa_family_t)) : message.msg_namelen;
      co_return Received{truncated ? buffer.size() : length,
                         sender_type::from_native(reinterpret_cast<const sockaddr*>(&sender),
                                                  sender_length),
                         truncated};
    }
    if (result == -EINTR) continue;
    if (!would_block(result)) throw_error(-result, "recvmsg");
    io_operation ready = make_poll(fd, POLLIN);
    check_poll(checked(co_await io::submit_and_wait(ready, when)));
  }
}

template task<udp_socket::received> datagram_receive_from<udp_socket::received>(
    int fd, std::span<std::byte> buffer, io::deadline limit);
template task<unix_datagram::received> datagram_receive_from<unix_datagram::received>(
    int fd, std::span<std::byte> buffer, io::deadline limit);

}  // namespace spindle::net::detail
