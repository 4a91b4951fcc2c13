// Files in a task: positioned reads and writes, fsync/fdatasync and close through the reactor of
// the executor running the task (core/reactor.hpp, io/io_wait.hpp).
//
//   auto f = co_await spindle::io::file::open("data.bin", O_RDWR | O_CREAT);
//   co_await f.write_all_at(std::as_bytes(std::span(text)), 0);
//   std::size_t n = co_await f.read_at(buffer, 4096);     // may be short; 0 at end of file
//   co_await f.sync();
//   co_await f.close();                                   // or let the destructor close it
//
// Ownership: a `file` owns one file descriptor. It is movable (the moved-from file is closed,
// native_handle() == -1) and not copyable. The destructor closes a still open descriptor with a
// plain, synchronous ::close (a destructor cannot await); close() does it through the reactor.
//
// Every operation is a positioned one (pread/pwrite semantics): the file position is never used
// or moved, so several tasks may use one `file` at the same time at different offsets. (With
// O_APPEND, Linux's pwrite appends whatever the offset; write_at does the same.) Each
// member coroutine refers to `*this` and to the buffer it was given: both must stay valid until
// the returned task has been awaited to completion (the usual rule for lazy tasks).
//
// Which call does what, on both reactor backends:
//   - open(): ::open, synchronously on the calling worker (the reactor has no openat
//     operation; opening a regular file is a short metadata operation). O_CLOEXEC is always
//     added. Opening a FIFO without O_NONBLOCK blocks the worker until the other end opens:
//     don't, or pass O_NONBLOCK.
//   - read_at / write_at: one io_opcode::read / io_opcode::write at the offset. The length of
//     one operation is capped at max_transfer bytes (a longer buffer gives a short transfer).
//     read_at first tries preadv2(RWF_NOWAIT) on the worker: pages in the page cache are read
//     at once, without a round trip through the reactor (a task reading cached files was slower
//     than a plain read loop: see "Bridging async sources" in docs/design/fork-join.md). It
//     never blocks: pages the kernel would have to fetch, and every failure, go through the
//     reactor as before. Only regular files and block devices without O_DIRECT take it (fstat
//     and fcntl at the first read_at of a file, then remembered: O_DIRECT set with fcntl later
//     is not seen): RWF_NOWAIT would read an O_DIRECT file from the device, waiting for it on
//     the worker, and a character device at once however long that takes (/dev/urandom). Such
//     a read counts against the task's cooperative budget like any await that completes at once
//     (task/spawned_task.hpp), and the slice's clock is checked after it (one read copies up to
//     max_transfer bytes): a task reading a large cached file still yields about once per
//     service interval (once per read, for reads longer than that), and a cancelled task meets
//     its cancellation at the read. With a test hook on the reactor (fault injection) every read
//     goes through it.
//   - write_vectored_at: one io_opcode::writev (pwritev(2); IORING_OP_WRITEV) of up to IOV_MAX
//     buffers and max_transfer bytes, written one after the other from the offset; the
//     buffer_list (io/buffer_list.hpp) is the sockets' type. write_all_at over a list loops over
//     such batches, resuming at the exact byte a short write stopped at (inside a buffer or
//     across a boundary, and beyond IOV_MAX buffers). Empty buffers are skipped; an empty list
//     writes nothing and makes no system call.
//   - sync / sync_data: io_opcode::fsync, without / with IORING_FSYNC_DATASYNC (fdatasync).
//   - close: io_opcode::close.
//   - size: ::fstat, synchronously.
// The epoll backend performs regular-file operations synchronously on the worker (regular files
// are always "ready" for epoll); io_uring performs them asynchronously.
//
// Errors: every failure is std::system_error(errno, std::system_category(), "spindle: <call>")
// with <call> one of open, pread, pwrite, pwritev, fsync, fdatasync, close, fstat, poll. EINTR and
// EAGAIN are never reported: the operation is retried (after waiting for readiness with
// io_opcode::poll in the EAGAIN case, which only non-regular files such as FIFOs opened with
// O_NONBLOCK produce). read_exact_at reports an end of file before the whole range was read as
// system_error(ENODATA, "spindle: pread: unexpected end of file"); write_all_at reports a write
// that made no progress as system_error(EIO, "spindle: pwrite: no progress") ("pwritev" for a
// list).
//
// Cancellation: every operation is a cancellation point (task/cancellation.hpp). A task cancelled
// while an operation is in flight gets task_cancelled once the kernel gave the operation up
// (io_wait.hpp); an operation that completed anyway keeps its effect (a write may have been
// done, in part too for the looping calls). close() always releases the descriptor, even when
// cancelled (it then falls back to a synchronous ::close). Usable with with_timeout.
//
// The coroutines are awaited in tasks on a runtime worker: the reactor operations throw
// usage_error anywhere else. size() and the destructor are plain calls, usable anywhere.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "spindle/io/buffer_list.hpp"
#include "spindle/task/task.hpp"

