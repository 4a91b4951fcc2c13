// The scheduling wheel of one executor, and the actor system of one runtime (A3, A4, A5; seed
// 000, "Scheduling actors", "Actor migration", "Time slice procedures"; docs/design/actors.md).
//
// The quantum (A3) is bounded in reductions AND in time: `quantum` reductions (one per message
// plus what a handler charges) and a time slice (actor_system_options::time_slice, default the
// runtime's service interval, 1 ms: Erlang's slice is about as long). Time is read on the
// runtime monitor's coarse clock (runtime_core::coarse_now_ns: one relaxed load, at most a
// quarter of the service interval old: the actor system holds a fine-time claim, so the
// monitor's tick never relaxes under actors), once per message and once per run. The monitor is a
// thread like any other, and on a machine whose CPUs the workers keep busy it was seen not to
// run for 5-13 ms; a hungry run, then bounded by its reductions alone, lasted 10 ms. So a run
// also reads the steady clock every `messages_per_clock_check` messages (a run of fewer reads
// none) and, when the coarse clock lags it by a tick or more, moves it forward for everyone.
// The woken share below is the other steady-clock read.
// Both parts are kept while an actor is idle and refilled together. A run stops when either is
// spent; a run cut by time counts as a full quantum (its reductions are zeroed).
//
// The wheel has `wheel_segments` segments; each holds a runnable queue and an idle timed-out
// set. One turn of the wheel is one pass over all segments, and an actor runs for at most one
// quantum per turn:
//   - an actor that used its whole quantum and still has messages goes into the runnable queue
//     a whole turn (N = wheel_segments segments) forward, with a fresh quantum;
//   - an actor whose mailbox ran dry after using a fraction f of its quantum goes into the idle
//     timed-out set N x f segments forward and keeps what is left of its quantum (f small
//     enough to round to 0 segments: straight to the idle set). How time enters f:
//       f = max(reductions this run used / quantum, time this run surely used / time slice),
//     "surely used" being the coarse reading less one coarse tick (a 2 µs run that straddles a
//     tick reads 250 µs; charging that would send a light actor 4 segments back now and then,
//     and its next message would wait for them). The whole reading, unbiased on average, is
//     what the time budget is charged, so the budget still catches many short runs;
//   - idle actors (in no queue) that receive a message are run at the first opportunity, with
//     what they have left (the `woken` queue, served before the wheel). While other woken
//     actors wait, a woken run ends at a tick of the coarse clock or once it has run a share
//     of the time slice (time slice / actors_per_slice, 16 µs by default) since its second
//     message, on the steady clock, whichever comes first (a woken actor turning out hungry,
//     e.g. a burst of freshly spawned workers, must not hold a latency-sensitive one behind a
//     whole quantum each); one so cut goes on in the current batch with what it has left. So
//     a woken actor waits at most two messages and a share per woken actor ahead of it (about
//     a time slice for 64 of them), not a quantum each; a run of one message reads no clock;
//   - a whole turn after its last refill (the segment clock moved N segments), an actor gets a
//     fresh quantum when it next runs: one quantum per turn, so an actor woken now and then (a
//     request per millisecond) never spends a quantum it was due and waits a turn for nothing;
//   - turning to a segment: its timed-out actors that became runnable meanwhile run first, with
//     their preserved quantum; the others join the idle set with a fresh quantum (they have
//     waited out their share); then every actor of its runnable queue runs, each at most a
//     quantum.
// The seed's "time slice procedure" is how these fit in the executor: the wheel is one
// runnable (the *turn*); one run of that runnable (a *slice* of the wheel) runs the woken
// actors, then the current segment's batch, and turns one segment once both are empty. A slice
// is bounded in time too: it starts no new actor run once it has used a time slice (one
// coarse-clock load per run; nor after `actors_per_slice` runs), so it lasts at most two time
// slices (its last run may take a whole one), and with CPU-hungry actors one run, one time
// slice. The turn then yields as a peer of the executor's local queue (executor::yield_pinned):
// it runs again when the local queue is dry, at the executor's fairness checks, or when it has
// waited a whole service interval; so tasks, timers and I/O on the same executor get the CPU
// between slices, and the wheel gets it between their runnables. Between slices the executor
// does the procedure's steps 1-2 itself (its loop polls its message mailbox first, then the
// reactor: completions are routed, queued submissions go out in one batch), and step 3's
// placements are the rules above: Receiving -> idle set (the head of the idle list), Runnable
// -> N segments forward (the tail of the active queue), Halted -> watchers and supervisor told,
// actor released.
//
// When an idle actor becomes runnable (first opportunity, within one quantum): a wake from its
// own executor (a handler or a task there sends to it) puts it in the woken queue at once; a
// wake from another executor or a plain thread is an executor message, delivered at the
// executor's next loop iteration, i.e. after the slice or task in progress. Either way it runs
// at the head of the next slice (woken first), or of the current one if the wake came from
// inside it. If the wheel was quiet (nothing waiting, no turn queued), the wake queues the turn
// on the executor's inbox (schedule_on), which the loop takes before its local queue; else the
// turn is already waiting as a pinned yield. So the wait is the slice in progress (at most two
// time slices, one with hungry actors) plus what the executor runs between slices (bounded by
// its fairness check and one service interval).
//
// Migration (A5): after a full quantum, and when an idle actor becomes runnable, the owner
// compares CPU demand, in time, with `migration_samples` random executors (drawn among the
// executors of the actor's domain when it has one: spawn_options::domain). The demand of a
// wheel is the work queued in it: the sum, over the actors waiting there (runnable, woken, or
// timed out with a message), of their weight w = max(cost, cost floor), cost being the moving
// average of an actor's run time on the coarse clock and the floor a sixteenth of the time
// slice (so actors too cheap to measure count as actors, and a count balance remains among
// them). With w the actor's own weight, it moves to the least loaded sample when
//       queued here + w >= queued there + 2 w
// (hysteresis: after the move the target holds no more than the source did, so moving back
// does not pay; with less than w queued here nothing is sampled), the actor is not pinned, has
// no I/O in flight and ran at least `migration_cooldown_runs` times and for a time slice
// (coarse clock) since it last moved. The time part is for chatty actors: hundreds of them,
// each run a message of a microsecond, make the queued work of two wheels swing past each other
// at nearly every wake, and with a cooldown in runs alone every actor moved as often as it
// allowed (Savina's chameneos and big on 2 workers: 111k migrations in 452k runs, 290k in
// 1.27M, slower than on 1 worker; docs/design/benchmarks.md). A hungry actor's 4 runs take a
// time slice anyway. The handover is an inter-executor message (M1): the receiving executor
// schedules it N segments forward (or at once if it was woken).
//
// A stuck executor (issue 13: "a stuck executor holds nothing but itself"): only an actor's
// home wheel runs it, so an executor inside a long runnable (a task running a fork-join
// computation for seconds; the monitor's flag, runtime_monitor.hpp) would hold its actors for
// all of it. At its service points (fork-join heartbeats) such an executor delivers its
// executor messages (wakes from other threads) and calls the runtime's long-runnable hook,
// which hands every waiting actor here that may live elsewhere (not pinned, no I/O in flight,
// its domain allows) to the least loaded executor not in a long runnable, or, failing that, to
// one whose long runnable ends when work waits (a delegate's loop piece), as a woken actor
// (hand_away_while_stuck). Idle actors stay; a wake delivered at the next service point moves
// them. An executor whose own runnable ends when work waits hands nothing away (it returns to
// its loop soon). Pinned actors wait for their executor, as they must.
//
// Ownership: everything in actor_scheduler is touched only by its executor's thread, except
// the published queued work and the statistics (single writer, anyone reads).
//
// Shutdown (runtime shutdown step 6, after tasks were abandoned; no worker runs any more):
//   1. adopt messages still in flight were handed over as orphans (executor message delivered
//      with a null receiver): actors spawned elsewhere, and actors migrating (migration, a
//      stuck executor's hand-off), which are in no homed list;
//      Each orphan is homed (unhalted) in its home's list first, so every live actor is in one;
//   2. the supervision trees halt, top-level supervisors newest first: a supervisor's children
//      halt in its stop order (reverse start order), depth first, then the supervisor: the
//      order a stopping supervisor follows while workers run (issue 14, item 7), one actor at a
//      time since this thread does it all. Then every other actor in a homed list halts. Each
//      halts with reason shutdown: its pending messages are destroyed, its behaviour too (its
//      on_stop runs), actors watching are not notified (exit callbacks, a task's monitor, are);
//   3. the system drops its reference to each; cells still referenced by actor refs stay until
//      those refs go (sending to them reports halted).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "spindle/actor/actor_cell.hpp"
#include "spindle/actor/supervision_plan.hpp"
#include "spindle/diagnostics/registry.hpp"
#include "spindle/core/atomic.hpp"
#include "spindle/core/intrusive_list.hpp"
#include "spindle/core/runnable.hpp"

