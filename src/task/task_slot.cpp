// task_slot: the slot's queue and the turn await. The design is in
// include/spindle/task/task_slot.hpp.
#include "spindle/task/task_slot.hpp"

namespace spindle {
namespace detail {

void slot_queue::push(spawned_task_base* newest) noexcept {
  spawned_task_base* holder = nullptr;
  spawned_task_base* replaced = nullptr;
  bool replaced_was_waiting = false;
  task_host::entry replaced_entry = task_host::entry::own_thread;
  {
    std::lock_guard guard(mutex_);
    // References: once we unlock, either may complete and leave the queue at any moment.
    if (holder_ != nullptr) {
      holder = holder_;
      holder->add_reference();
    }
    if (queued_ != nullptr) {
      replaced = queued_;
      replaced->add_reference();
      if (turn_awaiter* waiting = std::exchange(waiting_, nullptr)) {
        // We take it out, so we wake it: from a thread outside its host that wake must not meet
        // the host's shutdown (the gate, core/outside_gate.hpp). Entered here, where the waiting
        // task is alive; refused: the shutdown ends it, we do not wake it.
        replaced_entry = replaced->host().enter();
        waiting->verdict_ = turn_awaiter::verdict::replaced;
        replaced_was_waiting = replaced_entry != task_host::entry::refused;
      }
    }
    queued_ = newest;
  }
  // Outside the lock: a task's lock comes before the queue's (try_cancel takes the latter).
  if (holder != nullptr) {
    holder->request_cancel();  // interrupts its body's wait; its clean-ups still run
    holder->release();
  }
  if (replaced != nullptr) {
    // Never ran its body: cancelled, it ends at once (before it starts, or in its turn await).
    replaced->request_cancel();  // finds the await withdrawn already: no second wake
    task_host& host = replaced->host();
    if (replaced_was_waiting) replaced->wake();
    if (replaced_entry == task_host::entry::entered) host.leave();  // alive: its drain waits
    replaced->release();
  }
}

void slot_queue::occupant_completed(spawned_task_base* occupant) noexcept {
  spawned_task_base* given = nullptr;
  {
    std::lock_guard guard(mutex_);
    if (queued_ == occupant) {
      // Ended without the turn (cancelled through its handle). Not waiting: a task completes
      // only once it left its await (an abandoned one withdrew in the awaiter's destructor).
      queued_ = nullptr;
    } else if (holder_ == occupant) {
      holder_ = nullptr;
      if (turn_awaiter* waiting = std::exchange(waiting_, nullptr)) {
        waiting->verdict_ = turn_awaiter::verdict::given;
        holder_ = given = std::exchange(queued_, nullptr);
      }
      // Else the queued occupant (if any) takes the free turn when it reaches its await.
    }
    // Else it was replaced before it got the turn: no longer in the queue.
  }
  // Outside the lock (waking is scheduling). Alive: suspended, and no one else may wake it.
  if (given != nullptr) given->wake();
}

std::size_t slot_queue::occupants() const {
  std::lock_guard guard(mutex_);
  return std::size_t(holder_ != nullptr) + std::size_t(queued_ != nullptr);
}

// --- the turn await ----------------------------------------------------------------------------

bool slot_queue::turn_awaiter::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* t = spawned_task_base::current();
  if (t == nullptr) throw usage_error("spindle: a slot's occupant must be a spawned task");
  t->set_resume_point(h, {wait_kind::slot});
  if (!t->begin_registration()) {
    verdict_ = verdict::cancelled;  // cancelled already: do not wait, await_resume throws
    return false;
  }
  verdict decided = verdict::none;  // none: we wait (read after the unlock: no shared field)
  {
    std::lock_guard guard(queue_.mutex_);
    if (queue_.queued_ != t) {
      decided = verdict::replaced;  // a newer occupant came before we got here
    } else if (queue_.holder_ == nullptr) {
      queue_.holder_ = t;  // the turn is free: ours
      queue_.queued_ = nullptr;
      decided = verdict::given;
    } else {
      task_ = t;  // before anyone can take us out: under the queue lock
      queue_.waiting_ = this;
    }
  }
  if (decided != verdict::none) {
    verdict_ = decided;
    t->end_registration(nullptr);
    if (decided != verdict::given) return false;  // await_resume throws
    return cooperative_await::complete_inline(*t, h);  // the turn was free (C6: may yield)
  }
  // Whoever takes us out wakes us; the resumed task blocks in clear_wait (await_resume) until
  // this releases the task lock, so nothing here races with the rest of the coroutine.
  t->end_registration(this);
  return true;
}

void slot_queue::turn_awaiter::await_resume() {
  if (task_ != nullptr) {
    task_->clear_wait();  // the task lock orders whoever took us out (and verdict_) before us
    task_ = nullptr;
  }
  if (verdict_ != verdict::given) throw task_cancelled();
}

bool slot_queue::turn_awaiter::try_cancel() noexcept {
  // The canceller holds the task lock (S3): we are registered, or were just taken out.
  std::lock_guard guard(queue_.mutex_);
  if (queue_.waiting_ != this) return false;  // given or replaced: that one wakes us
  queue_.waiting_ = nullptr;  // still queued_: its completion hook clears that
  verdict_ = verdict::cancelled;
  return true;
}

slot_queue::turn_awaiter::~turn_awaiter() {
  // Destroyed while registered: the task was abandoned at shutdown; nobody may wake it now.
  if (task_ == nullptr) return;
  std::lock_guard guard(queue_.mutex_);
  if (queue_.waiting_ == this) queue_.waiting_ = nullptr;
}

}  // namespace detail
}  // namespace spindle
