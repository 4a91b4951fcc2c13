// Behaviour of task<T>: value kinds (int, void, move-only, references), exception propagation
// through await chains, constant-stack chains of a million immediately-completing awaits, and the
// cooperative budget.
#include <spindle/spindle.hpp>
#include <spindle/core/executor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

// --- values ----------------------------------------------------------------------------------

spindle::task<int> forty_two() { co_return 42; }
spindle::task<int> add_one(int x) { co_return x + 1; }
spindle::task<int> sum_of_children() {
  int a = co_await forty_two();
  int b = co_await add_one(a);
  co_return a + b;
}

TEST(Task, IntValue) {
  spindle::runtime rt({.workers = 1});
  EXPECT_EQ(rt.block_on(forty_two()), 42);
  EXPECT_EQ(rt.block_on(sum_of_children()), 42 + 43);
}

spindle::task<void> set_flag(int& target) {
  target = 7;
  co_return;
}
spindle::task<void> void_chain(int& target) {
  co_await set_flag(target);
  target *= 2;
}

TEST(Task, VoidValue) {
  spindle::runtime rt({.workers = 1});
  int target = 0;
  rt.block_on(void_chain(target));
  EXPECT_EQ(target, 14);
  static_assert(std::is_void_v<decltype(rt.block_on(void_chain(target)))>);
}

spindle::task<std::unique_ptr<std::string>> make_string(std::string s) {
  co_return std::make_unique<std::string>(std::move(s));
}
spindle::task<std::unique_ptr<std::string>> append(std::string suffix) {
  std::unique_ptr<std::string> p = co_await make_string("move");
  *p += suffix;
  co_return p;
}

TEST(Task, MoveOnlyValue) {
  spindle::runtime rt({.workers = 1});
  std::unique_ptr<std::string> result = rt.block_on(append("-only"));
  ASSERT_NE(result, nullptr);
  EXPECT_EQ(*result, "move-only");
}

spindle::task<int&> pick(int& a, int& b, bool first) { co_return first ? a : b; }
spindle::task<const std::string&> name_of(const std::string& s) { co_return s; }
spindle::task<int> bump_through_reference(int& a, int& b) {
  int& r = co_await pick(a, b, false);
  ++r;
  co_return r;
}

TEST(Task, ReferenceValue) {
  spindle::runtime rt({.workers = 1});
  int a = 1, b = 10;
  int& r = rt.block_on(pick(a, b, true));
  EXPECT_EQ(&r, &a);
  EXPECT_EQ(rt.block_on(bump_through_reference(a, b)), 11);
  EXPECT_EQ(b, 11);
  const std::string s = "hello";
  EXPECT_EQ(&rt.block_on(name_of(s)), &s);
}

// A task does nothing until awaited or spawned, and destroying it unstarted destroys its frame.
struct frame_guard {
  std::atomic<int>* destroyed;
  ~frame_guard() { destroyed->fetch_add(1); }
};
spindle::task<int> guarded(std::atomic<int>& ran, std::atomic<int>& destroyed) {
  frame_guard g{&destroyed};
  ran.fetch_add(1);
  co_return 1;
}

TEST(Task, LazyAndOwnsItsFrame) {
  std::atomic<int> ran{0}, destroyed{0};
  {
    spindle::task<int> t = guarded(ran, destroyed);
    EXPECT_TRUE(t.valid());
    spindle::task<int> moved = std::move(t);
    EXPECT_FALSE(t.valid());
    EXPECT_TRUE(moved.valid());
  }
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(destroyed.load(), 0);  // the guard is constructed only when the body runs
  spindle::runtime rt({.workers = 1});
  EXPECT_EQ(rt.block_on(guarded(ran, destroyed)), 1);
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(destroyed.load(), 1);
}

// --- exceptions ------------------------------------------------------------------------------

spindle::task<int> thrower(int code) {
  if (code >= 0) throw custom_error{code};
  co_return 0;
}
spindle::task<int> middle(int code) { co_return 1 + co_await thrower(code); }
spindle::task<int> top(int code) { co_return 1 + co_await middle(code); }
spindle::task<void> void_thrower() {
  throw std::runtime_error("void failed");
  co_return;
}
spindle::task<int> catches_and_continues() {
  int caught = 0;
  try {
    co_await top(5);
  } catch (const custom_error& e) {
    caught = e.code;
  }
  try {
    co_await void_thrower();
  } catch (const std::runtime_error&) {
    caught += 100;
  }
  co_return caught + co_await top(-1);
}

TEST(Task, ExceptionsPropagateThroughAwaitChains) {
  spindle::runtime rt({.workers = 2});
  try {
    rt.block_on(top(9));
    FAIL() << "expected custom_error";
  } catch (const custom_error& e) {
    EXPECT_EQ(e.code, 9);
  }
  EXPECT_THROW(rt.block_on(void_thrower()), std::runtime_error);
  EXPECT_EQ(rt.block_on(catches_and_continues()), 5 + 100 + 2);
}

spindle::task<int> deep_thrower(int n) {
  if (n == 0) throw custom_error{77};
  co_return co_await deep_thrower(n - 1);
}

TEST(Task, ExceptionFromTheBottomOfALongChain) {
  spindle::runtime rt({.workers = 1});
  try {
    rt.block_on(deep_thrower(100000));
    FAIL() << "expected custom_error";
  } catch (const custom_error& e) {
    EXPECT_EQ(e.code, 77);
  }
}

