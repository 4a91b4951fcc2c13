// Handlers that await: the wrapper task and the hand-back (design in actor_await.hpp).
#include "spindle/actor/actor_await.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <stop_token>
#include <string_view>
#include <utility>

#include "spindle/actor/actor_scheduler.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"

namespace spindle::actor_detail {

namespace {

// The run's destroy of an envelope the wrapper has taken: nothing (the wrapper destroys it).
void left_to_the_handler(envelope*) noexcept {}

// The wrapper's claim on the envelope and on one cell reference. A parameter of the wrapper, so
// it lives in the wrapper's frame from its creation: whether the wrapper ends, is abandoned by a
// shutdown or is never started (its spawn failed), destroying the frame gives both back.
class awaiting_claim {
 public:
  awaiting_claim(actor_cell* cell, envelope* message,
                 void (*destroy_message)(envelope*) noexcept) noexcept
      : cell_(cell), message_(message), destroy_message_(destroy_message) {}
  awaiting_claim(awaiting_claim&& other) noexcept
      : cell_(std::exchange(other.cell_, nullptr)),
        message_(std::exchange(other.message_, nullptr)),
        destroy_message_(other.destroy_message_) {}
  awaiting_claim(const awaiting_claim&) = delete;
  awaiting_claim& operator=(const awaiting_claim&) = delete;
  awaiting_claim& operator=(awaiting_claim&&) = delete;
  ~awaiting_claim() {
    // Never handed back (abandoned, or never started): nobody is woken; the actor, still in
    // its home's list, halts in shutdown step 6 (or at once: start_awaiting_handler's caller).
    if (message_ != nullptr) destroy_message_(message_);
    if (cell_ != nullptr) cell_->release();
  }

  actor_cell& cell() const noexcept { return *cell_; }

  // Step 3: the handler ended (its frame is gone). The cell is alive: our reference. On the
  // home executor (the gate), as every step of the handler.
  void hand_back(std::exception_ptr crash) noexcept {
    destroy_message_(std::exchange(message_, nullptr));
    if (cell_->vtable->interleaves) {
      end_interleaved(std::move(crash));
      return;
    }
    cell_->handler_crash = std::move(crash);
    cell_->awaiting_handler = false;
    cell_->handler_ended = true;
    cell_->where = placement::idle;
    // seq_cst: the awaiting actor's way out of Running, as a sender's winning CAS out of
    // Receiving (invariant W): nobody else moves it (senders see Running and only push).
    cell_->state.store(actor_state::runnable, std::memory_order_seq_cst);
    cell_->system->route_wake(cell_);  // this thread is its home's: queued in its wheel at once
  }

 private:
  // An interleaved handler's end (header, "Interleaving"): the owner-only fields are this
  // step's (the home thread: a step between runs, where the actor may be in any place, or the
  // first step, inside the run that took the message, which checks the outcome after it).
  void end_interleaved(std::exception_ptr crash) noexcept {
    actor_cell& cell = *cell_;
    --cell.handlers_in_flight;
    cell.io_in_flight.fetch_sub(1, std::memory_order_relaxed);  // relaxed: owner-read hint
    // The first crash decides, unless the actor is halting already (then the reason stands and
    // the handlers' task_cancelled is their cancellation, not news).
    if (crash && !cell.halting && !cell.handler_crash) cell.handler_crash = std::move(crash);
    if (cell.handler_crash || (cell.halting && cell.handlers_in_flight == 0)) {
      cell.handler_ended = true;  // the run's attention; the gate wakes it if it is Receiving
    }
  }

  actor_cell* cell_;
  envelope* message_;
  void (*destroy_message_)(envelope*) noexcept;
};

std::uint64_t elapsed_ns(std::uint64_t from, std::uint64_t to) noexcept {
  return to > from ? to - from : 0;  // 0 if the coarse clock seems to have gone back
}

// A step of a handler has ended (header, "Time"): its time and its charge count against the
// actor's quantum. The home thread, no run of the actor in progress; the cell is alive (the
// system's reference: only this thread halts it while workers run, and not before this returns).
void charge_step(actor_cell& cell, std::uint64_t ran_ns) noexcept {
  cell.time_used_ns += ran_ns;
  if (cell.extra_charge != 0) {
    cell.reductions_left -= std::int32_t(cell.extra_charge);
    // relaxed: single writer (the owner's fields are this step's), read by snapshots.
    cell.reductions_used.store(cell.reductions_used.load(std::memory_order_relaxed) +
                                   cell.extra_charge,
                               std::memory_order_relaxed);
    cell.extra_charge = 0;
  }
  if (cell.time_used_ns >= cell.system->time_slice_ns() && cell.reductions_left > 0) {
    cell.reductions_left = 0;  // spent: it waits a turn at its next run (actor_scheduler.hpp)
  }
  if (!cell.vtable->interleaves) return;  // the hand-back wakes it (or it still awaits)
  if (cell.stop_requested && !cell.halting) cell.handler_ended = true;
  if (cell.handler_ended || cell.private_head != nullptr) wake_for_owner_work(cell);
}

// The handler's spawned task (header, "Where a handler runs"): the wrapper coroutine as the
// root of a spawned task, whose runnable entry is the gate. The task layer's own entry (what
// any spawned task runs) is kept to run a step.
class handler_task final : public detail::spawned_task_base {
 public:
  // Occupies a task slot; the handle's reference is dropped (nobody joins it). Throws bad_alloc
  // (the wrapper's frame, and so its claim, destroyed).
  static handler_task* create(detail::task_host& host, actor_cell& cell, task<void> wrapper) {
    void* memory = core::allocate_frame(sizeof(handler_task));
    auto* created = ::new (memory) handler_task(host, cell, std::move(wrapper));
    try {
      created->enter_table();
    } catch (...) {
      destroy_body(created);
      destroy_self(created);
      throw;
    }
    created->release();
    return created;
  }
  // Its first step, now, on the calling thread (the owner's run: interleaving).
  void run_first_step() noexcept { task_entry_(this); }

