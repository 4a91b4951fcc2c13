// stat and directory listings (include/spindle/io/directory.hpp).
#include "spindle/io/directory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "spindle/io/io_wait.hpp"
#include "io/helper_pool.hpp"

namespace spindle::io {
namespace {

constexpr unsigned status_mask = STATX_BASIC_STATS;

[[noreturn]] void throw_directory_error(int error, const char* call) {
  throw std::system_error(error, std::system_category(), std::string("spindle: ") + call);
}

file_kind kind_of_mode(std::uint32_t mode) noexcept {
  switch (mode & S_IFMT) {
    case S_IFREG: return file_kind::regular;
    case S_IFDIR: return file_kind::directory;
    case S_IFLNK: return file_kind::symlink;
    case S_IFBLK: return file_kind::block_device;
    case S_IFCHR: return file_kind::character_device;
    case S_IFIFO: return file_kind::fifo;
    case S_IFSOCK: return file_kind::socket;
    default: return file_kind::unknown;
  }
}

file_kind kind_of_entry(unsigned char type) noexcept {
  switch (type) {
    case DT_REG: return file_kind::regular;
    case DT_DIR: return file_kind::directory;
    case DT_LNK: return file_kind::symlink;
    case DT_BLK: return file_kind::block_device;
    case DT_CHR: return file_kind::character_device;
    case DT_FIFO: return file_kind::fifo;
    case DT_SOCK: return file_kind::socket;
    default: return file_kind::unknown;
  }
}

file_status status_of(const struct statx& native) {
  file_status status;
  status.kind = kind_of_mode(native.stx_mode);
  status.size = native.stx_size;
  status.permissions = native.stx_mode & 07777;
  status.inode = native.stx_ino;
  status.links = native.stx_nlink;
  status.modified = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(native.stx_mtime.tv_sec) +
          std::chrono::nanoseconds(native.stx_mtime.tv_nsec)));
  status.native = native;
  return status;
}

// statx on a helper thread (the epoll backend).
struct status_job final : detail::helper_job {
  status_job(std::string file_path, int statx_flags) : path(std::move(file_path)), flags(statx_flags) {}
  void run() noexcept override {
    error = ::statx(AT_FDCWD, path.c_str(), flags, status_mask, &native) == 0 ? 0 : errno;
  }
  std::string path;
  int flags;
  struct statx native{};
  int error = 0;
};

struct listing_job final : detail::helper_job {
  explicit listing_job(std::string directory_path) : path(std::move(directory_path)) {}
  void run() noexcept override {
    try {
      DIR* directory = ::opendir(path.c_str());
      if (directory == nullptr) {
        error = errno;
        call = "opendir";
        return;
      }
      for (;;) {
        errno = 0;
        const dirent* entry = ::readdir(directory);
        if (entry == nullptr) {
          if (errno != 0) {
            error = errno;
            call = "readdir";
          }
          break;
        }
        if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
        entries.push_back({entry->d_name, kind_of_entry(entry->d_type), entry->d_ino});
      }
      ::closedir(directory);
    } catch (const std::bad_alloc&) {
      error = ENOMEM;
      call = "readdir";
    }
  }
  std::string path;
  std::vector<directory_entry> entries;
  int error = 0;
  const char* call = "";
};

task<file_status> status_with(std::string path, int flags) {
  if (current_reactor().backend() == core::io_backend::uring) {
    // `path` (a parameter) and `native` live in this frame until the final completion.
    struct statx native{};
    for (;;) {
      core::io_operation op{};
      op.opcode = core::io_opcode::statx;
      op.fd = AT_FDCWD;
      op.path = path.c_str();
      op.flags = flags;
      op.length = status_mask;
      op.buffer = &native;
      const std::int32_t result = co_await submit_and_wait(op);
      if (result == 0) co_return status_of(native);
      if (result != -EINTR && result != -EAGAIN) throw_directory_error(-result, "statx");
    }
  }
  auto job = std::make_shared<status_job>(std::move(path), flags);
  co_await detail::run_on_helper(job);
  if (job->error != 0) throw_directory_error(job->error, "statx");
  co_return status_of(job->native);
}

}  // namespace

task<file_status> status(std::string path) { return status_with(std::move(path), 0); }

task<file_status> symlink_status(std::string path) {
  return status_with(std::move(path), AT_SYMLINK_NOFOLLOW);
}

task<std::vector<directory_entry>> list_directory(std::string path) {
  auto job = std::make_shared<listing_job>(std::move(path));
  co_await detail::run_on_helper(job);
  if (job->error != 0) throw_directory_error(job->error, job->call);
  co_return std::move(job->entries);
}

}  // namespace spindle::io
