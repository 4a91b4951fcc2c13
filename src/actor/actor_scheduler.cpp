// The scheduling wheel, migration and halting (actor_scheduler.hpp has the design; the actor
// states and invariants W and X are in actor_cell.hpp).
#include "spindle/actor/actor_scheduler.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "spindle/actor/actor_await.hpp"
#include "spindle/actor/actor_stash.hpp"
#include "spindle/actor/registry.hpp"
#include "spindle/core/clock.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/core/executor_mailbox.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/task/runtime.hpp"

namespace spindle {

using actor_detail::actor_cell;
using actor_detail::envelope;
using actor_detail::envelope_kind;
using actor_detail::placement;
using actor_detail::adopt_mode;

namespace {

// Diagnostics (actor_cell.hpp): the owner samples the mailbox length when it takes its mailbox
// (`handled_this_run`: user messages handled in the current run, not yet published), and
// publishes what a run handled and used when it ends. relaxed, all: single writer (the owner)
// or a count, read by snapshots that want each value whole, not a consistent set.
void note_mailbox_length(actor_cell* cell, std::uint64_t taken_now,
                         std::uint64_t handled_this_run) noexcept {
  const std::uint64_t taken = cell->messages_taken.load(std::memory_order_relaxed) + taken_now;
  cell->messages_taken.store(taken, std::memory_order_relaxed);
  const std::uint64_t received =
      cell->counts_pushes ? cell->messages_received.load(std::memory_order_relaxed) : taken;
  const std::uint64_t handled =
      cell->messages_handled.load(std::memory_order_relaxed) + handled_this_run;
  const std::uint64_t length = received > handled ? received - handled : 0;
  if (length > cell->mailbox_high_water.load(std::memory_order_relaxed)) {
    cell->mailbox_high_water.store(std::uint32_t(std::min<std::uint64_t>(length, UINT32_MAX)),
                                   std::memory_order_relaxed);
  }
}

// Once per run (its end, or just before it halts). Inlined: a call cost more than its body on a
// one-message run.
[[gnu::always_inline]] inline void note_run_end(actor_cell* cell, std::uint64_t& handled_this_run) noexcept {
  if (handled_this_run != 0) {
    cell->messages_handled.store(
        cell->messages_handled.load(std::memory_order_relaxed) + handled_this_run,
        std::memory_order_relaxed);
    handled_this_run = 0;
  }
  const std::int64_t used = std::int64_t(cell->reductions_at_start) - cell->reductions_left;
  if (used > 0) {
    cell->reductions_used.store(
        cell->reductions_used.load(std::memory_order_relaxed) + std::uint64_t(used),
        std::memory_order_relaxed);
  }
}

std::atomic<std::uint64_t> live_cell_count{0};

// Kinds of the executor messages the actor layer sends (executor_message::kind).
constexpr std::uint32_t wake_message = 1;
constexpr std::uint32_t adopt_message = 2;

// Time between two coarse-clock readings, 0 if the clock seems to have gone back (the monitor
// and an executor catching the clock up after a park may store out of order by a tick).
std::uint64_t elapsed_ns(std::uint64_t from, std::uint64_t to) noexcept {
  return to > from ? to - from : 0;
}

// The receive event, out of line so that the untraced path loads neither the id nor the
// switch's consequences into registers (core/trace.hpp, "Leaf functions").
[[gnu::cold, gnu::noinline]] void trace_receive(const actor_cell& cell, const envelope& message) noexcept {
  core::trace_record(core::trace_kind::actor_receive, cell.id, core::trace_ref(&message), 0);
}

}  // namespace

// --- actor_scheduler ---------------------------------------------------------------------------

const core::runnable_vtable actor_scheduler::turn_vtable{&actor_scheduler::run_turn,
                                                         &actor_scheduler::drop_turn};

actor_scheduler::actor_scheduler(actor_system& system, std::uint32_t executor_index)
    : system_(system),
      core_(system.core()),
      index_(executor_index),
      time_slice_ns_(system.time_slice_ns()),
      // The monitor ticks every service interval / 4 (runtime_monitor.hpp; the interval is at
      // least 100 µs, so this is never below the monitor's 25 µs floor).
      clock_resolution_ns_(system.core().service_interval_ns() / 4),
      cost_floor_ns_(std::max<std::uint64_t>(system.time_slice_ns() / actor_detail::cost_floor_divisor, 1)),
      woken_share_ns_(std::max<std::uint64_t>(system.time_slice_ns() / actor_detail::actors_per_slice, 1)),
      turn_runnable_(this),
      random_state_(0x2545f491u * (executor_index + 1)),
      warnings_(static_cast<detail::runtime_state*>(system.core().layer_state())->warnings),
      records_(system.core().options().diagnostics.records) {
  hand_off_targets_.reserve(system.core().options().max_executors);
}

actor_scheduler::~actor_scheduler() = default;

void actor_scheduler::look_at_mailbox(actor_detail::actor_cell* cell, std::uint64_t backlog) {
  try {
    warnings_.observe_mailbox(cell->mailbox_watch, backlog, [cell, this] {
      diagnostics::warning_subject subject;
      subject.what = diagnostics::warning_subject::kind::actor;
      subject.id = cell->id;
      subject.name = cell->name.empty() ? "actor " + std::to_string(cell->id) : cell->name;
      subject.executor = std::int32_t(index_);
      return subject;
    });
  } catch (...) {
    // Out of memory formatting a warning: the actor goes on.
  }
}

void actor_scheduler::run_turn(core::runnable* self) noexcept {
  static_cast<turn_type*>(self)->owner->turn();
}

void actor_scheduler::drop_turn(core::runnable* self) noexcept {
  static_cast<turn_type*>(self)->owner->turn_queued_ = false;  // shutdown halts the actors
}

void actor_scheduler::ensure_turn_queued() noexcept {
  if (turn_queued_) return;
  turn_queued_ = true;
  system_.core().schedule_on(index_, &turn_runnable_);
}

std::uint64_t actor_scheduler::coarse_now_ns() const noexcept { return core_.coarse_now_ns(); }

std::uint64_t actor_scheduler::weight(const actor_cell* cell) const noexcept {
  return std::max<std::uint64_t>(cell->cost_ns, cost_floor_ns_);
}

void actor_scheduler::publish_queued_work() noexcept {
  // relaxed: a sample for other executors' migration decisions.
  queued_work_published_.store(queued_work_ns_ + running_weight_, std::memory_order_relaxed);
}

void actor_scheduler::count_waiting(const actor_cell* cell) noexcept {
  ++waiting_;
  queued_work_ns_ += weight(cell);
  publish_queued_work();
}

void actor_scheduler::refill(actor_cell* cell) noexcept {
  cell->reductions_left = std::int32_t(cell->quantum);
  cell->time_used_ns = 0;
  cell->refilled_at_segment = segments_turned_;
}

void actor_scheduler::add_homed(actor_cell* cell) noexcept {
  cell->homed = true;
  // Written once, by the first executor that homes it (later ones read true: no race).
  if (!cell->ever_homed) cell->ever_homed = true;
  cell->homed_previous = nullptr;
  cell->homed_next = homed_head_;
  if (homed_head_ != nullptr) homed_head_->homed_previous = cell;
  homed_head_ = cell;
  stats_.live_actors.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
}

void actor_scheduler::remove_homed(actor_cell* cell) noexcept {
  // Not yet in the list: spawned elsewhere, woken and halted here before its adopt message came.
  if (!cell->homed) return;
  cell->homed = false;
  if (cell->homed_previous != nullptr) {
    cell->homed_previous->homed_next = cell->homed_next;
  } else {
    homed_head_ = cell->homed_next;
  }
  if (cell->homed_next != nullptr) cell->homed_next->homed_previous = cell->homed_previous;
  cell->homed_previous = cell->homed_next = nullptr;
  stats_.live_actors.fetch_sub(1, std::memory_order_relaxed);  // relaxed: statistics
}

void actor_scheduler::wake(actor_cell* cell) noexcept {
  if (!cell->ever_homed) add_homed(cell);  // spawned elsewhere; its adopt message is still on its way
  switch (cell->where) {
    case placement::idle:
      // Back from an awaiting handler, it goes on where it ran (its partners are likely here:
      // moving it now, to balance the actors its handler just woke, split a ping-pong pair
      // across executors, 60 us a round trip instead of 0.5). It may move at its next wake.
      if (!cell->handler_ended && maybe_migrate(cell, /*woken=*/true)) return;
      cell->where = placement::woken;
      woken_.push_back(cell);
      count_waiting(cell);
      ensure_turn_queued();
      return;
    case placement::timed_out:
      // Stays in its timed-out set: it runs when the wheel turns to that segment, with the
      // reductions it kept. Counted as waiting so the wheel keeps turning until then.
      if (!cell->woken_in_place) {
        cell->woken_in_place = true;
        count_waiting(cell);
        ensure_turn_queued();
      }
      return;
    default:
      return;  // cannot happen (invariant W); ignore rather than corrupt a queue
  }
}

void actor_scheduler::turn() noexcept {
  // One slice: the woken actors and the current segment's batch, then one segment forward.
  // Between slices the executor polls its mailbox, timers and I/O (the seed's time slice
  // procedure), so a wake from another executor waits for the slice in progress. A slice
  // starts no run once it has used a time slice (one coarse-clock load per run).
  const std::uint64_t started = coarse_now_ns();
  std::uint32_t runs = 0;
  while (runs < actor_detail::actors_per_slice) {
    if (runs != 0 && elapsed_ns(started, coarse_now_ns()) >= time_slice_ns_) {
      stats_.slices_cut_by_time.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
      break;
    }
    actor_cell* cell = woken_.pop_front();
    const bool woken = cell != nullptr;
    if (cell == nullptr) cell = batch_.pop_front();
    if (cell == nullptr) break;
    // No longer waiting, but its weight stays in the published work while it runs (the run in
    // progress is work others would wait for too; nothing to publish until it ends).
    --waiting_;
    running_weight_ = weight(cell);
    queued_work_ns_ -= running_weight_;
    // relaxed (both): a sample for a stall report (G4), which wants the id whole, no more.
    running_actor_.store(cell->id, std::memory_order_relaxed);
    run_actor(cell, woken);  // may free the cell (halted): its id was copied above
    running_actor_.store(0, std::memory_order_relaxed);
    running_weight_ = 0;
    publish_queued_work();
    ++runs;
  }
  if (batch_.empty() && woken_.empty() && waiting_ != 0) advance_segment();
  if (waiting_ != 0 && !system_.stopping()) {
    // A peer of the local queue, not ahead of it (executor.hpp, yield_pinned): tasks on this
    // executor run between slices. turn_queued_ stays true.
    system_.core().executor_at(index_).yield_pinned(&turn_runnable_);
  } else {
    turn_queued_ = false;
  }
}

void actor_scheduler::advance_segment() noexcept {
  current_ = (current_ + 1) % actor_detail::wheel_segments;
  ++segments_turned_;
  stats_.segments_turned.store(segments_turned_, std::memory_order_relaxed);  // relaxed: a sample
  segment& now = segments_[current_];
  // Timed-out actors first: those woken meanwhile run with the reductions they kept; the
  // others join the idle set with a fresh quantum.
  actor_detail::actor_queue woken_timed_out;
  while (actor_cell* cell = now.timed_out.pop_front()) {
    if (cell->woken_in_place) {
      cell->woken_in_place = false;
      if (cell->reductions_left <= 0) refill(cell);
      cell->where = placement::runnable;
      woken_timed_out.push_back(cell);  // still counted in waiting_
    } else {
      cell->where = placement::idle;
      refill(cell);
    }
  }
  batch_.append(woken_timed_out);
  batch_.append(now.runnable);
}

void actor_scheduler::run_actor(actor_cell* cell, bool woken) noexcept {
  // relaxed: Runnable -> Running is the owner's own transition; senders only CAS from Receiving.
  cell->state.store(actor_state::running, std::memory_order_relaxed);
  // Back from an awaiting handler (actor_await.hpp), or an interleaved handler's outcome: what
  // it decided takes effect first, before any queued message. One flag per run, not per message.
  if (cell->handler_ended) [[unlikely]] {
    if (settle_handlers(cell)) return;
  }
  // A whole turn of the wheel since its last refill: it is due a fresh quantum (A3: one per
  // turn), whatever it has left.
  if (segments_turned_ - cell->refilled_at_segment >= actor_detail::wheel_segments) refill(cell);
  cell->reductions_at_start = cell->reductions_left;
  stats_.actor_runs.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
  // The time part of the quantum (A3): what is left of it bounds this run. Idle actors always
  // have some left (spending it zeroes the reductions, and such an actor waits a turn).
  const core::runtime_core& core = core_;  // in a register across the handlers' calls
  const std::uint64_t started = core.coarse_now_ns();
  const std::uint64_t deadline =
      started + (time_slice_ns_ > cell->time_used_ns ? time_slice_ns_ - cell->time_used_ns : 0);
  std::uint64_t now = started;
  std::uint64_t handled = 0;
  std::uint64_t user_handled = 0;  // diagnostics: the mailbox length (actor_cell.hpp)
  bool cut_for_woken = false;
  std::uint64_t woken_share_mark = 0;  // steady-clock ns at its second message (see below)
  for (;;) {
    if (cell->private_head == nullptr) {
      // acquire: pairs with the senders' release pushes (the envelopes' contents).
      envelope* newest = cell->mailbox.exchange(nullptr, std::memory_order_acquire);
      if (newest == nullptr) {
        // Nothing more: the run ends (every run ends with such a take). It matters to the
        // mailbox watch (G4) only while a warning is raised or looks are being counted.
        if (warnings_.mailbox_look_matters(cell->mailbox_watch, 0)) look_at_mailbox(cell, 0);
        break;
      }
      bool kill = false;
      envelope* oldest_first = nullptr;
      std::uint64_t backlog = 0;
      std::uint64_t taken = 0;  // user messages (diagnostics)
      while (newest != nullptr) {
        envelope* next = newest->next;
        newest->next = oldest_first;
        oldest_first = newest;
        kill = kill || newest->kind == envelope_kind::kill;
        taken += newest->kind == envelope_kind::user;
        newest = next;
        ++backlog;
      }
      cell->private_head = oldest_first;
      // G4: the backlog is what this take found (the private list was empty).
      if (warnings_.mailbox_look_matters(cell->mailbox_watch, backlog)) look_at_mailbox(cell, backlog);
      if (records_) note_mailbox_length(cell, taken, user_handled);
      if (kill) {
        finish(cell, exit_reason{exit_kind::killed, {}});
        return;
      }
    }
    if (cell->private_head == nullptr || cell->reductions_left <= 0) break;
    envelope* message = cell->private_head;
    cell->private_head = message->next;
    message->next = nullptr;
    // The event point comes before the kind is first read, so the untraced path runs from that
    // read to the switch below as when compiled out: the compiler turns the user kind's test
    // into the switch's branch (between them, the cold call made it a jump table: 8
    // instructions a message).
    if (core::trace_active()) [[unlikely]] trace_receive(*cell, *message);
    if (message->kind == envelope_kind::user) ++user_handled;
    if (cell->capacity != 0 && message->kind == envelope_kind::user) {
      // relaxed: frees room for senders once the message is being handled, so at most
      // `capacity` user messages are ever queued and not yet handled.
      cell->queued.fetch_sub(1, std::memory_order_relaxed);
    }

    bool crashed = false;
    exit_reason crash;
    try {
      switch (message->kind) {
        case envelope_kind::user:
        case envelope_kind::start:
        case envelope_kind::down:
          cell->vtable->handle(*cell, *message);
          break;
        case envelope_kind::exit: {
          auto& note = static_cast<actor_detail::notification_envelope&>(*message);
          if (cell->vtable->traps_exits) {
            cell->vtable->handle(*cell, *message);
          } else if (note.reason.is_abnormal()) {
            cell->stop_requested = true;
            cell->halt_reason = exit_reason{exit_kind::linked, note.reason.error};
          }
          break;
        }
        case envelope_kind::stop: {
          auto& note = static_cast<actor_detail::notification_envelope&>(*message);
          if (cell->vtable->intercepts_stop) {
            cell->vtable->handle(*cell, *message);  // it halts when it says so (ctx.stop)
            break;
          }
          cell->stop_requested = true;
          cell->halt_reason = note.reason;
          break;
        }
        case envelope_kind::kill:
          cell->stop_requested = true;
          cell->halt_reason = exit_reason{exit_kind::killed, {}};
          break;
      }
    } catch (...) {
      crashed = true;
      crash = exit_reason{exit_kind::crashed, std::current_exception()};
    }
    message->destroy(message);
    ++handled;
    cell->reductions_left -= std::int32_t(1 + cell->extra_charge);
    cell->extra_charge = 0;
    // One relaxed load of the coarse clock per message, and every so many messages a look at
    // the steady clock in case the coarse one stalled (keep_time). A run cut by time counts
    // as a full quantum: the loop ends at its next look at the reductions.
    now = core.coarse_now_ns();
    if (handled % actor_detail::messages_per_clock_check == 0) [[unlikely]] now = keep_time(now);
    if (now >= deadline && cell->reductions_left > 0) [[unlikely]] {
      cell->reductions_left = 0;
      stats_.runs_cut_by_time.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
    } else if (woken && !woken_.empty() && (now != started || handled >= 2)) [[unlikely]] {
      // A woken run while others are woken (header: the woken queue) ends at a tick, or once
      // it has run its share since its second message. A run of one message (a chatty
      // actor's) reads no clock here.
      if (now != started || woken_share_spent(woken_share_mark)) {
        cut_for_woken = true;
        stats_.woken_runs_cut.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
      }
    }
    if ((crashed || cell->stop_requested) && records_) note_run_end(cell, user_handled);
    if (crashed) {
      stats_.messages_handled.fetch_add(handled, std::memory_order_relaxed);
      finish(cell, std::move(crash));
      return;
    }
    if (cell->stop_requested) {
      stats_.messages_handled.fetch_add(handled, std::memory_order_relaxed);
      finish(cell, std::move(cell->halt_reason));
      return;
    }
    if (cell->awaiting_handler && cell->vtable->interleaves) [[unlikely]] {
      // An interleaving behaviour's handler awaits: its first step runs now, in this run (its
      // time is the run's), and the run goes on with the next message (actor_await.hpp).
      std::exception_ptr failed = actor_detail::start_interleaved_handler(*cell);
      cell->reductions_left -= std::int32_t(cell->extra_charge);  // the step's ctx.charge
      cell->extra_charge = 0;
      if (failed || cell->handler_crash || cell->stop_requested) {
        if (records_) note_run_end(cell, user_handled);
        stats_.messages_handled.fetch_add(handled, std::memory_order_relaxed);
        cell->handler_ended = false;  // carried out here
        if (failed) {
          finish(cell, exit_reason{exit_kind::crashed, std::move(failed)});
        } else if (cell->handler_crash) {
          finish(cell,
                 exit_reason{exit_kind::crashed, std::exchange(cell->handler_crash, nullptr)});
        } else {
          finish(cell, std::move(cell->halt_reason));
        }
        return;
      }
      now = core.coarse_now_ns();
      if (now >= deadline && cell->reductions_left > 0) cell->reductions_left = 0;
      if (cut_for_woken) break;
      continue;
    }
    if (cell->awaiting_handler) [[unlikely]] {
      // Its handler awaits: the run ends here, the actor stays Running in no queue, and the
      // rest of its mailbox waits (OTP: one message at a time). Everything the run writes is
      // written before the handler's task starts: from then on that task owns the cell's
      // owner-only fields, until it hands them back (actor_await.hpp).
      if (records_) note_run_end(cell, user_handled);
      stats_.messages_handled.fetch_add(handled, std::memory_order_relaxed);
      cell->time_used_ns += elapsed_ns(started, now);
      cell->where = placement::awaiting;
      running_weight_ = 0;
      if (std::exception_ptr failed = actor_detail::start_awaiting_handler(*cell)) {
        // Not started (the runtime is stopping, or memory ran out): the handler's crash.
        halt(cell, exit_reason{exit_kind::crashed, std::move(failed)}, true);
      }
      return;  // the cell is the handler's now (or halted): not touched again
    }
    if (cut_for_woken) break;
  }
  if (records_) note_run_end(cell, user_handled);
  stats_.messages_handled.fetch_add(handled, std::memory_order_relaxed);  // relaxed: statistics
  // The run's time, charged to the quantum and folded into the actor's cost (its CPU demand
  // per run, for migration).
  // Most runs of chatty actors read 0 on a clock of 250 µs ticks, and cost nothing here.
  const std::uint64_t ran_ns = elapsed_ns(started, now);
  if (ran_ns != 0 || cell->cost_ns != 0) {
    cell->time_used_ns += ran_ns;
    if (cell->time_used_ns >= time_slice_ns_) cell->reductions_left = 0;  // spent over runs
    // Moves by a quarter of the deviation, rounded away from zero: a run of cost 0 after a
    // non-zero estimate brings it down to exactly 0 (and the fast path above back).
    constexpr std::int64_t parts = std::int64_t(1) << actor_detail::cost_average_shift;
    const std::int64_t deviation = std::int64_t(std::min<std::uint64_t>(ran_ns, UINT32_MAX)) -
                                   std::int64_t(cell->cost_ns);
    const std::int64_t step = deviation >= 0 ? (deviation + parts - 1) / parts
                                             : (deviation - (parts - 1)) / parts;
    cell->cost_ns = std::uint32_t(std::int64_t(cell->cost_ns) + step);
    // relaxed: single writer, statistics.
    stats_.busy_nanoseconds.store(stats_.busy_nanoseconds.load(std::memory_order_relaxed) + ran_ns,
                                  std::memory_order_relaxed);
  }
  // relaxed: the owner's own view; a racing push is caught by the re-check in place_after_run.
  const bool has_messages = cell->private_head != nullptr ||
                            cell->mailbox.load(std::memory_order_relaxed) != nullptr;
  running_weight_ = 0;  // from here on it is placed (and counted again if it waits)
  place_after_run(cell, has_messages, ran_ns, cut_for_woken);
}

std::uint64_t actor_scheduler::keep_time(std::uint64_t coarse) noexcept {
  const std::uint64_t now = core::monotonic_nanoseconds();
  if (now < coarse + clock_resolution_ns_) return coarse;  // the monitor keeps up
  // It does not (descheduled): this run moves the clock, for every reader (forward only).
  core_.advance_coarse_clock(now);
  stats_.coarse_clock_kept.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
  return now;
}

bool actor_scheduler::woken_share_spent(std::uint64_t& mark) const noexcept {
  // The steady clock, not the coarse one: a share is a small fraction of a coarse tick. Read
  // only in woken runs of two or more messages while other actors are woken.
  const std::uint64_t now = core::monotonic_nanoseconds();
  if (mark == 0) {
    mark = now;
    return false;
  }
  return now - mark >= woken_share_ns_;
}

void actor_scheduler::place_after_run(actor_cell* cell, bool has_messages, std::uint64_t ran_ns,
                                      bool cut_for_woken) noexcept {
  ++cell->runs_since_migration;
  if (has_messages) {
    if (cell->reductions_left > 0 && cut_for_woken) {
      // Cut for the other woken actors: on in the current batch, after them.
      cell->state.store(actor_state::runnable, std::memory_order_relaxed);  // relaxed: owner's
      cell->where = placement::runnable;
      batch_.push_back(cell);
      count_waiting(cell);
      return;
    }
    if (cell->reductions_left > 0) {
      // Messages arrived while it ran (a race with the loop's last look): run it again soon.
      cell->state.store(actor_state::runnable, std::memory_order_relaxed);  // relaxed: owner's
      cell->where = placement::woken;
      woken_.push_back(cell);
      count_waiting(cell);
      return;
    }
    // A whole quantum used (A3): a turn forward with a fresh quantum, or to another executor.
    refill(cell);
    cell->state.store(actor_state::runnable, std::memory_order_relaxed);  // relaxed: owner's
    if (maybe_migrate(cell, /*woken=*/false)) return;
    cell->where = placement::runnable;
    segments_[current_].runnable.push_back(cell);  // N = wheel_segments forward: next turn
    count_waiting(cell);
    return;
  }
  // The mailbox ran dry: go Receiving, then look again (the Dekker pairing with senders).
  // seq_cst store then seq_cst load: a sender that pushed before our load is seen here; one
  // that pushes after it sees Receiving and wakes the actor (actor_cell.hpp).
  cell->state.store(actor_state::receiving, std::memory_order_seq_cst);
  if (cell->mailbox.load(std::memory_order_seq_cst) != nullptr) {
    actor_state expected = actor_state::receiving;
    // seq_cst: competes with senders' CAS; whoever wins schedules the actor (invariant W).
    if (cell->state.compare_exchange_strong(expected, actor_state::runnable,
                                            std::memory_order_seq_cst)) {
      // Undo this call's count first: the call below counts the run again, and may hand the
      // actor to another executor (after that its fields are no longer ours to touch).
      --cell->runs_since_migration;
      place_after_run(cell, true, ran_ns, cut_for_woken);
      return;
    }
    // A sender won: its wake is on its way; place the actor as idle below, the wake finds it.
  }
  // Forward by the share of a turn this run used, f = max(reductions fraction, time fraction);
  // a whole turn once the quantum is spent (it gets a fresh one only when the wheel reaches
  // it). The time fraction counts only the time surely used: the coarse reading less one tick.
  std::uint32_t forward = actor_detail::wheel_segments;
  if (cell->reductions_left > 0) {
    const std::uint64_t quantum = std::max<std::uint32_t>(cell->quantum, 1);
    const std::uint64_t used_now =
        std::uint64_t(std::max<std::int64_t>(cell->reductions_at_start - cell->reductions_left, 0));
    const std::uint64_t by_reductions =
        (actor_detail::wheel_segments * used_now + quantum / 2) / quantum;
    std::uint64_t by_time = 0;
    if (ran_ns > clock_resolution_ns_) {
      by_time = (actor_detail::wheel_segments * (ran_ns - clock_resolution_ns_) +
                 time_slice_ns_ / 2) / time_slice_ns_;
    }
    forward = std::uint32_t(std::min<std::uint64_t>(std::max(by_reductions, by_time),
                                                    actor_detail::wheel_segments));
  }
  if (forward == 0) {
    cell->where = placement::idle;  // keeps its remaining reductions
    return;
  }
  cell->where = placement::timed_out;
  cell->woken_in_place = false;
  const std::uint32_t slot =
      (current_ + std::min(forward, actor_detail::wheel_segments)) % actor_detail::wheel_segments;
  segments_[slot].timed_out.push_back(cell);
}

bool actor_scheduler::maybe_migrate(actor_cell* cell, bool woken) noexcept {
  if (cell->pinned || cell->runs_since_migration < actor_detail::migration_cooldown_runs) {
    return false;
  }
  // And a time slice since it last moved (header, "Migration": chatty actors thrashed).
  if (core_.coarse_now_ns() - cell->migrated_at_ns < time_slice_ns_) return false;
  // relaxed: a hint; an actor starting I/O does so while running, on this thread.
  if (cell->io_in_flight.load(std::memory_order_relaxed) != 0) return false;
  // It moves only if queued here + w >= queued there + 2 w (below), which needs at least its
  // own weight of work queued here: nothing to sample otherwise (a chatty pair, every wake).
  const std::uint64_t own = weight(cell);
  if (queued_work_ns_ < own) return false;
  core::runtime_core& core = system_.core();
  const std::uint32_t count = core.executor_count();
  if (count < 2) return false;
  // The candidates: every other executor, or the other members of the actor's domain (placements
  // are immutable, so reading them needs no synchronisation; a scan only for restricted actors).
  const bool restricted = cell->domain.where != core::executor_domain::kind::any;
  auto in_domain = [&](std::uint32_t i) {
    return i != index_ && cell->domain.contains(core.executor_at(i).placement());
  };
  std::uint32_t candidates = count - 1;
  if (restricted) {
    candidates = 0;
    for (std::uint32_t i = 0; i < count; ++i) candidates += in_domain(i) ? 1 : 0;
    if (candidates == 0) return false;
  }
  auto candidate = [&](std::uint32_t rank) {
    if (!restricted) return rank >= index_ ? rank + 1 : rank;
    for (std::uint32_t i = 0; i < count; ++i) {
      if (in_domain(i) && rank-- == 0) return i;
    }
    return index_;
  };
  // CPU demand in time (header, "Migration"): the work queued here with the actor against the
  // least queued sample; it moves if here >= there + 2 w.
  const std::uint64_t here = queued_work_ns_ + own;
  std::uint32_t best = index_;
  std::uint64_t best_queued = ~std::uint64_t(0);
  for (std::uint32_t i = 0; i < actor_detail::migration_samples; ++i) {
    const std::uint32_t pick = candidate(core::next_xorshift(random_state_) % candidates);
    actor_scheduler* other = system_.find_scheduler(pick);
    const std::uint64_t other_queued = other != nullptr ? other->queued_work_ns() : 0;
    if (other_queued < best_queued) {
      best = pick;
      best_queued = other_queued;
    }
  }
  if (best == index_ || here < best_queued + 2 * own) return false;
  hand_over(cell, best, woken ? adopt_mode::woken : adopt_mode::full_quantum);
  return true;
}

void actor_scheduler::hand_over(actor_cell* cell, std::uint32_t target,
                                adopt_mode mode) noexcept {
  remove_homed(cell);
  cell->where = placement::migrating;
  cell->runs_since_migration = 0;
  cell->migrated_at_ns = core_.coarse_now_ns();
  // release: the target's adopt reads the actor's owner-only fields after the message's own
  // synchronisation; home is read by later routers.
  cell->home.store(target, std::memory_order_release);
  stats_.migrations_out.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
  system_.send_adopt(cell, target, mode);
}

void actor_scheduler::hand_away_while_stuck() noexcept {
  if (waiting_ == 0 || system_.stopping()) return;
  // The targets, with the work queued in their wheels now (their published samples, plus what
  // we hand them here): the other executors not in a long runnable; if there are none, those in
  // a long runnable that ends when work waits (a fork-join delegate's loop piece: the hand-over
  // message makes it return to its loop within a service interval). Never one stuck for good.
  core::runtime_core& core = system_.core();
  const std::uint32_t count = core.executor_count();
  hand_off_targets_.clear();
  for (const bool stuck_too : {false, true}) {
    for (std::uint32_t i = 0; i < count; ++i) {
      const core::executor& other = core.executor_at(i);
      if (i == index_ || other.in_long_runnable() != stuck_too) continue;
      if (stuck_too && !other.ends_runnable_when_work_waits()) continue;
      const actor_scheduler* wheel = system_.find_scheduler(i);
      hand_off_targets_.push_back({i, wheel != nullptr ? wheel->queued_work_ns() : 0});
    }
    if (!hand_off_targets_.empty()) break;
  }
  if (hand_off_targets_.empty()) return;  // everyone else is stuck too: nowhere better to go
  // An actor may go if it may live elsewhere: not pinned, no I/O in flight in our reactor
  // (relaxed: a hint, as in maybe_migrate), its domain has a target. The least loaded target
  // takes it, as a woken actor: it has waited already.
  auto hand_away = [&](actor_cell* cell) {
    if (cell->pinned || cell->io_in_flight.load(std::memory_order_relaxed) != 0) return false;
    hand_off_target* best = nullptr;
    for (hand_off_target& t : hand_off_targets_) {
      if (!cell->domain.contains(core.executor_at(t.index).placement())) continue;
      if (best == nullptr || t.queued_ns < best->queued_ns) best = &t;
    }
    if (best == nullptr) return false;
    const std::uint64_t w = weight(cell);
    --waiting_;
    queued_work_ns_ -= w;
    best->queued_ns += w;
    cell->woken_in_place = false;
    stats_.stuck_hand_offs.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
    // From here on the cell is the target's: its adopt message carries it with a reference of
    // its own (send_adopt), and nothing below touches it again.
    hand_over(cell, best->index, adopt_mode::woken);
    return true;
  };
  // Every queue that holds waiting actors: kept in order, minus those handed away. When this
  // runs inside turn() (an actor's handler runs the long computation), the running actor is in
  // no queue, and turn() pops its next actor from these queues afresh after the run.
  auto sift = [&](actor_detail::actor_queue& queue, bool waiting_only_if_woken) {
    actor_detail::actor_queue kept;
    while (actor_cell* cell = queue.pop_front()) {
      const bool waiting = !waiting_only_if_woken || cell->woken_in_place;
      if (!waiting || !hand_away(cell)) kept.push_back(cell);
    }
    queue.append(kept);
  };
  sift(woken_, false);
  sift(batch_, false);
  for (segment& s : segments_) {
    sift(s.runnable, false);
    sift(s.timed_out, true);  // the idle ones stay: a wake finds them (and may move them)
  }
  publish_queued_work();
}

void actor_scheduler::adopt(actor_cell* cell, adopt_mode mode) noexcept {
  // The adopt message of an idle spawn from another thread can arrive after the actor was
  // woken here (wake homes it), and after it then halted or migrated: it is stale then.
  if (mode == adopt_mode::idle && (cell->ever_homed || cell->where == placement::halted)) return;
  add_homed(cell);
  if (mode == adopt_mode::idle) return;  // known here from now on; a wake schedules it
  if (mode != adopt_mode::spawned_runnable) {
    stats_.migrations_in.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
  }
  // Segment clocks differ between executors: its quantum counts from now on this wheel.
  cell->refilled_at_segment = segments_turned_;
  if (mode == adopt_mode::full_quantum) {
    cell->where = placement::runnable;
    segments_[current_].runnable.push_back(cell);  // N segments forward (seed)
  } else {
    cell->where = placement::woken;
    woken_.push_back(cell);
  }
  count_waiting(cell);
  ensure_turn_queued();
}

void actor_scheduler::halt(actor_cell* cell, exit_reason reason, bool notify) noexcept {
  system_.delist(cell);  // a snapshot no longer lists it (it stays alive until then)
  // Kept for watches placed from now on (actor_cell.hpp, "The exit reason"): written before
  // the state store below publishes Halted.
  cell->halt_reason = reason;
  // seq_cst: after this, senders' wake_if_receiving never schedules the actor again; and
  // whoever sees Halted sees halt_reason.
  cell->state.store(actor_state::halted, std::memory_order_seq_cst);
  // acq_rel: closes the mailbox (later pushes fail, invariant X) and takes what was queued.
  envelope* pending = cell->mailbox.exchange(actor_detail::closed_mailbox, std::memory_order_acq_rel);
  while (pending != nullptr) {
    envelope* next = pending->next;
    pending->destroy(pending);
    pending = next;
  }
  while (envelope* e = cell->private_head) {
    cell->private_head = e->next;
    e->destroy(e);
  }
  actor_detail::destroy_stash(*cell);  // invariant X: stashed envelopes too
  cell->where = placement::halted;
  cell->vtable->destroy_behaviour(*cell, reason);

  // Tell the watchers (A7); links are removed from the other side too. Only now, with the
  // behaviour gone: a watcher told "down" may count on its destructor having run.
  // seq_cst (both): pairs with add_watch and add_exit_callback (their links CAS and push, then
  // their load of watchers_final; see there).
  cell->watchers_final.store(true, std::memory_order_seq_cst);
  if (actor_detail::actor_links* links = cell->links.load(std::memory_order_seq_cst)) {
    std::vector<actor_detail::watch_entry> watchers;
    {
      std::lock_guard guard(links->lock);
      links->closed = true;
      watchers.swap(links->watchers);
    }
    for (const actor_detail::watch_entry& entry : watchers) {
      if (entry.callback != nullptr) {
        // A task's monitor: told even at shutdown (a plain thread may be waiting on it).
        entry.callback->deliver(entry.callback, reason);
        continue;
      }
      if (entry.monitor_id == 0) actor_detail::remove_watch(*entry.watcher, *cell, 0);
      if (notify) {
        const envelope_kind kind = entry.monitor_id == 0 ? envelope_kind::exit : envelope_kind::down;
        actor_detail::push_system_message(
            *entry.watcher,
            new actor_detail::notification_envelope(kind, cell->id, entry.monitor_id, reason));
      }
      entry.watcher->release();
    }
  }
  remove_homed(cell);
  stats_.halted.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
  cell->release();  // the system's reference
}

void actor_scheduler::finish(actor_cell* cell, exit_reason reason) noexcept {
  if (cell->handlers_in_flight == 0) [[likely]] {
    halt(cell, std::move(reason), true);
    return;
  }
  // Interleaved handlers in flight refer to the behaviour, their messages and the context: the
  // actor halts once they have unwound (actor_await.hpp, "Interleaving"). The first reason
  // stands; a kill overrides it (it is untrappable).
  if (!cell->halting) {
    cell->halting = true;
    cell->halt_reason = std::move(reason);
    actor_detail::cancel_handlers_in_flight(*cell);  // their steps come after this run
  } else if (reason.kind == exit_kind::killed) {
    cell->halt_reason = std::move(reason);
  }
  cell->handler_ended = true;  // every run of it settles here until it halts
  // It waits Receiving, in no queue: a message wakes it (the run settles, and waits again), and
  // so does the last handler's end (the gate's charge: wake_for_owner_work). No re-check of
  // the mailbox: it handles nothing more.
  cell->where = placement::idle;
  // seq_cst: as going Receiving in place_after_run (senders' CAS out of it schedule it).
  cell->state.store(actor_state::receiving, std::memory_order_seq_cst);
}

bool actor_scheduler::settle_handlers(actor_cell* cell) noexcept {
  cell->handler_ended = false;
  // A kill sent while it awaited: at once (once its handlers have unwound), not after the
  // messages taken before it, and before the task_cancelled its handler unwound with (not a
  // crash: the kill's doing). relaxed: kill() stored it before cancelling the handler; one it
  // misses is found when the mailbox is next taken.
  if (cell->kill_requested.load(std::memory_order_relaxed)) {
    cell->handler_crash = nullptr;
    finish(cell, exit_reason{exit_kind::killed, {}});
    return true;
  }
  if (cell->halting) {
    finish(cell, cell->halt_reason);  // halts now if its last handler has ended
    return true;
  }
  if (cell->handler_crash) {
    finish(cell, exit_reason{exit_kind::crashed, std::exchange(cell->handler_crash, nullptr)});
    return true;
  }
  if (cell->stop_requested) {
    finish(cell, std::move(cell->halt_reason));
    return true;
  }
  return false;
}

void actor_scheduler::adopt_orphan_for_shutdown(actor_cell* cell) noexcept {
  // No worker runs any more: the owner-only fields are ours. Not adopt(idle): that skips an
  // actor ever homed, as a migrating one was (it left its old home's list in hand_over).
  if (cell->homed || cell->where == placement::halted) return;
  add_homed(cell);
}

void actor_scheduler::halt_for_shutdown(actor_cell* cell) noexcept {
  if (cell->where == placement::halted) return;
  halt(cell, exit_reason{exit_kind::shutdown, {}}, false);
}

void actor_scheduler::collect_supervisors(std::vector<actor_cell*>& out) const {
  for (actor_cell* cell = homed_head_; cell != nullptr; cell = cell->homed_next) {
    if (cell->vtable->children_in_stop_order != nullptr) out.push_back(cell);
  }
}

void actor_scheduler::halt_all_for_shutdown() noexcept {
  while (actor_cell* cell = homed_head_) {
    halt(cell, exit_reason{exit_kind::shutdown, {}}, false);
  }
}

// --- actor_system ------------------------------------------------------------------------------

namespace {

void deliver_wake(core::executor_message& message, core::executor* receiver) noexcept {
  if (receiver == nullptr) return;  // shutdown: the actor is still in a homed list
  auto* cell = static_cast<actor_cell*>(message.payload[0]);
  cell->system->scheduler(receiver->index()).wake(cell);
}

void deliver_adopt(core::executor_message& message, core::executor* receiver) noexcept {
  auto* cell = static_cast<actor_cell*>(message.payload[0]);
  if (receiver == nullptr) {
    cell->system->add_orphan(cell);
    return;
  }
  const auto mode = adopt_mode(reinterpret_cast<std::uintptr_t>(message.payload[1]));
  cell->system->scheduler(receiver->index()).adopt(cell, mode);
  cell->release();  // the message's reference (send_adopt)
}

}  // namespace

actor_system::actor_system(core::runtime_core& core, actor_system_options options)
    : core_(core),
      options_(options),
      time_slice_ns_(options.time_slice.count() > 0 ? std::uint64_t(options.time_slice.count())
                                                    : core.service_interval_ns()),
      schedulers_(new std::atomic<actor_scheduler*>[core.options().max_executors]),
      scheduler_capacity_(core.options().max_executors),
      names_(std::make_unique<actor_detail::name_registry>()) {
  for (std::uint32_t i = 0; i < scheduler_capacity_; ++i) {
    schedulers_[i].store(nullptr, std::memory_order_relaxed);  // relaxed: not shared yet
  }
  register_sections();  // first: nothing else needs undoing if it throws
  // An executor in a long runnable hands its waiting actors to others at its service points
  // (actor_scheduler.hpp, "A stuck executor"). The system outlives the workers (the runtime
  // destroys it after they stopped), so the hook's context is alive whenever it is called.
  core.set_long_runnable_hook(
      [](void* context, std::uint32_t index) noexcept {
        if (actor_scheduler* s = static_cast<actor_system*>(context)->find_scheduler(index)) {
          s->hand_away_while_stuck();
        }
      },
      this);
  // Run times and slices are read on the coarse clock, to a quarter of a service interval
  // (actor_scheduler.hpp, first comment): the monitor ticks that finely while this system
  // exists. Last: nothing below may throw once the claim is held (the destructor releases it).
  core.claim_fine_time();
}

actor_system::~actor_system() {
  // No stall report asks about the wheels from here on (waits for one in progress).
  if (stall_describer_ != 0) {
    static_cast<detail::runtime_state*>(core_.layer_state())
        ->warnings.remove_runnable_describer(stall_describer_);
  }
  // No snapshot reads the directory from here on (waits for one in progress).
  actors_section_.reset();
  tree_section_.reset();
  core_.set_long_runnable_hook(nullptr, nullptr);  // the workers have stopped; for clarity
  shutdown();
  core_.release_fine_time();
  for (std::uint32_t i = 0; i < scheduler_capacity_; ++i) {
    delete schedulers_[i].load(std::memory_order_relaxed);  // relaxed: no other thread left
  }
}

actor_scheduler& actor_system::scheduler(std::uint32_t index) {
  if (actor_scheduler* existing = find_scheduler(index)) return *existing;
  auto* created = new actor_scheduler(*this, index);
  actor_scheduler* expected = nullptr;
  // acq_rel: release publishes the scheduler; acquire reads a competitor's on failure.
  if (schedulers_[index].compare_exchange_strong(expected, created, std::memory_order_acq_rel)) {
    return *created;
  }
  delete created;
  return *expected;
}

std::int32_t actor_system::current_index() const noexcept {
  core::executor* e = core::executor::current();
  return e != nullptr && &e->core() == &core_ ? std::int32_t(e->index()) : -1;
}

bool actor_system::stopping() const noexcept { return core_.stopping(); }

detail::task_host& actor_system::task_host() const noexcept {
  return *static_cast<detail::runtime_state*>(core_.layer_state());
}

void actor_system::route_wake(actor_cell* cell) noexcept {
  // Shutdown halts every actor on this thread after the workers stopped; an on_stop handler
  // that sends to an actor not halted yet needs no wake (that actor halts next, its queue too).
  // relaxed: set by the shutdown thread itself, which is the only one that matters here.
  if (shut_down_.load(std::memory_order_relaxed)) return;
  // acquire: pairs with the release store of a migration (the new home).
  const std::uint32_t home = cell->home.load(std::memory_order_acquire);
  if (current_index() == std::int32_t(home)) {
    scheduler(home).wake(cell);
    return;
  }
  core::executor::send_message(core_, home, &deliver_wake, cell, nullptr, nullptr, wake_message);
}

void actor_system::send_adopt(actor_cell* cell, std::uint32_t target, adopt_mode mode) noexcept {
  if (current_index() == std::int32_t(target)) {
    scheduler(target).adopt(cell, mode);
    return;
  }
  cell->add_reference();  // the message's: the actor may halt before the message arrives
  core::executor::send_message(core_, target, &deliver_adopt, cell,
                               reinterpret_cast<void*>(std::uintptr_t(mode)), nullptr,
                               adopt_message);
}

void actor_system::add_orphan(actor_cell* cell) noexcept {
  std::lock_guard guard(orphans_mutex_);
  orphans_.push_back(cell);
}

void actor_system::shutdown() noexcept {
  // relaxed: shutdown runs once, on one thread, after the workers stopped.
  if (shut_down_.exchange(true, std::memory_order_relaxed)) return;
  // Orphans first (step 1): an orphan's adopt message was discarded: adopt it into its home's
  // scheduler (unless it halted meanwhile), so that every live actor is in a homed list.
  std::vector<actor_cell*> orphans;
  {
    std::lock_guard guard(orphans_mutex_);
    orphans.swap(orphans_);
  }
  for (actor_cell* cell : orphans) {
    scheduler(cell->home.load(std::memory_order_relaxed)).adopt_orphan_for_shutdown(cell);
  }
  halt_supervision_trees();
  for (std::uint32_t i = 0; i < scheduler_capacity_; ++i) {
    // relaxed: the workers have stopped (runtime shutdown step 6); nothing races.
    if (actor_scheduler* s = schedulers_[i].load(std::memory_order_relaxed)) {
      s->halt_all_for_shutdown();
    }
  }
  for (actor_cell* cell : orphans) cell->release();  // the adopt messages' references
}

namespace {

// Halts `cell` after its supervised children, depth first (a child supervisor's children before
// it), each child after the one stopped before it: what a stopping supervisor does while
// workers run (supervisor.hpp), done here on the shutdown thread, synchronously.
void halt_tree(actor_system& system, actor_cell* cell) noexcept {
  if (cell->where == placement::halted) return;
  if (cell->vtable->children_in_stop_order != nullptr) {
    std::vector<actor_cell*> children;
    try {
      cell->vtable->children_in_stop_order(*cell, children);
    } catch (...) {
      children.clear();  // out of memory: the children halt in the plain pass after this
    }
    // The supervisor's handles keep the children's cells alive until it halts, after them.
    for (actor_cell* child : children) halt_tree(system, child);
  }
  system.scheduler(cell->home.load(std::memory_order_relaxed)).halt_for_shutdown(cell);
}

}  // namespace

void actor_system::halt_supervision_trees() noexcept {
  // The supervisors (every live actor is in a homed list now), and among them the top-level
  // ones: those no other supervisor runs. The newest tree halts first (reverse spawn order).
  std::vector<actor_cell*> supervisors;
  std::vector<actor_cell*> supervised;
  try {
    for (std::uint32_t i = 0; i < scheduler_capacity_; ++i) {
      // relaxed: the workers have stopped; nothing races.
      if (actor_scheduler* s = schedulers_[i].load(std::memory_order_relaxed)) {
        s->collect_supervisors(supervisors);
      }
    }
    for (actor_cell* supervisor : supervisors) {
      supervisor->vtable->children_in_stop_order(*supervisor, supervised);
    }
  } catch (...) {
    return;  // out of memory: every actor halts in the plain pass, in no particular order
  }
  std::sort(supervised.begin(), supervised.end());
  std::sort(supervisors.begin(), supervisors.end(),
            [](const actor_cell* a, const actor_cell* b) { return a->id > b->id; });
  for (actor_cell* supervisor : supervisors) {
    if (!std::binary_search(supervised.begin(), supervised.end(), supervisor)) {
      halt_tree(*this, supervisor);
    }
  }
}

void actor_system::set_supervisor_failure_hook(supervisor_failure_hook hook) {
  std::lock_guard guard(failure_hook_mutex_);
  failure_hook_ = std::move(hook);
}

void actor_system::report_supervisor_failure(const supervisor_failure& failure) noexcept {
  try {
    supervisor_failure_hook hook;
    {
      std::lock_guard guard(failure_hook_mutex_);
      hook = failure_hook_;  // a copy: the hook runs unlocked (it may set another)
    }
    if (hook) {
      hook(failure);
    } else {
      log_supervisor_failure(failure);
    }
  } catch (...) {
    // The report is best effort: the supervisor halts (escalates) whatever happens here.
  }
}

void actor_system::log_supervisor_failure(const supervisor_failure& failure) noexcept {
  std::fprintf(stderr, "spindle: supervisor %llu gave up (child '%s'): %s\n",
               static_cast<unsigned long long>(failure.supervisor), failure.child.c_str(),
               failure.description.c_str());
}

std::uint64_t actor_system::live_cells() noexcept {
  return live_cell_count.load(std::memory_order_relaxed);  // relaxed: statistics
}

namespace actor_detail {
void count_cell(int delta) noexcept {
  live_cell_count.fetch_add(std::uint64_t(std::int64_t(delta)), std::memory_order_relaxed);
}
}  // namespace actor_detail

}  // namespace spindle
