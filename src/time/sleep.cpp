// Sleep awaiter: the cancellable timer wait described in include/spindle/time/sleep.hpp.
#include "spindle/time/sleep.hpp"

#include "spindle/core/errors.hpp"
#include "spindle/task/runtime.hpp"

namespace spindle {

clock_time now() {
  return detail::current_host_or_throw("spindle::now() called outside a task or runtime worker")
      .clock()
      .now();
}

namespace detail {

clock_time saturating_add(clock_time base, clock_duration duration) noexcept {
  const clock_duration since_epoch = base.time_since_epoch();
  if (duration > clock_duration::zero() && since_epoch > clock_duration::max() - duration) {
    return clock_time::max();
  }
  if (duration < clock_duration::zero() && since_epoch < clock_duration::min() - duration) {
    return clock_time::min();
  }
  return base + duration;
}

timer_wait::entry_type::entry_type(timer_wait& waiter) noexcept
    : core::timer_entry(&timer_wait::on_fire), owner(waiter) {}

timer_wait::timer_wait(clock_time deadline) noexcept : deadline_(deadline), entry_(*this) {}

timer_wait::~timer_wait() {
  // Destroyed while suspended (the runtime abandoned the task): the entry may still be linked.
  if (armed_) service_->disarm(entry_);
}

bool timer_wait::await_ready() {
  spawned_task_base* t = spawned_task_base::current();
  if (t == nullptr || t->host().timers_here() == nullptr) {
    throw usage_error("spindle: sleeping needs a task running on a runtime or embedded executor");
  }
  if (deadline_ > t->host().clock().now()) return false;
  passed_ = true;
  // Passed: completes at once, unless the cooperative budget is used up (await_suspend yields).
  return cooperative_await::may_complete_inline();
}

bool timer_wait::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* t = spawned_task_base::current();
  t->set_resume_point(
      h, {wait_kind::sleep, 0,
          std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            deadline_.time_since_epoch())
                            .count())});
  if (!t->begin_registration()) {
    cancelled_ = true;  // cancellation already requested: do not suspend, await_resume throws
    return false;
  }
  if (passed_) {
    // The deadline has passed but the budget is used up: yield instead of arming (C6).
    t->end_registration(nullptr);
    return cooperative_await::yield_if_exhausted(*t, h);
  }
  // Everything the waker and the resumed task read is written before the entry is armed.
  task_ = t;
  service_ = t->host().timers_here();
  armed_ = true;
  try {
    service_->arm(entry_, deadline_);
  } catch (...) {
    armed_ = false;
    task_ = nullptr;
    t->end_registration(nullptr);
    throw;
  }
  // Only this executor fires its timers, and it is busy here: the entry cannot fire before the
  // registration is complete. (Even if it could, the resumed task's clear_wait would wait for
  // the task lock released by end_registration.)
  t->end_registration(this);
  return true;
}

void timer_wait::await_resume() {
  if (task_ != nullptr) {
    // Suspended and woken (fired or cancelled): the entry is unlinked either way.
    armed_ = false;
    task_->clear_wait();
    task_ = nullptr;
  } else if (!cancelled_) {
    // Completed without suspending (deadline already passed): still a cancellation point.
    // relaxed hint is enough: the flag, once set, stays set; a cancel racing with this check is
    // seen at the next suspension point.
    if (spawned_task_base* t = spawned_task_base::current(); t->cancellation_requested()) {
      cancelled_ = true;
    }
  }
  if (cancelled_) {
    cancelled_ = false;  // the awaiter may be awaited again (it then completes at once)
    throw task_cancelled();
  }
}

bool timer_wait::try_cancel() noexcept {
  // Task lock held by the canceller (S3): we are registered, so service_ is set.
  if (!service_->disarm(entry_)) return false;  // fired: the fire callback woke (wakes) the task
  cancelled_ = true;
  return true;
}

void timer_wait::on_fire(core::timer_entry* entry) noexcept {
  // Owner executor, service lock held. Read everything needed before waking: once woken the
  // task may resume elsewhere and destroy the awaiter.
  spawned_task_base* t = static_cast<entry_type*>(entry)->owner.task_;
  t->wake();
}

}  // namespace detail
}  // namespace spindle