 private:
  handler_task(detail::task_host& host, actor_cell& cell, task<void> wrapper) noexcept
      : spawned_task_base(host, wrapper.handle(), &destroy_self, &destroy_body),
        cell_(&cell),
        task_entry_(vtable->run),
        body_(std::move(wrapper)) {
    body_.handle().promise().set_root(this);
    static const core::runnable_vtable gated = {&handler_task::gate,
                                                &spawned_task_base::drop_entry};
    vtable = &gated;
  }
  ~handler_task() = default;

  static void gate(core::runnable* self) noexcept {
    auto* task = static_cast<handler_task*>(self);
    actor_cell& cell = *task->cell_;  // alive: the wrapper's claim holds a reference
    actor_system& system = *cell.system;
    // acquire: pairs with a migration's release (none happens while a handler is in flight:
    // the actor is awaiting, or counted in io_in_flight).
    const std::uint32_t home = cell.home.load(std::memory_order_acquire);
    if (system.current_index() != std::int32_t(home)) {
      system.core().schedule_on(home, task);  // home: its inbox (dropped at shutdown: abandoned)
      return;
    }
    // relaxed: the owner's own transition (senders only CAS it out of Receiving). Running, for
    // an interleaving actor, means its run is on this thread's stack (a runnable run inside a
    // run; nothing does that today): the step waits for the run's end.
    if (cell.vtable->interleaves &&
        cell.state.load(std::memory_order_relaxed) == actor_state::running) [[unlikely]] {
      task->host().schedule(task, core::schedule_hint::yield);
      return;
    }
    core::runtime_core& core = system.core();
    const std::uint64_t started = core.coarse_now_ns();
    task->task_entry_(task);  // `task` may be gone from here on
    charge_step(cell, elapsed_ns(started, core.coarse_now_ns()));
  }
  static void destroy_body(spawned_task_base* self) noexcept {
    static_cast<handler_task*>(self)->body_ = task<void>();
  }
  static void destroy_self(spawned_task_base* self) noexcept {
    auto* typed = static_cast<handler_task*>(self);
    typed->~handler_task();
    core::deallocate_frame(typed);
  }

