// dispatch_queue: the FIFO between the threads that hand work in and the one task that takes it
// out (a shard's worker; in sequential mode also the runner's queue).
//
// Who may touch what
//   - producers (any thread): push() a submission, push_control() a control node;
//   - the consumer (one task at a time): take_batch() / take_one(), then waits on ready() when
//     told the queue is empty;
//   - the sequential worker: drain() and refill() (the latch/drain/refill protocol);
//   - closers: close() (no more submissions; control nodes still go in), kill() (the consumer
//     is gone: nothing goes in any more; what is in it is handed back).
// Everything below is guarded by `lock_`; only `size_` is also read without it (P2C).
// Wake-up: a consumer that finds the queue empty resets `ready_` and sets `consumer_waiting_`
// under the lock; the next push clears the flag under the lock and sets the event after
// unlocking. So every set() follows the reset() it answers, and the consumer never sleeps
// with something queued.
// Shards also keep the list of live submissions (accepted, not complete) under the same lock,
// for close(cancel_all).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "spindle/dispatch/submission.hpp"
#include "spindle/sync/event.hpp"

namespace spindle::detail {

class dispatch_queue {
 public:
  enum class take_status { taken, empty, closed_and_empty };

  // Any thread. False (nothing queued, nothing linked) once closed or killed.
  bool push(submission_base* s, bool track_live);
  // Any thread. False once killed.
  bool push_control(dispatch_node* n);

  // The consumer. On `taken`, `out` is the oldest `max` nodes (or all), oldest first, linked
  // by next.
  take_status take_batch(dispatch_node*& out, std::size_t max);
  // The consumer. On `taken`, `out` is the oldest node.
  take_status take_one(dispatch_node*& out);
  event& ready() noexcept { return ready_; }

  // The sequential worker: takes the whole queue aside (oldest first) and latches it: until
  // refill(), the consumer finds it empty, never closed (it must not end meanwhile).
  dispatch_node* drain();
  // Puts back, in front, what drain() took, and lifts the latch.
  void refill(dispatch_node* chain);

  void close();
  // Marks the queue dead and returns what was in it (oldest first).
  dispatch_node* kill();

  std::size_t size() const noexcept {
    // relaxed: a hint for placement only.
    return size_.load(std::memory_order_relaxed);
  }

  // Live submissions (accepted, not complete); see the header comment.
  void unlink_live(submission_base* s);
  // Calls `visit` on a new reference to every live submission, after unlocking.
  template <class Visit>
  void for_each_live(Visit&& visit);

 private:
  void link_back(dispatch_node* n) noexcept;
  void wake_consumer_locked(bool& wake) noexcept;

  std::mutex lock_;
  dispatch_node* front_ = nullptr;
  dispatch_node* back_ = nullptr;
  submission_base* live_ = nullptr;
  bool consumer_waiting_ = false;
  bool closed_ = false;
  bool latched_ = false;  // between drain() and refill()
  bool dead_ = false;
  std::atomic<std::size_t> size_{0};  // written under lock_
  event ready_;
};

template <class Visit>
void dispatch_queue::for_each_live(Visit&& visit) {
  std::vector<submission_ref> live;
  {
    std::lock_guard guard(lock_);
    for (submission_base* s = live_; s != nullptr; s = s->live_next) live.push_back(submission_ref::share(s));
  }
  for (const submission_ref& s : live) visit(s.get());
}

}  // namespace spindle::detail
