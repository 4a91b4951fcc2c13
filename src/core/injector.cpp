// Injector shards: the Vyukov intrusive queue described in include/spindle/core/injector.hpp.
#include "spindle/core/injector.hpp"

namespace spindle::core {

injector::injector(std::size_t shard_count)
    : shard_count_(shard_count), shards_(std::make_unique<shard_state[]>(shard_count)) {}

void injector::link(shard_state& s, runnable* first, runnable* last) noexcept {
  next_of(last).store(nullptr, std::memory_order_relaxed);  // relaxed: published by the exchange
  // acq_rel: release publishes the items (and their internal links) to the consumer that
  // follows the chain; acquire orders us after the previous producer's link of `previous`.
  runnable* previous = s.back.exchange(last, std::memory_order_acq_rel);
  // release: the consumer's acquire load of previous->next sees a fully written chain.
  next_of(previous).store(first, std::memory_order_release);
}

void injector::push(std::size_t shard, runnable* item) noexcept {
  push_batch(shard, item, item, 1);
}

void injector::push_batch(std::size_t shard, runnable* first, runnable* last,
                          std::size_t count) noexcept {
  shard_state& s = shards_[shard];
  // Links inside the batch are plain writes made before the exchange that publishes them.
  for (runnable* r = first; r != last; r = r->next) {
    next_of(r).store(r->next, std::memory_order_relaxed);  // relaxed: published by link()
  }
  // seq_cst: counted before it is linked, so a parker that sees zero cannot miss it after the
  // handshake fence (parking.md); a consumer may briefly see a count it cannot pop yet.
  s.size.fetch_add(std::int64_t(count), std::memory_order_seq_cst);
  link(s, first, last);
}

runnable* injector::pop_batch(std::size_t shard, std::size_t max, std::size_t& taken) noexcept {
  shard_state& s = shards_[shard];
  taken = 0;
  // relaxed: a cheap emptiness hint before contending for the consumer role; a push that races
  // it is followed by a notify (parking.md), so a stale zero strands nothing.
  if (s.size.load(std::memory_order_relaxed) <= 0) return nullptr;
  // acquire: the previous consumer's updates of `front` are visible to us.
  if (s.consumer_busy.exchange(true, std::memory_order_acquire)) return nullptr;
  runnable* batch_first = nullptr;
  runnable* batch_last = nullptr;
  while (taken < max) {
    runnable* front = s.front;
    // acquire: pairs with link()'s release store, the item's contents are visible.
    runnable* next = next_of(front).load(std::memory_order_acquire);
    if (front == &s.stub) {
      if (next == nullptr) break;  // empty (or the first producer is still linking)
      s.front = next;
      front = next;
      next = next_of(front).load(std::memory_order_acquire);
    }
    if (next == nullptr) {
      // `front` is the last linked item. Taking it needs the stub behind it, unless a producer
      // has already exchanged `back` past it and not linked yet (the chain is cut): stop.
      // acquire: pairs with the producers' exchange.
      if (s.back.load(std::memory_order_acquire) != front) break;
      link(s, &s.stub, &s.stub);
      next = next_of(front).load(std::memory_order_acquire);
      if (next == nullptr) break;  // a producer slipped in before the stub: its link is pending
    }
    s.front = next;
    front->next = nullptr;
    if (batch_last != nullptr) {
      batch_last->next = front;
    } else {
      batch_first = front;
    }
    batch_last = front;
    ++taken;
  }
  // relaxed: one consumer at a time (consumer_busy's acquire/release orders the successive
  // writers); watchers only sample it.
  if (taken != 0) s.taken.store(s.taken.load(std::memory_order_relaxed) + taken, std::memory_order_relaxed);
  // release: hands `front` to the next consumer.
  s.consumer_busy.store(false, std::memory_order_release);
  if (taken != 0) s.size.fetch_sub(std::int64_t(taken), std::memory_order_relaxed);  // relaxed: estimate
  return batch_first;
}

bool injector::any() const noexcept {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    if (size(i) != 0) return true;
  }
  return false;
}

}  // namespace spindle::core
