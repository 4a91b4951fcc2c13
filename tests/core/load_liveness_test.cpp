// Load that means something while a runnable never returns (issue 13, item 8; load.md): the
// utilisation of an executor held by one long runnable rises while that runnable still runs, and
// placement from plain threads (P2C) steers new work away from it.
//
// The long runnable spins until the test releases it or a generous deadline passed
// (support/liveness_support.hpp): a wrong reading fails the test at that bound, never hangs it.
#include <spindle/spindle.hpp>
#include <spindle/core/executor.hpp>
#include <spindle/core/runtime_core.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <variant>
#include <vector>

#include "support/liveness_support.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;

using spindle::testing::utilisation_of;

// Spins without yielding until `release` or the liveness deadline; records when it started.
spindle::task<void> spin_until_released(std::atomic<bool>* spinning,
                                        std::atomic<std::int64_t>* started_ns,
                                        const std::atomic<bool>* release) {
  started_ns->store(liveness_clock::now().time_since_epoch().count());
  spinning->store(true);
  spin_until_set(*release, liveness_clock::now() + liveness_deadline);
  spinning->store(false);
  co_return;
}

// A 2-worker runtime whose executor 0 is held by one runnable that never returns (until the test
// ends or 3 s passed).
class StuckExecutor : public ::testing::Test {
 protected:
  void SetUp() override {
    spinner = rt.spawn_on(0, spin_until_released(&spinning, &started_ns, &release));
    ASSERT_TRUE(eventually([this] { return spinning.load(); }, liveness_wait));
  }
  void TearDown() override {
    release.store(true);
    if (spinner.valid()) join_bounded(std::move(spinner));
  }
  // Waits until executor 0 has been held for `duration` (the stuck stretch being set up, not
  // synchronisation).
  void hold_for(liveness_clock::duration duration) {
    const liveness_clock::time_point since{liveness_clock::duration(started_ns.load())};
    eventually([&] { return liveness_clock::now() - since >= duration; }, liveness_wait);
  }

  std::atomic<bool> release{false}, spinning{false};
  std::atomic<std::int64_t> started_ns{0};
  spindle::runtime rt{{.workers = 2}};
  set_on_exit release_spinner{release};
  spindle::join_handle<void> spinner;
};

// Utilisation of executor 0 reads above 0.5 within 2 s while it is 100 % busy in one runnable,
// and that runnable is still running then; idle executor 1 reads lower. (Today the statistic is
// updated only between runnables and when parking: it stays where it was, ~0, for as long as the
// runnable runs.)
TEST_F(StuckExecutor, UtilisationRisesWhileOneRunnableHoldsTheExecutor) {
  const bool busy_seen = eventually([&] { return utilisation_of(rt, 0) > 0.5; }, 2s);
  const bool still_running = spinning.load();
  EXPECT_TRUE(busy_seen) << "utilisation of executor 0 still reads " << utilisation_of(rt, 0)
                         << " after 2 s busy in one runnable";
  EXPECT_TRUE(still_running);
  if (busy_seen) {
    EXPECT_LT(utilisation_of(rt, 1), utilisation_of(rt, 0)) << "idle executor 1";
  }
}

// Tasks spawned from a plain thread while executor 0 is held all run, on executor 1, while
// executor 0 is still held.
TEST_F(StuckExecutor, TasksSpawnedFromAPlainThreadRunOnTheOtherExecutor) {
  hold_for(50ms);
  std::vector<spindle::join_handle<std::uint32_t>> spawned;
  for (int i = 0; i < 100; ++i) spawned.push_back(rt.spawn(where_am_i()));
  const bool all_ran = eventually(
      [&] {
        for (auto& h : spawned) {
          if (!h.is_finished()) return false;
        }
        return true;
      },
      liveness_wait);
  EXPECT_TRUE(all_ran) << "tasks spawned from a plain thread wait behind the held executor";
  EXPECT_TRUE(spinning.load());
  if (all_ran) {
    for (auto& h : spawned) EXPECT_EQ(h.join(), 1u);
  }
}

struct inert {
  using message_type = int;
  void receive(int) {}
};

// Actors spawned from a plain thread are placed by P2C (actor.hpp, "Placement"): with executor 0
// held by one runnable for 50 ms, at least 180 of 200 get executor 1 as their home. (Today P2C
// compares queued work only: a held executor with an empty queue ties with an idle one, and
// about half the actors are placed where they cannot run.)
TEST_F(StuckExecutor, ActorsSpawnedFromAPlainThreadAvoidTheHeldExecutor) {
  hold_for(50ms);
  constexpr int actors = 200;
  std::vector<spindle::actor_ref<int>> refs;
  for (int i = 0; i < actors; ++i) refs.push_back(spindle::spawn_actor<inert>(rt));
  int on_one = 0;
  for (auto& r : refs) on_one += r.home_executor() == 1 ? 1 : 0;
  EXPECT_TRUE(spinning.load());
  EXPECT_GE(on_one, actors * 9 / 10) << on_one << " of " << actors
                                     << " actors were placed on the idle executor; the others "
                                        "on the one held by a long runnable";
}

}  // namespace
