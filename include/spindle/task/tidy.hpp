// Tidy destructors (SPEC T4; seed 004 "Signals, Destructors and Slots"): asynchronous clean-up
// that runs to completion before a task's outcome is published, however the task ended.
//
//   spindle::task<void> session(connection& c) {
//     co_await c.open();
//     auto tidy = spindle::tidy([&c]() -> spindle::task<void> { co_await c.say_goodbye(); });
//     co_await serve(c);        // cancelled here (a timeout, a slot's new occupant, ...)?
//   }                           // say_goodbye() still runs, and completes, before the
//                               // cancellation does: joiners see "cancelled" only after it
//
// Why: a timeout or a cancel is a signal delivered at a suspension point, and the task unwinds
// with task_cancelled. RAII destructors run then, but they cannot await: closing a session
// politely, flushing a file, telling a peer. A tidy destructor can.
//
// Semantics
//   - tidy(cleanup) registers `cleanup` (a callable returning task<void>) with the spawned task
//     running the caller. It is called, and its task awaited, when that spawned task finishes
//     (value, exception or cancellation), after the body, before the outcome is published: the
//     join handle, with_timeout, a slot's next occupant all see the task finish only afterwards.
//   - Several registrations run in reverse order (last registered first), one at a time.
//   - While they run the task is shielded: a cancellation requested before or during the
//     clean-up neither interrupts its waits nor makes its awaits throw (it is recorded; the
//     outcome stays what the body produced). An exception escaping a clean-up is dropped: the
//     outcome is the body's.
//   - The returned tidy_handle's dismiss() withdraws the registration (the body cleaned up
//     itself). Dismiss from the same task, before it finishes. Destroying the handle does not
//     withdraw it: the registration belongs to the task.
//   - The registration belongs to the spawned task, not to the coroutine that made it: one made
//     inside a nested task<T> runs when the whole spawned task finishes.
//   - A task abandoned at shutdown (runtime or embedded executor destroyed) does not run its
//     clean-ups: nothing is left to run them on; the callables are destroyed.
//   - Needs a coroutine task spawned on a runtime or an embedded executor (usage_error
//     elsewhere, including a spawned plain function).
#pragma once

#include <type_traits>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/task/task_extras.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

namespace detail {

// One registered clean-up, on the spawned task's tidy stack (owner thread only).
class tidy_entry {
 public:
  virtual ~tidy_entry() = default;
  virtual task<void> start() = 0;  // calls the clean-up callable
  tidy_entry* below = nullptr;     // the next one to run
  bool dismissed = false;
};

template <class F>
class tidy_callable final : public tidy_entry {
 public:
  explicit tidy_callable(F cleanup) : cleanup_(std::move(cleanup)) {}
  task<void> start() override { return cleanup_(); }

 private:
  F cleanup_;  // lives until its task has completed (a coroutine lambda's captures stay valid)
};

// Makes the coroutine that runs `t`'s clean-ups and then finishes `t` (its root is `t`).
std::coroutine_handle<> start_tidy_runner(spawned_task_base& t);

}  // namespace detail

class tidy_handle {
 public:
  explicit tidy_handle(detail::tidy_entry* entry) noexcept : entry_(entry) {}
  // Withdraws the registration: the clean-up will not run.
  void dismiss() noexcept {
    if (entry_ != nullptr) entry_->dismissed = true;
    entry_ = nullptr;
  }

 private:
  detail::tidy_entry* entry_;
};

template <class F>
  requires std::is_same_v<std::invoke_result_t<std::decay_t<F>&>, task<void>>
tidy_handle tidy(F&& cleanup) {
  detail::spawned_task_base* t = detail::spawned_task_base::current();
  if (t == nullptr) throw usage_error("spindle: tidy() outside a spawned coroutine task");
  auto* entry = new detail::tidy_callable<std::decay_t<F>>(std::forward<F>(cleanup));
  try {
    t->push_tidy(entry);
  } catch (...) {
    delete entry;
    throw;
  }
  return tidy_handle(entry);
}

}  // namespace spindle
