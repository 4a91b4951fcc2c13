// A submission: one piece of work handed to a dispatcher, and the future its submitter keeps.
//
// Participants
//   - the submitter: a thread the runtime does not own (or any thread). It gets a
//     dispatch_future (wait/get the outcome) and may cancel, through the future or through a
//     detached dispatch_cancel action;
//   - the dispatcher's queue consumer (the worker task of a shard, see dispatcher.hpp): takes
//     the submission off the queue and starts it (parallel mode: spawns it as its own task;
//     sequential modes: hands it to the one task that runs submissions in order);
//   - the task that runs the body, and whoever completes it instead (a canceller while it is
//     still queued; the frame's destruction at runtime shutdown).
//
// State word `state_` (submission_state.hpp has the bits and the transitions, each one CAS):
//   phase queued -> starting -> running -> complete (or queued -> complete when cancelled
//   while queued; `starting` only in parallel mode, while the worker spawns its task), the
//   outcome, `cancel_pending`, and `waiter`.
// Invariants
//   (U1) Exactly one party moves the phase to `complete` (by CAS); it wrote the value or the
//        exception before (release), and readers look at them only after seeing `complete`
//        (acquire).
//   (U2) `running_task_` (parallel mode) is written by the worker before its CAS from
//        `starting` to `running` (release); a canceller reads it only after seeing `running`
//        (acquire), and only the canceller that set `cancel_pending` does. If the canceller
//        came during `starting`, the worker sees `cancel_pending` in its CAS and cancels the
//        task itself. Either way exactly one of them cancels.
//   (U3) A submission holds a reference on its dispatcher's shared state, so every completion
//        and every cancel may touch it, whenever the dispatcher object itself goes away.
//   (U4) References: one for the future (or each cancel action), one for the dispatcher side
//        (queue, then the task that runs it). The last release deletes.
//   (U5) The body belongs to whoever moves the submission out of `queued`: the worker or
//        runner (then the frame that runs it), a canceller's queued CAS, or abandon_queued().
//        Only that party destroys it early (before the submitter can see `complete`); else it
//        goes with the submission.
//   (U6) Unobserved exceptions: `observation_` has two bits, "ended with an exception" (set
//        once by the completer, after its CAS to complete) and "future dropped without get()"
//        (set once by the future). Each side sets its bit with one RMW; the side that finds
//        the other's bit already set reports the exception (dispatcher_shared::
//        report_unobserved), so it is reported exactly once, and never when get() took it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/core/frame_allocator.hpp"
#include "spindle/dispatch/submission_state.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

namespace detail {

class dispatcher_shared;
class submission_base;
void release_submission(submission_base* submission) noexcept;

// A node of a dispatcher queue: a submission, or a request to cancel the running one.
struct dispatch_node {
  enum class kind : std::uint8_t { submission, cancel_running, runner_finished };
  explicit dispatch_node(kind k) noexcept : node_kind(k) {}
  dispatch_node* next = nullptr;  // guarded by the lock of the queue it is in
  kind node_kind;
};

// A counted reference to a submission (U4).
class submission_ref {
 public:
  submission_ref() noexcept = default;
  explicit submission_ref(submission_base* s) noexcept : submission_(s) {}  // adopts a reference
  // A new reference to `s`, which the caller knows to be alive.
  static submission_ref share(submission_base* s) noexcept;
  submission_ref(const submission_ref& other) noexcept;
  submission_ref(submission_ref&& other) noexcept : submission_(std::exchange(other.submission_, nullptr)) {}
  submission_ref& operator=(submission_ref other) noexcept {
    std::swap(submission_, other.submission_);
    return *this;
  }
  ~submission_ref() {
    if (submission_ != nullptr) release_submission(submission_);
  }
  submission_base* get() const noexcept { return submission_; }
  submission_base* operator->() const noexcept { return submission_; }
  explicit operator bool() const noexcept { return submission_ != nullptr; }
  submission_base* release() noexcept { return std::exchange(submission_, nullptr); }

