// Buffered reading and writing over a stream (tcp_stream, unix_stream, or anything with their
// read / write_all calls): delimited reads (read_until, read_line), length-prefixed frames
// (read_frame / write_frame), and writes gathered in a buffer until an explicit flush.
//
//   net::buffered_reader in(stream);
//   while (auto line = co_await in.read_line()) handle(*line);
//   net::buffered_writer out(stream);
//   co_await out.write("HTTP/1.1 200 OK\r\n");     // copied into the buffer: no system call
//   co_await out.write(body);                      // large: buffer + body in one sendmsg
//   co_await out.flush();
//
// Who takes part: one task reads through a reader, one task writes through a writer (the
// stream's full-duplex rule); a reader or writer is not shared between tasks. Both hold a
// reference to the stream, which must outlive them; each call refers to `*this` and to its
// arguments (out-parameters included) until its task completes, the usual rule for lazy tasks.
//
// Reader: a buffer of `capacity` bytes holds what the stream delivered beyond what was asked;
// every call takes from it first and reads the stream only when it lacks bytes (one read of up
// to the free room per step). read() of a buffer at least as large as the capacity, with nothing
// buffered, reads the stream directly (no copy). Limits keep a peer from making the reader grow
// without bound: read_until/read_line fail with std::system_error(EMSGSIZE) after `max_length`
// bytes without a delimiter, read_frame with EMSGSIZE for a length over `max_frame` (the
// stream is then out of step: close it). The reader's buffer grows only as much as a line needs.
// Frames: a 4-byte big-endian length, then that many bytes (the format of write_frame).
//
// Writer: write() copies bytes into the buffer while they fit; when they do not, it sends what
// is buffered and the new bytes together in one vectored write (tcp_stream::write_all over a
// buffer_list: one sendmsg), without copying them. flush() sends what is buffered. Nothing is
// sent behind the caller's back: the destructor does not flush (it cannot await), so bytes
// written and not flushed are dropped; flush before closing.
//
// Deadlines (io/deadline.hpp): each call's deadline covers the whole call (all the reads or
// writes it makes); timeout_error when it passes, as for the stream's own calls. Errors and
// cancellation are the stream's. After an error the reader's buffered bytes are kept (a
// timed-out read_line can be called again and continues); the writer's buffer is cleared by a
// failed flush (how much of it reached the peer is unknown).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "spindle/io/deadline.hpp"
#include "spindle/io/io_wait.hpp"
#include "spindle/net/net.hpp"
#include "spindle/task/task.hpp"

namespace spindle::net {

template <class Stream>
class buffered_reader {
 public:
  static constexpr std::size_t default_capacity = 8192;
  static constexpr std::size_t default_max_length = 64 * 1024;
  static constexpr std::size_t default_max_frame = 16 * 1024 * 1024;

  explicit buffered_reader(Stream& stream, std::size_t capacity = default_capacity)
      : stream_(stream), buffer_(std::max<std::size_t>(capacity, 1)) {}
  buffered_reader(const buffered_reader&) = delete;
  buffered_reader& operator=(const buffered_reader&) = delete;

  // Up to buffer.size() bytes: what is buffered, else one read of the stream. 0: the stream
  // ended (or an empty buffer).
  task<std::size_t> read(std::span<std::byte> buffer, deadline limit = {}) {
    if (buffer.empty()) co_return 0;
    if (start_ == end_ && buffer.size() >= buffer_.size()) {
      co_return co_await stream_.read(buffer, limit);  // large: no copy through the buffer
    }
    if (start_ == end_) {
      const std::size_t filled = co_await fill(limit);
      if (filled == 0) co_return 0;
    }
    co_return take(buffer);
  }

