// Behaviour of fork_join, run_on and fork_join(rt, ...): results equal a serial evaluation (fib
// with a fork at every call, random tree shapes), move-only / reference / void results, nesting
// (200 deep, and past the frame stack's capacity), plain threads (serial), coroutine tasks and
// tasks spawned inside branches, exceptions (left, right, both: left wins; random leaves of big
// trees: exactly the expected exception reaches the caller, nothing leaks, the runtime stays
// usable) and rejected callables. Runtimes use fork_quantum 0 (every fork is a heartbeat), so
// right branches really are promoted and stolen; tests about stealing check fork_statistics().
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "support/test_support.hpp"
#include "support/fork_support.hpp"

namespace {

using namespace spindle::testing;
using std::chrono::steady_clock;

using spindle::testing::forking;

std::uint64_t fib_serial(int n) {
  return n < 2 ? std::uint64_t(n) : fib_serial(n - 1) + fib_serial(n - 2);
}

using spindle::testing::fib_fork;

spindle::task<std::uint64_t> fib_task(int n) { co_return fib_fork(n); }

std::uint64_t delegated_now() { return spindle::fork_statistics().delegated; }

// Every promoted continuation is either withdrawn by its owner or run by exactly one delegate
// (B1): over a quiescent interval, promoted == withdrawn + delegated.
::testing::AssertionResult promotions_settled(const spindle::fork_counters& before) {
  const auto after = spindle::fork_statistics();
  const std::uint64_t promoted = after.promoted - before.promoted;
  const std::uint64_t settled =
      (after.withdrawn - before.withdrawn) + (after.delegated - before.delegated);
  if (promoted == settled) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << promoted << " promoted, " << settled << " withdrawn or delegated";
}

// Repeats `body` until some right continuation ran on another worker during it (a theft); the
// bound only turns "never stolen" into a failure instead of a hang.
template <class Body>
void expect_stealing(Body body) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(60);
  const std::uint64_t before = delegated_now();
  do {
    body();
  } while (delegated_now() == before && steady_clock::now() < deadline);
  EXPECT_GT(delegated_now(), before) << "no right branch was ever run by a thief";
}

using spindle::testing::fork_until;

// Objects and exceptions that count how many of them are alive (leak checks).
struct tracked {
  static inline std::atomic<int> live{0};
  std::uint64_t value;
  explicit tracked(std::uint64_t v) : value(v) { live.fetch_add(1); }
  tracked(const tracked& other) : value(other.value) { live.fetch_add(1); }
  tracked& operator=(const tracked&) = default;
  ~tracked() { live.fetch_sub(1); }
};
struct counted_error {
  static inline std::atomic<int> live{0};
  int code;
  explicit counted_error(int c) : code(c) { live.fetch_add(1); }
  counted_error(const counted_error& other) : code(other.code) { live.fetch_add(1); }
  ~counted_error() { live.fetch_sub(1); }
};

// --- random trees ----------------------------------------------------------------------------

// A binary tree of forks; leaves carry values, some leaves throw. Evaluated with a
// non-commutative combination, so a result in the wrong position shows.
struct tree {
  struct node {
    int left = -1, right = -1;
    std::uint64_t value = 0;
    bool throws = false;
  };
  std::vector<node> nodes;  // nodes[0] is the root

  // Unbalanced on purpose: each side has its own split probability; depth and size are capped.
  static tree random(std::uint64_t seed, double throw_probability = 0.0) {
    tree t;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const double p_left = 0.5 + 0.48 * unit(rng), p_right = 0.5 + 0.48 * unit(rng);
    const int max_depth = 1 + int(rng() % 60);
    const std::size_t max_nodes = 1 + rng() % 30'000;
    auto build = [&](auto& self, int depth, double p) -> int {
      const int id = int(t.nodes.size());
      t.nodes.emplace_back();
      if (depth < max_depth && t.nodes.size() < max_nodes && unit(rng) < p) {
        const int l = self(self, depth + 1, p_left);
        const int r = self(self, depth + 1, p_right);
        t.nodes[std::size_t(id)].left = l;
        t.nodes[std::size_t(id)].right = r;
      } else {
        t.nodes[std::size_t(id)].value = rng();
        t.nodes[std::size_t(id)].throws = unit(rng) < throw_probability;
      }
      return id;
    };
    build(build, 0, 0.99);
    return t;
  }
  const node& at(int i) const { return nodes[std::size_t(i)]; }
};

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return a * 0x9E3779B97F4A7C15ull + (b ^ (b >> 29));
}

