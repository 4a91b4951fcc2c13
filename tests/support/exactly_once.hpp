// Accounting for stress tests: every item of 0..total-1 received exactly once. GoogleTest
// assertions, so only for test executables (tests/stress, tests/<module>).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace spindle::testing {

// Each of `total` ids exactly once across `received` (one vector per consumer).
inline void expect_each_exactly_once(const std::vector<std::vector<std::uint64_t>>& received,
                                     std::uint64_t total) {
  std::vector<std::uint8_t> seen(total, 0);
  std::uint64_t count = 0;
  for (const auto& items : received) {
    for (std::uint64_t item : items) {
      ASSERT_LT(item, total);
      ASSERT_EQ(seen[item]++, 0) << "item " << item << " delivered twice";
      ++count;
    }
  }
  EXPECT_EQ(count, total) << "items lost";
}

}  // namespace spindle::testing
