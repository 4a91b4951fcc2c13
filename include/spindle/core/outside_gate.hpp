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
// Why it holds (Dekker, every operation below seq_cst): an entrant counts itself in, then reads
// `closed_`; the closer sets `closed_`, then reads the count. In the single total order of seq_cst
// operations, either the entrant's read comes after the closer's store (it sees closed, leaves
// and is refused) or the entrant's increment comes before the closer's read (the closer sees it
// inside and waits for its leave).
//
// Who may touch what: `inside_` and `closed_` are written only through these functions. An
// entrant holds the gate for a few instructions (a push, a wake); it never blocks inside, and
// never closes a gate (a shutdown is never called from inside a span), so the closer's wait is
// bounded by those instructions plus the entrant's scheduling delay.
//
// Cost: an admitted span is two uncontended read-modify-writes on a line that only entrants
// write. The line must not be one that hot readers share: in runtime_core the count once sat
// beside `stopping_`/`draining_`, which every schedule() reads, and the bouncing line doubled
// the submit benchmark's time (docs/design/lifetimes.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "spindle/core/atomic.hpp"

namespace spindle::core {

// Aligned (and so padded) to a cache line: see Cost above; only entrants and the closer touch it.
class alignas(cache_line_size) outside_gate {
 public:
  outside_gate() = default;
  outside_gate(const outside_gate&) = delete;
  outside_gate& operator=(const outside_gate&) = delete;

  // True: admitted; call leave() when done. False: closed; the caller must not touch the host's
  // tasks (and does not leave).
  bool enter() noexcept {
    // seq_cst (both): the entrant's half of the Dekker handshake above.
    inside_.fetch_add(1, std::memory_order_seq_cst);
    if (closed_.load(std::memory_order_seq_cst)) {
      leave();
      return false;
    }
    return true;
  }

  // The entrant's last touch of the host: the closer may go on (and free the host) right after.
  void leave() noexcept {
    // release: what the entrant did inside (a push, a wake) happens before the closer's acquire
    // read of the count, so the closer's drain sees it.
    inside_.fetch_sub(1, std::memory_order_release);
  }

  // The closer, once. Entrants leave within a few instructions, so yielding is enough; a
  // notification would touch the gate after the entrant's last decrement.
  void close_and_wait() noexcept {
    // seq_cst: the closer's half of the Dekker handshake.
    closed_.store(true, std::memory_order_seq_cst);
    // seq_cst load: ordered after the store above; it also acquires each leave's release.
    while (inside_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }

  bool closed() const noexcept {
    // relaxed: a hint for callers that will enter() anyway before touching anything.
    return closed_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint32_t> inside_{0};
  std::atomic<bool> closed_{false};
};

}  // namespace spindle::core
