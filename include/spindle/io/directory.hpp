// File status and directory listings in a task, without blocking an executor.
//
//   io::file_status s = co_await io::status("/etc/hostname");          // s.kind, s.size, ...
//   for (const io::directory_entry& e : co_await io::list_directory("/usr/share/doc")) ...
//
// Who does the work:
//   - status / symlink_status on io_uring: one IORING_OP_STATX through the reactor of the
//     executor running the task (core::io_opcode::statx), like every file operation
//     (io/file.hpp): the kernel does the lookup asynchronously.
//   - status / symlink_status on epoll, and list_directory on both backends: a helper thread
//     (a small process-wide pool, started on first use, at most `helper_threads` threads that
//     live until the process exits) makes the blocking calls (statx; opendir/readdir/closedir);
//     the task waits for it on an eventfd read through its reactor, so the executor runs other
//     tasks meanwhile. io_uring has no getdents operation (Linux 6.1), and epoll none at all.
// The path string is a parameter of the coroutine (it lives in its frame); the statx buffer too.
// A job handed to the helper owns its own copy of everything it touches (a shared state that
// the helper and the task both hold): a task cancelled while waiting leaves the helper to finish
// into memory that stays alive until the helper drops its reference.
//
// Errors: std::system_error(errno, "spindle: statx" / "opendir" / "readdir"). Cancellation:
// task_cancelled; a cancelled listing or status still runs to its end on the helper (its result
// is dropped). Listings leave out "." and ".."; the order is the file system's. An entry's kind
// comes from d_type; file systems that do not fill it in give file_kind::unknown (stat it).
// Must be awaited in a task on a runtime worker (usage_error otherwise).
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "spindle/task/task.hpp"

namespace spindle::io {

enum class file_kind : std::uint8_t {
  unknown,
  regular,
  directory,
  symlink,
  block_device,
  character_device,
  fifo,
  socket,
};

struct file_status {
  file_kind kind = file_kind::unknown;
  std::uint64_t size = 0;
  std::uint32_t permissions = 0;  // the mode's low 12 bits (07777)
  std::uint64_t inode = 0;
  std::uint64_t links = 0;
  std::chrono::system_clock::time_point modified{};
  struct statx native{};  // everything else
};

struct directory_entry {
  std::string name;
  file_kind kind = file_kind::unknown;
  std::uint64_t inode = 0;
};

// The most helper threads the pool starts (see above).
inline constexpr unsigned helper_threads = 4;

// The status of `path`, following symbolic links (stat(2)).
task<file_status> status(std::string path);
// The status of `path` itself, not following a final symbolic link (lstat(2)).
task<file_status> symlink_status(std::string path);
// The entries of the directory `path`, without "." and "..".
task<std::vector<directory_entry>> list_directory(std::string path);

}  // namespace spindle::io
