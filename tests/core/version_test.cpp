#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <string_view>

TEST(Version, MatchesProjectVersion) {
  EXPECT_EQ(std::string_view(spindle::version_string()), "0.1.0");
}
