// A spawned task: the schedulable unit that runs one chain of task<T> coroutines.
//
// Participants
//   - the executor running it (calls run: resumes `resume_point` through the trampoline);
//   - wakers: whoever completes what the task waits on (a timer, a lock release, a child's
//     completion) calls wake() exactly once per wait;
//   - the join handle (one owner): reads status, requests cancellation, registers a joiner;
//   - cancellers (any thread, through the handle or a structured parent).
//
// State word `flags` (atomic):
//   references       - upper 16 bits: counted references (S4)
//   complete         - the root coroutine finished (value, exception or cancelled), outcome set
//   cancel_requested - cancellation asked for; observed at the next suspension point
//   join_waiting     - `joiner` is registered and must be woken on completion
//   joiner_elsewhere - set and cleared with join_waiting: the joiner is a task of another host,
//                      so the completer enters that host's gate before taking it over (S5)
//   locked           - spin lock bit guarding `wait` (the current cancellable wait)
//   shielded         - the task runs its tidy destructors (T4): a cancellation is recorded but
//                      neither interrupts a wait nor makes an await throw
//   scope_cancelled  - a cancellation scope of the running task fired (S6): until that scope
//                      ends, the task behaves as if cancel_requested were set
// Invariants
//   (S1) `outcome` and the root's result are written before `complete` is set (release), and
//        read only after `complete` was observed (acquire).
//   (S2) `joiner` is written before `join_waiting` is set (release, by CAS), and read by the
//        completer only if it is the one to clear `join_waiting` together with setting
//        `complete` (CAS). A joiner withdrawing (cancelled while joining) clears
//        `join_waiting` by CAS only while `complete` is clear. Exactly one of the two wins.
//   (S3) `wait` is read or written only with `locked` held. A task sets it while registering
//        with a primitive (lock held across the registration), clears it when it resumes; a
//        canceller calls wait->try_cancel() with the lock held, so the awaiter cannot be
//        destroyed under it and cannot finish registering concurrently.
//   (S4) `references`: one for the running task (dropped on completion, by the same CAS that
//        sets `complete`), one for the handle (dropped when the handle is destroyed, detached or
//        consumed), one per extra holder (join sets, timeouts). The last drop frees. A
//        registered joiner always holds a reference, so the completer may read `joiner` after
//        its CAS.
//   (S5) A completer that finds `joiner_elsewhere` enters the gate for an unknown host
//        (core/outside_gate.hpp) before its CAS and leaves after the wake: the joiner's host
//        cannot be destroying the joiner's frame between the CAS and the wake. Same-host joiners
//        need nothing: a host's tasks complete on its own threads, or in its own shutdown.
//   (S6) Cancellation scopes (with_timeout over an awaitable, time/timeout.hpp): the running
//        task pushes a scope before an await and removes it after (or when the awaiter is
//        destroyed); `scopes_` (a stack, innermost first) and each scope's `fired` are read and
//        written only with `locked` held. cancel_scope(key) fires the listed scope whose key is
//        `key`, if any: it sets `fired` and scope_cancelled and interrupts the current wait as
//        request_cancel does. A key names one scope for the scope's whole life (the scope's
//        timer signal, alive while it may fire), so a late signal whose scope has gone finds
//        nothing. scope_cancelled is set iff some listed scope fired: leave_scope recomputes it.
//
// Lock order: task lock (locked bit) before any primitive's lock. Primitives never take a task
// lock while holding their own: waking is scheduling, which takes no task lock.
#pragma once

// clang before 19 miscompiles coroutines that resume on another thread (the frame written after
// await_suspend handed the handle over: LLVM #56301, #65054, #72006); with clang 16 spindle's
// tasks lost wake-ups. Define SPINDLE_ALLOW_OLD_CLANG to silence this at your own risk.
#if defined(__clang__) && !defined(__apple_build_version__) && __clang_major__ < 19 && \
    !defined(SPINDLE_ALLOW_OLD_CLANG)
