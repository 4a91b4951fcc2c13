// io::file's vectored writes (write_vectored_at, write_all_at over a buffer_list) on both reactor
// backends: content against a reference with buffers of every size (empty ones included) and more
// than IOV_MAX of them, one pwritev's batch limit, short writes and EINTR/EAGAIN injected by the
// reactor's fault hook (resumed at the exact byte), an empty list, and errors.
#include <spindle/spindle.hpp>
#include <spindle/io/io.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "support/test_support.hpp"
#include "io/file_test_fixture.hpp"

namespace {

using spindle::core::io_backend;
using spindle::io::buffer_list;
using spindle::io::file;
using spindle::testing::runtime_on;

class IoFileVectored : public io_file_test::file_fixture {};

// `count` pieces of one random byte string, of random lengths 0 to `longest` (a tenth empty).
struct vectored_pieces {
  std::vector<std::byte> bytes;
  std::vector<std::span<const std::byte>> pieces;
};

vectored_pieces make_vectored_pieces(std::uint64_t seed, std::size_t count, std::size_t longest) {
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> lengths(count);
  std::size_t total = 0;
  for (auto& length : lengths) {
    length = rng() % 10 == 0 ? 0 : 1 + rng() % longest;
    total += length;
  }
  vectored_pieces result;
  result.bytes.resize(total);
  for (auto& b : result.bytes) b = std::byte(rng() & 0xff);
  std::size_t at = 0;
  for (const std::size_t length : lengths) {
    result.pieces.emplace_back(result.bytes.data() + at, length);
    at += length;
  }
  return result;
}

// Writes the pieces at `offset` with write_all_at and reads the whole file back.
spindle::task<std::vector<std::byte>> write_pieces_and_read_back(std::string path,
                                                                 buffer_list pieces,
                                                                 std::size_t offset) {
  file f = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  co_await f.write_all_at(pieces, offset);
  std::vector<std::byte> back(f.size());
  co_await f.read_exact_at(back, 0);
  co_return back;
}

bool matches_at(const std::vector<std::byte>& file_bytes, const std::vector<std::byte>& expected,
                std::size_t offset) {
  if (file_bytes.size() != offset + expected.size()) return false;
  for (std::size_t i = 0; i < offset; ++i) {
    if (file_bytes[i] != std::byte{0}) return false;  // the hole before the offset
  }
  return std::equal(expected.begin(), expected.end(), file_bytes.begin() + std::ptrdiff_t(offset));
}

TEST_P(IoFileVectored, WriteAllAtOverManyBuffersMatchesTheBytes) {
  // More than IOV_MAX buffers: several batches, each continuing where the last stopped.
  const vectored_pieces data = make_vectored_pieces(7, 3 * IOV_MAX + 17, 300);
  const auto back =
      rt_->block_on(write_pieces_and_read_back(path("many"), buffer_list(data.pieces), 5));
  EXPECT_TRUE(matches_at(back, data.bytes, 5));
}

// One write_vectored_at is one pwritev: at most IOV_MAX buffers of a longer list.
spindle::task<std::size_t> one_vectored_write(std::string path, buffer_list pieces) {
  file f = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  co_return co_await f.write_vectored_at(pieces, 0);
}

TEST_P(IoFileVectored, OneVectoredWriteTakesAtMostIovMaxBuffers) {
  const std::vector<std::byte> ten(10, std::byte{1});
  const std::vector<std::span<const std::byte>> pieces(IOV_MAX + 100, std::span(ten));
  EXPECT_EQ(rt_->block_on(one_vectored_write(path("one"), buffer_list(pieces))),
            std::size_t(IOV_MAX) * 10);
}

spindle::task<std::size_t> empty_vectored_writes(std::string path) {
  file f = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  std::size_t written = co_await f.write_vectored_at(buffer_list(), 0);
  const std::vector<std::span<const std::byte>> empties(5);
  written += co_await f.write_vectored_at(buffer_list(empties), 0);
  co_await f.write_all_at(buffer_list(empties), 100);
  co_return written + f.size();
}

TEST_P(IoFileVectored, EmptyListsWriteNothing) {
  EXPECT_EQ(rt_->block_on(empty_vectored_writes(path("empty"))), 0u);
}

spindle::task<std::string> vectored_write_to_a_read_only_file(std::string path) {
  { file create = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0600); }
  file f = co_await file::open(path, O_RDONLY);
  const std::vector<std::byte> bytes(8, std::byte{2});
  const std::vector<std::span<const std::byte>> pieces{std::span(bytes), std::span(bytes)};
  try {
    co_await f.write_all_at(buffer_list(pieces), 0);
  } catch (const std::system_error& e) {
    co_return std::to_string(e.code().value()) + " " + e.what();
  }
  co_return "written?";
}

TEST_P(IoFileVectored, ErrorsAreSystemErrorsNamingPwritev) {
  EXPECT_EQ(rt_->block_on(vectored_write_to_a_read_only_file(path("read-only"))),
            std::to_string(EBADF) + " spindle: pwritev: " + std::strerror(EBADF));
}

// --- short writes, EINTR and EAGAIN (fault hook) ------------------------------------------------

std::atomic<int> vectored_faults_injected{0};
// 0: none; 1: cap writev results at 777 bytes; 2: every 3rd writev EINTR or EAGAIN.
std::atomic<int> vectored_fault_mode{0};
std::atomic<int> vectored_fault_counter{0};

void inject_vectored_faults(spindle::core::io_operation* op) noexcept {
  if (op->opcode != spindle::core::io_opcode::writev) return;
  const int mode = vectored_fault_mode.load();
  if (mode == 1 && op->result > 777) {
    // A short write: the kernel wrote more, but a positioned write of the same bytes to the
    // same place can simply be redone.
    op->result = 777;
    vectored_faults_injected.fetch_add(1);
  } else if (mode == 2 && op->result >= 0) {
    const int n = vectored_fault_counter.fetch_add(1);
    if (n % 3 == 0) {
      op->result = (n % 2 == 0) ? -EINTR : -EAGAIN;
      vectored_faults_injected.fetch_add(1);
    }
  }
}

TEST_P(IoFileVectored, ShortWritesEintrAndEagainAreResumedAtTheExactByte) {
  for (std::uint32_t i = 0; i < rt_->executor_count(); ++i) {
    rt_->core().executor_at(i).io().set_fault_hook(&inject_vectored_faults);
  }
  const vectored_pieces data = make_vectored_pieces(13, 2000, 100);
  vectored_faults_injected = 0;
  vectored_fault_mode = 1;
  const auto short_back =
      rt_->block_on(write_pieces_and_read_back(path("short"), buffer_list(data.pieces), 3));
  EXPECT_TRUE(matches_at(short_back, data.bytes, 3));
  EXPECT_GE(vectored_faults_injected.load(), int(data.bytes.size() / 777) - 1);
  vectored_faults_injected = 0;
  vectored_fault_mode = 2;
  const auto interrupted_back =
      rt_->block_on(write_pieces_and_read_back(path("interrupted"), buffer_list(data.pieces), 0));
  EXPECT_TRUE(matches_at(interrupted_back, data.bytes, 0));
  EXPECT_GT(vectored_faults_injected.load(), 0);
  vectored_fault_mode = 0;
  rt_.reset();  // before the hook's state goes away (it is static anyway)
}

INSTANTIATE_TEST_SUITE_P(Backends, IoFileVectored,
                         ::testing::Values(io_backend::uring, io_backend::epoll),
                         spindle::testing::backend_name);

}  // namespace
