// The shared state of one runtime: the registry of executors, the injector, the idle
// coordination (who is parked, who is searching), placement, and shutdown.
//
// Registry (C2). A fixed array of `max_executors` slots; executors [0, live) are running.
// Appending (start or add_executor) is serialised by `registry_mutex_`: the slot is written
// first (release), then `live_` is incremented (release). Readers load `live_` (acquire) and may
// then read slots [0, live) without a lock; slots are never cleared while the runtime lives, so a
// reader's snapshot stays valid. Executor ids are slot indices: dense, and recycled with the
// runtime (a new runtime starts again at 0), so they never grow without bound. Under the same
// mutex each new executor gets its placement from the affinity planner (topology.hpp) before it
// is published; the placement never changes, so readers of the registry read it freely.
//
// Idle coordination (C7), after Tokio's scheduler:
//   idle_state_ packs (searching << 32 | unparked). `unparked` counts executors not parked;
//   `searching` counts those looking for work to steal. Invariant: searching <= unparked.
//   sleepers_ (under sleepers_mutex_) lists parked executors.
//   - notify_work_available(): called after publishing work. seq_cst fence, then if nobody is
//     searching and someone is parked, wakes one sleeper as a searcher. The fence pairs with the
//     parking executor's fence (Dekker): either the parker's re-check sees the new work, or the
//     notifier sees the parker registered as a sleeper and wakes it. No lost wake-ups.
//   - Bounded searchers: an executor may start searching only while 2 * searching < executors.
//   - The last searcher to find work wakes another searcher (there may be more work).
//
// Parking protocol (seed 003, PARKING -> re-check -> PARKED -> wait), per executor:
//   1. PARKING: set the mailbox's receiver_parking flag (message senders read it after their
//      post, executor_mailbox.hpp; cleared when the executor stops parking); under
//      sleepers_mutex_ add self to sleepers_, decrement unparked (and searching if it was
//      searching).
//   2. re-check: fence, then look at every work source (mailbox, inbox, own and other injector
//      shards, other executors' local queues and offer boards). If something is there: remove self
//      from sleepers_ (if a notifier has not already) and go back to the loop.
//   3. PARKED: wait on the park driver until notified or the next timer deadline.
//   4. On waking: if still in sleepers_ (timeout or spurious wake), remove self and count as
//      unparked; else whoever woke us already did that, and counted us as a searcher only if it
//      was notify_work_available (woken_as_searcher_); unpark_all and schedule_on do not.
//
// Shutdown steps (runtime_core::shutdown):
//   1. set stopping_ (spawns are refused from now on, see task::runtime);
//   2. unpark every executor; each leaves its loop at the next check of stopping_;
//   3. join every worker thread (or, when called from a worker, detach: the last worker out
//      finishes the shutdown);
//   4. drain I/O: each worker, leaving its loop, makes its reactor cancel the operations in
//      flight and reap their final completions (their callbacks may wake tasks: those are
//      queued, then dropped in step 5);
//   5. close the gate to outside threads (below), then drain, in two parts:
//      a. mailboxes: each is closed (a later send_message finds it closed and discards its
//         message itself, on the sending thread); every message still in one is handed to its
//         deliver function with receiver == nullptr exactly once, then reclaimed into its
//         sender's pool (foreign messages are freed); returns still queued are reclaimed. The
//         pools themselves are freed with their executors (with this runtime_core);
//      b. every runnable still in a local queue, an inbox or the injector is dropped exactly
//         once (runnable::drop);
//   6. the task layer then destroys tasks that were suspended (not in any queue);
//   7. the runtime's share of the frame depot's bound is given back (the depot is trimmed to
//      what other live runtimes hold), and so is the finishing thread's private frame cache
//      (frame_allocator.hpp); the workers' private caches went with their threads.
//
// The gate to outside threads (step 5's precondition, core/outside_gate.hpp). A thread that is
// not one of this runtime's workers may be in the middle of something that touches the runtime's
// tasks when the shutdown reaches step 5: a spawn between its stopping check and its push, a
// waker between popping a waiter under a primitive's lock and scheduling its task (the waiter
// lives in the task's frame, which step 6 destroys). Such a span is bracketed by
// enter_from_outside() and leave_from_outside(); step 5 closes the gate and waits until no thread
// is inside. Workers need no gate: they all left their loops before step 5.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "spindle/core/clock.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/core/injector.hpp"
#include "spindle/core/outside_gate.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/core/diagnostics_options.hpp"
#include "spindle/core/runtime_monitor.hpp"
#include "spindle/core/topology.hpp"
#include "spindle/core/trace.hpp"