namespace spindle {
namespace detail {
class task_host;
}  // namespace detail
namespace core {
class runtime_core;
class executor;
}  // namespace core

namespace actor_detail {

class name_registry;  // registry.hpp

inline constexpr std::uint32_t wheel_segments = 16;
inline constexpr std::uint32_t actors_per_slice = 64;
// A run looks at the steady clock every so many messages, in case the coarse one stalled.
inline constexpr std::uint64_t messages_per_clock_check = 32;
inline constexpr std::uint32_t migration_samples = 2;
inline constexpr std::uint32_t migration_cooldown_runs = 4;
// An actor's weight in its wheel's queued work is at least time slice / cost_floor_divisor.
inline constexpr std::uint32_t cost_floor_divisor = 16;
// The run-time moving average moves by 1 / 2^cost_average_shift of each new run's deviation.
inline constexpr std::uint32_t cost_average_shift = 2;

// A FIFO of actors linked through queue_next (owner-only).
using actor_queue = core::intrusive_fifo<actor_cell, &actor_cell::queue_next>;

// How an actor handed to an executor is placed there.
enum class adopt_mode : std::uintptr_t {
  idle,              // spawned elsewhere, Receiving: only registered (a wake schedules it)
  spawned_runnable,  // spawned elsewhere with a message waiting: the woken queue
  woken,             // migrated when it became runnable: the woken queue
  full_quantum,      // migrated after a full quantum: the runnable queue, N segments forward
};

}  // namespace actor_detail

// Counters of one executor's wheel (single writer, anyone reads; relaxed).
struct actor_scheduler_stats {
  std::atomic<std::uint64_t> actor_runs{0};
  std::atomic<std::uint64_t> messages_handled{0};
  std::atomic<std::uint64_t> segments_turned{0};
  std::atomic<std::uint64_t> runs_cut_by_time{0};    // runs that spent the time slice
  std::atomic<std::uint64_t> woken_runs_cut{0};      // woken runs cut at a tick or share
  std::atomic<std::uint64_t> coarse_clock_kept{0};   // runs that moved a stalled coarse clock
  std::atomic<std::uint64_t> stuck_hand_offs{0};     // actors handed away in a long runnable
  std::atomic<std::uint64_t> slices_cut_by_time{0};  // wheel slices that stopped on time
  std::atomic<std::uint64_t> busy_nanoseconds{0};    // actor runs, on the coarse clock
  std::atomic<std::uint64_t> migrations_out{0};
  std::atomic<std::uint64_t> migrations_in{0};
  std::atomic<std::uint64_t> halted{0};
  std::atomic<std::uint64_t> live_actors{0};  // homed here and not halted
};

class actor_scheduler {
 public:
  actor_scheduler(actor_system& system, std::uint32_t executor_index);
  ~actor_scheduler();
  actor_scheduler(const actor_scheduler&) = delete;
  actor_scheduler& operator=(const actor_scheduler&) = delete;