 private:
  submission_base* submission_ = nullptr;
};

class submission_base : public dispatch_node {
 public:
  using outcome = submission_outcome;

  // The coroutine that runs the body. Started by the dispatcher with the dispatcher side's
  // reference; completes the submission whatever happens (its frame's destruction included).
  using start_function = task<void> (*)(submission_ref self);

  // --- the submitter's side ----------------------------------------------------------------
  bool is_complete() const noexcept { return state_.is_complete(); }
  // Blocks the calling thread until complete.
  void wait() noexcept;
  outcome final_outcome() const noexcept { return state_.final_outcome(); }
  std::exception_ptr exception() const noexcept { return exception_; }
  // Requests cancellation: a queued submission completes as cancelled at once, a running one is
  // cancelled as its dispatcher's mode allows. False when it was already complete, already
  // being cancelled, or started in a mode that cannot cancel it (sequential_uncancelable).
  bool cancel() noexcept;
  // The future went away without taking the outcome (U6): reports an exception it ended with,
  // now or when it ends.
  void future_dropped() noexcept;

  // --- the dispatcher's side ---------------------------------------------------------------
  start_function start() const noexcept { return start_; }
  // The worker's transitions (submission_state.hpp).
  bool try_begin_start() noexcept { return state_.try_begin_start(); }
  bool publish_running() noexcept { return state_.publish_running(); }
  bool try_run() noexcept { return state_.try_run(); }
  bool is_running() const noexcept { return state_.is_running(); }
  // Moves to complete with `result` (U1), leaves the dispatcher's books, wakes a waiter.
  // Returns false if it was already complete.
  bool finish(outcome result) noexcept;
  // Ends a submission nobody will run any further: its body goes first (captures, or the
  // body's suspended frame, which may refer to what is shutting down), then it completes as
  // cancelled. Only the party that owns the body may call it: the frame that runs it, or
  // whoever moved it out of `queued` (a queued one's body belongs to a canceller's CAS as well).
  void abandon() noexcept {
    drop_body_(this);
    finish(outcome::cancelled);
  }
  // A submission found in a queue that died: claims it (queued -> starting; a canceller that
  // comes now leaves it to us) and abandons it, unless a canceller completed it first.
  void abandon_queued() noexcept {
    if (try_begin_start()) abandon();
  }

  join_handle<void> running_task_;  // parallel mode: U2
  dispatcher_shared* owner_;        // kept alive by owner_reference_ (U3)
  std::shared_ptr<void> owner_reference_;
  submission_base* live_previous = nullptr;  // the shard's list of live submissions
  submission_base* live_next = nullptr;      // (guarded by the shard's lock)
  bool live_linked = false;
  std::uint32_t shard = 0;

 protected:
  using destroy_function = void (*)(submission_base*) noexcept;
  submission_base(start_function start, destroy_function drop_body, destroy_function destroy) noexcept
      : dispatch_node(kind::submission), start_(start), drop_body_(drop_body), destroy_(destroy) {}
  ~submission_base() = default;

  std::exception_ptr exception_;  // written before complete (U1)

