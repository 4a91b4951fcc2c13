// The waiter protocol shared by every sync primitive (mutex, semaphore, event, channel, oneshot,
// wait_group). Full discussion: docs/design/sync.md.
//
// Participants
//   - a waiting task: its awaiter (a sync_waiter living in the suspended coroutine frame) links
//     itself into one of the primitive's wait queues while holding its task lock (S3 in
//     task/spawned_task.hpp), then publishes itself as the task's cancellable_wait;
//   - wakers (unlock, release, set, send, receive, close, the primitive's destructor): under the
//     primitive lock they pop waiters, hand each its result (ownership, a permit, an item) and
//     record its outcome; after unlocking they call task->wake() once per popped waiter;
//   - cancellers: with the task lock held they call try_cancel(), which unlinks the waiter under
//     the primitive lock if it is still queued (the canceller then wakes the task).
// Exactly one of waker and canceller wins a queued waiter: whoever changes `outcome` away from
// `queued` under the primitive lock. A waiter is popped only with its result already handed
// over, so a result is never lost to a cancellation and a cancelled waiter never holds one.
//
// Waiter states (`outcome`, written under the primitive lock while linked):
//   none -> queued -> done | closed | cancelled       (suspended path)
//   none -> done | closed | cancelled                 (completed without waiting)
// An await that completes without waiting counts against its task's cooperative budget (C6,
// task/spawned_task.hpp); with the budget used up, the task yields holding the result (a lock,
// a permit, an item): it is then marked suspended though linked nowhere, so a frame destroyed
// before it resumes gives the result back like one woken with it (abandon_wait).
//
// The primitive lock. Each primitive's state and wait queues are guarded by a std::mutex taken
// from a static table of stripes, chosen by the primitive's address (sync_lock_for). The stripe
// outlives the primitive, so a waiter can always lock it and learn from its own `outcome`
// whether it is still linked, even while the primitive is being destroyed: a canceller or a
// destroyed frame never touches freed memory. (A oneshot passes its own lock: its state is
// reference counted and outlives its waiter.) Stripes are shared by unrelated primitives; that
// is harmless because nothing ever holds two primitive locks at once.
//
// Wakers outside the task's host (a plain thread setting an event, sending on a channel, a
// dispatcher submitter). Between releasing the primitive lock and scheduling, a waker reads the
// waiter (in the task's frame) and the task: a runtime shutting down meanwhile would destroy
// both (issue 14, item 2). So under the lock, where the waiter is still alive, wake_list::add
// enters the task's host (task_host::enter, the gate of core/runtime_core.hpp) and leaves after
// the wake: the shutdown's drain waits for it. Refused (the host is draining): the waiter keeps
// its outcome and is not woken; the shutdown destroys its frame, which gives back what it was
// handed (abandon_wait), as for any waiter woken but never resumed.
//
// Lock order: task lock before primitive lock (cancellers). Never a task lock under a primitive
// lock: wakers wake (schedule) only after unlocking, and waking takes no task lock.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>

#include "spindle/core/errors.hpp"
#include "spindle/core/intrusive_list.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/spawned_task.hpp"

namespace spindle {

// channel_closed (a channel or oneshot can no longer deliver) is in core/errors.hpp, with the
// rest of the error vocabulary.

namespace detail {

// The stripe guarding the primitive at `primitive` (see above).
std::mutex& sync_lock_for(const void* primitive) noexcept;

class wait_queue;
class wake_list;

class sync_waiter : public cancellable_wait {
 public:
  enum class outcome : std::uint8_t {
    none,       // not waiting yet
    queued,     // linked in a wait queue
    done,       // the operation completed (the result was handed over)
    closed,     // the primitive was closed (channel, oneshot)
    cancelled,  // the task was cancelled, or the primitive destroyed under the waiter
  };

  sync_waiter() noexcept = default;
  sync_waiter(const sync_waiter&) = delete;
  sync_waiter& operator=(const sync_waiter&) = delete;

  // S3: called by a canceller with the waiting task's lock held.
  bool try_cancel() noexcept override;

 protected:
  // Frame destroyed while suspended (runtime shutdown): unlink if still queued.
  ~sync_waiter() { abandon_wait(); }

  // For await_ready: runs `try_now(to_wake)` under `lock`; true if it completed the operation
  // (it returned something other than outcome::none), and then the outcome is recorded. Counts
  // the await against the task's cooperative budget; with the budget used up it returns false
  // without trying (suspend_on then completes the operation and yields).
  template <class TryNow>
  bool try_complete(std::mutex& lock, TryNow&& try_now);

  // For await_suspend: the cancellable-wait protocol. Either completes the operation now
  // (try_now, under `lock`) and returns false, or yields holding its result if the task's
  // cooperative budget is used up (true), or links this waiter into `queue` and returns true
  // (suspend). A pending cancellation is delivered before anything is taken. Throws usage_error
  // outside a spawned task.
  // `what`: what the task waits on, for the snapshot (task_record.hpp); its number is filled
  // with the waiter's position in `queue` when it queues.
  template <class TryNow>
  bool suspend_on(std::coroutine_handle<> h, std::mutex& lock, wait_queue& queue,
                  const wait_descriptor& what, TryNow&& try_now);

  // For await_resume: unregisters from the task, throws task_cancelled if cancelled, else
  // returns the outcome (done or closed).
  outcome finish_wait();

