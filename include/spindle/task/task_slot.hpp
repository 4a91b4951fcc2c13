// Slots (SPEC T5; seed 004 "Signals, Destructors and Slots"): at most one running occupant.
//
//   spindle::task_slot search("search");
//   // each keystroke: the new search replaces the one still running
//   auto results = search.spawn(run_search(query));   // inside a task, or search.spawn(rt, ...)
//
// Submitting to a slot cancels every earlier occupant. The new one starts only once the occupant
// holding the slot's turn has completed, tidy destructors (task/tidy.hpp) included: two occupants
// never run at once, and a replaced one still cleans up before its successor begins. An occupant
// replaced before it got the turn never runs its body: it ends at once, cancelled, and its body
// (frame and captured state) is freed then, not with its handle.
//
// The queue of the seed, per slot (slot_queue below, shared by the slot and its occupants):
//   holder  - the occupant holding the turn: running its body, or cleaning up after it;
//   queued  - the newest occupant, not holding the turn yet (at most one: a newer push
//             replaces it); `waiting` is its turn await while it is suspended in it.
// Every other occupant was replaced and never gets the turn, so the queue holds two tasks at
// most, whatever the number of pushes, and a push is O(1): it cancels the holder and the queued
// one, wakes the latter if it waits (it ends at once), and makes the new occupant the queued one.
//
// Participants and what they share (all under the queue's mutex; waking happens after it)
//   - submitters (any thread): push, as above. The cancellations run after the unlock (a
//     task's lock comes before the queue's), on references taken under it;
//   - occupants, in their turn await (a cancellation point): the queued one takes the turn if
//     none holds it, else waits; one that is no longer the queued one was replaced and ends;
//   - completion hooks (after the tidy destructors): the holder gives the turn to the waiting
//     queued occupant (wakes it) or leaves it free for the queued one to take on arrival; an
//     occupant that ended without the turn only leaves `queued`;
//   - cancellers of a waiting occupant (its handle): withdraw it (cancellable_wait).
// Whoever takes a waiting await out of `waiting` (giver, replacer, canceller) writes its
// verdict and wakes it, exactly once. Pointers in the queue name live tasks: a task leaves the
// queue in its completion hook, before its running reference is dropped (S4).
//
// Lifetime: the slot and each occupant (its hook and its frame) share the queue; destroying the
// slot cancels nothing: occupants run on, detached, the queued one still after the holder's
// clean-ups. At shutdown the host abandons every occupant: a waiting one withdraws its await,
// each completion hook leaves the queue, and every handle reports cancelled.
#pragma once

#include <coroutine>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"
#include "spindle/task/task_extras.hpp"

namespace spindle {

namespace detail {

// The queue of one slot (see above).
class slot_queue {
 public:
  class turn_awaiter;

  // The submitter, before `newest` (prepared, its completion hook added) is scheduled: cancels
  // the holder and the queued occupant, makes `newest` the queued one. O(1).
  void push(spawned_task_base* newest) noexcept;
  // `occupant`'s completion hook: leaves the queue, giving the turn on if it held it.
  void occupant_completed(spawned_task_base* occupant) noexcept;
  // The holder and the queued occupant, those present.
  std::size_t occupants() const;

 private:
  mutable std::mutex mutex_;
  spawned_task_base* holder_ = nullptr;  // guarded by mutex_: holds the turn
  spawned_task_base* queued_ = nullptr;  // guarded by mutex_: the newest, without the turn
  turn_awaiter* waiting_ = nullptr;      // guarded by mutex_: queued_'s await, suspended
};

// The queued occupant's wait for the turn: a cancellation point. Throws task_cancelled unless
// the turn was given (the occupant was replaced, or cancelled, while or before it waited).
class slot_queue::turn_awaiter final : public cancellable_wait {
 public:
  explicit turn_awaiter(slot_queue& queue) noexcept : queue_(queue) {}
  turn_awaiter(const turn_awaiter&) = delete;
  turn_awaiter& operator=(const turn_awaiter&) = delete;
  ~turn_awaiter();
  bool await_ready() const noexcept { return false; }  // the queue decides, under its lock
  bool await_suspend(std::coroutine_handle<> h);
  void await_resume();
  bool try_cancel() noexcept override;

