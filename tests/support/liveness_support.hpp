// Helpers of the liveness tests of issue 13 ("no part of the runtime starves another"):
// tests/actor/actor_fairness_liveness_test.cpp, tests/core/service_interval_test.cpp,
// tests/core/load_liveness_test.cpp, tests/fork/fork_liveness_test.cpp,
// tests/io/io_liveness_test.cpp.
//
// Shape of every such test: something keeps part of the runtime busy (a busy actor, a fork-join
// computation, a runnable that never returns, a flood of foreign spawns) until a *probe* (a tick,
// an ask, a read, a spawn) has succeeded, or until a generous deadline passed. So a runtime that
// serves the probe makes the test fast, and one that starves it makes the test fail at the
// deadline instead of hanging. The bounds are liveness bounds (seconds), never timings.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "spindle/core/executor.hpp"
#include "spindle/spindle.hpp"

namespace spindle::testing {

using liveness_clock = std::chrono::steady_clock;

// How long a busy part of the runtime keeps going at most when the probe does not succeed, and
// how long a test waits for a probe: generous, so only starvation fails them.
inline constexpr liveness_clock::duration liveness_deadline = std::chrono::seconds(3);
inline constexpr liveness_clock::duration liveness_wait = std::chrono::seconds(3);

// Burns CPU for about `duration` of wall time without yielding (a busy wait on the clock).
inline void busy_for(liveness_clock::duration duration) {
  const auto until = liveness_clock::now() + duration;
  while (liveness_clock::now() < until) {
  }
}

// About a microsecond of arithmetic that the optimiser cannot drop (an element of a
// fine-grained loop: no clock read, no memory traffic).
inline std::uint64_t burn_a_microsecond(std::uint64_t seed) {
  std::uint64_t x = seed;
  for (int k = 0; k < 512; ++k) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
#if defined(__GNUC__)
    asm volatile("" : "+r"(x));
#endif
  }
  return x;
}

// Sets `flag` when destroyed: declared after the runtime, it releases what spins on `flag` on
// every exit path of a test (a failed ASSERT included) before the runtime shuts down.
class set_on_exit {
 public:
  explicit set_on_exit(std::atomic<bool>& flag) noexcept : flag_(flag) {}
  set_on_exit(const set_on_exit&) = delete;
  set_on_exit& operator=(const set_on_exit&) = delete;
  ~set_on_exit() { flag_.store(true); }

 private:
  std::atomic<bool>& flag_;
};

// Spins without yielding until `flag` is set or `deadline` passed; true if the flag was set.
inline bool spin_until_set(const std::atomic<bool>& flag, liveness_clock::time_point deadline) {
  while (!flag.load(std::memory_order_acquire)) {
    if (liveness_clock::now() > deadline) return false;
  }
  return true;
}

// A fine-grained parallel_for (about 1 us per element, 16M elements: far longer than the
// deadline) that keeps every executor it spreads to busy until the probe is done or its deadline
// passed; afterwards the remaining elements return at once. run() is called inside a task (a
// plain callable spawned on the runtime); the test thread reads the flags, and starts its probe
// once the loop runs on every executor (spread_over), so no executor is idle by chance.
struct freezing_loop {
  static constexpr std::size_t elements = std::size_t(1) << 24;

  std::atomic<bool> running{false};     // set before parallel_for starts, cleared after it returns
  std::atomic<bool> finished{false};    // run() returned
  std::atomic<bool> probe_done{false};  // the test's probe succeeded (or gave up): wind down
  std::atomic<bool> expired{false};     // the deadline passed before the probe was done
  std::atomic<std::uint64_t> executors_seen{0};  // bit i: an element ran on executor i
  std::atomic<std::uint64_t> sink{0};

  // Whether elements have run on each of executors [0, count) (count <= 64).
  bool spread_over(std::uint32_t count) const noexcept {
    const std::uint64_t all = count >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << count) - 1;
    return (executors_seen.load() & all) == all;
  }

  // What a probe records: the loop still keeps its executors busy (it has started and not yet
  // reached its deadline; while it winds down after the deadline, pieces that finished free
  // their executors, which is no evidence of anything).
  bool busy() const noexcept { return running.load() && !expired.load(); }

  void run(liveness_clock::duration limit = liveness_deadline) {
    const auto deadline = liveness_clock::now() + limit;
    running.store(true);
    spindle::parallel_for(std::size_t(0), elements, [this, deadline](std::size_t i) {
      if (probe_done.load(std::memory_order_relaxed) || expired.load(std::memory_order_relaxed)) {
        return;
      }
      if ((i & 255) == 0) {
        if (liveness_clock::now() > deadline) {
          expired.store(true, std::memory_order_relaxed);
          return;
        }
        const std::uint64_t here = std::uint64_t(1)
                                   << (spindle::core::executor::current()->index() % 64);
        if ((executors_seen.load(std::memory_order_relaxed) & here) == 0) {
          executors_seen.fetch_or(here, std::memory_order_relaxed);
        }
      }
      const std::uint64_t x = burn_a_microsecond(i);
      if (x == 0) sink.fetch_add(1, std::memory_order_relaxed);  // practically never
    });
    running.store(false);
    finished.store(true);
  }
};

}  // namespace spindle::testing
