// Handlers that await: the wrapper task and the hand-back (design in actor_await.hpp).
#include "spindle/actor/actor_await.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <stop_token>
#include <string_view>
#include <utility>

#include "spindle/actor/actor_scheduler.hpp"
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

  // Step 3: the handler ended (its frame is gone). The cell is alive: our reference.
  void hand_back(std::exception_ptr crash) noexcept {
    destroy_message_(std::exchange(message_, nullptr));
    cell_->handler_crash = std::move(crash);
    cell_->awaiting_handler = false;
    cell_->handler_ended = true;
    cell_->where = placement::idle;
    // seq_cst: the awaiting actor's way out of Running, as a sender's winning CAS out of
    // Receiving (invariant W): nobody else moves it (senders see Running and only push).
    cell_->state.store(actor_state::runnable, std::memory_order_seq_cst);
    cell_->system->route_wake(cell_);  // orders the writes above before the owner's next run
  }

 private:
  actor_cell* cell_;
  envelope* message_;
  void (*destroy_message_)(envelope*) noexcept;
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

std::exception_ptr start_awaiting_handler(actor_cell& cell) noexcept {
  task<void> prepared(
      task<void>::handle_type::from_address(std::exchange(cell.awaiting_start, nullptr)));
  try {
    // relaxed: the owner's own field (only the owner stores it).
    std::stop_source* stop = cell.handler_stop.load(std::memory_order_relaxed);
    if (stop == nullptr) {
      stop = new std::stop_source();
      // seq_cst: Dekker with cancel_awaiting_handler (its kill_requested store, then its load
      // of this): either it sees the source and stops it, or the wrapper, which starts after
      // this store, sees its kill (kill_on_request).
      cell.handler_stop.store(stop, std::memory_order_seq_cst);
    }
    // Not spawn(body, token): a task cancelled before it starts never runs, and this one
    // must run to hand the actor back. The wrapper links the token to itself once running.
    spawn(std::move(prepared)).detach();
    return nullptr;
  } catch (...) {
    // Never started: destroying the wrapper (here, or in spawn) gives the envelope and the
    // reference back through its claim; the caller halts the actor.
    cell.awaiting_handler = false;
    return std::current_exception();
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
