// The embedded executor: spindle tasks inside somebody else's event loop (SPEC E1-E5; seed 004).
//
//   struct my_host : spindle::embed::integration { ... };   // now, tick_at, tick_soon
//   my_host host;
//   spindle::embed::embedded_executor ex(host);
//   auto h = ex.spawn(my_task());        // any thread; the host is asked for a tick
//   ... in the host's loop, whenever asked (tick_soon) or at the requested time (tick_at):
//   ex.tick();                           // after consuming the request (integration.hpp)
//
// A single-threaded, non-preemptive executor: tasks run only inside tick(), on the thread that
// calls it, one at a time, each until it suspends. The same task<T> code runs here and on the
// multi-core runtime (E4): spawn, join handles, cancellation, sleep, with_timeout, join sets,
// tidy destructors, slots (spawn_in_slot), named tasks (spawn_named, wait_named) and every sync
// primitive work unchanged (E6). What needs a runtime's workers refuses with usage_error:
// I/O operations (no reactor here; opening a file is a plain system call and works), actors,
// run_on(rt, ...) and rt.block_on (the ticking thread must not block). fork_join without a
// runtime runs both branches on the ticking thread, one after the other.
//
// Participants
//   - the ticking thread (the host's loop): tick(), and the destructor. Owns the run queue, the
//     request list, the timer wheel's firing and the task table's first shard. Ticks never
//     overlap; successive ticks may come from different threads if the host orders them.
//   - wakers on any thread (a channel send, an event set, another runtime's task, a join): only
//     push the woken task onto the action queue and ask the host for a tick (tick_soon).
//   - spawners on any thread: like wakers (a spawn is the first wake-up).
//
// Phases (E3). A tick alternates service and execute phases; the first and the last phase of a
// tick are service phases:
//   service  - move the request lists to the run queue (what the last execute phase woke), take
//              the action queue (what other threads woke), fire due timers (what they wake joins
//              the run queue in the same phase);
//   execute  - run up to `tasks_per_execute_phase` tasks from the run queue, each until it
//              suspends. A task woken, spawned or yielding on the ticking thread goes onto a
//              request list, never straight onto the run queue: it runs in a later execute phase.
//
// The run queue has two ends, as a worker's queues on the multi-core runtime do:
//   newest - what the ticking thread spawned or woke, newest first (a stack): a tree of spawns
//            is run depth-first, so it stays as small as on a worker (breadth-first, skynet's
//            million leaves would all be alive at once);
//   oldest - yields and wake-ups from other threads, oldest first.
// An execute phase takes its first task from `oldest` when that is not empty, then `newest`
// first: whatever waits at the oldest end runs within a phase or two, however busy the newest
// end keeps itself (the runtime checks its injector periodically for the same reason).
// A tick runs at most `tasks_per_tick` tasks, and when the host set `time_per_tick`, starts no
// task once that much real time has passed since the tick began; if work is left it asks for
// re-entry. At its end it tells the host when the next timer is due (tick_at). So the host's loop
// stays responsive however much work is queued, and a task is never resumed while its own run
// is on the stack. A task holds a tick only for one run: a task whose awaits never suspend
// still yields when its cooperative budget is used up (task/spawned_task.hpp).
//
// Blocks (E5, the seed's "main block"). A spawned task is blocked from the moment it suspends
// in an execute phase until a service phase takes its wake-up (from the request list or the
// action queue) and puts it back on the run queue. The wake protocol of the task layer gives
// exactly one wake-up per suspension, so the block needs no flag of its own: "blocked" is "live,
// not queued, not running", counted by statistics(). Wake-ups that may fire any number of times
// from any thread (callback APIs, poll-style code) go through a turnstile
// (spindle/embed/turnstile.hpp), the seed's non-main block, whose flag turns them into one.
//
// Shutdown (the destructor, on the ticking thread, outside a tick):
//   1. `stopping`: spawns throw runtime_stopped; wake-ups are ignored from now on (every task
//      still live is destroyed below, whatever queue it would have joined); then the gate to
//      other threads closes (core/outside_gate.hpp): a spawn or a wake from another thread that
//      is between touching a task and its push (and the integration's tick_soon()) finishes
//      first, and later ones are refused;
//   2. the action queue is closed (defensive: a late push fails and is ignored; but a waker on
//      another thread that pushed just before goes on to call the integration's tick_soon(),
//      possibly after the destructor returned, so other threads must be quiet, see below);
//   3. every runnable still queued (run queue, request list, closed action queue) is dropped:
//      a task records "cancelled" and destroys its frames;
//   4. every task still live (suspended forever) is abandoned the same way, until none is left;
//   5. the executor's share of the frame depot's bound and the ticking thread's private frame
//      cache are given back (frame_allocator.hpp); the wrappers and the timer wheel go (every
//      timer entry lived in a destroyed frame).
// Join handles stay valid and report cancelled. The integration must outlive the executor. Other
// threads may wake (through spindle's primitives) and cancel its tasks until the destructor runs
// and while it runs (step 1's gate); what they wake with must itself still be alive, as for the
// runtime. A spawn is a call on the executor: it must finish before the destructor is called.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "spindle/core/clock.hpp"
#include "spindle/core/executor_mailbox.hpp"
#include "spindle/core/intrusive_list.hpp"
#include "spindle/core/outside_gate.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/core/trace.hpp"
#include "spindle/embed/integration.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"
#include "spindle/task/task_host.hpp"
#include "spindle/task/task_slot.hpp"
#include "spindle/task/snapshot.hpp"

