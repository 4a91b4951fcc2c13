// Pieces both reactor backends share (private to src/core): the park state machine, the list of
// operations in flight, the queue of completions to deliver, and delivery itself.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "spindle/core/intrusive_list.hpp"
#include "spindle/core/reactor.hpp"
#include "spindle/core/trace.hpp"

namespace spindle::core {

// The park_driver states of futex_parker (parker.hpp), with two ways of being parked:
//   running       - the owner is not waiting (or is about to check for a notification)
//   parked_kernel - the owner waits in the backend's system call (io_uring_enter, epoll_wait)
//                   because I/O is in flight; unpark must write the backend's eventfd
//   parked_futex  - the owner waits on this word (no I/O in flight: a futex wake-up is several
//                   times cheaper than going through the ring or epoll, which matters to
//                   CPU-only workloads that park and wake constantly)
//   notified      - a notification is pending; the owner consumes it instead of blocking
class park_state {
 public:
  enum : std::uint32_t { running = 0, parked_kernel = 1, notified = 2, parked_futex = 3 };

  // Owner: true if a notification was pending (consumed: do not block).
  bool consume_notification() noexcept {
    std::uint32_t expected = notified;
    // acquire: whatever the notifier published before unpark() is visible to the owner.
    return state_.compare_exchange_strong(expected, running, std::memory_order_acquire);
  }
  // Owner: running -> how (parked_kernel or parked_futex); false if a notification arrived
  // meanwhile (consumed).
  bool begin_park(std::uint32_t how) noexcept {
    std::uint32_t expected = running;
    // acquire: as above, for the failure case (the word is `notified`).
    if (state_.compare_exchange_strong(expected, how, std::memory_order_acquire)) return true;
    state_.store(running, std::memory_order_relaxed);  // relaxed: the failed CAS acquired
    return false;
  }
  // Owner, after begin_park(parked_futex): blocks until notified, the timeout, or spuriously.
  void wait_on_futex(std::optional<clock_duration> timeout) noexcept {
    futex_wait(&state_, parked_futex, timeout);
  }
  // Owner: back (woken, timed out or spurious).
  void end_park() noexcept {
    state_.exchange(running, std::memory_order_acquire);  // acquire: as above
  }
  // Any thread: returns what the owner was doing, so the caller wakes it the right way:
  // parked_kernel -> write the eventfd; parked_futex -> futex wake-up; else nothing.
  std::uint32_t notify() noexcept {
    // release: pairs with the owner's acquire, publishing what was queued before unpark().
    return state_.exchange(notified, std::memory_order_release);
  }
  // Any thread: the whole park_driver::unpark for a backend whose kernel wait `wake_fd` (an
  // eventfd) interrupts.
  void unpark(int wake_fd) noexcept {
    const std::uint32_t was = notify();
    if (was == parked_futex) {
      futex_wake_one(&state_);
    } else if (was == parked_kernel) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t written = ::write(wake_fd, &one, sizeof one);
    }
  }

 private:
  std::atomic<std::uint32_t> state_{running};
};

// Operations submitted and not completed, for drain() (owner-only, intrusive, O(1)).
class in_flight_list {
 public:
  void insert(io_operation* op) noexcept {
    op->previous_in_flight = nullptr;
    op->next_in_flight = head_;
    if (head_ != nullptr) head_->previous_in_flight = op;
    head_ = op;
    ++size_;
  }
  void remove(io_operation* op) noexcept {
    if (op->previous_in_flight != nullptr) {
      op->previous_in_flight->next_in_flight = op->next_in_flight;
    } else {
      head_ = op->next_in_flight;
    }
    if (op->next_in_flight != nullptr) op->next_in_flight->previous_in_flight = op->previous_in_flight;
    op->previous_in_flight = op->next_in_flight = nullptr;
    --size_;
  }
  io_operation* first() const noexcept { return head_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }

 private:
  io_operation* head_ = nullptr;
  std::size_t size_ = 0;
};

// A FIFO of operations linked through next_waiting (owner-only): completions waiting for
// delivery, and in the epoll backend the operations waiting per descriptor.
using operation_fifo = intrusive_fifo<io_operation, &io_operation::next_waiting>;

// Delivers a final result (R1): the fault hook may rewrite it, then the submitter gets it back.
inline void complete(io_operation* op, io_fault_hook hook) noexcept {
  trace_event(trace_kind::io_complete, std::uint64_t(op->fd), trace_ref(op), std::uint32_t(op->result));
  if (hook != nullptr) hook(op);
  op->on_complete(op);
}

std::unique_ptr<reactor> make_uring_reactor(const reactor_options& options, int& error);
std::unique_ptr<reactor> make_epoll_reactor();

}  // namespace spindle::core
