// Awaiting one I/O operation in a task: the bridge between a task's cancellable wait (task
// module, invariant S3) and the executor's reactor (core/reactor.hpp). Every I/O call of the io
// and net modules is built on `submit_and_wait`.
//
//   core::io_operation op{...};
//   std::int32_t result = co_await io::submit_and_wait(op);   // >= 0, or -errno
//
// Who takes part:
//   - the task: submits the operation to the reactor of the executor it is running on, and is
//     resumed once, after the final completion;
//   - the reactor's owner thread: runs the completion callback (R1);
//   - a canceller (any thread, task lock held): cannot take the operation back from the kernel,
//     so it posts a cancel request to the reactor's executor (an inbox message) and leaves the
//     waking to the completion.
// `pending` counts what must still happen before the task may resume: the completion (1), plus
// the cancel request if one was posted (+1, by the canceller, before it posts, and only while the
// completion is still outstanding: once `pending` reached 0 the task was woken and may already
// be destroying the awaiter). Both decrements
// happen on the reactor's owner thread; whichever reaches 0 wakes the task. So the awaiter (in
// the task's frame) outlives both the kernel's use of the operation and the cancel message, and
// a cancel request never names an operation that was already given back (the request checks
// `completed` on the owner thread, where the completion also runs).
//
// Outcome: await_resume returns the kernel's result; if a cancellation was delivered and the
// operation ended with -ECANCELED (or never started because cancellation was already requested),
// it throws task_cancelled instead. An operation that completed despite the cancel returns its
// real result (no data is lost); the next suspension point throws.
//
// Deadlines (submit_and_wait(operation, when), io/deadline.hpp): a `deadline_part` in the
// awaiter adds a timer entry on the executor's timer service and a second runnable, the expiry
// request. `pending` then starts at 2: the completion and the timer. The timer's fire callback
// (under the service lock, on the owner or on a rescuer of a stuck executor: any thread) only
// posts the expiry request to the reactor's executor, exactly like a canceller; the request runs
// on the owner thread, asks the reactor to cancel the operation if it has not completed (and
// then marks the deadline `expired`), and releases the timer's count. The completion disarms the
// timer: if that succeeds the timer never fires and the completion releases both counts; if not,
// the fire callback has run (disarm waits for it under the service lock) and its request
// releases the timer's count. So the awaiter outlives the timer entry, the expiry request and
// the kernel's use of the operation, as above. A completion with -ECANCELED after `expired` is
// reported as `deadline_expired` (never a kernel result); a cancellation of the task wins over
// the deadline (task_cancelled).
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <optional>

#include "spindle/core/clock.hpp"
#include "spindle/core/reactor.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/io/deadline.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/task/spawned_task.hpp"

namespace spindle::io {

// What an await with a deadline returns when the deadline cancelled the operation: never a
// kernel result (those are >= -4095).
inline constexpr std::int32_t deadline_expired = INT32_MIN;

namespace detail {

class io_wait : public cancellable_wait {
 public:
  explicit io_wait(core::io_operation& operation) noexcept;
  io_wait(const io_wait&) = delete;
  io_wait& operator=(const io_wait&) = delete;
  // Destroyed without having been resumed (the task's frame destroyed while woken, e.g. by a
  // runtime being destroyed) after an accept completed: closes the descriptor the kernel made,
  // which nobody else will ever see. Reading `completed_` and the result here is safe: a woken
  // frame is destroyed either by the worker that owns the reactor (the thread that wrote them)
  // or by the runtime's shutdown after every worker was joined (which orders their writes
  // before it); an awaiter still waiting on the kernel is never destroyed (see the top).
  ~io_wait();

  // Throws usage_error outside a task on a runtime worker.
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h) noexcept;
  std::int32_t await_resume();

  bool try_cancel() noexcept override;

