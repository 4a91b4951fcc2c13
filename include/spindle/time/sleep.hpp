// Sleeping in a task: spindle::now(), co_await spindle::sleep_for(d), co_await sleep_until(t).
//
// Design (docs/design/time.md)
//   A sleep is one timer_entry armed on the timer service of the executor the task is running on
//   when it suspends (core/timer_wheel.hpp). The awaiter lives in the task's coroutine frame and
//   holds the entry, so a sleep never allocates. The awaiter remembers that service: the task may
//   be woken on one executor and resumed on another, but the entry stays where it was armed.
//
//   A sleep is a cancellable wait (task/spawned_task.hpp, invariant S3):
//     await_suspend: begin_registration (task lock) -> arm -> end_registration(this).
//     Exactly one of two parties wakes the task:
//       - the timer's fire callback (owner executor, under the service lock): task->wake();
//       - a canceller, through try_cancel() (task lock held): it wins only if disarm() found the
//         entry still armed, then the canceller wakes the task and await_resume throws.
//     disarm() returning false means the fire callback has completed (the service lock is a
//     barrier), so a losing canceller never races with the waker.
//   Lock order: task lock -> service lock (try_cancel). The fire callback takes no task lock.
//
// Semantics
//   - The deadline of sleep_for(d) is fixed when sleep_for is called: now() + d (saturating).
//   - Every duration the module takes (sleep_for, with_timeout, interval) and every time point
//     (sleep_until, with_deadline) in a coarser unit than clock_duration (milliseconds, seconds,
//     ...) is converted saturating (detail::to_clock_duration): one beyond clock_duration's
//     range is clock_duration::max() (min() below), never an overflow that wraps to a past
//     deadline. So sleep_for(milliseconds::max()) sleeps until cancelled (issue 14, attack).
//   - A deadline that has already passed (d <= 0, sleep_until in the past) completes at once,
//     without suspending; it is still a cancellation point: if the task's cancellation was
//     requested, the await throws task_cancelled. It counts against the task's cooperative
//     budget (task/spawned_task.hpp): with the budget used up the task yields to its executor
//     instead (a loop of sleep_for(0) lets the others run).
//   - A sleep completes at the first timer check with clock.now() >= deadline, never before; how
//     late depends on the executor (it checks timers when idle and every `budget` runnables).
//   - Time is the runtime's clock (runtime_options::clock): with a manual_clock sleeps are
//     virtual and complete when a test advances the clock.
//   - now(), sleep_for() and sleep_until() need a task on a runtime worker: elsewhere they throw
//     usage_error.
//
// This header is the sleep primitive only; spindle/time/time.hpp gathers the whole module
// (interval, timeout).
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <ratio>
#include <utility>

#include "spindle/core/clock.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/task/spawned_task.hpp"

namespace spindle {

// The current runtime's clock reading. Throws usage_error off a runtime worker thread.
clock_time now();

namespace detail {

// A cancellable wait for a deadline on the current executor's timer service (see above).
// Neither copyable nor movable: the armed entry's address is in the timer wheel.
class timer_wait : public cancellable_wait {
 public:
  explicit timer_wait(clock_time deadline) noexcept;
  timer_wait(const timer_wait&) = delete;
  timer_wait& operator=(const timer_wait&) = delete;
  // Disarms only when the frame is destroyed while suspended (shutdown): after a resumption the
  // entry has fired or was disarmed by the canceller.
  ~timer_wait();

  clock_time deadline() const noexcept { return deadline_; }

  // True (no suspension) when the deadline has passed. Throws usage_error outside a task.
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h);
  // Throws task_cancelled if the wait was cancelled, or if the deadline had passed and the task's
  // cancellation was requested.
  void await_resume();

  bool try_cancel() noexcept override;

 private:
  // The entry and a way back to the awaiter: the fire callback only gets the entry.
  struct entry_type : core::timer_entry {
    explicit entry_type(timer_wait& owner) noexcept;
    timer_wait& owner;
  };
  static void on_fire(core::timer_entry* entry) noexcept;

  clock_time deadline_;
  entry_type entry_;
  spawned_task_base* task_ = nullptr;          // the waiting task, set when it suspends
  core::timer_service* service_ = nullptr;     // where entry_ was armed
  bool armed_ = false;      // suspended with entry_ armed and not yet resumed (owner-side)
  bool passed_ = false;     // await_ready found the deadline passed (owner-side)
  bool cancelled_ = false;  // written by the winning canceller under the task lock
};

// now() + duration without overflowing (clock_time::max() / min() at the ends).
clock_time saturating_add(clock_time base, clock_duration duration) noexcept;

// A duration that converts to clock_duration exactly (an integral count of a whole number of
// nanoseconds) but may lie beyond its range: milliseconds, seconds, hours...
template <class Rep, class Period>
concept coarser_integral_duration =
    std::integral<Rep> && !std::same_as<Rep, bool> && std::ratio_divide<Period, std::nano>::den == 1 &&
    !std::same_as<std::chrono::duration<Rep, Period>, clock_duration>;

// `duration` as clock_duration, saturating: beyond the range, clock_duration::max() / min()
// (the implicit conversion multiplies and overflows: milliseconds::max() became -1 ms).
template <class Rep, class Period>
  requires coarser_integral_duration<Rep, Period>
constexpr clock_duration to_clock_duration(std::chrono::duration<Rep, Period> duration) noexcept {
  constexpr std::intmax_t nanoseconds_per_unit = std::ratio_divide<Period, std::nano>::num;
  constexpr clock_duration::rep largest_count =
      clock_duration::max().count() / nanoseconds_per_unit;
  if (std::cmp_greater(duration.count(), largest_count)) return clock_duration::max();
  if (std::cmp_less(duration.count(), -largest_count)) return clock_duration::min();
  return clock_duration(static_cast<clock_duration::rep>(duration.count()) * nanoseconds_per_unit);
}

// A steady_clock time point in a coarser unit as clock_time, saturating the same way.
template <class Rep, class Period>
  requires coarser_integral_duration<Rep, Period>
constexpr clock_time to_clock_time(
    std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<Rep, Period>>
        time) noexcept {
  return clock_time(to_clock_duration(time.time_since_epoch()));
}

}  // namespace detail

// The awaitable returned by sleep_for / sleep_until.
class [[nodiscard]] sleep_awaiter : public detail::timer_wait {
 public:
  using detail::timer_wait::timer_wait;
};

// Completes once the runtime's clock reaches `deadline`.
inline sleep_awaiter sleep_until(clock_time deadline) noexcept { return sleep_awaiter(deadline); }

template <class Rep, class Period>
  requires detail::coarser_integral_duration<Rep, Period>
sleep_awaiter sleep_until(
    std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<Rep, Period>>
        deadline) noexcept {
  return sleep_awaiter(detail::to_clock_time(deadline));
}

// Completes once `duration` has passed, counted from this call. Throws usage_error off a worker.
inline sleep_awaiter sleep_for(clock_duration duration) {
  return sleep_awaiter(detail::saturating_add(now(), duration));
}
template <class Rep, class Period>
  requires detail::coarser_integral_duration<Rep, Period>
sleep_awaiter sleep_for(std::chrono::duration<Rep, Period> duration) {
  return sleep_for(detail::to_clock_duration(duration));
}

}  // namespace spindle