  std::uint32_t index() const noexcept { return index_; }
  // Work queued in this wheel, in nanoseconds: the sum of the weights of the actors waiting
  // (runnable, woken, or timed out with a message) and of the one running; the CPU demand
  // migration compares (A5).
  std::uint64_t queued_work_ns() const noexcept {
    return queued_work_published_.load(std::memory_order_relaxed);  // relaxed: a sample
  }
  // Actors waiting in this wheel (owner thread; tests and diagnostics).
  std::uint32_t waiting() const noexcept { return waiting_; }
  const actor_scheduler_stats& stats() const noexcept { return stats_; }
  // G4 (any thread): whether `r` is this wheel's turn (a key, never dereferenced), and the
  // actor whose run is in progress (0: none).
  bool is_turn(const core::runnable* r) const noexcept { return r == &turn_runnable_; }
  actor_id running_actor() const noexcept {
    return running_actor_.load(std::memory_order_relaxed);  // relaxed: a sample for a report
  }
  // Segments turned so far (owner writes, anyone samples): the wheel's clock.
  std::uint64_t segment_clock() const noexcept {
    return stats_.segments_turned.load(std::memory_order_relaxed);
  }

  // Owner thread only, from here on.
  // An actor homed here becomes known (spawned here or handed over).
  void adopt(actor_detail::actor_cell* cell, actor_detail::adopt_mode mode) noexcept;
  // The actor (homed here) left Receiving: schedule it.
  void wake(actor_detail::actor_cell* cell) noexcept;
  // Shutdown step 2 for the actors homed here.
  void halt_all_for_shutdown() noexcept;
  // Shutdown step 2 for one actor homed here (nothing if it has halted).
  void halt_for_shutdown(actor_detail::actor_cell* cell) noexcept;
  // Shutdown: appends the supervisors homed here (behaviours with children_in_stop_order).
  void collect_supervisors(std::vector<actor_detail::actor_cell*>& out) const;
  // Shutdown step 2 for an orphan (its adopt message was discarded): homes it here, to be
  // halted, unless it is homed somewhere (halted there already) or halted. A migrated actor
  // whose adopt message was in flight is homed nowhere: without this it never halted.
  void adopt_orphan_for_shutdown(actor_detail::actor_cell* cell) noexcept;
  // This executor is in a long runnable (at its service points, the runtime's long-runnable
  // hook): the waiting actors that may live elsewhere move to executors that are not.
  void hand_away_while_stuck() noexcept;

