// spindle::semaphore: a counting semaphore for tasks.
//
//   spindle::semaphore slots(4);
//   co_await slots.acquire();      // suspends the task while no permit is available
//   ...
//   slots.release();               // from anywhere (a task or a plain thread)
//
//   {
//     spindle::semaphore::permit held = co_await slots.acquire_permit();
//     ...                          // may itself co_await
//   }                              // held.~permit() releases it
//
// Design
//   State, under the primitive lock (a stripe, see sync/wait_queue.hpp): `available_` permits
//   and the FIFO `waiters_` of suspended acquire() calls. Invariant: waiters are queued only
//   while available_ == 0.
//   Fairness: FIFO handoff, as for spindle::mutex. release(n) hands permits one by one to the
//   oldest waiters (each resumes holding its permit) and only adds what is left to
//   `available_`. try_acquire() and the await fast path take a permit only from
//   `available_`, which is zero while anyone waits: they never overtake a queued task.
//   Permits are not owned: any code may release (a release above the initial count raises the
//   count, as with std::counting_semaphore, up to `max_permits`).
//   Cancellation: a task cancelled while queued is unlinked and gets task_cancelled without a
//   permit. One woken with a permit keeps it.
//   Destruction: fine without waiters; queued tasks are woken with task_cancelled. A frame
//   destroyed after being handed a permit but before resuming releases it again.
//   Permit guard: acquire_permit() is acquire() whose await resumes with a `permit` owning the
//   permit it took (as mutex::lock() resumes with a guard); the permit releases it when
//   destroyed, or earlier by release(); forget() gives it up without releasing (the count
//   stays lower, as tokio's SemaphorePermit::forget). Movable (ownership moves with it, to
//   another task too), not copyable. The semaphore must outlive its permits.
#pragma once

#include <coroutine>
#include <cstddef>
#include <limits>
#include <mutex>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/sync/wait_queue.hpp"

namespace spindle {

class semaphore {
 public:
  static constexpr std::size_t max_permits = std::numeric_limits<std::size_t>::max() / 2;

  // One owned permit: released on destruction (see "Permit guard" above).
  class [[nodiscard]] permit {
   public:
    permit() noexcept = default;
    permit(semaphore& s, std::adopt_lock_t) noexcept : semaphore_(&s) {}
    permit(permit&& other) noexcept : semaphore_(std::exchange(other.semaphore_, nullptr)) {}
    permit& operator=(permit&& other) noexcept {
      if (this != &other) {
        reset();
        semaphore_ = std::exchange(other.semaphore_, nullptr);
      }
      return *this;
    }
    permit(const permit&) = delete;
    permit& operator=(const permit&) = delete;
    ~permit() { reset(); }

    bool owns_permit() const noexcept { return semaphore_ != nullptr; }
    explicit operator bool() const noexcept { return owns_permit(); }
    semaphore* get() const noexcept { return semaphore_; }
    // Releases the permit now; the guard becomes empty. usage_error if it owns nothing.
    void release() {
      if (semaphore_ == nullptr) {
        throw usage_error("spindle: semaphore::permit::release on an empty permit");
      }
      std::exchange(semaphore_, nullptr)->release_noexcept(1);
    }
    // Gives the permit up without releasing it: the semaphore keeps one permit fewer.
    semaphore* forget() noexcept { return std::exchange(semaphore_, nullptr); }

   private:
    void reset() noexcept {
      // An owned permit was taken from the count, so giving it back cannot exceed max_permits.
      if (semaphore_ != nullptr) std::exchange(semaphore_, nullptr)->release_noexcept(1);
    }
    semaphore* semaphore_ = nullptr;
  };

