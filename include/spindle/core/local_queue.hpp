// Per-executor run queue: a bounded ring the owner uses as a stack (newest first) and other
// executors steal the oldest half of.
//
// Participants
//   owner   - the executor the queue belongs to: push (newest end), push_oldest (oldest end),
//             pop (newest end), pop_oldest (oldest end).
//   thieves - any other executor: steal_into (the oldest half of the ring).
//   readers - anyone: size (published load for P2C placement, parking re-checks).
//
// State: one 64-bit word `positions` holding three 16-bit ring positions (free-running,
// compared modulo 2^16), and the cells.
//   tail  - one past the newest item.
//   real  - the oldest item not claimed by a thief.
//   steal - the oldest cell a thief may still be reading; steal == real when no theft is in
//           flight. A thief moves `real` forward (claiming items), copies the cells, then moves
//           `steal` up to `real` (releasing them).
// Every change to the word is a CAS, so a thief's claim is validated against the same `tail`
// the owner last published: the owner popping from the newest end and a thief claiming from the
// oldest end can never both take one item.
//
// Invariants
//   (Q1) steal <= real <= tail and tail - steal <= Capacity (modulo 2^16).
//   (Q2) cells in [real, tail) hold queued items; cells in [steal, real) are being copied by the
//        one thief in flight; the owner writes only cells outside [steal, tail).
//   (Q3) at most one theft is in flight (a thief that sees steal != real backs off), so only the
//        thief that moved `real` away from `steal` moves `steal`.
//
// Order of work. The owner runs newest first: depth-first through fork/spawn trees, cache-warm,
// and the number of live tasks stays proportional to the tree depth, not its width. Thieves take
// the oldest (largest) pieces. Normal thefts take floor(n/2) items, so the newest item (the one
// the owner runs next: the "LIFO slot" of Tokio-style queues) stays with its owner and a task is
// never bounced between executors just because another one is idle. A thief that has seen the
// owner stuck in one runnable for a whole check interval steals ceil(n/2) instead, which includes
// the newest item when it is the only one: a queued task is never held hostage by a task that
// does not yield. Starvation of old items under a steady stream of new ones is bounded by the
// executor popping from the oldest end: once a woken item has waited a service interval, and
// after a very long run of iterations whatever the item (see executor.hpp).
#pragma once

#include <cstdint>

#include "spindle/core/atomic.hpp"

namespace spindle::core {

template <class T, std::uint32_t Capacity = 256, class Atomics = std_atomics>
class local_queue {
  static_assert(Capacity >= 2 && Capacity <= (1u << 15) && (Capacity & (Capacity - 1)) == 0,
                "capacity: a power of two, at most 2^15");
  template <class U>
  using atomic = typename Atomics::template atomic<U>;
  static constexpr std::uint32_t mask = Capacity - 1;

  struct unpacked {
    std::uint16_t steal, real, tail;
  };
  static unpacked unpack(std::uint64_t word) {
    return {std::uint16_t(word >> 32), std::uint16_t(word >> 16), std::uint16_t(word)};
  }
  static std::uint64_t pack(std::uint16_t steal, std::uint16_t real, std::uint16_t tail) {
    return (std::uint64_t(steal) << 32) | (std::uint64_t(real) << 16) | tail;
  }
  static std::uint16_t distance(std::uint16_t from, std::uint16_t to) {
    return std::uint16_t(to - from);
  }

 public:
  static constexpr std::uint32_t capacity = Capacity;

  local_queue() {
    for (auto& cell : cells_) cell.store(nullptr, std::memory_order_relaxed);
  }
  local_queue(const local_queue&) = delete;
  local_queue& operator=(const local_queue&) = delete;

  // Owner. Puts `item` at the newest end. If the ring is full, first moves the oldest half of it
  // out through overflow(T** items, uint32_t count) (the executor hands them to the global
  // injector as one batch), then queues `item`: the item pushed stays here, where its
  // executor's woken-task turn can find it (a task woken beside yielders that kept the ring
  // full went to the back of the injector with the half, and waited 150-230 ms behind 20,000
  // of them). Returns the number of items queued afterwards.
  template <class Overflow>
  std::uint32_t push(T* item, Overflow&& overflow) {
    // acquire: pairs with the thief's release of `steal`: cells it copied are free again (Q2).
    std::uint64_t word = positions_.load(std::memory_order_acquire);
    for (;;) {
      const unpacked p = unpack(word);
      if (distance(p.steal, p.tail) < Capacity) {
        // relaxed: the cell is outside [steal, tail), nobody reads it until the CAS publishes it.
        cells_[p.tail & mask].store(item, std::memory_order_relaxed);
        // seq_cst: release so a thief that acquires the new tail sees the cell's contents, and
        // seq_cst so the push doubles as the publishing side of the parking handshake
        // (runtime_core::notify_after_seq_cst_publish). On x86 this is the same instruction.
        // acquire on failure: the same as the initial load.
        if (positions_.compare_exchange_weak(word, pack(p.steal, p.real, std::uint16_t(p.tail + 1)),
                                             std::memory_order_seq_cst, std::memory_order_acquire)) {
          return distance(p.real, p.tail) + 1u;
        }
        continue;  // a thief claimed or released items: recompute against the new word
      }
      if (p.steal != p.real) {
        // A theft is freeing space right now; hand just this item over rather than wait.
        T* single[1] = {item};
        overflow(single, 1);
        return distance(p.real, p.tail);
      }
      if (move_half_to_overflow(word, overflow)) {
        // acquire: as the initial load (the word moved: our own claim, and any thief's).
        word = positions_.load(std::memory_order_acquire);
        continue;  // room for the item now
      }
    }
  }