 private:
  struct turn_type : core::runnable {
    explicit turn_type(actor_scheduler* scheduler) noexcept : runnable(&turn_vtable), owner(scheduler) {}
    actor_scheduler* owner;
  };
  static const core::runnable_vtable turn_vtable;
  static void run_turn(core::runnable* self) noexcept;
  static void drop_turn(core::runnable* self) noexcept;
  void ensure_turn_queued() noexcept;
  void turn() noexcept;
  void advance_segment() noexcept;
  // `woken`: the actor came from the woken queue (its run ends at a tick if others are woken).
  void run_actor(actor_detail::actor_cell* cell, bool woken) noexcept;
  // `cut_for_woken`: the run ended at a tick for the sake of other woken actors.
  void place_after_run(actor_detail::actor_cell* cell, bool has_messages, std::uint64_t ran_ns,
                       bool cut_for_woken) noexcept;
  bool maybe_migrate(actor_detail::actor_cell* cell, bool woken) noexcept;
  // Moves the actor (placed nowhere here, counted out of the waiting work) to `target`.
  void hand_over(actor_detail::actor_cell* cell, std::uint32_t target,
                 actor_detail::adopt_mode mode) noexcept;
  void halt(actor_detail::actor_cell* cell, exit_reason reason, bool notify) noexcept;
  // The run's end by halting: halt() at once, unless an interleaving actor has handlers in
  // flight; then it is marked halting, its handlers are cancelled, and it waits Receiving for
  // the last one's end (actor_await.hpp, "Interleaving").
  void finish(actor_detail::actor_cell* cell, exit_reason reason) noexcept;
  // At a run's start, `handler_ended` set: carries out a kill, a handler's crash or stop, or a
  // halt that waited for handlers. True if the run ends there.
  bool settle_handlers(actor_detail::actor_cell* cell) noexcept;
  void add_homed(actor_detail::actor_cell* cell) noexcept;
  void remove_homed(actor_detail::actor_cell* cell) noexcept;
  // A fresh quantum (reductions and time), stamped with the segment clock.
  void refill(actor_detail::actor_cell* cell) noexcept;
  // The actor's weight in the queued work: max(cost, floor).
  std::uint64_t weight(const actor_detail::actor_cell* cell) const noexcept;
  // The actor starts waiting in this wheel (counted in waiting_ and the queued work; turn()
  // takes it out when it runs). Its weight does not change while it waits (cost_ns changes
  // only when it runs).
  void count_waiting(const actor_detail::actor_cell* cell) noexcept;
  void publish_queued_work() noexcept;
  std::uint64_t coarse_now_ns() const noexcept;
  // Whether a woken run has used its share (header: the woken queue) since `mark`, which the
  // first call sets (to the steady clock's now) and answers false.
  bool woken_share_spent(std::uint64_t& mark) const noexcept;
  // The steady clock's now if the coarse reading `coarse` lags it by a tick or more (the
  // coarse clock then moves to it), else `coarse` (header: time).
  std::uint64_t keep_time(std::uint64_t coarse) noexcept;

