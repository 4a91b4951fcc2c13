// turnstile: poll-style code inside a task (SPEC E5, the seed's non-main block).
//
//   // poll(w) returns std::optional<R>: a value when ready, else nullopt after arranging for
//   // w.wake() to be called (from any thread, any number of times) when it may be ready.
//   R r = co_await spindle::embed::turnstile(poll);
//
// Callback and poll-based libraries (a host toolkit's request objects, a C library that says
// "call me again when the fd is readable") wake whoever waits as often as they like, from
// wherever they like. A spindle task is woken exactly once per suspension. The turnstile sits
// between the two: it is a block (the seed's word) in front of the task's main block, whose flag
// turns any number of wake() calls into one wake-up of the task, and while it is blocked the
// inner poll is not called at all. It works on the embedded executor (where the task's wake-up
// then only queues an action and asks the host for a tick, E3) and on the multi-core runtime.
//
// The block's state word (one per turnstile await, shared with every copy of its waker):
//   polling   - the task is running the inner poll (or about to); a wake() now means "poll again"
//   notified  - a wake() came while polling: the task does not suspend, it polls again
//   blocked   - the task is suspended on the block (its registration published); the next
//               wake() or a canceller moves it back to polling and wakes the task, exactly once
//   done      - the turnstile completed: later wake() calls do nothing
// Transitions: polling/notified -> notified (wake, a release CAS even when already notified, so
// the next poll sees what this waker published), polling -> blocked (the task, CAS),
// blocked -> polling (wake or canceller, CAS: the winner wakes the task), notified -> polling
// (the task's exchange before it polls again), any -> done (the task, at the end). Exactly one
// party moves the block out of `blocked`. The task's own registration is the usual cancellable
// wait (task/spawned_task.hpp, S3), the block being what a canceller interrupts.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/embed/turnstile_state.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/task/task.hpp"

namespace spindle::embed {

namespace detail {

class turnstile_block final : public ::spindle::cancellable_wait {
 public:
  // Any thread, any number of times.
  void wake() noexcept {
    if (state_.wake()) task_->wake();  // exactly once: this call moved it out of `blocked`
  }
  void begin_poll() noexcept { state_.begin_poll(); }
  void finish() noexcept { state_.finish(); }

  // The awaiter that blocks the task until wake().
  class wait_awaiter {
   public:
    explicit wait_awaiter(turnstile_block& block) noexcept : block_(block) {}
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h);
    void await_resume();

   private:
    turnstile_block& block_;
    bool suspended_ = false;
  };
  wait_awaiter wait() noexcept { return wait_awaiter(*this); }

  bool try_cancel() noexcept override;

 private:
  turnstile_state<> state_;
  ::spindle::detail::spawned_task_base* task_ = nullptr;  // written before `blocked` is set
  bool cancelled_ = false;  // written by the winning canceller under the task lock
};

}  // namespace detail

// A handle on a turnstile's block: copyable, any thread, any number of calls, harmless after the
// turnstile completed.
class waker {
 public:
  explicit waker(std::shared_ptr<detail::turnstile_block> block) noexcept
      : block_(std::move(block)) {}
  void wake() const noexcept { block_->wake(); }

 private:
  std::shared_ptr<detail::turnstile_block> block_;
};

template <class Poll>
using turnstile_result_t =
    typename std::invoke_result_t<Poll&, const waker&>::value_type;  // Poll returns optional<R>

// Polls until `poll(w)` returns a value; between polls the task is blocked until w.wake().
// A cancellation point (throws task_cancelled). Needs a spawned task. A poll that calls
// w.wake() itself polls again at once, within the task's cooperative budget, then yields.
template <class Poll>
task<turnstile_result_t<Poll>> turnstile(Poll poll) {
  auto block = std::make_shared<detail::turnstile_block>();
  const waker w(block);
  struct finish_guard {
    detail::turnstile_block& block;
    ~finish_guard() { block.finish(); }
  } guard{*block};
  for (;;) {
    block->begin_poll();
    if (auto ready = poll(w)) co_return std::move(*ready);
    // A poll that wakes itself every time (a "yield by self-wake") never blocks here: the wait
    // still counts against the cooperative budget and yields when it is used up, so the rest of
    // the executor runs (and the host's tick ends).
    co_await block->wait();
  }
}

}  // namespace spindle::embed