namespace spindle::embed {

struct embedded_options {
  // At most this many tasks run in one tick; more waiting: the executor asks for re-entry.
  std::uint32_t tasks_per_tick = 256;
  // At most this many tasks run between two service phases.
  std::uint32_t tasks_per_execute_phase = 32;
  // Real time a tick may spend running tasks: once it has passed, the tick starts no further
  // task, ends with a service phase and asks for re-entry, as when tasks_per_tick runs out. A
  // running task is not interrupted, so a tick may overrun by one task's run. Measured on the
  // steady clock, not the integration's now() (embedded.md says why). Zero: no time bound.
  clock_duration time_per_tick = clock_duration::zero();
  // The frame depot's bound grows by this many bytes while the executor lives, as for one
  // executor of a runtime (runtime_options::frame_cache_bytes; docs/design/tasks.md, "Frame
  // cache"). The destructor gives the share back, and the destroying thread's private cache.
  // Clamped to core::max_frame_cache_bytes (1 TiB).
  std::size_t frame_cache_bytes = std::size_t(4) << 20;
  // Diagnostics (core/diagnostics_options.hpp), as for a runtime: the live view's address
  // (SPINDLE_DIAGNOSTICS applies here too), strict warnings, and a tick over
  // tick_over_budget_factor x time_per_tick is an embedded_tick_over_budget warning.
  core::diagnostics_options diagnostics{};
  // Diagnostics (task records' busy and scheduled times, SPEC G1): read the steady clock after
  // every task run (about 20 ns each). Off: the records' clock advances at each execute phase
  // (and after each run when time_per_tick is set, which reads the clock anyway), so a poll
  // that starts and ends inside one phase reads as no time.
  bool precise_task_times = false;
};

// Counters since construction. statistics() and has_ready_work() belong to the ticking thread
// (the host's): calling them from another thread is a data race.
struct embedded_statistics {
  std::uint64_t ticks = 0;
  std::uint64_t service_phases = 0;
  std::uint64_t execute_phases = 0;
  std::uint64_t tasks_run = 0;        // runs of a runnable (a task resumed once counts once)
  // Runnables taken from the action queue: wake-ups from other threads, and spawns and wake-ups
  // made outside a tick (even on the host's own thread).
  std::uint64_t foreign_wakes = 0;
  std::uint64_t timers_fired = 0;
  // Ticks that stopped running tasks because time_per_tick had passed.
  std::uint64_t ticks_out_of_time = 0;
  std::uint64_t live_tasks = 0;       // spawned and not completed
  std::uint64_t queued_tasks = 0;     // on the run queue or the request list
  // Live tasks neither queued nor running: blocked on something (the seed's main block set).
  std::uint64_t blocked_tasks = 0;
};

enum class phase : std::uint8_t { service, execute };

class embedded_executor final : private ::spindle::detail::task_host {
 public:
  explicit embedded_executor(integration& host, embedded_options options = {});
  ~embedded_executor();
  embedded_executor(const embedded_executor&) = delete;
  embedded_executor& operator=(const embedded_executor&) = delete;

