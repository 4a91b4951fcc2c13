// The trace ring's reader protocol (core/trace.hpp, "Torn events"): a reader that copies a ring
// while its writer laps it many times sees only whole events, in order, never a mix of two.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "spindle/core/trace.hpp"

namespace {

using spindle::core::trace_capture;
using spindle::core::trace_kind;
using spindle::core::trace_ring;

TEST(TraceRing, AReaderNeverSeesATornEventWhileTheWriterLapsTheRing) {
  trace_ring ring;
  ring.allocate(64);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> written{0};
  // The writer: each event's words are functions of its position, so a mix of two is visible.
  // It laps the ring until the reader has copied it enough times while it moved (on a loaded
  // machine the two threads may share a CPU: a fixed count could be written between two reads).
  std::thread writer([&] {
    std::uint64_t position = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      ring.write(trace_kind::wake, 3, std::uint32_t(position), position, ~position);
      ++position;
    }
    written.store(position);
  });
  std::uint64_t torn = 0, lapped_reads = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (lapped_reads < 2000 && std::chrono::steady_clock::now() < give_up) {
    trace_capture::ring_events out;
    std::vector<std::uint64_t> ticks;
    ring.read(0, out, ticks);
    torn += out.torn;
    if (out.overwritten > 0 && !out.events.empty()) ++lapped_reads;
    for (std::size_t i = 0; i < out.events.size(); ++i) {
      const auto& e = out.events[i];
      ASSERT_EQ(e.kind, trace_kind::wake);
      ASSERT_EQ(e.executor, 3);
      ASSERT_EQ(e.ref, ~e.id) << "an event mixed from two writes";
      ASSERT_EQ(e.aux, std::uint32_t(e.id));
      if (i > 0) {
        ASSERT_EQ(e.id, out.events[i - 1].id + 1) << "events out of order or missing mid-copy";
        ASSERT_GE(ticks[i], ticks[i - 1]);
      }
    }
    ASSERT_LE(out.events.size(), 64u);
  }
  stop.store(true);
  writer.join();
  EXPECT_EQ(lapped_reads, 2000u) << "the reader saw the writer lap the ring too rarely";
  // After the writer stopped, a read returns the newest 64, whole.
  trace_capture::ring_events last;
  std::vector<std::uint64_t> ticks;
  ring.read(0, last, ticks);
  ASSERT_EQ(last.events.size(), 64u);
  EXPECT_EQ(last.events.back().id, written.load() - 1);
  EXPECT_EQ(last.torn, 0u);
  RecordProperty("torn_dropped", std::to_string(torn));
}

}  // namespace
