// The stash (design in actor_stash.hpp): owner-only lists, so no atomics but the counts that
// other threads read.
#include "spindle/actor/actor_stash.hpp"

#include "spindle/actor/actor_scheduler.hpp"
#include "spindle/core/runtime_core.hpp"

namespace spindle::actor_detail {

void stash_envelope(actor_cell& cell, envelope* message) noexcept {
  message->next = nullptr;
  if (cell.stash_tail != nullptr) {
    cell.stash_tail->next = message;
  } else {
    cell.stash_head = message;
  }
  cell.stash_tail = message;
  // relaxed: single writer (the owner); snapshots read it whole.
  cell.stash_length.store(cell.stash_length.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
}

std::uint32_t unstash_all(actor_cell& cell) noexcept {
  if (cell.stash_head == nullptr) return 0;
  const std::uint32_t count = cell.stash_length.load(std::memory_order_relaxed);  // relaxed: ours
  cell.stash_tail->next = cell.private_head;
  cell.private_head = cell.stash_head;
  cell.stash_head = cell.stash_tail = nullptr;
  cell.stash_length.store(0, std::memory_order_relaxed);  // relaxed: single writer
  if (cell.capacity != 0) {
    // relaxed: the bound's count; each of them is handled again, and each handling gives one
    // back (run_actor). Senders may find the mailbox full meanwhile: these come first.
    cell.queued.fetch_add(count, std::memory_order_relaxed);
  }
  if (cell.system->core().options().diagnostics.records) {
    // relaxed (both): diagnostics counts. They are received and taken once more, so that
    // received - handled stays the number of messages waiting (actor_cell.hpp).
    cell.messages_taken.store(cell.messages_taken.load(std::memory_order_relaxed) + count,
                              std::memory_order_relaxed);
    if (cell.counts_pushes) cell.messages_received.fetch_add(count, std::memory_order_relaxed);
  }
  return count;
}

void destroy_stash(actor_cell& cell) noexcept {
  while (envelope* e = cell.stash_head) {
    cell.stash_head = e->next;
    e->destroy(e);
  }
  cell.stash_tail = nullptr;
  cell.stash_length.store(0, std::memory_order_relaxed);  // relaxed: single writer
}

}  // namespace spindle::actor_detail