  class [[nodiscard]] acquire_awaiter final : private detail::sync_waiter {
   public:
    explicit acquire_awaiter(semaphore& s) noexcept : semaphore_(s) {}
    ~acquire_awaiter() {
      // Handed a permit but never resumed (frame destroyed at shutdown): give it back.
      if (abandon_wait() == outcome::done) semaphore_.release_noexcept(1);
    }
    bool await_ready() {
      return try_complete(semaphore_.state_lock(),
                          [this](detail::wake_list&) { return try_take(); });
    }
    bool await_suspend(std::coroutine_handle<> h) {
      return suspend_on(h, semaphore_.state_lock(), semaphore_.waiters_,
                        {wait_kind::semaphore, semaphore_.diagnostic_id_.get()},
                        [this](detail::wake_list&) { return try_take(); });
    }
    void await_resume() { finish_wait(); }

   private:
    outcome try_take() noexcept {  // under the lock
      if (semaphore_.available_ == 0) return outcome::none;
      --semaphore_.available_;
      return outcome::done;
    }
    semaphore& semaphore_;
  };

  // acquire() whose await resumes with the permit it took.
  class [[nodiscard]] permit_awaiter {
   public:
    explicit permit_awaiter(semaphore& s) noexcept : semaphore_(s), acquire_(s) {}
    bool await_ready() { return acquire_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> h) { return acquire_.await_suspend(h); }
    permit await_resume() {
      acquire_.await_resume();
      return permit(semaphore_, std::adopt_lock);
    }

   private:
    semaphore& semaphore_;
    acquire_awaiter acquire_;  // gives a permit back if the frame goes before resuming
  };

  explicit semaphore(std::size_t initial_permits) : available_(initial_permits) {
    if (initial_permits > max_permits) throw usage_error("spindle: semaphore count too large");
  }
  semaphore(const semaphore&) = delete;
  semaphore& operator=(const semaphore&) = delete;
  ~semaphore() {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    waiters_.complete_all(detail::sync_waiter::outcome::cancelled, to_wake);
  }

  // co_await s.acquire(): takes one permit. Inside a spawned task only.
  acquire_awaiter acquire() noexcept { return acquire_awaiter(*this); }
  // co_await s.acquire_permit() -> permit: acquire() with a guard. Inside a spawned task only.
  permit_awaiter acquire_permit() noexcept { return permit_awaiter(*this); }
  // A permit if one is free now (never overtakes a queued task), else an empty one.
  permit try_acquire_permit() noexcept {
    return try_acquire() ? permit(*this, std::adopt_lock) : permit();
  }
  bool try_acquire() noexcept {
    std::lock_guard guard(state_lock());
    if (available_ == 0) return false;
    --available_;
    return true;
  }
  // Returns `permits` permits, oldest waiters first. usage_error if the count would exceed
  // max_permits.
  void release(std::size_t permits = 1) {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    if (permits > max_permits - available_) {
      throw usage_error("spindle: semaphore::release above max_permits");
    }
    hand_out(permits, to_wake);
  }

  // Snapshots, for diagnostics and tests.
  std::size_t available() const noexcept {
    std::lock_guard guard(state_lock());
    return available_;
  }
  std::size_t waiting() const noexcept {
    std::lock_guard guard(state_lock());
    return waiters_.size();
  }

 private:
  std::mutex& state_lock() const noexcept { return detail::sync_lock_for(this); }
  void release_noexcept(std::size_t permits) noexcept {
    detail::wake_list to_wake;  // before the guard: wakes after unlocking
    std::lock_guard guard(state_lock());
    hand_out(permits, to_wake);
  }
  // Under state_lock(): FIFO handoff, then the rest to the pool.
  void hand_out(std::size_t permits, detail::wake_list& to_wake) noexcept {
    for (; permits > 0; --permits) {
      detail::sync_waiter* w = waiters_.pop_front();
      if (w == nullptr) break;
      to_wake.add(w, detail::sync_waiter::outcome::done);
    }
    available_ += permits;
  }

  std::size_t available_;        // under state_lock()
  // The snapshot's name for it ("channel#5"): taken on the first wait (task_record.hpp).
 public:
  // The number a snapshot names it by ("mutex#2"), taken now if no task waited on it yet.
  std::uint32_t diagnostic_id() const noexcept { return diagnostic_id_.get(); }

 private:
  detail::lazy_object_id diagnostic_id_;
  detail::wait_queue waiters_;  // under state_lock()
};

}  // namespace spindle