  // Any thread. The task runs in a later tick; the host is asked for one. Throws
  // runtime_stopped once the destructor began.
  template <class T>
  join_handle<T> spawn(task<T> body, spawn_location where = spawn_location::current()) {
    return ::spindle::detail::spawn_in(static_cast<::spindle::detail::task_host&>(*this),
                                       std::move(body), where);
  }
  template <class F>
    requires(!::spindle::detail::is_task_v<std::remove_cvref_t<F>>) && std::invocable<std::decay_t<F>&>
  auto spawn(F&& function, spawn_location where = spawn_location::current()) {
    return ::spindle::detail::spawn_function_in(static_cast<::spindle::detail::task_host&>(*this),
                                                std::decay_t<F>(std::forward<F>(function)), where);
  }

  // Spawns under a name (task/named_tasks.hpp): wait_named(name) in a task here waits for it.
  template <class T>
  join_handle<T> spawn_named(std::string name, task<T> body, spawn_location where = spawn_location::current()) {
    return ::spindle::detail::spawn_named_in(static_cast<::spindle::detail::task_host&>(*this),
                                             std::move(name), std::move(body), where);
  }
  std::size_t live_named(const std::string& name) const { return names->live(name); }
  // Spawns as the new occupant of `slot` (task/task_slot.hpp), on this executor.
  template <class T>
  join_handle<T> spawn_in_slot(task_slot& slot, task<T> body, spawn_location where = spawn_location::current()) {
    return slot.submit(static_cast<::spindle::detail::task_host&>(*this), std::move(body), where);
  }

  // The host's thread: runs service and execute phases (see above). Throws usage_error when
  // called from inside a tick (of this or another embedded executor on this thread).
  void tick();

  // Whether a tick now would find work: something queued, or a timer due at the host's now().
  bool has_ready_work() const noexcept;
  // When the earliest timer is due (clock_time::max() if none).
  clock_time next_deadline() const noexcept;

  embedded_statistics statistics() const noexcept;
  // The TCP port of this executor's live view (embedded_options::diagnostics or
  // SPINDLE_DIAGNOSTICS), 0 when none is serving. Any thread.
  std::uint16_t diagnostics_port() const noexcept;
  // For tests and diagnostics: called at the start of every phase (ticking thread); null: off.
  void set_phase_observer(void (*observer)(void* context, phase), void* context) noexcept {
    phase_observer_ = observer;
    phase_context_ = context;
  }

  // Warnings about this executor and its tasks (diagnostics/warnings.hpp): hook, counts,
  // strict failures. Any thread.
  ::spindle::diagnostics::warning_hub& warnings() noexcept { return task_host::warnings; }

  // The executor whose tick is running on this thread (null outside ticks).
  static embedded_executor* current() noexcept;

  // Diagnostics (SPEC G1; task/snapshot.hpp). Any thread, inside a tick or not: copies the
  // records of up to storage.size() live tasks into `storage` without allocating or locking
  // (a scan of the task table's slots), and returns how many live tasks it found (more than
  // storage.size() when the storage was too small: the rest were left out).
  std::size_t snapshot(std::span<task_info> storage) const noexcept;
  // The same as JSON with every contributor's section (allocates: not for a tick's budget).
  std::string snapshot_json() const;
  // What this executor hands its diagnostics readers (diagnostics/registry.hpp), any thread:
  // diagnostics::metrics_text, diagnostics::snapshot_json, diagnostics::set_tracing(registry,
  // true), diagnostics::trace_json(registry, ms).
  spindle::diagnostics::registry& diagnostics_registry() noexcept {
    return task_host::diagnostics_registry;
  }
  const spindle::diagnostics::registry& diagnostics_registry() const noexcept {
    return task_host::diagnostics_registry;
  }

 private:
  // An owner-only list of runnables linked through runnable::next (core/intrusive_list.hpp).
  using runnable_list = core::intrusive_fifo<core::runnable, &core::runnable::next>;
  // spindle::clock over the integration's now().
  // The integration's now() belongs to the host's thread, so readers on other threads (the
  // snapshot's sleep_left_ns) get `last_reading()`: its time as that thread last read it.
  class integration_clock final : public spindle::clock {
   public:
    explicit integration_clock(integration& host) noexcept : host_(host), last_(*this) {}
    clock_time now() const noexcept override {
      const clock_time t = host_.now();
      last_ns_.store(t.time_since_epoch().count(), std::memory_order_relaxed);  // relaxed: a sample
      return t;
    }
    const spindle::clock& last_reading() const noexcept { return last_; }

