// spindle::oneshot<T>: a single value, sent once, received once.
//
//   auto [tx, rx] = spindle::oneshot<int>();
//   spindle::spawn(producer(std::move(tx)));   // producer: tx.send(42);
//   int v = co_await rx;                       // in a task; or rx.blocking_receive() on a
//                                              // plain thread
//
// Design
//   Participants: one sender (oneshot_sender<T>), one receiver (oneshot_receiver<T>), both
//   movable handles on a shared `oneshot_state<T>` with two references (one per handle; the
//   last one dropped frees it). The receiver may wait in a task (one awaiter, a sync_waiter
//   queued on `state.waiters`) or on a plain thread (blocking_receive, on `thread_wakeup`).
//   State, under `state.lock` (the state's own std::mutex: the state is reference counted
//   and outlives any waiter, since a waiter is an awaiter of the still-alive receiver):
//   `phase` (empty -> has_value | sender_dropped; has_value -> taken), the value, the queue.
//   send(): stores the value, completes a waiting task (outcome done) and notifies a blocked
//   thread. Sending twice (or on an empty handle) throws usage_error.
//   Sender destroyed without sending: the phase becomes sender_dropped; a waiting or later
//   receive throws channel_closed.
//   Receiving: `co_await rx` yields the T (moved out), or throws channel_closed; receiving a
//   second time throws usage_error. Cancellation: a task cancelled while waiting gets
//   task_cancelled and the value, if it comes later, stays in the state for another receive.
//   Lock order: task lock before `state.lock`; wakes and notifies happen after unlocking.
//   Errors (the vocabulary of core/errors.hpp): a oneshot is a promise, not a stream, so a
//   sender gone without sending is a value that can never be delivered: channel_closed, as a
//   send into a closed channel (and as std::future's broken_promise, Tokio's RecvError); there
//   is no "end of stream" to report as an empty optional. Misuse (second send, second receive,
//   an empty handle, blocking_receive on a worker) is usage_error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/sync/wait_queue.hpp"
#include "spindle/task/join_handle.hpp"

namespace spindle {

template <class T>
class oneshot_sender;
template <class T>
class oneshot_receiver;

namespace detail {

template <class T>
struct oneshot_state {
  enum class phase_kind { empty, has_value, sender_dropped, taken };

  std::mutex lock;
  std::condition_variable thread_wakeup;  // blocking_receive waits here
  phase_kind phase = phase_kind::empty;   // under lock
  std::optional<T> value;                 // under lock
  // The snapshot's name for it ("channel#5"): taken on the first wait (task_record.hpp).
  lazy_object_id diagnostic_id;
  // What the receiving task waits on, as a snapshot shows it (kind none: "oneshot#N"); the
  // receiver's, set before it awaits (an actor's ask: "ask actor#N").
  wait_descriptor described_as;
  wait_queue waiters;                     // under lock: at most one receiving task
  std::atomic<int> references{2};

