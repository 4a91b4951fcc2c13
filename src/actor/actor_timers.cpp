// Timers to actors: arming, firing, cancelling, and closing an actor's timers when it halts
// (actor_timers.hpp has the design: phases, references, and each lifetime across threads).
#include "spindle/actor/actor_timers.hpp"

#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"

namespace spindle {
namespace actor_detail {

// The timers of one actor that may still fire. Freed with the cell (actor_cell::release): every
// record holds a reference on the cell, so none is left to take the lock by then.
struct timer_registry {
  std::mutex lock;
  timer_record* head = nullptr;  // registered records, linked through registry_previous/next
  bool closed = false;           // the actor halted: nothing registers, nothing stays
};

void destroy_timer_registry(timer_registry* registry) noexcept { delete registry; }

namespace {

void unlink_locked(timer_registry& registry, timer_record& record) noexcept {
  if (record.registry_previous != nullptr) {
    record.registry_previous->registry_next = record.registry_next;
  } else {
    registry.head = record.registry_next;
  }
  if (record.registry_next != nullptr) record.registry_next->registry_previous = record.registry_previous;
  record.registry_previous = record.registry_next = nullptr;
  record.registered = false;
}

// Takes `record` out of its actor's registry if it is still there; true if so: the caller now
// holds the registry's reference (the closer took it otherwise).
bool take_from_registry(timer_record& record) noexcept {
  // acquire: its CAS (the registry exists: the record was registered in it).
  timer_registry& registry = *record.target->timers.load(std::memory_order_acquire);
  std::lock_guard guard(registry.lock);
  if (!record.registered) return false;
  unlink_locked(registry, record);
  return true;
}

// The same, dropping the registry's reference (the caller made sure the entry is in no wheel).
void unregister(timer_record& record) noexcept {
  if (take_from_registry(record)) record.release();
}

// Closes the registry and disarms each timer in it (the actor halted). Idempotent.
void close_registry(timer_registry& registry) noexcept {
  timer_record* taken;
  {
    std::lock_guard guard(registry.lock);
    registry.closed = true;
    taken = std::exchange(registry.head, nullptr);
    for (timer_record* r = taken; r != nullptr; r = r->registry_next) r->registered = false;
  }
  while (timer_record* record = taken) {
    taken = record->registry_next;
    record->registry_previous = record->registry_next = nullptr;
    for (;;) {
      // acquire: the arming thread's service pointer and arm, or the canceller's disarm.
      timer_phase phase = record->phase.load(std::memory_order_acquire);
      if (phase == timer_phase::done) break;
      if (phase == timer_phase::armed) {
        // acquire: as above; the winner alone disarms.
        if (record->phase.compare_exchange_strong(phase, timer_phase::busy,
                                                  std::memory_order_acquire)) {
          record->service->disarm(*record);  // waits for a fire in progress
          // release: a later cancel() that sees done touches nothing.
          record->phase.store(timer_phase::done, std::memory_order_release);
          break;
        }
        continue;
      }
      // arming or busy: another thread is between two short steps and holds no lock of ours.
      std::this_thread::yield();
    }
    record->release();  // the registry's reference
  }
}

// An exit callback of the actor (actor_cell.hpp): closes its registry when it halts.
struct registry_closer final : exit_callback {
  explicit registry_closer(actor_cell& of) noexcept
      : exit_callback{&registry_closer::deliver_to}, cell(&of) {}
  static void deliver_to(exit_callback* self, const exit_reason&) noexcept {
    auto* closer = static_cast<registry_closer*>(self);
    // seq_cst: pairs with registry_of's CAS and state load (see there).
    if (timer_registry* registry = closer->cell->timers.load(std::memory_order_seq_cst)) {
      close_registry(*registry);
    }
    delete closer;
  }
  actor_cell* cell;  // alive: delivered while halting, or by add_exit_callback's caller
};

timer_registry& registry_of(actor_cell& cell) {
  // acquire: pairs with the CAS below.
  if (timer_registry* existing = cell.timers.load(std::memory_order_acquire)) return *existing;
  auto created = std::make_unique<timer_registry>();
  auto closer = std::make_unique<registry_closer>(cell);
  // Registered first: a throw leaves nothing published. A racing creator that loses the CAS
  // leaves its closer registered: it closes the winner's registry too (closing is idempotent).
  add_exit_callback(cell, closer.get());
  closer.release();
  timer_registry* expected = nullptr;
  // seq_cst: publishes the registry (release), reads a competitor's (acquire), and orders the
  // publication before the state load below: a closer that ran before it found no registry, and
  // then the actor was Halted before it (halt stores the state before telling callbacks).
  if (!cell.timers.compare_exchange_strong(expected, created.get(), std::memory_order_seq_cst)) {
    return *expected;
  }
  timer_registry& registry = *created.release();
  if (cell.state.load(std::memory_order_seq_cst) == actor_state::halted) close_registry(registry);
  return registry;
}

}  // namespace

timer_record::timer_record(actor_cell& to, const operations& table, clock_duration every) noexcept
    : core::timer_entry(&timer_record::fire), ops(&table), target(&to), period(every) {
  to.add_reference();
}

void timer_record::release() noexcept {
  // acq_rel: the last owner sees every other owner's writes before freeing.
  if (references.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    actor_cell* cell = target;
    ops->free_record(*this);
    cell->release();
  }
}

void timer_record::fire(core::timer_entry* entry) noexcept {
  // Under the service mutex, on its executor; the record is registered (see the design).
  auto& self = static_cast<timer_record&>(*entry);
  if (self.period == clock_duration::zero()) {
    try {
      push_message(*self.target, self.ops->make_envelope(self));
    } catch (...) {
      // No memory for the envelope: the message is lost, as a send that could not allocate.
    }
    const bool taken = take_from_registry(self);
    // release: a cancel() that sees done returns false without the service. From this store
    // on, a closer holding the registry's reference may release it: we touch the record again
    // only if we hold that reference ourselves.
    self.phase.store(timer_phase::done, std::memory_order_release);
    if (taken) self.release();  // may free the record
    return;
  }
  // acq_rel: takes the turn to push (acquire: the previous tick's handling is over).
  if (!self.tick_pending.exchange(true, std::memory_order_acq_rel)) {
    envelope* tick = nullptr;
    try {
      tick = self.ops->make_envelope(self);
    } catch (...) {
      self.tick_pending.store(false, std::memory_order_relaxed);  // relaxed: ours, nothing sent
    }
    // A failed push destroys the tick (clearing tick_pending); halted: not repeated, the
    // closer is on its way and disarms nothing.
    if (tick != nullptr && push_message(*self.target, tick) == send_result::halted) return;
  }
  self.service->repeat(self, self.period);
}

actor_timer arm_timer(timer_record* record, clock_duration delay) {
  actor_timer handle = timer_access::adopt(record);  // releases the record if a step throws
  actor_cell& cell = *record->target;
  timer_registry& registry = registry_of(cell);
  {
    std::lock_guard guard(registry.lock);
    if (registry.closed) {
      // The actor halted: never armed. relaxed: not shared yet.
      record->phase.store(timer_phase::done, std::memory_order_relaxed);
      return handle;
    }
    record->registry_next = registry.head;
    if (registry.head != nullptr) registry.head->registry_previous = record;
    registry.head = record;
    record->registered = true;
    record->add_reference();  // the registry's
  }
  // The executor it lives on now (relaxed: any executor's service would do; this one is where
  // its messages are most likely handled).
  core::executor& home = cell.system->core().executor_at(cell.home.load(std::memory_order_relaxed));
  record->service = &home.timers();
  const clock_time deadline = detail::saturating_add(record->service->clock().now(), delay);
  record->service->arm(*record, deadline);
  timer_phase arming = timer_phase::arming;
  // release: publishes `service` and the arm to the canceller's and the closer's acquire. A
  // one-shot that fired already stored done: the CAS fails and leaves it done.
  record->phase.compare_exchange_strong(arming, timer_phase::armed, std::memory_order_release,
                                        std::memory_order_relaxed);
  return handle;
}

}  // namespace actor_detail

bool actor_timer::cancel() noexcept {
  if (record_ == nullptr) return false;
  actor_detail::timer_phase armed = actor_detail::timer_phase::armed;
  // acquire: sees the arming thread's `service`; the winner alone disarms.
  if (!record_->phase.compare_exchange_strong(armed, actor_detail::timer_phase::busy,
                                              std::memory_order_acquire)) {
    return false;
  }
  const bool prevented = record_->service->disarm(*record_);
  // release: a closer waiting on busy may now release the registry's reference.
  record_->phase.store(actor_detail::timer_phase::done, std::memory_order_release);
  if (prevented) actor_detail::unregister(*record_);
  return prevented;
}

bool actor_timer::pending() const noexcept {
  if (record_ == nullptr) return false;
  // acquire: a snapshot that agrees with what the fire or the canceller did before.
  const auto phase = record_->phase.load(std::memory_order_acquire);
  return phase == actor_detail::timer_phase::arming || phase == actor_detail::timer_phase::armed;
}

}  // namespace spindle