  actor_cell* const cell_;
  void (*const task_entry_)(core::runnable*) noexcept;
  task<void> body_;
};

// Cancels the running wrapper's task (a kill: cancel_awaiting_handler). The task is alive for
// every call: the callback is a local of its frame, and std::stop_callback's destructor waits
// for a call in progress on another thread.
struct cancel_task {
  detail::spawned_task_base* task;
  void operator()() const noexcept { task->request_cancel(); }
};

// Links the cell's handler_stop to the running task; an already stopped source, or a kill the
// source was made too late to see, cancels it at once (its next await throws task_cancelled).
void kill_on_request(actor_cell& cell, std::optional<std::stop_callback<cancel_task>>& link) {
  detail::spawned_task_base* self = detail::spawned_task_base::current();
  // seq_cst (both): the pairing in start_awaiting_handler / cancel_awaiting_handler.
  if (std::stop_source* stop = cell.handler_stop.load(std::memory_order_seq_cst)) {
    link.emplace(stop->get_token(), cancel_task{self});
  }
  if (cell.kill_requested.load(std::memory_order_seq_cst)) self->request_cancel();
}

// Names the running wrapper "actor#12 handler" where tasks are recorded, so that a snapshot or
// a warning about it says whose handler it is (the snapshot's actors section maps the id to a
// registered name). A few nanoseconds a message: no lookup, no allocation.
void name_for_snapshots(const actor_cell& cell) noexcept {
  detail::spawned_task_base* self = detail::spawned_task_base::current();
  if (self == nullptr || !self->is_recorded()) return;
  char name[40] = "actor#";
  char* end = std::to_chars(name + 6, name + sizeof name - 8, cell.id).ptr;
  constexpr std::string_view suffix = " handler";
  end = std::copy(suffix.begin(), suffix.end(), end);
  self->set_name(std::string_view(name, std::size_t(end - name)));
}

// Parameters are destroyed in reverse order: the handler's frame (which may refer to the
// message) before the claim that destroys the envelope.
task<void> run_awaiting_handler(awaiting_claim claim, task<void> handler) {
  std::exception_ptr crash;
  {
    std::optional<std::stop_callback<cancel_task>> on_kill;
    kill_on_request(claim.cell(), on_kill);
    name_for_snapshots(claim.cell());
    task<void> body = std::move(handler);  // a local: gone before hand_back
    try {
      co_await std::move(body);
    } catch (...) {
      crash = std::current_exception();
    }
  }
  claim.hand_back(std::move(crash));
}

}  // namespace

void prepare_awaiting_handler(actor_cell& cell, envelope& message, task<void> handler) {
  cell.add_reference();  // the claim's
  awaiting_claim claim(&cell, &message, message.destroy);
  // From here the claim destroys the envelope (whatever throws below), not the run.
  message.destroy = &left_to_the_handler;
  // Kept as the wrapper's frame address (no holder to allocate per message); only
  // start_awaiting_handler takes it back, in this same run.
  cell.awaiting_start =
      run_awaiting_handler(std::move(claim), std::move(handler)).release().address();
  cell.awaiting_handler = true;
}

namespace {

// The prepared wrapper as a handler task of the calling worker's runtime, with the cell's
// handler_stop made first. Throws runtime_stopped or bad_alloc; the wrapper is then destroyed
// (its claim gives the envelope and the reference back).
handler_task* make_handler_task(actor_cell& cell) {
  task<void> prepared(
      task<void>::handle_type::from_address(std::exchange(cell.awaiting_start, nullptr)));
  detail::task_host* host = detail::current_task_host();  // the run's worker: the runtime
  if (host == nullptr) throw runtime_stopped();
  detail::host_entry entry(*host);
  if (entry.refused() || host->stopping()) throw runtime_stopped();
  // relaxed: the owner's own field (only the owner stores it).
  std::stop_source* stop = cell.handler_stop.load(std::memory_order_relaxed);
  if (stop == nullptr) {
    stop = new std::stop_source();
    // seq_cst: Dekker with cancel_awaiting_handler (its kill_requested store, then its load
    // of this): either it sees the source and stops it, or the wrapper, which starts after
    // this store, sees its kill (kill_on_request).
    cell.handler_stop.store(stop, std::memory_order_seq_cst);
  }
  // Not a task spawned with the source's token: a task cancelled before it starts never runs,
  // and this one must run to hand the actor back. The wrapper links the token once running.
  return handler_task::create(*host, cell, std::move(prepared));
}

}  // namespace

std::exception_ptr start_awaiting_handler(actor_cell& cell) noexcept {
  try {
    handler_task* started = make_handler_task(cell);
    started->host().schedule(started, core::schedule_hint::spawn);  // this executor's queue
    return nullptr;
  } catch (...) {
    // Never started: the wrapper was destroyed with what its claim held; the caller halts the
    // actor.
    cell.awaiting_handler = false;
    return std::current_exception();
  }
}

std::exception_ptr start_interleaved_handler(actor_cell& cell) noexcept {
  cell.awaiting_handler = false;
  handler_task* started;
  try {
    started = make_handler_task(cell);
  } catch (...) {
    return std::current_exception();
  }
  ++cell.handlers_in_flight;
  cell.io_in_flight.fetch_add(1, std::memory_order_relaxed);  // relaxed: owner-read hint
  started->run_first_step();  // may end it (counted out, its outcome noted)
  return nullptr;
}

void cancel_handlers_in_flight(actor_cell& cell) noexcept {
  // relaxed: the owner's own field. The source exists: a handler in flight made it. Stopped for
  // good: the actor is halting, it starts no handler again.
  if (std::stop_source* stop = cell.handler_stop.load(std::memory_order_relaxed)) {
    stop->request_stop();
  }
}

void cancel_awaiting_handler(actor_cell& cell) noexcept {
  // seq_cst: see start_awaiting_handler (Dekker on kill_requested / handler_stop).
  cell.kill_requested.store(true, std::memory_order_seq_cst);
  // The caller holds a reference: the source, freed with the cell, is alive. Stopping it
  // cancels the handler in progress, if any; a later one starts cancelled (the check above).
  if (std::stop_source* stop = cell.handler_stop.load(std::memory_order_seq_cst)) {
    stop->request_stop();
  }
}

}  // namespace spindle::actor_detail
