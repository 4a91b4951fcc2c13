// G2 metrics recorded on executor threads (SPEC G2; docs/design/diagnostics.md, "Metrics (G2)").
// One inline call per point in the hot files (executor.cpp, runtime_core.cpp, the task layer's
// cooperative budget, fork-join), so the points stay one line each.
//
// Who takes part
//   - the owner executor: bumps its executor_stats counters (single writer: relaxed load and
//     store, no read-modify-write; the exceptions are named in executor_stats) and records its
//     histograms (log_histogram, single writer);
//   - schedulers on any thread: stamp a runnable with the histogram clock before the push that
//     publishes it, only while histograms are on (runtime_core::histograms_on);
//   - readers on any thread (diagnostics/metrics.hpp): sample the counters and histograms.
//
// Cost while histograms are off: one relaxed load of runtime_core::histograms_on_ per poll
// (beside the coarse clock run_one reads anyway) and per schedule. While on: two clock reads per
// poll (start and end; wake-to-poll uses the start), one per schedule; figures in the design
// document.
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/core/executor.hpp"
#include "spindle/core/histogram.hpp"
#include "spindle/core/metrics_points.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/core/runtime_core.hpp"

namespace spindle::core::metrics {

// relaxed: single writer (the calling thread owns the counter); readers sample.
inline void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// Any thread, before the push that publishes `r` (which orders the stamp before the poller's
// read of it): remembers when `r` was scheduled, while histograms are on.
inline void stamp_schedule(const runtime_core& core, runnable* r) noexcept {
  if (core.histograms_on()) [[unlikely]] r->scheduled_at_ticks = histogram_clock::read();
}

// Owner: runs `r`, timing it when histograms are on (poll time; wake-to-poll from its stamp).
inline void run_measured(executor& self, runnable* r) noexcept {
  if (!self.core().histograms_on()) [[likely]] {
    r->run();
    return;
  }
  const std::uint64_t start = histogram_clock::read();
  executor_histograms& histograms = self.owner_histograms();
  if (const std::uint64_t stamped = r->scheduled_at_ticks; stamped != 0) {
    r->scheduled_at_ticks = 0;  // before run(): it may be scheduled again (and stamped) meanwhile
    histograms.wake_to_poll.record(histogram_clock::to_nanoseconds(std::int64_t(start - stamped)));
  }
  r->run();  // `r` may be gone after this
  histograms.poll_time.record(
      histogram_clock::to_nanoseconds(std::int64_t(histogram_clock::read() - start)));
}


// Fork-join: `self` promoted a continuation (the owner's thread, possibly inside its ping
// handler, hence the read-modify-write: a signal may interrupt a load-store pair of the owner).
inline void record_fork_promotion(executor& self) noexcept {
  // relaxed: a statistic; lock-free, so safe in signal context.
  self.owner_stats().fork_promotions.fetch_add(1, std::memory_order_relaxed);
}
// Fork-join: the executor running this thread took another's delegated work (a theft).
inline void record_fork_theft(executor* self) noexcept {
  if (self != nullptr) bump(self->owner_stats().fork_thefts);
}

}  // namespace spindle::core::metrics
