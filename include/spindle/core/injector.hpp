// The global injector: runnables that are not in any executor's local queue. Sharded, one shard
// per executor slot, because a single queue is the known bottleneck when many threads spawn at
// once.
//
// Who puts what where
//   - spawns and wakes from threads that are not workers of this runtime: P2C picks an executor,
//     the runnable goes to that executor's shard (so its published load rises at once);
//   - a worker whose local ring overflows moves half of it to its own shard, as one batch.
// Who takes
//   - each executor drains its own shard first (in batches into its local ring), then any other
//     shard when it has nothing else to do (shards are part of what an idle executor steals), so
//     nothing sits in the shard of a busy executor while others idle.
//
// Each shard is an intrusive multi-producer queue after Dmitry Vyukov's MPSC design, linked
// through runnable::next (accessed atomically with std::atomic_ref while in a shard):
//   producers  - push: link the item (or a pre-linked batch) after the current `back` with one
//                exchange, then store the old back's `next`. Never block, never retry.
//   consumer   - one at a time per shard, chosen by a try-lock (`consumer_busy`): an executor
//                that finds the shard busy simply moves on (it has other places to look), so
//                consumers never block either. The consumer walks from `front`.
//   size       - an atomic count: incremented by producers before they link, decremented by the
//                consumer after it unlinks; used for load estimates and "anything there?".
// A producer between its exchange and its `next` store leaves the chain momentarily cut: the
// consumer then stops early and returns what it has (the producer's notify after pushing, and
// the size count, make sure someone comes back; see parking.md).
//
// A permanent `stub` node keeps the queue non-empty so producers never touch `front`.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "spindle/core/atomic.hpp"
#include "spindle/core/runnable.hpp"

namespace spindle::core {

class injector {
 public:
  explicit injector(std::size_t shard_count);

  std::size_t shard_count() const noexcept { return shard_count_; }

  // Any thread. Appends one runnable / a linked batch first..last (count items, linked by next).
  void push(std::size_t shard, runnable* item) noexcept;
  void push_batch(std::size_t shard, runnable* first, runnable* last, std::size_t count) noexcept;

  // Any thread. Removes up to `max` runnables from the front of `shard` and returns them linked
  // by next (null-terminated); `taken` receives how many. Returns null, taking nothing, if
  // another thread is consuming this shard right now.
  runnable* pop_batch(std::size_t shard, std::size_t max, std::size_t& taken) noexcept;

  // Any thread, lock-free, approximate while producers and consumers run.
  std::size_t size(std::size_t shard) const noexcept {
    // seq_cst: the parking re-check's side of the handshake; no data is read through it.
    const std::int64_t n = shards_[shard].size.load(std::memory_order_seq_cst);
    return n < 0 ? 0 : std::size_t(n);
  }
  bool any() const noexcept;
  // Any thread: how many items consumers have taken from `shard` so far (monotonic). With
  // size(), a watcher can tell whether the item at the front is still the one it saw there:
  // the queue is FIFO, so the front stays until `taken` moves (diagnostics' woken_not_polled).
  std::uint64_t taken(std::size_t shard) const noexcept {
    return shards_[shard].taken.load(std::memory_order_relaxed);  // relaxed: a sample
  }

 private:
  struct alignas(cache_line_size) shard_state {
    runnable stub{nullptr};
    std::atomic<runnable*> back{&stub};        // producers: the last linked item
    alignas(cache_line_size) runnable* front = &stub;  // the consumer holding consumer_busy
    std::atomic<bool> consumer_busy{false};
    std::atomic<std::uint64_t> taken{0};  // written by the consumer holding consumer_busy
    alignas(cache_line_size) std::atomic<std::int64_t> size{0};
  };
  static std::atomic_ref<runnable*> next_of(runnable* r) noexcept { return std::atomic_ref<runnable*>(r->next); }
  void link(shard_state& s, runnable* first, runnable* last) noexcept;

  std::size_t shard_count_;
  std::unique_ptr<shard_state[]> shards_;
};

}  // namespace spindle::core