namespace spindle::core {

struct runtime_options {
  // Worker threads started with the runtime; 0 means one per hardware thread.
  std::uint32_t workers = 0;
  // Capacity of the registry: the most executors add_executor() can ever reach.
  std::uint32_t max_executors = 256;
  // Runnables an executor runs before it must fire timers / poll I/O (seed 003 default).
  std::uint32_t budget = 64;
  // Busy time after which an executor services its timers, I/O and pinned yielded work even if
  // `budget` runnables have not run yet (time-slicing.md). Also the actors' time slice and the
  // monitor's tick (a quarter of it). At least 100 µs.
  std::chrono::nanoseconds service_interval = std::chrono::milliseconds(1);
  // An executor inside one runnable for this long is "in a long runnable": others take over its
  // due timers and queued work (runtime_monitor.hpp). At least the service interval.
  std::chrono::nanoseconds long_runnable_after = std::chrono::milliseconds(2);
  // Executors that share a CPU (parking.md, "Executors that share a CPU"): an executor whose
  // thread finds itself on the CPU of an awake executor with a lower index goes on standby for
  // `standby_first` (its queued work and whatever its I/O and timers wake go to that sibling;
  // nobody wakes it for general work), 4x longer each time it happens again, at most
  // `standby_longest`, and from `standby_first` again after `standby_longest` without standby.
  // A zero `standby_first` turns standby off.
  std::chrono::nanoseconds standby_first = std::chrono::milliseconds(16);
  std::chrono::nanoseconds standby_longest = std::chrono::seconds(1);
  // The loop checks its injector shard first every `injector_check_interval` iterations
  // (fairness to remote work). At the same checks it looks at its oldest local item: if that
  // item has been the oldest for `local_fairness_interval` iterations (it is starving behind a
  // stream of newer work), it runs it next. Age-based rather than periodic, because every
  // oldest-first pop starts a fresh subtree and widens the depth-first working set
  // (executor-loop.md has the measurements).
  std::uint32_t injector_check_interval = 61;
  std::uint32_t local_fairness_interval = 1u << 20;
  // Fork-join heartbeat (fork-join.md): a latent right continuation becomes stealable only
  // after it has waited this long. Zero promotes at every check (tests use it to force steals).
  std::chrono::nanoseconds fork_quantum = std::chrono::microseconds(100);
  // The signal the runtime monitor sends a worker to ping it (executor.hpp, "pings": fork-join
  // uses pings to offer work while its owner runs a long leaf). SIGURG by default, as Go's
  // preemption: its default action is to ignore it, and few programs use it (spindle passes
  // signals that are not pings on to the handler installed before it). 0: no pings. Refused:
  // SIGKILL, SIGSTOP, and the signals faults raise (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
  // SIGSYS). Non-pings are passed on only to a handler function: with SIG_DFL before, a
  // signal whose default action terminates (SIGUSR1, SIGTERM, ...) is ignored from then on.
  int ping_signal = SIGURG;
  // I/O backend of every executor's reactor (reactor.hpp): automatic tries io_uring, then epoll;
  // the environment variable SPINDLE_IO_BACKEND=uring|epoll overrides automatic.
  spindle::core::io_backend io_backend = spindle::core::io_backend::automatic;
  // Ring sizes and set-up of every executor's reactor (reactor.hpp).
  spindle::core::reactor_options reactor{};
  // CPU affinity of the workers (topology.hpp; docs/design/topology.md has the measurements
  // behind the default). The environment variable SPINDLE_AFFINITY=none|depth-first|
  // breadth-first|random overrides it. Executors added later are placed by the same policy.
  affinity_policy affinity = affinity_policy::none;
  // The machine the policy places executors on; null means machine_topology::discover(). A
  // synthetic topology labels executors (stealing order, supervisor placement) without binding
  // threads. Must outlive the runtime.
  const machine_topology* topology = nullptr;
  // Time source; null means the steady clock. Must outlive the runtime.
  spindle::clock* clock = nullptr;
  // Native stack of each worker thread, in bytes (pthread_attr_setstacksize). Fork-join runs on
  // it (fork-join.md, "Depth"): a fork_join level of a one-line recursion costs 112 bytes
  // (g++ -O2; more with bigger user frames, several times more under sanitizers), so the default
  // 8 MiB holds about 74,000 such levels; deeper computations need a larger stack. The memory
  // is reserved, not committed: pages are touched only as deep as the recursion goes. 0 means
  // `default_worker_stack_size` (fixed, whatever `ulimit -s` says). Refused (usage_error): below
  // `min_worker_stack_size`, or above 64 GiB.
  static constexpr std::size_t default_worker_stack_size = std::size_t(8) << 20;
  static constexpr std::size_t min_worker_stack_size = std::size_t(256) << 10;
  std::size_t worker_stack_size = 0;
  // Called on each worker thread when it starts (e.g. to set thread names); may be empty.
  std::function<void(std::uint32_t executor_index)> on_worker_start{};
  // Frame cache (frame_allocator.hpp; docs/design/tasks.md, "Frame cache"): freed task frames,
  // actor envelopes and submissions are kept for reuse in a depot shared by all threads. While
  // this runtime runs, the depot may hold this many more bytes per executor; what is freed
  // beyond the bound goes back to malloc, and the runtime's share is given back when it shuts
  // down. Each thread also keeps a small private cache (two batches of 64 blocks per size
  // class, in practice tens of KiB). 0: this runtime adds nothing to the depot's bound. At
  // most 1 TiB (usage_error above).
  std::size_t frame_cache_bytes = std::size_t(4) << 20;
  // An executor that has been parked this long gives its private cache back to malloc; once
  // every executor has been parked this long, the runtime monitor trims the depot to what other
  // live runtimes may keep (nothing, when this is the only one): a runtime that went quiet keeps
  // no cached frames. Zero: no idle trimming (memory is then given back only above the bound and
  // at shutdown).
  std::chrono::nanoseconds frame_cache_idle_trim = std::chrono::seconds(1);
  // Diagnostics: tracing, histograms, warnings, the live view (diagnostics_options.hpp).
  diagnostics_options diagnostics{};
};

// A worker's thread: std::thread cannot choose its stack size, so a pthread made with
// `runtime_options::worker_stack_size`. Joined or detached exactly once, by shutdown.
class worker_thread {
 public:
  // Starts `body` on a new thread with a stack of `stack_size` bytes; throws std::system_error
  // if the thread cannot be made.
  worker_thread(std::size_t stack_size, std::function<void()> body);
  worker_thread(worker_thread&& other) noexcept;
  worker_thread& operator=(worker_thread&&) = delete;
  worker_thread(const worker_thread&) = delete;
  ~worker_thread();  // must have been joined or detached
  bool joinable() const noexcept { return started_; }
  void join() noexcept;
  void detach() noexcept;

