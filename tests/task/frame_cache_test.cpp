// The frame cache gives memory back (issue 14, item 10): what the frame allocator keeps for
// reuse stays under its bound (runtime_options::frame_cache_bytes per executor) whatever the
// churn, is gone once the runtime (or embedded executor) that held the share is destroyed, and
// is given back by executors that stay parked for frame_cache_idle_trim. Asserted through the
// allocator's own counters (core/frame_allocator.hpp), not RSS (noisy; bench/memory/footprint.cpp
// measures RSS). Under ASan and TSan the cache is bypassed (plain malloc): nothing to assert.
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;
using spindle::core::frame_cache_stats;

constexpr bool cache_bypassed = under_asan || under_tsan;
#define SKIP_WHEN_BYPASSED()                                                    \
  if (cache_bypassed) GTEST_SKIP() << "sanitizer build: the frame cache is bypassed"

// Spawns `count` tasks from this thread, all alive at once (their handles are kept), then joins
// them: the frames are allocated here and freed on the workers and here, so freed blocks overflow
// the threads' private caches into the shared depot.
void spawn_burst(spindle::runtime& rt, int count) {
  std::vector<spindle::join_handle<int>> handles;
  handles.reserve(std::size_t(count));
  for (int i = 0; i < count; ++i) handles.push_back(rt.spawn([i] { return i; }));
  long sum = 0;
  for (auto& handle : handles) sum += handle.join();
  EXPECT_EQ(sum, long(count) * (count - 1) / 2);
}

// A tree of spawned tasks (skynet-like): frames allocated and freed on the workers.
spindle::task<long> spawn_tree(long number, long size) {
  if (size == 1) co_return number;
  const long child_size = size / 10;
  spindle::join_handle<long> children[10];
  for (long i = 0; i < 10; ++i) {
    children[i] = spindle::spawn(spawn_tree(number + i * child_size, child_size));
  }
  long sum = 0;
  for (auto& child : children) sum += co_await child;
  co_return sum;
}

