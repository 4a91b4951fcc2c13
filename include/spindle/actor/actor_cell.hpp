// The type-erased actor: mailbox, scheduling state, references, links and monitors (A1, A2, A7,
// A8). The typed API is actor.hpp; the per-executor scheduling wheel is actor_scheduler.hpp;
// docs/design/actors.md has the whole design.
//
// Who takes part:
//   - senders (any thread): push envelopes onto `mailbox`; the sender that finds the actor
//     Receiving moves it to Runnable and routes one wake to its home executor;
//   - the *owner*: the scheduler of the actor's home executor. Only it takes the mailbox, runs
//     the behaviour, places the actor in its wheel, migrates it and halts it;
//   - watchers (linked and monitoring actors, and exit callbacks: a task's monitor, a
//     registered name's watch, registry.hpp), registered
//     in `links` under its lock. Links are a set: linking twice is one link (Erlang's rule).
//
// States (A2), the atomic `state`:
//   Receiving --sender's CAS (wins the wake)----------------> Runnable
//   Runnable  --owner takes it from a wheel queue-----------> Running
//   Running   --owner: messages left, or quantum used-------> Runnable (stays in the wheel)
//   Running   --owner: mailbox empty (store, then re-check)-> Receiving
//   Running   --owner: stop, crash, exit signal-------------> Halted (terminal)
//   any       --shutdown (no worker runs any more)----------> Halted
// Invariant W (one wake): an actor sits in at most one scheduler queue or wake message at a
// time. Only whoever moves it out of Receiving schedules it: a sender's CAS, or the owner's own
// CAS when its re-check after going Receiving finds a message.
// Invariant X (exactly once): an envelope pushed onto the mailbox is handled and destroyed by
// the owner, or destroyed by the owner when the actor halts (it closes the mailbox first by
// swapping in `closed_mailbox`); a sender that finds the mailbox closed destroys its envelope
// itself and reports `send_result::halted`. Nothing is handled twice, nothing leaks.
//
// Memory orders: a push is a CAS with release (publishes the envelope); the owner's take is an
// exchange with acquire. Going Receiving is a seq_cst store followed by a seq_cst load of the
// mailbox; a sender's push is followed by a seq_cst load of the state (CAS seq_cst): Dekker, so
// either the owner's re-check sees the envelope or the sender sees Receiving and wakes it.
//
// The exit reason outlives the actor: `halt_reason` (owner-only while the actor runs) is
// written by the owner for the last time before the state store that makes the actor Halted
// (seq_cst), and read by watchers only once they saw Halted, `watchers_final` or the links
// `closed` (both set after that store): a watch placed after the halt reports the real reason,
// for as long as a reference keeps the cell (issue 14, item 8). Reusing the field costs no cell
// size.
//
// Lifetime: `references` counts actor refs, one held by the actor system from spawn until the
// actor halted and left its home executor's lists, one per adopt message in flight (the actor
// may halt before its spawn's adopt message arrives), and one per watch entry naming it as the
// watcher. The behaviour object is destroyed when the actor halts; the cell's memory when the
// last reference goes.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stop_token>
#include <string>
#include <typeinfo>
#include <vector>

#include "spindle/core/topology.hpp"
#include "spindle/diagnostics/warnings.hpp"

