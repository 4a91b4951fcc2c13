// Stress: registered names under churn (registry.hpp).
//
//   ActorRegistryStress.NamesChurnAndEveryRegistrationEndsExactlyOnce
//       4 threads share a pool of 8 names: each spawns actors, registers them under names from
//       the pool (a name held by another thread's live actor is name_in_use), keeps up to 4
//       registrations, and ends each one either by unregister_name (it must return true: only
//       the holder unregisters its names) or by halting its actor (kill, a stop message, a
//       crash), then checks the name no longer leads to that actor. Names are freed on the
//       executors (halt callbacks) while other threads register the same names, and a name
//       whose actor is seen halted may be taken at once while its callback is still to come:
//       a holder checks, while it holds, that whereis finds its own actor. At the end every
//       registration ended exactly once (registered = unregistered + freed by a halt), no name
//       is left, every name_in_use named an actor that held a name, and every cell is freed.
//
// Nothing sleeps to synchronise; waits are bounded by a stall guard (a hang is a failure).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::actor_context;
using spindle::actor_id;
using spindle::actor_ref;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::testing::under_asan;
using spindle::testing::under_tsan;

constexpr bool registry_sanitized = under_tsan || under_asan;
constexpr int registry_scale = under_tsan ? 20 : under_asan ? 5 : 1;
const std::chrono::seconds registry_stall_limit{registry_sanitized ? 180 : 45};

// Stops on 0, crashes on a negative number, ignores the rest.
struct churn_actor {
  using message_type = int;
  void receive(int value, actor_context<int>& ctx) {
    if (value < 0) throw std::runtime_error("crashed on purpose");
    if (value == 0) ctx.stop();
  }
};

struct holding {
  actor_ref<int> actor;
  std::string name;
};

struct thread_tally {
  std::uint64_t registered = 0;
  std::uint64_t unregistered = 0;
  std::uint64_t freed_by_halt = 0;
  std::uint64_t in_use = 0;
  std::uint64_t failures = 0;  // a check that did not hold (reported by the test thread)
  std::vector<actor_id> registered_actors;
  std::vector<actor_id> in_use_holders;
  std::string first_failure;
};

std::uint32_t churn_random(std::uint32_t& state) {
  state ^= state << 13;
  state ^= state >> 17;
  state ^= state << 5;
  return state;
}

TEST(ActorRegistryStress, NamesChurnAndEveryRegistrationEndsExactlyOnce) {
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  constexpr int threads = 4;
  constexpr int pool = 8;
  const int rounds = 20000 / registry_scale;
  std::array<thread_tally, threads> tallies;
  std::atomic<std::uint64_t> progress{0};
  {
    runtime rt({.workers = 2});
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        thread_tally& tally = tallies[t];
        std::uint32_t random = 0x9e3779b9u * std::uint32_t(t + 1);
        std::vector<holding> held;
        auto fail = [&](const std::string& what) {
          if (tally.failures++ == 0) tally.first_failure = what;
        };
        // Ends one registration: unregister, or halt the actor and wait for its down.
        auto end_one = [&](std::size_t index) {
          holding h = std::move(held[index]);
          held.erase(held.begin() + std::ptrdiff_t(index));
          if (spindle::whereis(rt, h.name) != h.actor) fail("whereis lost a held name: " + h.name);
          const std::uint32_t how = churn_random(random) % 4;
          if (how == 0) {
            if (!spindle::unregister_name(rt, h.name)) fail("unregister of a held name said no");
            ++tally.unregistered;
            if (spindle::registered_name(rt, h.actor)) fail("unregistered, still named");
            h.actor.kill();
            return;
          }
          auto down = spindle::monitor_actor(h.actor);  // told once it is Halted: no name then
          if (how == 1) {
            h.actor.kill();
          } else {
            h.actor.send(how == 2 ? 0 : -1);
          }
          down.blocking_receive();
          ++tally.freed_by_halt;
          if (spindle::registered_name(rt, h.actor)) fail("halted, still named: " + h.name);
          if (spindle::whereis(rt, h.name) == h.actor) fail("halted, still found: " + h.name);
        };
        for (int round = 0; round < rounds; ++round) {
          auto a = spawn_actor<churn_actor>(rt);
          const std::string name = "pool-" + std::to_string(churn_random(random) % pool);
          try {
            spindle::register_name(rt, name, a);
            ++tally.registered;
            tally.registered_actors.push_back(a.id());
            held.push_back({a, name});
          } catch (const spindle::name_in_use& e) {
            ++tally.in_use;
            tally.in_use_holders.push_back(e.holder);
            a.kill();
          }
          if (held.size() > 4 || (!held.empty() && churn_random(random) % 2 == 0)) {
            end_one(churn_random(random) % held.size());
          }
          progress.fetch_add(1, std::memory_order_relaxed);  // relaxed: a stall guard's counter
        }
        while (!held.empty()) end_one(held.size() - 1);
      });
    }
    // The stall guard: the threads block only in blocking_receive (a lost down would hang).
    std::uint64_t last = 0;
    auto last_change = std::chrono::steady_clock::now();
    bool hung = false;
    while (progress.load(std::memory_order_relaxed) < std::uint64_t(threads) * rounds) {
      const std::uint64_t now_progress = progress.load(std::memory_order_relaxed);
      if (now_progress != last) {
        last = now_progress;
        last_change = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last_change > registry_stall_limit) {
        hung = true;
        break;
      }
      std::this_thread::yield();
    }
    if (hung) {  // the threads cannot be joined: a hang ends the run here, as a failure
      std::fprintf(stderr, "hang: no progress for %lld s\n",
                   static_cast<long long>(registry_stall_limit.count()));
      std::abort();
    }
    for (std::thread& w : workers) w.join();
    EXPECT_TRUE(spindle::registered_names(rt).empty());
  }
  std::uint64_t registered = 0, ended = 0, in_use = 0;
  std::unordered_set<actor_id> holders_ever;
  for (const thread_tally& tally : tallies) {
    EXPECT_EQ(tally.failures, 0u) << tally.first_failure;
    registered += tally.registered;
    ended += tally.unregistered + tally.freed_by_halt;
    in_use += tally.in_use;
    holders_ever.insert(tally.registered_actors.begin(), tally.registered_actors.end());
  }
  EXPECT_EQ(registered, ended) << "a registration ended twice or never";
  EXPECT_EQ(holders_ever.size(), registered) << "an actor registered twice";
  for (const thread_tally& tally : tallies) {
    for (const actor_id holder : tally.in_use_holders) {
      EXPECT_EQ(holders_ever.count(holder), 1u) << "name_in_use named actor " << holder;
    }
  }
  EXPECT_GT(in_use, 0u) << "no two threads ever wanted one name: the test raced nothing";
  EXPECT_EQ(spindle::actor_system::live_cells(), cells_before);
  std::printf("registrations %llu, name_in_use %llu\n",
              static_cast<unsigned long long>(registered), static_cast<unsigned long long>(in_use));
}

}  // namespace
