// Shutdown while actors migrate: an actor handed to another executor (migration, or a stuck
// executor's hand-off) is in no homed list until its adopt message is delivered; one discarded
// at shutdown (an orphan) must still be halted and its cell freed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::actor_ref;
using spindle::runtime;
using spindle::spawn_actor;

std::uint64_t migrations_out(runtime& rt) {
  std::uint64_t total = 0;
  spindle::actor_system& system = spindle::actors_of(rt);
  for (std::uint32_t i = 0; i < rt.core().executor_count(); ++i) {
    if (const spindle::actor_scheduler* s = system.find_scheduler(i)) {
      total += s->stats().migrations_out.load();
    }
  }
  return total;
}

// Before the fix, a migrating actor orphaned at shutdown was given to adopt(idle), which skips
// an actor ever homed: it never halted, its behaviour and cell leaked (1-14 cells in most runs
// of a few rounds). Each round shuts down while a plain thread's sends make actors migrate.
TEST(ActorShutdown, AnActorMigratingAtShutdownIsHaltedAndFreed) {
  const std::uint64_t baseline = spindle::actor_system::live_cells();
  std::atomic<int> behaviours_alive{0};
  struct counted {
    std::atomic<int>* alive;
    explicit counted(std::atomic<int>* a) : alive(a) { alive->fetch_add(1); }
    counted(const counted& other) : alive(other.alive) { alive->fetch_add(1); }
    ~counted() { alive->fetch_sub(1); }
  };
  for (int round = 0; round < 30; ++round) {
    {
      runtime rt({.workers = 2});
      std::vector<actor_ref<int>> actors;
      for (int i = 0; i < 16; ++i) {
        actors.push_back(spawn_actor<int>(rt, [guard = counted(&behaviours_alive)](int&) {}));
      }
      std::atomic<bool> stop{false};
      std::thread sender([&] {
        while (!stop.load()) {
          for (auto& a : actors) a.send(1);
        }
      });
      // Shut down once actors are migrating (the sends keep them moving).
      spindle::testing::spin_until([&] { return migrations_out(rt) != 0; });
      rt.shutdown();
      stop.store(true);
      sender.join();
    }
    ASSERT_EQ(spindle::actor_system::live_cells(), baseline) << "round " << round;
    ASSERT_EQ(behaviours_alive.load(), 0) << "round " << round;
  }
}

}  // namespace
