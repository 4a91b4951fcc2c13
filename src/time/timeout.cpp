// timeout_signal: the deferred "cancel the child" of with_timeout over a task, and the deferred
// "fire the scope" of with_timeout over any other awaitable. Design and the reason for the
// deferral (no cancellation under a timer service lock) in include/spindle/time/timeout.hpp.
#include "spindle/time/timeout.hpp"

#include <atomic>

#include "spindle/core/frame_allocator.hpp"
#include "spindle/core/timer_wheel.hpp"

namespace spindle::detail {

class timeout_signal final : public core::runnable {
 public:
  timeout_signal() noexcept : core::runnable(&table), entry_(*this) {}

  // Allocated like a frame: a scope's signal is made and freed on every with_timeout that waits.
  static void* operator new(std::size_t size) { return core::allocate_frame(size); }
  static void operator delete(void* pointer) noexcept { core::deallocate_frame(pointer); }

  // scope_mode: on firing, fire the scope keyed by this signal in `child` (then the running
  // task itself) instead of requesting the child's cancellation.
  void arm(spawned_task_base& child, clock_time deadline, bool scope_mode = false) noexcept {
    // The caller's host and timers: the runtime and this worker's wheel, or an embedded
    // executor and its own.
    task_host& host = spawned_task_base::current()->host();
    child.add_reference();
    child_ = &child;
    scope_mode_ = scope_mode;
    service_ = host.timers_here();
    scheduler_ = &host;
    armed_ = true;
    // Everything above is published to the fire callback by the service lock taken here.
    service_->arm(entry_, deadline);
  }

  bool stop() noexcept {
    if (armed_) {
      armed_ = false;
      if (service_->disarm(entry_)) return false;  // had not fired, now never will
    }
    // Not linked: it fired and its callback has completed (disarm took the lock), or it was
    // never armed. `fired_` is visible through that lock.
    return fired_;
  }

  void release() noexcept {
    // acq_rel: the last releaser must see every other owner's writes before deleting.
    if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (child_ != nullptr) child_->release();
      delete this;
    }
  }

 private:
  struct entry_type : core::timer_entry {
    explicit entry_type(timeout_signal& signal) noexcept
        : core::timer_entry(&timeout_signal::on_fire), owner(signal) {}
    timeout_signal& owner;
  };

  // Owner executor, service lock held: must not cancel here (see the header). Queue ourselves.
  static void on_fire(core::timer_entry* entry) noexcept {
    timeout_signal& self = static_cast<entry_type*>(entry)->owner;
    self.fired_ = true;
    // relaxed: the parent's reference is alive (its stop() cannot return while we run under the
    // service lock); the queue's publication orders the rest.
    self.references_.fetch_add(1, std::memory_order_relaxed);
    self.scheduler_->schedule(&self, core::schedule_hint::wake);
  }
  static void run_entry(core::runnable* r) noexcept {
    auto* self = static_cast<timeout_signal*>(r);
    if (self->scope_mode_) {
      self->child_->cancel_scope(self);  // a no-op if the scope has ended meanwhile (S6)
    } else {
      self->child_->request_cancel();  // a no-op if the child has completed meanwhile
    }
    self->release();
  }
  static void drop_entry(core::runnable* r) noexcept {
    static_cast<timeout_signal*>(r)->release();  // shutdown: the child is abandoned anyway
  }
  static constexpr core::runnable_vtable table = {&timeout_signal::run_entry,
                                                  &timeout_signal::drop_entry};

  entry_type entry_;
  spawned_task_base* child_ = nullptr;   // one reference held while set
  core::timer_service* service_ = nullptr;
  core::scheduler* scheduler_ = nullptr;  // the caller's host: runs the deferred cancel
  std::atomic<std::uint32_t> references_{1};  // the parent's guard (+1 while queued)
  bool armed_ = false;  // parent-side
  bool scope_mode_ = false;  // written before arming (published by the service lock)
  bool fired_ = false;  // written under the service lock by on_fire
};

timeout_guard::timeout_guard() : signal_(new timeout_signal()) {}

timeout_guard::~timeout_guard() {
  signal_->stop();
  signal_->release();
}

void timeout_guard::arm(spawned_task_base& child, clock_time deadline) noexcept {
  signal_->arm(child, deadline);
}

bool timeout_guard::stop() noexcept { return signal_->stop(); }

void deadline_scope::enter(spawned_task_base& task, clock_time deadline) {
  signal_ = new timeout_signal();  // the only step that can fail: nothing is listed yet
  task_ = &task;
  scope_.key = signal_;
  task.enter_scope(scope_);
  signal_->arm(task, deadline, /*scope_mode=*/true);
}

bool deadline_scope::leave() noexcept {
  if (signal_ == nullptr) return false;
  // Disarm first: once the scope is unlisted a late signal finds nothing (S6); the order only
  // saves the late signal's run when the timer had not fired.
  signal_->stop();
  const bool fired = task_->leave_scope(scope_);
  std::exchange(signal_, nullptr)->release();
  return fired;
}

}  // namespace spindle::detail
