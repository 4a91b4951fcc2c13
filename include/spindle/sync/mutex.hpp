// spindle::mutex: an asynchronous mutual-exclusion lock for tasks.
//
//   spindle::mutex m;
//   {
//     auto held = co_await m.lock();   // suspends the task (not the thread) while contended
//     ...                              // critical section; may itself co_await
//   }                                  // held.~guard() unlocks
//   if (m.try_lock()) { ...; m.unlock(); }
//
// Design
//   State, under the primitive lock (a stripe, see sync/wait_queue.hpp): `locked_` and the FIFO
//   `waiters_` of suspended lock() calls.
//   Fairness: FIFO handoff. unlock() with waiters does not clear `locked_`: it pops the oldest
//   waiter and hands it the lock directly (the waiter resumes owning it). Nobody can barge in
//   between, and a waiter is served after every waiter that queued before it. The cost is a
//   lock convoy under heavy contention (each handoff waits for the next owner to be scheduled);
//   the benefit is no starvation and a deterministic order.
//   try_lock() and the await fast path succeed only when `locked_` is clear, which (by the
//   handoff) implies there are no waiters: they never overtake a queued task.
//   Ownership is not tied to a task or a thread: any code may unlock (a guard may be moved to
//   another task); unlocking a mutex that is not locked throws usage_error.
//   Cancellation: a task cancelled while queued in lock() is unlinked and gets task_cancelled;
//   it never owns the lock. One woken with the lock keeps it (the cancel hits its next wait).
//   Destruction: destroying an unlocked mutex is fine. Destroying one with tasks queued wakes
//   them with task_cancelled. A frame destroyed while queued (runtime shutdown) unlinks itself;
//   one destroyed after being handed the lock but before resuming unlocks it (passing it on).
#pragma once

#include <coroutine>
#include <cstddef>
#include <mutex>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/sync/wait_queue.hpp"

namespace spindle {

class mutex {
 public:
  // An owned lock: unlocks on destruction. Movable (ownership moves with it), not copyable.
  class [[nodiscard]] guard {
   public:
    guard() noexcept = default;
    guard(mutex& m, std::adopt_lock_t) noexcept : mutex_(&m) {}
    guard(guard&& other) noexcept : mutex_(std::exchange(other.mutex_, nullptr)) {}
    guard& operator=(guard&& other) noexcept {
      if (this != &other) {
        reset();
        mutex_ = std::exchange(other.mutex_, nullptr);
      }
      return *this;
    }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    ~guard() { reset(); }

    bool owns_lock() const noexcept { return mutex_ != nullptr; }
    explicit operator bool() const noexcept { return owns_lock(); }
    mutex* get() const noexcept { return mutex_; }
    // Unlocks early; the guard becomes empty. Throws usage_error if it owns nothing.
    void unlock() {
      if (mutex_ == nullptr) throw usage_error("spindle: mutex::guard::unlock on an empty guard");
      std::exchange(mutex_, nullptr)->unlock();
    }
    // Gives up ownership without unlocking; the caller must unlock the returned mutex.
    mutex* release() noexcept { return std::exchange(mutex_, nullptr); }

   private:
    void reset() noexcept {
      if (mutex_ != nullptr) std::exchange(mutex_, nullptr)->unlock_owned();
    }
    mutex* mutex_ = nullptr;
  };

  class [[nodiscard]] lock_awaiter final : private detail::sync_waiter {
   public:
    explicit lock_awaiter(mutex& m) noexcept : mutex_(m) {}
    ~lock_awaiter() {
      // Handed the lock but never resumed (frame destroyed at shutdown): pass it on.
      if (abandon_wait() == outcome::done) mutex_.unlock_owned();
    }
    bool await_ready() {
      return try_complete(mutex_.state_lock(), [this](detail::wake_list&) { return try_take(); });
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, mutex_.state_lock(), mutex_.waiters_,
                        {wait_kind::mutex, mutex_.diagnostic_id_.get()},
                        [this](detail::wake_list&) { return try_take(); });
    }
    guard await_resume() {
      finish_wait();
      return guard(mutex_, std::adopt_lock);
    }

   private:
    outcome try_take() noexcept {  // under the lock
      if (mutex_.locked_) return outcome::none;
      mutex_.locked_ = true;
      return outcome::done;
    }
    mutex& mutex_;
  };

  mutex() noexcept = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;
  // Wakes any queued task with task_cancelled (see above).
  ~mutex();

  // co_await m.lock() -> guard. Inside a spawned task only (usage_error otherwise).
  lock_awaiter lock() noexcept { return lock_awaiter(*this); }
  // Takes the lock if it is free (never overtakes a queued task). Pair with unlock().
  bool try_lock() noexcept;
  // Adopting variant: an owning guard, or an empty one if the lock was not free.
  guard try_lock_guard() noexcept {
    return try_lock() ? guard(*this, std::adopt_lock) : guard();
  }
  // Releases the lock, handing it to the oldest queued task if any. usage_error if unlocked.
  void unlock();

  // Snapshots, for diagnostics and tests.
  bool is_locked() const noexcept;
  std::size_t waiting() const noexcept;

 private:
  std::mutex& state_lock() const noexcept { return detail::sync_lock_for(this); }
  // Unlock by a known owner (guard, abandoned handoff): cannot fail.
  void unlock_owned() noexcept;
  // Under state_lock(): the oldest waiter becomes the owner, or the mutex becomes free.
  void hand_off(detail::wake_list& to_wake) noexcept;

  bool locked_ = false;         // under state_lock()
  // The snapshot's name for it ("channel#5"): taken on the first wait (task_record.hpp).
 public:
  // The number a snapshot names it by ("mutex#2"), taken now if no task waited on it yet.
  std::uint32_t diagnostic_id() const noexcept { return diagnostic_id_.get(); }

 private:
  detail::lazy_object_id diagnostic_id_;
  detail::wait_queue waiters_;  // under state_lock()
};

}  // namespace spindle