#warning "spindle: clang < 19 miscompiles coroutines resumed on another thread; use clang >= 19 or g++ >= 12"
#endif

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <stop_token>
#include <string_view>

#include "spindle/core/atomic.hpp"
#include "spindle/core/clock.hpp"
#include "spindle/core/metrics_points.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/core/trace.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/task_host.hpp"
#include "spindle/task/task_record.hpp"
#include "spindle/task/task_table.hpp"

namespace spindle {

class runtime;

namespace detail {
class tidy_entry;
class completion_hook;
struct task_extras;
}  // namespace detail

// Something suspended that a canceller can interrupt. See invariant S3.
class cancellable_wait {
 public:
  // Called by a canceller with the waiting task's lock held. If the task is still registered
  // with whatever it waits on, unregister it and return true (the canceller then wakes the
  // task); return false if the wait already completed (someone else wakes the task).
  virtual bool try_cancel() noexcept = 0;

 protected:
  ~cancellable_wait() = default;
};

// Something to notify when a task completes (a joining task, or a blocked thread).
struct completion_waker {
  void (*wake)(completion_waker*) noexcept;
};

enum class task_status { pending, completed, failed, cancelled };

namespace detail {
// A cancellation scope of a running task (S6): lives in the awaiter that entered it.
struct cancellation_scope {
  const void* key = nullptr;              // who may fire it (see S6)
  cancellation_scope* outer = nullptr;    // guarded by the task lock
  bool fired = false;                     // guarded by the task lock
  bool listed = false;                    // owner-side: entered and not yet left
};
}  // namespace detail

namespace detail {

class spawned_task_base;
// The task running on this thread (spawned_task_base::run_entry sets it).
inline thread_local spawned_task_base* current_task = nullptr;
inline bool current_task_is(const spawned_task_base* t) noexcept { return current_task == t; }

class spawned_task_base : public core::runnable {
 public:
  enum : std::uint32_t {
    complete = 1u << 0,
    cancel_requested = 1u << 1,
    join_waiting = 1u << 2,
    locked = 1u << 3,
    shielded = 1u << 4,
    joiner_elsewhere = 1u << 5,
    scope_cancelled = 1u << 6,
    // References live in the upper 16 bits of the same word, so completing and dropping the
    // running task's reference is one CAS.
    reference_shift = 16,
    one_reference = 1u << reference_shift,
  };
  enum class outcome_kind : std::uint8_t { value, exception, cancelled };

