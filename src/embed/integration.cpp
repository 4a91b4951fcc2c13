// The integration wrappers: the design is in include/spindle/embed/integration.hpp.
#include "spindle/embed/integration.hpp"

namespace spindle::embed {

void reentering_integration::tick_soon() noexcept {
  // seq_cst: ordered after the caller's publication of the work it asks a tick for, and in one
  // total order with begin_tick's store (the class comment's argument).
  std::uint32_t state = state_.load(std::memory_order_seq_cst);
  for (;;) {
    if ((state & in_tick) == 0) {
      inner_.tick_soon();
      return;
    }
    if ((state & requested) != 0) return;  // one held request is enough
    // seq_cst: as the load; a failed CAS reloads and decides again (the tick may have ended).
    if (state_.compare_exchange_weak(state, state | requested, std::memory_order_seq_cst,
                                     std::memory_order_seq_cst)) {
      return;
    }
  }
}

void reentering_integration::begin_tick() noexcept {
  // seq_cst: ordered before the tick's first look at its queues (the class comment).
  state_.store(in_tick, std::memory_order_seq_cst);
}

void reentering_integration::end_tick() noexcept {
  // seq_cst: a request either set `requested` before this exchange (we pass it on) or loads the
  // cleared word after it (it passes itself on).
  if ((state_.exchange(0, std::memory_order_seq_cst) & requested) != 0) inner_.tick_soon();
}

}  // namespace spindle::embed
