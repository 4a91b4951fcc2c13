#include "spindle/core/injector.hpp"

namespace spindle::core {

injector::injector(std::size_t shard_count)
    : shard_count_(shard_count), shards_(std::make_unique<shard_state[]>(shard_count)) {}

void injector::push(std::size_t shard, runnable* item) noexcept {
  item->next = nullptr;
  push_batch(shard, item, item, 1);
}

void injector::push_batch(std::size_t shard, runnable* first, runnable* last,
                          std::size_t count) noexcept {
  shard_state& s = shards_[shard];
  last->next = nullptr;
  std::lock_guard lock(s.mutex);
  if (s.tail != nullptr) {
    s.tail->next = first;
  } else {
    s.head = first;
  }
  s.tail = last;
  // relaxed: the mutex orders the list; size is only an estimate for lock-free readers.
  s.size.store(s.size.load(std::memory_order_relaxed) + count, std::memory_order_relaxed);
}

runnable* injector::pop_batch(std::size_t shard, std::size_t max, std::size_t& taken) noexcept {
  shard_state& s = shards_[shard];
  taken = 0;
  // relaxed: skip the lock when the shard looks empty; a racing push also wakes an executor,
  // so a stale zero here never strands work (see parking.md, "who re-checks").
  if (s.size.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard lock(s.mutex);
  runnable* first = s.head;
  runnable* last = nullptr;
  runnable* cursor = first;
  while (cursor != nullptr && taken < max) {
    last = cursor;
    cursor = cursor->next;
    ++taken;
  }
  if (taken == 0) return nullptr;
  s.head = cursor;
  if (cursor == nullptr) s.tail = nullptr;
  last->next = nullptr;
  s.size.store(s.size.load(std::memory_order_relaxed) - taken, std::memory_order_relaxed);
  return first;
}

bool injector::any() const noexcept {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    if (size(i) != 0) return true;
  }
  return false;
}

}  // namespace spindle::core