std::uint64_t eval_serial(const tree& t, int i) {
  const auto& n = t.at(i);
  if (n.left < 0) {
    if (n.throws) throw counted_error(i);
    return n.value;
  }
  const std::uint64_t a = eval_serial(t, n.left);
  return mix(a, eval_serial(t, n.right));
}

// Every intermediate result is a `tracked` object (a leak shows in tracked::live).
tracked eval_fork(const tree& t, int i) {
  const auto& n = t.at(i);
  if (n.left < 0) {
    if (n.throws) throw counted_error(i);
    return tracked(n.value);
  }
  auto [a, b] = spindle::fork_join([&] { return eval_fork(t, n.left); },
                                   [&] { return eval_fork(t, n.right); });
  return tracked(mix(a.value, b.value));
}

// --- all worker counts -----------------------------------------------------------------------

// A runtime per test; at the end (workers joined) every promotion must have been settled.
class ForkJoin : public ::testing::TestWithParam<std::uint32_t> {
 protected:
  void TearDown() override {
    rt.shutdown();
    EXPECT_TRUE(promotions_settled(before));
  }
  spindle::fork_counters before = spindle::fork_statistics();
  spindle::runtime rt{forking(GetParam())};
};

TEST_P(ForkJoin, FibMatchesSerial) {
  for (int n = 0; n <= 25; ++n) {
    EXPECT_EQ(spindle::run_on(rt, [n] { return fib_fork(n); }), fib_serial(n)) << "n=" << n;
  }
  if (GetParam() >= 2) {
    expect_stealing([&] { EXPECT_EQ(spindle::run_on(rt, [] { return fib_fork(22); }), 17711u); });
  }
}

TEST_P(ForkJoin, MoveOnlyResults) {
  // A tree of unique_ptrs built by forks: every node is produced exactly once.
  struct node {
    int value;
    std::unique_ptr<node> left, right;
  };
  auto build = [](auto& self, int depth, int value) -> std::unique_ptr<node> {
    auto [l, r] = depth == 0
                      ? std::pair<std::unique_ptr<node>, std::unique_ptr<node>>()
                      : spindle::fork_join([&] { return self(self, depth - 1, 2 * value); },
                                           [&] { return self(self, depth - 1, 2 * value + 1); });
    return std::make_unique<node>(node{value, std::move(l), std::move(r)});
  };
  auto root = spindle::run_on(rt, [&] { return build(build, 14, 1); });
  std::vector<int> seen(1 << 15, 0);
  auto visit = [&](auto& self, const node* n) -> void {
    if (n == nullptr) return;
    ++seen[std::size_t(n->value)];
    self(self, n->left.get());
    self(self, n->right.get());
  };
  visit(visit, root.get());
  for (std::size_t v = 1; v < seen.size(); ++v) ASSERT_EQ(seen[v], 1) << v;

  auto [p, q] = spindle::fork_join(
      rt, [] { return std::make_unique<int>(1); }, [] { return std::make_unique<int>(2); });
  static_assert(std::is_same_v<decltype(p), std::unique_ptr<int>>);
  EXPECT_EQ(*p + *q, 3);
}

