// warnings: what a runtime notices about itself and tells a person (SPEC G4; design and cost in
// docs/design/diagnostics.md, "Warnings (G4)").
//
// Kinds (warning_kind): stall (a runnable running longer than stall_threshold), woken_not_polled
// (work queued and not run within woken_threshold), lost_waker (a task suspended with no live
// waker), self_wakes (a task's wakes mostly its own), mailbox_growth (an actor's backlog past
// OTP-style enable/disable thresholds), embedded_tick_over_budget (an embedded tick longer than
// its time budget by a factor).
//
// Who takes part
//   - detectors: the runtime monitor's thread (executor_watch: stall, woken_not_polled, and the
//     per-task lints over the task layer's views), an actor's owner executor (mailbox_growth),
//     the embedded executor's ticking thread (embedded_tick_over_budget). A detector decides
//     when a condition holds (with its own hysteresis: it must hold a while to be raised and
//     clear below a lower threshold to be lowered) and calls raise() / lower() at those
//     transitions only, never per event: the hub is off every hot path.
//   - the hub (warning_hub, one per task host, next to its diagnostics registry): keeps the
//     current warnings (one per kind and subject) and the recent ones, counts them per kind,
//     rate-limits deliveries per kind (a token bucket of warnings_per_second; the rest counted
//     as suppressed), delivers each raise to the hook (default: one line on stderr) and to the
//     on_warning listeners (the flight recorder's dump), records failures in strict mode, and
//     contributes the snapshot section "warnings" and the counters spindle_warnings_total{kind}
//     and spindle_warnings_suppressed_total{kind} to the registry.
//   - readers (any thread): current(), recent(), counts, failures(), the registry's writers.
//
// Concurrency: one mutex guards the hub's state; the hook and the listeners are called after it
// is released, one delivery at a time (delivery_mutex_), so a hook may read the hub. A hook
// must not block for long: it runs on the detector's thread (the monitor's, an executor's).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "spindle/core/diagnostics_options.hpp"
#include "spindle/diagnostics/json_writer.hpp"
#include "spindle/diagnostics/registry.hpp"

namespace spindle::core {
class runtime_core;
struct runnable;
}  // namespace spindle::core

namespace spindle::diagnostics {

enum class warning_kind : std::uint8_t {
  stall,
  woken_not_polled,
  lost_waker,
  self_wakes,
  mailbox_growth,
  embedded_tick_over_budget,
};
inline constexpr std::size_t warning_kind_count = 6;
// "stall", "woken_not_polled", ... (the Prometheus label and the snapshot's "kind").
std::string_view kind_name(warning_kind kind) noexcept;

// What a warning is about.
struct warning_subject {
  // tasks: many tasks at once, past the number reported one by one (id 0; see evaluate_tasks).
  enum class kind : std::uint8_t { executor, task, actor, embedded_executor, tasks };
  kind what = kind::executor;
  // Task: (slot index << 32) | serial; actor: its id; executor: its index.
  std::uint64_t id = 0;
  std::string name;       // empty when unnamed
  std::string location;   // "file:line (function)" when known
  std::int32_t executor = -1;  // the executor involved, when known
  // A stall in a runnable that is not (known to be) a task: "task" subjects say so in `name`.
  friend bool operator==(const warning_subject&, const warning_subject&) = default;
};
std::string_view subject_kind_name(warning_subject::kind kind) noexcept;

struct warning {
  warning_kind kind = warning_kind::stall;
  warning_subject subject;
  std::string message;
  std::uint64_t first_seen_ns = 0;  // monotonic (core::monotonic_nanoseconds)
  std::uint64_t last_seen_ns = 0;
  bool active = true;               // raised and not lowered yet
  std::uint64_t raised_count = 1;   // times this kind+subject was raised
};

// The per-task view the task layer provides for the task lints (G1's task records fill it; see
// docs/design/diagnostics.md, "Warnings (G4)", for the adapter).
struct task_view {
  enum class state : std::uint8_t { scheduled, running, suspended, other };
  std::uint64_t id = 0;  // (slot index << 32) | serial
  std::string_view name;
  // "file:line (function)", or empty with the spawn site in file and line instead: the sweep
  // builds the text only for a task it reports, not for every task it looks at.
  std::string_view location;
  const char* file = nullptr;
  std::uint32_t line = 0;
  std::int32_t executor = -1;
  state current = state::other;
  bool waker_registered = false;  // suspended with a registration someone will wake
  std::uint64_t wakes = 0;        // all wakes, self-wakes included
  std::uint64_t self_wakes = 0;   // wakes while it ran (yields)
  std::uint64_t state_for_ns = 0; // how long it has been in `current`
};

// Tells which task, actor, ... (if any) a runnable is, for a stall report. Called on the monitor
// thread while the runnable was seen running; it must not dereference the pointer (it may have
// been freed since): compare it with what its layer keeps in long-lived storage (the task
// table's slots, the actor wheels). Returns false if `r` is not one of its layer's; on success
// `out.what` says what it is (task, actor).
using runnable_describer = std::function<bool(const core::runnable* r, warning_subject& out)>;
// Visits the live tasks among the task table's slots [from, from + count), each's view once, and
// returns the first slot it did not look at, or task_sweep_done once it looked at the table's
// last slot. The monitor's watch sweeps the table in such steps, a few tens of microseconds a
// tick (evaluate_tasks), so that a table of a million tasks does not hold the monitor's thread.
using task_visitor = std::function<std::uint32_t(
    std::uint32_t from, std::uint32_t count, const std::function<void(const task_view&)>& visit)>;
inline constexpr std::uint32_t task_sweep_done = 0xffff'ffffu;

class warning_hub {
 public:
  using hook = std::function<void(const warning&)>;