 private:
  friend class submission_ref;
  friend void release_submission(submission_base* submission) noexcept;
  submission_state<> state_;
  std::atomic<std::uint32_t> references_{2};  // the future + the dispatcher side (U4)
  enum : std::uint8_t { ended_with_exception = 1, future_gone = 2 };
  // U6. Whoever sets the second bit reports; `side` is the caller's bit.
  void note_unobserved(std::uint8_t side) noexcept;
  std::atomic<std::uint8_t> observation_{0};
  start_function start_;
  destroy_function drop_body_;  // destroys the body of a submission that never started
  destroy_function destroy_;
};

inline submission_ref::submission_ref(const submission_ref& other) noexcept : submission_(other.submission_) {
  // relaxed: a new reference from an existing one needs no ordering (as std::shared_ptr).
  if (submission_ != nullptr) submission_->references_.fetch_add(1, std::memory_order_relaxed);
}

inline submission_ref submission_ref::share(submission_base* s) noexcept {
  // relaxed: as above.
  s->references_.fetch_add(1, std::memory_order_relaxed);
  return submission_ref(s);
}

// Abandons the submission unless its body completed it (runtime shutdown destroys the frame of
// a task that never finished; a task cancelled before it ran is destroyed unrun): a parameter
// of the body's coroutine, so it exists from the moment the coroutine is created.
struct completion_guard {
  submission_ref submission;
  explicit completion_guard(submission_ref s) noexcept : submission(std::move(s)) {}
  completion_guard(completion_guard&& other) noexcept = default;
  ~completion_guard() {
    if (submission) submission->abandon();
  }
};

// The value of a completed submission, whatever its body's type.
template <class T>
class valued_submission : public submission_base {
 public:
  // After complete with outcome::value (U1), once.
  T take_value() {
    if constexpr (!std::is_void_v<T>) return std::move(*value_);
  }

 protected:
  using submission_base::submission_base;
  struct empty {};
  std::optional<std::conditional_t<std::is_void_v<T>, empty, T>> value_;
};

template <class T>
struct task_result {};
template <class T>
struct task_result<task<T>> {
  using type = T;
};

// Body: task<T>; a callable returning T; or a callable returning task<T> (called on the
// executor, and kept alive while its task runs: a coroutine lambda's captures live in it).
template <class T, class Body>
class submission final : public valued_submission<T> {
  using base = valued_submission<T>;
  using outcome = submission_base::outcome;

 public:
  // Allocated like task frames (core/frame_allocator.hpp): made on the submitter's thread,
  // freed on a worker's, at high rates.
  static submission* create(Body body) {
    void* memory = core::allocate_frame(sizeof(submission));
    try {
      return ::new (memory) submission(std::move(body));
    } catch (...) {
      core::deallocate_frame(memory);
      throw;
    }
  }

 private:
  static task<void> run(submission_ref self) { return run_guarded(completion_guard(std::move(self))); }
  static task<void> run_guarded(completion_guard guard) {
    auto* self = static_cast<submission*>(guard.submission.get());
    bool cancelled = false;
    try {
      if constexpr (std::is_same_v<Body, task<T>>) {
        if constexpr (std::is_void_v<T>) {
          co_await std::move(*self->body_);
        } else {
          self->value_.emplace(co_await std::move(*self->body_));
        }
      } else if constexpr (returns_task) {
        if constexpr (std::is_void_v<T>) {
          co_await (*self->body_)();
        } else {
          self->value_.emplace(co_await (*self->body_)());
        }
      } else if constexpr (std::is_void_v<T>) {
        (*self->body_)();
      } else {
        self->value_.emplace((*self->body_)());
      }
    } catch (const task_cancelled&) {
      cancelled = true;
    } catch (...) {
      self->exception_ = std::current_exception();
    }
    self->body_.reset();  // the body's frame and captures go before the submitter wakes
    self->finish(cancelled ? outcome::cancelled : self->exception_ ? outcome::exception : outcome::value);
    guard.submission = submission_ref();  // finished: nothing left for the guard to do
  }
  static constexpr bool returns_task = [] {
    if constexpr (std::is_same_v<Body, task<T>>) {
      return false;
    } else {
      return is_task_v<std::invoke_result_t<Body&>>;
    }
  }();

  explicit submission(Body body) : base(&run, &drop_body, &destroy), body_(std::move(body)) {}
  static void drop_body(submission_base* self) noexcept { static_cast<submission*>(self)->body_.reset(); }
  static void destroy(submission_base* self) noexcept {
    auto* typed = static_cast<submission*>(self);
    typed->~submission();
    core::deallocate_frame(typed);
  }

  std::optional<Body> body_;
};

}  // namespace detail

