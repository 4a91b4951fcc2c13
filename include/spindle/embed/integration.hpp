// The host's side of an embedded executor (SPEC E1, E2; seed 004 "integration/").
//
// A host (a GUI toolkit's main loop, a game loop, a plugin inside somebody else's event loop)
// drives an embedded_executor by calling its tick(). The executor tells the host when it wants
// the next tick through this interface, which the host implements:
//
//   now()            the host's current time (the clock every sleep and timeout reads);
//   tick_at(t)       "call tick() again no later than t" (the executor's next timer). A standing
//                    request, not a one-shot timer: it holds until the next tick_at replaces it
//                    (a host that ticks earlier for another reason still owes a tick at t, as
//                    the sleep_catcher does not repeat an unchanged time); clock_time::max()
//                    withdraws it (no timer pending). Called only from inside tick();
//   tick_soon()      "call tick() again soon" (re-entry): work is waiting. Any thread, any time,
//                    also while a tick runs, in which case one more tick must follow it. Never
//                    call tick() from inside tick_soon(): tick() is not re-entrant.
//
// The host's one obligation: consume a tick request BEFORE calling tick() (clear the "tick
// wanted" flag, take the posted event, then tick), never after tick() returns. A request that
// arrives during a tick, including the re-entry a tick asks for itself when it leaves work
// behind, reaches the host while tick() still runs (or just after it): a host that clears its
// flag once tick() returned would erase it. Hosts whose tick_soon() posts an event to their own
// queue satisfy this naturally.
//
// Two wrappers, from the seed, sit between the executor and every user-supplied integration
// (the executor applies both itself; they are public so hosts and tests can use them alone):
//
//   reentering_integration   a request made during a tick (from any thread) is held and passed
//                            on once, at the tick's end, after its last look at its queues: the
//                            host is never re-entered while it is dispatching the tick, and the
//                            many requests one tick makes (every wake-up during a tick asks for
//                            one) become one. Requests outside a tick pass straight through.
//   sleep_catcher            passes tick_at() on only when the requested time differs from the
//                            one last passed on, so a host is not told the same deadline at the
//                            end of every tick.
//
// Concurrency: tick_at and the catcher's state belong to the ticking thread. The reentering
// wrapper's state is one atomic word (below).
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/core/clock.hpp"
#include "spindle/embed/reentry_state.hpp"

namespace spindle::embed {

class integration {
 public:
  virtual ~integration() = default;
  virtual clock_time now() const noexcept = 0;
  virtual void tick_at(clock_time when) noexcept = 0;
  virtual void tick_soon() noexcept = 0;
};

// Holds tick_soon() requests made during a tick and passes one on after it (see above).
//
// State word (reentry_state.hpp): `in_tick` (set by begin_tick, cleared by end_tick) and
// `requested` (a request arrived during the tick). Invariant: `requested` is only ever set
// together with `in_tick`, so end_tick, which clears both with one exchange, is the one place
// that passes a held request on. A request that finds no tick running passes on at once: if a
// tick starts meanwhile, that tick's first service phase already sees the work the requester
// published before asking. That needs seq_cst operations in one total order: the requester's
// publication (the action queue's push) before its load of the word, and begin_tick's store
// before the tick's first look at the queue, which is a seq_cst load
// (intrusive_mpsc_stack::empty_seq_cst; a relaxed look may still read the queue as it was
// before the store: tests/model/reentry_state_model.cpp shows the lost re-entry). The early pass
// is then one spare tick at worst, never a lost one.
class reentering_integration final : public integration {
 public:
  explicit reentering_integration(integration& inner) noexcept : inner_(inner) {}

  clock_time now() const noexcept override { return inner_.now(); }
  void tick_at(clock_time when) noexcept override { inner_.tick_at(when); }
  // Any thread.
  void tick_soon() noexcept override {
    if (state_.request()) inner_.tick_soon();
  }

  // The ticking thread, around each tick.
  void begin_tick() noexcept { state_.begin_tick(); }
  void end_tick() noexcept {
    if (state_.end_tick()) inner_.tick_soon();
  }
  // The ticking thread, during a tick: ask for one more tick after this one (held like a request
  // from another thread, without touching the word again once one is held).
  void request_reentry() noexcept { tick_soon(); }

 private:
  integration& inner_;
  detail::reentry_state<> state_;
};

// Passes tick_at() on only when it changes (see above). Ticking thread only, except tick_soon.
class sleep_catcher final : public integration {
 public:
  explicit sleep_catcher(integration& inner) noexcept : inner_(inner) {}

  clock_time now() const noexcept override { return inner_.now(); }
  void tick_at(clock_time when) noexcept override {
    if (when == last_) return;
    last_ = when;
    inner_.tick_at(when);
  }
  void tick_soon() noexcept override { inner_.tick_soon(); }

 private:
  integration& inner_;
  clock_time last_ = clock_time::max();  // the host starts with no timed request
};

}  // namespace spindle::embed
