// The ledger stress harness shared by the actor stress tests (actor_interleave_test.cpp,
// actor_stash_become_test.cpp): every message is a ledger_token whose id is counted once in the
// ledger, whether a handler consumes it or it is destroyed unhandled (stashed, queued or in
// flight at a halt, or sent to a halted actor).
//
// Who takes part: `threads` sender threads, each sending `per_thread` tokens with its own ids
// round-robin to `actors` actors picked under refs_mutex; one killer thread that, paced (not
// synchronised) by a short sleep, kills or stops a random actor and puts a fresh one in its
// place; the test's `spawn` callable, which makes each actor (it captures the test's own
// counters). Shutdown steps: the senders are joined, the killer told to end and joined, the
// actors left are stopped and their halts awaited, then the runtime goes (destroying whatever
// tokens it still held). Only then the checks: no actor cell outlives the runtime (live_cells back
// to its baseline) and every id was accounted exactly once. The test asserts its own counters
// afterwards.
//
// Test executables are unity builds: everything here lives in spindle_test_ledger.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace spindle_test_ledger {

// Every token is handled or destroyed exactly once: `ledger[id]` counts both. The ledger
// outlives the runtime (run_ledger_stress owns it), so a token destroyed at shutdown still counts.
struct ledger_token {
  std::atomic<int>* ledger = nullptr;
  int id = -1;
  ledger_token(std::atomic<int>* l, int i) : ledger(l), id(i) {}
  ledger_token(ledger_token&& other) noexcept
      : ledger(other.ledger), id(std::exchange(other.id, -1)) {}
  ledger_token& operator=(ledger_token&&) = delete;
  ~ledger_token() {
    if (id >= 0) ledger[id].fetch_add(1);
  }
  // Handled: counted now, and not again when destroyed.
  void consume() { ledger[std::exchange(id, -1)].fetch_add(1); }
};

struct ledger_stress_options {
  int per_thread = 0;  // tokens each sender sends
  int threads = 4;     // sender threads
  int actors = 8;      // actors alive at once (the killer replaces each it halts)
  unsigned killer_seed = 0;
  std::chrono::steady_clock::duration halt_within = std::chrono::seconds(20);  // final halts
};

// Runs the senders and the killer against the actors `spawn(runtime&)` makes (each an
// actor_ref<ledger_token>), then checks live_cells and the ledger. Returns the tokens sent.
template <typename Spawn>
int run_ledger_stress(const ledger_stress_options& options, Spawn spawn) {
  using namespace std::chrono_literals;
  const int per_thread = options.per_thread;
  const int total = per_thread * options.threads;
  std::unique_ptr<std::atomic<int>[]> ledger(new std::atomic<int>[std::size_t(total)]);
  for (int i = 0; i < total; ++i) ledger[i].store(0);
  const std::uint64_t baseline = spindle::actor_system::live_cells();
  {
    spindle::runtime rt({.workers = 2});
    std::mutex refs_mutex;
    std::vector<spindle::actor_ref<ledger_token>> refs;
    for (int i = 0; i < options.actors; ++i) refs.push_back(spawn(rt));
    std::atomic<bool> sending{true};
    std::thread killer([&] {
      std::mt19937 random(options.killer_seed);
      while (sending.load()) {
        std::this_thread::sleep_for(200us);  // pacing, not synchronisation
        std::lock_guard lock(refs_mutex);
        const std::size_t victim = random() % refs.size();
        if (random() % 2 == 0) {
          refs[victim].kill();
        } else {
          refs[victim].stop();
        }
        refs[victim] = spawn(rt);  // a fresh one takes its place
      }
    });
    std::vector<std::thread> senders;
    for (int t = 0; t < options.threads; ++t) {
      senders.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          const int id = t * per_thread + i;
          spindle::actor_ref<ledger_token> target;
          {
            std::lock_guard lock(refs_mutex);
            target = refs[std::size_t(id) % refs.size()];
          }
          target.send(ledger_token(ledger.get(), id));  // halted: destroyed by the send
        }
      });
    }
    for (auto& s : senders) s.join();
    sending.store(false);
    killer.join();
    std::lock_guard lock(refs_mutex);
    for (auto& r : refs) r.stop();
    for (auto& r : refs) {
      spindle::testing::receive_within(spindle::monitor_actor(r), options.halt_within);
    }
  }
  EXPECT_EQ(spindle::actor_system::live_cells(), baseline);
  int wrong = 0;
  for (int i = 0; i < total; ++i) {
    if (ledger[i].load() != 1) {
      if (++wrong < 5) {
        ADD_FAILURE() << "token " << i << " accounted " << ledger[i].load() << " times";
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  return total;
}

}  // namespace spindle_test_ledger