TEST_P(ForkJoin, ReferenceAndVoidResults) {
  int x = 1, y = 2;
  auto refs = spindle::fork_join(
      rt, [&]() -> int& { return x; }, [&]() -> const int& { return y; });
  static_assert(std::is_same_v<decltype(refs), std::pair<int&, const int&>>);
  EXPECT_EQ(&refs.first, &x);
  EXPECT_EQ(&refs.second, &y);

  std::atomic<int> left_runs{0}, right_runs{0};
  auto voids = spindle::fork_join(
      rt, [&] { left_runs.fetch_add(1); }, [&] { right_runs.fetch_add(1); });
  static_assert(std::is_same_v<decltype(voids), std::pair<std::monostate, std::monostate>>);
  auto mixed = spindle::fork_join(
      rt, [&] { left_runs.fetch_add(1); }, [] { return 7; });
  static_assert(std::is_same_v<decltype(mixed), std::pair<std::monostate, int>>);
  EXPECT_EQ(mixed.second, 7);
  EXPECT_EQ(left_runs.load(), 2);
  EXPECT_EQ(right_runs.load(), 1);

  // Void leaves of a big tree, each counted once.
  std::vector<std::atomic<int>> hits(1 << 12);
  auto touch = [&](auto& self, int first, int count) -> void {
    if (count == 1) {
      hits[std::size_t(first)].fetch_add(1);
      return;
    }
    spindle::fork_join([&] { self(self, first, count / 2); },
                       [&] { self(self, first + count / 2, count - count / 2); });
  };
  spindle::run_on(rt, [&] { touch(touch, 0, int(hits.size())); });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

// Each level forks; the recursion continues in the left branch or in the right one.
std::uint64_t chain(int depth, bool in_right) {
  if (depth == 0) return 1;
  if (in_right) {
    auto [a, b] = spindle::fork_join([depth] { return std::uint64_t(depth); },
                                     [depth] { return chain(depth - 1, true); });
    return a + b;
  }
  auto [a, b] = spindle::fork_join([depth] { return chain(depth - 1, false); },
                                   [depth] { return std::uint64_t(depth); });
  return a + b;
}

TEST_P(ForkJoin, NestedDeeply) {
  // 1500 exceeds the per-thread frame stack (1024 latent frames): deeper forks run serially.
  for (int depth : {200, 1500}) {
    const std::uint64_t expected = 1 + std::uint64_t(depth) * std::uint64_t(depth + 1) / 2;
    for (bool in_right : {false, true}) {
      EXPECT_EQ(spindle::run_on(rt, [=] { return chain(depth, in_right); }), expected) << depth;
    }
  }
}

TEST_P(ForkJoin, RunOnAndForkJoinWithARuntime) {
  const auto caller = std::this_thread::get_id();
  auto [worker, nested] = spindle::fork_join(
      rt, [] { return std::this_thread::get_id(); },
      [&] { return spindle::run_on(rt, [] { return std::this_thread::get_id(); }); });
  EXPECT_NE(worker, caller);
  EXPECT_NE(nested, caller);
  // run_on from a worker of the same runtime runs inline.
  EXPECT_TRUE(spindle::run_on(rt, [&] {
    const auto here = std::this_thread::get_id();
    return spindle::run_on(rt, [] { return std::this_thread::get_id(); }) == here;
  }));
  auto p = spindle::run_on(rt, [] { return std::make_unique<int>(fib_fork(15)); });
  EXPECT_EQ(*p, 610);
  spindle::run_on(rt, [] {});
  EXPECT_THROW(spindle::run_on(rt, []() -> int { throw custom_error{4}; }), custom_error);
}

TEST_P(ForkJoin, InsideACoroutineTask) {
  auto body = []() -> spindle::task<std::uint64_t> {
    auto [a, b] = spindle::fork_join([] { return fib_fork(20); }, [] { return fib_fork(19); });
    co_await spindle::yield_now();
    co_return a + b + fib_fork(18);
  };
  EXPECT_EQ(rt.block_on(body()), fib_serial(21) + fib_serial(18));
}

// Spawns one task per index in [first, first + count) from inside nested fork branches; the
// handles travel back as move-only results.
std::vector<spindle::join_handle<std::uint64_t>> spawn_from_branches(int first, int count) {
  if (count == 1) {
    std::vector<spindle::join_handle<std::uint64_t>> one;
    one.push_back(spindle::spawn(fib_task(first % 16)));  // each task forks again
    return one;
  }
  auto [a, b] =
      spindle::fork_join([=] { return spawn_from_branches(first, count / 2); },
                         [=] { return spawn_from_branches(first + count / 2, count - count / 2); });
  for (auto& h : b) a.push_back(std::move(h));
  return std::move(a);
}

spindle::task<std::uint64_t> tasks_inside_forks(int count) {
  auto handles = spawn_from_branches(0, count);
  std::uint64_t sum = 0;
  for (auto& h : handles) sum += co_await std::move(h);
  co_return sum;
}

TEST_P(ForkJoin, TasksSpawnedInsideBranches) {
  constexpr int count = 300;
  std::uint64_t expected = 0;
  for (int i = 0; i < count; ++i) expected += fib_serial(i % 16);
  EXPECT_EQ(rt.block_on(tasks_inside_forks(count)), expected);
  // Several such tasks at once, all forking.
  std::vector<spindle::join_handle<std::uint64_t>> outer;
  for (int i = 0; i < 4; ++i) outer.push_back(rt.spawn(tasks_inside_forks(count)));
  for (auto& h : outer) EXPECT_EQ(join_bounded(std::move(h), std::chrono::seconds(120)), expected);
}

TEST_P(ForkJoin, RandomTreesMatchSerial) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const tree t = tree::random(seed);
    const std::uint64_t expected = eval_serial(t, 0);
    EXPECT_EQ(spindle::run_on(rt, [&] { return eval_fork(t, 0).value; }), expected)
        << "seed " << seed;
  }
  EXPECT_EQ(tracked::live.load(), 0);
}

