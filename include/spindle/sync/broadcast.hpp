// spindle::broadcast<T>: a bounded multi-consumer channel in which every receiver sees every
// message (tokio::sync::broadcast).
//
//   spindle::broadcast<std::string> news(64);
//   auto rx = news.subscribe();                    // sees what is sent from now on
//   news.send("hello");                            // never waits; returns the receiver count
//   try {
//     std::optional<std::string> m = co_await rx.receive();   // nullopt once closed and drained
//   } catch (const spindle::broadcast_lagged& lag) {
//     lag.missed();                                // how many this receiver lost; it goes on
//   }                                              // from the oldest message still kept
//
// Design (docs/design/sync.md, "Broadcast")
//   Participants: senders (any thread: send, close), receivers (each used by one task at a
//   time: receive, try_receive; subscribe and destruction from anywhere), cancellers of a
//   waiting receiver.
//   State, all under the primitive lock (a stripe, sync/wait_queue.hpp): a ring of `capacity`
//   slots; `sent_`, the number of messages ever sent (message n lives in slot n % capacity
//   while n >= sent_ - capacity); each receiver's `next_`, the number of the next message it
//   will read; `closed_`; the count of receivers; and the FIFO `waiters_` of receivers that
//   have read everything (next_ == sent_).
//   Sending never waits: it overwrites the oldest slot when the ring is full. A receiver
//   that falls more than `capacity` behind has lost messages: its next receive throws
//   broadcast_lagged(missed) and moves it to the oldest message kept, so it goes on from there
//   (tokio's RecvError::Lagged). Messages are copied out (T must be copyable); each stays in
//   its slot until overwritten or the broadcast is destroyed.
//   Waiting: a receive with nothing to read queues (the waiter protocol of wait_queue.hpp).
//   send() and close() wake every waiter with outcome `done` / `closed` and hand over nothing:
//   a woken receiver reads under the lock in await_resume, where its message is still in the
//   ring unless `capacity` more were sent meanwhile (then it has lagged, as any slow receiver).
//   So a cancellation never loses a message: nothing is taken until await_resume, and a
//   receiver's position moves only there. A receive that completes at once (await_ready, or
//   await_suspend finding a message) reads at that moment, under the lock.
//   Close: idempotent. Receivers read what is kept, then receive nullopt; send throws
//   channel_closed.
//   Lifetimes: the broadcast must outlive its receivers (as a semaphore its permits).
//   Destroying it with receivers waiting wakes them with task_cancelled.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/sync/wait_queue.hpp"

namespace spindle {

// A broadcast receiver fell behind by more than the capacity: it lost `missed()` messages and
// continues from the oldest one still kept.
class broadcast_lagged : public std::runtime_error {
 public:
  explicit broadcast_lagged(std::uint64_t missed)
      : std::runtime_error("spindle: broadcast receiver lagged by " + std::to_string(missed) +
                           " messages"),
        missed_(missed) {}
  std::uint64_t missed() const noexcept { return missed_; }

 private:
  std::uint64_t missed_;
};

template <class T>
class broadcast {
  using outcome = detail::sync_waiter::outcome;

 public:
  class receiver;

  class [[nodiscard]] receive_awaiter final : private detail::sync_waiter {
   public:
    explicit receive_awaiter(receiver& r) noexcept : receiver_(r) {}
    ~receive_awaiter() { abandon_wait(); }  // nothing was taken: nothing to give back
    bool await_ready() {
      return try_complete(owner().state_lock(), [this](detail::wake_list&) { return read(); });
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, owner().state_lock(), owner().waiters_,
                        {wait_kind::channel_receive, owner().diagnostic_id_.get()},
                        [this](detail::wake_list&) { return read(); });
    }
    // The message; nullopt once closed and drained; broadcast_lagged if this receiver lost
    // messages (it then continues from the oldest kept).
    std::optional<T> await_resume() {
      finish_wait();  // task_cancelled if cancelled while queued: nothing was read
      if (!read_) {
        // Woken by send (something to read) or close (nothing, unless sent before): read now.
        std::lock_guard guard(owner().state_lock());
        if (owner().readable_locked(receiver_)) owner().read_locked(receiver_, slot_, missed_);
      }
      if (missed_ != 0) throw broadcast_lagged(missed_);
      return std::move(slot_);
    }

   private:
    broadcast& owner() const noexcept { return *receiver_.owner_; }
    outcome read() {  // under the lock
      if (!owner().readable_locked(receiver_)) {
        return owner().closed_ ? outcome::closed : outcome::none;
      }
      owner().read_locked(receiver_, slot_, missed_);
      read_ = true;
      return outcome::done;
    }
    receiver& receiver_;
    std::optional<T> slot_;
    std::uint64_t missed_ = 0;
    bool read_ = false;  // owner-side: read when the receive completed at once
  };

