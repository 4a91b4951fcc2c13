// Behaviour of core::local_queue: owner LIFO/FIFO ends, overflow, stealing rules, 16-bit
// position wrap-around, and a small concurrent owner/thief check (the long one is in
// tests/stress/spawn_stress_test.cpp, the exhaustive-ish one in tests/model/local_queue_model.cpp).
#include <spindle/core/local_queue.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using spindle::core::local_queue;

// Collects what a queue hands to its overflow sink.
struct sink {
  std::vector<int*> items;
  std::vector<std::uint32_t> batches;
  void operator()(int** batch, std::uint32_t count) {
    batches.push_back(count);
    for (std::uint32_t i = 0; i < count; ++i) items.push_back(batch[i]);
  }
};

struct no_overflow {
  void operator()(int**, std::uint32_t) { ADD_FAILURE() << "unexpected overflow"; }
};

TEST(LocalQueue, StartsEmpty) {
  local_queue<int, 8> q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_EQ(q.pop_oldest(), nullptr);
  local_queue<int, 8> thief;
  EXPECT_EQ(q.steal_into(thief), nullptr);
  EXPECT_EQ(q.steal_into(thief, true), nullptr);
  EXPECT_EQ(local_queue<int>::capacity, 256u);
}

TEST(LocalQueue, PopIsNewestFirst) {
  int v[5] = {};
  local_queue<int, 8> q;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.push(&v[i], no_overflow{}), std::uint32_t(i + 1));
  EXPECT_EQ(q.size(), 5u);
  for (int i = 4; i >= 0; --i) EXPECT_EQ(q.pop(), &v[i]);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.empty());
}

TEST(LocalQueue, PopOldestIsOldestFirst) {
  int v[5] = {};
  local_queue<int, 8> q;
  for (auto& x : v) q.push(&x, no_overflow{});
  for (auto& x : v) EXPECT_EQ(q.pop_oldest(), &x);
  EXPECT_EQ(q.pop_oldest(), nullptr);
}

TEST(LocalQueue, MixedEnds) {
  int v[4] = {};
  local_queue<int, 8> q;
  for (auto& x : v) q.push(&x, no_overflow{});
  EXPECT_EQ(q.pop_oldest(), &v[0]);
  EXPECT_EQ(q.pop(), &v[3]);
  EXPECT_EQ(q.pop_oldest(), &v[1]);
  EXPECT_EQ(q.pop(), &v[2]);
  EXPECT_TRUE(q.empty());
}

TEST(LocalQueue, PushOldestRunsAfterEverythingQueued) {
  int a = 0, b = 0, c = 0, y = 0;
  local_queue<int, 8> q;
  q.push(&a, no_overflow{});
  q.push(&b, no_overflow{});
  q.push(&c, no_overflow{});
  q.push_oldest(&y, no_overflow{});
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.pop(), &c);
  EXPECT_EQ(q.pop(), &b);
  EXPECT_EQ(q.pop(), &a);
  EXPECT_EQ(q.pop(), &y);
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(LocalQueue, PushOldestIntoEmptyQueue) {
  int y = 0;
  local_queue<int, 4> q;
  q.push_oldest(&y, no_overflow{});
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.pop_oldest(), &y);
  EXPECT_TRUE(q.empty());
}

TEST(LocalQueue, PushOldestFillsToCapacityThenOverflows) {
  int v[5] = {};
  local_queue<int, 4> q;
  sink s;
  for (int i = 0; i < 4; ++i) q.push_oldest(&v[i], s);
  EXPECT_TRUE(s.items.empty());
  EXPECT_EQ(q.size(), 4u);
  q.push_oldest(&v[4], s);  // full: goes to the overflow alone
  ASSERT_EQ(s.items.size(), 1u);
  EXPECT_EQ(s.items[0], &v[4]);
  // Pushed at the oldest end one after another: the last pushed is the oldest.
  for (int i = 3; i >= 0; --i) EXPECT_EQ(q.pop_oldest(), &v[i]);
}

