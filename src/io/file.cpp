// Files through the reactor: contract in include/spindle/io/file.hpp.
#include "spindle/io/file.hpp"

#include <linux/io_uring.h>  // IORING_FSYNC_DATASYNC (the reactor's fsync flag)
#include <poll.h>
#include <sys/stat.h>
#include <sys/uio.h>  // preadv2, RWF_NOWAIT
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "spindle/io/io_wait.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/spawned_task.hpp"  // end_slice_if_over
#include "io/buffer_vectors.hpp"

namespace spindle::io {
namespace {

[[noreturn]] void throw_error(int error, const char* call) {
  throw std::system_error(error, std::system_category(), std::string("spindle: ") + call);
}

std::int64_t checked_offset(std::uint64_t offset, const char* call) {
  if (offset > std::uint64_t(std::numeric_limits<std::int64_t>::max())) throw_error(EINVAL, call);
  return std::int64_t(offset);
}

// Waits until `fd` is ready for `events` (POLLIN / POLLOUT). Errors and hang-ups count as ready:
// the retried operation reports them.
task<void> wait_ready(int fd, short events) {
  for (;;) {
    core::io_operation op{};
    op.opcode = core::io_opcode::poll;
    op.fd = fd;
    op.flags = events;
    const std::int32_t result = co_await submit_and_wait(op);
    if (result >= 0) co_return;
    if (result != -EINTR && result != -EAGAIN) throw_error(-result, "poll");
  }
}

// Submits a copy of `prototype` until its result is neither -EINTR nor -EAGAIN (after an -EAGAIN,
// waits for readiness first). Returns the result: >= 0, or -errno.
task<std::int32_t> submit_retrying(core::io_operation prototype, short events) {
  for (;;) {
    core::io_operation op = prototype;  // fresh reactor bookkeeping for every attempt
    const std::int32_t result = co_await submit_and_wait(op);
    if (result == -EAGAIN) {
      co_await wait_ready(prototype.fd, events);
      continue;
    }
    if (result != -EINTR) co_return result;
  }
}

core::io_operation transfer_operation(core::io_opcode opcode, int fd, const void* buffer,
                                      std::size_t length, std::int64_t offset) noexcept {
  core::io_operation op{};
  op.opcode = opcode;
  op.fd = fd;
  op.buffer = const_cast<void*>(buffer);  // a write only reads it
  op.length = std::uint32_t(std::min(length, file::max_transfer));
  op.offset = offset;
  return op;
}

// One writev of the batch `vectors` (which lives in the caller's frame until the await ends).
core::io_operation vectored_write_operation(int fd, std::vector<iovec>& vectors,
                                            std::int64_t offset) noexcept {
  core::io_operation op{};
  op.opcode = core::io_opcode::writev;
  op.fd = fd;
  op.buffer = vectors.data();
  op.length = std::uint32_t(vectors.size());
  op.offset = offset;
  return op;
}

static_assert(file::max_transfer == detail::max_batch_bytes);

// Whether reads of `fd` may take the fast path: only files with the page cache behind them, the
// one thing RWF_NOWAIT is for. Not
//   - O_DIRECT (which fcntl(F_SETFL) may set at any time): RWF_NOWAIT does not return EAGAIN for
//     what the device has to supply, it only avoids waiting for locks; the read itself goes to
//     the device and is waited for, here on the worker;
//   - anything but a regular file or a block device: a character device has no page cache and
//     may honour RWF_NOWAIT by doing the whole read at once (/dev/urandom computes a GiB in
//     seconds, on the worker); pipes, sockets, /proc and directories fail it anyway.
bool reads_through_page_cache(int fd) noexcept {
  struct stat status;
  if (::fstat(fd, &status) != 0 || !(S_ISREG(status.st_mode) || S_ISBLK(status.st_mode))) {
    return false;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_DIRECT) == 0;
}

}  // namespace

file::file(file&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      page_cached_(other.page_cached_.exchange(-1, std::memory_order_relaxed)) {}

file& file::operator=(file&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    page_cached_.store(other.page_cached_.exchange(-1, std::memory_order_relaxed),
                       std::memory_order_relaxed);
  }
  return *this;
}

file::~file() {
  if (fd_ >= 0) ::close(fd_);
}

int file::release() noexcept {
  page_cached_.store(-1, std::memory_order_relaxed);
  return std::exchange(fd_, -1);
}

task<file> file::open(std::string path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_error(errno, "open");
  co_return file(fd);
}

task<std::size_t> file::read_at(std::span<std::byte> buffer, std::uint64_t offset) {
  const std::int64_t at = checked_offset(offset, "pread");
  // Found once per file (two system calls; a file's type does not change). Relaxed: several tasks
  // may read one file at once, and each finds the same answer.
  signed char page_cached = page_cached_.load(std::memory_order_relaxed);
  if (page_cached < 0 && fd_ >= 0) {
    page_cached = reads_through_page_cache(fd_) ? 1 : 0;
    page_cached_.store(page_cached, std::memory_order_relaxed);
  }
  // (page_cached first: a read that cannot take the fast path spends no budget on it.)
  if (page_cached > 0 && detail::may_complete_without_reactor()) {
    // Cached pages: read them here, a system call instead of a round trip through the reactor.
    // RWF_NOWAIT never blocks: pages not in the page cache give EAGAIN (or a short read of
    // those that are); every failure (EAGAIN, ESPIPE for a pipe or socket, EOPNOTSUPP where the
    // file system has no such reads, EINTR, real errors) goes through the reactor, which waits
    // for the disk or reports the error as before. (Only regular files and block devices
    // without O_DIRECT get here: reads_through_page_cache.)
    iovec vector{buffer.data(), std::min(buffer.size(), max_transfer)};
    const ssize_t got = ::preadv2(fd_, &vector, 1, at, RWF_NOWAIT);
    if (got >= 0) {
      // The copy may have outlasted the slice (up to max_transfer bytes for one unit of the
      // budget): then the next await yields.
      ::spindle::detail::end_slice_if_over();
      co_return std::size_t(got);
    }
  }
  const std::int32_t result = co_await submit_retrying(
      transfer_operation(core::io_opcode::read, fd_, buffer.data(), buffer.size(), at), POLLIN);
  if (result < 0) throw_error(-result, "pread");
  co_return std::size_t(result);
}

task<std::size_t> file::write_at(std::span<const std::byte> buffer, std::uint64_t offset) {
  const std::int64_t at = checked_offset(offset, "pwrite");
  const std::int32_t result = co_await submit_retrying(
      transfer_operation(core::io_opcode::write, fd_, buffer.data(), buffer.size(), at), POLLOUT);
  if (result < 0) throw_error(-result, "pwrite");
  co_return std::size_t(result);
}

task<void> file::read_exact_at(std::span<std::byte> buffer, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < buffer.size()) {
    const std::size_t n = co_await read_at(buffer.subspan(done), offset + done);
    if (n == 0) {
      throw std::system_error(ENODATA, std::system_category(),
                              "spindle: pread: unexpected end of file");
    }
    done += n;
  }
}

