// Counting a process's open descriptors, for tests that check nothing leaks one.
// Header-only and independent of spindle (the example tests count a server process's).
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace spindle::testing {

// Descriptors open in a process (this one by default), from a scan of /proc/<pid>/fd.
// Left out: descriptors on files under /proc (the scan's own, and the transient ones a worker
// opens to read a thread's schedstat: standby and the stall watch), and descriptors closed while
// the scan runs (their link can no longer be read). Counting the latter made exact counts taken
// beside a running runtime one too high now and then (CI: NetTcp and HttpHello fd counts).
// -1 where the directory cannot be read.
inline int open_descriptor_count(pid_t pid = 0) {
  const std::string path =
      pid == 0 ? std::string("/proc/self/fd") : "/proc/" + std::to_string(pid) + "/fd";
  DIR* directory = ::opendir(path.c_str());
  if (directory == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    char target[256];
    const ssize_t length =
        ::readlinkat(::dirfd(directory), entry->d_name, target, sizeof target - 1);
    if (length <= 0) continue;  // closed since readdir listed it
    if (std::string_view(target, std::size_t(length)).starts_with("/proc/")) continue;
    ++count;
  }
  ::closedir(directory);
  return count;
}

}  // namespace spindle::testing