  struct segment {
    actor_detail::actor_queue runnable;
    actor_detail::actor_queue timed_out;
  };

  actor_system& system_;
  core::runtime_core& core_;
  const std::uint32_t index_;
  const std::uint64_t time_slice_ns_;        // the time part of a quantum; a slice's budget
  const std::uint64_t clock_resolution_ns_;  // one tick of the coarse clock
  const std::uint64_t cost_floor_ns_;        // time_slice / cost_floor_divisor
  const std::uint64_t woken_share_ns_;       // time_slice / actors_per_slice (the woken queue)
  turn_type turn_runnable_;
  bool turn_queued_ = false;
  segment segments_[actor_detail::wheel_segments];
  std::uint32_t current_ = 0;
  std::uint64_t segments_turned_ = 0;  // the segment clock (owner's copy of the statistic)
  actor_detail::actor_queue woken_;
  actor_detail::actor_queue batch_;  // the current segment's actors still to run this turn
  // Actors in a runnable queue, the batch or the woken queue, plus timed-out ones that became
  // runnable: the wheel keeps turning while this is non-zero.
  std::uint32_t waiting_ = 0;
  std::uint64_t queued_work_ns_ = 0;  // sum of the waiting actors' weights
  std::uint64_t running_weight_ = 0;  // the weight of the actor running now (0 between runs)
  // Read by other executors (migration): its own cache line, away from the owner's hot fields.
  alignas(core::cache_line_size) std::atomic<std::uint64_t> queued_work_published_{0};
  // G4: the actor whose run is in progress (0 between runs), for a stall report; on the line
  // the owner writes at the end of every run anyway (publish_queued_work).
  std::atomic<actor_id> running_actor_{0};
  alignas(core::cache_line_size) actor_detail::actor_cell* homed_head_ = nullptr;
  std::uint32_t random_state_;
  // hand_away_while_stuck's scratch list of target executors and the work queued there (room
  // for every executor, reserved at construction: the hook allocates nothing).
  struct hand_off_target {
    std::uint32_t index;
    std::uint64_t queued_ns;
  };
  std::vector<hand_off_target> hand_off_targets_;
  actor_scheduler_stats stats_;
  // The runtime's warnings (G4): mailbox growth is looked at when the owner takes a mailbox.
  diagnostics::warning_hub& warnings_;
  // diagnostics_options::records: whether runs keep the cells' statistics (mailbox length and
  // high-water mark, messages handled, reductions used).
  const bool records_;
  void look_at_mailbox(actor_detail::actor_cell* cell, std::uint64_t backlog);
};

struct actor_system_options {
  std::uint32_t quantum = 1000;  // reductions per turn (A3); one per message unless charged
  // The time part of a quantum, and a wheel slice's budget (A3). Zero: the runtime's service
  // interval (runtime_options::service_interval, 1 ms by default). Measured on the coarse
  // clock, so bounds hold within one coarse tick (a quarter of the service interval).
  std::chrono::nanoseconds time_slice{0};
};

// One actor as a snapshot saw it (SPEC G1).
struct actor_info {
  actor_id id = 0;
  std::string name;  // spawn_options::name (empty: unnamed)
  std::string registered_name;  // its registered name (registry.hpp; empty: none)
  actor_state state = actor_state::receiving;
  std::uint32_t executor = 0;  // its home
  // User messages queued and not yet handled: exact for bounded mailboxes and with
  // diagnostics_options::exact_mailbox_lengths; otherwise those the actor took out of its
  // mailbox and has not handled yet (a lower bound), `more_waiting` telling whether others wait.
  std::uint64_t mailbox_length = 0;
  bool mailbox_length_exact = false;
  bool more_waiting = false;
  std::uint32_t mailbox_high_water = 0;  // the longest its owner found it
  std::uint32_t mailbox_capacity = 0;    // 0: unbounded
  std::uint32_t stashed = 0;  // in its stash (ctx.stash), included in mailbox_length
  std::uint64_t messages_handled = 0;
  std::uint64_t reductions = 0;  // used since it was spawned (A3)
  // False while diagnostics_options::records is off: the statistics above (but a bounded
  // mailbox's length) stay 0.
  bool statistics = true;
  actor_id supervisor = 0;       // 0: none
  std::uint32_t restarts = 0;    // restarts of its child slot before this incarnation
};

// One supervisor and its children, as a snapshot saw them (the supervision tree: a child that
// is itself a supervisor appears as a supervisor_info of its own whose `parent` names this one).
struct supervisor_info {
  actor_id id = 0;
  std::string name;
  actor_id parent = 0;  // its own supervisor (0: a root)
  struct child {
    std::string name;      // the child spec's name
    actor_id actor = 0;    // the running incarnation (0: not running now)
    std::uint32_t restarts = 0;  // times this child was started again
    bool running = false;
  };
  std::vector<child> children;
  // Restart intensity (what its restart_limit is checked against): restarts performed so far,
  // those within the limit's window now (all of them when it has no window), and the limit
  // (max_restarts empty: unlimited; window empty: over the supervisor's lifetime).
  bool dynamic = false;  // a dynamic_supervisor (children started at run time)
  std::uint64_t restarts = 0;
  std::uint64_t restarts_in_window = 0;
  std::optional<std::uint64_t> max_restarts;
  std::optional<std::chrono::nanoseconds> window;
};

namespace actor_detail {
// What a supervisor keeps up to date for snapshots (supervisor.cpp); guarded by its system's
// directory lock.
struct supervisor_record {
  actor_id id = 0;
  std::vector<supervisor_info::child> children;
  bool dynamic = false;
  // A copy of the supervisor's restart history as of its last restart (snapshots count the
  // restarts still within the window at the time they are taken).
  std::optional<restart_intensity> intensity;
};
}  // namespace actor_detail

// The actors of one runtime: a scheduler per executor (created on first use), ids, shutdown.
// Created on first use by spawn_actor and owned by the runtime.
//
// Diagnostics. The directory lists every actor from spawn until it halts (an intrusive list
// under `directory_lock_`; a cell stays alive while listed: the system's reference goes after
// the halt that delists it), and every supervisor's record. The system registers two sections
// in its runtime's diagnostics registry: "actors" (each actor's name, state, home, mailbox
// length and high-water mark, reductions, supervisor, restarts) and "supervision_tree". A
// snapshot holds the lock while it reads (atomics of the listed cells): spawns and halts wait
// for it meanwhile, the actors' turns do not.
class actor_system {
 public:
  actor_system(core::runtime_core& core, actor_system_options options);
  ~actor_system();

