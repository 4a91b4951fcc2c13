// Slots (T5): at most one running occupant; a new one cancels the earlier ones and starts only
// after they completed, their tidy destructors included.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;

struct occupancy {
  std::atomic<int> running{0};
  std::atomic<int> most_at_once{0};
  std::atomic<int> bodies_started{0};
  std::vector<std::string> journal;  // appended by one task at a time (checked by `running`)
  void enter() {
    const int now = running.fetch_add(1) + 1;
    int seen = most_at_once.load();
    while (now > seen && !most_at_once.compare_exchange_weak(seen, now)) {
    }
    bodies_started.fetch_add(1);
  }
};

spindle::task<int> occupant(occupancy* o, int id, spindle::event* entered) {
  o->enter();
  o->journal.push_back("start " + std::to_string(id));
  spindle::tidy([o, id]() -> spindle::task<void> {
    co_await spindle::sleep_for(1ms);  // a clean-up that takes a while, shielded
    o->journal.push_back("tidy " + std::to_string(id));
    o->running.fetch_sub(1);
  });
  if (entered != nullptr) entered->set();
  spindle::event never;
  co_await never.wait();  // runs until replaced
  co_return id;
}

spindle::task<int> quick_occupant(occupancy* o, int id) {
  o->enter();
  struct leave {
    occupancy* o;
    ~leave() { o->running.fetch_sub(1); }  // also when cancelled at the yield
  } guard{o};
  o->journal.push_back("start " + std::to_string(id));
  co_await spindle::yield_now();
  co_return id;
}

spindle::task<void> wait_for(spindle::event& e) { co_await e.wait(); }

TEST(TaskSlot, ANewOccupantStartsOnlyAfterThePreviousOneCleanedUp) {
  spindle::runtime rt({.workers = 2});
  spindle::task_slot slot("search");
  occupancy o;
  spindle::event first_in;
  auto first = slot.spawn(rt, occupant(&o, 1, &first_in));
  rt.block_on(wait_for(first_in));
  auto second = slot.spawn(rt, quick_occupant(&o, 2));
  EXPECT_EQ(second.join(), 2);
  EXPECT_THROW(first.join(), spindle::task_cancelled);
  EXPECT_EQ(o.most_at_once.load(), 1);
  EXPECT_EQ(o.journal, (std::vector<std::string>{"start 1", "tidy 1", "start 2"}));
  EXPECT_EQ(slot.occupants(), 0u);
}

TEST(TaskSlot, OccupantsReplacedBeforeTheyStartNeverRun) {
  spindle::runtime rt({.workers = 2});
  spindle::task_slot slot;
  occupancy o;
  spindle::event first_in;
  auto first = slot.spawn(rt, occupant(&o, 1, &first_in));
  rt.block_on(wait_for(first_in));
  // These queue behind the first (still cleaning up or running) and are replaced at once.
  std::vector<spindle::join_handle<int>> replaced;
  for (int id = 2; id <= 20; ++id) replaced.push_back(slot.spawn(rt, quick_occupant(&o, id)));
  auto last = slot.spawn(rt, quick_occupant(&o, 21));
  EXPECT_EQ(last.join(), 21);
  for (auto& h : replaced) {
    // Each was either replaced before it could start (cancelled) or ran alone to completion.
    try {
      h.join();
    } catch (const spindle::task_cancelled&) {
    }
  }
  EXPECT_THROW(first.join(), spindle::task_cancelled);
  EXPECT_EQ(o.most_at_once.load(), 1);
  EXPECT_EQ(o.journal.front(), "start 1");
  EXPECT_EQ(o.journal.back(), "start 21");
}

spindle::task<int> submits_from_inside(spindle::task_slot* slot, occupancy* o) {
  auto h = slot->spawn(quick_occupant(o, 7));  // the caller's host: this runtime
  co_return co_await std::move(h);
}

TEST(TaskSlot, SpawnFromInsideATaskUsesItsHost) {
  spindle::runtime rt({.workers = 1});
  spindle::task_slot slot;
  occupancy o;
  EXPECT_EQ(rt.block_on(submits_from_inside(&slot, &o)), 7);
}

TEST(TaskSlot, ManySubmittersNeverRunTwoAtOnce) {
  spindle::runtime rt({.workers = 2});
  spindle::task_slot slot;
  occupancy o;
  std::vector<spindle::join_handle<int>> handles;
  for (int id = 0; id < 2000; ++id) handles.push_back(slot.spawn(rt, quick_occupant(&o, id)));
  int completed = 0, cancelled = 0;
  for (auto& h : handles) {
    try {
      h.join();
      ++completed;
    } catch (const spindle::task_cancelled&) {
      ++cancelled;
    }
  }
  EXPECT_EQ(completed + cancelled, 2000);
  EXPECT_GE(completed, 1);  // at least the last one
  EXPECT_GE(o.bodies_started.load(), completed);  // some started, then were replaced
  EXPECT_EQ(o.most_at_once.load(), 1);
}

TEST(TaskSlot, DestroyingTheSlotLeavesOccupantsRunning) {
  spindle::runtime rt({.workers = 1});
  occupancy o;
  spindle::join_handle<int> h;
  {
    spindle::task_slot slot;
    h = slot.spawn(rt, quick_occupant(&o, 3));
  }
  EXPECT_EQ(h.join(), 3);
}

}  // namespace
