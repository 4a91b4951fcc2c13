// Inter-executor messaging (spec M1, M2; seed 000 "Inter-executor communication"): executors send
// each other small messages through per-executor mailboxes, delivered exactly once. Contract,
// states and measurements: docs/design/messaging.md.
//
// Participants
//   sender    - the executor whose thread calls executor::send_message. The message comes from
//               its pool (owner-only memory) and comes back to it after delivery. A thread that
//               is not a worker of the runtime is a foreign sender: its messages are allocated on
//               the heap and freed by the receiver.
//   receiver  - the executor the message is addressed to. It polls its mailbox first in every
//               loop iteration, runs `deliver` on its own thread (which copies what it needs out of
//               the payload), then hands the message back to the sender's mailbox.
//   shutdown  - the thread that finishes the runtime's shutdown (runtime_core.hpp, step 5a), after
//               every worker left its loop: it closes every mailbox and discards what was in it.
//
// States of a pool message (the transitions are made by the party named):
//   free       in the sender's pool (free list, owner-only)       -- send_message (sender) -->
//   posted     in the receiver's mailbox, deliver != nullptr      -- poll (receiver) -->
//   delivered  deliver(message, receiver) ran; the receiver sets deliver = nullptr and posts it
//              to the sender's mailbox (a send to self skips this) -->
//   returned   in the sender's mailbox, deliver == nullptr        -- poll (sender) -->
//   free       back in the pool (counted as reclaimed).
// A foreign message goes posted -> delivered -> deleted by the receiver. At shutdown a posted
// message is discarded instead: deliver(message, nullptr), then reclaimed into its sender's pool
// directly (no worker runs any more, so the pools have no owner thread to race with).
//
// Who may touch what
//   - the message fields: whoever holds the message in the current state (the sender while free,
//     the receiver while delivering, the sender again when returned); the mailbox's push/take
//     pair carries the hand-over (seq_cst push, acquire take).
//   - the pool: its executor's thread only (and the shutdown thread once workers have left).
//   - the mailbox: any thread pushes; only the owning executor takes; `receiver_parking` is
//     written by the owner, read by senders.
//   - the stats: each counter has one writer (named at the field), anyone reads.
//
// The queue never overflows and never drops: it is an unbounded intrusive stack whose nodes are
// the messages themselves (the link lives in the message), so a push never allocates and never
// fails; the memory is the sender's pool, which grows in chunks when every message is in flight.
// Messages from one sending thread to one receiver are delivered in the order sent (FIFO per
// pair); there is no order between different senders.
//
// Templated on the atomics policy (core/atomic.hpp) so the Relacy model
// (tests/model/executor_mailbox_model.cpp) runs this same code.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "spindle/core/atomic.hpp"

namespace spindle::core {

class executor;

struct executor_message {
  executor_message* next = nullptr;  // mailbox link (intrusive), owned by whichever queue holds it
  // Run on the receiving executor's thread when it takes the message. It copies what it needs
  // from `payload`; it must not keep a pointer to the message. `receiver` is null when the
  // runtime is shutting down and the message is being discarded (release what the payload
  // holds, schedule nothing). Null marks a message travelling back to its sender (a return).
  void (*deliver)(executor_message& message, executor* receiver) noexcept = nullptr;
  std::uint32_t sender = 0;  // executor index whose pool owns it, or `foreign_sender`
  std::uint32_t kind = 0;    // free for the user (statistics/diagnostics)
  void* payload[3] = {};     // words the deliver function reads
  static constexpr std::uint32_t foreign_sender = ~std::uint32_t(0);
};

// Per-executor messaging counters. Each has a single writer, the executor named below (or, once
// every worker has left its loop, the shutdown thread); anyone may read. A copy is a snapshot
// (relaxed loads), so executor::message_stats() can return one by value.
struct executor_mailbox_stats {
  std::atomic<std::uint64_t> sent{0};               // sender: messages taken from its pool
  std::atomic<std::uint64_t> delivered{0};          // receiver: deliver calls (null receiver too)
  std::atomic<std::uint64_t> returned_received{0};  // sender: own messages back via its mailbox
  std::atomic<std::uint64_t> reclaimed{0};          // sender: messages put back into its pool
  std::atomic<std::uint64_t> pool_chunks{0};        // sender: chunks its pool allocated
  std::atomic<std::uint64_t> foreign_delivered{0};  // receiver: the foreign part of `delivered`