TEST_P(ForkJoin, CallablesAreInvokedAsLvaluesAtMostOnce) {
  // Only an lvalue call operator: fork_join must call it as an lvalue, inline or stolen.
  struct lvalue_only {
    std::atomic<int>* calls;
    int operator()() & { return calls->fetch_add(1) + 1; }
    int operator()() && = delete;
  };
  std::atomic<int> calls{0};
  auto [a, b] = spindle::fork_join(rt, lvalue_only{&calls}, lvalue_only{&calls});
  EXPECT_EQ(a + b, 3);
  // A mutable lambda keeps its state between the call and the result.
  int counter = 0;
  auto stateful = [n = 0]() mutable { return ++n; };
  auto [c, d] = spindle::fork_join(rt, stateful, [&counter] { return ++counter; });
  EXPECT_EQ(c, 1);
  EXPECT_EQ(d, 1);
  EXPECT_EQ(calls.load(), 2);
}

TEST_P(ForkJoin, ConcurrentComputations) {
  // Several owners at once (tasks and plain threads' run_on), helping each other's boards.
  std::vector<tree> trees;
  for (std::uint64_t seed = 500; seed < 508; ++seed) trees.push_back(tree::random(seed));
  std::vector<std::uint64_t> results(trees.size());
  std::vector<spindle::join_handle<std::uint64_t>> tasks;
  for (std::size_t i = 0; i < 4; ++i) {
    tasks.push_back(rt.spawn([&trees, i] { return eval_fork(trees[i], 0).value; }));
  }
  std::vector<std::thread> threads;
  for (std::size_t i = 4; i < trees.size(); ++i) {
    threads.emplace_back(
        [&, i] { results[i] = spindle::run_on(rt, [&] { return eval_fork(trees[i], 0).value; }); });
  }
  for (std::size_t i = 0; i < 4; ++i)
    results[i] = join_bounded(std::move(tasks[i]), std::chrono::seconds(120));
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < trees.size(); ++i)
    EXPECT_EQ(results[i], eval_serial(trees[i], 0)) << i;
  EXPECT_EQ(tracked::live.load(), 0);
}

// --- exceptions ------------------------------------------------------------------------------

