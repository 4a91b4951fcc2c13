// Named tasks (T6): spawn top-level tasks under a name and wait for them by that name.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;

spindle::task<int> wait_for_release(spindle::event* release, std::atomic<int>* finished) {
  co_await release->wait();
  finished->fetch_add(1);
  co_return 1;
}

spindle::task<int> waits_by_name(std::string name, std::atomic<int>* finished) {
  co_await spindle::wait_named(std::move(name));
  co_return finished->load();
}

TEST(NamedTasks, WaitReturnsOnceEveryTaskOfThatNameCompleted) {
  spindle::runtime rt({.workers = 2});
  spindle::event release;
  std::atomic<int> finished{0};
  auto a = rt.spawn_named("loader", wait_for_release(&release, &finished));
  auto b = rt.spawn_named("loader", wait_for_release(&release, &finished));
  EXPECT_EQ(rt.live_named("loader"), 2u);
  auto waiter = rt.spawn(waits_by_name("loader", &finished));
  EXPECT_FALSE(waiter.is_finished());
  release.set();
  EXPECT_EQ(waiter.join(), 2);  // woken only after both ran to the end
  EXPECT_EQ(rt.live_named("loader"), 0u);
  a.join();
  b.join();
}

TEST(NamedTasks, WaitForANameNobodyHoldsReturnsAtOnce) {
  spindle::runtime rt({.workers = 1});
  std::atomic<int> finished{7};
  EXPECT_EQ(rt.block_on(waits_by_name("nobody", &finished)), 7);
}

spindle::task<int> parent_spawns_named(std::atomic<int>* finished) {
  // A top-level task, not a child: the parent does not hold it, later code waits by name.
  spindle::spawn_named("background", [](std::atomic<int>* f) -> spindle::task<void> {
    co_await spindle::sleep_for(2ms);
    f->fetch_add(1);
  }(finished)).detach();
  co_return 0;
}

TEST(NamedTasks, TasksSpawnTopLevelNamedTasksThatOthersWaitFor) {
  spindle::runtime rt({.workers = 2});
  std::atomic<int> finished{0};
  rt.block_on(parent_spawns_named(&finished));
  EXPECT_EQ(rt.block_on(waits_by_name("background", &finished)), 1);
}

spindle::task<void> cleans_up_slowly(std::atomic<int>* cleaned, spindle::event* started) {
  spindle::tidy([cleaned]() -> spindle::task<void> {
    co_await spindle::sleep_for(2ms);
    cleaned->fetch_add(1);
  });
  started->set();
  spindle::event never;
  co_await never.wait();
}

spindle::task<void> wait_event(spindle::event* e) { co_await e->wait(); }

TEST(NamedTasks, TheNameIsHeldUntilTidyDestructorsFinished) {
  spindle::runtime rt({.workers = 2});
  std::atomic<int> cleaned{0};
  spindle::event started;
  auto h = rt.spawn_named("session", cleans_up_slowly(&cleaned, &started));
  rt.block_on(wait_event(&started));
  h.cancel();
  EXPECT_EQ(rt.block_on(waits_by_name("session", &cleaned)), 1);
  EXPECT_THROW(h.join(), spindle::task_cancelled);
}

TEST(NamedTasks, WaitingIsACancellationPoint) {
  spindle::runtime rt({.workers = 2});
  spindle::event release;
  std::atomic<int> finished{0};
  auto holder = rt.spawn_named("held", wait_for_release(&release, &finished));
  auto waiter = rt.spawn(waits_by_name("held", &finished));
  ASSERT_TRUE(spindle::testing::eventually([&] { return rt.live_tasks() == 2; }));
  waiter.cancel();
  EXPECT_THROW(waiter.join(), spindle::task_cancelled);
  release.set();
  holder.join();
}

TEST(NamedTasks, ANamedTaskCancelledBeforeItRanReleasesItsName) {
  spindle::runtime rt({.workers = 1});
  spindle::testing::executor_blocker blocker(rt);  // nothing starts until released
  spindle::event never;
  std::atomic<int> finished{0};
  auto h = rt.spawn_named("doomed", wait_for_release(&never, &finished));
  EXPECT_EQ(rt.live_named("doomed"), 1u);
  h.cancel();
  blocker.release();
  EXPECT_THROW(h.join(), spindle::task_cancelled);
  EXPECT_EQ(rt.live_named("doomed"), 0u);
}

TEST(NamedTasks, ManyWaitersAndTasksUnderOneName) {
  spindle::runtime rt({.workers = 2});
  spindle::event release;
  std::atomic<int> finished{0};
  std::vector<spindle::join_handle<int>> named, waiters;
  for (int i = 0; i < 50; ++i) named.push_back(rt.spawn_named("crowd", wait_for_release(&release, &finished)));
  for (int i = 0; i < 50; ++i) waiters.push_back(rt.spawn(waits_by_name("crowd", &finished)));
  release.set();
  for (auto& w : waiters) EXPECT_EQ(w.join(), 50);
  for (auto& n : named) n.join();
}

}  // namespace