 private:
  pthread_t thread_{};
  bool started_ = false;
};

class runtime_core final : public scheduler {
 public:
  explicit runtime_core(runtime_options options);
  ~runtime_core();
  runtime_core(const runtime_core&) = delete;
  runtime_core& operator=(const runtime_core&) = delete;

  // Starts options.workers executors. Separate from the constructor so a shared_ptr to *this
  // exists before threads start (workers keep the core alive, see shutdown). If an executor or
  // the monitor cannot be made, shuts down what was started (joining its workers) and rethrows.
  void start(std::shared_ptr<runtime_core> self);

  // scheduler: pushes from a worker go to its local queue; from anywhere else to the injector
  // shard of the less loaded of two random executors (P2C), then an idle executor is woken.
  void schedule(runnable* r, schedule_hint hint) noexcept override;
  // The gate to outside threads (see above). False: the runtime is draining; the caller must
  // not touch its tasks (and does not leave). True: call leave_from_outside() when done; until
  // then the drain waits, so the tasks and this runtime_core stay as they are.
  bool enter_from_outside() noexcept { return outside_gate_.enter(); }
  void leave_from_outside() noexcept { outside_gate_.leave(); }
  // Queues `r` on a specific executor (its inbox); it runs there, it is never stolen.
  void schedule_on(std::uint32_t executor_index, runnable* r) noexcept;

