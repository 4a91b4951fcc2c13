// join_set's shared core: child nodes, completion order, the cancellable next() wait.
// The design and the locking rules are in include/spindle/task/join_set.hpp.
#include "spindle/task/join_set.hpp"

#include <cassert>

namespace spindle::detail {

// --- completion_awaiter --------------------------------------------------------------------------

bool completion_awaiter::await_suspend(std::coroutine_handle<> h) {
  waiter_ = spawned_task_base::current();
  if (waiter_ == nullptr) throw usage_error("spindle: waiting for a task outside a task");
  waiter_->set_resume_point(
      h, {wait_kind::join, pack_task_id(target_.id().index, target_.id().serial)});
  // Not a cancellable wait: no registration under the task lock, nothing for a canceller to
  // interrupt. The completer wakes us exactly once; false: already complete, do not suspend.
  // registered_ is written first: once registered we may be resumed elsewhere at any moment.
  registered_ = true;
  if (target_.register_joiner(this, &waiter_->host())) return true;
  registered_ = false;
  return cooperative_await::yield_if_exhausted(*waiter_, h);  // already complete (C6)
}

void completion_awaiter::wake_waiter(completion_waker* self) noexcept {
  static_cast<completion_awaiter*>(self)->waiter_->wake();
}

// --- child nodes -----------------------------------------------------------------------------------

join_set_child::join_set_child() noexcept : completion_waker{&join_set_core::on_child_complete} {}

join_set_child_release::~join_set_child_release() { join_set_core::free_child(child); }

join_set_child* join_set_core::allocate_child() { return new join_set_child(); }

void join_set_core::free_child(join_set_child* child) noexcept {
  if (child->task != nullptr) child->task->release();
  delete child;
}

// --- the core ------------------------------------------------------------------------------------

join_set_core* join_set_core::create() { return new join_set_core(); }

void join_set_core::release() noexcept {
  // acq_rel: the last releaser must see every other owner's writes before deleting.
  if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void join_set_core::attach(join_set_child* child, spawned_task_base& task) noexcept {
  child->owner = this;
  child->task = &task;
  // relaxed: the owner already holds a reference, so the core cannot vanish meanwhile.
  references_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    running_.push_back(child);
  }
  // The task is not scheduled yet, so it cannot be complete: the registration always succeeds.
  const bool registered = task.register_joiner(child);
  assert(registered);
  (void)registered;
}

void join_set_core::on_child_complete(completion_waker* self) noexcept {
  // Called once by the completing child (any thread), after its outcome was published (S1).
  auto* child = static_cast<join_set_child*>(self);
  join_set_core* core = child->owner;
  spawned_task_base* to_wake = nullptr;
  bool orphaned;
  {
    std::lock_guard lock(core->mutex_);
    core->running_.remove(child);
    orphaned = core->closed_;
    if (!orphaned) {
      core->completed_.push_back(child);
      if (core->waiter_ != nullptr && core->waiter_->satisfied_by_locked()) {
        // We win the waiter: a canceller's try_cancel will now find it gone and not wake it.
        to_wake = std::exchange(core->waiter_, nullptr)->task_;
      }
    }
  }
  if (orphaned) free_child(child);  // the set is gone: nobody will consume this outcome
  if (to_wake != nullptr) to_wake->wake();
  core->release();  // this child's reference on the core; the node must not be touched after
}

void join_set_core::collect_running_locked(std::vector<spawned_task_base*>& out) {
  for (join_set_child* c = running_.front(); c != nullptr; c = child_list::next(c)) {
    // The node's reference keeps the task alive while we hold the mutex; ours keeps it alive
    // after (the completer may free an orphaned node as soon as we unlock).
    c->task->add_reference();
    out.push_back(c->task);
  }
}

void join_set_core::cancel_running() noexcept {
  std::vector<spawned_task_base*> targets;
  try {
    std::lock_guard lock(mutex_);
    collect_running_locked(targets);
  } catch (...) {
    // Out of memory for the list: cancel under the lock instead (request_cancel takes the
    // child's task lock and maybe its primitive's; none of them ever waits for this mutex).
    std::lock_guard lock(mutex_);
    for (join_set_child* c = running_.front(); c != nullptr; c = child_list::next(c)) c->task->request_cancel();
    for (spawned_task_base* t : targets) t->release();
    return;
  }
  // Outside the mutex: request_cancel takes the child's task lock (and its wait's locks).
  for (spawned_task_base* t : targets) {
    t->request_cancel();
    t->release();
  }
}

void join_set_core::close() noexcept {
  child_list unconsumed;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    unconsumed = std::exchange(completed_, {});
  }
  while (join_set_child* c = unconsumed.pop_front()) free_child(c);
  // Running children now free their own nodes when they complete (orphaned).
  cancel_running();
  release();
}