// The pushed item stays in the ring (issue 13's attack: a task woken beside yielders that kept
// the ring full went to the back of the injector with the half).
TEST(LocalQueue, FullRingMovesOldestHalfToOverflowAndKeepsTheItem) {
  constexpr std::uint32_t cap = 8;
  int v[cap + 1] = {};
  local_queue<int, cap> q;
  sink s;
  for (std::uint32_t i = 0; i < cap; ++i) EXPECT_EQ(q.push(&v[i], s), i + 1);
  EXPECT_TRUE(s.items.empty());
  EXPECT_EQ(q.size(), cap);
  const std::uint32_t after = q.push(&v[cap], s);
  EXPECT_EQ(after, cap / 2 + 1);
  EXPECT_EQ(q.size(), cap / 2 + 1);
  ASSERT_EQ(s.batches.size(), 1u);
  EXPECT_EQ(s.batches[0], cap / 2);
  ASSERT_EQ(s.items.size(), cap / 2);
  for (std::uint32_t i = 0; i < cap / 2; ++i) EXPECT_EQ(s.items[i], &v[i]) << i;  // oldest half, in order
  EXPECT_EQ(q.pop(), &v[cap]);  // the new item, at the newest end
  for (std::uint32_t i = cap; i-- > cap / 2;) EXPECT_EQ(q.pop(), &v[i]);
  EXPECT_TRUE(q.empty());
}

TEST(LocalQueue, StealTakesOldestFloorHalf) {
  int v[7] = {};
  local_queue<int, 16> victim, thief;
  for (auto& x : v) victim.push(&x, no_overflow{});
  // floor(7/2) = 3: v0 returned, v1 and v2 moved to the thief's queue in order.
  EXPECT_EQ(victim.steal_into(thief), &v[0]);
  EXPECT_EQ(victim.size(), 4u);
  EXPECT_EQ(thief.size(), 2u);
  EXPECT_EQ(thief.pop_oldest(), &v[1]);
  EXPECT_EQ(thief.pop_oldest(), &v[2]);
  for (int i = 6; i >= 3; --i) EXPECT_EQ(victim.pop(), &v[i]);
}

TEST(LocalQueue, StealLeavesLoneItemToItsOwner) {
  int a = 0;
  local_queue<int, 8> victim, thief;
  victim.push(&a, no_overflow{});
  EXPECT_EQ(victim.steal_into(thief), nullptr);
  EXPECT_EQ(victim.size(), 1u);
  // The stuck-owner theft takes ceil(1/2) = 1.
  EXPECT_EQ(victim.steal_into(thief, /*include_newest=*/true), &a);
  EXPECT_TRUE(victim.empty());
  EXPECT_TRUE(thief.empty());
}

TEST(LocalQueue, StealIncludeNewestTakesCeilHalf) {
  int v[5] = {};
  local_queue<int, 8> victim, thief;
  for (auto& x : v) victim.push(&x, no_overflow{});
  EXPECT_EQ(victim.steal_into(thief, true), &v[0]);  // ceil(5/2) = 3
  EXPECT_EQ(victim.size(), 2u);
  EXPECT_EQ(thief.size(), 2u);
  EXPECT_EQ(thief.pop(), &v[2]);
  EXPECT_EQ(thief.pop(), &v[1]);
  EXPECT_EQ(victim.pop(), &v[4]);
  EXPECT_EQ(victim.pop(), &v[3]);
}

TEST(LocalQueue, StealRefusedWhenThiefAlreadyHasPlenty) {
  int v[8] = {}, w[5] = {};
  local_queue<int, 8> victim, thief;
  for (auto& x : v) victim.push(&x, no_overflow{});
  for (auto& x : w) thief.push(&x, no_overflow{});  // more than capacity/2
  EXPECT_EQ(victim.steal_into(thief), nullptr);
  EXPECT_EQ(victim.size(), 8u);
  EXPECT_EQ(thief.size(), 5u);
  thief.pop();  // exactly capacity/2: allowed, and the stolen items fit
  EXPECT_EQ(victim.steal_into(thief), &v[0]);
  EXPECT_EQ(thief.size(), 4u + 3u);
  EXPECT_EQ(victim.size(), 4u);
}

