// Helpers the fork-join tests share (one definition each: the test executables are unity
// builds, where two files' helpers of the same name would collide).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>

#include "spindle/spindle.hpp"

namespace spindle::testing {

// Runtime options whose fork-join steals from the first poll (no quantum to wait out).
inline spindle::runtime_options forking(std::uint32_t workers) {
  return {.workers = workers, .fork_quantum = std::chrono::nanoseconds(0)};
}

// Fibonacci by binary fork-join down to the leaves.
inline std::uint64_t fib_fork(int n) {
  if (n < 2) return std::uint64_t(n);
  auto [a, b] =
      spindle::fork_join([n] { return fib_fork(n - 1); }, [n] { return fib_fork(n - 2); });
  return a + b;
}

// Forks empty pairs until `flag` is set; throws after 60 s. At quantum 0 every fork is a
// heartbeat, so the enclosing fork's right branch is promoted after two of them and an idle
// worker takes it: with two workers or more, that right branch runs on another thread.
inline void fork_until(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!flag.load(std::memory_order_acquire)) {
    spindle::fork_join([] {}, [] {});
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("fork_until: the flag was never set");
    }
  }
}

}  // namespace spindle::testing