  // Owner. Puts `item` at the oldest end: it runs after everything queued now (yield).
  template <class Overflow>
  void push_oldest(T* item, Overflow&& overflow) {
    std::uint64_t word = positions_.load(std::memory_order_acquire);  // acquire: as in push
    for (;;) {
      const unpacked p = unpack(word);
      if (distance(p.steal, p.tail) >= Capacity || p.steal != p.real) {
        // Full, or a thief is reading just below `real`: the injector keeps it behind the rest.
        T* single[1] = {item};
        overflow(single, 1);
        return;
      }
      const std::uint16_t below = std::uint16_t(p.real - 1);
      // relaxed: the cell below steal is outside [steal, tail); published by the CAS below.
      cells_[below & mask].store(item, std::memory_order_relaxed);
      // release: publishes the cell to thieves that acquire the word.
      if (positions_.compare_exchange_weak(word, pack(below, below, p.tail), std::memory_order_release,
                                           std::memory_order_acquire)) {
        return;
      }
    }
  }

  // Owner. The newest item, or null.
  T* pop() {
    // acquire: pairs with thieves' CASes, so we see their claims before choosing an item.
    std::uint64_t word = positions_.load(std::memory_order_acquire);
    for (;;) {
      const unpacked p = unpack(word);
      if (p.real == p.tail) return nullptr;
      const std::uint16_t newest = std::uint16_t(p.tail - 1);
      // acq_rel: acquire as above; release keeps our later cell writes after the claim.
      if (positions_.compare_exchange_weak(word, pack(p.steal, p.real, newest), std::memory_order_acq_rel,
                                           std::memory_order_acquire)) {
        return cells_[newest & mask].load(std::memory_order_relaxed);  // relaxed: we wrote it
      }
    }
  }

  // Owner. The oldest item, or null (fairness: see the header comment).
  T* pop_oldest() {
    std::uint64_t word = positions_.load(std::memory_order_acquire);  // acquire: as in pop
    for (;;) {
      const unpacked p = unpack(word);
      if (p.real == p.tail) return nullptr;
      const std::uint16_t next_real = std::uint16_t(p.real + 1);
      // With no theft in flight steal and real move together (Q3).
      const std::uint16_t next_steal = p.steal == p.real ? next_real : p.steal;
      if (positions_.compare_exchange_weak(word, pack(next_steal, next_real, p.tail),
                                           std::memory_order_acq_rel, std::memory_order_acquire)) {
        return cells_[p.real & mask].load(std::memory_order_relaxed);  // relaxed: we wrote it
      }
    }
  }

  // Thief (never the owner of *this). Moves the oldest floor(n/2) items, or ceil(n/2) with
  // `include_newest` (the owner is stuck), into `destination` (owned by the caller) and returns
  // one of them; null when there was nothing to take or another theft is in flight.
  T* steal_into(local_queue& destination, bool include_newest = false) {
    // acquire: pairs with the destination's thieves' releases (we will write its cells).
    const unpacked mine = unpack(destination.positions_.load(std::memory_order_acquire));
    if (distance(mine.steal, mine.tail) > Capacity / 2) return nullptr;  // we have plenty
    std::uint16_t first = 0;
    const std::uint32_t count = claim(include_newest, first);
    if (count == 0) return nullptr;
    // The oldest claimed item runs now; the others go to the destination's newest end in their
    // original order. They fit: at most Capacity/2 are claimed and the destination had at most
    // Capacity/2 cells in use.
    T* returned = cells_[first & mask].load(std::memory_order_relaxed);
    for (std::uint32_t i = 1; i < count; ++i) {
      // relaxed: Q2, the claimed cells cannot be rewritten until we release them below; their
      // contents were made visible by the acquire in claim(). Destination cells at and above its
      // tail are ours to write (Q2 for the destination) and are published by the CAS below.
      T* item = cells_[(first + i) & mask].load(std::memory_order_relaxed);
      destination.cells_[(mine.tail + i - 1) & mask].store(item, std::memory_order_relaxed);
    }
    release_claim();
    if (count > 1) destination.publish_tail(std::uint16_t(mine.tail + count - 1));
    return returned;
  }

