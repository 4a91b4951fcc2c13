// Registered names under races from foreign threads (registry.hpp, "Lifetime"): a registration
// racing its actor's halt never leaves a stale name; whereis racing unregister and a halt finds
// the actor or nothing; a name given to a new actor once the old one is seen halted is not
// freed by the old one's late halt callback.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::actor_handle;
using spindle::actor_ref;
using spindle::actor_state;
using spindle::runtime;
using spindle::send_result;
using spindle::spawn_actor;
using spindle::testing::eventually;

struct race_target {
  using message_type = int;
  void receive(int) {}
};

// Starts `bodies` on threads of their own at (about) the same moment and joins them.
template <class... F>
void race(F&&... bodies) {
  std::atomic<int> arrived{0};
  constexpr int count = sizeof...(F);
  std::vector<std::thread> threads;
  auto start = [&](auto& body) {
    threads.emplace_back([&arrived, &body] {
      arrived.fetch_add(1, std::memory_order_acq_rel);  // acq_rel: the start line
      while (arrived.load(std::memory_order_acquire) < count) std::this_thread::yield();
      body();
    });
  };
  (start(bodies), ...);
  for (std::thread& t : threads) t.join();
}

TEST(ActorRegistryRace, RegisteringRacingTheActorsHaltLeavesNoStaleName) {
  runtime rt({.workers = 2});
  int registered = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    auto a = spawn_actor<race_target>(rt);
    bool ok = false;
    race(
        [&] {
          try {
            spindle::register_name(rt, "racer", a);
            ok = true;
          } catch (const spindle::actor_unavailable&) {
            // It had halted: no name.
          }
        },
        [&] { a.kill(); });
    (ok ? registered : refused) += 1;
    // Told once the actor is Halted: from then on it has no name, callback run or not.
    spindle::monitor_actor(a).blocking_receive();
    ASSERT_TRUE(spindle::registered_names(rt).empty()) << "round " << round << ": a stale name";
    ASSERT_FALSE(spindle::whereis(rt, "racer"));
    ASSERT_FALSE(spindle::unregister_name(rt, "racer")) << "round " << round;
  }
  std::printf("registered before the halt %d times, refused %d times\n", registered, refused);
}

TEST(ActorRegistryRace, WhereisRacingUnregisterAndHaltFindsTheActorOrNothing) {
  runtime rt({.workers = 2});
  int unregistered = 0;
  for (int round = 0; round < 1000; ++round) {
    auto a = spawn_actor<race_target>(rt);
    spindle::register_name(rt, "contested", a);
    std::atomic<int> wrong{0};
    bool removed = false;
    auto look = [&] {
      for (int i = 0; i < 50; ++i) {
        const actor_ref<int> found = spindle::whereis<int>(rt, "contested");
        if (!found) continue;
        if (found != a) wrong.fetch_add(1, std::memory_order_relaxed);  // relaxed: read after join
        const send_result r = found.send(1);
        if (r != send_result::queued && r != send_result::halted) {
          wrong.fetch_add(1, std::memory_order_relaxed);
        }
      }
    };
    race(look, look, [&] { removed = spindle::unregister_name(rt, "contested"); },
         [&] { a.kill(); });
    unregistered += removed;
    ASSERT_EQ(wrong.load(), 0) << "round " << round;
    spindle::monitor_actor(a).blocking_receive();
    ASSERT_TRUE(spindle::registered_names(rt).empty()) << "round " << round;
    ASSERT_FALSE(spindle::unregister_name(rt, "contested"));
  }
  std::printf("unregistered before the halt freed it: %d of 1000\n", unregistered);
}

TEST(ActorRegistryRace, ANameReusedAtOnceAfterAHaltSurvivesTheOldHaltsCallback) {
  runtime rt({.workers = 2});
  for (int round = 0; round < 1000; ++round) {
    auto old_actor = spawn_actor<race_target>(rt);
    auto new_actor = spawn_actor<race_target>(rt);
    spindle::register_name(rt, "reborn", old_actor);
    // In the watch list before the halt: told after the old name callback ran (in order).
    auto old_down = spindle::monitor_actor(old_actor);
    race([&] { old_actor.kill(); },
         [&] {
           // Seen halted: the name is free at once (its callback may still be to come).
           if (!eventually([&] { return old_actor.state() == actor_state::halted; })) return;
           spindle::register_name(rt, "reborn", new_actor);
         });
    old_down.blocking_receive();
    ASSERT_EQ(spindle::whereis(rt, "reborn"), new_actor)
        << "round " << round << ": the old actor's halt freed the new registration";
    ASSERT_TRUE(spindle::unregister_name(rt, "reborn"));
    new_actor.kill();
  }
}

}  // namespace
