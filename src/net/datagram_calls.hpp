// The calls every datagram socket has (udp_socket: include/spindle/net/net.hpp; unix_datagram:
// net/unix.hpp), as coroutines over a descriptor, so the two classes share one implementation
// (private to src/net); the members forward to them, so no extra frame. Retry policy and buffer
// lifetimes: net_common.hpp; deadlines: io/deadline.hpp.
//
// Addresses: datagram_send_to takes the destination by value, as a sockaddr_storage (a
// sockaddr_in, sockaddr_in6 or sockaddr_un fits), so it lives in the coroutine's frame until the
// kernel is done with it whatever the caller does with its endpoint. datagram_receive_from reads
// the sender's address and its length (msg_namelen, which both backends copy back, as
// recvmsg(2) does: an abstract unix name's length is only known from it; an unnamed unix sender
// gives 0, read as just the family).
//
// Truncation: recvmsg is given MSG_TRUNC, so its result is the datagram's real length and a
// datagram longer than the buffer shows on every backend (whether or not it copies msg_flags
// back); the rest of it is discarded by the kernel.
//
// A deadline that cancels a receive leaves a datagram that arrived at that moment either returned
// (the receive completed first) or still queued for the next receive: a cancelled recvmsg has
// taken nothing. A cancelled send either sent its datagram whole (and returns its size) or not at
// all: a datagram is never sent in part.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <span>

#include "spindle/io/deadline.hpp"
#include "spindle/task/task.hpp"

namespace spindle::net::detail {

// Sends `datagram` to `destination` (its first `length` bytes). A length of no more than the
// family (the unspecified endpoint{}, an unnamed unix_endpoint) is usage_error(`unspecified`).
task<std::size_t> datagram_send_to(int fd, std::span<const std::byte> datagram,
                                   sockaddr_storage destination, socklen_t length,
                                   const char* unspecified, io::deadline limit);

// Receives one datagram into `buffer`, as a Received (udp_socket::received,
// unix_datagram::received: instantiated for those two in datagram_calls.cpp).
template <class Received>
task<Received> datagram_receive_from(int fd, std::span<std::byte> buffer, io::deadline limit);

}  // namespace spindle::net::detail