// The cancel action of a submission: callable from any thread, any number of times, also after
// its future was consumed or dropped. Returns true for the one call that requested cancellation
// while the submission was still incomplete, which means:
//   - queued (not started): it is removed; it never runs and completes as cancelled;
//   - running (parallel and sequential modes): its task's cancellation is requested, which takes
//     effect at the body's next suspension point (task/cancellation.hpp). A body that reaches
//     none before it returns still completes with its value or exception: true says the request
//     was made, not that the body stopped. The outcome says what happened
//     (dispatch_future::ended_cancelled(), or get() throwing task_cancelled).
// False: already complete, cancellation already requested by an earlier call, or started in a
// mode that cannot cancel (sequential_uncancelable).
class dispatch_cancel {
 public:
  dispatch_cancel() noexcept = default;
  explicit dispatch_cancel(detail::submission_ref s) noexcept : submission_(std::move(s)) {}
  bool operator()() const noexcept { return submission_ && submission_->cancel(); }

 private:
  detail::submission_ref submission_;
};

// The submitter's view of one submission's outcome.
//   get()    - blocks the calling thread until the submission completes, then returns its
//              value, rethrows its exception, or throws task_cancelled. Consumes the future.
//              On a runtime worker thread it throws usage_error (it would block an executor).
//   wait()   - blocks until complete without consuming.
//   cancel() - see dispatch_cancel (true: this call requested it; not a promise that the body
//              stopped).
//   ended_cancelled() - complete, and ended as cancelled (not with a value or an exception).
template <class T>
class [[nodiscard]] dispatch_future {
 public:
  dispatch_future() noexcept = default;
  explicit dispatch_future(detail::submission_ref s) noexcept : submission_(std::move(s)) {}
  dispatch_future(dispatch_future&& other) noexcept = default;
  // Dropping a future that still holds its submission (no get()) hands an exception the
  // submission ends with to dispatcher_options::on_unobserved_exception (dispatcher.hpp).
  dispatch_future& operator=(dispatch_future&& other) noexcept {
    if (this != &other) {
      drop();
      submission_ = std::move(other.submission_);
    }
    return *this;
  }
  ~dispatch_future() { drop(); }

  bool valid() const noexcept { return static_cast<bool>(submission_); }
  bool is_ready() const { return checked()->is_complete(); }
  void wait() const {
    const detail::submission_base* s = checked();
    if (s->is_complete()) return;
    if (on_worker_thread()) throw usage_error("spindle: dispatch_future::wait() on a worker thread");
    submission_->wait();
  }
  // The value; or the body's exception rethrown (it is then observed: never reported to
  // on_unobserved_exception); or task_cancelled. usage_error on an empty future or a worker.
  T get() {
    wait();
    detail::submission_ref s = std::move(submission_);
    switch (s->final_outcome()) {
      case detail::submission_base::outcome::cancelled:
        throw task_cancelled();
      case detail::submission_base::outcome::exception:
        std::rethrow_exception(s->exception());
      case detail::submission_base::outcome::value:
        break;
    }
    return static_cast<detail::valued_submission<T>*>(s.get())->take_value();
  }
  bool cancel() const { return checked()->cancel(); }
  bool ended_cancelled() const {
    const detail::submission_base* s = checked();
    return s->is_complete() && s->final_outcome() == detail::submission_base::outcome::cancelled;
  }
  dispatch_cancel cancel_action() const {
    checked();
    return dispatch_cancel(submission_);
  }

 private:
  static bool on_worker_thread() noexcept { return detail::on_worker_thread(); }
  void drop() noexcept {
    if (!submission_) return;
    submission_->future_dropped();
    submission_ = detail::submission_ref();
  }
  detail::submission_base* checked() const {
    if (!submission_) throw usage_error("spindle: empty dispatch_future (already consumed or moved from)");
    return submission_.get();
  }
  detail::submission_ref submission_;
};

}  // namespace spindle