  // Exactly buffer.size() bytes; std::system_error(ECONNRESET) if the stream ends first.
  task<void> read_exact(std::span<std::byte> buffer, deadline limit = {}) {
    const deadline whole = io::whole_call_deadline(limit);
    std::size_t done = take(buffer);
    while (done < buffer.size()) {
      const std::size_t n = co_await read(buffer.subspan(done), whole);
      if (n == 0) {
        throw std::system_error(ECONNRESET, std::system_category(),
                                "spindle: read_exact: stream ended after " + std::to_string(done) +
                                    " of " + std::to_string(buffer.size()) + " bytes");
      }
      done += n;
    }
  }

  // Appends to `out` everything up to and including the first `delimiter`; returns the bytes
  // appended. If the stream ends first, appends what was left (no delimiter; 0 if nothing).
  task<std::size_t> read_until(std::string& out, char delimiter,
                               std::size_t max_length = default_max_length, deadline limit = {}) {
    const deadline whole = io::whole_call_deadline(limit);
    std::size_t scanned = 0;  // bytes of the buffered part already searched
    for (;;) {
      const char* begin = reinterpret_cast<const char*>(buffer_.data() + start_);
      const std::size_t available = end_ - start_;
      const void* found = std::memchr(begin + scanned, delimiter, available - scanned);
      if (found != nullptr) {
        const std::size_t length = std::size_t(static_cast<const char*>(found) - begin) + 1;
        if (length > max_length) throw_too_long("read_until");
        out.append(begin, length);
        start_ += length;
        co_return length;
      }
      scanned = available;
      if (available >= max_length) throw_too_long("read_until");
      const std::size_t filled = co_await fill(whole);
      if (filled == 0) {  // the stream ended: hand out the rest
        // Read where fill() left it: it moved the rest to the front, or into a grown buffer, so
        // `begin` no longer points at it.
        out.append(reinterpret_cast<const char*>(buffer_.data() + start_), end_ - start_);
        start_ = end_ = 0;
        co_return available;
      }
    }
  }

  // One line without its "\n" (or "\r\n"); nullopt once the stream ended with nothing left. A
  // last line without a newline is returned as it is.
  task<std::optional<std::string>> read_line(std::size_t max_length = default_max_length,
                                             deadline limit = {}) {
    std::string line;
    if (co_await read_until(line, '\n', max_length, limit) == 0) co_return std::nullopt;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      if (!line.empty() && line.back() == '\r') line.pop_back();
    }
    co_return line;
  }

  // One length-prefixed frame; nullopt if the stream ended exactly at a frame boundary;
  // std::system_error(ECONNRESET) if it ended inside a frame, EMSGSIZE for a length over
  // max_frame.
  task<std::optional<std::vector<std::byte>>> read_frame(std::size_t max_frame = default_max_frame,
                                                         deadline limit = {}) {
    const deadline whole = io::whole_call_deadline(limit);
    while (end_ - start_ < 4) {
      const std::size_t filled = co_await fill(whole);
      if (filled == 0) {
        if (start_ == end_) co_return std::nullopt;
        throw std::system_error(ECONNRESET, std::system_category(),
                                "spindle: read_frame: stream ended inside a frame header");
      }
    }
    const std::byte* header = buffer_.data() + start_;
    const std::uint32_t length = std::uint32_t(header[0]) << 24 | std::uint32_t(header[1]) << 16 |
                                 std::uint32_t(header[2]) << 8 | std::uint32_t(header[3]);
    if (length > max_frame) throw_too_long("read_frame");
    start_ += 4;
    std::vector<std::byte> payload(length);
    co_await read_exact(payload, whole);
    co_return payload;
  }

  // What is buffered and not handed out yet.
  std::span<const std::byte> buffered() const noexcept {
    return {buffer_.data() + start_, end_ - start_};
  }
  Stream& stream() const noexcept { return stream_; }

 private:
  [[noreturn]] static void throw_too_long(const char* call) {
    throw std::system_error(EMSGSIZE, std::system_category(),
                            std::string("spindle: ") + call + ": longer than the limit");
  }

