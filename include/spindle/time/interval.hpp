// spindle::interval: a periodic timer for a loop inside one task.
//
//   spindle::interval every(100ms);          // start = now(); ticks at start+100ms, +200ms, ...
//   for (;;) {
//     co_await every.tick();                 // returns the scheduled time of this tick
//     poll_something();
//   }
//
// Design (docs/design/time.md)
//   An interval is only a schedule: the time of its next tick. tick() returns an awaiter that is
//   a sleep until that time (time/sleep.hpp: one timer entry in the awaiter, cancellable, no
//   allocation); when it completes, the schedule moves on. Ticks are anchored to the start, so
//   they do not drift however late the task runs: tick k is due at start + k * period.
//
// Missed ticks: skip. When a tick completes late, at time `now`, every tick due at or before
// `now` that has not been delivered is skipped, and the next tick is the first one of the
// original grid strictly after `now`. So a task that falls behind gets one tick for the time it
// lost, never a burst of catch-up ticks, and ticks stay on the grid (Tokio's
// MissedTickBehavior::Skip; Tokio's default, Burst, would deliver the missed ticks back to back).
//
// Cancellation: tick() is a cancellation point like any sleep; a cancelled tick does not consume
// the tick (the schedule only moves when a tick completes).
//
// An interval is used by one task at a time (it is not synchronised). Creating one with only a
// period reads now(): it must happen on a runtime worker (usage_error otherwise).
#pragma once

#include "spindle/core/clock.hpp"
#include "spindle/core/errors.hpp"
#include "spindle/time/sleep.hpp"

namespace spindle {

class interval {
 public:
  // Ticks at now() + k * period, k = 1, 2, ...
  explicit interval(clock_duration period) : interval(now(), period) {}
  // A period in a coarser unit saturates (sleep.hpp): beyond the range, one tick at the end.
  template <class Rep, class Period>
    requires detail::coarser_integral_duration<Rep, Period>
  explicit interval(std::chrono::duration<Rep, Period> period)
      : interval(detail::to_clock_duration(period)) {}
  // Ticks at start + k * period, k = 1, 2, ...
  template <class Rep, class Period>
    requires detail::coarser_integral_duration<Rep, Period>
  interval(clock_time start, std::chrono::duration<Rep, Period> period)
      : interval(start, detail::to_clock_duration(period)) {}
  interval(clock_time start, clock_duration period) : period_(period) {
    if (period <= clock_duration::zero()) {
      throw usage_error("spindle::interval: the period must be positive");
    }
    next_tick_ = detail::saturating_add(start, period);
  }

  clock_duration period() const noexcept { return period_; }
  // The scheduled time of the tick the next tick() waits for.
  clock_time next_tick() const noexcept { return next_tick_; }
  // Restarts the grid: the next tick is due one period after now().
  void reset() { next_tick_ = detail::saturating_add(now(), period_); }

  class [[nodiscard]] tick_awaiter : public detail::timer_wait {
   public:
    explicit tick_awaiter(interval& owner) noexcept
        : detail::timer_wait(owner.next_tick_), owner_(owner) {}
    // The scheduled time of the completed tick (now() may be later).
    clock_time await_resume() {
      detail::timer_wait::await_resume();  // throws task_cancelled: the tick is not consumed
      const clock_time scheduled = deadline();
      owner_.advance_past(scheduled, now());
      return scheduled;
    }

   private:
    interval& owner_;
  };

  // Completes at the next tick of the grid (see "Missed ticks" above).
  tick_awaiter tick() noexcept { return tick_awaiter(*this); }

 private:
  // After the tick at `scheduled` completed at `current`: the first grid point after `current`.
  void advance_past(clock_time scheduled, clock_time current) noexcept {
    clock_time next = detail::saturating_add(scheduled, period_);
    if (next <= current) {
      // Skip every missed tick in one step: (current - next) / period whole periods, plus one.
      const auto missed = (current - next) / period_ + 1;
      next = detail::saturating_add(next, period_ * missed);
    }
    next_tick_ = next;
  }

  clock_duration period_;
  clock_time next_tick_;
};

}  // namespace spindle