TEST_P(ForkJoin, ExceptionFromLeftSkipsTheRightBranch) {
  // Pings off: a ping may promote the right branch while the left one is still throwing (under
  // TSan a first throw takes longer than half a service interval), and a thief then runs it.
  auto options = forking(GetParam());
  options.ping_signal = 0;
  spindle::runtime quiet(options);
  std::atomic<int> right_runs{0};
  try {
    spindle::fork_join(
        quiet, []() -> tracked { throw counted_error(1); },
        [&] {
          right_runs.fetch_add(1);
          return tracked(2);
        });
    ADD_FAILURE() << "no exception";
  } catch (const counted_error& e) {
    EXPECT_EQ(e.code, 1);
  }
  // Promotion needs two heartbeats after the fork; the left branch threw before any.
  EXPECT_EQ(right_runs.load(), 0);
  EXPECT_EQ(tracked::live.load(), 0);
  EXPECT_EQ(counted_error::live.load(), 0);
}

TEST_P(ForkJoin, ExceptionFromRight) {
  try {
    spindle::fork_join(
        rt, [] { return tracked(1); }, []() -> tracked { throw counted_error(2); });
    ADD_FAILURE() << "no exception";
  } catch (const counted_error& e) {
    EXPECT_EQ(e.code, 2);
  }
  EXPECT_THROW(spindle::fork_join(
                   rt, [] {}, [] { throw std::out_of_range("right"); }),
               std::out_of_range);
  EXPECT_EQ(tracked::live.load(), 0);
  EXPECT_EQ(counted_error::live.load(), 0);
  EXPECT_EQ(spindle::run_on(rt, [] { return fib_fork(18); }), fib_serial(18));
}

TEST_P(ForkJoin, ExceptionsFromRandomLeavesOfBigTrees) {
  int thrown_rounds = 0;
  for (std::uint64_t seed = 100; seed < 160; ++seed) {
    const tree t = tree::random(seed, seed % 3 == 0 ? 0.2 : 0.002);
    int expected = -1;
    std::uint64_t expected_value = 0;
    try {
      expected_value = eval_serial(t, 0);
    } catch (const counted_error& e) {
      expected = e.code;  // the leftmost throwing leaf
    }
    try {
      const std::uint64_t v = spindle::run_on(rt, [&] { return eval_fork(t, 0).value; });
      EXPECT_EQ(expected, -1) << "seed " << seed << ": no exception";
      EXPECT_EQ(v, expected_value);
    } catch (const counted_error& e) {
      ++thrown_rounds;
      EXPECT_EQ(e.code, expected) << "seed " << seed;
    }
    ASSERT_EQ(tracked::live.load(), 0) << "seed " << seed;
    ASSERT_EQ(counted_error::live.load(), 0) << "seed " << seed;
  }
  EXPECT_GT(thrown_rounds, 10);
  EXPECT_EQ(spindle::run_on(rt, [] { return fib_fork(20); }), fib_serial(20));  // still usable
}

TEST_P(ForkJoin, RejectsNullAndEmptyCallables) {
  int (*null_function)() = nullptr;
  std::function<int()> empty;
  std::atomic<int> runs{0};
  auto counting = [&runs] { return runs.fetch_add(1) + 1; };
  auto all_rejected = [&] {
    int rejected = 0;
    auto check = [&](auto&& call) {
      try {
        call();
      } catch (const spindle::usage_error&) {
        ++rejected;
      }
    };
    check([&] { spindle::fork_join(null_function, counting); });
    check([&] { spindle::fork_join(counting, null_function); });
    check([&] { spindle::fork_join(empty, counting); });
    check([&] { spindle::fork_join(counting, empty); });
    return rejected;
  };
  EXPECT_EQ(all_rejected(), 4);                     // plain thread
  EXPECT_EQ(spindle::run_on(rt, all_rejected), 4);  // worker
  EXPECT_THROW(spindle::fork_join(rt, null_function, counting), spindle::usage_error);
  EXPECT_THROW(spindle::fork_join(rt, counting, empty), spindle::usage_error);
  EXPECT_EQ(runs.load(), 0);  // rejected before anything ran

  int (*one)() = [] { return 1; };
  std::function<int()> two = [] { return 2; };
  auto [a, b] = spindle::fork_join(rt, one, two);
  EXPECT_EQ(a + b, 3);
}