TEST(LocalQueue, StealFromFullVictimFitsIntoHalfFullThief) {
  int v[8] = {}, w[4] = {};
  local_queue<int, 8> victim, thief;
  for (auto& x : v) victim.push(&x, no_overflow{});
  for (auto& x : w) thief.push(&x, no_overflow{});
  EXPECT_EQ(victim.steal_into(thief, true), &v[0]);  // ceil(8/2) = 4, 3 moved
  EXPECT_EQ(thief.size(), 7u);
  // Thief's items: its own four (newest end first after the stolen ones).
  EXPECT_EQ(thief.pop(), &v[3]);
  EXPECT_EQ(thief.pop(), &v[2]);
  EXPECT_EQ(thief.pop(), &v[1]);
  for (int i = 3; i >= 0; --i) EXPECT_EQ(thief.pop(), &w[i]);
}

TEST(LocalQueue, PositionsWrapAroundSixteenBits) {
  // 200k operations move the free-running 16-bit positions through several wraps; a steal each
  // round keeps `steal`/`real` moving too.
  int v[4] = {};
  local_queue<int, 4> q, other;
  for (int round = 0; round < 70000; ++round) {
    for (auto& x : v) q.push(&x, no_overflow{});
    ASSERT_EQ(q.size(), 4u);
    ASSERT_EQ(q.steal_into(other), &v[0]);
    ASSERT_EQ(other.pop(), &v[1]);
    ASSERT_EQ(other.pop(), nullptr);
    ASSERT_EQ(q.pop_oldest(), &v[2]);
    ASSERT_EQ(q.pop(), &v[3]);
    ASSERT_TRUE(q.empty());
    q.push_oldest(&v[0], no_overflow{});
    ASSERT_EQ(q.pop(), &v[0]);
  }
}

TEST(LocalQueue, OverflowAcrossWrapKeepsEveryItem) {
  constexpr int total = 300000;
  std::vector<int> values(total);
  std::vector<int> seen(total, 0);
  local_queue<int, 16> q;
  std::vector<int*> overflowed;
  auto overflow = [&](int** batch, std::uint32_t count) {
    for (std::uint32_t i = 0; i < count; ++i) overflowed.push_back(batch[i]);
  };
  for (int i = 0; i < total; ++i) {
    q.push(&values[i], overflow);
    if (i % 3 == 0) {
      if (int* p = q.pop()) ++seen[p - values.data()];
    }
    if (i % 7 == 0) {
      if (int* p = q.pop_oldest()) ++seen[p - values.data()];
    }
  }
  while (int* p = q.pop()) ++seen[p - values.data()];
  for (int* p : overflowed) ++seen[p - values.data()];
  for (int i = 0; i < total; ++i) ASSERT_EQ(seen[i], 1) << "item " << i;
}

// One owner pushing/popping at both ends, one thief stealing: every item obtained exactly once.
TEST(LocalQueue, ConcurrentOwnerAndThiefSeeEachItemOnce) {
  constexpr int total = 200000;
  std::vector<int> values(total);
  std::vector<std::atomic<int>> seen(total);
  local_queue<int, 64> q;
  std::atomic<bool> done{false};
  std::atomic<int> taken{0};
  auto record = [&](int* p) {
    seen[p - values.data()].fetch_add(1, std::memory_order_relaxed);
    taken.fetch_add(1, std::memory_order_relaxed);
  };
  std::thread thief([&] {
    local_queue<int, 64> mine;
    while (!done.load(std::memory_order_acquire) || !q.empty()) {
      if (int* p = q.steal_into(mine, (taken.load(std::memory_order_relaxed) & 1) != 0)) record(p);
      while (int* p = mine.pop()) record(p);
    }
  });
  std::vector<int*> overflowed;
  auto overflow = [&](int** batch, std::uint32_t count) {
    for (std::uint32_t i = 0; i < count; ++i) overflowed.push_back(batch[i]);
  };
  for (int i = 0; i < total; ++i) {
    q.push(&values[i], overflow);
    if (i % 4 == 1) {
      if (int* p = q.pop()) record(p);
    } else if (i % 4 == 3) {
      if (int* p = q.pop_oldest()) record(p);
    }
  }
  while (int* p = q.pop()) record(p);
  done.store(true, std::memory_order_release);
  thief.join();
  for (int* p : overflowed) record(p);
  EXPECT_EQ(taken.load(), total);
  for (int i = 0; i < total; ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
}

}  // namespace