// --- constant stack --------------------------------------------------------------------------

spindle::task<void> immediate_void() { co_return; }

spindle::task<long> loop_of_awaits(long n) {
  long total = 0;
  for (long i = 0; i < n; ++i) total += co_await immediate();
  for (long i = 0; i < n; ++i) co_await immediate_void();
  co_return total;
}

spindle::task<long> depth(long n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await depth(n - 1);
}

TEST(Task, MillionAwaitsInALoopUseConstantStack) {
  spindle::runtime rt({.workers = 1});
  EXPECT_EQ(rt.block_on(loop_of_awaits(1'000'000)), 1'000'000);
}

TEST(Task, MillionDeepRecursiveChainUsesConstantStack) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.block_on(depth(1'000'000)), 1'000'000);
}

// --- cooperative budget ----------------------------------------------------------------------

spindle::task<long> spin_on_children(std::atomic<bool>& flag) {
  long n = 0;
  while (!flag.load(std::memory_order_acquire)) n += co_await immediate();
  co_return n;
}
spindle::task<void> raise(std::atomic<bool>& flag) {
  flag.store(true, std::memory_order_release);
  co_return;
}

TEST(CooperativeBudget, LoopOfImmediateAwaitsLetsAForeignSpawnRun) {
  std::atomic<bool> flag{false};
  spindle::runtime rt({.workers = 1});
  auto looper = rt.spawn(spin_on_children(flag));
  rt.spawn(raise(flag)).detach();  // only runs if the looper gives the executor back
  EXPECT_GT(looper.join(), 0);
}

spindle::task<long> spin_after_spawning(std::atomic<bool>& flag) {
  auto child = spindle::spawn(raise(flag));  // queued behind the looper on the same executor
  long n = co_await spin_on_children(flag);
  co_await std::move(child);
  co_return n;
}

TEST(CooperativeBudget, LoopOfImmediateAwaitsLetsItsOwnChildRun) {
  spindle::runtime rt({.workers = 1});
  std::atomic<bool> flag{false};
  EXPECT_GT(rt.block_on(spin_after_spawning(flag)), 0);
}

// The budget yields rather than failing: many loopers on one executor all finish.
spindle::task<long> bounded_loop(long n) {
  long total = 0;
  for (long i = 0; i < n; ++i) total += co_await immediate();
  co_return total;
}

TEST(CooperativeBudget, ManyLoopersShareOneExecutor) {
  spindle::runtime rt({.workers = 1});
  std::vector<spindle::join_handle<long>> handles;
  for (int i = 0; i < 20; ++i) handles.push_back(rt.spawn(bounded_loop(20000)));
  for (auto& h : handles) EXPECT_EQ(h.join(), 20000);
}

// A task that never yields at all (no awaits while it spins) on a two-worker runtime: the
// tasks it spawned before spinning are taken by the other executor.
spindle::task<void> count_up(std::atomic<int>& counter) {
  counter.fetch_add(1, std::memory_order_acq_rel);
  co_return;
}
spindle::task<bool> spawn_then_spin(std::atomic<int>& counter, int children,
                                    std::atomic<bool>& give_up) {
  for (int i = 0; i < children; ++i) spindle::spawn(count_up(counter)).detach();
  while (counter.load(std::memory_order_acquire) < children) {
    if (give_up.load(std::memory_order_relaxed)) co_return false;
    spindle::core::cpu_relax();
  }
  co_return true;
}

TEST(CooperativeBudget, NonYieldingTaskDoesNotHoldItsQueueHostage) {
  constexpr int rounds = 50;
  std::atomic<bool> give_up{false};
  std::vector<std::atomic<int>> counters(rounds * 4);  // outlive the runtime (failure path)
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < rounds; ++round) {
    int variant = 0;
    for (int children : {1, 2, 3, 10}) {
      std::atomic<int>& counter = counters[round * 4 + variant++];
      auto h = rt.spawn(spawn_then_spin(counter, children, give_up));
      // Liveness guard: a spinner whose children never run would spin forever.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!h.is_finished() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      if (!h.is_finished()) give_up.store(true);
      ASSERT_TRUE(h.join()) << "round " << round << ", " << children
                            << " children held hostage by a task that never yields";
      EXPECT_EQ(counter.load(), children);
    }
  }
}

// The same when the spinner was started on a parked executor by spawn_on (a wake-up that does
// not make the executor a searcher) while the other executor is parked without a timeout.
TEST(CooperativeBudget, NonYieldingTaskStartedBySpawnOnDoesNotHoldItsQueueHostage) {
  constexpr int rounds = 20;
  std::atomic<bool> give_up{false};
  std::vector<std::atomic<int>> counters(rounds);  // outlive the runtime (failure path)
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < rounds; ++round) {
    // Both executors asleep first (bounded wait).
    const auto parked_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (rt.core().unparked_count() != 0 && std::chrono::steady_clock::now() < parked_deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(rt.core().unparked_count(), 0u);
    auto h = rt.spawn_on(std::uint32_t(round % 2), spawn_then_spin(counters[round], 1, give_up));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!h.is_finished() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (!h.is_finished()) give_up.store(true);
    ASSERT_TRUE(h.join()) << "round " << round
                          << ": the child of a non-yielding task started by spawn_on never ran";
  }
}

}  // namespace
