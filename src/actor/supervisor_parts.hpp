// What the static supervisor (supervisor.cpp) and the dynamic one (dynamic_supervisor.cpp) both
// do when they start a child and report their restarts: one piece for both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "spindle/actor/actor.hpp"
#include "spindle/actor/supervisor.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/core/timer_wheel.hpp"

namespace spindle::supervisor_parts {

// The options a child's factory gets: its placement resolved, its name, the supervisor's id and
// how many times that child was started before (diagnostics: the supervision tree).
inline spawn_options child_options(const child_placement& placement, const std::string& name,
                                   actor_id supervisor, std::uint32_t restarts) {
  spawn_options options;
  options.domain = domain_of(placement);
  if (placement.where == child_placement::kind::executor) {
    options.executor = placement.value;
    options.pinned = true;
  }
  options.name = name;
  options.supervisor = supervisor;
  options.restarts = restarts;
  return options;
}

// Marks a started child's cell (again: a factory may have ignored the options).
inline void mark_child(const actor_handle& child, actor_id supervisor, std::uint32_t restarts) {
  // relaxed: read by snapshots, each value whole.
  child.cell()->supervisor.store(supervisor, std::memory_order_relaxed);
  child.cell()->restarts.store(restarts, std::memory_order_relaxed);
}

// The supervision tree's copy of a supervisor's restart history, after a restart.
inline void publish_intensity(actor_system* system, actor_detail::supervisor_record& record,
                              const restart_intensity& intensity) {
  if (system == nullptr) return;
  system->with_directory_locked([&] { record.intensity = intensity; });
}

// A supervisor's one timer entry, for all its deadlines (stop timeouts; a dynamic supervisor's
// back-offs too). When it fires (on the executor whose wheel holds it, under that wheel's lock)
// it sends the supervisor a `Due` as message M; the supervisor then handles what is due and
// re-arms for what is left. No task and no thread waits. Destroyed with the behaviour, which the
// actor destroys before its cell is freed; the destructor disarms, and a disarm waits for a fire
// in progress (timer_wheel.hpp, "Locking rule"), so a fire always finds the cell alive. It holds
// no reference to the cell, so the destructor takes the wheel's lock whether or not the entry is
// armed in its owner's view: a fire's push publishes the Due and then still reads the cell's
// state (to wake it), and the supervisor may handle that Due (`fired()`: not armed), halt and be
// freed meanwhile (TSan caught the free racing that read in DynamicSupervisorStress when the
// destructor skipped the disarm of an entry it thought fired). Owned by the supervisor's
// handlers (one at a time); `fire` touches only `owner`.
template <class M, class Due>
class supervisor_alarm : core::timer_entry {
 public:
  explicit supervisor_alarm(actor_detail::actor_cell& owner) noexcept
      : core::timer_entry(&supervisor_alarm::fire), owner_(&owner) {}
  supervisor_alarm(const supervisor_alarm&) = delete;
  supervisor_alarm& operator=(const supervisor_alarm&) = delete;
  ~supervisor_alarm() {
    // Always through the wheel's lock (see above): waits for a fire still pushing.
    if (service_ != nullptr) service_->disarm(*this);
  }

  // Fires at `deadline` (at once if past), replacing an earlier deadline. The entry lives on the
  // wheel of the executor the supervisor ran on when it first armed (it may migrate since: the
  // fire's message finds it wherever it is).
  void arm(actor_system& system, std::uint32_t executor, clock_time deadline) {
    if (armed_for_ == deadline) return;
    if (service_ == nullptr) service_ = &system.core().executor_at(executor).timers();
    service_->arm(*this, deadline);
    armed_for_ = deadline;
  }
  void disarm() noexcept {
    if (armed_for_ && service_ != nullptr) service_->disarm(*this);
    armed_for_.reset();
  }
  // The supervisor got a Due: the entry is no longer armed (or the message was a stale one;
  // arm() re-arms either way).
  void fired() noexcept { armed_for_.reset(); }

 private:
  static void fire(core::timer_entry* entry) noexcept {
    auto* self = static_cast<supervisor_alarm*>(entry);
    try {
      actor_detail::push_message(*self->owner_, actor_detail::make_user_envelope<M>(Due{}));
    } catch (...) {
      // Out of memory: the deadline is lost until the supervisor's next message re-arms.
    }
  }

  actor_detail::actor_cell* owner_;
  core::timer_service* service_ = nullptr;  // the wheel it is armed on (set by the first arm)
  std::optional<clock_time> armed_for_;     // the deadline it is armed for (the owner's view)
};

}  // namespace spindle::supervisor_parts
