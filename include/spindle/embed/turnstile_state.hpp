// The state word of a turnstile's block (turnstile.hpp has the participants and the states):
// the lock-free part alone, a template over the atomics policy (core/atomic.hpp) so the Relacy
// model (tests/model/turnstile_state_model.cpp) runs this very code. Every transition is one
// atomic operation; the caller does the side effect (waking the task) the return value asks for.
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/core/atomic.hpp"

namespace spindle::embed::detail {

template <class Atomics = core::std_atomics>
class turnstile_state {
 public:
  enum : std::uint32_t { polling, notified, blocked, done };

  // Any thread, any number of times. True when the caller moved the block out of `blocked`:
  // it must wake the task, exactly once.
  bool wake() noexcept {
    // relaxed: only the CAS expectation; each CAS below carries the ordering.
    std::uint32_t state = word_.load(std::memory_order_relaxed);
    for (;;) {
      if (state == done) return false;
      if (state == blocked) {
        // acq_rel: acquire pairs with try_block's release (what the task wrote before blocking,
        // its registration, is readable by the waker that wakes it).
        if (word_.compare_exchange_weak(state, polling, std::memory_order_acq_rel,
                                        std::memory_order_relaxed)) {
          return true;
        }
        continue;
      }
      // polling or notified. release: what this waker published before wake() reaches the next
      // poll, whose begin_poll exchange reads this value or a later one (acquire). A CAS even
      // when already notified, so that a second waker's data is covered as well.
      if (word_.compare_exchange_weak(state, notified, std::memory_order_release,
                                      std::memory_order_relaxed)) {
        return false;
      }
    }
  }

  // The task, before each poll. acquire, and a read-modify-write: it reads the last value in the
  // word's modification order, so it synchronises with every wake() that marked `notified`
  // before it; a wake() after it finds `polling` and marks again.
  void begin_poll() noexcept { word_.exchange(polling, std::memory_order_acquire); }

  // The task, after a poll that was not ready. True: blocked (suspend; a waker or a canceller
  // will move it out). False: a wake() came during the poll: poll again.
  bool try_block() noexcept {
    std::uint32_t expected = polling;
    // release: the task's registration is written before a waker can see `blocked`. relaxed on
    // failure: the next begin_poll acquires.
    return word_.compare_exchange_strong(expected, blocked, std::memory_order_release,
                                         std::memory_order_relaxed);
  }

  // A canceller (holding the task lock). True: it moved the block out of `blocked` and wakes
  // the task; false: a waker did (and wakes it).
  bool try_cancel() noexcept {
    std::uint32_t expected = blocked;
    // acq_rel: as wake()'s; relaxed on failure: nothing to read.
    return word_.compare_exchange_strong(expected, polling, std::memory_order_acq_rel,
                                         std::memory_order_relaxed);
  }

  // The task, at the end: later wake() calls do nothing. relaxed: nothing is published.
  void finish() noexcept { word_.store(done, std::memory_order_relaxed); }

 private:
  typename Atomics::template atomic<std::uint32_t> word_{polling};
};

}  // namespace spindle::embed::detail
