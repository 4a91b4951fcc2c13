// Slots (T5): at most one running occupant; a new one cancels the earlier ones and starts only
// after they completed, their tidy destructors included.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
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

// --- a flood of pushes while an occupant tidies up slowly (issue 14, item 11) ----------------

using spindle::testing::eventually;
using spindle::testing::frame_counter;

// Runs until replaced; its clean-up lasts until `tidy_may_end` is set.
spindle::task<int> slow_tidier(spindle::event* entered, spindle::event* tidy_may_end) {
  spindle::tidy([tidy_may_end]() -> spindle::task<void> { co_await tidy_may_end->wait(); });
  entered->set();
  spindle::event never;
  co_await never.wait();
  co_return 0;
}

// A body owning something whose destruction is counted (its captured state).
spindle::task<int> counted_body(frame_counter, int id) { co_return id; }

// Runs until replaced, owning counted state; tidies up at once.
spindle::task<int> counted_runner(frame_counter, spindle::event* entered, int id) {
  entered->set();
  spindle::event never;
  co_await never.wait();
  co_return id;
}

// Each push used to scan (and cancel again) every earlier occupant still waiting for its turn,
// and those waited for the slow one: 10k/20k/40k pushes took 1.1/5.4/25 s. Now a push touches
// the occupant holding the turn and the one queued for it, nothing else. The bound below is
// generous (the pushes take milliseconds); it only tells O(1) from O(n) per push.
TEST(TaskSlot, PushesStayCheapWhileAnOccupantTidiesUpSlowly) {
  spindle::runtime rt({.workers = 2});
  spindle::task_slot slot;
  spindle::event first_in, tidy_may_end;
  auto first = slot.spawn(rt, slow_tidier(&first_in, &tidy_may_end));
  rt.block_on(wait_for(first_in));
  const int pushes = spindle::testing::under_tsan || spindle::testing::under_asan ? 8000 : 40000;
  std::atomic<int> destroyed{0};
  const auto start = std::chrono::steady_clock::now();
  const auto limit = 5s;
  spindle::join_handle<int> last;
  int pushed = 0;
  while (pushed < pushes) {
    last = slot.spawn(rt, counted_body(frame_counter(destroyed), pushed));
    ++pushed;
    if (pushed % 1000 == 0 && std::chrono::steady_clock::now() - start > limit) break;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(pushed, pushes) << "gave up after "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                            << " ms";
  // Memory stays bounded: every replaced occupant ended and freed its body, although the first
  // one is still cleaning up; what is left is that one and the newest.
  EXPECT_TRUE(eventually([&] { return destroyed.load() == pushed - 1; }, 10s))
      << destroyed.load() << " of " << pushed - 1 << " replaced bodies freed";
  EXPECT_FALSE(first.is_finished());
  EXPECT_EQ(slot.occupants(), 2u);
  tidy_may_end.set();
  EXPECT_EQ(last.join(), pushed - 1);
  EXPECT_THROW(first.join(), spindle::task_cancelled);
  EXPECT_EQ(destroyed.load(), pushed);
  EXPECT_EQ(slot.occupants(), 0u);
}

// Pushes `a`, lets it run up to its turn await (one worker: the yield puts this task behind it),
// then pushes `b`, which replaces it there.
spindle::task<void> push_two(spindle::task_slot* slot, spindle::task<int> a, spindle::task<int> b,
                             spindle::join_handle<int>* a_handle,
                             spindle::join_handle<int>* b_handle) {
  *a_handle = slot->spawn(std::move(a));
  co_await spindle::yield_now();
  *b_handle = slot->spawn(std::move(b));
}

// A replaced occupant waiting for its turn used to wait on (not a cancellation point), holding its
// body, and its handle read pending until every occupant before it had ended.
TEST(TaskSlot, AReplacedOccupantEndsAtOnceAndFreesItsBody) {
  spindle::runtime rt({.workers = 1});
  spindle::task_slot slot;
  spindle::event first_in, tidy_may_end;
  auto first = slot.spawn(rt, slow_tidier(&first_in, &tidy_may_end));
  rt.block_on(wait_for(first_in));
  std::atomic<int> destroyed{0};
  spindle::join_handle<int> second, third;
  rt.block_on(push_two(&slot, counted_body(frame_counter(destroyed), 2),
                       counted_body(frame_counter(destroyed), 3), &second, &third));
  // The first still cleans up; the second, replaced while it waited, has ended, body freed.
  EXPECT_TRUE(eventually([&] { return second.is_finished(); }, 5s));
  EXPECT_EQ(second.status(), spindle::task_status::cancelled);
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_FALSE(first.is_finished());
  EXPECT_FALSE(third.is_finished());
  tidy_may_end.set();
  EXPECT_THROW(second.join(), spindle::task_cancelled);
  EXPECT_EQ(third.join(), 3);
  EXPECT_THROW(first.join(), spindle::task_cancelled);
  EXPECT_EQ(destroyed.load(), 2);
}

// Pushes `a` and lets it run up to its turn await (one worker: the yield puts this task behind it).
spindle::task<void> push_one(spindle::task_slot* slot, spindle::task<int> a,
                             spindle::join_handle<int>* a_handle) {
  *a_handle = slot->spawn(std::move(a));
  co_await spindle::yield_now();
}

// The turn await is a cancellation point (T3): an occupant cancelled through its handle while it
// waits ends at once, and the turn still passes on after the holder's clean-up.
TEST(TaskSlot, AWaitingOccupantCancelledThroughItsHandleEndsAtOnce) {
  spindle::runtime rt({.workers = 1});
  spindle::task_slot slot;
  spindle::event first_in, tidy_may_end;
  auto first = slot.spawn(rt, slow_tidier(&first_in, &tidy_may_end));
  rt.block_on(wait_for(first_in));
  std::atomic<int> destroyed{0};
  spindle::join_handle<int> second;
  rt.block_on(push_one(&slot, counted_body(frame_counter(destroyed), 2), &second));
  second.cancel();
  EXPECT_TRUE(eventually([&] { return second.is_finished(); }, 5s));
  EXPECT_EQ(second.status(), spindle::task_status::cancelled);
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_FALSE(first.is_finished());  // cancelled by the push, cleaning up
  EXPECT_EQ(slot.occupants(), 1u);
  occupancy o;
  auto third = slot.spawn(rt, quick_occupant(&o, 3));
  EXPECT_EQ(o.bodies_started.load(), 0);
  tidy_may_end.set();
  EXPECT_EQ(third.join(), 3);
  EXPECT_THROW(first.join(), spindle::task_cancelled);
  EXPECT_THROW(second.join(), spindle::task_cancelled);
  EXPECT_EQ(slot.occupants(), 0u);
}

// An occupant that ran and was replaced frees its body when it ends, not when its handle goes.
TEST(TaskSlot, AReplacedRunningOccupantFreesItsBodyWhenItEnds) {
  spindle::runtime rt({.workers = 2});
  spindle::task_slot slot;
  std::atomic<int> destroyed{0};
  spindle::event first_in;
  auto first = slot.spawn(rt, counted_runner(frame_counter(destroyed), &first_in, 1));
  rt.block_on(wait_for(first_in));
  auto second = slot.spawn(rt, spindle::testing::value(2));
  EXPECT_EQ(second.join(), 2);
  ASSERT_TRUE(first.is_finished());  // the second started only after the first had ended
  EXPECT_EQ(first.status(), spindle::task_status::cancelled);
  EXPECT_EQ(destroyed.load(), 1);  // while `first` still holds the task
}

// Lifetime: a slot destroyed while an occupant tidies up and another waits for its turn. The
// occupants share the slot's queue; the waiting one still starts after the clean-up, alone.
TEST(TaskSlot, ASlotDestroyedWhileAnOccupantTidiesStillRunsTheNextAfterIt) {
  spindle::runtime rt({.workers = 2});
  occupancy o;
  spindle::event first_in, tidy_may_end;
  spindle::join_handle<int> first, second;
  {
    spindle::task_slot slot;
    first = slot.spawn(rt, slow_tidier(&first_in, &tidy_may_end));
    rt.block_on(wait_for(first_in));
    second = slot.spawn(rt, quick_occupant(&o, 2));
  }
  EXPECT_FALSE(first.is_finished());
  EXPECT_EQ(o.bodies_started.load(), 0);
  tidy_may_end.set();
  EXPECT_EQ(second.join(), 2);
  EXPECT_THROW(first.join(), spindle::task_cancelled);
}

// Lifetime: the runtime shut down while an occupant tidies up and another waits for its turn.
// Both end cancelled; every body is freed with the runtime (ASan: nothing leaks).
TEST(TaskSlot, ShutdownWhileAnOccupantTidiesEndsEveryOccupant) {
  std::atomic<int> destroyed{0};
  spindle::task_slot slot;
  spindle::join_handle<int> first, second;
  spindle::event tidy_may_end;  // never set: the clean-up is cut by the shutdown
  {
    spindle::runtime rt({.workers = 2});
    spindle::event first_in;
    first = slot.spawn(rt, slow_tidier(&first_in, &tidy_may_end));
    rt.block_on(wait_for(first_in));
    second = slot.spawn(rt, counted_body(frame_counter(destroyed), 2));
    EXPECT_TRUE(eventually([&] { return slot.occupants() == 2; }, 10s));
  }
  EXPECT_EQ(first.status(), spindle::task_status::cancelled);
  EXPECT_EQ(second.status(), spindle::task_status::cancelled);
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(slot.occupants(), 0u);
}

// Runs briefly; its clean-up yields twice before it leaves (`running` covers body and clean-up).
spindle::task<int> tidying_occupant(occupancy* o, int id) {
  o->enter();
  spindle::tidy([o]() -> spindle::task<void> {
    co_await spindle::yield_now();  // shielded: not a cancellation point here
    co_await spindle::yield_now();
    o->running.fetch_sub(1);
  });
  co_await spindle::yield_now();
  co_return id;
}

// The racy parts together: pushes from several threads (each replacing holders that clean up and
// queued occupants that wait or are on their way), cancels through handles racing with them.
TEST(TaskSlot, ConcurrentPushesAndCancelsNeverRunTwoAtOnce) {
  spindle::runtime rt({.workers = 2});
  spindle::task_slot slot;
  occupancy o;
  const int per_thread = spindle::testing::under_tsan ? 300 : 2000;
  std::atomic<int> ended{0};
  std::vector<std::thread> submitters;
  for (int s = 0; s < 3; ++s) {
    submitters.emplace_back([&, s] {
      std::vector<spindle::join_handle<int>> handles;
      for (int i = 0; i < per_thread; ++i) {
        handles.push_back(slot.spawn(rt, tidying_occupant(&o, s * per_thread + i)));
        if (i % 3 == s) handles.back().cancel();
      }
      for (auto& h : handles) {
        try {
          h.join();
        } catch (const spindle::task_cancelled&) {
        }
        ended.fetch_add(1);
      }
    });
  }
  for (auto& t : submitters) t.join();
  EXPECT_EQ(ended.load(), 3 * per_thread);
  EXPECT_LE(o.most_at_once.load(), 1);  // 0 when every body was replaced or cancelled first
  EXPECT_EQ(o.running.load(), 0);
  EXPECT_EQ(slot.occupants(), 0u);
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