// --- next() --------------------------------------------------------------------------------------

join_set_core::next_wait::~next_wait() {
  // Destroyed while suspended (the runtime abandoned the owner at shutdown): withdraw.
  if (suspended_) {
    std::lock_guard lock(core_.mutex_);
    if (core_.waiter_ == this) core_.waiter_ = nullptr;
  }
}

bool join_set_core::next_wait::satisfied_by_locked() const noexcept {
  return mode_ == mode::next_child || core_.running_.empty();
}

bool join_set_core::next_wait::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* t = spawned_task_base::current();
  if (t == nullptr) throw usage_error("spindle: awaiting a join_set outside a task");
  const bool cancellable = mode_ == mode::next_child;
  if (!cancellable) core_.cancel_running();
  t->set_resume_point(h, {wait_kind::join_set});
  if (cancellable && !t->begin_registration()) {
    cancelled_ = true;  // cancellation already requested: no suspension, await_resume throws
    return false;
  }
  task_ = t;
  // Once waiter_ is published a completer may wake the task, which may resume on another
  // executor and destroy this awaiter: read members before, write them under the mutex.
  bool busy = false;
  bool suspend = false;
  {
    std::lock_guard lock(core_.mutex_);
    const bool nothing_to_hand_out =
        cancellable ? core_.completed_.empty() : true;
    if (core_.waiter_ != nullptr) {
      busy = true;
    } else if (nothing_to_hand_out && !core_.running_.empty()) {
      suspended_ = true;
      core_.waiter_ = this;  // wait for a completion (next) / the last completion (shutdown)
      suspend = true;
    }
  }
  // Cancellable: the resumed task's clear_wait waits for this unlock, so `this` is still alive
  // here; afterwards only locals are used.
  if (cancellable) t->end_registration(suspend ? this : nullptr);
  if (busy) throw usage_error("spindle: a join_set awaited by two tasks at once");
  // Not suspending: a completed child (or none running) is there; await_resume takes it, after
  // a yield if the cooperative budget is used up (C6). Only this task takes completed children.
  return suspend || cooperative_await::complete_inline(*t, h);
}

join_set_child* join_set_core::next_wait::await_resume() {
  if (suspended_) {
    suspended_ = false;
    if (mode_ == mode::next_child) task_->clear_wait();
  }
  if (cancelled_) throw task_cancelled();
  if (mode_ == mode::all_children) {
    child_list unconsumed;
    {
      std::lock_guard lock(core_.mutex_);
      assert(core_.running_.empty());
      unconsumed = std::exchange(core_.completed_, {});
    }
    while (join_set_child* c = unconsumed.pop_front()) free_child(c);
    return nullptr;
  }
  std::lock_guard lock(core_.mutex_);
  join_set_child* child = core_.completed_.pop_front();
  // Woken by a completion, or did not suspend: a completed child exists unless the set is empty.
  assert(child != nullptr || core_.running_.empty());
  return child;
}

bool join_set_core::next_wait::try_cancel() noexcept {
  // The owner's task lock is held by the canceller (S3); only next_child waits register.
  std::lock_guard lock(core_.mutex_);
  if (core_.waiter_ != this) return false;  // a completer took us and wakes us
  core_.waiter_ = nullptr;
  cancelled_ = true;
  return true;
}

}  // namespace spindle::detail