  // For derived destructors: if suspended and never resumed, unlinks (if queued) and returns
  // the outcome; `done` means a result was handed over that nobody will claim. Idempotent.
  outcome abandon_wait() noexcept;

 private:
  friend class wait_queue;
  friend class wake_list;
  sync_waiter* previous_ = nullptr;  // links, under the primitive lock
  sync_waiter* next_ = nullptr;
  spawned_task_base* task_ = nullptr;
  std::mutex* lock_ = nullptr;   // the lock guarding `queue_`
  wait_queue* queue_ = nullptr;  // where this waiter is (or was) linked
  outcome outcome_ = outcome::none;
  // Own task only: suspended with a registration (or yielding with its result, see
  // suspend_on), not yet resumed.
  bool suspended_ = false;
  bool host_entered_ = false;  // the waker's, between wake_list::add and wake_all
};

// Intrusive FIFO of waiters. Not locked itself: the owner's primitive lock guards it.
class wait_queue {
 public:
  wait_queue() noexcept = default;
  wait_queue(const wait_queue&) = delete;
  wait_queue& operator=(const wait_queue&) = delete;

  bool empty() const noexcept { return waiters_.empty(); }
  std::size_t size() const noexcept { return waiters_.size(); }
  sync_waiter* front() const noexcept { return waiters_.front(); }  // oldest, null if empty

  void push_back(sync_waiter* w) noexcept { waiters_.push_back(w); }
  sync_waiter* pop_front() noexcept { return waiters_.pop_front(); }  // null if empty
  void remove(sync_waiter* w) noexcept { waiters_.remove(w); }
  // Pops every waiter, FIFO, onto `to_wake` with outcome `result`.
  void complete_all(sync_waiter::outcome result, wake_list& to_wake) noexcept;

 private:
  core::intrusive_list<sync_waiter, &sync_waiter::previous_, &sync_waiter::next_> waiters_;
};

// Waiters popped under a primitive lock, to be woken once it is released. Declare it BEFORE the
// lock guard: it is destroyed after the guard, so its destructor wakes with the lock released.
class wake_list {
 public:
  wake_list() noexcept = default;
  wake_list(const wake_list&) = delete;
  wake_list& operator=(const wake_list&) = delete;
  ~wake_list() { wake_all(); }

  // Under the lock: `w` was popped and handed its result; records `result` as its outcome.
  void add(sync_waiter* w, sync_waiter::outcome result) noexcept;
  // Without the lock: wakes each waiter's task once, in FIFO order.
  void wake_all() noexcept;

 private:
  sync_waiter* head_ = nullptr;
  sync_waiter* tail_ = nullptr;
};

// --- sync_waiter templates ------------------------------------------------------------------

template <class TryNow>
bool sync_waiter::try_complete(std::mutex& lock, TryNow&& try_now) {
  // The budget is used up: no fast path; suspend_on completes the operation and yields.
  if (!cooperative_await::may_complete_inline()) return false;
  wake_list to_wake;  // before the guard: wakes after unlocking
  std::lock_guard guard(lock);
  const outcome result = try_now(to_wake);
  if (result == outcome::none) return false;
  outcome_ = result;
  return true;
}

template <class TryNow>
bool sync_waiter::suspend_on(std::coroutine_handle<> h, std::mutex& lock, wait_queue& queue,
                             const wait_descriptor& what, TryNow&& try_now) {
  spawned_task_base* self = spawned_task_base::current();
  if (self == nullptr) throw usage_error("spindle: awaiting a sync primitive outside a task");
  self->set_resume_point(h, what);
  if (!self->begin_registration()) {
    self->continue_running();
    outcome_ = outcome::cancelled;  // cancelled before waiting: do not suspend
    return false;
  }
  bool completed = false;
  try {
    wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(lock);
    const outcome result = try_now(to_wake);
    if (result != outcome::none) {
      outcome_ = result;
      completed = true;
    } else {
      // Everything the resumed task reads is written before the waiter becomes visible: a
      // waker may pop it and wake the task as soon as the lock is released.
      task_ = self;
      lock_ = &lock;
      queue_ = &queue;
      suspended_ = true;
      outcome_ = outcome::queued;
      queue.push_back(this);
      self->set_wait_position(queue.size());  // before the lock's release: no waker yet
    }
  } catch (...) {
    self->continue_running();
    self->end_registration(nullptr);  // try_now threw (a payload's move): nothing is linked
    throw;
  }
  if (!completed) {
    // The task may already be woken and running elsewhere; it blocks in finish_wait()'s
    // clear_wait() until end_registration releases the task lock. Do not touch *this after it.
    self->end_registration(this);
    return true;
  }
  self->end_registration(nullptr);
  // Completed at once. With the task's budget used up it yields holding the result (C6, see
  // cooperative_await in task/spawned_task.hpp); meanwhile it counts as suspended, though linked
  // nowhere, so that a frame destroyed before it resumes learns from abandon_wait() that a
  // result was handed over. Set first: once yielded the task may resume on another thread.
  task_ = self;
  lock_ = &lock;
  queue_ = &queue;
  suspended_ = true;
  if (cooperative_await::yield_if_exhausted(*self, h)) return true;
  suspended_ = false;
  return false;
}

}  // namespace detail
}  // namespace spindle
