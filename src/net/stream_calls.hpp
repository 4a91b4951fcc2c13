// The calls every stream socket has (tcp_stream, unix_stream: include/spindle/net/net.hpp and
// net/unix.hpp), as coroutines over a descriptor, so the two classes share one implementation
// (private to src/net). Retry policy and buffer lifetimes: net_common.hpp; deadlines:
// io/deadline.hpp (`limit`, resolved once when the call starts, covers every step of the call).
//
// The descriptor is the value the member passed when the call was made (the members forward,
// they are not coroutines themselves): closing or moving the stream while a call is pending is
// the caller's race, as before.
//
// Vectored writes: one sendmsg with at most IOV_MAX iovecs and at most max_message bytes (the
// kernel's result is an int32). write_vectored sends one such batch (a short write is normal);
// write_all_vectored loops, resuming inside the buffer where the kernel stopped, so a short
// write across an iovec boundary (or in the middle of one) continues with the exact next byte.
// Empty buffers are skipped; an empty list sends nothing and makes no system call.
#pragma once

#include <cstddef>
#include <span>

#include "spindle/io/deadline.hpp"
#include "spindle/task/task.hpp"

namespace spindle::net::detail {

using buffer_list = std::span<const std::span<const std::byte>>;

task<std::size_t> stream_read(int fd, std::span<std::byte> buffer, io::deadline limit);
task<void> stream_read_exact(int fd, std::span<std::byte> buffer, io::deadline limit);
task<std::size_t> stream_write(int fd, std::span<const std::byte> buffer, io::deadline limit);
task<void> stream_write_all(int fd, std::span<const std::byte> buffer, io::deadline limit);
task<std::size_t> stream_write_vectored(int fd, buffer_list buffers, io::deadline limit);
task<void> stream_write_all_vectored(int fd, buffer_list buffers, io::deadline limit);

}  // namespace spindle::net::detail
