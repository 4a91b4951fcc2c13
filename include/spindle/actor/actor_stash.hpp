// The stash (issue 17, Akka's Stash): a handler puts the message it is handling aside and has it
// handled again later, once the actor is ready for it (a connection not yet open, a state that
// is still loading):
//
//   void receive(request& r, spindle::actor_context<request>& ctx) {
//     if (!ready) { ctx.stash(std::move(r)); return; }   // kept, in order
//     ...
//   }
//   void on_ready(spindle::actor_context<request>& ctx) { ready = true; ctx.unstash_all(); }
//
// Semantics:
//   - ctx.stash(message) moves the message into a new envelope at the stash's tail (the handler
//     gives it back: a handler that took it by value has it, not the envelope, which the run
//     destroys as usual). It takes an rvalue: on overflow nothing is moved.
//   - ctx.unstash_all() moves the whole stash, oldest first, in front of the messages the
//     actor has taken from its mailbox and not handled yet: they are handled before anything
//     newer, in their original order, each once (a message stashed again goes to the tail of
//     the now empty stash). In a run, the next message handled is the oldest unstashed one.
//   - Bounded (spawn_options::stash_capacity, 1024 by default): a stash beyond it throws
//     stash_overflow, and the message stays with the caller (Akka's StashOverflowException);
//     uncaught, it crashes the actor as any exception does, and a supervisor restarts it.
//   - Exactly once (invariant X extended): a stashed envelope is in exactly one place, the
//     stash or the owner's private list, both owner-only; halt destroys the stash with the
//     mailbox and the private list, whatever the reason (stop, crash, kill, shutdown).
//
// Who touches it: the stash's fields are owner-only (actor_cell.hpp): the owner's run, or a
// handler of the actor (an awaiting handler's steps run on the actor's home executor and own
// the owner-only fields, actor_await.hpp). Outside a run (an interleaved handler's step), an
// unstash leaves work in the private list that the actor, Receiving, would not see: the step's
// end wakes it (wake_for_owner_work).
//
// Counts: a bounded mailbox's count of unhandled messages and the diagnostics' received count
// take the unstashed messages back (they are handled, and counted handled, once more); the
// stash's length is published for snapshots (`stash_length`) and added to the mailbox length.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "spindle/actor/actor_cell.hpp"

namespace spindle {

// Thrown by actor_context::stash when the stash holds spawn_options::stash_capacity messages.
class stash_overflow : public std::runtime_error {
 public:
  explicit stash_overflow(std::uint32_t stash_capacity)
      : std::runtime_error("spindle: the actor's stash is full"), capacity(stash_capacity) {}
  std::uint32_t capacity;
};

namespace actor_detail {

inline constexpr std::uint32_t default_stash_capacity = 1024;

// Owner-only (header). Throws stash_overflow when full (the caller then still owns its message).
inline void check_stash_room(const actor_cell& cell) {
  // relaxed: the owner's own count.
  if (cell.stash_length.load(std::memory_order_relaxed) >= cell.stash_capacity) {
    throw stash_overflow(cell.stash_capacity);
  }
}
// Appends a user envelope (ownership passes) after check_stash_room said there is room.
void stash_envelope(actor_cell& cell, envelope* message) noexcept;
// Moves the stash in front of the private list; returns how many it moved.
std::uint32_t unstash_all(actor_cell& cell) noexcept;
// Halt: destroys what the stash holds.
void destroy_stash(actor_cell& cell) noexcept;

}  // namespace actor_detail
}  // namespace spindle