  // --- used by awaiters, on the thread running this task -----------------------------------
  // Records where to resume when the task is next scheduled, and, for the snapshot, that the
  // task suspends on `what` (task_record.hpp). Called before registering with whatever wakes it.
  void set_resume_point(std::coroutine_handle<> h, const wait_descriptor& what = {}) noexcept {
    resume_point_ = h;
    if (record_ != nullptr) record_->on_suspend(what, record_now_ns(host_->record_clock));
  }
  // An await that called set_resume_point completed without suspending: the task runs on.
  void continue_running() noexcept {
    if (record_ != nullptr) record_->on_continue();
  }
  // The snapshot's queue position of a waiter that just queued (under the primitive's lock, so
  // before any waker can see it).
  void set_wait_position(std::uint64_t position) noexcept {
    if (record_ != nullptr) record_->wait_number.store(position, std::memory_order_relaxed);
  }
  // Renames the task in its record (set_task_name): the running task only.
  void set_name(std::string_view name) noexcept {
    if (record_ != nullptr) record_->set_name(name);
  }
  // Whether snapshots see this task (diagnostics_options::records): a name worth formatting.
  bool is_recorded() const noexcept { return record_ != nullptr; }
  bool cancellation_requested() const noexcept {
    // relaxed: a hint; an await that acts on it re-checks under the task lock.
    return cancelling(flags_.load(std::memory_order_relaxed));
  }
  // Whether the task itself was asked to cancel (not only one of its scopes, S6).
  bool task_cancel_requested() const noexcept {
    // relaxed: read by the running task, which re-checks under the lock at its next wait.
    return (flags_.load(std::memory_order_relaxed) & cancel_requested) != 0;
  }
  // Cancellation scopes (S6), on the thread running this task: enter before an await that the
  // scope covers, leave after it; leave returns whether this scope fired.
  void enter_scope(cancellation_scope& scope) noexcept;
  bool leave_scope(cancellation_scope& scope) noexcept;
  // Begin a cancellable wait (S3): takes the task lock. Returns false (lock released) if
  // cancellation was already requested: the caller must not suspend and should throw
  // task_cancelled. Otherwise the caller registers with its primitive, then calls
  // end_registration(wait) which publishes `wait` and releases the lock.
  bool begin_registration() noexcept;
  void end_registration(cancellable_wait* wait) noexcept;
  // Called on resumption from a cancellable wait: clears `wait` under the lock.
  void clear_wait() noexcept;
  // Wakes the task (schedules it). Exactly once per suspension, by whoever won the wait.
  void wake() noexcept {
    if (core::trace_active()) [[unlikely]] trace(core::trace_kind::wake);
    // A task woken while it runs (it registered, then what it waits on was ready at once) wakes
    // itself; record_ is valid: the task is suspended (or running) until this schedule.
    if (record_ != nullptr) {
      record_->on_wake(current_task_is(this), record_now_ns(host_->record_clock));
    }
    host_->schedule(this, core::schedule_hint::wake);
  }
  // Reschedules the running task behind other runnables (yield_now, cooperative budget).
  void yield_to_scheduler() noexcept {
    if (record_ != nullptr) record_->on_wake(true, record_now_ns(host_->record_clock));
    host_->schedule(this, core::schedule_hint::yield);
  }
  // What runs this task (the runtime or an embedded executor): its timers, clock, spawns.
  task_host& host() const noexcept { return *host_; }

  // --- used by join handles, any thread -----------------------------------------------------
  void request_cancel() noexcept;
  // Fires the listed scope whose key is `key` (S6); nothing if none is. Caller holds a reference.
  void cancel_scope(const void* key) noexcept;
  // The task's cancellation as a std::stop_token (task/stop_token.hpp); made on the first call,
  // by the running task. Throws bad_alloc only.
  std::stop_token stop_token();
  bool is_complete() const noexcept {
    // acquire: S1, the outcome is readable once complete is seen.
    return (flags_.load(std::memory_order_acquire) & complete) != 0;
  }
  task_status status() const noexcept;
  // Registers `joiner` to be woken on completion. Returns false if already complete (no
  // registration happened). `joiner_host`: the host of the joining task, if it is a task (S5).
  bool register_joiner(completion_waker* joiner, const task_host* joiner_host = nullptr) noexcept;
  // Withdraws a registration; true if withdrawn (the completion will not wake it).
  bool withdraw_joiner() noexcept;
  void add_reference() noexcept {
    // relaxed: the caller already holds a reference, so the object cannot vanish meanwhile.
    flags_.fetch_add(one_reference, std::memory_order_relaxed);
  }
  void release() noexcept;
  outcome_kind outcome() const noexcept { return outcome_; }
  task_id id() const noexcept { return id_; }
  // The id as trace events, snapshots and warnings carry it: slot index << 32 | serial
  // (pack_task_id, task_record.hpp).
  std::uint64_t trace_id() const noexcept { return std::uint64_t(id_.index) << 32 | id_.serial; }
  // An event about this task, recorded while some runtime traces. The event points test
  // core::trace_active() and call this out of line, so the untraced path does not load the id.
  [[gnu::cold, gnu::noinline]] void trace(core::trace_kind kind, std::uint32_t aux = 0) const noexcept;
  // A poll's start, the same way: whether it was recorded (its end is recorded iff it was).
  [[gnu::cold, gnu::noinline]] bool trace_poll_start() const noexcept;
  // Occupies a slot in the host's table (before the task is first scheduled).
  // Records where it was spawned (`where`) and by which task (the one running on this thread).
  // Inline: on every spawn's path, where a call's register saves cost as much as the body.
  void enter_table(const spawn_location& where = spawn_location::current()) {
    table_ = &host_->tasks;
    const spawned_task_base* parent = current_task;
    const bool recorded = host_->task_records;
    record_ = table_->insert(this, host_->table_shard(), id_, where,
                             parent != nullptr ? pack_task_id(parent->id_.index, parent->id_.serial)
                                               : no_parent,
                             recorded ? record_now_ns(host_->record_clock) : 0, recorded);
    if (core::trace_active()) [[unlikely]] trace(core::trace_kind::spawn);
  }