  // Adds one executor while running; returns its index. Throws usage_error at capacity and
  // runtime_stopped after shutdown began.
  std::uint32_t add_executor();

  std::uint32_t executor_count() const noexcept {
    // acquire: pairs with the release increment in append, making the slot's pointer visible.
    return live_.load(std::memory_order_acquire);
  }
  executor& executor_at(std::uint32_t index) const noexcept {
    // acquire: pairs with the release store in append (index < executor_count()).
    return *slots_[index].load(std::memory_order_acquire);
  }
  // Picks the less loaded of two random executors (the caller's RNG state is advanced).
  std::uint32_t pick_two_choices(std::uint32_t& random_state) const noexcept;
  // The same among the executors in `domain`; nullopt when none is.
  std::optional<std::uint32_t> pick_two_choices_in(const executor_domain& domain,
                                                   std::uint32_t& random_state) const noexcept;
  // The topology executors are placed on, and whether stealing visits victims nearest first
  // (executors are bound and the machine has more than one cache domain or NUMA node).
  const machine_topology& topology() const noexcept { return *topology_; }
  bool steals_nearest_first() const noexcept { return steals_nearest_first_; }

  const runtime_options& options() const noexcept { return options_; }
  // Tracing (trace.hpp): the executors' rings. Shared so that a diagnostics reader that holds it
  // (diagnostics::registry's trace source) may outlive the core.
  trace_recorder& trace() const noexcept { return *trace_; }
  const std::shared_ptr<trace_recorder>& trace_shared() const noexcept { return trace_; }
  spindle::clock& clock() const noexcept { return *clock_; }
  injector& global_injector() noexcept { return injector_; }
  bool stopping() const noexcept {
    // acquire: pairs with the release store in shutdown.
    return stopping_.load(std::memory_order_acquire);
  }
  // True when the calling thread is one of this runtime's workers.
  bool is_worker_thread() const noexcept;

  // See the shutdown steps above. Idempotent. Called from one of this runtime's own workers it
  // cannot wait for itself: it starts the shutdown and returns; the last worker to leave its
  // loop finishes steps 4 and 5.
  void shutdown() noexcept;
  // Step 5 hook, run once after every worker has left its loop (the task layer destroys the
  // tasks that were still suspended). Set before start().
  void set_on_stopped(std::function<void()> hook) { on_stopped_ = std::move(hook); }
  // An opaque pointer for the layer built on top (the task layer's per-runtime state), so code
  // running on a worker can find it from executor::current()->core(). Set before start().
  void set_layer_state(void* state) noexcept { layer_state_ = state; }
  void* layer_state() const noexcept { return layer_state_; }
  // Work only one executor can run (actors homed there, run by its wheel) would wait for the
  // whole of a long runnable; the layer that owns such work registers a hook that an executor
  // calls at its service points while the monitor has it flagged in a long runnable, on its own
  // thread, after delivering its executor messages: the layer hands that work to other
  // executors. The hook must not run user code (service points are inside user code). Set
  // once, any time (a layer built lazily); the context must outlive the workers.
  using long_runnable_hook = void (*)(void* context, std::uint32_t executor_index) noexcept;
  void set_long_runnable_hook(long_runnable_hook hook, void* context) noexcept {
    long_runnable_context_.store(context, std::memory_order_relaxed);  // published by the next
    // release: the context is written before a worker that sees the hook reads it.
    long_runnable_hook_.store(hook, std::memory_order_release);
  }

