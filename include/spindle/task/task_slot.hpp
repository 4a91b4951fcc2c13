// Slots (SPEC T5; seed 004 "Signals, Destructors and Slots"): at most one running occupant.
//
//   spindle::task_slot search("search");
//   // each keystroke: the new search replaces the one still running
//   auto results = search.spawn(run_search(query));   // inside a task, or search.spawn(rt, ...)
//
// Submitting to a slot cancels every earlier occupant, and the new one starts only once they all
// have completed, tidy destructors (task/tidy.hpp) included: two occupants never run at once,
// and a replaced one still cleans up before its successor begins.
//
// Participants and what they share
//   - submitters (any thread): under the slot's mutex, take the turn of the newest occupant as
//     the new one's predecessor, spawn the new one, make it the newest, cancel the earlier ones;
//   - occupants: each waits until its predecessor's turn has ended (not a cancellation point: a
//     replaced occupant still waits), then runs its body unless it was replaced meanwhile.
// A turn ends when BOTH its occupant's spawned task has completed (a completion hook, after the
// tidy destructors) AND the turn before it has ended. The second condition matters: an occupant
// replaced before it first ran completes at once without running, and must not let its
// successor start while its own predecessor is still cleaning up. Ending a turn wakes the next
// occupant and, if that one has completed already, ends its turn too, down the chain.
// Each turn is a small object with its own mutex: flags, the occupant waiting for the previous
// turn, and the next turn. Locks are taken one turn at a time, and waking happens outside them.
//
// The queue of the seed is implicit: each occupant waits on exactly its predecessor, and only
// the head of the chain is runnable. The slot holds references to its live occupants (to cancel
// them); destroying the slot drops them and cancels nothing: occupants run on, detached.
#pragma once

#include <coroutine>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"
#include "spindle/task/task_extras.hpp"

namespace spindle {

namespace detail {

// The turn of one occupant (see above).
class slot_turn : public std::enable_shared_from_this<slot_turn> {
 public:
  // The submitter, under the slot's mutex, before the new occupant is scheduled: links `next`
  // after this turn (or marks its predecessor ended if this one has ended already).
  void link_next(const std::shared_ptr<slot_turn>& next) noexcept;
  // The first turn of a slot has no predecessor.
  void mark_predecessor_ended() noexcept { predecessor_ended_ = true; }
  // The occupant's completion hook.
  void occupant_completed() noexcept;

  // Waits until the previous turn has ended; not a cancellation point. Destroyed while
  // suspended (shutdown): withdraws.
  class awaiter {
   public:
    explicit awaiter(slot_turn& turn) noexcept : turn_(turn) {}
    awaiter(const awaiter&) = delete;
    awaiter& operator=(const awaiter&) = delete;
    ~awaiter();
    bool await_ready() noexcept;
    bool await_suspend(std::coroutine_handle<> h);
    void await_resume() noexcept { waiting_ = false; }

   private:
    slot_turn& turn_;
    bool waiting_ = false;  // owner-side: registered and not yet resumed
  };

 private:
  // Ends `first` (its occupant completed, its predecessor ended) and whatever follows it that
  // was only waiting for that.
  static void end_turns_from(std::shared_ptr<slot_turn> first) noexcept;

  std::mutex mutex_;
  bool predecessor_ended_ = false;       // guarded by mutex_
  bool occupant_done_ = false;           // guarded by mutex_
  bool ended_ = false;                   // guarded by mutex_: both of the above
  spawned_task_base* waiter_ = nullptr;  // guarded by mutex_: this turn's occupant, waiting
  std::shared_ptr<slot_turn> next_;      // guarded by mutex_; dropped when this turn ends
};

// Tells a turn its occupant completed.
class slot_turn_hook final : public completion_hook {
 public:
  explicit slot_turn_hook(std::shared_ptr<slot_turn> turn) noexcept : turn_(std::move(turn)) {}
  void on_complete() noexcept override { turn_->occupant_completed(); }

 private:
  std::shared_ptr<slot_turn> turn_;
};

template <class T>
task<T> occupy_slot(std::shared_ptr<slot_turn> turn, task<T> body) {
  co_await slot_turn::awaiter(*turn);
  // Replaced while waiting: the body never runs (the await above was not a cancellation point).
  if (spawned_task_base::current()->cancellation_requested()) throw task_cancelled();
  co_return co_await std::move(body);
}

}  // namespace detail

class task_slot {
 public:
  explicit task_slot(std::string name = {}) : name_(std::move(name)) {}
  ~task_slot();
  task_slot(const task_slot&) = delete;
  task_slot& operator=(const task_slot&) = delete;

  // The new occupant runs on what runs the calling task (or the calling worker's runtime).
  template <class T>
  join_handle<T> spawn(task<T> body) {
    return submit(detail::current_host_or_throw(), std::move(body));
  }
  // The new occupant runs on `rt` (any thread).
  template <class T>
  join_handle<T> spawn(runtime& rt, task<T> body) {
    return submit(detail::state_of(rt), std::move(body));
  }

  const std::string& name() const noexcept { return name_; }
  // Occupants not yet completed (the running one and those finishing or waiting).
  std::size_t occupants() const;

  // On any host (embed::embedded_executor::spawn_in_slot uses it).
  template <class T>
  join_handle<T> submit(detail::task_host& host, task<T> body);

 private:
  // Under mutex_: drops completed occupants, cancels the rest (they are all earlier ones).
  void replace_occupants_locked(detail::spawned_task_base* newest);

  std::string name_;
  mutable std::mutex mutex_;
  std::shared_ptr<detail::slot_turn> newest_turn_;       // guarded by mutex_
  std::vector<detail::spawned_task_base*> occupants_;    // guarded by mutex_; one reference each
};

template <class T>
join_handle<T> task_slot::submit(detail::task_host& host, task<T> body) {
  if (!body.valid()) throw usage_error("spindle: spawn of an empty task");
  std::lock_guard guard(mutex_);
  auto turn = std::make_shared<detail::slot_turn>();
  occupants_.reserve(occupants_.size() + 1);  // nothing below may fail once the task exists
  auto* spawned = detail::prepare_spawn(host, detail::occupy_slot(turn, std::move(body)));
  join_handle<T> handle(spawned);
  try {
    auto hook = std::make_unique<detail::slot_turn_hook>(turn);
    spawned->add_completion_hook(hook.get());
    hook.release();
  } catch (...) {
    detail::cancel_prepared(host, spawned);
    throw;
  }
  if (newest_turn_) {
    newest_turn_->link_next(turn);
  } else {
    turn->mark_predecessor_ended();
  }
  newest_turn_ = std::move(turn);
  replace_occupants_locked(spawned);
  detail::schedule_prepared(host, spawned);
  return handle;
}

}  // namespace spindle
