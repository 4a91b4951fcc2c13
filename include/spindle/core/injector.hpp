// The global injector: runnables that are not in any executor's local queue. Sharded, one shard
// per executor slot, because a single mutex-protected queue is the known bottleneck when many
// threads spawn at once.
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
// Each shard is a mutex-protected intrusive FIFO (runnable::next). `size` is an atomic copy of
// the length, written under the mutex and read without it for load estimates and for the cheap
// "is there anything?" check before locking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

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
  // by next (null-terminated); `taken` receives how many.
  runnable* pop_batch(std::size_t shard, std::size_t max, std::size_t& taken) noexcept;

  // Any thread, lock-free, approximate.
  std::size_t size(std::size_t shard) const noexcept {
    // relaxed: an estimate; pop_batch re-reads under the mutex before trusting it.
    return shards_[shard].size.load(std::memory_order_relaxed);
  }
  bool any() const noexcept;

 private:
  struct alignas(cache_line_size) shard_state {
    std::mutex mutex;
    runnable* head = nullptr;  // guarded by mutex
    runnable* tail = nullptr;  // guarded by mutex
    std::atomic<std::size_t> size{0};
  };
  std::size_t shard_count_;
  std::unique_ptr<shard_state[]> shards_;
};

}  // namespace spindle::core
