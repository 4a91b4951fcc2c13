// semaphore::permit: the permit guard of acquire_permit() / try_acquire_permit(): released on
// destruction, on release(), moved with the guard, kept by forget(), never more holders than
// permits, and a cancelled acquire_permit() owning nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <utility>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

TEST(SemaphorePermit, ReleasedWhenDestroyedOrEarlyAndMovedWithTheGuard) {
  spindle::semaphore s(2);
  {
    spindle::semaphore::permit first = s.try_acquire_permit();
    ASSERT_TRUE(first);
    EXPECT_EQ(first.get(), &s);
    EXPECT_EQ(s.available(), 1u);
    spindle::semaphore::permit moved = std::move(first);
    EXPECT_FALSE(first.owns_permit());
    EXPECT_TRUE(moved.owns_permit());
    EXPECT_EQ(s.available(), 1u);
    spindle::semaphore::permit second = s.try_acquire_permit();
    ASSERT_TRUE(second);
    EXPECT_FALSE(s.try_acquire_permit());  // none left: an empty permit
    second.release();
    EXPECT_EQ(s.available(), 1u);
    EXPECT_THROW(second.release(), spindle::usage_error);
    moved = s.try_acquire_permit();  // move-assigning releases what `moved` held
    EXPECT_EQ(s.available(), 1u);
  }
  EXPECT_EQ(s.available(), 2u);
  spindle::semaphore::permit kept = s.try_acquire_permit();
  EXPECT_EQ(kept.forget(), &s);
  EXPECT_EQ(s.available(), 1u);  // forgotten: not given back
}

spindle::task<void> permit_holder(spindle::semaphore* s, std::atomic<int>* holders,
                                  std::atomic<int>* max_holders, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    spindle::semaphore::permit held = co_await s->acquire_permit();
    raise_max(*max_holders, holders->fetch_add(1) + 1);
    co_await spindle::yield_now();  // held across a suspension
    holders->fetch_sub(1);
  }
}

spindle::task<void> permit_holders(spindle::semaphore* s, std::atomic<int>* holders,
                                   std::atomic<int>* max_holders) {
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < 8; ++i) handles.push_back(spindle::spawn(permit_holder(s, holders, max_holders, 500)));
  for (auto& handle : handles) co_await std::move(handle);
}

TEST(SemaphorePermit, NeverMoreHoldersThanPermits) {
  spindle::runtime rt({.workers = 2});
  spindle::semaphore s(3);
  std::atomic<int> holders{0}, max_holders{0};
  rt.block_on(permit_holders(&s, &holders, &max_holders));
  EXPECT_LE(max_holders.load(), 3);
  EXPECT_GE(max_holders.load(), 1);
  EXPECT_EQ(s.available(), 3u);
}

spindle::task<bool> permit_waiter(spindle::semaphore* s) {
  spindle::semaphore::permit held = co_await s->acquire_permit();
  co_return held.owns_permit();
}

TEST(SemaphorePermit, CancelledWaiterOwnsNothing) {
  spindle::runtime rt({.workers = 2});
  spindle::semaphore s(0);
  auto waiter = rt.spawn(permit_waiter(&s));
  ASSERT_TRUE(eventually([&] { return s.waiting() == 1; }));
  waiter.cancel();
  EXPECT_THROW(waiter.join(), spindle::task_cancelled);
  s.release();
  EXPECT_EQ(s.available(), 1u);  // the permit was not taken by the cancelled waiter
  EXPECT_TRUE(rt.spawn(permit_waiter(&s)).join());
  EXPECT_EQ(s.available(), 1u);  // and the second waiter's permit came back on destruction
}

}  // namespace