namespace spindle {

class actor_system;

// Scheduling states, observable through actor_ref::state() (A2).
enum class actor_state : std::uint8_t { receiving, runnable, running, halted };
const char* to_string(actor_state state) noexcept;

// Why an actor halted (A7).
enum class exit_kind : std::uint8_t {
  normal,    // its behaviour called stop(), or a stop request was handled
  crashed,   // an exception escaped a handler (the exception is in `error`)
  killed,    // kill(): halted at its next turn, whatever it was doing
  shutdown,  // halted by its supervisor, or by the runtime shutting down
  linked,    // a linked actor halted abnormally and this one does not trap exits
  no_actor,  // (notifications only) not produced any more: a watch placed on an actor that has
             // halted already reports its real exit reason (kept for source compatibility)
};
const char* to_string(exit_kind kind) noexcept;

struct exit_reason {
  exit_kind kind = exit_kind::normal;
  std::exception_ptr error;  // set for crashed (and linked, when the origin crashed)
  bool is_abnormal() const noexcept { return kind != exit_kind::normal && kind != exit_kind::no_actor; }
  std::string describe() const;  // "crashed: <what()>", "normal", ...
};

// What send() did (A8).
enum class send_result : std::uint8_t {
  queued,        // in the mailbox; the actor will handle it
  mailbox_full,  // bounded mailbox at capacity; the message was not queued
  halted,        // the actor has halted; the message was dropped
  no_such_name,  // send_to(name): no actor is registered under that name (registry.hpp)
};

using actor_id = std::uint64_t;

namespace actor_detail {

struct actor_cell;

// One queued message. Typed envelopes (actor.hpp) derive from it.
enum class envelope_kind : std::uint8_t { user, start, stop, kill, down, exit };
struct envelope {
  envelope* next = nullptr;
  void (*destroy)(envelope*) noexcept;  // destroys and frees the envelope
  envelope_kind kind;
  explicit envelope(void (*destroyer)(envelope*) noexcept, envelope_kind k) noexcept
      : destroy(destroyer), kind(k) {}
};

// A down or exit notification about `source` (A7).
struct notification_envelope final : envelope {
  notification_envelope(envelope_kind k, actor_id who, std::uint64_t monitor, exit_reason why);
  static void destroy_self(envelope* e) noexcept;
  actor_id source;
  std::uint64_t monitor_id;  // 0 for exit signals
  exit_reason reason;
};

// Type-erased entry points of a behaviour (actor.hpp fills one per behaviour type).
struct actor_vtable {
  // Handles one envelope (user message or notification). May throw: a crash.
  void (*handle)(actor_cell& cell, envelope& message);
  // Destroys the behaviour object (it halted); `reason` is passed to its on_stop, if any.
  void (*destroy_behaviour)(actor_cell& cell, const exit_reason& reason) noexcept;
  // Frees the cell's memory (the last reference went).
  void (*free_cell)(actor_cell& cell) noexcept;
  bool traps_exits;  // the behaviour has on_exit: exit signals are delivered, not fatal
  const std::type_info* message_type;  // for actor_handle::as<M>()
  // The behaviour has on_stop_request: a stop request is delivered to it (handle(), kind stop)
  // and the actor halts when the behaviour says so (ctx.stop); kill stays untrappable.
  bool intercepts_stop;
  // Supervisors only (null otherwise): the children it runs, in the order they must stop.
  // Runtime shutdown halts them, depth first, before the supervisor (no worker runs then).
  void (*children_in_stop_order)(actor_cell& cell, std::vector<actor_cell*>& out);
  // The behaviour says `static constexpr bool interleaves = true;`: its awaiting handlers let
  // other messages in while they await (actor_await.hpp, "Interleaving").
  bool interleaves;
};

// What ctx.become installed (actor_become.hpp); typed by the actor's message type, destroyed
// with the behaviour.
struct become_state_base {
  virtual ~become_state_base() = default;
};

// Where the owner keeps the actor (owner-only).
enum class placement : std::uint8_t {
  idle,       // Receiving, in no queue
  woken,      // in the scheduler's woken queue (was idle, got a message)
  runnable,   // in a segment's runnable queue, or the batch being run
  timed_out,  // in a segment's idle timed-out set
  migrating,  // in an adopt message on its way to another executor
  awaiting,   // its handler awaits (actor_await.hpp): in no queue, its task owns the cell
  halted,
};

// Told once, when an actor halts, with its exit reason (a task's monitor, actor.hpp). The
// function owns the object from then on (it frees it); it must not block.
// Optional: `abandoned` says nobody awaits the notification any more (a task monitor whose
// receiver was dropped); such a callback is taken out of the watch list at a later
// add_exit_callback on the same actor and freed with `discard`, undelivered. So an actor that
// lives long and is monitored again and again (a task per request) keeps only the monitors
// someone still holds, not every one until it halts. Both run under the links' lock: they
// must only look at the object, and free it.
struct exit_callback {
  void (*deliver)(exit_callback* self, const exit_reason& reason) noexcept;
  bool (*abandoned)(const exit_callback* self) noexcept = nullptr;
  void (*discard)(exit_callback* self) noexcept = nullptr;
};

struct watch_entry {
  actor_cell* watcher;   // holds a reference; null for an exit callback
  std::uint64_t monitor_id;  // 0: a link
  exit_callback* callback = nullptr;  // owned until delivered
};

// Links and monitors of one actor; allocated on first use. `closed` once the actor halted:
// later link/monitor calls get a notification at once, with the actor's halt_reason.
struct actor_links {
  std::mutex lock;
  std::vector<watch_entry> watchers;  // who is told when this actor halts
  bool closed = false;
  // add_exit_callback sweeps abandoned callbacks out once the list is this long, then sets
  // it to twice what is left (at least the floor): amortised O(1) a callback, and at most
  // about twice the callbacks still held, plus the floor.
  std::size_t sweep_at = sweep_floor;
  static constexpr std::size_t sweep_floor = 32;
};

// The timers aimed at one actor (actor_timers.hpp); allocated on first use, freed with the cell.
struct timer_registry;
void destroy_timer_registry(timer_registry* registry) noexcept;

inline envelope* const closed_mailbox = reinterpret_cast<envelope*>(std::uintptr_t(1));

struct actor_cell {
  actor_cell(actor_system& owner_system, const actor_vtable& table, actor_id identity,
             std::uint32_t home_executor, std::uint32_t mailbox_capacity, std::uint32_t quantum,
             bool is_pinned, core::executor_domain allowed_executors) noexcept;

