// Helpers shared by the sync tests (tests/sync/*_test.cpp, tests/stress/sync_stress_test.cpp).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <thread>

#include "spindle/spindle.hpp"

namespace spindle_sync_test {

// Yields the calling task until `condition()` holds: how a test waits for another task to reach
// a state (queued on a primitive, say) without sleeping.
template <class Condition>
spindle::task<void> until(Condition condition) {
  while (!condition()) co_await spindle::yield_now();
}

// The same for a plain thread.
template <class Condition>
void spin_until(Condition condition) {
  while (!condition()) std::this_thread::yield();
}

// Outcome of joining a task that may have been cancelled.
template <class T>
bool joined_cancelled(spindle::join_handle<T>& handle) {
  try {
    handle.join();
    return false;
  } catch (const spindle::task_cancelled&) {
    return true;
  }
}

// Iteration counts: `release_count` times SPINDLE_SYNC_SCALE if set (e.g. 0.1 for a quick run,
// 10 for a long soak), else times `tsan_factor` in ThreadSanitizer builds (which run about
// 5-10x slower), else unchanged. Never below 1.
inline std::uint64_t scaled(std::uint64_t release_count, double tsan_factor = 1.0) {
  double factor = 1.0;
#if defined(SPINDLE_TSAN)
  factor = tsan_factor;
#else
  (void)tsan_factor;
#endif
  if (const char* text = std::getenv("SPINDLE_SYNC_SCALE")) factor = std::atof(text);
  const auto n = static_cast<std::uint64_t>(double(release_count) * factor);
  return n == 0 ? 1 : n;
}

}  // namespace spindle_sync_test