INSTANTIATE_TEST_SUITE_P(Workers, ForkJoin, ::testing::Values(1u, 2u, 4u));

// --- right branches that are certainly stolen (>= 2 workers) ---------------------------------

class ForkJoinStolen : public ForkJoin {};

TEST_P(ForkJoinStolen, ResultsOfAStolenRightBranch) {
  std::atomic<bool> started{false};
  int x = 0;
  const auto [left, right, owner, thief] = spindle::run_on(rt, [&] {
    auto [l, r] = spindle::fork_join(
        [&] {
          fork_until(started);
          return std::make_pair(std::make_unique<int>(1), std::this_thread::get_id());
        },
        [&]() -> std::pair<int*, std::thread::id> {
          started.store(true, std::memory_order_release);
          return {&x, std::this_thread::get_id()};
        });
    return std::make_tuple(*l.first, r.first, l.second, r.second);
  });
  EXPECT_EQ(left, 1);
  EXPECT_EQ(right, &x);
  EXPECT_NE(owner, thief);

  std::atomic<bool> started_ref{false};
  int* ref = spindle::run_on(rt, [&] {
    auto [l, r] = spindle::fork_join([&] { fork_until(started_ref); },
                                     [&]() -> int& {
                                       started_ref.store(true, std::memory_order_release);
                                       return x;
                                     });
    return &r;
  });
  EXPECT_EQ(ref, &x);
}

TEST_P(ForkJoinStolen, BothThrowLeftWins) {
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> right_started{false}, right_done{false};
    try {
      spindle::run_on(rt, [&] {
        return spindle::fork_join(
            [&]() -> tracked {
              fork_until(right_started);
              while (!right_done.load(std::memory_order_acquire)) spindle::core::cpu_relax();
              throw counted_error(1);
            },
            [&]() -> tracked {
              right_started.store(true, std::memory_order_release);
              tracked partial(5);
              right_done.store(true, std::memory_order_release);
              throw counted_error(2);
            });
      });
      ADD_FAILURE() << "no exception";
    } catch (const counted_error& e) {
      EXPECT_EQ(e.code, 1);
    }
    ASSERT_EQ(tracked::live.load(), 0);
    ASSERT_EQ(counted_error::live.load(), 0);  // the right branch's exception was dropped
  }
}

