// spindle::channel<T>: a bounded multi-producer multi-consumer queue with back-pressure.
//
//   spindle::channel<int> ch(16);             // capacity >= 1 (0 is usage_error)
//   co_await ch.send(42);                     // suspends while the buffer is full
//   std::optional<int> v = co_await ch.receive();  // suspends while empty; nullopt once
//                                                  // closed and drained
//   if (!ch.try_send(std::move(x))) ...       // channel_send_status: sent / full / closed
//   ch.try_receive(); ch.close();
//
// Design
//   State, under the primitive lock (a stripe, see sync/wait_queue.hpp): the ring `buffer_`
//   (at most `capacity` items), `closed_`, and two FIFO queues: `senders_` (each holding the
//   item it wants to send) and `receivers_` (each with an empty slot).
//   Invariants: senders wait only while the buffer is full; receivers wait only while it is
//   empty and the channel open. So at most one of the two queues is non-empty.
//   Handoff (FIFO, no barging): a send with receivers waiting puts its item straight into the
//   oldest receiver's slot; a receive that frees a buffer slot moves the oldest waiting
//   sender's item into the buffer and completes that sender. Items keep their send order:
//   buffer first, then waiting senders in queue order.
//   Capacity 0 (rendezvous) is rejected with usage_error: every channel has a buffer, which
//   keeps "a send completed" equal to "the item is in the channel".
//   Close: idempotent. Every waiting receiver (the buffer is empty then) completes with
//   nullopt; every waiting sender completes with channel_closed thrown, its item not sent
//   (destroyed with the awaiter); later sends throw channel_closed; later try_sends return
//   channel_send_status::closed, the item left with the caller. Items already in the
//   buffer stay there and are received normally; receive returns nullopt only once the
//   channel is closed AND drained. A send that returned before close() is never lost.
//   Errors (the vocabulary of core/errors.hpp): the end of the stream is an empty optional,
//   never an exception; a send that cannot deliver throws channel_closed; the try_ calls
//   never throw for the channel's state (full/empty/closed are results); misuse (capacity 0,
//   awaiting outside a task) is usage_error.
//   Cancellation: a queued receiver is unlinked without taking an item; a queued sender is
//   unlinked and its item is not sent. A waiter already completed keeps its outcome (a woken
//   receiver returns its item; the cancel hits its next wait).
//   Destruction: fine without waiters (buffered items are destroyed); queued tasks are woken
//   with task_cancelled. Items handed to a task whose frame is destroyed before it resumes
//   (runtime shutdown) are destroyed with the frame.
//   T: any move-constructible type (move-only is fine). Its move constructor and destructor
//   run under the primitive lock: they must not use spindle sync primitives. A move that
//   throws propagates to the caller; the operation then did not happen, except that a receive
//   whose refill from a waiting sender throws loses the item it had taken.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/sync/wait_queue.hpp"

namespace spindle {

// What channel::try_send did: the item was sent, or it was not because the buffer is full (the
// same call may succeed later) or because the channel is closed (no call ever will). In both
// failures the item is left with the caller. Contextually true when sent, so
// `if (ch.try_send(std::move(x)))` and `while (!ch.try_send(...))` read as before; compare with
// channel_send_status::full / ::closed to tell the failures apart.
class channel_send_status {
 public:
  enum kind : std::uint8_t { sent, full, closed };
  constexpr channel_send_status(kind k) noexcept : kind_(k) {}  // NOLINT: implicit on purpose
  constexpr kind value() const noexcept { return kind_; }
  constexpr explicit operator bool() const noexcept { return kind_ == sent; }
  constexpr bool is_full() const noexcept { return kind_ == full; }
  constexpr bool is_closed() const noexcept { return kind_ == closed; }
  friend constexpr bool operator==(channel_send_status a, channel_send_status b) noexcept {
    return a.kind_ == b.kind_;
  }

 private:
  kind kind_;
};
constexpr const char* to_string(channel_send_status status) noexcept {
  switch (status.value()) {
    case channel_send_status::sent: return "sent";
    case channel_send_status::full: return "full";
    case channel_send_status::closed: return "closed";
  }
  return "?";
}

template <class T>
class channel {
  static_assert(std::is_move_constructible_v<T> && !std::is_reference_v<T>,
                "spindle::channel<T>: T must be a move-constructible object type");
  using outcome = detail::sync_waiter::outcome;

 public:
  class [[nodiscard]] send_awaiter final : private detail::sync_waiter {
   public:
    send_awaiter(channel& c, T&& item) : channel_(c), item_(std::move(item)) {}
    ~send_awaiter() { abandon_wait(); }
    bool await_ready() {
      return try_complete(channel_.state_lock(),
                          [this](detail::wake_list& to_wake) { return try_send(to_wake); });
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, channel_.state_lock(), channel_.senders_,
                        {wait_kind::channel_send, channel_.diagnostic_id_.get()},
                        [this](detail::wake_list& to_wake) { return try_send(to_wake); });
    }
    void await_resume() {
      if (finish_wait() == outcome::closed) throw channel_closed();
    }

   private:
    friend class channel;
    outcome try_send(detail::wake_list& to_wake) {  // under the lock
      if (channel_.closed_) return outcome::closed;
      if (channel_.offer_locked(item_, to_wake)) return outcome::done;
      return outcome::none;
    }
    channel& channel_;
    T item_;  // moved out by whoever completes the send
  };