   private:
    class last_reading_clock final : public spindle::clock {
     public:
      explicit last_reading_clock(const integration_clock& of) noexcept : of_(of) {}
      clock_time now() const noexcept override {
        // relaxed: a sample of the time, no data hangs on it.
        return clock_time(clock_duration(of_.last_ns_.load(std::memory_order_relaxed)));
      }

     private:
      const integration_clock& of_;
    };
    integration& host_;
    mutable std::atomic<clock_duration::rep> last_ns_{0};
    last_reading_clock last_;
  };

  // task_host
  void schedule(core::runnable* r, core::schedule_hint hint) noexcept override;
  std::int32_t table_shard() const noexcept override;
  core::timer_service* timers_here() noexcept override;
  spindle::clock& clock() const noexcept override { return clock_; }
  bool stopping() const noexcept override;
  entry enter() noexcept override;
  void leave() noexcept override { outside_gate_.leave(); }

  // The first service phase of a tick looks at the action queue with a seq_cst load (the
  // re-entry argument in integration.hpp); every service phase that ends a tick fires timers.
  enum class service_kind { first, middle, last };
  void service(service_kind kind) noexcept;
  // Runs up to `limit` tasks; returns how many ran. Stops early, setting `out_of_time`, once the
  // steady clock reaches `deadline` (nanoseconds, core::monotonic_nanoseconds; 0: no deadline).
  std::uint32_t execute(std::uint32_t limit, std::uint64_t deadline, bool& out_of_time) noexcept;
  void observe(phase p) noexcept {
    if (phase_observer_ != nullptr) phase_observer_(phase_context_, p);
  }
  void drain_for_shutdown() noexcept;

  embedded_options options_;
  // G3 tracing (core/trace.hpp): one ring, recorded into by whichever thread ticks; the
  // registry's trace source (diagnostics::trace_json, set_tracing). Off until switched on.
  std::shared_ptr<core::trace_recorder> trace_;
  sleep_catcher catcher_;
  reentering_integration host_;
  mutable integration_clock clock_;
  core::timer_service timers_;
  // Ticking thread only.
  runnable_list newest_;             // run queue, newest end (a stack)
  runnable_list oldest_;             // run queue, oldest end (a FIFO)
  runnable_list requested_newest_;   // spawned or woken during this execute phase
  runnable_list requested_oldest_;   // yielded during this execute phase
  bool queued_work() const noexcept { return !newest_.empty() || !oldest_.empty(); }
  void take_requests() noexcept;
  core::intrusive_mpsc_stack<core::runnable> actions_;  // any thread: foreign wake-ups
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  core::outside_gate outside_gate_;  // shutdown step 1
  embedded_statistics statistics_;
  ::spindle::diagnostics::warning_hub::tick_watch tick_watch_;  // ticking thread only (G4)
  void look_at_tick(std::uint64_t elapsed_ns) noexcept;
  void (*phase_observer_)(void*, phase) = nullptr;
  void* phase_context_ = nullptr;
  // G2 metrics: statistics_ as of the end of the last tick (the ticking thread stores, relaxed,
  // single writer; the spindle_embedded_* families in the host's registry read them from any
  // thread). A few stores per tick; no allocation.
  struct published_statistics {
    std::atomic<std::uint64_t> ticks{0};
    std::atomic<std::uint64_t> tasks_run{0};
    std::atomic<std::uint64_t> foreign_wakes{0};
    std::atomic<std::uint64_t> timers_fired{0};
    std::atomic<std::uint64_t> ticks_out_of_time{0};
    std::atomic<std::uint64_t> queued_tasks{0};
  };
  published_statistics published_;
  void publish_statistics() noexcept;
  void write_metrics(std::string& out) const;
  // Late: dropped before anything its writer reads.
  ::spindle::diagnostics::registry::registration metrics_;
  // The tasks' record clock (task_host::record_clock): written by the ticking thread, read by
  // any (a waker, a spawner, a snapshot).
  std::atomic<std::uint64_t> record_clock_ns_{0};
  void advance_record_clock(std::uint64_t now) noexcept {
    record_clock_ns_.store(now, std::memory_order_relaxed);  // relaxed: a sample of the time
  }
  // The snapshot's sections (last: dropped first, waiting for a reader in progress).
  spindle::diagnostics::registry::registration executors_section_;
  spindle::diagnostics::registry::registration tasks_section_;
};

}  // namespace spindle::embed
