// io::status / symlink_status / list_directory on both reactor backends: kinds, sizes and
// permissions of a file, a directory and a symbolic link (followed or not), listings of many
// entries with their kinds, missing paths and non-directories, a cancelled listing, and no
// descriptor left behind (the helper's eventfds).
#include <spindle/spindle.hpp>
#include <spindle/io/io.hpp>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "io/file_test_fixture.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::core::io_backend;
using spindle::io::directory_entry;
using spindle::io::file_kind;
using spindle::io::file_status;
using spindle::testing::runtime_on;

int directory_test_fd_count() { return spindle::testing::open_descriptor_count(); }

class IoDirectory : public io_file_test::file_fixture {};

spindle::task<std::vector<file_status>> directory_statuses(std::vector<std::string> paths,
                                                           bool follow) {
  std::vector<file_status> result;
  for (const std::string& p : paths) {
    result.push_back(follow ? co_await spindle::io::status(p)
                            : co_await spindle::io::symlink_status(p));
  }
  co_return result;
}

spindle::task<int> directory_error_of_status(std::string p) {
  try {
    (void)co_await spindle::io::status(std::move(p));
  } catch (const std::system_error& e) {
    co_return e.code().value();
  }
  co_return 0;
}

TEST_P(IoDirectory, StatusOfAFileADirectoryAndALink) {
  {
    std::ofstream out(path("five"));
    out << "12345";
  }
  ::chmod(path("five").c_str(), 0640);
  std::filesystem::create_directory(path("sub"));
  std::filesystem::create_symlink(path("five"), path("link"));
  const std::vector<std::string> paths{path("five"), path("sub"), path("link")};
  const auto followed = rt_->block_on(directory_statuses(paths, true));
  const auto not_followed = rt_->block_on(directory_statuses(paths, false));
  EXPECT_EQ(followed[0].kind, file_kind::regular);
  EXPECT_EQ(followed[0].size, 5u);
  EXPECT_EQ(followed[0].permissions, 0640u);
  EXPECT_EQ(followed[0].links, 1u);
  struct stat reference{};
  ASSERT_EQ(::stat(path("five").c_str(), &reference), 0);
  EXPECT_EQ(followed[0].inode, reference.st_ino);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(followed[0].modified), reference.st_mtime);
  EXPECT_EQ(followed[1].kind, file_kind::directory);
  EXPECT_EQ(followed[2].kind, file_kind::regular);  // followed to the file
  EXPECT_EQ(followed[2].inode, followed[0].inode);
  EXPECT_EQ(not_followed[2].kind, file_kind::symlink);
  EXPECT_EQ(rt_->block_on(directory_error_of_status(path("missing"))), ENOENT);
  EXPECT_EQ(rt_->block_on(directory_error_of_status(path("five") + "/below")), ENOTDIR);
}

spindle::task<std::vector<directory_entry>> directory_listing(std::string p) {
  co_return co_await spindle::io::list_directory(std::move(p));
}

spindle::task<int> directory_error_of_listing(std::string p) {
  try {
    (void)co_await spindle::io::list_directory(std::move(p));
  } catch (const std::system_error& e) {
    co_return e.code().value();
  }
  co_return 0;
}

TEST_P(IoDirectory, ListsEveryEntryWithItsKind) {
  std::set<std::string> expected;
  for (int i = 0; i < 300; ++i) {
    const std::string name = "file-" + std::to_string(i);
    std::ofstream(path(name)) << i;
    expected.insert(name);
  }
  std::filesystem::create_directory(path("sub"));
  std::filesystem::create_symlink("file-0", path("link"));
  expected.insert("sub");
  expected.insert("link");
  const auto entries = rt_->block_on(directory_listing(dir_.string()));
  std::set<std::string> names;
  for (const directory_entry& e : entries) {
    names.insert(e.name);
    if (e.kind == file_kind::unknown) continue;  // a file system without d_type
    if (e.name == "sub") {
      EXPECT_EQ(e.kind, file_kind::directory);
    } else if (e.name == "link") {
      EXPECT_EQ(e.kind, file_kind::symlink);
    } else {
      EXPECT_EQ(e.kind, file_kind::regular);
    }
  }
  EXPECT_EQ(names, expected);  // "." and ".." left out, nothing twice
  EXPECT_EQ(entries.size(), expected.size());
  std::filesystem::create_directory(path("empty"));
  EXPECT_TRUE(rt_->block_on(directory_listing(path("empty"))).empty());
  EXPECT_EQ(rt_->block_on(directory_error_of_listing(path("missing"))), ENOENT);
  EXPECT_EQ(rt_->block_on(directory_error_of_listing(path("file-1"))), ENOTDIR);
}

TEST_P(IoDirectory, ACancelledListingLeavesNothingBehind) {
  for (int i = 0; i < 100; ++i) std::ofstream(path("f" + std::to_string(i))) << i;
  const int before = directory_test_fd_count();
  for (int round = 0; round < 20; ++round) {
    auto listing = rt_->spawn(directory_listing(dir_.string()));
    listing.cancel();
    try {
      EXPECT_EQ(spindle::testing::join_bounded(std::move(listing), 30s).size(), 100u);  // finished before the cancel
    } catch (const spindle::task_cancelled&) {
    }
  }
  // The helper closes a job's eventfd when it drops the job, possibly after the task went on.
  EXPECT_TRUE(spindle::testing::eventually([&] { return directory_test_fd_count() == before; }));
}

TEST_P(IoDirectory, ManyConcurrentCallsLeaveNoDescriptor) {
  const int before = directory_test_fd_count();
  std::vector<spindle::join_handle<std::vector<directory_entry>>> listings;
  for (int i = 0; i < 50; ++i) listings.push_back(rt_->spawn(directory_listing("/proc/self")));
  for (auto& listing : listings) EXPECT_FALSE(spindle::testing::join_bounded(std::move(listing), 30s).empty());
  EXPECT_TRUE(spindle::testing::eventually([&] { return directory_test_fd_count() == before; }));
}

INSTANTIATE_TEST_SUITE_P(Backends, IoDirectory,
                         ::testing::Values(io_backend::uring, io_backend::epoll),
                         spindle::testing::backend_name);

}  // namespace