  // --- shared: any thread -------------------------------------------------------------------
  const actor_vtable* vtable;
  actor_system* system;
  actor_id id;
  std::atomic<std::uint32_t> references{1};  // the system's
  std::atomic<actor_state> state{actor_state::receiving};
  std::atomic<std::uint32_t> home;               // executor index; written by the owner
  std::atomic<envelope*> mailbox{nullptr};       // Treiber stack, newest first
  // Diagnostics: user messages pushed, counted by senders when `counts_pushes`
  // (diagnostics_options::exact_mailbox_lengths: a relaxed RMW next to the word the push's CAS
  // already owns; the owner's diagnostics fields are below, away from this line).
  std::atomic<std::uint64_t> messages_received{0};
  bool counts_pushes = false;  // written before publication, then constant
  std::atomic<std::uint32_t> queued{0};          // bounded mailboxes only: messages not taken
  const std::uint32_t capacity;                  // 0: unbounded
  std::atomic<std::uint32_t> io_in_flight{0};    // > 0: never migrated (A5)
  // Set by kill() before it queues the kill: an awaiting handler in progress is cancelled, and
  // an actor back from one halts at once instead of handling the messages it took before the
  // kill came (actor_await.hpp).
  std::atomic<bool> kill_requested{false};
  // Set (seq_cst) by the halt once the behaviour is destroyed, just before it loads `links` to
  // tell the watchers. A watch placed after it may be told at once (the halt may have found no
  // links); one placed before it is told by the halt. Not the Halted state: that is published
  // before the behaviour's destruction (senders need it), and a monitor that read Halted and
  // took its watch back was told "down" while the destructor still ran (attack C).
  std::atomic<bool> watchers_final{false};  // beside kill_requested: in its padding
  // What cancels its awaiting handlers' tasks (actor_await.hpp): made by the owner before its
  // first awaiting handler starts, freed with the cell. Stopped by kill() (a killed actor
  // never handles again, so a source stopped for good is what it needs).
  std::atomic<std::stop_source*> handler_stop{nullptr};
  std::atomic<actor_links*> links{nullptr};
  std::atomic<timer_registry*> timers{nullptr};  // send_after / send_interval (actor_timers.hpp)
  const bool pinned;
  const core::executor_domain domain;  // where it may be placed and migrate (spawn_options)

  // --- owner-only: the home executor's scheduler ------------------------------------------
  envelope* private_head = nullptr;  // taken from the mailbox, oldest first
  actor_cell* queue_next = nullptr;  // link in one wheel queue (FIFO)
  actor_cell* homed_previous = nullptr;  // links in the home scheduler's list of its actors
  actor_cell* homed_next = nullptr;
  // The quantum (A3) is reductions AND time (actor_scheduler.hpp): what is left of both is kept
  // while the actor is idle; both are refilled together (actor_scheduler::refill).
  std::int32_t reductions_left;
  std::int32_t reductions_at_start = 0;  // at the start of the current run
  const std::uint32_t quantum;
  std::uint64_t time_used_ns = 0;        // of the current quantum, on the coarse clock
  std::uint64_t refilled_at_segment = 0; // the home wheel's segment clock at the last refill
  // Moving average of its run time (coarse clock): its CPU demand per run, for migration.
  std::uint32_t cost_ns = 0;
  std::uint32_t runs_since_migration = 0;
  std::uint64_t migrated_at_ns = 0;  // coarse clock at its last move (owner-only, travels with it)
  placement where = placement::idle;
  bool homed = false;            // in its home scheduler's list of actors
  bool ever_homed = false;       // some scheduler homed it once (stale spawn adopts are ignored)
  bool woken_in_place = false;   // timed out, and woken since (counted in the wheel's load)
  bool stop_requested = false;   // handled after the current message
  // An awaiting handler (actor_await.hpp): set by the handler's start, which hands the
  // owner-only fields to the handler's task until it ends; the task's end hands them back
  // through a wake (the owner's next run sees `handler_ended` first, and a crash in
  // `handler_crash`).
  bool awaiting_handler = false;
  bool handler_ended = false;
  // Interleaving behaviours (actor_await.hpp, "Interleaving"): while `handlers_in_flight`
  // (below) is not 0 the actor never halts: a halt waits (`halting`, its reason in
  // halt_reason) for the handlers, cancelled, to unwind; `handler_ended` then asks the run's
  // attention (the wake of the last handler's end).
  bool halting = false;
  std::exception_ptr handler_crash;
  void* awaiting_start = nullptr;  // the wrapper task's frame, prepared by handle, started by the run
  // Mailbox growth (G4, diagnostics/warnings.hpp): the hysteresis of its backlog warning.
  diagnostics::warning_hub::mailbox_watch mailbox_watch;
  // Why it halts, when stop_requested; once Halted, why it halted: the owner writes it last
  // before the Halted store and never again, watchers read it after (see "The exit reason").
  exit_reason halt_reason;
  // Charged by the running handler beyond the one reduction per message (actor_context).
  std::uint32_t extra_charge = 0;
  // A become handler is installed (actor_become.hpp): the one test on every user message's
  // path, so here, beside the fields every run touches (the rest of become is at the end).
  bool become_active = false;

