// The I/O awaiter: protocol in include/spindle/io/io_wait.hpp.
#include "spindle/io/io_wait.hpp"

#include <unistd.h>

#include <cerrno>

#include "spindle/core/errors.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/task/runtime.hpp"

namespace spindle::io {

core::reactor& current_reactor() {
  core::executor* e = core::executor::current();
  if (e == nullptr) throw usage_error("spindle: I/O needs a task running on a runtime worker");
  return e->io();
}

clock_time current_time() {
  core::executor* e = core::executor::current();
  if (e == nullptr) throw usage_error("spindle: I/O needs a task running on a runtime worker");
  return e->timers().clock().now();
}

namespace detail {

using ::spindle::detail::spawned_task_base;

const core::runnable_vtable io_wait::expiry_vtable{&io_wait::run_expiry, &io_wait::drop_expiry};

io_wait::deadline_part::timer_type::timer_type(io_wait& waiter) noexcept
    : core::timer_entry(&io_wait::on_deadline), owner(waiter) {}

io_wait::deadline_part::expiry_request::expiry_request(io_wait& waiter) noexcept
    : runnable(&expiry_vtable), owner(waiter) {}

const core::runnable_vtable io_wait::cancel_vtable{&io_wait::run_cancel, &io_wait::drop_cancel};

io_wait::cancel_request::cancel_request(io_wait& waiter) noexcept
    : runnable(&cancel_vtable), owner(waiter) {}

io_wait::io_wait(core::io_operation& operation) noexcept : operation_(operation), cancel_(*this) {}

io_wait::~io_wait() {
  // task_ is set while registered and cleared by await_resume: completed and still set means the
  // result was never handed to the task. Only an accept's result is a resource (a descriptor).
  if (completed_ && task_ != nullptr && operation_.opcode == core::io_opcode::accept &&
      operation_.result >= 0) {
    ::close(operation_.result);
  }
}

namespace {
// The executor of the calling worker, which must be running a task of that executor's runtime
// (an embedded executor has no reactor): usage_error otherwise.
core::executor& worker_of_current_task() {
  spawned_task_base* t = spawned_task_base::current();
  core::executor* e = core::executor::current();
  if (t == nullptr || e == nullptr ||
      static_cast<::spindle::detail::task_host*>(
          static_cast<::spindle::detail::runtime_state*>(e->core().layer_state())) != &t->host()) {
    throw usage_error("spindle: I/O needs a task running on a runtime worker");
  }
  return *e;
}
}  // namespace

bool io_wait::await_ready() {
  (void)worker_of_current_task();
  return false;
}

bool may_complete_without_reactor() {
  if (worker_of_current_task().io().has_test_hooks()) return false;
  return ::spindle::detail::cooperative_await::may_complete_inline();
}

bool io_wait::await_suspend(std::coroutine_handle<> h) noexcept {
  spawned_task_base* t = spawned_task_base::current();
  t->set_resume_point(h, {wait_kind::io, std::uint64_t(std::int64_t(operation_.fd)),
                          std::uint64_t(operation_.opcode)});
  if (!t->begin_registration()) {
    cancelled_before_start_ = true;  // cancellation already requested: never submitted
    return false;
  }
  core::executor& here = *core::executor::current();
  task_ = t;
  executor_index_ = here.index();
  reactor_ = &here.io();
  core_ = &here.core();
  operation_.on_complete = &io_wait::on_complete;
  operation_.context = this;
  if (deadline_ != nullptr) {
    // Nothing has been published yet (the operation is not submitted, the timer not armed):
    // relaxed is enough, the arm's lock and the submission order everything after it.
    pending_.store(2, std::memory_order_relaxed);
    deadline_->service = &here.timers();
    // A fire before end_registration only posts the expiry request to this executor, which is
    // busy here: it runs after the registration is complete. (arm only fails if the mutex
    // does, which terminates, as for any noexcept path.)
    deadline_->service->arm(deadline_->timer, deadline_->when);
  }
  reactor_->submit(&operation_);
  // The completion runs on this thread, which is busy here: it cannot wake the task before the
  // registration is published.
  t->end_registration(this);
  return true;
}

std::int32_t io_wait::await_resume() {
  if (cancelled_before_start_) {
    cancelled_before_start_ = false;
    throw task_cancelled();
  }
  task_->clear_wait();
  task_ = nullptr;
  if (cancel_posted_ && operation_.result == -ECANCELED) throw task_cancelled();
  if (deadline_ != nullptr && deadline_->expired && operation_.result == -ECANCELED) {
    return deadline_expired;
  }
  return operation_.result;
}

bool io_wait::try_cancel() noexcept {
  // Task lock held (S3): we are registered, so reactor_, core_ and executor_index_ are set.
  if (cancel_posted_) return false;
  // The completion may already have brought `pending_` to 0 and woken the task, which is then
  // waiting for this lock in clear_wait() and will destroy this awaiter right after: posting a
  // request now would run on a dead awaiter and wake the task a second time. So join only while
  // the completion is still outstanding (pending_ > 0).
  // relaxed: the inbox push (release) publishes this increment to the owner thread; RMWs on
  // pending_ are totally ordered, so it is either before the completion's decrement or sees 0.
  std::uint32_t pending = pending_.load(std::memory_order_relaxed);
  do {
    if (pending == 0) return false;  // completed: the completion wakes (woke) the task
  } while (!pending_.compare_exchange_weak(pending, pending + 1, std::memory_order_relaxed));
  cancel_posted_ = true;
  core_->schedule_on(executor_index_, &cancel_);
  return false;  // the completion (and the request) wake the task
}

void io_wait::on_complete(core::io_operation* operation) noexcept {
  auto* waiter = static_cast<io_wait*>(operation->context);
  waiter->completed_ = true;
  // With a deadline: a disarmed timer will never fire, so its count goes too; one that could
  // not be disarmed has fired (its callback completed under the service lock) and its expiry
  // request releases that count.
  if (waiter->deadline_ != nullptr && waiter->deadline_->service->disarm(waiter->deadline_->timer)) {
    waiter->release(2);
  } else {
    waiter->release_one();
  }
}

void io_wait::on_deadline(core::timer_entry* entry) noexcept {
  // Any thread, service lock held: only post (the completion cannot have released the timer's
  // count, so the awaiter is alive until the request has run or been dropped).
  io_wait& waiter = static_cast<deadline_part::timer_type*>(entry)->owner;
  waiter.core_->schedule_on(waiter.executor_index_, &waiter.deadline_->expiry);
}

void io_wait::run_expiry(core::runnable* request) noexcept {
  io_wait& waiter = static_cast<deadline_part::expiry_request*>(request)->owner;
  // The reactor's owner thread, like the completion: `completed_` is stable here.
  if (!waiter.completed_) {
    waiter.deadline_->expired = true;
    waiter.reactor_->cancel(reinterpret_cast<std::uintptr_t>(&waiter.operation_));
  }
  waiter.release_one();
}

void io_wait::drop_expiry(core::runnable* request) noexcept {
  // Shutdown, as drop_cancel: only the count moves.
  io_wait& waiter = static_cast<deadline_part::expiry_request*>(request)->owner;
  waiter.pending_.fetch_sub(1, std::memory_order_acq_rel);  // acq_rel: as in release_one
}

void io_wait::run_cancel(core::runnable* request) noexcept {
  io_wait& waiter = static_cast<cancel_request*>(request)->owner;
  // The reactor's owner thread: the completion and this request are serialised here.
  if (!waiter.completed_) {
    waiter.reactor_->cancel(reinterpret_cast<std::uintptr_t>(&waiter.operation_));
  }
  waiter.release_one();
}

void io_wait::drop_cancel(core::runnable* request) noexcept {
  // Shutdown: the reactors were drained first (the operation completed); the task stays
  // suspended and the runtime abandons it, so only the count moves.
  io_wait& waiter = static_cast<cancel_request*>(request)->owner;
  waiter.pending_.fetch_sub(1, std::memory_order_acq_rel);  // acq_rel: as in release_one
}

void io_wait::release_one() noexcept { release(1); }

void io_wait::release(std::uint32_t count) noexcept {
  // acq_rel: the last one to leave sees the others' writes (result, completed_, expired) before
  // waking.
  if (pending_.fetch_sub(count, std::memory_order_acq_rel) == count) task_->wake();
}

}  // namespace detail
}  // namespace spindle::io
