// The scheduling wheel of one executor, and the actor system of one runtime (A3, A4, A5; seed
// 000, "Scheduling actors", "Actor migration", "Time slice procedures"; docs/design/actors.md).
//
// The wheel has `wheel_segments` segments; each holds a runnable queue and an idle timed-out
// set. One turn of the wheel is one pass over all segments, and an actor runs for at most one
// quantum (of reductions) per turn:
//   - an actor that used its whole quantum and still has messages goes into the runnable queue
//     a whole turn (N = wheel_segments segments) forward, with a fresh quantum;
//   - an actor whose mailbox ran dry after using a fraction f of its quantum goes into the idle
//     timed-out set N x f segments forward and keeps its remaining reductions (f small enough
//     to round to 0 segments: straight to the idle set, reductions kept);
//   - idle actors (in no queue) that receive a message are run at the first opportunity, with
//     the reductions they have left (the `woken` queue, served before the wheel);
//   - turning to a segment: its timed-out actors that became runnable meanwhile run first, with
//     their preserved reductions; the others join the idle set with a fresh quantum (they have
//     waited out their share); then every actor of its runnable queue runs, each at most a
//     quantum.
// The seed's "time slice procedure" is how these fit in the executor: the wheel is one
// runnable (the *turn*) on its executor's inbox; one slice runs the woken actors and the current
// segment's batch (at most `actors_per_slice` actor runs), then turns one segment. Between
// slices the executor does the procedure's steps 1-2 itself (its loop polls its message mailbox
// first, then the reactor: completions are routed, queued submissions go out in one batch), so
// a wake from another executor waits at most one segment; and the
// placement of step 3 is the rule above: Receiving -> idle set (the head of the idle list),
// Runnable -> N segments forward (the tail of the active queue), Halted -> watchers and
// supervisor told, actor released.
//
// Migration (A5): after a full quantum, and when an idle actor becomes runnable, the owner
// compares its load (actors in its wheel) with `migration_samples` random executors (drawn
// among the executors of the actor's domain when it has one: spawn_options::domain) and hands
// the actor to the least loaded one if that one has at least `migration_margin` fewer
// (hysteresis), the actor is not pinned, has no I/O in flight and ran at least
// `migration_cooldown_runs` times since it last moved. The handover is an inter-executor
// message (M1): the receiving executor schedules it N segments forward (or at once if it was
// woken).
//
// Ownership: everything in actor_scheduler is touched only by its executor's thread, except
// `load` and the statistics (single writer, anyone reads).
//
// Shutdown (runtime shutdown step 6, after tasks were abandoned; no worker runs any more):
//   1. adopt messages still in flight were handed over as orphans (executor message delivered
//      with a null receiver);
//   2. every actor in a scheduler's homed list, and every orphan, halts with reason shutdown:
//      its pending messages are destroyed, its behaviour too, watchers are not notified;
//   3. the system drops its reference to each; cells still referenced by actor refs stay until
//      those refs go (sending to them reports halted).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "spindle/actor/actor_cell.hpp"
#include "spindle/core/intrusive_list.hpp"
#include "spindle/core/runnable.hpp"

namespace spindle {
namespace core {
class runtime_core;
class executor;
}  // namespace core

namespace actor_detail {

inline constexpr std::uint32_t wheel_segments = 16;
inline constexpr std::uint32_t actors_per_slice = 64;
inline constexpr std::uint32_t migration_samples = 2;
inline constexpr std::uint32_t migration_margin = 2;
inline constexpr std::uint32_t migration_cooldown_runs = 4;

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
  // Actors waiting in this wheel (runnable, woken, or timed out with a message): the load
  // others compare with (A5). Relaxed: a sample.
  std::uint32_t load() const noexcept { return load_.load(std::memory_order_relaxed); }
  const actor_scheduler_stats& stats() const noexcept { return stats_; }
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
  void run_actor(actor_detail::actor_cell* cell) noexcept;
  void place_after_run(actor_detail::actor_cell* cell, bool has_messages) noexcept;
  bool maybe_migrate(actor_detail::actor_cell* cell, bool woken) noexcept;
  void halt(actor_detail::actor_cell* cell, exit_reason reason, bool notify) noexcept;
  void add_homed(actor_detail::actor_cell* cell) noexcept;
  void remove_homed(actor_detail::actor_cell* cell) noexcept;
  void change_load(std::int32_t delta) noexcept;

  struct segment {
    actor_detail::actor_queue runnable;
    actor_detail::actor_queue timed_out;
  };

  actor_system& system_;
  const std::uint32_t index_;
  turn_type turn_runnable_;
  bool turn_queued_ = false;
  segment segments_[actor_detail::wheel_segments];
  std::uint32_t current_ = 0;
  actor_detail::actor_queue woken_;
  actor_detail::actor_queue batch_;  // the current segment's actors still to run this turn
  // Actors in a runnable queue, the batch or the woken queue, plus timed-out ones that became
  // runnable: the wheel keeps turning while this is non-zero.
  std::uint32_t waiting_ = 0;
  std::atomic<std::uint32_t> load_{0};
  actor_detail::actor_cell* homed_head_ = nullptr;
  std::uint32_t random_state_;
  actor_scheduler_stats stats_;
};

struct actor_system_options {
  std::uint32_t quantum = 1000;  // reductions per turn (A3); one per message unless charged
};

// The actors of one runtime: a scheduler per executor (created on first use), ids, shutdown.
// Created on first use by spawn_actor and owned by the runtime.
class actor_system {
 public:
  actor_system(core::runtime_core& core, actor_system_options options);
  ~actor_system();

  core::runtime_core& core() const noexcept { return core_; }
  const actor_system_options& options() const noexcept { return options_; }
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

  // Process-wide count of live actor cells (memory not yet freed), for leak checks in tests.
  static std::uint64_t live_cells() noexcept;

 private:
  core::runtime_core& core_;
  actor_system_options options_;
  std::unique_ptr<std::atomic<actor_scheduler*>[]> schedulers_;
  std::uint32_t scheduler_capacity_;
  std::atomic<actor_id> next_id_{0};
  std::mutex orphans_mutex_;
  std::vector<actor_detail::actor_cell*> orphans_;
  std::atomic<bool> shut_down_{false};
};

// The actor system of the runtime whose worker calls (null elsewhere), and of a given core
// (created on first use).
actor_system* current_actor_system() noexcept;
actor_system& actor_system_of(core::runtime_core& core);

}  // namespace spindle