 protected:
  // The deadline of io_deadline_wait (see "Deadlines" above); null without one.
  struct deadline_part {
    struct timer_type : core::timer_entry {
      explicit timer_type(io_wait& waiter) noexcept;
      io_wait& owner;
    };
    struct expiry_request : core::runnable {
      explicit expiry_request(io_wait& waiter) noexcept;
      io_wait& owner;
    };
    deadline_part(io_wait& waiter, clock_time deadline) noexcept
        : when(deadline), timer(waiter), expiry(waiter) {}
    clock_time when;
    timer_type timer;
    expiry_request expiry;
    core::timer_service* service = nullptr;  // set when armed
    bool expired = false;                    // owner thread (run_expiry)
  };
  deadline_part* deadline_ = nullptr;

 private:
  struct cancel_request : core::runnable {
    explicit cancel_request(io_wait& owner) noexcept;
    io_wait& owner;
  };
  static void on_complete(core::io_operation* operation) noexcept;
  static void run_cancel(core::runnable* request) noexcept;
  static void drop_cancel(core::runnable* request) noexcept;
  static const core::runnable_vtable cancel_vtable;
  static void on_deadline(core::timer_entry* entry) noexcept;
  static void run_expiry(core::runnable* request) noexcept;
  static void drop_expiry(core::runnable* request) noexcept;
  static const core::runnable_vtable expiry_vtable;
  void release_one() noexcept;
  void release(std::uint32_t count) noexcept;

  core::io_operation& operation_;
  ::spindle::detail::spawned_task_base* task_ = nullptr;
  std::uint32_t executor_index_ = 0;
  core::reactor* reactor_ = nullptr;
  core::runtime_core* core_ = nullptr;
  std::atomic<std::uint32_t> pending_{1};
  bool completed_ = false;       // owner thread only (set by on_complete)
  bool cancel_posted_ = false;   // guarded by the task lock (try_cancel)
  bool cancelled_before_start_ = false;
  cancel_request cancel_;
};

// io_wait with a deadline: the deadline_part lives here, in the same frame as the awaiter.
// Without a deadline (nullopt) it is a plain io_wait with unused room.
class io_deadline_wait final : public io_wait {
 public:
  io_deadline_wait(core::io_operation& operation, std::optional<clock_time> deadline) noexcept
      : io_wait(operation), part_(*this, deadline.value_or(clock_time{})) {
    if (deadline) deadline_ = &part_;
  }
  io_deadline_wait(const io_deadline_wait&) = delete;
  io_deadline_wait& operator=(const io_deadline_wait&) = delete;

 private:
  deadline_part part_;
};

// The gate of an I/O call's fast path, one that completes the call on the calling worker
// without the reactor (io::file::read_at of cached pages, file.hpp). First the checks of
// io_wait::await_ready (usage_error outside a task of this worker's runtime), then the
// cooperative-await protocol (task/spawned_task.hpp): it counts one unit of the task's budget,
// and is false when the budget is spent or a cancellation was requested, so the call goes through
// the reactor, whose await suspends (a yield) or delivers the cancellation. Also false where the
// reactor has a test hook: injected faults must reach the call.
bool may_complete_without_reactor();
}  // namespace detail

// Awaitable: submits `operation` on the current executor's reactor and resumes with its result.
// The operation (and the memory it points to) must stay valid until the await returns.
inline detail::io_wait submit_and_wait(core::io_operation& operation) noexcept {
  return detail::io_wait(operation);
}

// The same with a deadline on the current executor's timer service: the result, or
// deadline_expired if the deadline cancelled the operation first (see "Deadlines").
// (nullopt: no deadline.)
inline detail::io_deadline_wait submit_and_wait(core::io_operation& operation,
                                                std::optional<clock_time> deadline) noexcept {
  return detail::io_deadline_wait(operation, deadline);
}

// The runtime clock's reading on the calling worker (for io::deadline::resolve); usage_error
// elsewhere.
clock_time current_time();

// `limit` made absolute at the start of a call (the clock read once, on the calling worker), so
// that every step of the call shares one deadline: the retries and readiness waits of a socket
// call, the reads of a buffered read_line, the transport calls of a TLS read. none() stays none.
inline deadline whole_call_deadline(deadline limit) {
  return limit.is_set() ? deadline::at(limit.resolve(current_time())) : limit;
}

// The reactor of the executor running the calling task (usage_error elsewhere).
core::reactor& current_reactor();

}  // namespace spindle::io