TEST_P(ForkJoinStolen, StolenRightThrowsAfterLeftSucceeded) {
  std::atomic<bool> started{false};
  try {
    spindle::run_on(rt, [&] {
      return spindle::fork_join(
          [&] {
            fork_until(started);
            return tracked(1);
          },
          [&]() -> tracked {
            started.store(true, std::memory_order_release);
            throw std::out_of_range("stolen right");
          });
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "stolen right");
  }
  EXPECT_EQ(tracked::live.load(), 0);
  EXPECT_EQ(spindle::run_on(rt, [] { return fib_fork(20); }), fib_serial(20));
}

TEST_P(ForkJoinStolen, LeftThrowsWhileTheStolenRightRuns) {
  std::atomic<bool> started{false}, release{false};
  std::atomic<int> right_finished{0};
  try {
    spindle::run_on(rt, [&] {
      return spindle::fork_join(
          [&]() -> int {
            fork_until(started);
            release.store(true, std::memory_order_release);
            throw custom_error{7};
          },
          [&] {
            started.store(true, std::memory_order_release);
            while (!release.load(std::memory_order_acquire)) spindle::core::cpu_relax();
            right_finished.fetch_add(1);
            return tracked(3);
          });
    });
    ADD_FAILURE() << "no exception";
  } catch (const custom_error& e) {
    EXPECT_EQ(e.code, 7);
  }
  // fork_join returned only after the stolen right branch had finished (it was waited for).
  EXPECT_EQ(right_finished.load(), 1);
  EXPECT_EQ(tracked::live.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Workers, ForkJoinStolen, ::testing::Values(2u, 4u));

// --- plain threads ---------------------------------------------------------------------------

TEST(ForkJoinSerial, PlainThreadRunsLeftThenRightOnTheCaller) {
  const auto before = spindle::fork_statistics();
  const auto caller = std::this_thread::get_id();
  std::vector<int> order;
  auto [a, b] = spindle::fork_join(
      [&] {
        order.push_back(1);
        return std::this_thread::get_id();
      },
      [&] {
        order.push_back(2);
        return std::this_thread::get_id();
      });
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(a, caller);
  EXPECT_EQ(b, caller);
  EXPECT_EQ(fib_fork(22), fib_serial(22));
  // With a runtime alive, a plain thread still runs serially.
  spindle::runtime rt(forking(2));
  EXPECT_EQ(eval_fork(tree::random(7), 0).value, eval_serial(tree::random(7), 0));
  const auto after = spindle::fork_statistics();
  EXPECT_EQ(after.promoted, before.promoted);
  EXPECT_EQ(after.heartbeats, before.heartbeats);

  std::atomic<int> right_runs{0};
  EXPECT_THROW(spindle::fork_join([]() -> int { throw custom_error{1}; },
                                  [&] { return right_runs.fetch_add(1); }),
               custom_error);
  EXPECT_EQ(right_runs.load(), 0);
}

TEST(ForkJoinSerial, ManyPlainThreadsAtOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> correct{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&correct, i] {
      if (fib_fork(18 + i) == fib_serial(18 + i)) correct.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(correct.load(), 4);
}

// run_on(b, f) on a worker of another runtime `a` must throw usage_error before spawning
// anything: a task left on b would keep a reference to f after run_on returned (f lives for the
// whole test here, so a regression shows as a wrong task count rather than a use after scope).
TEST(ForkJoinUsage, RunOnAnotherRuntimeFromAWorkerSpawnsNothing) {
  std::atomic<int> runs{0};
  auto f = [&runs] { return runs.fetch_add(1); };
  std::atomic<bool> occupied{false}, release{false};
  spindle::runtime a(forking(1)), b(forking(1));  // destroyed first: nothing dangles
  b.spawn([&] {
     occupied.store(true);
     while (!release.load()) spindle::core::cpu_relax();
   }).detach();
  spin_until([&] { return occupied.load(); });
  const bool threw = spindle::run_on(a, [&] {
    try {
      spindle::run_on(b, f);
    } catch (const spindle::usage_error&) {
      return true;
    }
    return false;
  });
  EXPECT_TRUE(threw);
  EXPECT_EQ(b.live_tasks(), 1u) << "run_on left a task behind on b";  // only the occupier
  release.store(true);
}

// A branch returning an rvalue reference gives a value (moved from the referenced object).
TEST(ForkJoinSerial, RvalueReferenceResultsAreMovedIntoValues) {
  std::string left_source = "left", right_source = "right";
  auto [left, right] = spindle::fork_join(
      [&]() -> std::string&& { return std::move(left_source); },
      [&]() -> std::string&& { return std::move(right_source); });
  static_assert(std::is_same_v<decltype(left), std::string>);
  EXPECT_EQ(left, "left");
  EXPECT_EQ(right, "right");
}

TEST(ForkJoinUsage, RunOnAndSortRejectNullCallables) {
  spindle::runtime rt(forking(1));
  long (*null_function)() = nullptr;
  EXPECT_THROW(spindle::run_on(rt, null_function), spindle::usage_error);
  std::vector<int> values{3, 1, 2};
  bool (*null_compare)(int, int) = nullptr;
  EXPECT_THROW(spindle::parallel_sort(values, null_compare), spindle::usage_error);
}

}  // namespace
