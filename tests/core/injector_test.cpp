// Behaviour of core::injector: per-shard FIFO, batches, size estimates, and exactly-once
// delivery with concurrent producers and consumers.
#include <spindle/core/injector.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using spindle::core::injector;
using spindle::core::runnable;
using spindle::core::runnable_vtable;

void noop(runnable*) noexcept {}
const runnable_vtable noop_table = {&noop, &noop};

struct item : runnable {
  std::uint32_t index = 0;
  item() noexcept : runnable(&noop_table) {}
};

std::vector<item> make_items(std::size_t n) {
  std::vector<item> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i].index = std::uint32_t(i);
  return v;
}

TEST(Injector, EmptyShards) {
  injector inj(4);
  EXPECT_EQ(inj.shard_count(), 4u);
  EXPECT_FALSE(inj.any());
  std::size_t taken = 123;
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(inj.size(s), 0u);
    EXPECT_EQ(inj.pop_batch(s, 10, taken), nullptr);
    EXPECT_EQ(taken, 0u);
  }
}

TEST(Injector, ShardIsFifoAndBatchesAreBounded) {
  injector inj(2);
  auto v = make_items(10);
  for (auto& x : v) inj.push(1, &x);
  EXPECT_EQ(inj.size(1), 10u);
  EXPECT_EQ(inj.size(0), 0u);
  EXPECT_TRUE(inj.any());
  std::size_t taken = 0;
  runnable* first = inj.pop_batch(1, 4, taken);
  ASSERT_EQ(taken, 4u);
  EXPECT_EQ(inj.size(1), 6u);
  std::uint32_t expected = 0;
  std::size_t count = 0;
  for (runnable* r = first; r != nullptr; r = r->next, ++count) {
    EXPECT_EQ(static_cast<item*>(r)->index, expected++);
  }
  EXPECT_EQ(count, 4u);  // the batch is null-terminated
  first = inj.pop_batch(1, 100, taken);
  ASSERT_EQ(taken, 6u);
  for (runnable* r = first; r != nullptr; r = r->next) EXPECT_EQ(static_cast<item*>(r)->index, expected++);
  EXPECT_EQ(expected, 10u);
  EXPECT_FALSE(inj.any());
  EXPECT_EQ(inj.pop_batch(1, 1, taken), nullptr);
  // The emptied shard accepts new items (tail was reset).
  inj.push(1, &v[3]);
  first = inj.pop_batch(1, 5, taken);
  EXPECT_EQ(taken, 1u);
  EXPECT_EQ(first, &v[3]);
  EXPECT_EQ(first->next, nullptr);
}

TEST(Injector, PushBatchAppendsInOrder) {
  injector inj(1);
  auto v = make_items(6);
  inj.push(0, &v[0]);
  for (std::size_t i = 1; i + 1 < 5; ++i) v[i].next = &v[i + 1];
  v[4].next = &v[5];  // stale link past `last`: push_batch must terminate the batch at `last`
  inj.push_batch(0, &v[1], &v[4], 4);
  EXPECT_EQ(inj.size(0), 5u);
  std::size_t taken = 0;
  runnable* r = inj.pop_batch(0, 100, taken);
  EXPECT_EQ(taken, 5u);
  std::uint32_t expected = 0;
  for (; r != nullptr; r = r->next) EXPECT_EQ(static_cast<item*>(r)->index, expected++);
  EXPECT_EQ(expected, 5u);
  EXPECT_FALSE(inj.any());
}

TEST(Injector, ConcurrentProducersAndConsumersDeliverEachItemOnce) {
  constexpr std::size_t producers = 3, consumers = 3, per_producer = 100000, shards = 4;
  constexpr std::size_t total = producers * per_producer;
  auto v = make_items(total);
  std::vector<std::atomic<int>> seen(total);
  injector inj(shards);
  std::atomic<std::size_t> consumed{0};
  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (std::size_t i = 0; i < per_producer;) {
        const std::size_t base = p * per_producer + i;
        const std::size_t n = std::min<std::size_t>(1 + i % 5, per_producer - i);
        if (n == 1) {
          inj.push(base % shards, &v[base]);
        } else {
          for (std::size_t k = 0; k + 1 < n; ++k) v[base + k].next = &v[base + k + 1];
          inj.push_batch(base % shards, &v[base], &v[base + n - 1], n);
        }
        i += n;
      }
    });
  }
  for (std::size_t c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      std::size_t shard = c;
      while (consumed.load(std::memory_order_relaxed) < total) {
        std::size_t taken = 0;
        runnable* r = inj.pop_batch(shard++ % shards, 7, taken);
        std::size_t walked = 0;
        for (; r != nullptr; r = r->next, ++walked) {
          seen[static_cast<item*>(r)->index].fetch_add(1, std::memory_order_relaxed);
        }
        EXPECT_EQ(walked, taken);
        consumed.fetch_add(taken, std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(consumed.load(), total);
  EXPECT_FALSE(inj.any());
  for (std::size_t i = 0; i < total; ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
}

}  // namespace