namespace spindle::io {

class file {
 public:
  // The most bytes one read_at/write_at hands to the kernel (Linux's own limit per call).
  static constexpr std::size_t max_transfer = 0x7ffff000;

  // A closed file (native_handle() == -1).
  file() noexcept = default;
  // Adopts an open descriptor (it will be closed by this file).
  explicit file(int fd) noexcept : fd_(fd) {}
  file(file&& other) noexcept;
  file& operator=(file&& other) noexcept;  // closes the current descriptor first (synchronously)
  file(const file&) = delete;
  file& operator=(const file&) = delete;
  ~file();

  // Opens `path` with `flags | O_CLOEXEC` (and `mode` when creating). Synchronous inside the
  // task (see above). Throws system_error("spindle: open"), e.g. ENOENT for a missing file.
  static task<file> open(std::string path, int flags = O_RDONLY, mode_t mode = 0644);

  // One read of up to buffer.size() bytes (at most max_transfer) at `offset`: the number of bytes
  // read, 0 at or past the end of file (or for an empty buffer). Short reads are normal.
  task<std::size_t> read_at(std::span<std::byte> buffer, std::uint64_t offset);
  // One write of up to buffer.size() bytes (at most max_transfer) at `offset`: the number of
  // bytes written (possibly fewer than asked).
  task<std::size_t> write_at(std::span<const std::byte> buffer, std::uint64_t offset);
  // Reads exactly buffer.size() bytes at `offset`, looping over short reads. Throws
  // system_error(ENODATA) if the file ends first (the bytes before the end were read).
  task<void> read_exact_at(std::span<std::byte> buffer, std::uint64_t offset);
  // Writes all of `buffer` at `offset`, looping over short writes.
  task<void> write_all_at(std::span<const std::byte> buffer, std::uint64_t offset);
  // One pwritev of the buffers (at most IOV_MAX of them, max_transfer bytes) at `offset`, one
  // after the other: the bytes written (short writes happen; 0 for an empty list, at once).
  task<std::size_t> write_vectored_at(buffer_list buffers, std::uint64_t offset);
  // Writes every byte of every buffer, in order, from `offset` on, one pwritev per step.
  task<void> write_all_at(buffer_list buffers, std::uint64_t offset);

  // fsync(2): data and metadata reach stable storage.
  task<void> sync();
  // fdatasync(2): data (and the metadata needed to read it back) reach stable storage.
  task<void> sync_data();

  // Closes the descriptor through the reactor; the file is closed afterwards whatever happens
  // (a failure is still reported: EIO from close means written data may be lost). Closing a
  // closed file does nothing. EINTR from close is not retried (Linux has released the
  // descriptor already).
  task<void> close();

  // The current size in bytes (fstat; synchronous). Throws system_error("spindle: fstat").
  std::uint64_t size() const;

  bool is_open() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return is_open(); }
  int native_handle() const noexcept { return fd_; }
  // Gives the descriptor up without closing it (-1 if closed); the file is closed afterwards.
  int release() noexcept;

 private:
  task<void> fsync_with(std::uint32_t flags, const char* call);

  int fd_ = -1;
  // Whether read_at may take its fast path (src/io/file.cpp, reads_through_page_cache): found
  // at the first read_at, then kept (-1: not yet known, 0: no, 1: yes).
  std::atomic<signed char> page_cached_{-1};
};

}  // namespace spindle::io
