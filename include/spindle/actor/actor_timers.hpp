// Timers to actors: send_after(ref, delay, message), send_interval(ref, period, message), and
// the same from a handler to its own actor (ctx.send_after, ctx.send_interval). Each returns an
// actor_timer, a handle whose cancel() says whether it prevented a send.
//
//   auto t = spindle::send_after(ref, 50ms, message_type{timeout{}});   // any thread
//   ctx.send_interval(1s, message_type{tick{}});                         // in a handler
//   if (t.cancel()) { /* the message will never be sent */ }
//
// Design (docs/design/actors.md, "Timers to actors")
// Who takes part:
//   - a timer_record per timer (heap, refcounted): a core::timer_entry (it *is* one) armed on
//     the timer service of the executor the actor lived on when it was armed, the message, the
//     target cell (the record holds a reference on it), its period (zero: a one-shot), a phase;
//   - the arming thread (any), which registers the record and arms it;
//   - the fire callback (the service's owner executor, under the service mutex), which pushes
//     the message; a periodic one asks its service to arm it again (timer_service::repeat);
//   - cancellers (any thread, through the handle);
//   - the actor's timer_registry (actor_cell::timers, created on first use), the set of its
//     timers that may still fire, and its closer, an exit callback that, when the actor halts,
//     closes the registry and disarms every timer in it. A timer armed on a halted actor never
//     fires (its registry is closed).
//
// Phases (atomic `phase`):
//   arming --arming thread, after arm()--> armed --canceller or closer CAS--> busy --> done
//   arming/armed --one-shot fire-------------------------------------------------> done
//   A canceller acts only if its CAS armed -> busy wins: it disarms, then stores done. So one
//   disarm per timer, and after done nobody touches the service again (the runtime may be gone).
//   The closer waits out arming and busy (another thread is between two short steps; it holds
//   no lock meanwhile): when it is done with a record, the entry is in no wheel.
//
// Exactly once (one-shot): disarm() returning true means the entry was in the wheel and now is
// not: the fire never runs, cancel() returns true, nothing is sent. False means the fire callback
// has completed (the service mutex is a barrier): the message was pushed, cancel() returns
// false. Sent xor cancelled. A message pushed after the actor halted is dropped by the
// closed mailbox (actor_cell.hpp, invariant X): no message is ever handled by a halted actor.
// A timer's send is a send like any other: to an actor with a bounded mailbox that is full
// (spawn_options::capacity) the message is refused and dropped (send_result::full), and
// cancel() still returns false: the timer fired. Size the mailbox for the timers aimed at it,
// or use send_interval, which keeps at most one tick queued.
//
// Periodic: fire at deadline, deadline + period, ... (repeat() keeps the phase: no drift). At
// most one tick of a timer is in the mailbox: `tick_pending` is set by the fire that pushes a
// tick and cleared when that tick's envelope is destroyed (handled, or dropped); a fire that
// finds it set pushes nothing. A slow actor therefore sees ticks *skipped*, never piled up
// (Tokio's MissedTickBehavior::Skip: the next tick stays on the grid). cancel() returning true
// means no further tick will be pushed; a tick already in the mailbox stays there (as with
// Erlang's cancel_timer). Since a tick's envelope is destroyed only after its handler returns,
// cancelling from the handler of the timer's own tick leaves no tick queued.
//
// References on a record: the handle's; the registry's, from registration until whoever takes
// the record out of the registry (the one-shot fire, the winning canceller, the closer) is done
// with it; one per tick envelope in a mailbox. The entry is in a wheel only while the record is
// registered, and whoever unregisters it has made sure it is not (disarm) or is its fire.
//
// Lifetimes, each across threads:
//   - entry memory vs the cell: the record holds a reference on the cell, so the cell (and the
//     registry it owns, freed with it) outlives every record; the registry's lock is always
//     there for a record to take.
//   - entry memory vs a fire in progress: the fire runs while the record is registered (the
//     registry's reference) and under the service mutex; a canceller or the closer releases
//     that reference only after disarm() returned, which waits for the fire to complete.
//   - cancel from a foreign thread: the handle's reference keeps the record; the phase CAS makes
//     it the only one to disarm; done afterwards, so a second cancel() touches nothing.
//   - the actor halts while a fire is in progress: the mailbox is closed first (the push fails
//     and drops the message), then the closer disarms every timer, each disarm waiting for that
//     timer's fire; a periodic timer whose push failed is not repeated.
//   - runtime shutdown: every actor halts (its closer runs) while the executors and their timer
//     services still exist; each record ends done, so a handle kept past the runtime's end
//     cancels nothing and returns false without touching the freed service. Calling cancel()
//     *during* the runtime's destructor is not allowed (as using any of its objects then).
//
// Costs: one allocation per timer (record + message) and one per fire (the envelope, as any
// send); arm and disarm are the service's O(1) under its mutex; the registry lock twice per
// timer (register, unregister). No task per timer.
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "spindle/actor/actor.hpp"
#include "spindle/core/clock.hpp"
#include "spindle/core/errors.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/time/sleep.hpp"