  core::runtime_core& core() const noexcept { return core_; }
  // The runtime's task host (its gate to outside threads: detail::host_entry).
  detail::task_host& task_host() const noexcept;
  const actor_system_options& options() const noexcept { return options_; }
  // The time slice in nanoseconds (options().time_slice, or the service interval).
  std::uint64_t time_slice_ns() const noexcept { return time_slice_ns_; }
  // The scheduler of executor `index`, created on first use (any thread).
  actor_scheduler& scheduler(std::uint32_t index);
  // Null if not created yet (any thread; for load sampling).
  actor_scheduler* find_scheduler(std::uint32_t index) const noexcept {
    // acquire: pairs with the release CAS that published it.
    return schedulers_[index].load(std::memory_order_acquire);
  }
  actor_id next_id() noexcept {
    return next_id_.fetch_add(1, std::memory_order_relaxed) + 1;  // relaxed: uniqueness only
  }
  // Routes a wake of `cell` to its home executor: directly when called there, else by message.
  void route_wake(actor_detail::actor_cell* cell) noexcept;
  // Hands `cell` to executor `target` (spawn from elsewhere, migration).
  void send_adopt(actor_detail::actor_cell* cell, std::uint32_t target,
                  actor_detail::adopt_mode mode) noexcept;
  // Index of the calling thread's executor if it belongs to this runtime, else -1.
  std::int32_t current_index() const noexcept;
  bool stopping() const noexcept;

