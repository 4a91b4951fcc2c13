// The state word of a submission (submission.hpp has the participants and invariants U1-U4):
// the lock-free part alone, a template over the atomics policy (core/atomic.hpp) so the Relacy
// model (tests/model/submission_state_model.cpp) runs this very code.
//
// Bits:
//   phase            - queued -> starting -> running -> complete, or queued -> complete
//   outcome          - value / exception / cancelled; written together with `complete`
//   cancel_pending   - a canceller got there first while it was starting or running
//   waiter           - a thread is (about to be) blocked on the word: the completer notifies
// Every transition is one CAS; callers do the side effects (books, notify, cancelling the task)
// after it, as the return values tell them.
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/core/atomic.hpp"

namespace spindle::detail {

enum class submission_outcome : std::uint32_t { value = 0, exception = 1, cancelled = 2 };

template <class Atomics = core::std_atomics>
class submission_state {
 public:
  enum : std::uint32_t {
    phase_mask = 3u,
    queued = 0u,
    starting = 1u,
    running = 2u,
    complete = 3u,
    outcome_shift = 2,
    outcome_mask = 3u << outcome_shift,
    cancel_pending = 1u << 4,
    waiter = 1u << 5,
  };
  enum class cancel_result {
    already_final,       // complete, or another canceller came first: nothing to do
    completed_in_queue,  // it was queued: now complete(cancelled); books and notify to do
    left_to_starter,     // it was starting: the worker's publish_running() will cancel it
    cancel_running,      // it is running: the caller cancels it (U2: running_task_ is readable)
  };

  bool is_complete() const noexcept {
    // acquire: U1, the outcome is readable once complete is seen.
    return (word_.load(std::memory_order_acquire) & phase_mask) == complete;
  }
  bool is_running() const noexcept {
    // acquire: pairs with the CAS that made it running.
    return (word_.load(std::memory_order_acquire) & phase_mask) == running;
  }
  submission_outcome final_outcome() const noexcept {
    // relaxed: called after complete was observed with acquire.
    return static_cast<submission_outcome>((word_.load(std::memory_order_relaxed) & outcome_mask) >>
                                           outcome_shift);
  }

  // A waiter announces itself; returns the word after. If that is not complete, the completer
  // will see the bit and notify (both are RMWs on the word: one of them comes second).
  std::uint32_t announce_waiter() noexcept {
    // acq_rel: acquire for the outcome if already complete (U1); the RMW orders the bit
    // against the completer's CAS.
    return word_.fetch_or(waiter, std::memory_order_acq_rel) | waiter;
  }
  std::uint32_t load_acquire() const noexcept {
    return word_.load(std::memory_order_acquire);  // acquire: U1
  }

  // queued -> starting (parallel worker). False if it was cancelled while queued.
  bool try_begin_start() noexcept {
    // acquire on both paths: a submission found complete is final; nothing is published by
    // this step, so no release. The waiter bit is kept.
    std::uint32_t seen = word_.load(std::memory_order_acquire);
    while ((seen & phase_mask) == queued) {
      if (word_.compare_exchange_weak(seen, (seen & ~phase_mask) | starting, std::memory_order_acquire,
                                      std::memory_order_acquire)) {
        return true;
      }
    }
    return false;
  }

  // starting -> running, after the task's handle was stored. True when a canceller came during
  // `starting` (U2): the caller must cancel the task. False as well when it is complete already
  // (the task ran to its end first).
  bool publish_running() noexcept {
    std::uint32_t seen = word_.load(std::memory_order_relaxed);  // relaxed: the CAS decides
    while ((seen & phase_mask) == starting) {
      // release: the handle written before (U2); acquire: a canceller's flag.
      if (word_.compare_exchange_weak(seen, (seen & ~phase_mask) | running, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return (seen & cancel_pending) != 0;
      }
    }
    return false;
  }

  // queued -> running (sequential modes). False if it was cancelled while queued.
  bool try_run() noexcept {
    std::uint32_t seen = word_.load(std::memory_order_acquire);  // acquire: as try_begin_start
    while ((seen & phase_mask) == queued) {
      // acq_rel: a canceller that sees `running` sees the runner's writes before it.
      if (word_.compare_exchange_weak(seen, (seen & ~phase_mask) | running, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return true;
      }
    }
    return false;
  }

  // Any phase -> complete(result). True for the one call that completed it (U1); `notify`
  // then tells whether a waiter announced itself.
  bool try_complete(submission_outcome result, bool& notify) noexcept {
    std::uint32_t seen = word_.load(std::memory_order_relaxed);  // relaxed: the CAS decides
    std::uint32_t next = 0;
    do {
      if ((seen & phase_mask) == complete) return false;
      next = complete | (static_cast<std::uint32_t>(result) << outcome_shift) | (seen & (cancel_pending | waiter));
      // release: the value or exception written before (U1).
    } while (!word_.compare_exchange_weak(seen, next, std::memory_order_acq_rel, std::memory_order_relaxed));
    notify = (seen & waiter) != 0;
    return true;
  }

  cancel_result try_cancel(bool& notify) noexcept {
    std::uint32_t seen = word_.load(std::memory_order_acquire);  // acquire: U2 if running
    for (;;) {
      const std::uint32_t phase = seen & phase_mask;
      if (phase == complete || (seen & cancel_pending) != 0) return cancel_result::already_final;
      std::uint32_t next = seen | cancel_pending;
      if (phase == queued) {
        next = complete | (static_cast<std::uint32_t>(submission_outcome::cancelled) << outcome_shift) |
               (seen & waiter);
      }
      // acq_rel: acquire to read running_task_ after seeing `running` (U2); release so a
      // waiter's acquire of `complete` pairs with it (U1).
      if (word_.compare_exchange_weak(seen, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
        if (phase == queued) {
          notify = (seen & waiter) != 0;
          return cancel_result::completed_in_queue;
        }
        return phase == running ? cancel_result::cancel_running : cancel_result::left_to_starter;
      }
    }
  }

  // For blocking: wait() / notify_all() on the word (std builds only).
  typename Atomics::template atomic<std::uint32_t>& word() noexcept { return word_; }

 private:
  typename Atomics::template atomic<std::uint32_t> word_{queued};
};

}  // namespace spindle::detail
