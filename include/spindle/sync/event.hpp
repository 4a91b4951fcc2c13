// spindle::event: a manual-reset event for tasks.
//
//   spindle::event ready;
//   co_await ready.wait();   // suspends until set() (returns at once if already set)
//   ready.set();             // from anywhere: wakes every waiting task; stays set
//   ready.reset();           // later waits suspend again
//
// Design
//   State: `signalled_` and the FIFO `waiters_`, both written under the primitive lock (a
//   stripe, see sync/wait_queue.hpp). `signalled_` is atomic only so that is_set() and the
//   await fast path can read it without the lock. Invariant: waiters are queued only while
//   the event is clear.
//   set() marks it set and wakes every queued task (each with outcome done, in FIFO order);
//   reset() only clears the flag: a task already woken by a set() still returns from wait(),
//   even if reset() happens before it runs.
//   Memory: whatever a thread wrote before set() is visible to every task that returns from
//   wait() because of that set() (release store / acquire load, or the lock and the wake).
//   Cancellation: a queued task cancelled before the set() is unlinked and gets
//   task_cancelled. Destruction: fine without waiters; queued tasks get task_cancelled.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <mutex>

#include "spindle/sync/wait_queue.hpp"

namespace spindle {

class event {
 public:
  class [[nodiscard]] wait_awaiter final : private detail::sync_waiter {
   public:
    explicit wait_awaiter(event& e) noexcept : event_(e) {}
    ~wait_awaiter() { abandon_wait(); }
    // Set: completes at once, unless the cooperative budget is used up (await_suspend yields).
    bool await_ready() const noexcept {
      return event_.is_set() && detail::cooperative_await::may_complete_inline();
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, event_.state_lock(), event_.waiters_,
                        {wait_kind::event, event_.diagnostic_id_.get()}, [this](detail::wake_list&) {
        // relaxed: written only under the lock, which we hold.
        return event_.signalled_.load(std::memory_order_relaxed) ? outcome::done
                                                                 : outcome::none;
      });
    }
    void await_resume() { finish_wait(); }

   private:
    event& event_;
  };

  explicit event(bool initially_set = false) noexcept : signalled_(initially_set) {}
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    waiters_.complete_all(detail::sync_waiter::outcome::cancelled, to_wake);
  }

  // co_await e.wait(): returns once the event is set. Inside a spawned task only.
  wait_awaiter wait() noexcept { return wait_awaiter(*this); }

  void set() noexcept {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    waiters_.complete_all(detail::sync_waiter::outcome::done, to_wake);
    // release: writes made before set() are visible to a fast-path waiter's acquire load.
    // Last touch of *this: a fast-path waiter that sees it may destroy the event at once.
    signalled_.store(true, std::memory_order_release);
  }
  void reset() noexcept {
    std::lock_guard guard(state_lock());
    // relaxed: clearing publishes nothing; the lock orders it against set() and waiters.
    signalled_.store(false, std::memory_order_relaxed);
  }
  bool is_set() const noexcept {
    // acquire: pairs with set()'s release (see Memory above).
    return signalled_.load(std::memory_order_acquire);
  }
  // Snapshot, for diagnostics and tests.
  std::size_t waiting() const noexcept {
    std::lock_guard guard(state_lock());
    return waiters_.size();
  }

 private:
  std::mutex& state_lock() const noexcept { return detail::sync_lock_for(this); }

  std::atomic<bool> signalled_;  // written under state_lock()
  // The snapshot's name for it ("channel#5"): taken on the first wait (task_record.hpp).
 public:
  // The number a snapshot names it by ("mutex#2"), taken now if no task waited on it yet.
  std::uint32_t diagnostic_id() const noexcept { return diagnostic_id_.get(); }

 private:
  detail::lazy_object_id diagnostic_id_;
  detail::wait_queue waiters_;   // under state_lock()
};

}  // namespace spindle
