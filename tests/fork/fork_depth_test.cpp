// Depth (issue 14, item 5; F1 says "nested to any depth"): a fork_join recursion 10^5 levels
// deep completes on a worker whose stack `runtime_options::worker_stack_size` makes large
// enough, entered from a task and from a plain thread (run_on: it runs on a worker, whatever the plain
// thread's own stack); the option is validated and really applied to the worker threads.
// Before the option existed workers had 8 MiB and a fork_join level cost 160-192 bytes: such a
// recursion overflowed the stack at about 43,000 levels (SIGSEGV).
//
// The stack sizes are generous because sanitizers use several times more stack per frame; the
// memory is only reserved (pages are touched as deep as the recursion goes).
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>
#include <pthread.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

constexpr std::size_t mebibytes = std::size_t(1) << 20;

// A chain of `levels` nested fork_joins (the left branch recurses, the right one is trivial);
// returns the depth reached.
int descend(int levels) {
  if (levels == 0) return 0;
  auto [below, one] =
      spindle::fork_join([levels] { return descend(levels - 1); }, [] { return 1; });
  return below + one;
}

// TSan keeps a shadow call stack of 64 Ki frames per thread (the C++ runtime does not grow it):
// deeper recursions overrun it whatever the native stack. Under TSan the chain is shorter.
constexpr int deep_levels = under_tsan ? 40'000 : 100'000;

class ForkJoinDepth : public ::testing::TestWithParam<std::chrono::nanoseconds> {};

TEST_P(ForkJoinDepth, AHundredThousandLevelsFromATaskAndFromAPlainThread) {
  spindle::runtime rt({.workers = 2, .fork_quantum = GetParam(),
                       .worker_stack_size = 1024 * mebibytes});
  // From a task on a worker.
  EXPECT_EQ(rt.spawn([] { return descend(deep_levels); }).join(), deep_levels);
  // From this plain thread: run_on runs the computation on a worker (the plain thread's own
  // stack is not used; plain fork_join here would run serially on it, see fork-join.md "Depth").
  EXPECT_EQ(spindle::run_on(rt, [] { return descend(deep_levels); }), deep_levels);
  EXPECT_EQ(spindle::fork_join(rt, [] { return descend(deep_levels); }, [] { return 7; }).first,
            deep_levels);
}

// Quantum 0 promotes at every fork (the registered levels are offered and stolen); the default
// quantum promotes rarely.
INSTANTIATE_TEST_SUITE_P(Quanta, ForkJoinDepth,
                         ::testing::Values(std::chrono::nanoseconds(0),
                                           std::chrono::nanoseconds(std::chrono::microseconds(100))));

TEST(ForkJoinStack, WorkerStackSizeIsValidated) {
  EXPECT_THROW(spindle::runtime({.workers = 1, .worker_stack_size = 4096}), spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1, .worker_stack_size = 255 * 1024}),
               spindle::usage_error);
  EXPECT_THROW(spindle::runtime({.workers = 1, .worker_stack_size = std::size_t(65) << 30}),
               spindle::usage_error);
  // 0 is the default; the smallest accepted size works.
  spindle::runtime defaults({.workers = 1, .worker_stack_size = 0});
  EXPECT_EQ(defaults.spawn([] { return 5; }).join(), 5);
  spindle::runtime smallest({.workers = 1,
                             .worker_stack_size = spindle::runtime_options::min_worker_stack_size});
  EXPECT_EQ(smallest.spawn([] { return 6; }).join(), 6);
}

std::size_t current_stack_size() {
  pthread_attr_t attributes;
  std::size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    pthread_attr_getstacksize(&attributes, &size);
    pthread_attr_destroy(&attributes);
  }
  return size;
}

TEST(ForkJoinStack, WorkersRunOnStacksOfTheRequestedSize) {
  spindle::runtime large({.workers = 2, .worker_stack_size = 96 * mebibytes});
  EXPECT_GE(large.spawn([] { return current_stack_size(); }).join(), 96 * mebibytes);
  spindle::runtime defaults({.workers = 1});
  const std::size_t size = defaults.spawn([] { return current_stack_size(); }).join();
  EXPECT_GE(size, spindle::runtime_options::default_worker_stack_size);
  EXPECT_LT(size, 2 * spindle::runtime_options::default_worker_stack_size);
}

}  // namespace
