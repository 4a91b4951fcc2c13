// Stress: fork-join under fork_quantum 0 (every fork a heartbeat, so promotion, theft, helping
// and withdrawal happen constantly):
//   (a) fib with a fork at every call (tens of millions of forks) on 2 and 4 workers: the result,
//       and a bound on the process's peak RSS growth (latent frames live on the stack: F5);
//   (b) exceptions from random leaves of random trees, many rounds: exactly the leftmost thrown
//       exception reaches the caller once, every exception and result object is destroyed;
//   (c) many run_on(parallel_reduce) of random sizes with an order-checking combine: every
//       element accounted for exactly once, in order;
//   (d) runtimes shut down while fork-join computations run inside them (from the owning thread,
//       from one of their own workers, and racing a plain thread's run_on): every computation
//       that started completes correctly, nothing crashes or hangs.
// Counts are smaller under sanitizers (SPINDLE_TSAN, ASan): about 15 s per build on two cores.
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <ranges>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

#if defined(SPINDLE_TSAN) || defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif
constexpr bool sanitized = tsan || under_asan;
// Release count, ASan count, TSan count.
constexpr int pick(int release, int asan, int thread_sanitizer) {
  return tsan ? thread_sanitizer : under_asan ? asan : release;
}

spindle::runtime_options forking(std::uint32_t workers) {
  return {.workers = workers, .fork_quantum = std::chrono::nanoseconds(0)};
}

std::uint64_t fib_serial(int n) {
  std::uint64_t a = 0, b = 1;
  for (int i = 0; i < n; ++i) b = std::exchange(a, b) + b;
  return a;
}

std::uint64_t fib_fork(int n) {
  if (n < 2) return std::uint64_t(n);
  auto [a, b] =
      spindle::fork_join([n] { return fib_fork(n - 1); }, [n] { return fib_fork(n - 2); });
  return a + b;
}

// Turns a hang into a clear failure (a bound, not a timing assertion).
template <class Predicate>
void require_eventually(Predicate done, const char* what) {
  if (!eventually(done, std::chrono::seconds(300))) {
    std::fprintf(stderr, "hang: %s\n", what);
    std::abort();
  }
}

// Every promoted continuation was withdrawn by its owner or run by exactly one delegate (B1):
// over a quiescent interval, promoted == withdrawn + delegated.
void expect_promotions_settled(const spindle::fork_counters& before) {
  const auto after = spindle::fork_statistics();
  EXPECT_EQ(after.promoted - before.promoted,
            (after.withdrawn - before.withdrawn) + (after.delegated - before.delegated));
}

// --- (a) bounded memory ----------------------------------------------------------------------

// A field of /proc/self/status in kB, or -1.
long status_kb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

TEST(ForkStress, FibWithAForkAtEveryCallInBoundedMemory) {
  const auto counters = spindle::fork_statistics();
  constexpr int n = pick(36, 33, 30);
  const std::uint64_t expected = fib_serial(n);
  for (std::uint32_t workers : {2u, 4u}) {
    spindle::runtime rt(forking(workers));
    spindle::run_on(rt, [] { return fib_fork(10); });  // workers started, their fork state set up
    // Resets the peak (VmHWM) to the current RSS where the kernel allows it; else the growth is
    // measured against the earlier peak, which can only make the check weaker.
    { std::ofstream("/proc/self/clear_refs") << "5"; }
    const long before = status_kb("VmRSS");
    const auto stats = spindle::fork_statistics();
    EXPECT_EQ(spindle::run_on(rt, [] { return fib_fork(n); }), expected) << workers << " workers";
    const long peak = status_kb("VmHWM");
    EXPECT_GT(spindle::fork_statistics().delegated, stats.delegated) << "nothing was stolen";
    std::printf("fib(%d) on %u workers: RSS before %ld kB, peak %ld kB\n", n, workers, before,
                peak);
    if (before > 0 && peak > 0) {
      // Sanitizers' shadow memory and allocator caches get a looser bound.
      const long bound_kb = sanitized ? 256 * 1024 : 64 * 1024;
      EXPECT_LT(peak - before, bound_kb) << "peak RSS grew by " << (peak - before) << " kB";
    }
  }
  expect_promotions_settled(counters);
}

// --- (b) exceptions from random leaves -------------------------------------------------------