task<void> file::write_all_at(std::span<const std::byte> buffer, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < buffer.size()) {
    const std::size_t n = co_await write_at(buffer.subspan(done), offset + done);
    if (n == 0) throw std::system_error(EIO, std::system_category(), "spindle: pwrite: no progress");
    done += n;
  }
}

task<std::size_t> file::write_vectored_at(buffer_list buffers, std::uint64_t offset) {
  const std::int64_t at = checked_offset(offset, "pwritev");
  std::vector<iovec> vectors;
  detail::fill_vectors(buffers, {}, vectors);
  if (vectors.empty()) co_return 0;
  const std::int32_t result =
      co_await submit_retrying(vectored_write_operation(fd_, vectors, at), POLLOUT);
  if (result < 0) throw_error(-result, "pwritev");
  co_return std::size_t(result);
}

task<void> file::write_all_at(buffer_list buffers, std::uint64_t offset) {
  std::vector<iovec> vectors;
  detail::vector_position position;
  detail::fill_vectors(buffers, position, vectors);
  std::uint64_t at = offset;
  while (!vectors.empty()) {
    const std::int32_t result = co_await submit_retrying(
        vectored_write_operation(fd_, vectors, checked_offset(at, "pwritev")), POLLOUT);
    if (result < 0) throw_error(-result, "pwritev");
    if (result == 0) {
      throw std::system_error(EIO, std::system_category(), "spindle: pwritev: no progress");
    }
    detail::advance(buffers, position, std::size_t(result));
    at += std::uint64_t(result);
    detail::fill_vectors(buffers, position, vectors);
  }
}

task<void> file::fsync_with(std::uint32_t flags, const char* call) {
  core::io_operation op{};
  op.opcode = core::io_opcode::fsync;
  op.fd = fd_;
  op.flags = std::int32_t(flags);
  const std::int32_t result = co_await submit_retrying(op, POLLOUT);
  if (result < 0) throw_error(-result, call);
}

task<void> file::sync() { return fsync_with(0, "fsync"); }

task<void> file::sync_data() { return fsync_with(IORING_FSYNC_DATASYNC, "fdatasync"); }

task<void> file::close() {
  if (fd_ < 0) co_return;
  const int fd = std::exchange(fd_, -1);
  core::io_operation op{};
  op.opcode = core::io_opcode::close;
  op.fd = fd;
  std::int32_t result = 0;
  try {
    result = co_await submit_and_wait(op);
  } catch (const task_cancelled&) {
    // Never submitted (cancellation was already requested: on_complete was never set), or given
    // up by the kernel before it ran: the descriptor is still open, and still ours.
    if (op.on_complete == nullptr || op.result == -ECANCELED) ::close(fd);
    throw;
  } catch (...) {
    ::close(fd);  // usage_error: not on a runtime worker, nothing was submitted
    throw;
  }
  // EINTR: Linux has released the descriptor anyway; retrying could close someone else's.
  if (result < 0 && result != -EINTR) throw_error(-result, "close");
}

std::uint64_t file::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_error(errno, "fstat");
  return std::uint64_t(st.st_size);
}

}  // namespace spindle::io
