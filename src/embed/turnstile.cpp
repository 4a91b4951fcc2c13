// turnstile's block: the state machine in include/spindle/embed/turnstile.hpp.
#include "spindle/embed/turnstile.hpp"

namespace spindle::embed::detail {

using ::spindle::detail::spawned_task_base;

void turnstile_block::wake() noexcept {
  // relaxed: only the CAS expectation; each CAS below carries the ordering.
  std::uint32_t state = state_.load(std::memory_order_relaxed);
  for (;;) {
    switch (state) {
      case done:
        return;
      case polling:
      case notified:
        // release: what this waker published before calling wake() reaches the next poll, whose
        // begin_poll exchange reads this value or a later one (acquire).
        if (state_.compare_exchange_weak(state, notified, std::memory_order_release,
                                         std::memory_order_relaxed)) {
          return;
        }
        break;
      case blocked:
        // acq_rel: acquire pairs with the task's release CAS to `blocked` (task_ is readable);
        // release is carried on to the woken task by the scheduler's queue anyway.
        if (state_.compare_exchange_weak(state, polling, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
          task_->wake();  // exactly once: we moved the block out of `blocked`
          return;
        }
        break;
      default:
        return;
    }
  }
}

bool turnstile_block::wait_awaiter::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* t = spawned_task_base::current();
  if (t == nullptr) throw usage_error("spindle: a turnstile needs a spawned task");
  t->set_resume_point(h);
  if (!t->begin_registration()) {
    block_.cancelled_ = true;  // cancellation already requested: do not suspend, throw
    return false;
  }
  block_.task_ = t;
  suspended_ = true;  // before the CAS: once blocked, a waker may resume us elsewhere at once
  std::uint32_t expected = polling;
  // release: task_ (and the registration) are written before a waker can see `blocked`.
  // relaxed on failure: the block was notified; the next begin_poll acquires.
  if (!block_.state_.compare_exchange_strong(expected, blocked, std::memory_order_release,
                                             std::memory_order_relaxed)) {
    suspended_ = false;
    t->end_registration(nullptr);
    return false;  // notified while polling: poll again
  }
  t->end_registration(&block_);
  return true;
}

void turnstile_block::wait_awaiter::await_resume() {
  if (suspended_) {
    suspended_ = false;
    block_.task_->clear_wait();  // the task lock orders the canceller's cancelled_ before us
  }
  if (block_.cancelled_) {
    block_.cancelled_ = false;
    throw task_cancelled();
  }
}

bool turnstile_block::try_cancel() noexcept {
  // The canceller holds the task lock (S3). acq_rel as in wake(); relaxed on failure: a waker
  // won and wakes the task itself.
  std::uint32_t expected = blocked;
  if (!state_.compare_exchange_strong(expected, polling, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
    return false;
  }
  cancelled_ = true;
  return true;
}

}  // namespace spindle::embed::detail