 private:
  friend class slot_queue;
  enum class verdict : unsigned char { none, given, replaced, cancelled };
  slot_queue& queue_;
  spawned_task_base* task_ = nullptr;  // set while registered in `waiting_` (owner-side)
  verdict verdict_ = verdict::none;    // written under the queue lock by who takes us out
};

// Tells the queue its occupant completed.
class slot_occupant_hook final : public completion_hook {
 public:
  slot_occupant_hook(std::shared_ptr<slot_queue> queue, spawned_task_base* occupant) noexcept
      : queue_(std::move(queue)), occupant_(occupant) {}
  void on_complete() noexcept override { queue_->occupant_completed(occupant_); }

 private:
  std::shared_ptr<slot_queue> queue_;
  spawned_task_base* occupant_;
};

template <class T>
task<T> occupy_slot(std::shared_ptr<slot_queue> queue, task<T> body) {
  // Locals, unlike parameters, end with the coroutine, not with the task (which the handle
  // keeps): a replaced occupant's body and captured state go as soon as it ends.
  task<T> own_body = std::move(body);
  const std::shared_ptr<slot_queue> own_queue = std::move(queue);
  co_await slot_queue::turn_awaiter(*own_queue);
  // Given the turn, then replaced before it resumed: the body never runs; the turn passes on
  // when this task completes.
  if (spawned_task_base::current()->cancellation_requested()) throw task_cancelled();
  co_return co_await std::move(own_body);
}

}  // namespace detail

class task_slot {
 public:
  explicit task_slot(std::string name = {})
      : name_(std::move(name)), queue_(std::make_shared<detail::slot_queue>()) {}
  // Cancels nothing: occupants run on (they share the queue).
  ~task_slot() = default;
  task_slot(const task_slot&) = delete;
  task_slot& operator=(const task_slot&) = delete;

  // The new occupant runs on what runs the calling task (or the calling worker's runtime).
  template <class T>
  join_handle<T> spawn(task<T> body, spawn_location where = spawn_location::current()) {
    return submit(detail::current_host_or_throw(), std::move(body), where);
  }
  // The new occupant runs on `rt` (any thread).
  template <class T>
  join_handle<T> spawn(runtime& rt, task<T> body, spawn_location where = spawn_location::current()) {
    return submit(detail::state_of(rt), std::move(body), where);
  }

  const std::string& name() const noexcept { return name_; }
  // Occupants that may still run: the one holding the turn (running or cleaning up) and the
  // newest, queued for it. Replaced ones that never held the turn are not counted (they end at
  // once, without running).
  std::size_t occupants() const { return queue_->occupants(); }

  // On any host (embed::embedded_executor::spawn_in_slot uses it).
  template <class T>
  join_handle<T> submit(detail::task_host& host, task<T> body,
                        spawn_location where = spawn_location::current());

 private:
  std::string name_;
  std::shared_ptr<detail::slot_queue> queue_;  // shared with the occupants
};

template <class T>
join_handle<T> task_slot::submit(detail::task_host& host, task<T> body,
                                 spawn_location where) {
  if (!body.valid()) throw usage_error("spindle: spawn of an empty task");
  // As any spawn from a thread that may be outside the host (task/runtime.hpp, prepare_spawn):
  // held until the occupant is scheduled, so a shutdown's drain either waits or refuses us.
  detail::host_entry entry(host);
  if (entry.refused()) throw runtime_stopped();
  auto* spawned = detail::prepare_spawn(host, detail::occupy_slot(queue_, std::move(body)), where);
  join_handle<T> handle(spawned);
  try {
    auto hook = std::make_unique<detail::slot_occupant_hook>(queue_, spawned);
    spawned->add_completion_hook(hook.get());
    hook.release();
  } catch (...) {
    detail::cancel_prepared(host, spawned);  // not in the queue: it ends without touching it
    throw;
  }
  queue_->push(spawned);
  detail::schedule_prepared(host, spawned);
  return handle;
}

}  // namespace spindle
