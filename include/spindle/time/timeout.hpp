// Timeouts: co_await spindle::with_timeout(d, some_task()) / with_deadline(t, some_task()).
//
// Design (docs/design/time.md, "Timeouts")
//   with_timeout runs `inner` as a spawned child (so it may run on any executor) and arms a
//   timer on the caller's executor. The timeout is a signal, not a preemption: when the timer
//   fires, the child's cancellation is requested, and the child observes it at its next
//   suspension point (task/cancellation.hpp), unwinds, and completes as cancelled. The parent
//   just joins the child all along.
//
//   The fire callback must not request the cancellation itself: it runs under the timer
//   service's lock, and request_cancel may disarm the child's own sleep, which is often armed on
//   the same service (non-recursive mutex: a deadlock). So the timer state is a small refcounted
//   runnable, `timeout_signal` (src/time/timeout.cpp): the fire callback only schedules it on
//   the owner executor, and when it runs, outside any timer lock, it requests the cancellation.
//   It holds a reference on the child's state, so it may run after the parent has finished.
//   References: the parent's guard (dropped after the join) and the queued runnable (from fire
//   to run or, at shutdown, drop). `fired` is written by the fire callback under the service
//   lock and read by the parent after disarm() returned false, which takes that lock.
//
// Outcome of co_await with_timeout(d, inner):
//   - inner completes (value or exception) -> that value / that exception, even if the deadline
//     passed meanwhile (a child that swallows the cancellation and returns a value wins);
//   - inner ends cancelled and the timer fired -> timeout_error;
//   - inner ends cancelled otherwise (it cancelled itself, or shutdown) -> task_cancelled;
//   - the caller is cancelled while waiting -> the child is cancelled too, the caller waits until
//     the child has completed (it must not outlive the call: it may use the caller's objects;
//     this wait is not interruptible), then task_cancelled propagates.
//   The timer is disarmed once the child has been joined. A zero or negative timeout still
//   spawns the child; it is cancelled at its first suspension point (or before it starts).
//   Must be awaited in a task on a runtime worker (usage_error otherwise).
#pragma once

#include <optional>
#include <stdexcept>

#include "spindle/core/clock.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/join_set.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"
#include "spindle/time/sleep.hpp"

namespace spindle {

class timeout_error : public std::runtime_error {
 public:
  timeout_error() : std::runtime_error("spindle: operation timed out") {}
};

namespace detail {

class timeout_signal;

// The parent's handle on its timeout_signal (see the design comment above).
class timeout_guard {
 public:
  // Allocates the signal (the only step that can fail); arm() later cannot fail.
  timeout_guard();
  timeout_guard(const timeout_guard&) = delete;
  timeout_guard& operator=(const timeout_guard&) = delete;
  // Disarms if still armed and drops the parent's reference.
  ~timeout_guard();

  // On the current executor's timer service: at `deadline`, request `child`'s cancellation.
  // Takes a reference on `child`. Call once, on a runtime worker.
  void arm(spawned_task_base& child, clock_time deadline) noexcept;
  // Disarms if still armed; true if the timer fired (the cancellation was or will be requested).
  bool stop() noexcept;

 private:
  timeout_signal* signal_;
};

}  // namespace detail

namespace detail {

// The body of with_timeout / with_deadline: a deadline, or a timeout counted from when the
// returned task starts (now() needs a worker, so it is read there, not at the call).
template <class T>
task<T> run_with_timer(std::optional<clock_time> deadline, clock_duration timeout,
                       task<T> inner) {
  task_host& state = current_host_or_throw();
  timeout_guard timer;  // allocated first: nothing below can fail once the child exists
  spawned_task<T>* spawned = prepare_spawn(state, std::move(inner));
  join_handle<T> child(spawned);
  timer.arm(*spawned, deadline ? *deadline : saturating_add(now(), timeout));
  schedule_prepared(state, spawned);

  try {
    co_return co_await child;
  } catch (const task_cancelled&) {
    // A join interrupted by our own cancellation leaves the handle unconsumed; a join that
    // completed consumed it, and then it was the child that ended cancelled.
    if (!child.valid()) {
      if (timer.stop()) throw timeout_error();
      throw;
    }
  }
  // Only reached when the caller was cancelled while joining. Structured cancellation: cancel
  // the child and wait until it has completed (co_await is not allowed in a handler, hence here).
  child.cancel();
  co_await completion_awaiter(*spawned);
  child.detach();  // its outcome is discarded: the caller was cancelled
  throw task_cancelled();
}

}  // namespace detail

// Runs `inner`, cancelling it if it has not completed by `deadline` (see the outcome rules).
template <class T>
task<T> with_deadline(clock_time deadline, task<T> inner) {
  return detail::run_with_timer<T>(deadline, clock_duration::zero(), std::move(inner));
}

template <class T, class Rep, class Period>
  requires detail::coarser_integral_duration<Rep, Period>
task<T> with_deadline(
    std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<Rep, Period>> deadline,
    task<T> inner) {
  return with_deadline(detail::to_clock_time(deadline), std::move(inner));
}

// Runs `inner`, cancelling it if it has not completed `timeout` after the returned task starts.
// A timeout in a coarser unit saturates (sleep.hpp): milliseconds::max() never times out.
template <class T>
task<T> with_timeout(clock_duration timeout, task<T> inner) {
  return detail::run_with_timer<T>(std::nullopt, timeout, std::move(inner));
}
template <class T, class Rep, class Period>
  requires detail::coarser_integral_duration<Rep, Period>
task<T> with_timeout(std::chrono::duration<Rep, Period> timeout, task<T> inner) {
  return with_timeout(detail::to_clock_duration(timeout), std::move(inner));
}

}  // namespace spindle