  // Copies what is buffered into `buffer`; returns the bytes copied.
  std::size_t take(std::span<std::byte> buffer) noexcept {
    const std::size_t n = std::min(buffer.size(), end_ - start_);
    if (n != 0) std::memcpy(buffer.data(), buffer_.data() + start_, n);
    start_ += n;
    if (start_ == end_) start_ = end_ = 0;
    return n;
  }

  // Reads more into the buffer (moving what is left to the front, growing it if full); the
  // bytes read, 0 when the stream ended.
  task<std::size_t> fill(deadline limit) {
    if (start_ != 0) {
      std::memmove(buffer_.data(), buffer_.data() + start_, end_ - start_);
      end_ -= start_;
      start_ = 0;
    }
    if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);  // a long line
    // The buffer is not touched by anyone else until the read completes (one reader).
    const std::size_t n =
        co_await stream_.read(std::span<std::byte>(buffer_.data() + end_, buffer_.size() - end_),
                              limit);
    end_ += n;
    co_return n;
  }

  Stream& stream_;
  std::vector<std::byte> buffer_;
  std::size_t start_ = 0;  // first byte not handed out
  std::size_t end_ = 0;    // one past the last byte read
};

template <class Stream>
class buffered_writer {
 public:
  static constexpr std::size_t default_capacity = 8192;

  explicit buffered_writer(Stream& stream, std::size_t capacity = default_capacity)
      : stream_(stream), capacity_(std::max<std::size_t>(capacity, 1)) {
    buffer_.reserve(capacity_);
  }
  buffered_writer(const buffered_writer&) = delete;
  buffered_writer& operator=(const buffered_writer&) = delete;

  // Buffers `bytes` if they fit; otherwise sends the buffer and `bytes` in one vectored write.
  task<void> write(std::span<const std::byte> bytes, deadline limit = {}) {
    if (buffer_.size() + bytes.size() <= capacity_) {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
      co_return;
    }
    const std::span<const std::byte> both[2] = {buffer_, bytes};
    co_await send(buffer_list(both), limit);
  }
  task<void> write(std::string_view text, deadline limit = {}) {
    co_await write(as_bytes(text), limit);
  }

  // A length-prefixed frame (read_frame's format). usage_error over 4 GiB - 1 bytes.
  task<void> write_frame(std::span<const std::byte> payload, deadline limit = {}) {
    if (payload.size() > 0xffffffffu) throw usage_error("spindle: write_frame: frame too long");
    const auto length = std::uint32_t(payload.size());
    const std::byte header[4] = {std::byte(length >> 24), std::byte(length >> 16),
                                 std::byte(length >> 8), std::byte(length)};
    if (buffer_.size() + 4 + payload.size() <= capacity_) {
      buffer_.insert(buffer_.end(), header, header + 4);
      buffer_.insert(buffer_.end(), payload.begin(), payload.end());
      co_return;
    }
    // The header and the payload are in this frame or the caller's until the write completes.
    const std::span<const std::byte> all[3] = {buffer_, std::span<const std::byte>(header, 4),
                                               payload};
    co_await send(buffer_list(all), limit);
  }

  // Sends everything buffered.
  task<void> flush(deadline limit = {}) {
    if (buffer_.empty()) co_return;
    const std::span<const std::byte> one[1] = {buffer_};
    co_await send(buffer_list(one), limit);
  }

  std::size_t buffered_size() const noexcept { return buffer_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }
  Stream& stream() const noexcept { return stream_; }

 private:
  // One write_all over `buffers` (the first of which is buffer_), then the buffer is empty,
  // whether it succeeded or not.
  task<void> send(buffer_list buffers, deadline limit) {
    try {
      co_await stream_.write_all(buffers, limit);
    } catch (...) {
      buffer_.clear();
      throw;
    }
    buffer_.clear();
  }

  Stream& stream_;
  std::size_t capacity_;
  std::vector<std::byte> buffer_;
};

}  // namespace spindle::net