  // Wakes one parked executor (preferably `preferred`) if nobody is searching, after work was
  // published.
  static constexpr std::uint32_t no_preference = ~std::uint32_t(0);
  void notify_work_available(std::uint32_t preferred = no_preference) noexcept;
  // The same, for callers whose publication was itself a seq_cst read-modify-write (a local
  // queue push): that RMW already orders the publication before our load of the idle state, so
  // the fence is skipped (see parking.md).
  void notify_after_seq_cst_publish() noexcept;
  std::uint32_t unparked_count() const noexcept {
    // relaxed: a hint for how long to park.
    return std::uint32_t(idle_state_.load(std::memory_order_relaxed));
  }
  void unpark_all() noexcept;
  // The monitor's coarse clock (runtime_monitor.hpp): steady-clock nanoseconds, at most one
  // monitor tick old while any executor is awake (service_interval / 4 while anything needs
  // fine time, at most a service interval otherwise: runtime_monitor.hpp, "How often it
  // ticks"). Real time, never the injected clock: it measures busy time. One relaxed load.
  std::uint64_t coarse_now_ns() const noexcept {
    return coarse_now_ns_.load(std::memory_order_relaxed);  // relaxed: a sample of the time
  }
  // The coarse clock's word itself, for readers that keep its address (task records).
  const std::atomic<std::uint64_t>& coarse_clock() const noexcept { return coarse_now_ns_; }
  // Moves the coarse clock forward to `now_ns`, never back (the monitor's tick and a waking
  // executor both advance it): task records subtract its stamps, so it must be monotonic.
  void advance_coarse_clock(std::uint64_t now_ns) noexcept {
    // relaxed: the clock is a sample; only its monotonicity matters, which the CAS keeps.
    std::uint64_t seen = coarse_now_ns_.load(std::memory_order_relaxed);
    while (seen < now_ns &&
           !coarse_now_ns_.compare_exchange_weak(seen, now_ns, std::memory_order_relaxed)) {
    }
  }
  std::uint64_t service_interval_ns() const noexcept { return service_interval_ns_; }
  // G2 metrics: whether executors record poll-time and wake-to-poll histograms and schedulers
  // stamp runnables (executor_metrics.hpp). Starts as options().diagnostics.histograms; any
  // thread may switch it. One relaxed load per poll and per schedule while off.
  bool histograms_on() const noexcept {
    return histograms_on_.load(std::memory_order_relaxed);  // relaxed: a switch, publishes nothing
  }
  void set_histograms(bool on) noexcept;
  bool standby_enabled() const noexcept { return options_.standby_first.count() != 0; }
  // Executors in a long runnable right now (monitor writes; a hint).
  std::uint32_t long_runnable_count() const noexcept {
    return long_runnables_.load(std::memory_order_relaxed);
  }
  // Fine time (runtime_monitor.hpp, "How often it ticks"): a layer that measures durations
  // shorter than a service interval on the coarse clock (the actors' run times) holds a claim
  // while it may run, and the monitor then ticks every service_interval / 4 whatever the
  // executors do. A claim wakes the monitor, so it holds from the next tick on.
  void claim_fine_time() noexcept;
  void release_fine_time() noexcept {
    // relaxed: a count the monitor samples; it publishes nothing.
    fine_time_claims_.fetch_sub(1, std::memory_order_relaxed);
  }
  bool fine_time_claimed() const noexcept {
    return fine_time_claims_.load(std::memory_order_relaxed) != 0;  // relaxed: a sample
  }
  // The monitor thread, for tests and diagnostics.
  const runtime_monitor& monitor() const noexcept { return *monitor_; }
  // The monitor's watcher (runtime_monitor.hpp, "Watcher"): the diagnostics' warnings.
  void set_monitor_watcher(monitor_watcher* watcher) noexcept { monitor_->set_watcher(watcher); }

 private:
  friend class executor;
  friend class runtime_monitor;
  std::uint32_t append_executor();
  // The unparked count with seq_cst (the monitor's side of its idle handshake).
  std::uint32_t unparked_count_seq_cst() const noexcept {
    return std::uint32_t(idle_state_.load(std::memory_order_seq_cst));
  }
  // An executor stopped parking at `now_ns`: the coarse clock catches up if the monitor slept,
  // and the monitor is woken if it sleeps because everyone was parked.
  void executor_awake(std::uint64_t now_ns) noexcept;
  void start_thread(std::uint32_t index);

