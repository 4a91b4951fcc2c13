// The calls every stream socket has (tcp_stream, unix_stream: include/spindle/net/net.hpp and
// net/unix.hpp), and the listeners' accept, as coroutines over a descriptor, so the two classes
// share one implementation (private to src/net); the members forward to them, so no extra frame. Retry policy and buffer lifetimes: net_common.hpp; deadlines:
// io/deadline.hpp (`limit`, resolved once when the call starts, covers every step of the call).
//
// The descriptor is the value the member passed when the call was made (the members forward,
// they are not coroutines themselves): closing or moving the stream while a call is pending is
// the caller's race, as before.
//
// Vectored writes: one sendmsg with at most IOV_MAX iovecs and at most 0x7ffff000 bytes (the
// kernel's result is an int32; src/io/buffer_vectors.hpp makes the batches). write_vectored sends one such batch (a short write is normal);
// write_all_vectored loops, resuming inside the buffer where the kernel stopped, so a short
// write across an iovec boundary (or in the middle of one) continues with the exact next byte.
// Empty buffers are skipped; an empty list sends nothing and makes no system call.
//
// stream_write_all (one buffer): on io_uring every send goes through the ring, so the sends of
// one time slice reach the kernel in one io_uring_enter (seed 000's batch). A plain send(2) per
// call (Asio's speculative write) was measured against this: with the server CPU-bound, batched
// sends serve 15% more requests per CPU second (docs/design/benchmarks.md, "http"). epoll has no
// batch to join (each send is its own system call there too), so it keeps the speculative send,
// which saves the suspension: whatever does not fit goes through the reactor. The vectored
// write_all does the same with sendmsg.
//
// accept_stream: EINTR, ECONNABORTED (the client gave up before it was taken) and EPROTO take the
// next connection; when the process is out of descriptors (EMFILE/ENFILE, or socket memory:
// ENOBUFS/ENOMEM) it pauses briefly (never past the deadline) and tries again, so a server keeps
// serving once descriptors are freed: the connection waits in the backlog meanwhile. A deadline
// that cancels the accept leaves a connection that arrived at that moment either returned (the
// accept completed first) or in the backlog for the next accept: never taken and dropped.
#pragma once

#include <cstddef>
#include <span>

#include "spindle/io/buffer_list.hpp"
#include "spindle/io/deadline.hpp"
#include "spindle/task/task.hpp"

namespace spindle::net::detail {

using io::buffer_list;

task<std::size_t> stream_read(int fd, std::span<std::byte> buffer, io::deadline limit);
task<void> stream_read_exact(int fd, std::span<std::byte> buffer, io::deadline limit);
task<std::size_t> stream_write(int fd, std::span<const std::byte> buffer, io::deadline limit);
task<void> stream_write_all(int fd, std::span<const std::byte> buffer, io::deadline limit);
task<std::size_t> stream_write_vectored(int fd, buffer_list buffers, io::deadline limit);
task<void> stream_write_all_vectored(int fd, buffer_list buffers, io::deadline limit);

// Accepts one connection on the listening socket `fd`, as a Stream (tcp_stream, unix_stream:
// instantiated for those two in stream_calls.cpp).
template <class Stream>
task<Stream> accept_stream(int fd, io::deadline limit);

}  // namespace spindle::net::detail