  explicit warning_hub(registry& owner);
  ~warning_hub();
  warning_hub(const warning_hub&) = delete;
  warning_hub& operator=(const warning_hub&) = delete;

  // Thresholds and modes (any time; detectors read them when they next look).
  void configure(const core::diagnostics_options& options);
  core::diagnostics_options options() const;

  // Replaces the hook (null: the default, one line on stderr). Any thread: it returns once no
  // delivery uses the old hook any more, so its owner may then go; called from inside a hook or
  // listener of this hub, it returns at once (the delivery in progress is the caller's own) and
  // the next delivery uses the new hook.
  void set_warning_hook(hook h);
  // Listeners told of every raise that is delivered (the flight recorder connects its dump
  // here). Returns an id for remove_on_warning.
  std::uint64_t add_on_warning(hook listener);
  void remove_on_warning(std::uint64_t id);

  // --- detectors ---------------------------------------------------------------------------
  // The condition holds (after the detector's hysteresis). A new kind+subject is counted and
  // delivered (rate limits permitting); one already active only has its last_seen and message
  // updated (no new delivery: a warning is raised once until lowered).
  void raise(warning_kind kind, const warning_subject& subject, std::string message,
             std::uint64_t now_ns);
  // The condition cleared: the warning goes from current to recent.
  void lower(warning_kind kind, const warning_subject& subject, std::uint64_t now_ns);
  bool is_active(warning_kind kind, const warning_subject& subject) const;

  // --- readers -----------------------------------------------------------------------------
  std::vector<warning> current() const;
  std::vector<warning> recent() const;  // lowered ones, newest last (bounded)
  std::uint64_t raised(warning_kind kind) const;
  std::uint64_t suppressed(warning_kind kind) const;
  std::uint64_t raised_total() const;
  // Strict mode: every raise while strict_warnings was on, in order (not rate-limited).
  std::vector<warning> failures() const;
  void clear_failures();
  // The snapshot section and the metrics (also reachable through the registry).
  void write_snapshot(json_writer& out) const;
  void write_metrics(std::string& out) const;

  // One line for a person: "spindle warning [stall] task 3.1 "name" at f.cpp:12: ...".
  static std::string format(const warning& w);

  // --- wiring (task layer) -----------------------------------------------------------------
  // Describers of stalled runnables, one per layer that runs them (the task layer, the actor
  // system), asked in the order added until one knows the runnable. Returns an id for
  // remove_runnable_describer, which returns once no call of it is in progress (its captures
  // may then go).
  std::uint64_t add_runnable_describer(runnable_describer describer);
  void remove_runnable_describer(std::uint64_t id);
  void set_task_visitor(task_visitor visitor);
  // Installs this hub's executor watch as `core`'s monitor watcher. The hub must outlive the
  // runtime's shutdown (the task host does).
  void watch_runtime(core::runtime_core& core);

