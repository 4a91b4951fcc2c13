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
// Semantics (OTP's: one message at a time, unless the behaviour interleaves, below). While the
// handler awaits, the actor handles no other message: they wait in its mailbox, and so do stop
// requests. A kill cancels the handler (its await in progress throws task_cancelled, as a
// cancelled task's does) and halts the actor when the handler has unwound, before anything
// else queued: a supervisor's kill after a child's stop timeout ends a child whose handler would
// never end. The actor is Running for the whole handler, sits in no wheel queue, and is never
// migrated (A5: an actor waiting on I/O stays on the executor its I/O completes on; the
// io_guard a synchronous handler takes by hand is implied). An exception escaping the handler,
// before or after it first suspends, crashes the actor as a synchronous handler's does;
// ctx.stop() in it halts the actor when it ends. The message and the context the handler was
// given stay valid until it ends.
//
// Where a handler runs: always on the actor's home executor. Its task is a spawned task whose
// runnable entry is a gate (handler_task): run on another executor (a thief took it, a waker
// there queued it), the gate sends it home (the home's inbox) instead of running it. So every
// step of a handler (from a resumption to its next suspension) runs on the one thread that
// also runs the actor's messages: the handler's steps and the actor's runs never overlap, and
// whatever a step writes of the cell is ordered before the next run by that thread's program
// order. Nothing moves the home meanwhile (no migration while a handler is in flight, above
// and below).
//
// Time (A3): the gate times each step on the coarse clock, as run_actor times a run, and
// charges it to the actor's quantum (time_used_ns; past the time slice its reductions are
// zeroed, so it waits a turn at its next run), with what the step charged by ctx.charge. A
// handler that computes for a while between its awaits thus pays for it as a synchronous one
// does, instead of starting its next message with a full quantum.
//
// Interleaving (`static constexpr bool interleaves = true;` in the behaviour): while a handler
// awaits, the actor handles its other messages (Akka's and CAF's re-entrancy; Orleans'
// [Reentrant]). Its first step runs inside the run that took the message, as a synchronous
// handler does (a become or a stash before its first await applies to the next message); the
// run then goes on with the next message. Later steps run when their awaits complete, through
// the gate, between runs of the actor: one step or one message at a time, all on the home
// executor, so never two threads in the behaviour. What it costs the behaviour: its state may
// change across an await (another message ran), as in any re-entrant actor. The actor is
// never migrated while such handlers are in flight (they count in io_in_flight, the implied
// io_guard). A halt waits for them: a stop (ctx.stop, a stop request), a crash, a kill or a
// linked exit marks the actor halting (it handles nothing more), cancels every handler in
// flight (their awaits throw task_cancelled), and the actor halts with that first reason once
// the last one has unwound; what they end with changes nothing then. A behaviour that wants
// its handlers to finish before it stops intercepts the stop request (on_stop_request) and
// calls ctx.stop() when they are done.
//
// Who takes part, and who owns the cell when (not interleaving):
//   1. the owner's run calls the behaviour's receive, which returns the handler's task (not
//      started); handle() wraps it (prepare_awaiting_handler): the wrapper owns the envelope
//      from then on (the run's destroy of it is made a no-op) and one reference to the cell;
//   2. the run sees `awaiting_handler`, writes what it has left to write (statistics, the time
//      used, placement awaiting), and only then spawns the wrapper as a task on its executor
//      (start_awaiting_handler). From here the wrapper's task owns the cell's owner-only fields:
//      the owner touches an awaiting actor nowhere (it is in no queue; senders only push, since
//      they wake an actor only out of Receiving);
//   3. the handler runs as a task, step by step on the home executor (the gate); then the
//      wrapper destroys the envelope, writes the outcome (`handler_crash`, `handler_ended`),
//      places the actor back (idle) and moves it Running -> Runnable (seq_cst, as a sender's
//      winning CAS: invariant W, one wake) and routes the wake to its home, which is the
//      calling thread: the wake is queued at once, and the owner's next run comes after the
//      gate's charge of that last step;
//   4. the owner's next run of it first carries out the outcome (a crash or a stop halts it),
//      then handles its queued messages.
// Interleaving: step 1 as above; step 2 starts the wrapper's task inside the run (its first
// step runs there) and counts it in handlers_in_flight; the owner-only fields are shared in
// time between the runs and the steps, all on the home thread. The wrapper's end counts it out,
// keeps the first crash, and asks the run's attention (`handler_ended`) for a crash, or for the
// last handler of a halting actor; the gate's charge after a step wakes the actor if it waits
// Receiving with such work (wake_for_owner_work), or with messages an unstash put back.
// Shutdown: tasks are abandoned before actors halt (runtime shutdown steps 5 and 6). An
// abandoned wrapper destroys the handler's frame, then the envelope, and drops its reference
// without waking anyone; the actor, still in its home's list, halts in step 6 with the others.
//
// Cost: a synchronous handler pays nothing new per message but one flag test per message and
// one per run; an awaiting handler costs one task spawn (a frame, a queue push) and one wake,
// and per step two coarse-clock loads (and a hop to the home's inbox when woken elsewhere).
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
// Step 2 of an interleaving behaviour (the owner, in the run): starts the prepared wrapper and
// runs its first step now; counted in handlers_in_flight. The error if it could not start.
std::exception_ptr start_interleaved_handler(actor_cell& cell) noexcept;
// The owner, halting an interleaving actor with handlers in flight: cancels them all.
void cancel_handlers_in_flight(actor_cell& cell) noexcept;
// kill(), any thread: marks the kill and cancels a handler in progress (its await throws
// task_cancelled; the actor then halts, killed, when the wrapper hands it back).
void cancel_awaiting_handler(actor_cell& cell) noexcept;

}  // namespace spindle::actor_detail
