// The gate to outside threads: how a thread that is not one of a host's own threads touches the
// host's tasks without racing the host's shutdown (issue 14, items 1 and 2).
//
// Who takes part:
//   - entrants: threads that are not the host's own (a plain thread spawning, a dispatcher
//     submitter setting an event, a canceller, a worker of another runtime waking a task here).
//     Each brackets a short span in which it touches one of the host's tasks or the host itself
//     (a spawn between its stopping check and its push; a waker between popping a waiter under a
//     primitive's lock and scheduling the waiter's task) with enter() ... leave().
//   - the closer: the host's shutdown, once, before it drops queued work and destroys suspended
//     tasks. close_and_wait() refuses new entrants and waits until those inside have left.
//
// States: open (enter() admits), closed (enter() refuses). Closing is one-way.
//
// Invariant: once close_and_wait() returned, no entrant is inside and none will be admitted, so
// the host may destroy its tasks and itself.
//
// Why it holds: Dekker, made asymmetric because entrants are many and hot (every spawn from a
// plain thread) and closers rare (one per shutdown). Each thread that ever enters a gate owns a
// slot (a depth, written only by that thread) in one process-wide registry. An entrant raises its
// depth, issues the light half of an asymmetric fence, then reads `closed_`; a leave lowers the
// depth (release). The closer sets `closed_`, issues the heavy half (membarrier: every thread of
// the process running at that moment executes a full barrier), then waits, slot by slot, until
// each depth is zero. Either the entrant's read of `closed_` comes after the closer's store (it is
// refused) or its raised depth is visible to the closer (which waits for its leave). The slot
// also names the gate its thread is inside (or "several"), and a closer waits only for threads
// inside its own gate or several: user code can run inside a span (a callable's move constructor
// in a spawn, an embedded host's tick_soon() in a wake) and might block on a lock held by the
// thread that closes an unrelated gate.
//
// Without membarrier (an old kernel, or a seccomp filter refusing it) both halves are seq_cst
// fences; under ThreadSanitizer, which models neither, both are the atomics layer's fence-free
// substitute (core/atomic.hpp).
//
// Who may touch what: a slot's depth is written by its thread only; the registry (a list under
// a mutex) by threads registering on their first entry and leaving at thread exit, and read by
// closers. `closed_` is written once by the closer. An entrant holds the gate for a few
// instructions (a push, a wake); it never blocks inside and never closes a gate (a shutdown is
// never called from inside a span), so the closer's wait is bounded by those instructions plus the
// entrant's scheduling delay.
//
// Entering without knowing the host (enter_unknown_host). A task's completer wakes the task that
// joins it, which may belong to another host; it must be inside that host's gate before it takes
// the joiner over, but it can learn the host only by reading the joiner, which is what the gate
// protects. So closers are also counted process-wide (`closers in flight`, from close_and_wait to
// finished(), which the host calls once its tasks are destroyed), and an unknown-host entrant
// raises its depth, fences, and is admitted only when no closer is in flight; otherwise it lowers
// its depth and retries once they finished (same Dekker argument, with the count in place of
// `closed_`). A thread that is itself closing does not wait (two shutdowns would each wait for the
// other): it goes on unprotected, the one window left (docs/design/lifetimes.md).
//
// Cost: an admitted span is two plain stores to a line of the thread's own and a compiler barrier.
// The first version (a shared counter beside `stopping_`/`draining_` in runtime_core, which every
// schedule() reads) doubled the submit benchmark's time; a counter on a line of its own still cost
// 17-29% (two locked instructions per spawn); see docs/design/lifetimes.md.
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/core/atomic.hpp"

namespace spindle::core {

// The light and heavy halves of the asymmetric fence above (outside_gate.cpp).
void asymmetric_fence_light() noexcept;
void asymmetric_fence_heavy() noexcept;

class outside_gate {
 public:
  outside_gate() = default;
  outside_gate(const outside_gate&) = delete;
  outside_gate& operator=(const outside_gate&) = delete;

  // True: admitted; call leave() when done. False: closed; the caller must not touch the host's
  // tasks (and does not leave).
  bool enter() noexcept;
  // The entrant's last touch of the host: the closer may go on (and free the host) right after.
  void leave() noexcept;
  // The closer, once: refuses new entrants, then waits until no thread is inside any gate.
  void close_and_wait() noexcept;
  // The closer, once, after close_and_wait(), when the host's tasks are destroyed.
  void finished() noexcept;

  // For a thread about to touch a task of a host it cannot name yet (see above). Returns once
  // admitted; then call leave_unknown_host().
  static void enter_unknown_host() noexcept;
  static void leave_unknown_host() noexcept;

  bool closed() const noexcept {
    // relaxed: a hint for callers that will enter() anyway before touching anything.
    return closed_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<bool> closed_{false};  // read by entrants, written once: shares no hot line
  bool counted_ = false;             // the closer's: counted among the closers in flight
};

}  // namespace spindle::core
