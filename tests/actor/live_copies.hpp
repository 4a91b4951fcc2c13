// A value that counts its live copies: captured by handlers whose lifetime a test checks (retired
// become handlers freed, none kept per message). Tests reset `alive` before they start.
#pragma once

#include <atomic>

namespace spindle::testing {

struct live_copies {
  static inline std::atomic<long> alive{0};
  live_copies() { alive.fetch_add(1); }
  live_copies(const live_copies&) { alive.fetch_add(1); }
  live_copies(live_copies&&) noexcept { alive.fetch_add(1); }
  live_copies& operator=(const live_copies&) = default;
  ~live_copies() { alive.fetch_sub(1); }
};

}  // namespace spindle::testing