  // --- diagnostics (SPEC G1; actor_scheduler.hpp, "Diagnostics"): read by snapshots on any
  // thread, while the cell is in its system's directory ---------------------------------------
  std::string name;  // spawn_options::name: written before the actor is published, then constant
  // User messages taken out of the mailbox and handled (owner). The mailbox length is
  // messages_received - handled when pushes are counted, else taken - handled (a lower bound).
  std::atomic<std::uint64_t> messages_taken{0};
  std::atomic<std::uint64_t> messages_handled{0};
  std::atomic<std::uint64_t> reductions_used{0};       // owner, added at the end of each run
  std::atomic<std::uint32_t> mailbox_high_water{0};    // owner, sampled when it takes its mailbox
  std::atomic<std::uint32_t> stash_length{0};          // owner: envelopes in the stash
  std::atomic<actor_id> supervisor{0};                 // set by the supervisor that started it
  std::atomic<std::uint32_t> restarts{0};              // that child's starts before this one
  actor_cell* directory_previous = nullptr;  // links in the system's directory (its lock)
  actor_cell* directory_next = nullptr;
  bool listed = false;                       // under the directory lock

  // --- owner-only, off the message path (last: the fields every run touches keep the cache
  // lines they had, four; a ring of 1,000 actors touches a cold cell at every hop) -------------
  // Interleaving behaviours: handlers started and not yet ended (see `halting` above).
  std::uint32_t handlers_in_flight = 0;
  // The stash (actor_stash.hpp): user envelopes put aside by ctx.stash, oldest first, linked
  // through `next`; at most stash_capacity of them. Destroyed at halt (invariant X).
  std::uint32_t stash_capacity = 0;
  envelope* stash_head = nullptr;
  envelope* stash_tail = nullptr;
  // ctx.become's handlers (actor_become.hpp); null until the first become.
  become_state_base* become = nullptr;

  void add_reference() noexcept {
    references.fetch_add(1, std::memory_order_relaxed);  // relaxed: the caller already holds one
  }
  void release() noexcept;
};

// Process-wide count of live cells (tests check for leaks); called by the typed layer.
void count_cell(int delta) noexcept;

// Pushes `message` (ownership passes) and wakes the actor if it was Receiving.
send_result push_message(actor_cell& cell, envelope* message) noexcept;
// Pushes a notification or control envelope, bypassing the capacity of bounded mailboxes.
void push_system_message(actor_cell& cell, envelope* message) noexcept;
// The owner's thread, outside a run (an interleaved handler's step, actor_await.hpp): the actor
// has work that is not in its mailbox (unstashed messages, a handler's outcome); moves it out
// of Receiving and wakes it, as a sender would (invariant W); nothing if it is not Receiving
// (it is queued, or running, and its run sees the work).
void wake_for_owner_work(actor_cell& cell) noexcept;
// Registers `watcher` to be told when `target` halts; if it already has, the watcher gets the
// notification (the target's final reason) at once. monitor_id 0 means a link (both
// directions; a link that exists already is left as it is: links are a set).
void add_watch(actor_cell& target, actor_cell& watcher, std::uint64_t monitor_id);
void remove_watch(actor_cell& target, actor_cell& watcher, std::uint64_t monitor_id) noexcept;
// Registers `callback` (ownership passes) to be told when `target` halts, at once if it has.
// Told also when the runtime's shutdown halts the target (actors are not told then).
void add_exit_callback(actor_cell& target, exit_callback* callback);
// Takes `callback` back (ownership returns to the caller) if it is still waiting in `target`'s
// watch list; false if it is not there (the halt has taken it and delivers it, or it was never
// added).
bool remove_exit_callback(actor_cell& target, exit_callback* callback) noexcept;

}  // namespace actor_detail
}  // namespace spindle
