// spindle::dispatcher: work handed to the runtime by threads it does not own (seed 002, after
// Cats Effect's Dispatcher).
//
//   spindle::runtime rt;
//   spindle::dispatcher d(rt);                               // parallel mode
//   auto f = d.submit(compute(42));                           // any thread: a task<T> ...
//   auto g = d.submit([] { return 7; });                      // ... or a callable
//   int v = f.get();                                          // blocks this (foreign) thread
//   g.cancel();                                               // or keep g.cancel_action()
//
// Modes (dispatcher_options::mode)
//   parallel   - one submission queue per executor (shard); submit() picks the shorter of two
//                random shards (P2C). Each shard's worker task takes its queue in batches and
//                spawns every submission as a task of its own, on its executor, so the
//                submitter never touches the scheduler. No order between submissions.
//                Cancelling a running submission cancels its task.
//   sequential - one queue, one worker task, and one runner task that runs the submissions one
//                after another, in submission order, each inside the runner. Cancelling the
//                running one uses the seed's latch/drain/refill protocol (dispatcher.cpp): the
//                worker stops moving new work to the runner (latch), takes the runner's queue
//                aside (drain), cancels the runner if it is on that submission, waits for it to
//                end, starts a new runner and gives it the queue back (refill).
//   sequential_uncancelable - the seed's third mode: the worker runs each submission itself,
//                without the runner's queue in between. Cheaper, but a submission that has
//                started cannot be cancelled (one still queued can).
// In every mode cancelling a queued submission removes it: it completes as cancelled at once
// (its body destroyed) and never runs. cancel() returns whether this call requested the
// cancellation (a running body still finishes if it reaches no suspension point: see
// dispatch_cancel in submission.hpp).
//
// Closing (close(), or the destructor; dispatcher_options::on_close picks the policy)
//   1. later submits throw dispatcher_closed;
//   2. await_all: everything already submitted runs to its end; cancel_all: everything queued
//      completes as cancelled, everything running is cancelled;
//   3. on a thread the runtime does not own, close() returns when every submission has
//      completed. On one of the runtime's workers (a submission closing its own dispatcher,
//      say) it does steps 1-2 and returns at once: waiting there could wait for itself.
// The runtime shutting down first is fine: submissions it abandons complete as cancelled, and
// later submits throw dispatcher_closed.
//
// Errors (the vocabulary of core/errors.hpp): submit on a closed dispatcher throws
// dispatcher_closed (also once the runtime stopped: the dispatcher is closed then); an empty
// task or a get()/wait() on a worker is usage_error; a body's exception is the future's
// (get() rethrows it). An exception nobody can observe any more - the body threw and its
// future was dropped (destroyed or assigned over) without get() - is not lost: it goes to
// dispatcher_options::on_unobserved_exception, by default one line on stderr
// (log_unobserved_exception). Exactly once per such submission, on whichever thread comes
// second of the one completing it (a runtime worker, before close() can return) and the one
// dropping the future.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "spindle/dispatch/submission.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

enum class dispatch_mode : std::uint8_t { parallel, sequential, sequential_uncancelable };
const char* to_string(dispatch_mode mode) noexcept;
enum class close_policy : std::uint8_t { await_all, cancel_all };

struct dispatcher_options {
  dispatch_mode mode = dispatch_mode::parallel;
  close_policy on_close = close_policy::await_all;
  // Parallel mode: number of submission queues; 0 = one per executor.
  std::uint32_t shards = 0;
  // Receives the exception of a submission whose future was dropped without get() (see
  // "Errors" above): called once per such submission, on a runtime worker (the body ended
  // after the drop) or on the thread dropping the future (it ended before). Empty: writes
  // "spindle: unobserved exception in a dispatcher submission ..." to stderr
  // (log_unobserved_exception). Keep it short (it may run on a worker); it must not throw
  // (std::terminate).
  std::function<void(std::exception_ptr)> on_unobserved_exception{};
  // Its name in diagnostics (the snapshot's "dispatchers" section, its worker tasks' names).
  std::string name{};
};

class dispatcher_closed : public std::runtime_error {
 public:
  dispatcher_closed() : std::runtime_error("spindle: submit on a closed dispatcher") {}
};

class dispatcher {
 public:
  // Starts the dispatcher's tasks on `rt`. Throws runtime_stopped if `rt` is shutting down.
  explicit dispatcher(runtime& rt, dispatcher_options options = {});
  ~dispatcher();  // close()
  dispatcher(const dispatcher&) = delete;
  dispatcher& operator=(const dispatcher&) = delete;

  // Any thread. Throws dispatcher_closed after close() began (or after the runtime stopped),
  // usage_error for an empty task. The body's exception goes to the future (get()), or to
  // on_unobserved_exception if the future is dropped without get().
  template <class T>
  dispatch_future<T> submit(task<T> body) {
    if (!body.valid()) throw usage_error("spindle: submit of an empty task");
    return submit_new<T>(detail::submission<T, task<T>>::create(std::move(body)));
  }
  // A callable runs on an executor; one that returns a task<T> (a coroutine lambda, say) is
  // called there and its task awaited, the callable kept alive meanwhile: the future is T's.
  template <class F>
    requires(!detail::is_task_v<std::remove_cvref_t<F>>) && std::invocable<std::decay_t<F>&>
  auto submit(F&& function) {
    using returned = std::invoke_result_t<std::decay_t<F>&>;
    using result = typename std::conditional_t<detail::is_task_v<returned>, detail::task_result<returned>,
                                               std::type_identity<returned>>::type;
    return submit_new<result>(
        detail::submission<result, std::decay_t<F>>::create(std::decay_t<F>(std::forward<F>(function))));
  }

  // Closes with the options' policy, or with `policy`. Idempotent (the first policy wins);
  // see "Closing" above for when it returns.
  void close();
  void close(close_policy policy);

  dispatch_mode mode() const noexcept;
  // Submissions accepted and not yet complete.
  std::uint64_t pending() const noexcept;

 private:
  template <class T>
  dispatch_future<T> submit_new(detail::submission_base* s) {
    detail::submission_ref future_side(s);  // U4: the other reference goes to enqueue
    enqueue(s);
    return dispatch_future<T>(std::move(future_side));
  }
  // Takes the dispatcher side's reference of `s` (released if this throws).
  void enqueue(detail::submission_base* s);

  std::shared_ptr<detail::dispatcher_shared> shared_;
  // Its spindle_dispatcher_* families in the runtime's diagnostics registry (G2); declared after
  // shared_, which its writer reads: dropped first.
  diagnostics::registry::registration metrics_;
  // The snapshot's "dispatchers" item (dropped first: before shared_).
  diagnostics::registry::registration diagnostics_item_;
};

}  // namespace spindle