TEST(FrameCache, NothingIsCachedOnceTheRuntimeIsDestroyed) {
  SKIP_WHEN_BYPASSED();
  const auto before = frame_cache_stats();
  {
    spindle::runtime rt({.workers = 2, .frame_cache_idle_trim = std::chrono::nanoseconds(0)});
    spawn_burst(rt, 100'000);
    // The burst did fill the depot (else this test would prove nothing).
    EXPECT_GT(frame_cache_stats().depot_bytes, 0u);
  }
  const auto after = frame_cache_stats();
  EXPECT_EQ(after.depot_bytes, 0u) << "bytes still cached in the depot";
  EXPECT_EQ(after.thread_bytes, 0u) << "bytes still cached by the destroying thread";
  EXPECT_EQ(after.depot_bound, before.depot_bound) << "the runtime's share was not given back";
}

TEST(FrameCache, NothingIsCachedOnceAnActorFloodIsDrainedAndTheRuntimeDestroyed) {
  SKIP_WHEN_BYPASSED();
  constexpr long messages = 200'000;
  {
    spindle::runtime rt({.workers = 2, .frame_cache_idle_trim = std::chrono::nanoseconds(0)});
    std::atomic<long> handled{0};
    auto sink = spindle::spawn_actor<long>(
        rt, [&handled](long&) { handled.fetch_add(1, std::memory_order_relaxed); });
    for (long i = 0; i < messages; ++i) sink.send(long(i));  // envelopes made here, freed there
    ASSERT_TRUE(eventually([&] { return handled.load() == messages; }, std::chrono::seconds(20)));
    EXPECT_GT(frame_cache_stats().depot_bytes, 0u);
  }
  const auto after = frame_cache_stats();
  EXPECT_EQ(after.depot_bytes, 0u);
  EXPECT_EQ(after.thread_bytes, 0u);
}

TEST(FrameCache, TheDepotBoundHoldsUnderChurn) {
  SKIP_WHEN_BYPASSED();
  constexpr std::size_t per_executor = 64 * 1024;
  const auto before = frame_cache_stats();
  spindle::runtime rt({.workers = 2,
                       .frame_cache_bytes = per_executor,
                       .frame_cache_idle_trim = std::chrono::nanoseconds(0)});
  const std::size_t bound = frame_cache_stats().depot_bound;
  EXPECT_EQ(bound, before.depot_bound + 2 * per_executor);
  spindle::core::reset_frame_cache_peak();
  const std::uint64_t released_before = frame_cache_stats().batches_released;
  // Churn: two foreign threads spawning bursts while the workers run spawn trees.
  std::vector<std::thread> spawners;
  for (int t = 0; t < 2; ++t) {
    spawners.emplace_back([&rt] {
      for (int round = 0; round < 4; ++round) spawn_burst(rt, 20'000);
    });
  }
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(rt.block_on(spawn_tree(0, 10'000)), 10'000L * 9'999 / 2);
  }
  for (auto& spawner : spawners) spawner.join();
  const auto after = frame_cache_stats();
  EXPECT_LE(after.depot_peak_bytes, bound) << "the depot held more than its bound";
  EXPECT_LE(after.depot_bytes, bound);
  // The churn went past the bound, so memory went back to malloc.
  EXPECT_GT(after.batches_released, released_before);
}

// Frees `count` small frames on the calling thread (they stay in its private cache); returns
// what the cache then holds.
spindle::task<std::size_t> fill_private_cache(int count) {
  std::vector<void*> blocks;
  for (int i = 0; i < count; ++i) blocks.push_back(spindle::core::allocate_frame(48));
  for (void* block : blocks) spindle::core::deallocate_frame(block);
  co_return frame_cache_stats().thread_bytes;
}
spindle::task<std::size_t> private_cache_bytes() { co_return frame_cache_stats().thread_bytes; }

TEST(FrameCache, ExecutorsParkedForTheIdleTrimGiveTheCacheBack) {
  SKIP_WHEN_BYPASSED();
  spindle::runtime rt({.workers = 2, .frame_cache_idle_trim = std::chrono::milliseconds(20)});
  auto& core = rt.core();
  const std::uint32_t executors = core.executor_count();
  spawn_burst(rt, 50'000);
  // Each executor's private cache holds something (fewer blocks than one batch: none of them
  // goes to the depot).
  std::vector<std::uint64_t> trims_before;
  for (std::uint32_t i = 0; i < executors; ++i) {
    trims_before.push_back(core.executor_at(i).stats().frame_cache_trims.load());
    EXPECT_GT(rt.spawn_on(i, fill_private_cache(100)).join(), 0u) << "executor " << i;
  }
  // Each executor gives its private cache back once parked 20 ms, and the monitor trims the
  // depot to what other runtimes may keep (the bound without this runtime's share) once both
  // have been parked that long. Polled with a generous deadline.
  const std::size_t keep =
      frame_cache_stats().depot_bound - executors * core.options().frame_cache_bytes;
  EXPECT_TRUE(eventually(
      [&] {
        for (std::uint32_t i = 0; i < executors; ++i) {
          if (core.executor_at(i).stats().frame_cache_trims.load() == trims_before[i]) return false;
        }
        return frame_cache_stats().depot_bytes <= keep;
      },
      std::chrono::seconds(2)))
      << "depot bytes " << frame_cache_stats().depot_bytes;
  for (std::uint32_t i = 0; i < executors; ++i) {
    EXPECT_EQ(rt.spawn_on(i, private_cache_bytes()).join(), 0u) << "executor " << i;
  }
  // A foreign thread refills the depot after everyone parked (it drops the handles of tasks
  // that finished): the monitor trims that too (it counts only trims that gave something back).
  std::vector<spindle::join_handle<int>> handles;
  for (int i = 0; i < 20'000; ++i) handles.push_back(rt.spawn([i] { return i; }));
  for (auto& handle : handles) {
    while (!handle.is_finished()) std::this_thread::yield();
  }
  const std::uint64_t depot_trims_before = rt.core().monitor().frame_depot_trims();
  handles.clear();  // frees the tasks here: this thread's cache overflows into the depot
  EXPECT_TRUE(eventually(
      [&] {
        return frame_cache_stats().depot_bytes <= keep &&
               rt.core().monitor().frame_depot_trims() > depot_trims_before;
      },
      std::chrono::seconds(2)))
      << "depot bytes " << frame_cache_stats().depot_bytes;
}

TEST(FrameCache, AnEmbeddedExecutorGivesItsShareBack) {
  SKIP_WHEN_BYPASSED();
  const auto before = frame_cache_stats();
  {
    test_host host;
    spindle::embed::embedded_executor executor(host);
    EXPECT_EQ(frame_cache_stats().depot_bound,
              before.depot_bound + spindle::embed::embedded_options{}.frame_cache_bytes);
    auto root = executor.spawn(spawn_tree(0, 100'000));
    host.run_until_idle(executor);
    ASSERT_TRUE(root.is_finished());
    EXPECT_EQ(root.join(), 100'000L * 99'999 / 2);
  }
  const auto after = frame_cache_stats();
  EXPECT_EQ(after.depot_bytes, 0u);
  EXPECT_EQ(after.thread_bytes, 0u);
  EXPECT_EQ(after.depot_bound, before.depot_bound);
}

TEST(FrameCache, OptionsOutOfRangeAreRefused) {
  const auto before = frame_cache_stats();
  const std::size_t too_many = spindle::core::max_frame_cache_bytes + 1;
  EXPECT_THROW(spindle::runtime({.workers = 1, .frame_cache_bytes = too_many}),
               spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1,
                                 .frame_cache_idle_trim = std::chrono::nanoseconds(-1)}),
               spindle::usage_error);
  EXPECT_EQ(frame_cache_stats().depot_bound, before.depot_bound);  // nothing added by them
}

}  // namespace
