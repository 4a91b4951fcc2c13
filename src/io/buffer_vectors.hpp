// Walking a buffer_list (io/buffer_list.hpp) in iovec batches, for the vectored writes of sockets
// (src/net/stream_calls.cpp: sendmsg) and files (src/io/file.cpp: writev). Private to src.
//
// A batch holds at most IOV_MAX iovecs and at most `most_bytes` bytes (the reactor's result is an
// int32, and Linux stops at 0x7ffff000 per call anyway); empty buffers are skipped. After a write
// of `n` bytes, advance() moves the position past exactly those bytes, inside a buffer or across
// boundaries, so a short write continues with the exact next byte.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <vector>

#include "spindle/io/buffer_list.hpp"

namespace spindle::io::detail {

// The most bytes one batch carries (Linux's own limit per read/write call).
inline constexpr std::size_t max_batch_bytes = 0x7ffff000;

// Where a vectored write stands: buffers[index] from byte `offset` on is still to be written.
struct vector_position {
  std::size_t index = 0;
  std::size_t offset = 0;
};

// Fills `vectors` (cleared first) with what is left from `at`: the next batch; empty when
// nothing is left.
void fill_vectors(buffer_list buffers, vector_position at, std::vector<iovec>& vectors);

// Moves `at` past `written` bytes (and past empty buffers).
void advance(buffer_list buffers, vector_position& at, std::size_t written);

}  // namespace spindle::io::detail
