// Stress: timers to actors (actor_timers.hpp) armed and cancelled by thousands across threads.
//
//   ActorTimersStress.ArmAndCancelAcrossThreadsAccountsForEveryTimer
//       4 threads each arm 25,000 one-shots (0-2 ms, real time) at 8 actors and cancel about half of
//       them at random moments, some long before, some around the fire, some after: every
//       timer is delivered exactly once or cancelled (cancel() true), never both, never neither;
//       periodic timers run alongside and are cancelled at the end; while some actors are
//       stopped with timers armed. No timer stays armed, no cell is left.
//
// Nothing sleeps to synchronise: the test thread polls until the counts say the work is done,
// with a bounded wait (a hang fails the test instead of hitting the ctest timeout). Counts are divided by `scale` under sanitizers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <thread>
#include <variant>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int timer_stress_scale = 5;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr int timer_stress_scale = 5;
#else
constexpr int timer_stress_scale = 1;
#endif
#else
constexpr int timer_stress_scale = 1;
#endif

struct stress_shot {
  std::uint32_t id;
};
struct stress_tick {};

struct stress_target {
  using message_type = std::variant<stress_shot, stress_tick>;
  std::vector<std::atomic<int>>* delivered;
  std::atomic<std::uint64_t>* ticks;
  void receive(message_type& m) {
    if (auto* s = std::get_if<stress_shot>(&m)) {
      (*delivered)[s->id].fetch_add(1, std::memory_order_relaxed);
    } else {
      ticks->fetch_add(1, std::memory_order_relaxed);
    }
  }
};

TEST(ActorTimersStress, ArmAndCancelAcrossThreadsAccountsForEveryTimer) {
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  constexpr int threads = 4;
  const int per_thread = 25'000 / timer_stress_scale;
  std::vector<std::atomic<int>> delivered(std::size_t(threads * per_thread));
  std::vector<std::atomic<int>> cancelled(std::size_t(threads * per_thread));
  std::atomic<std::uint64_t> ticks{0};
  {
    spindle::runtime rt({.workers = 2});
    std::vector<spindle::actor_ref<stress_target::message_type>> targets;
    for (int i = 0; i < 8; ++i) {
      targets.push_back(spindle::spawn_actor<stress_target>(rt, stress_target{&delivered, &ticks}));
    }
    // Targets that are stopped with timers armed (their timers are not counted in `delivered`).
    std::vector<spindle::actor_ref<stress_target::message_type>> doomed;
    std::vector<std::atomic<int>> doomed_delivered(1);
    for (int i = 0; i < 4; ++i) {
      doomed.push_back(spindle::spawn_actor<stress_target>(rt, stress_target{&doomed_delivered, &ticks}));
    }
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937 random(std::uint32_t(t) * 104729u + 7u);
        std::vector<spindle::actor_timer> periodic;
        std::vector<std::pair<std::uint32_t, spindle::actor_timer>> held;
        for (int i = 0; i < per_thread; ++i) {
          const std::uint32_t id = std::uint32_t(t * per_thread + i);
          auto& target = targets[random() % targets.size()];
          held.emplace_back(id, spindle::send_after(target, std::chrono::microseconds(random() % 2000),
                                                    stress_shot{id}));
          if (i % 500 == 0) periodic.push_back(spindle::send_interval(target, 1ms, stress_tick{}));
          if (i % 250 == 0) {
            (void)spindle::send_after(doomed[random() % doomed.size()], 1h, stress_shot{0});
            (void)spindle::send_interval(doomed[random() % doomed.size()], 1ms, stress_tick{});
          }
          // Cancel some of the held timers: the newest (likely before its fire) or an older one
          // (around or after its fire).
          while (held.size() > 64 || (!held.empty() && random() % 2 == 0)) {
            const std::size_t pick = random() % 3 == 0 ? held.size() - 1 : random() % held.size();
            if (random() % 2 == 0 && held[pick].second.cancel()) {
              cancelled[held[pick].first].fetch_add(1, std::memory_order_relaxed);
            }
            held.erase(held.begin() + std::ptrdiff_t(pick));
          }
        }
        for (auto& p : periodic) EXPECT_TRUE(p.cancel());
      });
    }
    std::thread stopper([&] {
      for (auto& d : doomed) d.stop();
    });
    for (auto& w : workers) w.join();
    stopper.join();
    std::uint64_t expected = 0;
    for (auto& c : cancelled) expected += c.load() == 0 ? 1 : 0;
    ASSERT_TRUE(eventually([&] {
      std::uint64_t sum = 0;
      for (auto& d : delivered) sum += std::uint64_t(d.load());
      return sum >= expected && armed_timers(rt) == 0;
    }, std::chrono::seconds(120)));
    std::uint64_t both = 0, neither = 0, twice = 0;
    for (std::size_t id = 0; id < delivered.size(); ++id) {
      const int d = delivered[id].load();
      const int c = cancelled[id].load();
      twice += d > 1 ? 1 : 0;
      both += d == 1 && c == 1 ? 1 : 0;
      neither += d == 0 && c == 0 ? 1 : 0;
    }
    std::printf("timers: %zu, cancelled: %llu, delivered: %llu, periodic ticks: %llu\n",
                delivered.size(), static_cast<unsigned long long>(delivered.size() - expected),
                static_cast<unsigned long long>(expected),
                static_cast<unsigned long long>(ticks.load()));
    EXPECT_EQ(twice, 0u);
    EXPECT_EQ(both, 0u);
    EXPECT_EQ(neither, 0u);
    for (auto& d : doomed) EXPECT_EQ(d.state(), spindle::actor_state::halted);
  }
  EXPECT_TRUE(eventually([&] { return spindle::actor_system::live_cells() == cells_before; }));
}

}  // namespace