namespace spindle {

namespace actor_detail {

enum class timer_phase : std::uint8_t { arming, armed, busy, done };

struct timer_record : core::timer_entry {
  struct operations {
    // The envelope a fire pushes: the message moved out (one-shot) or a copy in a tick envelope
    // (periodic). May throw bad_alloc (the fire then sends nothing).
    envelope* (*make_envelope)(timer_record& record);
    void (*free_record)(timer_record& record) noexcept;  // the message and the memory
  };
  // Takes a reference on `to`; the creator holds the record's first reference.
  timer_record(actor_cell& to, const operations& table, clock_duration every) noexcept;

  void add_reference() noexcept {
    references.fetch_add(1, std::memory_order_relaxed);  // relaxed: the caller holds one
  }
  void release() noexcept;
  // The fire callback (see the design above).
  static void fire(core::timer_entry* entry) noexcept;

  const operations* ops;
  actor_cell* target;
  core::timer_service* service = nullptr;  // set before it is armed, then constant
  const clock_duration period;             // zero: a one-shot
  std::atomic<std::uint32_t> references{1};
  std::atomic<timer_phase> phase{timer_phase::arming};
  std::atomic<bool> tick_pending{false};  // periodic: a tick of ours is in the mailbox
  // Under the registry's lock.
  timer_record* registry_previous = nullptr;
  timer_record* registry_next = nullptr;
  bool registered = false;
};

// A periodic timer's tick: a user envelope (the behaviour handles it as any message) that clears
// its timer's tick_pending when it is destroyed, handled or dropped.
template <class M>
struct tick_envelope final : user_envelope<M> {
  template <class T>
  tick_envelope(timer_record& from, const T& message) : user_envelope<M>(message), source(&from) {
    this->destroy = &tick_envelope::destroy_tick;
    from.add_reference();  // released by destroy_tick
  }
  static void destroy_tick(envelope* e) noexcept {
    auto* self = static_cast<tick_envelope*>(e);
    timer_record* from = self->source;
    delete self;
    // release: the handler's effects happen before the next fire pushes again (its acquire).
    from->tick_pending.store(false, std::memory_order_release);
    from->release();
  }
  timer_record* source;
};

// A timer of an actor whose message type is M, holding a T that M is made from (the message of
// a periodic timer is copied at each tick: T must be copyable, M need not be).
template <class M, class T>
struct typed_timer_record final : timer_record {
  typed_timer_record(actor_cell& to, clock_duration every, T&& m)
      : timer_record(to, table, every), message(std::move(m)) {}
  static envelope* make(timer_record& base) {
    auto& self = static_cast<typed_timer_record&>(base);
    if (self.period == clock_duration::zero()) return make_user_envelope<M>(std::move(self.message));
    if constexpr (std::copy_constructible<T>) {
      return new tick_envelope<M>(self, self.message);
    } else {
      return nullptr;  // unreachable: send_interval requires a copyable message
    }
  }
  static void free(timer_record& base) noexcept { delete static_cast<typed_timer_record*>(&base); }
  static constexpr operations table{&typed_timer_record::make, &typed_timer_record::free};
  T message;
};

class timer_access;

template <class Rep, class Period>
clock_duration timer_duration(std::chrono::duration<Rep, Period> d) noexcept {
  if constexpr (std::same_as<std::chrono::duration<Rep, Period>, clock_duration>) {
    return d;
  } else if constexpr (detail::coarser_integral_duration<Rep, Period>) {
    return detail::to_clock_duration(d);  // saturating (time/sleep.hpp)
  } else {
    return std::chrono::duration_cast<clock_duration>(d);
  }
}

}  // namespace actor_detail

// A timer aimed at an actor. Dropping the handle does not cancel the timer: the actor owns it,
// and it is cancelled when the actor halts. Move-only.
class actor_timer {
 public:
  actor_timer() noexcept = default;
  actor_timer(actor_timer&& other) noexcept : record_(std::exchange(other.record_, nullptr)) {}
  actor_timer& operator=(actor_timer&& other) noexcept {
    std::swap(record_, other.record_);
    return *this;
  }
  ~actor_timer() {
    if (record_ != nullptr) record_->release();
  }