  // --- used by the root coroutine's final suspend ------------------------------------------
  // The root finished: completes the task, or first runs its tidy destructors (T4).
  void on_root_finished(outcome_kind outcome) noexcept;

  // --- tidy destructors (task/tidy.hpp), on the thread running this task ---------------------
  void push_tidy(tidy_entry* entry);
  tidy_entry* pop_tidy() noexcept;

  // --- completion hooks (slots, names): run once when the task completes, before its outcome
  // is published, on the completing thread. Added before the task is first scheduled, or by the
  // task itself. The task owns (and deletes) the hook.
  void add_completion_hook(completion_hook* hook);

  // --- shutdown -------------------------------------------------------------------------------
  // Destroys a task that will never run again (queued or suspended at shutdown): marks it
  // cancelled, destroys its frames, wakes its joiner, drops the running reference.
  void abandon() noexcept;

  // The task running on this thread (null outside tasks). Inline: every await reads it.
  static spawned_task_base* current() noexcept;

 protected:
  using destroy_function = void (*)(spawned_task_base*) noexcept;
  using frame_function = void (*)(spawned_task_base*) noexcept;
  spawned_task_base(task_host& host, std::coroutine_handle<> root,
                    destroy_function destroy, frame_function destroy_frame) noexcept;
  ~spawned_task_base();

  // For spawned tasks whose body is a plain function (run directly, no coroutine): call
  // begin_function_run first (false: it was cancelled before it ran and is now complete), then
  // finish_function_run with the outcome.
  bool begin_function_run() noexcept;
  void finish_function_run(outcome_kind outcome) noexcept { complete_with(outcome); }
  static void drop_entry(core::runnable* self) noexcept;

 private:
  static void run_entry(core::runnable* self) noexcept;
  // Whether a flags word asks the running task to cancel (the task's or a scope's request,
  // neither held back by the shield).
  static bool cancelling(std::uint32_t flags) noexcept {
    return (flags & shielded) == 0 && (flags & (cancel_requested | scope_cancelled)) != 0;
  }
  // Interrupts the registered wait, if any, after a cancel bit was set; lock held, released.
  void interrupt_wait_and_unlock(std::uint32_t previous) noexcept;
  void complete_with(outcome_kind outcome) noexcept;
  void lock() noexcept;
  void unlock() noexcept;
  void destroy_tidy() noexcept;    // the clean-ups and their runner (abandon, destruction)
  void destroy_extras() noexcept;  // everything in extras_ (destruction)