  // Per-task lints (lost_waker, self_wakes, woken_not_polled over the task layer's views).
  //
  // A sweep is a pass over the whole table in steps. Each step visits at most `slots` slots and
  // raises what it found; the pass's end lowers the task warnings that were active when it
  // began and that no step found still holding (the condition cleared, or the task is gone).
  // At most task_warnings_per_kind task warnings of a kind are active at once: past them a
  // pass counts the tasks, and its end raises (or refreshes) one warning about them, subject
  // `tasks` ("42,017 more tasks woken and not polled for 100 ms or more, the longest 2.4 s"),
  // lowered by the first pass that finds none past the cap. A million starved tasks are one
  // warning and a few strings, not a million (a sweep that raised each one held the monitor's
  // thread for seconds, and with it every timer of a loaded 2-core machine).
  //
  // The watch's sweep (monitor thread only) is one task_sweep; evaluate_tasks runs a whole pass
  // at once (tests feed views so).
  static constexpr std::size_t task_warnings_per_kind = 16;
  class task_sweep;
  void evaluate_tasks(const task_visitor& visitor, std::uint64_t now_ns);

  // Mailbox growth detector state of one actor (owned by the actor, touched by its owner only).
  struct mailbox_watch {
    bool raised = false;
    std::uint8_t looks_above = 0;
  };
  // The actor's owner, at each look at its backlog (see actor_scheduler): hysteresis between
  // mailbox_enable (two successive looks) and mailbox_disable. Cheap when nothing changes.
  void observe_mailbox(mailbox_watch& state, std::uint64_t length,
                       const std::function<warning_subject()>& subject);
  // Whether a look at this length can change anything (inline, for the actor's hot path).
  bool mailbox_look_matters(const mailbox_watch& state, std::uint64_t length) const noexcept {
    // relaxed: a threshold copied from the options; a stale one delays a warning by a look.
    return state.raised || state.looks_above != 0 ||
           length >= mailbox_enable_.load(std::memory_order_relaxed);
  }

  // Embedded tick detector state (owned by the embedded executor, its ticking thread only).
  struct tick_watch {
    bool raised = false;
    std::uint32_t within_budget = 0;  // successive ticks within budget while raised
  };
  // The ticking thread, after a tick that had a time budget: raised when it took longer than
  // tick_over_budget_factor x budget, lowered after 8 successive ticks within the budget.
  void observe_tick(tick_watch& state, std::uint64_t elapsed_ns, std::uint64_t budget_ns,
                    const std::function<warning_subject()>& subject);
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

 private:
  class executor_watch;
  struct key {
    warning_kind kind;
    warning_subject::kind what;
    std::uint64_t id;
    friend bool operator<(const key& a, const key& b) {
      return std::tie(a.kind, a.what, a.id) < std::tie(b.kind, b.what, b.id);
    }
  };
  struct bucket {
    double tokens = 0;
    std::uint64_t refilled_ns = 0;
  };
  bool take_token(warning_kind kind, std::uint64_t now_ns);  // under mutex_
  void deliver(const warning& w);

  // Copies of options for the detectors' hot paths (relaxed: thresholds, any value is fine).
  std::atomic<std::uint64_t> mailbox_enable_{10'000};
  std::atomic<bool> enabled_{true};
  mutable std::mutex mutex_;
  core::diagnostics_options options_;            // guarded by mutex_
  std::map<key, warning> current_;               // guarded by mutex_
  std::deque<warning> recent_;                   // guarded by mutex_
  std::vector<warning> failures_;                // guarded by mutex_
  std::uint64_t raised_[warning_kind_count] = {};      // guarded by mutex_
  std::uint64_t suppressed_[warning_kind_count] = {};  // guarded by mutex_
  bucket buckets_[warning_kind_count];           // guarded by mutex_
  std::shared_ptr<const hook> hook_;             // guarded by mutex_
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const hook>>> listeners_;  // mutex_
  std::uint64_t next_listener_ = 1;              // guarded by mutex_
  // Called with describers_mutex_ held (so removal waits for a call in progress); taken
  // without mutex_ held, and describers take no hub lock.
  std::mutex describers_mutex_;
  std::vector<std::pair<std::uint64_t, runnable_describer>> describers_;  // describers_mutex_
  std::uint64_t next_describer_ = 1;                                      // describers_mutex_
  task_visitor tasks_;                           // guarded by mutex_
  std::mutex delivery_mutex_;                    // one delivery at a time
  std::unique_ptr<executor_watch> watch_;
  registry::registration snapshot_registration_;
  registry::registration metrics_registration_;
};

}  // namespace spindle::diagnostics