  executor_mailbox_stats() noexcept = default;
  executor_mailbox_stats(const executor_mailbox_stats& other) noexcept { *this = other; }
  executor_mailbox_stats& operator=(const executor_mailbox_stats& other) noexcept {
    // relaxed: a snapshot of independent counters; no other memory is published through them.
    sent.store(other.sent.load(std::memory_order_relaxed), std::memory_order_relaxed);
    delivered.store(other.delivered.load(std::memory_order_relaxed), std::memory_order_relaxed);
    returned_received.store(other.returned_received.load(std::memory_order_relaxed),
                            std::memory_order_relaxed);
    reclaimed.store(other.reclaimed.load(std::memory_order_relaxed), std::memory_order_relaxed);
    pool_chunks.store(other.pool_chunks.load(std::memory_order_relaxed), std::memory_order_relaxed);
    foreign_delivered.store(other.foreign_delivered.load(std::memory_order_relaxed),
                            std::memory_order_relaxed);
    return *this;
  }
};

// Adds `amount` to a counter that only the calling thread writes: a relaxed load and store, no
// read-modify-write (readers only sample).
inline void add_single_writer(std::atomic<std::uint64_t>& counter, std::uint64_t amount = 1) noexcept {
  // relaxed: single writer; readers sample and rely on nothing else being published through it.
  counter.store(counter.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
}

// A lock-free multi-producer, single-consumer stack of intrusive nodes (`Node::next`), used both
// as the executor inbox (runnables) and as the executor mailbox (messages).
//
// Producers push with a CAS on the head; the consumer takes everything with one exchange and
// reverses it, so items come out oldest first and the order of any one producer's pushes is kept
// (pushes from one thread are ordered in the head's modification order, and a take removes a
// prefix of that order). A push never allocates, never blocks behind the consumer, and can only
// fail after close().
//
// Closing (shutdown only): close() exchanges in a marker that is never a node; later pushes see
// it and return false, so the pusher keeps the node (and disposes of it) instead of leaving it in
// a queue nobody will read again.
template <class Node, class Atomics = std_atomics>
class intrusive_mpsc_stack {
  template <class U>
  using atomic = typename Atomics::template atomic<U>;

 public:
  intrusive_mpsc_stack() noexcept { head_.store(nullptr, std::memory_order_relaxed); }  // unshared
  intrusive_mpsc_stack(const intrusive_mpsc_stack&) = delete;
  intrusive_mpsc_stack& operator=(const intrusive_mpsc_stack&) = delete;

  // Any thread. False only when the stack was closed (the node was not queued).
  bool push(Node* node) noexcept {
    // relaxed: the value is only a CAS expectation.
    Node* head = head_.load(std::memory_order_relaxed);
    do {
      if (head == closed_marker()) return false;
      node->next = head;
      // seq_cst: publishes the node and its link to the consumer's acquire exchange (release
      // would do for that), and is the publishing side of the mailbox's parking handshake: the
      // sender's later seq_cst load of the receiver's parking flag cannot be ordered before it
      // (docs/design/messaging.md). On x86 and Arm the instruction is the same as for release.
    } while (!head_.compare_exchange_weak(head, node, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
    return true;
  }

  // Consumer. Everything pushed so far, oldest first (null when empty).
  Node* take_all() noexcept {
    if (head_.load(std::memory_order_relaxed) == nullptr) return nullptr;  // relaxed: hint
    // acquire: pairs with push's CAS; the nodes and their links are visible.
    return reversed(head_.exchange(nullptr, std::memory_order_acquire));
  }

  // Anyone. A hint: the consumer's poll-first check (one relaxed load), the inbox's parking
  // re-check (after the parker's fence, which pairs with schedule_on's fence).
  bool empty() const noexcept {
    return head_.load(std::memory_order_relaxed) == nullptr;  // relaxed: see above
  }
  // Anyone. The mailbox's parking re-check (basic_mailbox's handshake).
  bool empty_seq_cst() const noexcept {
    // seq_cst: ordered with the pushers' seq_cst CAS in the single total order.
    return head_.load(std::memory_order_seq_cst) == nullptr;
  }

  // Shutdown, once the consumer has stopped. Everything still queued, oldest first; every later
  // push fails.
  Node* close() noexcept {
    // acquire: pairs with push's CAS, as in take_all.
    Node* newest = head_.exchange(closed_marker(), std::memory_order_acquire);
    return newest == closed_marker() ? nullptr : reversed(newest);
  }

 private:
  // An address no node can have (misaligned for any node type with a pointer member).
  static Node* closed_marker() noexcept { return reinterpret_cast<Node*>(std::uintptr_t(1)); }

  static Node* reversed(Node* newest) noexcept {
    Node* oldest_first = nullptr;
    while (newest != nullptr) {
      Node* next = newest->next;
      newest->next = oldest_first;
      oldest_first = newest;
      newest = next;
    }
    return oldest_first;
  }

  atomic<Node*> head_;
};

// An executor's mailbox: the stack above, plus the flag with which the receiver announces that it
// is about to park, so a sender knows it must wake it. Both live on one cache line: a sender's
// wake check reads the line its push just wrote.
//
// Parking handshake (Dekker, like runtime_core's; modelled in executor_mailbox_model.cpp):
//   sender:   push (seq_cst CAS on head)             ; load receiver_parking (seq_cst)
//   receiver: store receiver_parking = true (seq_cst) ; ... ; load head (seq_cst, the re-check)
// All four are seq_cst, so they fall in one total order S: either the flag store precedes the
// sender's load (which sees it and wakes the receiver), or the sender's CAS precedes the
// receiver's re-check (which sees the message). No fence is needed on either side; the
// receiver's parking fence (executor::park) sits between its two accesses anyway. (A relaxed
// store and re-check around that fence would be enough under C++20's fence rules, but Relacy
// implements only the fence-to-fence rule and reports a lost wake-up; on x86 a seq_cst load is a
// plain load, and the seq_cst store costs one locked instruction per park.) Returns are posted without the wake check:
// reclaiming memory is no reason to wake a parked executor.
template <class Node, class Atomics = std_atomics>
class basic_mailbox {
  template <class U>
  using atomic = typename Atomics::template atomic<U>;

 public:
  enum class post_result { queued, queued_receiver_parking, closed };

  basic_mailbox() noexcept {
    receiver_parking_.store(false, std::memory_order_relaxed);  // relaxed: not shared yet
  }

  // Any thread: a message to deliver. Says whether the receiver may be parking (then the caller
  // wakes it) or the mailbox is closed (then the caller disposes of the message).
  post_result post(Node* node) noexcept {
    if (!queue_.push(node)) return post_result::closed;
    // seq_cst: the load side of the handshake above; ordered after the push's seq_cst CAS.
    return receiver_parking_.load(std::memory_order_seq_cst) ? post_result::queued_receiver_parking
                                                             : post_result::queued;
  }
  // Any thread: a message going back to its sender (no wake-up). False when closed.
  bool post_return(Node* node) noexcept { return queue_.push(node); }

  // Owner.
  Node* take_all() noexcept { return queue_.take_all(); }
  bool empty() const noexcept { return queue_.empty(); }  // the poll-first hint (relaxed)
  bool empty_for_parking_recheck() const noexcept { return queue_.empty_seq_cst(); }
  // Owner, parking: set before the parking fence, cleared once awake (a stale `true` only costs
  // a sender a look at the sleepers list).
  void announce_parking() noexcept {
    // seq_cst: the store side of the handshake above (one locked instruction per park).
    receiver_parking_.store(true, std::memory_order_seq_cst);
  }
  void announce_awake() noexcept {
    // relaxed: clearing late is harmless; a sender whose seq_cst load reads the cleared value
    // precedes our next (seq_cst) announce_parking in S, so our next re-check sees its message.
    receiver_parking_.store(false, std::memory_order_relaxed);
  }

  // Shutdown (see intrusive_mpsc_stack::close).
  Node* close() noexcept { return queue_.close(); }

 private:
  intrusive_mpsc_stack<Node, Atomics> queue_;
  atomic<bool> receiver_parking_;
};

using executor_mailbox = basic_mailbox<executor_message>;

// An executor's pool of messages: a free list over chunks of `ChunkSize` messages. Owner-only (no
// atomics). Chunks are only ever added, and freed with the pool (that is, with the executor), so
// a message address stays valid for the runtime's lifetime.
template <class Message, std::size_t ChunkSize = 256>
class basic_message_pool {
 public:
  static constexpr std::size_t chunk_size = ChunkSize;

  basic_message_pool() = default;
  basic_message_pool(const basic_message_pool&) = delete;
  basic_message_pool& operator=(const basic_message_pool&) = delete;

  // A free message (the pool grows by one chunk when none is free; `grew` says so).
  Message* acquire(bool& grew) {
    grew = free_ == nullptr;
    if (grew) add_chunk();
    Message* message = free_;
    free_ = message->next;
    message->next = nullptr;
    return message;
  }
  void release(Message* message) noexcept {
    message->next = free_;
    free_ = message;
  }
  std::size_t chunk_count() const noexcept { return chunks_.size(); }

 private:
  void add_chunk() {
    chunks_.push_back(std::make_unique<Message[]>(ChunkSize));
    Message* chunk = chunks_.back().get();
    for (std::size_t i = 0; i < ChunkSize; ++i) release(&chunk[ChunkSize - 1 - i]);
  }

  Message* free_ = nullptr;
  std::vector<std::unique_ptr<Message[]>> chunks_;
};

using executor_message_pool = basic_message_pool<executor_message>;

}  // namespace spindle::core