  // Shutdown steps 1-3 (see above).
  void add_orphan(actor_detail::actor_cell* cell) noexcept;
  void shutdown() noexcept;

  // Called when a supervisor gives up (its restart limit was reached; supervisor.hpp), on the
  // supervisor's executor, before it halts: a top-level supervisor has nobody else to tell. The
  // default writes one line to stderr (log_supervisor_failure); set_supervisor_failure_hook
  // replaces it (a null function restores it). The hook must not block; what it throws is
  // ignored.
  struct supervisor_failure {
    actor_id supervisor;
    std::string child;       // the child whose exit went beyond the limit
    std::string description;  // what the escalation says
  };
  using supervisor_failure_hook = std::function<void(const supervisor_failure&)>;
  void set_supervisor_failure_hook(supervisor_failure_hook hook);
  void report_supervisor_failure(const supervisor_failure& failure) noexcept;
  static void log_supervisor_failure(const supervisor_failure& failure) noexcept;

  // Process-wide count of live actor cells (memory not yet freed), for leak checks in tests.
  static std::uint64_t live_cells() noexcept;

  // G2 metrics: children its supervisors restarted (a supervisor's actor counts; relaxed RMW:
  // supervisors run on any executor), and the spindle_actor_* families (any thread).
  void count_restarts(std::uint64_t restarts) noexcept {
    supervisor_restarts_.fetch_add(restarts, std::memory_order_relaxed);  // relaxed: a statistic
  }
  std::uint64_t supervisor_restarts() const noexcept {
    return supervisor_restarts_.load(std::memory_order_relaxed);  // relaxed: a sample
  }
  void write_metrics(std::string& out) const;
  // Registered names (registry.hpp).
  actor_detail::name_registry& names() const noexcept { return *names_; }
  // --- diagnostics (see above) ---------------------------------------------------------------
  void enlist(actor_detail::actor_cell* cell);
  void delist(actor_detail::actor_cell* cell) noexcept;
  void add_supervisor_record(actor_detail::supervisor_record* record);
  void remove_supervisor_record(actor_detail::supervisor_record* record) noexcept;
  // Runs f() with the directory lock held (a supervisor updating its record).
  template <class F>
  void with_directory_locked(F&& f) {
    std::lock_guard guard(directory_lock_);
    f();
  }
  std::vector<actor_info> snapshot() const;
  std::vector<supervisor_info> supervision_tree() const;
  // G4: if `r` (seen running too long by the runtime's monitor; never dereferenced) is one of
  // this system's wheels, names the actor whose run is in progress there (kind actor, its id
  // and name as the "actors" section lists them).
  bool describe_stalled(const core::runnable* r, diagnostics::warning_subject& out) const;

 private:
  core::runtime_core& core_;
  actor_system_options options_;
  std::uint64_t time_slice_ns_;
  std::unique_ptr<std::atomic<actor_scheduler*>[]> schedulers_;
  std::uint32_t scheduler_capacity_;
  std::atomic<actor_id> next_id_{0};
  std::mutex orphans_mutex_;
  std::vector<actor_detail::actor_cell*> orphans_;
  std::atomic<bool> shut_down_{false};
  std::mutex failure_hook_mutex_;
  supervisor_failure_hook failure_hook_;  // under failure_hook_mutex_; empty: the default
  std::atomic<std::uint64_t> supervisor_restarts_{0};
  // Outlives every halt (shutdown() halts every actor in the destructor's body, and a halt
  // frees its actor's name).
  std::unique_ptr<actor_detail::name_registry> names_;

  void halt_supervision_trees() noexcept;
  void register_sections();

  mutable std::mutex directory_lock_;
  actor_detail::actor_cell* directory_head_ = nullptr;          // under directory_lock_
  std::vector<actor_detail::supervisor_record*> supervisors_;  // under directory_lock_
  std::uint64_t stall_describer_ = 0;  // its id in the runtime's warning hub (0: none)
  // Last: dropped first (waiting for a reader in progress).
  diagnostics::registry::registration actors_section_;
  diagnostics::registry::registration tree_section_;
};

// The actor system of the runtime whose worker calls (null elsewhere), and of a given core
// (created on first use).
actor_system* current_actor_system() noexcept;
actor_system& actor_system_of(core::runtime_core& core);

}  // namespace spindle