  // One subscriber's position in the stream. Movable (not while a receive is pending).
  class receiver {
   public:
    receiver(receiver&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {
      if (owner_ != nullptr) {
        std::lock_guard guard(owner_->state_lock());
        next_ = other.next_;
      }
    }
    receiver& operator=(receiver&&) = delete;
    receiver(const receiver&) = delete;
    receiver& operator=(const receiver&) = delete;
    ~receiver() {
      if (owner_ != nullptr) {
        std::lock_guard guard(owner_->state_lock());
        --owner_->receivers_;
      }
    }

    // co_await rx.receive() (see receive_awaiter::await_resume). Inside a spawned task only.
    receive_awaiter receive() noexcept { return receive_awaiter(*this); }
    // Without waiting: the next message, or nullopt if none is there (closed or not);
    // broadcast_lagged as receive().
    std::optional<T> try_receive() {
      std::optional<T> message;
      std::uint64_t missed = 0;
      {
        std::lock_guard guard(owner_->state_lock());
        if (owner_->readable_locked(*this)) owner_->read_locked(*this, message, missed);
      }
      if (missed != 0) throw broadcast_lagged(missed);
      return message;
    }

   private:
    friend class broadcast;
    explicit receiver(broadcast& owner) noexcept : owner_(&owner) {}
    broadcast* owner_;
    std::uint64_t next_ = 0;  // under owner_->state_lock()
  };

  explicit broadcast(std::size_t capacity)
      : capacity_(checked_capacity(capacity)),
        ring_(std::make_unique<std::optional<T>[]>(capacity_)) {}
  broadcast(const broadcast&) = delete;
  broadcast& operator=(const broadcast&) = delete;
  ~broadcast() {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    waiters_.complete_all(outcome::cancelled, to_wake);
  }

  // A receiver that sees every message sent from now on. Any thread.
  receiver subscribe() {
    receiver r(*this);
    std::lock_guard guard(state_lock());
    r.next_ = sent_;
    ++receivers_;
    return r;
  }

  // Sends to every receiver; never waits. Returns the number of receivers it was sent to; with
  // none, the message is not kept (0). channel_closed once closed. Any thread.
  std::size_t send(const T& message) { return send_value(message); }
  std::size_t send(T&& message) { return send_value(std::move(message)); }

  // Closes (see Close above). Idempotent, any thread.
  void close() noexcept {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    if (closed_) return;
    closed_ = true;
    waiters_.complete_all(outcome::closed, to_wake);
  }

  std::size_t capacity() const noexcept { return capacity_; }
  // Snapshots, for diagnostics and tests.
  std::size_t receiver_count() const noexcept {
    std::lock_guard guard(state_lock());
    return receivers_;
  }
  std::size_t waiting_receivers() const noexcept {
    std::lock_guard guard(state_lock());
    return waiters_.size();
  }
  bool is_closed() const noexcept {
    std::lock_guard guard(state_lock());
    return closed_;
  }
  // The number a snapshot names it by, taken now if no task waited on it yet.
  std::uint32_t diagnostic_id() const noexcept { return diagnostic_id_.get(); }

 private:
  static std::size_t checked_capacity(std::size_t capacity) {
    if (capacity == 0) throw usage_error("spindle: broadcast capacity must be at least 1");
    return capacity;
  }
  std::mutex& state_lock() const noexcept { return detail::sync_lock_for(this); }

  template <class Message>
  std::size_t send_value(Message&& message) {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    if (closed_) throw channel_closed();
    if (receivers_ == 0) return 0;
    // Overwrites the oldest message when full; sent_ moves only once the slot holds the new one.
    ring_[sent_ % capacity_] = std::forward<Message>(message);
    ++sent_;
    waiters_.complete_all(outcome::done, to_wake);  // they read in await_resume
    return receivers_;
  }

  // Under the lock: whether `r` has a message, or a lag, to read.
  bool readable_locked(const receiver& r) const noexcept { return r.next_ < sent_; }
  // Under the lock, readable_locked(r): a lag (`missed`, r moved to the oldest kept) or the
  // next message copied into `out` (r moves past it only once copied).
  void read_locked(receiver& r, std::optional<T>& out, std::uint64_t& missed) {
    const std::uint64_t oldest = sent_ > capacity_ ? sent_ - capacity_ : 0;
    if (r.next_ < oldest) {
      missed = oldest - r.next_;
      r.next_ = oldest;
      return;
    }
    out.emplace(*ring_[r.next_ % capacity_]);
    ++r.next_;
  }

  const std::size_t capacity_;
  std::unique_ptr<std::optional<T>[]> ring_;  // message n in slot n % capacity_
  std::uint64_t sent_ = 0;       // under state_lock()
  std::size_t receivers_ = 0;    // under state_lock()
  bool closed_ = false;          // under state_lock()
  detail::lazy_object_id diagnostic_id_;
  detail::wait_queue waiters_;   // under state_lock(): receivers with next_ == sent_
};

}  // namespace spindle