  class [[nodiscard]] receive_awaiter final : private detail::sync_waiter {
   public:
    explicit receive_awaiter(channel& c) noexcept : channel_(c) {}
    ~receive_awaiter() { abandon_wait(); }
    bool await_ready() {
      return try_complete(channel_.state_lock(),
                          [this](detail::wake_list& to_wake) { return try_receive(to_wake); });
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, channel_.state_lock(), channel_.receivers_,
                        {wait_kind::channel_receive, channel_.diagnostic_id_.get()},
                        [this](detail::wake_list& to_wake) { return try_receive(to_wake); });
    }
    std::optional<T> await_resume() {
      finish_wait();  // closed leaves slot_ empty: nullopt
      return std::move(slot_);
    }

   private:
    friend class channel;
    outcome try_receive(detail::wake_list& to_wake) {  // under the lock
      if (channel_.take_locked(slot_, to_wake)) return outcome::done;
      return channel_.closed_ ? outcome::closed : outcome::none;
    }
    channel& channel_;
    std::optional<T> slot_;  // filled by whoever completes the receive
  };

  explicit channel(std::size_t capacity)
      : capacity_(checked_capacity(capacity)),
        buffer_(std::make_unique<std::optional<T>[]>(capacity_)) {}
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;
  ~channel() {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    senders_.complete_all(outcome::cancelled, to_wake);
    receivers_.complete_all(outcome::cancelled, to_wake);
  }

  // co_await ch.send(item): waits while full; throws channel_closed if closed (before or
  // while waiting: the item could not be delivered, and is destroyed). Inside a spawned task
  // only (usage_error otherwise, unless it completes at once).
  send_awaiter send(T item) { return send_awaiter(*this, std::move(item)); }
  // co_await ch.receive() -> optional<T>: waits while empty; nullopt once closed and drained
  // (the end of the stream, not an error: it never throws channel_closed).
  receive_awaiter receive() noexcept { return receive_awaiter(*this); }

  // Sends without waiting; never throws for the channel's state. `sent`; or `full` / `closed`,
  // and then `item` is left untouched with the caller. Contextually true only when sent.
  // Usable from any thread. (Only T's move constructor may throw.)
  channel_send_status try_send(T&& item) {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    if (closed_) return channel_send_status::closed;
    return offer_locked(item, to_wake) ? channel_send_status::sent : channel_send_status::full;
  }
  // Receives without waiting: an item, or nullopt if none is buffered: empty and closed are
  // both nullopt here (is_closed() tells them apart); never throws for the channel's state.
  std::optional<T> try_receive() {
    std::optional<T> item;
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    take_locked(item, to_wake);
    return item;
  }

  // Closes the channel (see Close above). Idempotent, usable from any thread.
  void close() noexcept {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    if (closed_) return;
    closed_ = true;
    senders_.complete_all(outcome::closed, to_wake);
    receivers_.complete_all(outcome::closed, to_wake);
  }

  std::size_t capacity() const noexcept { return capacity_; }
  // Snapshots, for diagnostics and tests.
  bool is_closed() const noexcept {
    std::lock_guard guard(state_lock());
    return closed_;
  }
  std::size_t size() const noexcept {
    std::lock_guard guard(state_lock());
    return count_;
  }
  std::size_t waiting_senders() const noexcept {
    std::lock_guard guard(state_lock());
    return senders_.size();
  }
  std::size_t waiting_receivers() const noexcept {
    std::lock_guard guard(state_lock());
    return receivers_.size();
  }

 private:
  static std::size_t checked_capacity(std::size_t capacity) {
    if (capacity == 0) throw usage_error("spindle: channel capacity must be at least 1");
    return capacity;
  }
  std::mutex& state_lock() const noexcept { return detail::sync_lock_for(this); }

  // Under the lock, channel open: delivers `item` to the oldest waiting receiver, or buffers
  // it. False (item untouched) if the buffer is full.
  bool offer_locked(T& item, detail::wake_list& to_wake) {
    if (auto* waiter = static_cast<receive_awaiter*>(receivers_.front())) {
      waiter->slot_.emplace(std::move(item));  // buffer is empty: hand it over directly
      receivers_.pop_front();
      to_wake.add(waiter, outcome::done);
      return true;
    }
    if (count_ == capacity_) return false;
    buffer_[(head_ + count_) % capacity_].emplace(std::move(item));
    ++count_;
    return true;
  }

  // Under the lock: moves the oldest buffered item into `out` and refills the freed slot from
  // the oldest waiting sender. False if the buffer is empty.
  bool take_locked(std::optional<T>& out, detail::wake_list& to_wake) {
    if (count_ == 0) return false;
    std::optional<T>& oldest = buffer_[head_];
    out.emplace(std::move(*oldest));
    oldest.reset();
    head_ = (head_ + 1) % capacity_;
    --count_;
    if (auto* sender = static_cast<send_awaiter*>(senders_.front())) {
      buffer_[(head_ + count_) % capacity_].emplace(std::move(sender->item_));
      ++count_;
      senders_.pop_front();
      to_wake.add(sender, outcome::done);
    }
    return true;
  }

  const std::size_t capacity_;
  // Ring of `capacity_` slots; [head_, head_ + count_) modulo capacity_ hold items.
  std::unique_ptr<std::optional<T>[]> buffer_;
  std::size_t head_ = 0;   // under state_lock()
  std::size_t count_ = 0;  // under state_lock()
  bool closed_ = false;    // under state_lock()
  // The snapshot's name for it ("channel#5"): taken on the first wait (task_record.hpp).
 public:
  // The number a snapshot names it by ("mutex#2"), taken now if no task waited on it yet.
  std::uint32_t diagnostic_id() const noexcept { return diagnostic_id_.get(); }

 private:
  detail::lazy_object_id diagnostic_id_;
  detail::wait_queue senders_;    // under state_lock()
  detail::wait_queue receivers_;  // under state_lock()
};

}  // namespace spindle
