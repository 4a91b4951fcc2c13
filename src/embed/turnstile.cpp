// turnstile's block: the awaiter and the canceller's side. The state machine is
// include/spindle/embed/turnstile_state.hpp, the design include/spindle/embed/turnstile.hpp.
#include "spindle/embed/turnstile.hpp"

namespace spindle::embed::detail {

using ::spindle::detail::spawned_task_base;

bool turnstile_block::wait_awaiter::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* t = spawned_task_base::current();
  if (t == nullptr) throw usage_error("spindle: a turnstile needs a spawned task");
  t->set_resume_point(h, {wait_kind::turnstile});
  if (!t->begin_registration()) {
    block_.cancelled_ = true;  // cancellation already requested: do not suspend, throw
    return false;
  }
  block_.task_ = t;
  suspended_ = true;  // before blocking: once blocked, a waker may resume us elsewhere at once
  if (!block_.state_.try_block()) {
    suspended_ = false;
    t->end_registration(nullptr);
    // Notified while polling: poll again, after a yield if the cooperative budget is used up
    // (C6). Wakes meanwhile only leave the block notified: the task is not blocked.
    return ::spindle::detail::cooperative_await::complete_inline(*t, h);
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
  // The canceller holds the task lock (S3).
  if (!state_.try_cancel()) return false;  // a waker won: it wakes the task
  cancelled_ = true;
  return true;
}

}  // namespace spindle::embed::detail
