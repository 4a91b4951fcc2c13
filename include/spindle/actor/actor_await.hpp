// Handlers that await (issue 17): a behaviour's receive may be a coroutine returning
// spindle::task<void>, so a handler can ask another actor, sleep or do I/O:
//
//   struct session {
//     using message_type = request;
//     spindle::task<void> receive(request& r, spindle::actor_context<request>& ctx) {
//       const int n = co_await store.ask<int>(...);   // the actor handles nothing else meanwhile
//       co_await spindle::sleep_for(5ms);
//       r.reply(n);
//     }
//   };
//
// Semantics (OTP's: one message at a time). While the handler awaits, the actor handles no
// other message: they wait in its mailbox, and so do stop requests. A kill cancels the
// handler (its await in progress throws task_cancelled, as a cancelled task's does) and halts
// the actor when the handler has unwound, before anything else queued: a supervisor's kill
// after a child's stop timeout ends a child whose handler would never end. The actor is Running for the whole handler, sits in no wheel queue, and
// is never migrated (A5: an actor waiting on I/O stays on the executor its I/O completes on;
// the io_guard a synchronous handler takes by hand is implied). An exception escaping the
// handler, before or after it first suspends, crashes the actor as a synchronous handler's
// does; ctx.stop() in it halts the actor when it ends. The message and the context the
// handler was given stay valid until it ends. Not built: interleaving (a behaviour that lets
// other messages in while a handler awaits, as Akka's pipeTo allows): the handler's task may
// run on any worker, so an interleaved handler would race the behaviour's state.
//
// Who takes part, and who owns the cell when:
//   1. the owner's run calls the behaviour's receive, which returns the handler's task (not
//      started); handle() wraps it (prepare_awaiting_handler): the wrapper owns the envelope
//      from then on (the run's destroy of it is made a no-op) and one reference to the cell;
//   2. the run sees `awaiting_handler`, writes what it has left to write (statistics, the time
//      used, placement awaiting), and only then spawns the wrapper as a task on its executor
//      (start_awaiting_handler). From here the wrapper's task owns the cell's owner-only fields:
//      the owner touches an awaiting actor nowhere (it is in no queue; senders only push, since
//      they wake an actor only out of Receiving);
//   3. the handler runs as an ordinary task (the task budget and time slicing apply to it; a
//      thief may run it), then the wrapper destroys the envelope, writes the outcome
//      (`handler_crash`, `handler_ended`), places the actor back (idle) and moves it Running ->
//      Runnable (seq_cst, as a sender's winning CAS: invariant W, one wake) and routes the wake
//      to its home, which the executor message (or the same thread) orders after those writes;
//   4. the owner's next run of it first carries out the outcome (a crash or a stop halts it),
//      then handles its queued messages.
// Shutdown: tasks are abandoned before actors halt (runtime shutdown steps 5 and 6). An
// abandoned wrapper destroys the handler's frame, then the envelope, and drops its reference
// without waking anyone; the actor, still in its home's list, halts in step 6 with the others.
//
// Cost: a synchronous handler pays nothing new per message but one flag test per message and
// one per run; an awaiting handler costs one task spawn (a frame, a queue push) and one wake.
#pragma once

#include <exception>

#include "spindle/actor/actor_cell.hpp"
#include "spindle/task/task.hpp"

namespace spindle::actor_detail {

// Whether T is a spindle::task<...>: a receive returning one other than task<void>, or a hook
// (on_start, on_down, on_exit) returning one, is refused at compile time: the lazy task would
// be dropped unrun (the attack found all three silently doing nothing).
template <class T>
inline constexpr bool is_task = false;
template <class T>
inline constexpr bool is_task<task<T>> = true;

// Step 1 (the owner, inside handle()): takes the envelope and the handler's task; sets
// `awaiting_handler`. Nothing is changed if it throws (out of memory: the handler's crash).
void prepare_awaiting_handler(actor_cell& cell, envelope& message, task<void> handler);
// Step 2 (the owner, at the end of the run): spawns the prepared wrapper on the calling
// executor, cancellable through the cell's handler_stop. Returns the error if it could not
// (the caller halts the actor: still the owner).
std::exception_ptr start_awaiting_handler(actor_cell& cell) noexcept;
// kill(), any thread: marks the kill and cancels a handler in progress (its await throws
// task_cancelled; the actor then halts, killed, when the wrapper hands it back).
void cancel_awaiting_handler(actor_cell& cell) noexcept;

}  // namespace spindle::actor_detail
