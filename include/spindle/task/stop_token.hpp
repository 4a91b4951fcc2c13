// std::stop_token interop: a task's cancellation seen as a std::stop_token, and a
// std::stop_source that cancels a task.
//
//   // inside a task: hand the task's cancellation to code that takes a std::stop_token
//   std::stop_token token = spindle::this_task::stop_token();
//   std::jthread helper([token] { while (!token.stop_requested()) ...; });  // (or a callback)
//
//   // a std::stop_source (a GUI's cancel button, a std::jthread's) cancels a spawned task
//   std::stop_source source;
//   auto handle = rt.spawn(work(), source.get_token());   // or spindle::spawn(work(), token)
//   source.request_stop();                                // = handle.cancel()
//
// Design (docs/design/tasks.md, "std::stop_token")
//   Task -> token: the running task makes, on the first this_task::stop_token(), a
//   std::stop_source of its own (spawned_task_base::stop_source_, guarded by the task lock,
//   S3's lock: a canceller on another thread reads it). request_cancel copies it under the lock
//   (a reference count, no allocation) and calls request_stop() on the copy after unlocking, so
//   stop callbacks, which may do anything (cancel this very task again, take other locks), never
//   run under the task lock; and it does so before it sets cancel_requested, so a task that
//   meets its cancellation finds its token stopped. Without a source, the canceller holds the
//   lock from seeing none to setting the flag, and the task publishes a new source under the
//   lock and then reads the flag: a token made after the cancellation was requested is
//   stopped before stop_token() returns. abandon() (shutdown) requests stop too. A cancellation scope's firing (with_timeout
//   over an awaitable, S6) is not the task's cancellation: the token does not see it.
//   Source -> task: spawn(body, token) registers a std::stop_callback whose callback is
//   request_cancel on the new task, before the task is first scheduled (a token already stopped
//   cancels it there: it never runs). The callback lives in a completion hook (task_extras.hpp)
//   deleted when the task completes; std::stop_callback's destructor waits for a callback
//   running on another thread, and request_cancel takes no lock the completing thread holds,
//   so the task (alive until its running reference drops, after the hooks) outlives every
//   call of the callback.
#pragma once

#include <stop_token>

#include "spindle/core/errors.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/task/task_extras.hpp"

namespace spindle {

namespace this_task {

// The running task's cancellation as a std::stop_token (see above). usage_error outside a
// spawned task.
inline std::stop_token stop_token() {
  detail::spawned_task_base* task = detail::spawned_task_base::current();
  if (task == nullptr) throw usage_error("spindle::this_task::stop_token() outside a task");
  return task->stop_token();
}

}  // namespace this_task

namespace detail {

// Cancels `task` when the token's source requests stop (see "Source -> task" above).
class stop_request_hook final : public completion_hook {
 public:
  // May cancel `task` at once (a stopped token): call before the task is first scheduled.
  stop_request_hook(spawned_task_base& task, std::stop_token token)
      : callback_(std::move(token), canceller{&task}) {}
  void on_complete() noexcept override {}  // deleting the hook deregisters the callback

 private:
  struct canceller {
    spawned_task_base* task;  // alive while the hook is: the hook goes before the task does
    void operator()() const noexcept { task->request_cancel(); }
  };
  std::stop_callback<canceller> callback_;
};

}  // namespace detail

}  // namespace spindle