  // Any thread. True if this call prevented a send: a one-shot's message will never be sent; a
  // periodic timer sends no further tick (one already queued stays queued). False if there was
  // nothing left to prevent: the one-shot was sent, the timer was cancelled already, or the
  // actor halted (also after the runtime is gone). False on an empty handle.
  bool cancel() noexcept;
  // Whether it may still send: not yet fired (a one-shot), not cancelled, actor not halted.
  bool pending() const noexcept;
  explicit operator bool() const noexcept { return record_ != nullptr; }

 private:
  friend class actor_detail::timer_access;
  explicit actor_timer(actor_detail::timer_record* record) noexcept : record_(record) {}
  actor_detail::timer_record* record_ = nullptr;
};

namespace actor_detail {

// Registers and arms `record` (taking over its first reference) on the target's home executor,
// `delay` from now; the first fire of a periodic one too.
actor_timer arm_timer(timer_record* record, clock_duration delay);

class timer_access {
 public:
  static actor_timer adopt(timer_record* record) noexcept { return actor_timer(record); }
};

template <class M, class T>
actor_timer make_timer(actor_cell* target, clock_duration delay, clock_duration period, T message) {
  if (target == nullptr) throw usage_error("spindle: a timer aimed at an empty actor reference");
  return arm_timer(new typed_timer_record<M, T>(*target, period, std::move(message)), delay);
}

}  // namespace actor_detail

// Sends `message` (anything M is made from) to `target` once, `delay` from now (a delay <= 0:
// at the next timer check of the executor). usage_error on an empty reference. On an actor that
// has halted: nothing is sent and the handle is not pending.
template <class M, class T, class Rep, class Period>
  requires std::constructible_from<M, std::decay_t<T>&&>
actor_timer send_after(const actor_ref<M>& target, std::chrono::duration<Rep, Period> delay,
                       T&& message) {
  return actor_detail::make_timer<M, std::decay_t<T>>(target.cell(),
                                                      actor_detail::timer_duration(delay),
                                                      clock_duration::zero(),
                                                      std::forward<T>(message));
}

// Sends an M made from a copy of `message` to `target` every `period`, first `period` from
// now, until cancelled or the actor halts. Ticks stay on the grid (no drift); a tick that finds
// the previous one still queued is skipped (no pile-up). usage_error on an empty reference or a
// period <= 0. The message is copied, M need not be (a variant with reply_to alternatives).
template <class M, class T, class Rep, class Period>
  requires std::copy_constructible<std::decay_t<T>> &&
           std::constructible_from<M, const std::decay_t<T>&>
actor_timer send_interval(const actor_ref<M>& target, std::chrono::duration<Rep, Period> period,
                          T&& message) {
  const clock_duration every = actor_detail::timer_duration(period);
  if (every <= clock_duration::zero()) throw usage_error("spindle: send_interval with a period <= 0");
  return actor_detail::make_timer<M, std::decay_t<T>>(target.cell(), every, every,
                                                      std::forward<T>(message));
}

// actor_context's timers to itself (declared in actor.hpp).
template <class M>
template <class T, class Rep, class Period>
actor_timer actor_context<M>::send_after(std::chrono::duration<Rep, Period> delay,
                                         T&& message) const {
  static_assert(std::constructible_from<M, std::decay_t<T>&&>, "send_after: M is not made from T");
  return actor_detail::make_timer<M, std::decay_t<T>>(&cell_, actor_detail::timer_duration(delay),
                                                      clock_duration::zero(),
                                                      std::forward<T>(message));
}

template <class M>
template <class T, class Rep, class Period>
actor_timer actor_context<M>::send_interval(std::chrono::duration<Rep, Period> period,
                                            T&& message) const {
  static_assert(std::copy_constructible<std::decay_t<T>> &&
                    std::constructible_from<M, const std::decay_t<T>&>,
                "send_interval sends copies: the message must be copyable and M made from it");
  const clock_duration every = actor_detail::timer_duration(period);
  if (every <= clock_duration::zero()) throw usage_error("spindle: send_interval with a period <= 0");
  return actor_detail::make_timer<M, std::decay_t<T>>(&cell_, every, every, std::forward<T>(message));
}

}  // namespace spindle
