// Fork-join machinery shared by fork_join and the loop algorithms: latent frames, the per-thread
// fork state, heartbeats, promotion, merging. The design (seed 001, docs/design/fork-join.md):
//
// Who takes part:
//   - the *owner*: a worker thread running a fork-join computation on its own native stack;
//   - *thieves*: other workers that take a promoted continuation from the owner's offer board
//     (core/offer_board.hpp) and run it as its *delegate*.
//
// A fork records its right continuation as a *latent frame* on the owner's stack (the C++
// stack frame of the fork_join call) and pushes a pointer to it on the thread's frame stack
// (`fork_thread_state::frames`, a bounded array). Then it runs the left branch inline, pops the
// pointer and, if the frame is still latent, runs the right branch inline too: a fork nobody took
// costs a few stores and no atomic operation.
//
// Heartbeat: every fork (and every loop element) counts down `countdown`; at zero the owner reads
// the clock (the countdown is calibrated so that happens about four times per quantum) and, once
// per quantum, *promotes*: it scans the frame stack from the bottom (the most basal frame) for a
// latent frame that existed for the whole previous quantum (its epoch is at least two heartbeats
// old), turns its right continuation into a `delegated_work` and publishes it on the executor's
// offer board; a second one only if an executor is parked (the seed's "at most two per theft").
// Then it wakes an idle executor, preferring the least utilised of two random ones.
//
// Frame states (owner-only field `published`): latent (null) -> published (the delegated work).
// Published work is then either withdrawn by the owner (board CAS, B1 in offer_board.hpp: the
// owner runs it inline as if it had never been offered) or taken by exactly one thief.
//
// Merge (invariant M): the delegate writes its result (or exception) into the delegated work,
// then stores `unmerged = 0` with release; the owner reads `unmerged == 0` with acquire before it
// reads the result. After its release store the delegate does not touch the work again (the
// owner may return and pop the stack frame holding it); it wakes the owner through the owner's
// executor parker, whose address it read before the store (the parker lives as long as the
// runtime).
//
// Waiting (F4): an owner whose published work was taken waits for the merge and meanwhile runs
// other published work (the thief's board first, then its own, then everyone's), nested on its
// stack at most `max_help_depth` deep, so the stack stays bounded; with nothing to run it spins
// briefly, then parks with a short timeout.
//
// Bounded memory (F5): latent frames live in the C++ frames of the computation itself; at most
// `frame_capacity` of them per thread are registered (deeper forks run serially), at most the
// board's slot count are published per executor, and help nesting is bounded.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>

#include "spindle/core/executor.hpp"
#include "spindle/core/runnable.hpp"

namespace spindle {

// Process-wide fork-join counters (relaxed, for tests and diagnostics).
struct fork_counters {
  std::uint64_t promoted = 0;   // right continuations published at a heartbeat
  std::uint64_t withdrawn = 0;  // ... of which the owner took back and ran inline
  std::uint64_t delegated = 0;  // ... of which another worker ran (a theft)
  std::uint64_t helped = 0;     // delegated work run by a worker while it waited for a merge
  std::uint64_t heartbeats = 0;
};
fork_counters fork_statistics() noexcept;

namespace fork_detail {

inline constexpr std::uint32_t no_thief = ~std::uint32_t(0);

// A right continuation once it is published: runnable by whoever takes it from the board.
struct delegated_work : core::runnable {
  explicit delegated_work(const core::runnable_vtable* table) noexcept : runnable(table) {}
  // 1 from publication until the delegate merged (invariant M).
  std::atomic<std::uint32_t> unmerged{1};
  // The executor running it: where the waiting owner looks for work first (leapfrogging).
  std::atomic<std::uint32_t> thief{no_thief};
  core::park_driver* owner_parker = nullptr;  // set by the owner before publication
  std::uint32_t slot = 0;                     // board slot, owner-only
  std::exception_ptr error;                   // written by the delegate before the merge
};

// What the frame stack points at. `promote` turns the frame's right continuation into delegated
// work (constructed in storage inside the frame), or returns null if there is nothing worth
// offering (a loop with fewer than two elements left).
struct latent_frame {
  delegated_work* (*promote)(latent_frame*) noexcept;
  std::uint64_t epoch;                   // the owner's heartbeat epoch when pushed
  delegated_work* published = nullptr;   // null while latent; owner-only
};

struct fork_thread_state {
  // The frame stack: [frames, top) are registered, top == limit means full. All null on a thread
  // that is not a worker (every fork runs serially). Pointers rather than indices: a fork's
  // push and pop are then two stores with nothing to compute.
  latent_frame** frames = nullptr;
  latent_frame** top = nullptr;
  latent_frame** limit = nullptr;
  // Ticks (forks, loop elements) left before the next clock check.
  std::int64_t countdown = std::int64_t(1) << 62;
  std::uint64_t epoch = 2;  // epoch 0 frames are eligible at the first heartbeat
  std::int64_t interval = 1;
  std::uint64_t last_check_ns = 0;
  std::uint64_t next_heartbeat_ns = 0;
  std::uint64_t quantum_ns = 0;
  std::uint32_t help_depth = 0;
  std::uint32_t random_state = 1;
  core::executor* executor = nullptr;
};

inline constexpr std::uint32_t frame_capacity = 1024;
inline constexpr std::uint32_t max_help_depth = 16;

// The calling thread's state; set on a worker's first fork, null until then.
extern thread_local constinit fork_thread_state* current_state;
// Slow path of thread_state(): a worker gets its own state, any other thread the serial one.
fork_thread_state* attach_thread() noexcept;

inline fork_thread_state* thread_state() noexcept {
  fork_thread_state* state = current_state;
  return state != nullptr ? state : attach_thread();
}

// The countdown reached zero: calibrate, and promote if a quantum has passed.
void on_countdown(fork_thread_state* state) noexcept;

// Owner: takes published work back; true if no thief took it (the owner runs it itself).
bool withdraw(fork_thread_state* state, delegated_work* work) noexcept;
// Owner: waits until the delegate of `work` merged, running other published work meanwhile.
void wait_for_merge(fork_thread_state* state, delegated_work* work) noexcept;
// Delegate: called when it starts running `work` and when it is done (the merge).
void begin_delegate(delegated_work* work) noexcept;
void finish_delegate(delegated_work* work) noexcept;
// Owner: the frame is off the stack because its left side threw; settle the published work.
inline void settle_after_exception(fork_thread_state* state, latent_frame& frame) noexcept {
  if (frame.published != nullptr && !withdraw(state, frame.published)) {
    wait_for_merge(state, frame.published);
  }
}

// Published work is never queued where shutdown drains (only on boards, which owners empty).
void drop_delegated(core::runnable* self) noexcept;

}  // namespace fork_detail
}  // namespace spindle
