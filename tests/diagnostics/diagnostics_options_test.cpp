// Attack finding (issue 15): a huge trace ring size silently sent every executor's events to the
// shared ring of plain threads (the allocation failed), or committed gigabytes at the first
// switch-on. Sizes beyond the documented bound are refused where the options are given.
#include <gtest/gtest.h>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

TEST(DiagnosticsOptions, ATraceRingBeyondTheBoundIsAUsageError) {
  spindle::runtime_options options;
  options.workers = 1;
  options.diagnostics.trace_events_per_executor = 0x40000000;
  EXPECT_THROW(spindle::runtime rt(options), spindle::usage_error);
  options.diagnostics.trace_events_per_executor =
      spindle::core::diagnostics_options::max_trace_events_per_executor;
  EXPECT_NO_THROW(spindle::runtime rt(options));
}

}  // namespace