  std::atomic<std::uint32_t> flags_{2 * one_reference};  // S4: the task and its handle
  bool started_ = false;  // executor-only: touched by whoever runs the task
  outcome_kind outcome_ = outcome_kind::value;
  task_host* host_;
  std::coroutine_handle<> resume_point_;
  cancellable_wait* wait_ = nullptr;        // guarded by the lock bit (S3)
  cancellation_scope* scopes_ = nullptr;    // guarded by the lock bit (S6)
  std::stop_source* stop_source_ = nullptr; // guarded by the lock bit; see task/stop_token.hpp
  completion_waker* joiner_ = nullptr;      // S2
  destroy_function destroy_;
  frame_function destroy_frame_;
  task_table* table_ = nullptr;  // where this task has its slot, until completion
  task_record* record_ = nullptr;  // its slot's record, until completion (task_record.hpp)
  task_id id_;
  task_extras* extras_ = nullptr;  // what few tasks use (tidy, hooks): made on first use
  task_extras& extras();
};

inline spawned_task_base* spawned_task_base::current() noexcept { return current_task; }

// Cooperative budget (C6): how many awaits a task may complete without suspending before it must
// yield to its executor even though nothing made it wait. Reset each time the task is run.
//
// Every await counts, as with Tokio's coop budget: awaits of child tasks (task.hpp) and every
// primitive's await that may complete at once (a free mutex or permit, a set event, a channel
// with items or room, a oneshot with its value, a wait_group at zero, a join of a finished task,
// a sleep whose deadline has passed, a join_set with a completed child, wait_named with none
// live, a turnstile notified while polling). An await that really suspends also counts, which
// changes nothing: the budget is reset when the task runs again. I/O through the reactor always
// suspends (it delivers every completion from its poll, never inline from submit); an I/O call
// with a fast path that skips the reactor (io::file::read_at of cached pages) counts it with
// may_complete_inline before trying it (io::detail::may_complete_without_reactor).
//
// The protocol of an await that may complete without suspending (cooperative_await below):
//   - await_ready, before its fast path: `if (!cooperative_await::may_complete_inline())
//     return false;`. False in a spawned task whose budget is used up or whose cancellation
//     was requested: the fast path does not run and the await goes through await_suspend, which
//     makes it a suspension point (so a cancelled task meets its cancellation at its next
//     await, T3, whether or not that await would have waited);
//   - await_suspend: the usual registration first (in an await that is a cancellation point,
//     begin_registration delivers a pending cancellation: nothing is taken, the await throws
//     task_cancelled; the structured-cleanup join is no cancellation point).
//     If the operation then completes at once (the resource is taken, the value received), it
//     returns `cooperative_await::yield_if_exhausted(task, h)`: with the budget used up the task is
//     rescheduled with the yield hint, behind whatever its executor has queued, and resumes in
//     await_resume, which hands over what was taken. Awaits whose await_ready is always false
//     (their fast path is in await_suspend) use complete_inline(task, h) instead, which also
//     counts the await.
// Take first, then yield (not yield, then try again): a resumed coroutine continues in
// await_resume, which cannot suspend again if a retry found the resource taken, so retrying
// would need a loop around every await or a second coroutine. What was taken is held across
// the yield: a mutex stays locked (others queue and get it by FIFO handoff when the guard
// unlocks), a permit or a received item is the task's. A cancellation requested during that
// yield is not delivered by it (the result would be lost, or would have to be given back); the
// task meets it at its next suspension point, at the latest at the next budget yield, whose
// registration delivers it before anything is taken. A frame destroyed during the yield
// (shutdown) gives back what it took, as for a waiter woken with its result but never resumed.
// Outside a spawned task (a coroutine resumed by hand) nothing changes: nothing yields.
// The budget is bounded in time too: every `cooperative_time_check` units, on a runtime worker,
// the coarse clock (one relaxed load, runtime_monitor.hpp) is compared with the time the task
// was last run; past the runtime's service interval the budget is spent. A task whose awaits
// complete at once but each follow real work (a sequential dispatcher running submissions)
// thus yields after about a millisecond, not after 128 awaits of any length.
inline constexpr std::uint32_t cooperative_budget = 128;
inline constexpr std::uint32_t cooperative_time_check = 16;
inline thread_local std::uint32_t cooperative_budget_left = cooperative_budget;
inline thread_local std::uint64_t cooperative_slice_start_ns = 0;

// Called when a task starts running (spawned_task_base::run_entry): a fresh budget.
inline void refill_cooperative_budget() noexcept {
  cooperative_budget_left = cooperative_budget;
  const core::slice_clock& clock = core::current_slice_clock;
  if (clock.now != nullptr) cooperative_slice_start_ns = clock.read();
}

// Consumes one unit; true when the budget is exhausted (the caller should yield now).
inline bool consume_cooperative_budget() noexcept {
  if (cooperative_budget_left == 0) return true;
  if ((--cooperative_budget_left % cooperative_time_check) == 0) [[unlikely]] {
    const core::slice_clock& clock = core::current_slice_clock;
    if (clock.now != nullptr && clock.read() - cooperative_slice_start_ns >= clock.length_ns) {
      cooperative_budget_left = 0;
      return true;
    }
  }
  return false;
}

// After an await that completed at once but whose work may have been long (io::file::read_at's
// cached read copies up to max_transfer bytes, counted as one unit): compares the coarse clock
// with the slice's start now rather than at the next cooperative_time_check unit, and spends the
// budget past the service interval, so that the task's next await yields. Otherwise a task whose
// every await completes at once after a long copy held its executor for cooperative_time_check
// of them (16 copies of 32 MiB: a few hundred milliseconds). One relaxed load; nothing off a
// runtime worker.
inline void end_slice_if_over() noexcept {
  const core::slice_clock& clock = core::current_slice_clock;
  if (clock.now != nullptr && clock.read() - cooperative_slice_start_ns >= clock.length_ns) {
    cooperative_budget_left = 0;
  }
}

// The one place the awaits of every primitive meet the budget (the protocol above).
struct cooperative_await {
  // await_ready, before a fast path that completes the await at once: counts the await. False
  // (do not run the fast path; go through await_suspend) in a spawned task whose budget is used
  // up, and in one whose cancellation was requested: await_suspend's registration delivers it
  // where the await is a cancellation point (T3: the next suspension point, whether or not it
  // would wait), and completes the await at once where it is not.
  static bool may_complete_inline() noexcept {
    const spawned_task_base* task = spawned_task_base::current();
    if (task == nullptr) return true;
    return !consume_cooperative_budget() && !task->cancellation_requested();
  }
  // await_suspend of `task`, the operation completed without waiting (already counted by
  // may_complete_inline): true (suspended) after yield() if the budget is used up; false (go on
  // at once) otherwise.
  static bool yield_if_exhausted(spawned_task_base& task, std::coroutine_handle<> h) noexcept {
    if (cooperative_budget_left == 0) return yield(task, h);
    task.continue_running();
    return false;
  }
  // As yield_if_exhausted, for an await not counted yet (its await_ready is always false).
  static bool complete_inline(spawned_task_base& task, std::coroutine_handle<> h) noexcept {
    if (consume_cooperative_budget()) return yield(task, h);
    task.continue_running();
    return false;
  }
  // The budget's yield: reschedules `task` with the yield hint, to resume at `resume_at` after
  // what its executor has queued. Returns true (the caller's await_suspend suspends) and must be
  // the caller's last touch of the awaiter: the task may already be running on another thread.
  static bool yield(spawned_task_base& task, std::coroutine_handle<> resume_at) noexcept {
    core::metrics::record_forced_yield();  // before the reschedule: `task` may run elsewhere
    task.set_resume_point(resume_at, {wait_kind::yield});
    task.yield_to_scheduler();
    return true;
  }
};

}  // namespace detail

// The awaitable for yielding: reschedules the current task behind the others queued on its
// executor. Throws task_cancelled if the task was cancelled.
struct yield_awaiter {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) noexcept;
  void await_resume() const;
};
inline yield_awaiter yield_now() noexcept { return {}; }

}  // namespace spindle
