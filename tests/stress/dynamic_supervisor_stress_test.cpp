// Stress: dynamic supervisors (dynamic_supervisor.hpp) under churn.
//
//   DynamicSupervisorStress.ChurnOfCrashLoopingChildrenIsAccountedForExactly
//       four foreign threads start eight thousand children (a third crash-looping on a short
//       back-off, the rest crashing or ending when told) and terminate them at random, while the
//       supervisor's one timer carries hundreds of back-offs at once; afterwards every child is
//       listed, terminated or ended exactly once, the supervisor's counts agree with the
//       callers', every incarnation halts after the stop, and no actor cell leaks.
//
// Bounded waits only (receive_within, eventually): a hang is a failure, not a ctest timeout.
// Scale: fewer operations under sanitizers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace dynamic_supervisor_stress {

using namespace std::chrono_literals;
using spindle::testing::eventually;
using spindle::testing::receive_within;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int scale = 5;
#else
constexpr int scale = 1;
#endif

struct churned {
  using message_type = int;
  bool loop = false;
  void on_start(spindle::actor_context<int>&) {
    if (loop) throw std::runtime_error("crash loop");
  }
  void receive(int value, spindle::actor_context<int>& ctx) {
    if (value < 0) throw std::runtime_error("crash");
    if (value == 0) ctx.stop();
  }
};

TEST(DynamicSupervisorStress, ChurnOfCrashLoopingChildrenIsAccountedForExactly) {
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  {
    spindle::runtime rt({.workers = 2});
    spindle::dynamic_supervisor_spec spec;
    spec.limit = spindle::restart_limit::unlimited();
    spec.backoff = {2ms, 2.0, 16ms, 1s};
    auto sup = spindle::spawn_dynamic_supervisor(rt, spec);
    std::atomic<std::uint64_t> incarnations{0};
    std::mutex mutex;
    std::map<spindle::dynamic_child_id, int> terminated;
    std::uint64_t started = 0;
    std::vector<std::thread> callers;
    const int operations = 4000 / scale;
    for (int t = 0; t < 4; ++t) {
      callers.emplace_back([&, t] {
        std::mt19937 random(99u + unsigned(t));
        std::vector<spindle::started_child> mine;
        for (int i = 0; i < operations; ++i) {
          const unsigned what = random() % 10;
          if (what < 5 || mine.empty()) {
            spindle::dynamic_child_spec child;
            child.restart = spindle::restart_type(random() % 3);
            const bool loop = random() % 3 == 0;
            child.stop_timeout = 50ms;
            child.start = [&rt, &incarnations, loop](const spindle::spawn_options& o) {
              incarnations.fetch_add(1, std::memory_order_relaxed);
              return spindle::actor_handle(spindle::spawn_actor<churned>(rt, o, churned{loop}));
            };
            auto c = receive_within(sup.start_child(std::move(child)));
            ASSERT_EQ(c.error, spindle::start_child_error::none);
            mine.push_back(c);
            std::lock_guard guard(mutex);
            ++started;
          } else if (what < 8) {
            mine[random() % mine.size()].actor.as<int>().send(what < 7 ? -1 : 0);
          } else {
            const auto id = mine[random() % mine.size()].id;
            const auto r = receive_within(sup.terminate_child(id));
            ASSERT_NE(r, spindle::terminate_result::supervisor_gone);
            if (r != spindle::terminate_result::not_found) {
              std::lock_guard guard(mutex);
              ++terminated[id];
            }
          }
        }
      });
    }
    for (std::thread& c : callers) c.join();
    // Crash loopers never settle: stop the supervisor, then compare what it counted.
    const auto before_stop = receive_within(sup.stats());
    EXPECT_EQ(before_stop.started, started);
    for (const auto& [id, count] : terminated) EXPECT_EQ(count, 1) << "child " << id;
    EXPECT_EQ(before_stop.terminated, terminated.size());  // only the callers terminated so far
    // Each child started is in exactly one place.
    EXPECT_EQ(before_stop.listed + before_stop.terminated + before_stop.ended, before_stop.started);
    EXPECT_GE(incarnations.load(), before_stop.started + before_stop.restarts);
    auto down = spindle::monitor_actor(sup.ref());
    sup.ref().stop();
    EXPECT_EQ(receive_within(std::move(down), 60s).kind, spindle::exit_kind::normal);
  }
  // Every cell freed once the runtime is gone (each incarnation halted exactly once).
  EXPECT_TRUE(eventually([&] { return spindle::actor_system::live_cells() == cells_before; }, 20s))
      << spindle::actor_system::live_cells() - cells_before << " cells left";
}

}  // namespace dynamic_supervisor_stress
