// io::file::read_at's fast path (file.hpp): pages in the page cache are read on the worker with
// preadv2(RWF_NOWAIT), without a round trip through the reactor; everything else goes through it.
//   - a cached file is read back exactly, and the reads submit nothing to the reactor;
//   - what the fast path cannot read (a character device, pages dropped from the cache) is read
//     through the reactor with the same bytes;
//   - a loop of cached reads, which never waits, still lets another task on its executor run
//     (the reads count against the cooperative budget);
//   - a loop of long cached reads (each longer than the service interval) lets another task on its
//     executor run after a read or two, not after cooperative_time_check of them;
//   - with a fault-injection hook on the reactor, reads go through it (the hook sees them);
//   - a character device has no page cache (a RWF_NOWAIT read of /dev/urandom computes the whole
//     buffer on the worker): its reads go through the reactor;
//   - an O_DIRECT file bypasses the page cache: RWF_NOWAIT would read it from the device on the
//     worker (it only avoids waiting for locks), so its reads go through the reactor.
// Waits are bounded (join_bounded / eventually); nothing sleeps to synchronise.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "io/file_test_fixture.hpp"

namespace {

using io_file_test::file_fixture;
using spindle::core::io_backend;
using spindle::io::file;
using namespace std::chrono_literals;

std::vector<std::byte> pattern_bytes(std::size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = std::byte((i * 131 + 7) & 0xff);
  return bytes;
}

spindle::task<void> write_file(std::string path, std::vector<std::byte> bytes) {
  file f = co_await file::open(std::move(path), O_RDWR | O_CREAT | O_TRUNC);
  co_await f.write_all_at(bytes, 0);
}

struct read_back {
  std::vector<std::byte> bytes;
  std::uint64_t submitted = 0;  // operations the reactor took during the reads
};

// Reads the whole file in `step`-byte reads, counting what the reactor of the reading worker
// took meanwhile (a 1-worker runtime: the task cannot move to another reactor).
spindle::task<read_back> read_counting(std::string path, std::size_t step) {
  file f = co_await file::open(std::move(path));
  read_back result;
  std::vector<std::byte> buffer(step);
  const std::uint64_t before = spindle::io::current_reactor().operations_submitted();
  for (std::uint64_t offset = 0;;) {
    const std::size_t got = co_await f.read_at(buffer, offset);
    if (got == 0) break;
    result.bytes.insert(result.bytes.end(), buffer.begin(), buffer.begin() + std::ptrdiff_t(got));
    offset += got;
  }
  result.submitted = spindle::io::current_reactor().operations_submitted() - before;
  co_return result;
}

class IoFileCachedRead : public file_fixture {
 protected:
  void SetUp() override {
    file_fixture::SetUp();
    if (IsSkipped()) return;
    rt_ = spindle::testing::runtime_on(GetParam(), 1);
  }
};

TEST_P(IoFileCachedRead, CachedPagesAreReadWithoutTheReactor) {
  const auto bytes = pattern_bytes(1 << 20);
  rt_->block_on(write_file(path("cached"), bytes));  // just written: in the page cache
  const read_back back = rt_->block_on(read_counting(path("cached"), 64 * 1024));
  EXPECT_TRUE(back.bytes == bytes);
  // 16 reads of data and one at the end, none submitted (a read the kernel would have had to
  // fetch from the disk would be; none can be: the pages were written a moment ago).
  EXPECT_EQ(back.submitted, 0u);
}

TEST_P(IoFileCachedRead, WhatCannotBeReadAtOnceGoesThroughTheReactor) {
  // /dev/zero: no RWF_NOWAIT reads on many kernels (EOPNOTSUPP), or at once on others: either
  // way the same bytes.
  const std::vector<std::byte> zeros = rt_->block_on([]() -> spindle::task<std::vector<std::byte>> {
    file f = co_await file::open("/dev/zero");
    std::vector<std::byte> buffer(4096, std::byte{1});
    const std::size_t got = co_await f.read_at(buffer, 0);
    buffer.resize(got);
    co_return buffer;
  }());
  EXPECT_EQ(zeros, std::vector<std::byte>(4096, std::byte{0}));

  // Pages dropped from the cache (where the file system lets fadvise drop them) are fetched
  // through the reactor; the bytes are the same either way.
  const auto bytes = pattern_bytes(256 * 1024);
  rt_->block_on(write_file(path("dropped"), bytes));
  const int fd = ::open(path("dropped").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  const read_back back = rt_->block_on(read_counting(path("dropped"), 64 * 1024));
  EXPECT_TRUE(back.bytes == bytes);
  std::printf("[          ] reads after the pages were dropped that the reactor took: %llu\n",
              static_cast<unsigned long long>(back.submitted));
}

TEST_P(IoFileCachedRead, ALoopOfCachedReadsLetsAnotherTaskRun) {
  rt_->block_on(write_file(path("loop"), pattern_bytes(4096)));
  std::atomic<bool> other_ran{false};
  std::atomic<bool> reading{false};
  constexpr long most_reads = 10'000'000;
  auto reader = rt_->spawn([](std::string p, std::atomic<bool>& other,
                              std::atomic<bool>& started) -> spindle::task<long> {
    file f = co_await file::open(std::move(p));
    std::byte one[1];
    started.store(true);
    long reads = 0;
    // Never waits: every read is of a cached byte. Ends when the other task has run.
    while (!other.load() && reads < most_reads) {
      (void)co_await f.read_at(one, std::uint64_t(reads % 4096));
      ++reads;
    }
    co_return reads;
  }(path("loop"), other_ran, reading));
  ASSERT_TRUE(spindle::testing::eventually([&] { return reading.load(); }));
  // The same (only) worker: it runs only if the reader yields.
  auto other = rt_->spawn([](std::atomic<bool>& ran) -> spindle::task<void> {
    ran.store(true);
    co_return;
  }(other_ran));
  const long reads = spindle::testing::join_bounded(std::move(reader), 60s);
  EXPECT_LT(reads, most_reads) << "the reader held its executor through every read";
  spindle::testing::join_bounded(std::move(other), 10s);
}

TEST_P(IoFileCachedRead, LongCachedReadsEndTheSliceAtOnce) {
  // 32 MiB per read: a copy of a millisecond or more (the service interval) on any machine.
  constexpr std::size_t step = 32u << 20;
  rt_->block_on(write_file(path("long"), pattern_bytes(step)));
  const long reads = rt_->block_on([](std::string p) -> spindle::task<long> {
    file f = co_await file::open(std::move(p));
    std::vector<std::byte> buffer(step);
    (void)co_await f.read_at(buffer, 0);  // the slice has begun
    std::atomic<bool> other_ran{false};
    // The same (only) worker: the other task runs when this one yields.
    auto other = spindle::spawn([](std::atomic<bool>& ran) -> spindle::task<void> {
      ran.store(true);
      co_return;
    }(other_ran));
    long reads = 0;
    while (!other_ran.load() && reads < 1000) {
      (void)co_await f.read_at(buffer, 0);
      ++reads;
    }
    co_await std::move(other);
    co_return reads;
  }(path("long")));
  // Each read outlasts the slice: the budget is spent after it, and the next read yields. Without
  // a clock check after a long read the slice lasted cooperative_time_check (16) reads.
  std::printf("[          ] reads of 32 MiB before the other task ran: %ld\n", reads);
  EXPECT_LE(reads, 4) << "reads of " << step << " bytes before the other task ran";
}

// A hook that counts what it sees and changes nothing.
std::atomic<long> hooked_operations{0};
void count_operation(spindle::core::io_operation*) noexcept { hooked_operations.fetch_add(1); }

TEST_P(IoFileCachedRead, ReadsGoThroughTheReactorWhileAFaultHookIsInstalled) {
  const auto bytes = pattern_bytes(64 * 1024);
  rt_->block_on(write_file(path("hooked"), bytes));
  rt_->core().executor_at(0).io().set_fault_hook(&count_operation);
  hooked_operations = 0;
  const read_back back = rt_->block_on(read_counting(path("hooked"), 4096));
  EXPECT_TRUE(back.bytes == bytes);
  EXPECT_EQ(back.submitted, 17u);  // 16 reads of data, one at the end
  EXPECT_GE(hooked_operations.load(), 17);
  rt_.reset();  // before the hook's counter could matter to another test
}

TEST_P(IoFileCachedRead, CharacterDeviceReadsGoThroughTheReactor) {
  // No page cache behind a character device: a RWF_NOWAIT read of /dev/urandom generates the
  // whole buffer on the worker (a GiB takes seconds), so such reads go through the reactor.
  const std::uint64_t submitted = rt_->block_on([]() -> spindle::task<std::uint64_t> {
    file f = co_await file::open("/dev/urandom");
    std::vector<std::byte> buffer(4096);
    const std::uint64_t before = spindle::io::current_reactor().operations_submitted();
    const std::size_t got = co_await f.read_at(buffer, 0);
    EXPECT_EQ(got, buffer.size());
    co_return spindle::io::current_reactor().operations_submitted() - before;
  }());
  EXPECT_EQ(submitted, 1u);
}

TEST_P(IoFileCachedRead, ODirectReadsGoThroughTheReactor) {
  const auto bytes = pattern_bytes(64 * 1024);
  rt_->block_on(write_file(path("direct"), bytes));
  const int probe = ::open(path("direct").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (probe < 0) GTEST_SKIP() << "no O_DIRECT on the test directory's file system";
  ::close(probe);
  struct direct_read {
    std::vector<std::byte> bytes;
    std::uint64_t submitted = 0;
  };
  const direct_read back = rt_->block_on([](std::string p) -> spindle::task<direct_read> {
    file f = co_await file::open(std::move(p), O_RDONLY | O_DIRECT);
    // O_DIRECT wants an aligned buffer.
    void* memory = nullptr;
    if (::posix_memalign(&memory, 4096, 64 * 1024) != 0) throw std::bad_alloc();
    std::unique_ptr<void, decltype(&::free)> owned(memory, &::free);
    const std::span<std::byte> buffer(static_cast<std::byte*>(memory), 64 * 1024);
    direct_read result;
    const std::uint64_t before = spindle::io::current_reactor().operations_submitted();
    for (std::uint64_t offset = 0; offset < buffer.size();) {
      const std::size_t got = co_await f.read_at(buffer.subspan(offset, 4096), offset);
      if (got == 0) break;
      offset += got;
    }
    result.submitted = spindle::io::current_reactor().operations_submitted() - before;
    result.bytes.assign(buffer.begin(), buffer.end());
    co_return result;
  }(path("direct")));
  EXPECT_TRUE(back.bytes == bytes);
  // Every one of the 16 reads went to the device: through the reactor, none on the worker.
  EXPECT_EQ(back.submitted, 16u);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoFileCachedRead,
                         ::testing::Values(io_backend::uring, io_backend::epoll),
                         spindle::testing::backend_name);

}  // namespace
