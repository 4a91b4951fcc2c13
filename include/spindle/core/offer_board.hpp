// An executor's offer board: a few slots where it publishes work it would rather not run itself
// (a fork-join right continuation promoted at a heartbeat, docs/design/fork-join.md), for any
// other executor to take, one item per take.
//
// Who takes part:
//   - the owner (the executor's thread) publishes into an empty slot and may withdraw what it
//     published, if nobody has taken it yet;
//   - thieves (other executors searching for work, or waiting in a fork-join and helping) take.
// Slots are few (promotions happen at most twice per heartbeat, and each one stays on the board
// only until taken or withdrawn), so a scan is cheaper than any queue discipline; the owner fills
// the lowest free slot and thieves scan from slot 0, which takes roughly the oldest first.
//
// Invariant B1: a slot holds a non-null pointer only between the owner's publish and the one
//   successful removal (a thief's take or the owner's withdraw); exactly one of them gets it.
// Invariant B2: only the owner writes a non-null pointer, and only into a null slot; so the owner
//   withdraws with CAS(expected = its item): the item cannot reappear in a slot while it is still
//   in the owner's hands (its address stays reserved for it until it was withdrawn or merged).
// `published_` counts occupied slots, as a hint for cheap emptiness checks (never for
// correctness: a thief that reads 0 just moves on).
// Tags: each publication carries an opaque tag (fork-join: the computation the item belongs to),
// written by the owner before the slot's release store; take_tagged() takes only an item whose
// tag matches. The tag is read after the slot, so it is the tag of the publication read or of a
// later one; the CAS then succeeds only if the slot still holds the same pointer, which may be a
// later publication of the same pointer (ABA) whose tag differs: a caller for whom that matters
// checks the item it got (fork_state.cpp, find_published_work).
//
// Templated on the atomics policy so the Relacy model (tests/model) runs this same code.
#pragma once

#include <cstdint>

#include "spindle/core/atomic.hpp"
#include "spindle/core/runnable.hpp"

namespace spindle::core {

template <class Atomics = std_atomics, std::uint32_t SlotCount = 8>
class basic_offer_board {
 public:
  static constexpr std::uint32_t slot_count = SlotCount;
  static constexpr std::uint32_t no_slot = ~std::uint32_t(0);

  // An opaque tag (see "Tags"): an integer, so that the model's atomics (tests/model) hold it.
  using tag_type = std::uintptr_t;

  basic_offer_board() noexcept {
    for (auto& slot : slots_) slot.store(nullptr, std::memory_order_relaxed);  // not shared yet
    for (auto& tag : tags_) tag.store(0, std::memory_order_relaxed);           // not shared yet
    published_.store(0, std::memory_order_relaxed);
  }

  // Owner. Puts `item` on the board with `tag` (see "Tags"); returns its slot, or no_slot when
  // the board is full.
  std::uint32_t publish(runnable* item, tag_type tag = 0) noexcept {
    for (std::uint32_t i = 0; i < SlotCount; ++i) {
      // relaxed: only the owner stores non-null values (B2), so a null seen here stays null
      // until we store; thieves only ever turn slots to null.
      if (slots_[i].load(std::memory_order_relaxed) == nullptr) {
        // relaxed: a hint; the count may briefly trail the slots in either direction.
        published_.fetch_add(1, std::memory_order_relaxed);
        // relaxed: ordered before the slot's release store below, read after a thief's acquire
        // load of the slot.
        tags_[i].store(tag, std::memory_order_relaxed);
        // release: makes everything the owner wrote into the item visible to the thief's
        // acquiring CAS.
        slots_[i].store(item, std::memory_order_release);
        return i;
      }
    }
    return no_slot;
  }

  // Owner. Whether publish() would find a free slot (only the owner fills slots, so the answer
  // holds until the owner publishes).
  bool has_room() const noexcept {
    for (const auto& slot : slots_) {
      if (slot.load(std::memory_order_relaxed) == nullptr) return true;  // relaxed: as in publish
    }
    return false;
  }

  // Owner. Takes `item` back from `slot` if no thief took it; true if the owner has it again.
  bool withdraw(std::uint32_t slot, runnable* item) noexcept {
    runnable* expected = item;
    // acquire on success is not needed (the owner wrote the item), relaxed would do; acq_rel
    // keeps the model simple to state: the slot's history is a total order of RMWs (B1).
    if (slots_[slot].compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel,
                                             std::memory_order_relaxed)) {
      published_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a hint
      return true;
    }
    return false;
  }

  // Any thread but the owner. Removes and returns one published item, or null.
  runnable* take() noexcept {
    // relaxed: a hint; a take that misses a just-published item is an ordinary race that the
    // publisher's notify (a fence and a wake-up) covers.
    if (published_.load(std::memory_order_relaxed) == 0) return nullptr;
    for (std::uint32_t i = 0; i < SlotCount; ++i) {
      // relaxed: a peek; the CAS below is what synchronises.
      runnable* item = slots_[i].load(std::memory_order_relaxed);
      // acquire: pairs with publish's release, so the item's contents are visible.
      if (item != nullptr && slots_[i].compare_exchange_strong(
                                 item, nullptr, std::memory_order_acquire,
                                 std::memory_order_relaxed)) {
        published_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a hint
        return item;
      }
    }
    return nullptr;
  }

  // Any thread but the owner. Like take(), but only an item published with `tag` (see "Tags":
  // under ABA the item may belong to a later publication with another tag).
  runnable* take_tagged(tag_type tag) noexcept {
    // relaxed: a hint, as in take().
    if (published_.load(std::memory_order_relaxed) == 0) return nullptr;
    for (std::uint32_t i = 0; i < SlotCount; ++i) {
      // acquire: pairs with publish's release, so the tag written before it is visible below.
      runnable* item = slots_[i].load(std::memory_order_acquire);
      if (item == nullptr) continue;
      // relaxed: after the acquire above, this is the tag of that publication or a later one.
      if (tags_[i].load(std::memory_order_relaxed) != tag) continue;
      // acquire: pairs with publish's release, so the item's contents are visible.
      if (slots_[i].compare_exchange_strong(item, nullptr, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
        published_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a hint
        return item;
      }
    }
    return nullptr;
  }

  // Any thread. Whether something seems to be on the board (a hint).
  bool maybe_occupied() const noexcept {
    return published_.load(std::memory_order_relaxed) != 0;  // relaxed: a hint
  }

 private:
  typename Atomics::template atomic<runnable*> slots_[SlotCount];
  typename Atomics::template atomic<tag_type> tags_[SlotCount];  // see "Tags"
  typename Atomics::template atomic<std::uint32_t> published_;
};

using offer_board = basic_offer_board<>;

}  // namespace spindle::core