struct tracked {
  static inline std::atomic<long> live{0};
  std::uint64_t value;
  explicit tracked(std::uint64_t v) : value(v) { live.fetch_add(1, std::memory_order_relaxed); }
  tracked(const tracked& other) : value(other.value) {
    live.fetch_add(1, std::memory_order_relaxed);
  }
  tracked& operator=(const tracked&) = default;
  ~tracked() { live.fetch_sub(1, std::memory_order_relaxed); }
};
struct leaf_error {
  static inline std::atomic<long> live{0};
  static inline std::atomic<long> thrown{0};
  std::uint32_t leaf;
  explicit leaf_error(std::uint32_t l) : leaf(l) {
    live.fetch_add(1, std::memory_order_relaxed);
    thrown.fetch_add(1, std::memory_order_relaxed);
  }
  leaf_error(const leaf_error& other) : leaf(other.leaf) {
    live.fetch_add(1, std::memory_order_relaxed);
  }
  ~leaf_error() { live.fetch_sub(1, std::memory_order_relaxed); }
};

std::uint64_t hash(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// An implicit random tree over leaves [first, last): split at a hashed, unbalanced point. Leaf i
// throws when throws[i]; otherwise its value is hash(i).
struct leaf_tree {
  std::uint64_t seed;
  const std::vector<char>* throws;

  std::uint32_t split(std::uint32_t first, std::uint32_t last) const {
    const std::uint32_t size = last - first;
    return first + 1 + std::uint32_t(hash(seed ^ (std::uint64_t(first) << 32 | last)) % (size - 1));
  }
  tracked eval(std::uint32_t first, std::uint32_t last) const {
    if (last - first == 1) {
      if ((*throws)[first]) throw leaf_error(first);
      return tracked(hash(first));
    }
    const std::uint32_t middle = split(first, last);
    auto [a, b] =
        spindle::fork_join([&] { return eval(first, middle); }, [&] { return eval(middle, last); });
    return tracked(a.value * 31 + b.value);
  }
  std::uint64_t serial(std::uint32_t first, std::uint32_t last) const {
    if (last - first == 1) return hash(first);
    const std::uint32_t middle = split(first, last);
    const std::uint64_t a = serial(first, middle);
    return a * 31 + serial(middle, last);
  }
};

TEST(ForkStress, ExceptionsFromRandomLeaves) {
  const auto counters = spindle::fork_statistics();
  const int rounds = pick(1500, 600, 150);
  std::mt19937_64 rng(2024);
  for (std::uint32_t workers : {2u, 4u}) {
    spindle::runtime rt(forking(workers));
    const auto before = spindle::fork_statistics().delegated;
    int observed = 0, expected_throws = 0;
    for (int round = 0; round < rounds; ++round) {
      const std::uint32_t leaves = 2 + std::uint32_t(rng() % 20'000);
      std::vector<char> throws(leaves, 0);
      const int count = int(rng() % 4);  // 0: no exception this round
      std::uint32_t leftmost = leaves;
      for (int k = 0; k < count; ++k) {
        const std::uint32_t leaf = std::uint32_t(rng() % leaves);
        throws[leaf] = 1;
        leftmost = std::min(leftmost, leaf);
      }
      const leaf_tree tree{rng(), &throws};
      if (count > 0) ++expected_throws;
      try {
        const std::uint64_t value = spindle::run_on(rt, [&] { return tree.eval(0, leaves).value; });
        ASSERT_EQ(count, 0) << "round " << round << ": no exception reached the caller";
        ASSERT_EQ(value, tree.serial(0, leaves));
      } catch (const leaf_error& e) {
        ++observed;
        ASSERT_EQ(e.leaf, leftmost) << "round " << round;
      }
      ASSERT_EQ(tracked::live.load(), 0) << "round " << round;
      ASSERT_EQ(leaf_error::live.load(), 0) << "round " << round;
    }
    EXPECT_EQ(observed, expected_throws);
    EXPECT_GT(spindle::fork_statistics().delegated, before) << "no right branch was stolen";
  }
  EXPECT_GT(leaf_error::thrown.load(), 0);
  expect_promotions_settled(counters);
}

// --- (c) run_on(parallel_reduce), every element once ------------------------------------------

// An interval of element indices; combining checks adjacency, so the final [0, n) proves every
// element was folded exactly once and in order.
struct interval {
  std::int64_t first = 0, last = 0;  // empty when first == last
  bool ok = true;
};
interval adjoin(const interval& a, const interval& b) {
  if (a.first == a.last) return {b.first, b.last, a.ok && b.ok};
  if (b.first == b.last) return {a.first, a.last, a.ok && b.ok};
  return {a.first, b.last, a.ok && b.ok && a.last == b.first};
}

TEST(ForkStress, ReduceAccountsForEveryElementOnce) {
  const auto counters = spindle::fork_statistics();
  const int rounds = pick(2000, 800, 80);  // TSan: 200 rounds took 41 s on 2 cores
  std::mt19937_64 rng(7);
  for (std::uint32_t workers : {2u, 4u}) {
    spindle::runtime rt(forking(workers));
    const auto before = spindle::fork_statistics().delegated;
    for (int round = 0; round < rounds; ++round) {
      const std::int64_t n = std::int64_t(rng() % (round % 10 == 0 ? 100'000 : 10'000));
      const auto [range, sum] = spindle::run_on(rt, [n] {
        return spindle::fork_join(
            [n] {
              return spindle::parallel_reduce(
                  std::views::iota(std::int64_t(0), n), interval{},
                  [](std::int64_t i) {
                    return interval{i, i + 1, true};
                  },
                  adjoin);
            },
            [n] {
              return spindle::parallel_reduce(
                  std::views::iota(std::int64_t(0), n), std::int64_t(0),
                  [](std::int64_t i) { return i; },
                  [](std::int64_t x, std::int64_t y) { return x + y; });
            });
      });
      ASSERT_TRUE(range.ok) << "round " << round << " n=" << n;
      ASSERT_EQ(range.first, 0);
      ASSERT_EQ(range.last, n);
      ASSERT_EQ(sum, n * (n - 1) / 2);
    }
    EXPECT_GT(spindle::fork_statistics().delegated, before) << "no loop piece was stolen";
  }
  expect_promotions_settled(counters);
}

// --- (d) shutdown while fork-join work runs ------------------------------------------------------

// One fork-join computation run as a task; records that it started and its result.
struct computation {
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  std::atomic<std::uint64_t> result{0};
};

TEST(ForkStress, RuntimesShutDownWhileForkJoinRuns) {
  const auto counters = spindle::fork_statistics();
  const int cycles = pick(300, 150, 40);
  constexpr int per_cycle = 6;
  std::mt19937 rng(11);
  for (int cycle = 0; cycle < cycles; ++cycle) {
    const int n = 16 + int(rng() % 9);
    std::vector<computation> slots(per_cycle);
    std::vector<spindle::join_handle<std::uint64_t>> handles;
    auto rt = std::make_unique<spindle::runtime>(forking(2 + std::uint32_t(cycle % 3)));
    for (auto& slot : slots) {
      handles.push_back(rt->spawn([&slot, n] {
        slot.started.store(true);
        const std::uint64_t value = fib_fork(n);
        slot.result.store(value);
        slot.finished.store(true);
        return value;
      }));
    }
    require_eventually([&] { return slots[0].started.load() || slots[1].started.load(); },
                       "no computation started");
    switch (cycle % 3) {
      case 0:  // destroyed from the test thread: the shutdown waits for running computations
        rt.reset();
        break;
      case 1: {  // destroyed from one of its own workers, inside a fork branch
        std::atomic<bool> done{false};
        rt->spawn([&rt, &done] {
            spindle::fork_join([] { return fib_fork(12); }, [&rt] { rt.reset(); });
            done.store(true);
          }).detach();
        require_eventually([&] { return done.load(); }, "shutdown from a fork branch");
        break;
      }
      default: {  // a plain thread's run_on races the shutdown
        std::optional<std::uint64_t> raced;
        std::thread racer([&] {
          try {
            raced = spindle::run_on(*rt, [n] { return fib_fork(n); });
          } catch (const spindle::runtime_stopped&) {
          } catch (const spindle::task_cancelled&) {
          }
        });
        rt->shutdown();
        racer.join();
        if (raced) {
          EXPECT_EQ(*raced, fib_serial(n));
        }
        rt.reset();
        break;
      }
    }
    for (std::size_t i = 0; i < slots.size(); ++i) {
      // A computation that started runs to completion; one that never started was dropped.
      try {
        EXPECT_EQ(handles[i].join(), fib_serial(n));
        EXPECT_TRUE(slots[i].finished.load());
      } catch (const spindle::task_cancelled&) {
        EXPECT_FALSE(slots[i].started.load()) << "a started computation was abandoned";
      }
      if (slots[i].started.load()) {
        require_eventually([&] { return slots[i].finished.load(); },
                           "started computation never finished");
        EXPECT_EQ(slots[i].result.load(), fib_serial(n));
      }
    }
  }
  expect_promotions_settled(counters);
}

}  // namespace