  // Idle coordination (see above).
  bool transition_to_searching() noexcept;
  // Returns true if this was the last searcher.
  bool transition_from_searching() noexcept;
  void transition_to_parked(std::uint32_t index, bool was_searching) noexcept;
  // Removes `index` from the sleepers if still there; returns true if it did.
  bool cancel_park(std::uint32_t index) noexcept;
  // After publishing work or a timer for executor `index` only it can take: wakes it if it is
  // parked (nothing if called from its own thread).
  void wake_if_parked(std::uint32_t executor_index) noexcept;
  // Called by executor `index` when it stops parking: unregisters it if still registered
  // (returns false), else returns whether whoever woke it counted it as a searcher.
  bool leave_sleepers(std::uint32_t index) noexcept;
  bool any_work_visible(std::uint32_t self_index) const noexcept;
  // The parking re-check of an executor on standby: what its loop still takes on standby, its
  // mailbox, inbox, local queue and own offer board.
  bool work_addressed_to(std::uint32_t self_index) const noexcept;
  void wake_one_if_idle(std::uint32_t preferred) noexcept;
  void drain_mailboxes() noexcept;
  void drain_queues() noexcept;
  void finish_shutdown() noexcept;
  void worker_exited() noexcept;

  runtime_options options_;
  std::shared_ptr<trace_recorder> trace_;
  spindle::clock* clock_;
  const machine_topology* topology_;
  affinity_planner affinity_planner_;  // guarded by registry_mutex_
  bool steals_nearest_first_;
  std::unique_ptr<std::atomic<executor*>[]> slots_;
  std::vector<std::unique_ptr<executor>> owned_executors_;  // guarded by registry_mutex_
  std::vector<worker_thread> threads_;                       // guarded by registry_mutex_
  std::mutex registry_mutex_;
  // This runtime's share of the frame depot's bound (frame_cache_bytes per executor appended),
  // given back by finish_shutdown. Guarded by registry_mutex_.
  std::size_t frame_cache_share_ = 0;
  alignas(cache_line_size) std::atomic<std::uint32_t> live_{0};
  injector injector_;

  alignas(cache_line_size) std::atomic<std::uint64_t> idle_state_{0};
  std::mutex sleepers_mutex_;
  std::vector<std::uint32_t> sleepers_;      // guarded by sleepers_mutex_
  std::vector<std::uint8_t> is_sleeping_;    // guarded by sleepers_mutex_, per executor
  // Set by the notifier that unregistered a sleeper and counted it as searching; read and
  // cleared by that executor when it wakes. Guarded by sleepers_mutex_.
  std::vector<std::uint8_t> woken_as_searcher_;
  // Held while an executor decides to stand by and marks itself (executor::enter_standby): a
  // standby is entered only for a sibling not on standby, and under this mutex that check and
  // the mark are one step, so no two executors stand by for each other (a cycle would hand work
  // back and forth with nobody to run it). Taken at most once per standby, never on a hot path.
  std::mutex standby_mutex_;

  // Time slicing (runtime_monitor.hpp).
  const std::uint64_t service_interval_ns_;
  alignas(cache_line_size) std::atomic<std::uint64_t> coarse_now_ns_{0};
  // Beside the coarse clock, which every executor reads after each runnable: the same line.
  std::atomic<bool> histograms_on_{false};
  std::atomic<std::uint32_t> long_runnables_{0};
  std::atomic<std::uint32_t> fine_time_claims_{0};  // see claim_fine_time
  std::unique_ptr<runtime_monitor> monitor_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  outside_gate outside_gate_;  // see above
  std::atomic<bool> shut_down_{false};
  std::weak_ptr<runtime_core> self_;
  std::atomic<std::uint32_t> workers_running_{0};
  std::atomic<bool> detached_{false};
  std::atomic<bool> finished_{false};
  std::function<void()> on_stopped_;
  void* layer_state_ = nullptr;
  std::atomic<long_runnable_hook> long_runnable_hook_{nullptr};  // see set_long_runnable_hook
  std::atomic<void*> long_runnable_context_{nullptr};
};

}  // namespace spindle::core
