// The state word of reentering_integration (integration.hpp has the argument): the lock-free
// part alone, a template over the atomics policy (core/atomic.hpp) so the Relacy model
// (tests/model/reentry_state_model.cpp) runs this very code.
//
// Bits: `in_tick` (between begin_tick and end_tick) and `requested` (a request arrived during
// the tick). Invariant: `requested` is only ever set together with `in_tick`, so end_tick, which
// clears both with one exchange, is the one place that passes a held request on.
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/core/atomic.hpp"

namespace spindle::embed::detail {

template <class Atomics = core::std_atomics>
class reentry_state {
 public:
  enum : std::uint32_t { in_tick = 1u << 0, requested = 1u << 1 };

  // Any thread. True: no tick is running, pass the request on now. False: held for end_tick.
  bool request() noexcept {
    // seq_cst: ordered after the caller's publication of the work it asks a tick for, and in
    // one total order with begin_tick's store (integration.hpp's argument).
    std::uint32_t state = word_.load(std::memory_order_seq_cst);
    for (;;) {
      if ((state & in_tick) == 0) return true;
      if ((state & requested) != 0) return false;  // one held request is enough
      // seq_cst: as the load; a failed CAS reloads and decides again (the tick may have ended).
      if (word_.compare_exchange_weak(state, state | requested, std::memory_order_seq_cst,
                                      std::memory_order_seq_cst)) {
        return false;
      }
    }
  }

  // The ticking thread. seq_cst: ordered before the tick's first look at its queues.
  void begin_tick() noexcept { word_.store(in_tick, std::memory_order_seq_cst); }

  // The ticking thread. True: a request was held, pass it on now. seq_cst: a request either set
  // `requested` before this exchange (returned here) or loads the cleared word after it.
  bool end_tick() noexcept {
    return (word_.exchange(0, std::memory_order_seq_cst) & requested) != 0;
  }

 private:
  typename Atomics::template atomic<std::uint32_t> word_{0};
};

}  // namespace spindle::embed::detail
