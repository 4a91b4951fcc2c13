// timeout_signal: the deferred "cancel the child" of with_timeout. Design and the reason for the
// deferral (no request_cancel under a timer service lock) in include/spindle/time/timeout.hpp.
#include "spindle/time/timeout.hpp"

#include <atomic>

#include "spindle/core/timer_wheel.hpp"

namespace spindle::detail {

class timeout_signal final : public core::runnable {
 public:
  timeout_signal() noexcept : core::runnable(&table), entry_(*this) {}

  void arm(spawned_task_base& child, clock_time deadline) noexcept {
    // The caller's host and timers: the runtime and this worker's wheel, or an embedded
    // executor and its own.
    task_host& host = spawned_task_base::current()->host();
    child.add_reference();
    child_ = &child;
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
    self->child_->request_cancel();  // a no-op if the child has completed meanwhile
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

}  // namespace spindle::detail
