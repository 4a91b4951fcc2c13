// spindle::wait_group: counting, waking every waiter at zero, reuse, misuse, cancellation.
#include "spindle/sync/wait_group.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

TEST(WaitGroup, CountsAndRejectsGoingBelowZero) {
  spindle::wait_group g;
  EXPECT_EQ(g.count(), 0);
  g.add(2);
  g.done();
  EXPECT_EQ(g.count(), 1);
  g.done();
  EXPECT_EQ(g.count(), 0);
  EXPECT_THROW(g.done(), spindle::usage_error);
  EXPECT_EQ(g.count(), 0);
}

TEST(WaitGroup, WaitAtZeroReturnsAtOnce) {
  spindle::runtime rt({.workers = 2});
  spindle::wait_group g;
  rt.block_on(wait_for(g));
}

TEST(WaitGroup, WaitReturnsAfterEveryActivityIsDone) {
  spindle::runtime rt({.workers = 4});
  spindle::wait_group g;
  constexpr int activities = 50;
  std::atomic<int> finished{0};
  int observed = rt.block_on([&]() -> spindle::task<int> {
    g.add(activities);
    for (int i = 0; i < activities; ++i) {
      spindle::spawn([](spindle::wait_group& g, std::atomic<int>& finished) -> spindle::task<void> {
        co_await spindle::yield_now();
        finished.fetch_add(1);
        g.done();
      }(g, finished)).detach();
    }
    co_await g.wait();
    co_return finished.load();
  }());
  EXPECT_EQ(observed, activities);
}

TEST(WaitGroup, ReachingZeroWakesEveryWaiterAndTheGroupIsReusable) {
  spindle::runtime rt({.workers = 2});
  spindle::wait_group g;
  for (int round = 0; round < 3; ++round) {
    g.add(2);
    std::vector<spindle::join_handle<void>> waiters;
    for (int i = 0; i < 4; ++i) waiters.push_back(rt.spawn(wait_for(g)));
    spin_until([&] { return g.waiting() == 4; });
    g.done();
    EXPECT_EQ(g.waiting(), 4u);
    g.done();
    for (auto& w : waiters) w.join();
  }
}

TEST(WaitGroup, ACancelledWaiterIsUnlinked) {
  spindle::runtime rt({.workers = 2});
  spindle::wait_group g;
  g.add(1);
  auto victim = rt.spawn(wait_for(g));
  spin_until([&] { return g.waiting() == 1; });
  victim.cancel();
  EXPECT_TRUE(joined_cancelled(victim));
  EXPECT_EQ(g.waiting(), 0u);
  g.done();
}

TEST(WaitGroup, DestroyingAGroupWakesItsWaitersWithTaskCancelled) {
  spindle::runtime rt({.workers = 2});
  auto g = std::make_unique<spindle::wait_group>();
  g->add(1);
  auto waiter = rt.spawn(wait_for(*g));
  spin_until([&] { return g->waiting() == 1; });
  g.reset();
  EXPECT_TRUE(joined_cancelled(waiter));
}

}  // namespace
