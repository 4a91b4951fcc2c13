// The fixture of the io tests that use files (file_test.cpp, file_vectored_test.cpp,
// file_cached_read_test.cpp, directory_test.cpp): a runtime on the backend under test and a
// temporary directory, removed after the test.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace io_file_test {

class file_fixture : public ::testing::TestWithParam<spindle::core::io_backend> {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "spindle-file-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
    rt_ = spindle::testing::runtime_on(GetParam());
    if (!rt_) GTEST_SKIP() << "the epoll backend is not built";
  }
  void TearDown() override {
    rt_.reset();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
  std::unique_ptr<spindle::runtime> rt_;
};

}  // namespace io_file_test
