// Timeouts: co_await spindle::with_timeout(d, some_task()) / with_deadline(t, some_task()), and
// the same over any other awaitable: co_await with_timeout(d, channel.receive()), a sleep, an
// ask, a socket read, a join: anything co_await-able in a spindle task.
//
// Design (docs/design/time.md, "Timeouts" and "Timeouts over any awaitable")
// Over a task<T>:
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
//
// Over any other awaitable (timeout_awaiter below): no child task. The operand is awaited by the
// calling task itself, inside a cancellation scope of that task (task/spawned_task.hpp, S6):
//   - await_ready asks the operand; ready at once -> its result, no scope, no timer (a value
//     that is there wins, as above);
//   - otherwise await_suspend lists the scope and arms the same timeout_signal (in scope mode,
//     keyed by the signal) on the caller's timer service, then hands over to the operand's
//     await_suspend. When the timer fires, the signal (run outside the timer lock, as above)
//     fires the scope: the task behaves as cancelled until the scope ends, so the operand's
//     wait is interrupted (or its next registration refused) exactly as by a cancellation;
//   - await_resume takes the operand's outcome, then disarms and unlists the scope. The signal
//     holds a reference on the task and finds its scope by key under the task lock, so one that
//     runs late (the operand completed as the timer fired) finds nothing and does nothing.
// Outcome of co_await with_timeout(d, awaitable):
//   - the operand completes (value or exception) -> that, even if the deadline passed meanwhile;
//   - the operand throws task_cancelled and the scope fired, the task itself not being
//     cancelled -> timeout_error;
//   - the operand throws task_cancelled otherwise (the task was cancelled, or an outer scope
//     fired: that one turns it into its own timeout_error) -> task_cancelled;
//   - an operand that is no cancellation point (a structured-cleanup join) just completes.
// Cost: no spawn, no scheduling; one small allocation (the signal, from the frame cache) and one
// timer arm/disarm when the operand would wait, nothing when it is ready (docs/design/time.md).
// The returned awaiter holds a movable rvalue operand by value, anything else by reference
// (task/awaitable.hpp), and is awaited once, where it was made (not movable).
#pragma once

#include <optional>
#include <stdexcept>

#include "spindle/core/clock.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/awaitable.hpp"
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

// The scope of one with_timeout over an awaitable (see above), in its awaiter.
class deadline_scope {
 public:
  deadline_scope() noexcept = default;
  deadline_scope(const deadline_scope&) = delete;
  deadline_scope& operator=(const deadline_scope&) = delete;
  // A frame destroyed while the operand waits (shutdown) leaves the scope here.
  ~deadline_scope() { leave(); }

  // On `task`, the running task: lists the scope and arms its timer. Throws bad_alloc only,
  // before anything is listed.
  void enter(spawned_task_base& task, clock_time deadline);
  // Disarms and unlists (idempotent); true if the scope fired.
  bool leave() noexcept;
  bool entered() const noexcept { return signal_ != nullptr; }

 private:
  cancellation_scope scope_;
  spawned_task_base* task_ = nullptr;  // the task that entered; alive: it runs this awaiter
  timeout_signal* signal_ = nullptr;   // our reference, while entered
};

}  // namespace detail

// The awaiter of with_timeout / with_deadline over an awaitable that is not a task<T>.
template <class Awaitable>
class [[nodiscard]] timeout_awaiter {
 public:
  using result_type = await_result_t<Awaitable>;

  template <class Operand>
  timeout_awaiter(std::optional<clock_time> deadline, clock_duration timeout, Operand&& operand)
      : operand_(static_cast<Operand&&>(operand)), deadline_(deadline), timeout_(timeout) {}
  timeout_awaiter(const timeout_awaiter&) = delete;
  timeout_awaiter& operator=(const timeout_awaiter&) = delete;

  bool await_ready() { return operand_.awaiter().await_ready(); }

  // Returns what the operand's await_suspend returns (void, bool or a handle).
  decltype(auto) await_suspend(std::coroutine_handle<> h) {
    detail::spawned_task_base* task = detail::spawned_task_base::current();
    if (task == nullptr) throw usage_error("spindle: with_timeout awaited outside a task");
    scope_.enter(*task, deadline_ ? *deadline_ : detail::saturating_add(now(), timeout_));
    try {
      // Nothing of ours is touched after this call: the task may already run elsewhere.
      return operand_.awaiter().await_suspend(h);
    } catch (...) {
      scope_.leave();
      throw;
    }
  }

  result_type await_resume() {
    if (!scope_.entered()) return operand_.awaiter().await_resume();
    try {
      if constexpr (std::is_void_v<result_type>) {
        operand_.awaiter().await_resume();
        scope_.leave();
      } else {
        result_type result = operand_.awaiter().await_resume();
        scope_.leave();
        if constexpr (std::is_rvalue_reference_v<result_type>) {
          return static_cast<result_type>(result);
        } else {
          return result;  // moved (a value) or the reference itself
        }
      }
    } catch (const task_cancelled&) {
      // Ours when our scope fired and nothing cancelled the task itself (which then wins).
      const bool fired = scope_.leave();
      if (fired && !detail::spawned_task_base::current()->task_cancel_requested()) {
        throw timeout_error();
      }
      throw;
    } catch (...) {
      scope_.leave();
      throw;
    }
  }

 private:
  detail::awaiter_holder<Awaitable> operand_;
  detail::deadline_scope scope_;
  std::optional<clock_time> deadline_;
  clock_duration timeout_;
};

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

// Over any other awaitable (see "Over any other awaitable" above): no child task. An rvalue
// operand is moved into the awaiter, an lvalue one is referred to.
template <class Awaitable>
  requires(awaitable<Awaitable> && !detail::is_task_v<std::remove_cvref_t<Awaitable>>)
auto with_deadline(clock_time deadline, Awaitable&& operand) {
  return timeout_awaiter<detail::operand_storage_t<Awaitable>>(deadline, clock_duration::zero(),
                                    static_cast<Awaitable&&>(operand));
}
template <class Awaitable, class Rep, class Period>
  requires(awaitable<Awaitable> && !detail::is_task_v<std::remove_cvref_t<Awaitable>> &&
           detail::coarser_integral_duration<Rep, Period>)
auto with_deadline(
    std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<Rep, Period>> deadline,
    Awaitable&& operand) {
  return timeout_awaiter<detail::operand_storage_t<Awaitable>>(detail::to_clock_time(deadline), clock_duration::zero(),
                                    static_cast<Awaitable&&>(operand));
}
// The timeout counts from the await (when the operand would wait), not from this call.
template <class Awaitable>
  requires(awaitable<Awaitable> && !detail::is_task_v<std::remove_cvref_t<Awaitable>>)
auto with_timeout(clock_duration timeout, Awaitable&& operand) {
  return timeout_awaiter<detail::operand_storage_t<Awaitable>>(std::nullopt, timeout, static_cast<Awaitable&&>(operand));
}
template <class Awaitable, class Rep, class Period>
  requires(awaitable<Awaitable> && !detail::is_task_v<std::remove_cvref_t<Awaitable>> &&
           detail::coarser_integral_duration<Rep, Period>)
auto with_timeout(std::chrono::duration<Rep, Period> timeout, Awaitable&& operand) {
  return timeout_awaiter<detail::operand_storage_t<Awaitable>>(std::nullopt, detail::to_clock_duration(timeout),
                                    static_cast<Awaitable&&>(operand));
}

}  // namespace spindle