  void release() noexcept {
    // acq_rel: the last owner must see the other's writes before destroying the state.
    if (references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // Under the lock: publishes `next` and completes the waiting task, if any.
  void finish_locked(phase_kind next, wake_list& to_wake) noexcept {
    phase = next;
    waiters.complete_all(sync_waiter::outcome::done, to_wake);
  }
  // Under the lock, phase not empty: the receiver's result.
  T take_locked() {
    if (phase == phase_kind::sender_dropped) throw channel_closed("spindle: oneshot sender dropped");
    if (phase == phase_kind::taken) throw usage_error("spindle: oneshot value already received");
    T result = std::move(*value);
    value.reset();
    phase = phase_kind::taken;
    return result;
  }
};

}  // namespace detail

template <class T>
class oneshot_sender {
 public:
  oneshot_sender() noexcept = default;
  oneshot_sender(oneshot_sender&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  oneshot_sender& operator=(oneshot_sender&& other) noexcept {
    if (this != &other) {
      reset();
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  ~oneshot_sender() { reset(); }

  bool valid() const noexcept { return state_ != nullptr; }
  // Whether the receiver is gone (dropped): nobody will read what is sent (Tokio's
  // Sender::is_closed). False for an empty sender.
  bool is_closed() const noexcept {
    // acquire: pairs with the receiver's acq_rel release of its reference; a caller that then
    // frees this sender (and with it the state) does so after the receiver was done with it.
    return state_ != nullptr && state_->references.load(std::memory_order_acquire) == 1;
  }
  // Delivers the value; usable from any thread. usage_error if already sent or empty handle.
  void send(T value) {
    if (state_ == nullptr) throw usage_error("spindle: oneshot already sent (or empty sender)");
    finish(state_type::phase_kind::has_value, &value);
    std::exchange(state_, nullptr)->release();
  }

 private:
  using state_type = detail::oneshot_state<T>;
  template <class U>
  friend std::pair<oneshot_sender<U>, oneshot_receiver<U>> oneshot();
  explicit oneshot_sender(state_type* state) noexcept : state_(state) {}

  void finish(typename state_type::phase_kind next, T* value) {
    {
      detail::wake_list to_wake;  // before the guard: wakes after unlocking
      std::lock_guard guard(state_->lock);
      if (value != nullptr) state_->value.emplace(std::move(*value));
      state_->finish_locked(next, to_wake);
    }
    state_->thread_wakeup.notify_all();  // we still hold a reference: the state is alive
  }
  void reset() noexcept {
    if (state_ == nullptr) return;
    finish(state_type::phase_kind::sender_dropped, nullptr);
    std::exchange(state_, nullptr)->release();
  }

  state_type* state_ = nullptr;
};

template <class T>
class oneshot_receiver {
  using state_type = detail::oneshot_state<T>;
  using phase_kind = typename state_type::phase_kind;

 public:
  class [[nodiscard]] awaiter final : private detail::sync_waiter {
   public:
    explicit awaiter(state_type& state) noexcept : state_(state) {}
    ~awaiter() { abandon_wait(); }
    bool await_ready() {
      return try_complete(state_.lock, [this](detail::wake_list&) { return ready(); });
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, state_.lock, state_.waiters,
                        state_.described_as.kind != wait_kind::none
                            ? state_.described_as
                            : wait_descriptor{wait_kind::oneshot, state_.diagnostic_id.get()},
                        [this](detail::wake_list&) { return ready(); });
    }
    T await_resume() {
      finish_wait();
      std::lock_guard guard(state_.lock);
      return state_.take_locked();
    }

   private:
    outcome ready() const noexcept {  // under the lock
      return state_.phase == phase_kind::empty ? outcome::none : outcome::done;
    }
    state_type& state_;
  };

  oneshot_receiver() noexcept = default;
  oneshot_receiver(oneshot_receiver&& other) noexcept
      : state_(std::exchange(other.state_, nullptr)) {}
  oneshot_receiver& operator=(oneshot_receiver&& other) noexcept {
    if (this != &other) {
      reset();
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  ~oneshot_receiver() { reset(); }

  bool valid() const noexcept { return state_ != nullptr; }
  // Diagnostics: what a snapshot says the receiving task waits on (instead of "oneshot#N").
  void describe_wait_as(const wait_descriptor& what) { checked().described_as = what; }
  // co_await rx -> T. Throws channel_closed if the sender was destroyed without sending,
  // usage_error if the value was already received or the handle is empty. Inside a spawned
  // task only (unless the value is already there). The receiver must outlive the await
  // (co_await on a temporary receiver is fine).
  awaiter operator co_await() & { return awaiter(checked()); }
  awaiter operator co_await() && { return awaiter(checked()); }

  // Blocks a plain thread until the value (or the sender's drop) arrives; the same outcomes as
  // co_await (channel_closed, usage_error). usage_error on a worker thread of a runtime (it
  // would block an executor: co_await instead).
  T blocking_receive() {
    state_type& state = checked();
    if (detail::on_worker_thread()) {
      throw usage_error("spindle: oneshot blocking_receive() on a worker thread; use co_await");
    }
    std::unique_lock guard(state.lock);
    state.thread_wakeup.wait(guard, [&state] { return state.phase != phase_kind::empty; });
    return state.take_locked();
  }
  // True once a value (or the sender's drop) is there to receive.
  bool is_ready() const {
    state_type& state = checked();
    std::lock_guard guard(state.lock);
    return state.phase != phase_kind::empty;
  }
  // Snapshot, for diagnostics and tests: 1 while a task is suspended receiving, else 0.
  std::size_t waiting() const {
    state_type& state = checked();
    std::lock_guard guard(state.lock);
    return state.waiters.size();
  }

 private:
  template <class U>
  friend std::pair<oneshot_sender<U>, oneshot_receiver<U>> oneshot();
  explicit oneshot_receiver(state_type* state) noexcept : state_(state) {}
  state_type& checked() const {
    if (state_ == nullptr) throw usage_error("spindle: empty oneshot receiver");
    return *state_;
  }
  void reset() noexcept {
    if (state_ != nullptr) std::exchange(state_, nullptr)->release();
  }

  state_type* state_ = nullptr;
};

// Creates a connected sender/receiver pair: auto [tx, rx] = spindle::oneshot<T>();
template <class T>
std::pair<oneshot_sender<T>, oneshot_receiver<T>> oneshot() {
  static_assert(std::is_move_constructible_v<T> && !std::is_reference_v<T> &&
                    !std::is_void_v<T>,
                "spindle::oneshot<T>: T must be a move-constructible object type");
  auto* state = new detail::oneshot_state<T>();
  return {oneshot_sender<T>(state), oneshot_receiver<T>(state)};
}

}  // namespace spindle