  // Anyone. Number of queued items; exact for the owner, a snapshot for everyone else.
  std::uint32_t size() const {
    // seq_cst: the parking re-check's side of the handshake (see push); no data is read through
    // it, and on x86 a seq_cst load is a plain load.
    const unpacked p = unpack(positions_.load(std::memory_order_seq_cst));
    return distance(p.real, p.tail);
  }
  bool empty() const { return size() == 0; }

  // Owner. Position of the oldest queued item: it changes exactly when that item leaves (or a
  // yield puts an older one in front), so the executor can tell how long it has been waiting.
  std::uint16_t oldest_position() const {
    // relaxed: the owner reads a word only it and thieves change; a stale value only delays the
    // fairness pop.
    return unpack(positions_.load(std::memory_order_relaxed)).real;
  }
  // Owner, right after a push: the position of the item it queued (unless the push moved it
  // to the overflow with half of the ring, which makes holds_position false or names another
  // item: the executor's use of it tolerates both, see executor.cpp look_at_waiting_woken).
  std::uint16_t newest_position() const {
    // relaxed: only the owner moves `tail`.
    return std::uint16_t(unpack(positions_.load(std::memory_order_relaxed)).tail - 1);
  }
  // Owner. Whether `position` is still between the oldest and the newest queued item: false
  // once that item, or any newer one, was taken from the oldest end (stolen, popped oldest, moved
  // to the overflow), or every item from it up was popped from the newest end.
  bool holds_position(std::uint16_t position) const {
    // relaxed: as in oldest_position; a stale `real` only delays the answer by one look.
    const unpacked p = unpack(positions_.load(std::memory_order_relaxed));
    return distance(p.real, position) < distance(p.real, p.tail);
  }

 private:
  // Thief: claims items by moving `real`; `first` receives the oldest claimed position.
  std::uint32_t claim(bool include_newest, std::uint16_t& first) {
    // acquire: pairs with the owner's release CAS in push, making claimed cells' contents visible.
    std::uint64_t word = positions_.load(std::memory_order_acquire);
    for (;;) {
      const unpacked p = unpack(word);
      if (p.steal != p.real) return 0;  // Q3: another thief is mid-theft
      const std::uint32_t available = distance(p.real, p.tail);
      const std::uint32_t count = include_newest ? available - available / 2 : available / 2;
      if (count == 0) return 0;
      // acq_rel: acquire as above; release orders nothing we wrote but keeps the CAS symmetric.
      if (positions_.compare_exchange_weak(word, pack(p.steal, std::uint16_t(p.real + count), p.tail),
                                           std::memory_order_acq_rel, std::memory_order_acquire)) {
        first = p.real;
        return count;
      }
    }
  }

  // Owner: makes cells up to `new_tail` (already written) visible.
  void publish_tail(std::uint16_t new_tail) {
    std::uint64_t word = positions_.load(std::memory_order_relaxed);  // relaxed: CAS re-checks
    for (;;) {
      const unpacked p = unpack(word);
      // release: the cells written before are visible to whoever acquires the new tail.
      if (positions_.compare_exchange_weak(word, pack(p.steal, p.real, new_tail), std::memory_order_release,
                                           std::memory_order_relaxed)) {
        return;
      }
    }
  }

  // Thief: moves `steal` up to the current `real`, freeing the copied cells for the owner.
  void release_claim() {
    std::uint64_t word = positions_.load(std::memory_order_relaxed);  // relaxed: CAS re-checks
    for (;;) {
      const unpacked p = unpack(word);
      // release: our cell reads happen before the owner may reuse the cells (Q2).
      if (positions_.compare_exchange_weak(word, pack(p.real, p.real, p.tail), std::memory_order_release,
                                           std::memory_order_relaxed)) {
        return;
      }
    }
  }

  // Owner, ring full and no theft in flight: moves the oldest half to overflow.
  template <class Overflow>
  bool move_half_to_overflow(std::uint64_t& word, Overflow& overflow) {
    constexpr std::uint32_t taken = Capacity / 2;
    const unpacked p = unpack(word);
    const std::uint16_t next_real = std::uint16_t(p.real + taken);
    // acq_rel/acquire: claim the oldest half like a thief would, against the same word.
    if (!positions_.compare_exchange_strong(word, pack(next_real, next_real, p.tail),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
      return false;
    }
    T* batch[taken];
    for (std::uint32_t i = 0; i < taken; ++i) {
      batch[i] = cells_[(p.real + i) & mask].load(std::memory_order_relaxed);  // relaxed: ours
    }
    overflow(batch, taken);
    return true;
  }

  alignas(cache_line_size) atomic<std::uint64_t> positions_{0};
  alignas(cache_line_size) atomic<T*> cells_[Capacity];
};

}  // namespace spindle::core
