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
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>

#include "spindle/core/reactor.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/task/spawned_task.hpp"

namespace spindle::io {
namespace detail {

class io_wait final : public cancellable_wait {
 public:
  explicit io_wait(core::io_operation& operation) noexcept;
  io_wait(const io_wait&) = delete;
  io_wait& operator=(const io_wait&) = delete;

  // Throws usage_error outside a task on a runtime worker.
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h) noexcept;
  std::int32_t await_resume();

  bool try_cancel() noexcept override;

 private:
  struct cancel_request : core::runnable {
    explicit cancel_request(io_wait& owner) noexcept;
    io_wait& owner;
  };
  static void on_complete(core::io_operation* operation) noexcept;
  static void run_cancel(core::runnable* request) noexcept;
  static void drop_cancel(core::runnable* request) noexcept;
  static const core::runnable_vtable cancel_vtable;
  void release_one() noexcept;

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

}  // namespace detail

// Awaitable: submits `operation` on the current executor's reactor and resumes with its result.
// The operation (and the memory it points to) must stay valid until the await returns.
inline detail::io_wait submit_and_wait(core::io_operation& operation) noexcept {
  return detail::io_wait(operation);
}

// The reactor of the executor running the calling task (usage_error elsewhere).
core::reactor& current_reactor();

}  // namespace spindle::io
