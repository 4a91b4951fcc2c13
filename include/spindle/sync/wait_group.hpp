// spindle::wait_group: waits for a counted set of activities to finish (Go's sync.WaitGroup).
//
//   spindle::wait_group pending;
//   pending.add(3);                          // before starting the three activities
//   ... each activity calls pending.done() when finished (from a task or a plain thread)
//   co_await pending.wait();                 // returns once the count is back to zero
//
// Design
//   State: `count_` and the FIFO `waiters_`, both written under the primitive lock (a stripe,
//   see sync/wait_queue.hpp); `count_` is atomic only so that the await fast path and count()
//   can read it without the lock. Invariant: waiters are queued only while count_ > 0.
//   When add()/done() brings the count to zero, every queued task is woken (outcome done).
//   A wait that begins while the count is zero returns at once; the group may be reused
//   (add again after reaching zero). The count never goes negative: that is usage_error.
//   Memory: whatever an activity wrote before its done() is visible to a task returning from
//   wait() (release store / acquire load, or the lock and the wake).
//   Cancellation: a queued task cancelled is unlinked and gets task_cancelled.
//   Destruction: fine without waiters; queued tasks get task_cancelled.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>

#include "spindle/core/errors.hpp"
#include "spindle/sync/wait_queue.hpp"

namespace spindle {

class wait_group {
 public:
  class [[nodiscard]] wait_awaiter final : private detail::sync_waiter {
   public:
    explicit wait_awaiter(wait_group& g) noexcept : group_(g) {}
    ~wait_awaiter() { abandon_wait(); }
    // Zero: completes at once, unless the cooperative budget is used up (await_suspend yields).
    bool await_ready() const noexcept {
      return group_.count() == 0 && detail::cooperative_await::may_complete_inline();
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, group_.state_lock(), group_.waiters_,
                        {wait_kind::wait_group, group_.diagnostic_id_.get()}, [this](detail::wake_list&) {
        // relaxed: written only under the lock, which we hold.
        return group_.count_.load(std::memory_order_relaxed) == 0 ? outcome::done
                                                                  : outcome::none;
      });
    }
    void await_resume() { finish_wait(); }

   private:
    wait_group& group_;
  };

  wait_group() noexcept = default;
  wait_group(const wait_group&) = delete;
  wait_group& operator=(const wait_group&) = delete;
  ~wait_group() {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    waiters_.complete_all(detail::sync_waiter::outcome::cancelled, to_wake);
  }

  // Adds `delta` (may be negative) to the count; usage_error if it would drop below zero.
  void add(std::int64_t delta) {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    // relaxed: written only under the lock, which we hold.
    const std::int64_t now = count_.load(std::memory_order_relaxed) + delta;
    if (now < 0) throw usage_error("spindle: wait_group count below zero (done() without add())");
    if (now == 0) waiters_.complete_all(detail::sync_waiter::outcome::done, to_wake);
    // release: an activity's writes before done() are visible to a fast-path waiter.
    // Last touch of *this: a fast-path waiter that sees zero may destroy the group at once.
    count_.store(now, std::memory_order_release);
  }
  void done() { add(-1); }

  // co_await g.wait(): returns once the count is zero. Inside a spawned task only.
  wait_awaiter wait() noexcept { return wait_awaiter(*this); }

  std::int64_t count() const noexcept {
    // acquire: pairs with add()'s release (see Memory above).
    return count_.load(std::memory_order_acquire);
  }
  // Snapshot, for diagnostics and tests.
  std::size_t waiting() const noexcept {
    std::lock_guard guard(state_lock());
    return waiters_.size();
  }

 private:
  std::mutex& state_lock() const noexcept { return detail::sync_lock_for(this); }

  std::atomic<std::int64_t> count_{0};  // written under state_lock()
  // The snapshot's name for it ("channel#5"): taken on the first wait (task_record.hpp).
 public:
  // The number a snapshot names it by ("mutex#2"), taken now if no task waited on it yet.
  std::uint32_t diagnostic_id() const noexcept { return diagnostic_id_.get(); }

 private:
  detail::lazy_object_id diagnostic_id_;
  detail::wait_queue waiters_;          // under state_lock()
};

}  // namespace spindle
