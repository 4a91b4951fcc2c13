// Actors (A1-A8): typed mailboxes, references, ask, links and monitors.
//
//   struct counter {
//     using message_type = std::variant<add, get>;
//     int total = 0;
//     void receive(message_type& m, spindle::actor_context<message_type>& ctx) { ... }
//     // optional: on_start(ctx), on_stop(const exit_reason&), on_down(down_message, ctx),
//     //           on_exit(exit_message, ctx) (having it means the actor traps exit signals),
//     //           on_stop_request(const exit_reason&, ctx) (having it means a stop request is
//     //           the behaviour's to carry out: the actor halts when it calls ctx.stop; kill()
//     //           still halts it at once. A supervisor stops its children first this way)
//   };
//   auto ref = spindle::spawn_actor<counter>(rt);                  // any thread
//   ref.send(add{5});                                              // never blocks
//   int n = co_await ref.ask<int>([](spindle::reply_to<int> r) { return get{std::move(r)}; });
//   auto echo = spindle::spawn_actor<int>(rt, [](int& v, spindle::actor_context<int>&) { ... });
//
// A handler runs on the actor's home executor, one message at a time, never concurrently with
// itself. `receive` may be a coroutine returning task<void> (actor_await.hpp): the actor then
// handles nothing else until it ends, unless the behaviour says `static constexpr bool
// interleaves = true;` (its other messages are handled while a handler awaits, one step at a
// time). A handler may put its message aside (ctx.stash, ctx.unstash_all: actor_stash.hpp)
// and switch the handler of the next messages (ctx.become, ctx.unbecome: actor_become.hpp).
// Handling a message costs one reduction, plus what the handler charges (ctx.charge);
// an actor runs at most a quantum of reductions per turn of its executor's wheel
// (actor_scheduler.hpp). An exception escaping a handler crashes the actor (exit_kind::crashed):
// its watchers are told (links, monitors; a supervisor is a watcher).
//
// Placement: spawned from a worker of the runtime, an actor starts on that worker's executor
// (messages between actors that spawned each other stay local); from any other thread, on the
// less loaded of two random executors; spawn_options::executor picks one, and
// spawn_options::domain restricts both the start and later moves to the executors on one NUMA
// node or one core kind. Actors move between executors when that balances load (A5), unless
// pinned or waiting for I/O (io_guard).
//
// Watching (A7): an actor links or monitors from its handlers (actor_context); anything else (a
// plain task, a thread) awaits an actor's exit with monitor_actor(ref), a oneshot receiver of
// its exit_reason (`co_await`, or blocking_receive() on a plain thread). A watch placed after
// the actor halted reports its real exit reason at once. Links are a set: linking twice is one
// link (one exit notification), and one unlink removes it. ctx.spawn_link<B>(...) and
// ctx.spawn_monitor<B>(...) spawn a child already linked / monitored, before it can run (no
// crash of it goes unseen, not even in on_start). Registered names: registry.hpp.
//
// Bounded mailboxes (A8): spawn_options::mailbox_capacity > 0 bounds the user messages queued
// and not yet handled; send() on a full mailbox returns send_result::mailbox_full and drops the
// message (the sender keeps its executor; retrying later, or backing off, is its choice).
// Notifications and stop/kill requests are never refused.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "spindle/actor/actor_await.hpp"
#include "spindle/actor/actor_become.hpp"
#include "spindle/actor/actor_cell.hpp"
#include "spindle/actor/actor_scheduler.hpp"
#include "spindle/actor/actor_stash.hpp"
#include "spindle/core/errors.hpp"
#include "spindle/core/frame_allocator.hpp"
#include "spindle/sync/oneshot.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

struct down_message {
  actor_id source;
  std::uint64_t monitor_id;
  exit_reason reason;
};
struct exit_message {
  actor_id source;
  exit_reason reason;
};

struct spawn_options {
  std::optional<std::uint32_t> executor;  // home executor; see "Placement" above
  bool pinned = false;                    // never migrated
  // The executors it may live on: spawned on one of them, migrated only among them (a NUMA
  // node or a core kind, topology.hpp). Any by default.
  core::executor_domain domain{};
  std::uint32_t mailbox_capacity = 0;     // 0: unbounded
  std::uint32_t quantum = 0;              // reductions per turn; 0: the system's default
  // The most messages ctx.stash holds (actor_stash.hpp); one more throws stash_overflow.
  std::uint32_t stash_capacity = actor_detail::default_stash_capacity;
  // Its name in diagnostics (snapshots, the live view); a supervisor names its children after
  // their specs when this is empty.
  std::string name{};
  // Set by a supervisor in the options it passes to a child's factory (diagnostics: the
  // supervision tree): the supervisor's id, and how many times that child was started before.
  actor_id supervisor = 0;
  std::uint32_t restarts = 0;
};

template <class M>
class actor_ref;
class actor_timer;           // actor_timers.hpp
struct call_options;         // call.hpp
template <class Req>
struct call_message;         // call.hpp

// An untyped reference to an actor: identity, state, stop/kill, links and monitors.
class actor_handle {
 public:
  actor_handle() noexcept = default;
  actor_handle(const actor_handle& other) noexcept : cell_(other.cell_) {
    if (cell_ != nullptr) cell_->add_reference();
  }
  actor_handle(actor_handle&& other) noexcept : cell_(std::exchange(other.cell_, nullptr)) {}
  actor_handle& operator=(actor_handle other) noexcept {
    std::swap(cell_, other.cell_);
    return *this;
  }
  ~actor_handle() {
    if (cell_ != nullptr) cell_->release();
  }

  // Whether it refers to an actor. Every other member throws usage_error on an empty handle
  // (default-constructed or moved from).
  explicit operator bool() const noexcept { return cell_ != nullptr; }
  actor_id id() const { return target().id; }
  // A2: Receiving / Runnable / Running / Halted, as of now.
  actor_state state() const {
    return target().state.load(std::memory_order_acquire);  // acquire: a snapshot for observers
  }
  // The executor the actor lives on now (it may migrate).
  std::uint32_t home_executor() const {
    return target().home.load(std::memory_order_relaxed);  // relaxed: a snapshot
  }
  // Asks the actor to halt after the messages already queued (exit reason `reason`).
  void stop(exit_kind reason = exit_kind::normal) const {
    actor_detail::actor_cell& cell = target();  // first: nothing is allocated for an empty one
    actor_detail::push_system_message(
        cell, new actor_detail::notification_envelope(actor_detail::envelope_kind::stop, 0, 0,
                                                        exit_reason{reason, {}}));
  }
  // Halts the actor at its next run, whatever is queued (untrappable).
  void kill() const {
    actor_detail::actor_cell& cell = target();  // first: nothing is allocated for an empty one
    actor_detail::cancel_awaiting_handler(cell);  // first: a handler may never end otherwise
    actor_detail::push_system_message(
        cell, new actor_detail::notification_envelope(actor_detail::envelope_kind::kill, 0, 0,
                                                        exit_reason{exit_kind::killed, {}}));
  }
  friend bool operator==(const actor_handle& a, const actor_handle& b) noexcept {
    return a.cell_ == b.cell_;
  }

  // The typed reference to this actor, if its message type is M (usage_error otherwise): for
  // handles that come untyped, e.g. from a supervisor.
  template <class M>
  actor_ref<M> as() const;

  actor_detail::actor_cell* cell() const noexcept { return cell_; }
  // Takes over one reference to `cell`.
  static actor_handle adopt(actor_detail::actor_cell* cell) noexcept {
    actor_handle h;
    h.cell_ = cell;
    return h;
  }

 protected:
  actor_detail::actor_cell& target() const {
    if (cell_ == nullptr) throw usage_error("spindle: an empty actor reference was used");
    return *cell_;
  }
  actor_detail::actor_cell* cell_ = nullptr;
};

template <class R>
class reply_to {
 public:
  explicit reply_to(oneshot_sender<R> sender) noexcept : sender_(std::move(sender)) {}
  void send(R value) { sender_.send(std::move(value)); }
  void operator()(R value) { send(std::move(value)); }

 private:
  oneshot_sender<R> sender_;
};

// Raised by ask() when the actor refused the question (halted, or its mailbox was full).
class actor_unavailable : public std::runtime_error {
 public:
  explicit actor_unavailable(send_result why)
      : std::runtime_error(why == send_result::halted         ? "spindle: the actor has halted"
                           : why == send_result::no_such_name ? "spindle: no actor has that name"
                                                              : "spindle: the actor's mailbox is full"),
        reason(why) {}
  send_result reason;
};

namespace actor_detail {

// Not final: a periodic timer's tick (actor_timers.hpp) is a user envelope that also says when
// it is gone (its own destroy function, set after construction).
template <class M>
struct user_envelope : envelope {
  template <class... A>
  explicit user_envelope(A&&... args)
      : envelope(&user_envelope::destroy_self, envelope_kind::user), message(std::forward<A>(args)...) {}
  static void destroy_self(envelope* e) noexcept {
    auto* self = static_cast<user_envelope*>(e);
    self->~user_envelope();
    core::deallocate_frame(self);
  }
  M message;
};

template <class M, class... A>
envelope* make_user_envelope(A&&... args) {
  void* memory = core::allocate_frame(sizeof(user_envelope<M>));
  try {
    return ::new (memory) user_envelope<M>(std::forward<A>(args)...);
  } catch (...) {
    core::deallocate_frame(memory);
    throw;
  }
}

struct start_envelope final : envelope {
  start_envelope() noexcept : envelope(&start_envelope::destroy_self, envelope_kind::start) {}
  static void destroy_self(envelope* e) noexcept { delete static_cast<start_envelope*>(e); }
};

}  // namespace actor_detail

// A typed reference: what send and ask accept is M.
template <class M>
class actor_ref : public actor_handle {
 public:
  using message_type = M;
  actor_ref() noexcept = default;
  static actor_ref adopt(actor_detail::actor_cell* cell) noexcept {
    actor_ref r;
    r.cell_ = cell;
    return r;
  }

  // Queues the message; never blocks. See send_result. usage_error on an empty reference.
  send_result send(M message) const {
    actor_detail::actor_cell& cell = target();  // first: nothing is allocated for an empty one
    return actor_detail::push_message(cell,
                                      actor_detail::make_user_envelope<M>(std::move(message)));
  }
  template <class... A>
    requires std::constructible_from<M, A...>
  send_result emplace(A&&... args) const {
    actor_detail::actor_cell& cell = target();  // first: nothing is allocated for an empty one
    return actor_detail::push_message(cell,
                                      actor_detail::make_user_envelope<M>(std::forward<A>(args)...));
  }

  // Typed request/response (call.hpp): Req declares `using reply = R;` and M accepts a
  // call_message<Req>. Sends at once; co_await the result (or blocking_receive() it on a plain
  // thread) for the R. Throws actor_unavailable if it could not be queued; the await throws
  // channel_closed if the actor dropped the reply unanswered. With options: a deadline or a
  // timeout, past which the await throws timeout_error (awaited in a task).
  template <class Req>
  auto call(Req request) const;
  template <class Req>
  auto call(Req request, const call_options& options) const;
  // A one-way send of anything M is constructible from (usage_error on an empty reference).
  template <class T>
    requires std::constructible_from<M, T&&>
  send_result cast(T&& message) const {
    return send(M(std::forward<T>(message)));
  }

  // Request/response: `make_message(reply_to<R>)` builds the question; the task completes
  // with the reply. Throws actor_unavailable if it could not be queued, and channel_closed if
  // the actor dropped the reply_to without answering (it halted, or ignored it). The task holds
  // its own reference to the actor: it may outlive this one (an ask on a temporary is fine).
  // usage_error at once on an empty reference.
  template <class R, class F>
    requires std::invocable<F&, reply_to<R>>
  task<R> ask(F make_message) const {
    (void)target();
    return ask_with<R>(*this, std::move(make_message));
  }

 private:
  // A coroutine's parameters live in its frame: the copy of the reference lives as long as the
  // question (a member coroutine would keep only `this`).
  template <class R, class F>
  static task<R> ask_with(actor_ref self, F make_message) {
    auto [sender, receiver] = oneshot<R>();
    const send_result sent = self.send(M(make_message(reply_to<R>(std::move(sender)))));
    if (sent != send_result::queued) throw actor_unavailable(sent);
    receiver.describe_wait_as({wait_kind::ask, self.id()});  // "ask actor#N" in snapshots
    co_return co_await std::move(receiver);
  }
};

template <class M>
actor_ref<M> actor_handle::as() const {
  if (cell_ == nullptr) return actor_ref<M>{};
  if (*cell_->vtable->message_type != typeid(M)) {
    throw usage_error("spindle: actor_handle::as<M>() with the wrong message type");
  }
  cell_->add_reference();
  return actor_ref<M>::adopt(cell_);
}

class actor_system;

namespace actor_detail {
template <class... A>
inline constexpr bool starts_with_options = false;
template <class First, class... Rest>
inline constexpr bool starts_with_options<First, Rest...> =
    std::same_as<std::remove_cvref_t<First>, spawn_options>;

template <class B, class Prepare, class... A>
actor_ref<typename B::message_type> spawn_prepared(actor_system& system,
                                                   const spawn_options& options, Prepare&& prepare,
                                                   A&&... args);

// Places the watch of `watcher` on the unpublished `child` (spawn_link, spawn_monitor); undoes
// its half-made watch if it throws (out of memory).
inline void watch_unpublished(actor_cell& child, actor_cell& watcher, std::uint64_t monitor_id) {
  try {
    add_watch(child, watcher, monitor_id);
  } catch (...) {
    remove_watch(child, watcher, monitor_id);
    throw;
  }
}
}  // namespace actor_detail

// What actor_context::spawn_monitor returns: `auto [child, monitor_id] = ctx.spawn_monitor<B>()`.
template <class M>
struct spawned_monitored {
  actor_ref<M> ref;
  std::uint64_t monitor_id = 0;
};

// What a handler sees of its actor.
template <class M>
class actor_context {
 public:
  explicit actor_context(actor_detail::actor_cell& cell) noexcept : cell_(cell) {}
  actor_ref<M> self() const noexcept {
    cell_.add_reference();
    return actor_ref<M>::adopt(&cell_);
  }
  actor_id id() const noexcept { return cell_.id; }
  // Charges reductions beyond the one the message costs (A3).
  void charge(std::uint32_t reductions) noexcept { cell_.extra_charge += reductions; }
  std::int32_t reductions_left() const noexcept { return cell_.reductions_left; }
  // Halts normally once this handler returns.
  void stop(exit_kind reason = exit_kind::normal) noexcept {
    if (cell_.halting) return;  // an interleaving actor halting already: its reason stands
    cell_.stop_requested = true;
    cell_.halt_reason = exit_reason{reason, {}};
  }
  // The stash (actor_stash.hpp): puts `message` (usually the one being handled, given back)
  // aside, after what is stashed already. Throws stash_overflow when the stash holds
  // spawn_options::stash_capacity messages; `message` is then left as it was.
  void stash(M&& message) {
    actor_detail::check_stash_room(cell_);
    actor_detail::stash_envelope(cell_, actor_detail::make_user_envelope<M>(std::move(message)));
  }
  void stash(const M& message)
    requires std::copy_constructible<M>
  {
    actor_detail::check_stash_room(cell_);
    actor_detail::stash_envelope(cell_, actor_detail::make_user_envelope<M>(message));
  }
  // Puts every stashed message back, oldest first, ahead of everything not yet handled: they
  // are the next messages handled. Returns how many.
  std::uint32_t unstash_all() noexcept { return actor_detail::unstash_all(cell_); }
  std::uint32_t stash_size() const noexcept {
    return cell_.stash_length.load(std::memory_order_relaxed);  // relaxed: the owner's own count
  }
  // Switching behaviour (actor_become.hpp): `handler` handles the next user messages instead of
  // the current handler (replaced, not stacked); unbecome() returns to the behaviour's receive.
  // The handler: any callable a function actor could be, returning void or task<void>.
  template <class F>
    requires actor_detail::message_handler<std::decay_t<F>, M>
  void become(F&& handler) {
    actor_detail::become<M>(cell_, std::forward<F>(handler));
  }
  void unbecome() { actor_detail::unbecome<M>(cell_); }
  std::uint32_t executor_index() const noexcept {
    return cell_.home.load(std::memory_order_relaxed);  // relaxed: the owner's own field
  }
  // Links (A7): if either actor halts abnormally, the other is told (on_exit) or halts too.
  // usage_error if `other` is empty. unlink of an empty handle does nothing (nothing can be
  // linked to it; noexcept).
  void link(const actor_handle& other) { actor_detail::add_watch(watched(other), cell_, 0); }
  void unlink(const actor_handle& other) noexcept {
    if (other) actor_detail::remove_watch(*other.cell(), cell_, 0);
  }
  // Monitors: this actor gets a down_message (on_down) when `other` halts. Returns its id.
  // usage_error if `other` is empty; demonitor of an empty handle does nothing (noexcept).
  std::uint64_t monitor(const actor_handle& other) {
    actor_detail::actor_cell& target = watched(other);  // first: no id spent on an empty one
    const std::uint64_t id = cell_.system->next_id();
    actor_detail::add_watch(target, cell_, id);
    return id;
  }
  void demonitor(const actor_handle& other, std::uint64_t monitor_id) noexcept {
    if (other) actor_detail::remove_watch(*other.cell(), cell_, monitor_id);
  }
  // Spawn and watch in one step (Erlang's spawn_link and spawn_monitor): the child, spawned on
  // this actor's executor (spawn_options::executor may say otherwise), is linked to (monitored
  // by) this actor before it can run, so no crash of the child, not even in its on_start, goes
  // unobserved. spawn_monitor returns the ref and the monitor's id (the down_message's).
  // A leading spawn_options is the child's; the other arguments construct the behaviour.
  template <class B, class... A>
    requires(!actor_detail::starts_with_options<A...>)
  actor_ref<typename B::message_type> spawn_link(A&&... args) {
    return spawn_link<B>(spawn_options{}, std::forward<A>(args)...);
  }
  template <class B, class... A>
  actor_ref<typename B::message_type> spawn_link(const spawn_options& options, A&&... args) {
    actor_detail::actor_cell& parent = cell_;
    return actor_detail::spawn_prepared<B>(
        *cell_.system, options,
        [&parent](actor_detail::actor_cell& child) {
          actor_detail::watch_unpublished(child, parent, 0);
        },
        std::forward<A>(args)...);
  }
  template <class B, class... A>
    requires(!actor_detail::starts_with_options<A...>)
  spawned_monitored<typename B::message_type> spawn_monitor(A&&... args) {
    return spawn_monitor<B>(spawn_options{}, std::forward<A>(args)...);
  }
  template <class B, class... A>
  spawned_monitored<typename B::message_type> spawn_monitor(const spawn_options& options,
                                                            A&&... args) {
    actor_detail::actor_cell& parent = cell_;
    const std::uint64_t monitor_id = cell_.system->next_id();
    auto child = actor_detail::spawn_prepared<B>(
        *cell_.system, options,
        [&parent, monitor_id](actor_detail::actor_cell& c) {
          actor_detail::watch_unpublished(c, parent, monitor_id);
        },
        std::forward<A>(args)...);
    return {std::move(child), monitor_id};
  }
  // While an io_guard lives, the actor is never migrated (its I/O completes on this executor).
  class io_guard {
   public:
    explicit io_guard(actor_detail::actor_cell& cell) noexcept : cell_(&cell) {
      cell_->io_in_flight.fetch_add(1, std::memory_order_relaxed);  // relaxed: owner-read hint
    }
    io_guard(io_guard&& other) noexcept : cell_(std::exchange(other.cell_, nullptr)) {}
    io_guard(const io_guard&) = delete;
    ~io_guard() {
      if (cell_ != nullptr) cell_->io_in_flight.fetch_sub(1, std::memory_order_relaxed);
    }

   private:
    actor_detail::actor_cell* cell_;
  };
  io_guard begin_io() noexcept { return io_guard(cell_); }
  actor_system& system() const noexcept { return *cell_.system; }
  // Timers to this actor (actor_timers.hpp): `message` once after `delay`, or a copy every
  // `period` (no drift, skipped while the previous tick is still queued). Cancelled when the
  // actor halts.
  template <class T, class Rep, class Period>
  actor_timer send_after(std::chrono::duration<Rep, Period> delay, T&& message) const;
  template <class T, class Rep, class Period>
  actor_timer send_interval(std::chrono::duration<Rep, Period> period, T&& message) const;

 private:
  static actor_detail::actor_cell& watched(const actor_handle& other) {
    if (!other) throw usage_error("spindle: an empty actor reference was linked or monitored");
    return *other.cell();
  }

  actor_detail::actor_cell& cell_;
};

template <class B>
concept actor_behaviour = requires { typename B::message_type; };

namespace actor_detail {

template <class B>
struct typed_cell final : actor_cell {
  using message_type = typename B::message_type;
  using context_type = actor_context<message_type>;

  template <class... A>
  typed_cell(actor_system& system, actor_id id, std::uint32_t home, const spawn_options& options,
             std::uint32_t quantum, A&&... args)
      : actor_cell(system, vtable, id, home, options.mailbox_capacity, quantum, options.pinned,
                   options.domain) {
    name = options.name;  // before the behaviour: a throw here leaves nothing to destroy
    // Pushes are counted only while the owner counts what it handles (diagnostics_options::
    // records): received - handled with handled never counted would list every message ever
    // sent as still queued.
    counts_pushes = system.core().options().diagnostics.exact_mailbox_lengths &&
                    system.core().options().diagnostics.records;
    // relaxed: before publication (the directory's lock and the adopt message publish them).
    supervisor.store(options.supervisor, std::memory_order_relaxed);
    restarts.store(options.restarts, std::memory_order_relaxed);
    stash_capacity = options.stash_capacity;
    ::new (static_cast<void*>(storage)) B(std::forward<A>(args)...);
  }
  B& behaviour() noexcept { return *std::launder(reinterpret_cast<B*>(storage)); }
  // The context an awaiting handler is given (it outlives the handle() call).
  context_type handler_context{*this};

  static void handle(actor_cell& base, envelope& message) {
    auto& self = static_cast<typed_cell&>(base);
    B& b = self.behaviour();
    context_type context(base);
    switch (message.kind) {
      case envelope_kind::user:
        if (base.become_active) [[unlikely]] {
          // Out of line and last: a tail call, so the plain path keeps no registers for it.
          handle_by_become(self, message);
          break;
        }
        receive_user(self, message);
        break;
      case envelope_kind::start:
        if constexpr (requires { b.on_start(context); }) {
          static_assert(!is_task<std::remove_cvref_t<decltype(b.on_start(context))>>,
                        "spindle: on_start cannot be a coroutine (only receive may await)");
          b.on_start(context);
        }
        break;
      case envelope_kind::stop:
        if constexpr (requires(const exit_reason& r) { b.on_stop_request(r, context); }) {
          b.on_stop_request(static_cast<notification_envelope&>(message).reason, context);
        }
        break;
      case envelope_kind::down:
        if constexpr (requires(down_message d) { b.on_down(d, context); }) {
          auto& note = static_cast<notification_envelope&>(message);
          down_message d{note.source, note.monitor_id, note.reason};
          static_assert(!is_task<std::remove_cvref_t<decltype(b.on_down(d, context))>>,
                        "spindle: on_down cannot be a coroutine (only receive may await)");
          b.on_down(d, context);
        }
        break;
      case envelope_kind::exit:
        if constexpr (requires(exit_message x) { b.on_exit(x, context); }) {
          auto& note = static_cast<notification_envelope&>(message);
          exit_message x{note.source, note.reason};
          static_assert(!is_task<std::remove_cvref_t<decltype(b.on_exit(x, context))>>,
                        "spindle: on_exit cannot be a coroutine (only receive may await)");
          b.on_exit(x, context);
        }
        break;
      default:
        break;
    }
  }
  // A user message, to the behaviour's receive.
  [[gnu::always_inline]] static inline void receive_user(typed_cell& self, envelope& message) {
    B& b = self.behaviour();
    // The handler may take the message by value, rvalue, const or non-const reference.
    auto& m = static_cast<user_envelope<message_type>&>(message).message;
    const auto receive = [&](context_type& c) -> decltype(auto) {
      if constexpr (requires { b.receive(std::move(m), c); }) {
        return b.receive(std::move(m), c);
      } else if constexpr (requires { b.receive(m, c); }) {
        return b.receive(m, c);
      } else if constexpr (requires { b.receive(std::move(m)); }) {
        return b.receive(std::move(m));
      } else {
        return b.receive(m);
      }
    };
    using result = std::remove_cvref_t<decltype(receive(self.handler_context))>;
    static_assert(std::is_same_v<result, task<void>> || !is_task<result>,
                  "spindle: an awaiting receive must return task<void> (its result would "
                  "be dropped, and the coroutine never run)");
    if constexpr (std::is_same_v<result, task<void>>) {
      // A user message's handling starts, no handler call on the stack: the retired handlers
      // with no coroutine in flight have ended. Here, not after the call: the receive's steps
      // run later, and one that becomes then unbecomes at every message retired a handler per
      // message, never freed while the behaviour's receive handled them (the attack C test).
      if (self.become != nullptr) [[unlikely]] release_ended_handlers_of(self);
      // A handler that awaits (actor_await.hpp): its task gets the cell's own context,
      // which lives as long as the cell (the task holds a reference to it).
      prepare_awaiting_handler(self, message, receive(self.handler_context));
    } else {
      context_type context(self);
      receive(context);
      // A handler installed and retired in this same call (become then unbecome) has ended,
      // unless a coroutine of its own is in flight (actor_become.hpp).
      if (self.become != nullptr) [[unlikely]] release_ended_handlers_of(self);
    }
  }
  static void release_ended_handlers_of(typed_cell& self) noexcept {
    release_ended_handlers(static_cast<become_state<message_type>&>(*self.become));
  }
  // A user message while a become handler is installed (actor_become.hpp).
  [[gnu::noinline]] static void handle_by_become(typed_cell& self, envelope& message) {
    auto& state = static_cast<become_state<message_type>&>(*self.become);
    // No handler call is on the stack here: the retired handlers with no coroutine in flight
    // have ended.
    release_ended_handlers(state);
    // The handler may replace itself (it is retired, alive until it has ended). It gets the
    // cell's own context, valid for as long as a coroutine handler may need it.
    auto& m = static_cast<user_envelope<message_type>&>(message).message;
    task<void> awaiting = state.current->receive(m, self.handler_context);
    if (awaiting.valid()) {
      prepare_awaiting_handler(self, message, std::move(awaiting));
    } else {
      release_ended_handlers(state);  // it returned: a handler it replaced has ended too
    }
  }
  static void destroy_behaviour(actor_cell& base, const exit_reason& reason) noexcept {
    B& b = static_cast<typed_cell&>(base).behaviour();
    if constexpr (requires { b.on_stop(reason); }) {
      try {
        b.on_stop(reason);
      } catch (...) {
        // A crash while stopping changes nothing: the actor is halting already.
      }
    }
    // The become handlers before the behaviour: they may refer to it. No handler is in flight
    // (halt comes after the last one ended, or after shutdown abandoned them).
    delete std::exchange(base.become, nullptr);
    b.~B();
  }
  static void free_cell(actor_cell& base) noexcept {
    auto* self = static_cast<typed_cell*>(&base);
    self->~typed_cell();
    core::deallocate_frame(self);
    count_cell(-1);
  }
  static void children_in_stop_order(actor_cell& base, std::vector<actor_cell*>& out) {
    if constexpr (requires(const B& b) { b.children_in_stop_order(out); }) {
      static_cast<typed_cell&>(base).behaviour().children_in_stop_order(out);
    }
  }
  static constexpr bool has_children = requires(const B& b, std::vector<actor_cell*>& out) {
    b.children_in_stop_order(out);
  };
  // `static constexpr bool interleaves = true;` (actor_await.hpp, "Interleaving").
  static constexpr bool interleaving = [] {
    if constexpr (requires { B::interleaves; }) {
      return bool(B::interleaves);
    } else {
      return false;
    }
  }();
  static constexpr actor_vtable vtable{
      &typed_cell::handle,
      &typed_cell::destroy_behaviour,
      &typed_cell::free_cell,
      requires(B& b, exit_message& x, context_type& c) { b.on_exit(x, c); },
      &typeid(message_type),
      requires(B& b, const exit_reason& r, context_type& c) { b.on_stop_request(r, c); },
      has_children ? &typed_cell::children_in_stop_order : nullptr,
      interleaving};

  alignas(B) unsigned char storage[sizeof(B)];
};

// The behaviour of a function actor: spawn_actor<M>(rt, function).
template <class M, class F>
// A function returning task<void> makes an actor whose handler awaits (actor_await.hpp).
struct function_behaviour {
  using message_type = M;
  F function;
  decltype(auto) receive(M& message, actor_context<M>& context) {
    if constexpr (std::invocable<F&, M&, actor_context<M>&>) {
      return function(message, context);
    } else {
      return function(message);
    }
  }
};

std::uint32_t pick_home(actor_system& system, const spawn_options& options);

// No watch to place before the actor is published (spawn_in).
struct no_preparation {
  void operator()(actor_cell&) const noexcept {}
};

// Spawns a B. `prepare(cell)` runs after the cell is built and before anything can see or run
// it (actor_context::spawn_link and spawn_monitor place their watch there, so the child cannot
// halt unobserved); if it throws, it undid its own work, and the unpublished cell is discarded
// (its behaviour destroyed without on_stop: it never started).
//
// A spawn from a thread that is not one of the runtime's workers races the runtime's shutdown:
// between its stopping check and its adopt message, the shutdown could drain the mailboxes and
// make its one pass over the orphans, and the actor was then never halted (its monitors never
// told, its cell leaked). So that span, from the check to the adopt message, is inside the
// runtime's gate to outside threads (core/outside_gate.hpp): the drain waits for it, and the
// adopt message is then in a mailbox the drain hands back as an orphan. The behaviour is built
// before the gate: its constructor is the user's, and nothing may block inside a gate.
template <class B, class Prepare, class... A>
actor_ref<typename B::message_type> spawn_prepared(actor_system& system,
                                                   const spawn_options& options, Prepare&& prepare,
                                                   A&&... args) {
  if (system.stopping()) throw runtime_stopped();  // early: nothing built for a refused spawn
  const std::uint32_t home = pick_home(system, options);
  const std::uint32_t quantum = options.quantum != 0 ? options.quantum : system.options().quantum;
  void* memory = core::allocate_frame(sizeof(typed_cell<B>));
  typed_cell<B>* cell;
  try {
    cell = ::new (memory)
        typed_cell<B>(system, system.next_id(), home, options, quantum, std::forward<A>(args)...);
  } catch (...) {
    core::deallocate_frame(memory);
    throw;
  }
  adopt_mode mode = adopt_mode::idle;
  bool listed = false;
  try {
    // Inside the gate from the check below to the adopt message (see above); a worker of this
    // runtime needs none (the workers all left their loops before the drain). Left at the end
    // of this block: before the user's destructor runs if anything throws.
    detail::host_entry entry(system.task_host());
    if (entry.refused() || system.stopping()) throw runtime_stopped();
    if constexpr (requires(B& b, actor_context<typename B::message_type>& c) { b.on_start(c); }) {
      // Queued before anyone can see the actor: it starts Runnable, no wake needed.
      cell->mailbox.store(new start_envelope(), std::memory_order_relaxed);  // relaxed: unpublished
      cell->state.store(actor_state::runnable, std::memory_order_relaxed);  // relaxed: unpublished
      mode = adopt_mode::spawned_runnable;
    }
    // Listed, and the returned ref's reference taken, before `prepare`: a preparation that
    // publishes the cell (spawn_registered's name) lets another thread wake it, run it and halt
    // it before this returns; that halt must find it listed (its delist), and must not drop the
    // last reference under us (the attack found a halted cell left in the directory, then freed).
    cell->add_reference();  // the returned ref's; the system holds the first
    system.enlist(cell);    // diagnostics: listed until it halts
    listed = true;
    prepare(static_cast<actor_cell&>(*cell));
    count_cell(+1);
    system.send_adopt(cell, home, mode);  // noexcept: nothing below throws once it is sent
  } catch (...) {
    if (listed) system.delist(cell);
    // relaxed: unpublished, this thread's own writes.
    if (envelope* start = cell->mailbox.load(std::memory_order_relaxed)) start->destroy(start);
    cell->behaviour().~B();
    if (actor_links* links = cell->links.load(std::memory_order_relaxed)) delete links;
    cell->~typed_cell<B>();
    core::deallocate_frame(memory);
    throw;
  }
  return actor_ref<typename B::message_type>::adopt(cell);
}

template <class B, class... A>
actor_ref<typename B::message_type> spawn_in(actor_system& system, const spawn_options& options,
                                             A&&... args) {
  return spawn_prepared<B>(system, options, no_preparation{}, std::forward<A>(args)...);
}

}  // namespace actor_detail

// The actor system of `rt` (created on first use).
actor_system& actors_of(runtime& rt);

namespace actor_detail {
// monitor_actor's watch entry: sends the exit reason to the receiver, then frees itself.
struct task_monitor final : exit_callback {
  explicit task_monitor(oneshot_sender<exit_reason> to) noexcept
      : exit_callback{&task_monitor::deliver_to, &task_monitor::receiver_dropped,
                      &task_monitor::free},
        sender(std::move(to)) {}
  // The receiver is gone: nobody will read the exit reason (swept by add_exit_callback).
  static bool receiver_dropped(const exit_callback* self) noexcept {
    return static_cast<const task_monitor*>(self)->sender.is_closed();
  }
  static void free(exit_callback* self) noexcept { delete static_cast<task_monitor*>(self); }
  static void deliver_to(exit_callback* self, const exit_reason& reason) noexcept {
    auto* monitor = static_cast<task_monitor*>(self);
    try {
      monitor->sender.send(reason);
    } catch (...) {
      // Nothing to tell: the receiver is gone (or memory is); the watch ends either way.
    }
    delete monitor;
  }
  oneshot_sender<exit_reason> sender;
};
}  // namespace actor_detail

// A monitor for plain tasks and threads: the receiver gets `target`'s exit reason when it
// halts (at once if it has), including when the runtime's shutdown halts it (kind shutdown).
//   spindle::exit_reason why = co_await spindle::monitor_actor(ref);
// Dropping the receiver ends the watch: it is freed at a later monitor_actor on the same actor
// (a sweep), so an actor monitored by a task per request keeps only the monitors still held.
// usage_error on an empty reference.
inline oneshot_receiver<exit_reason> monitor_actor(const actor_handle& target) {
  if (!target) throw usage_error("spindle: monitor_actor on an empty actor reference");
  auto [sender, receiver] = oneshot<exit_reason>();
  auto monitor = std::make_unique<actor_detail::task_monitor>(std::move(sender));
  actor_detail::add_exit_callback(*target.cell(), monitor.get());  // takes it over, or throws
  monitor.release();
  return std::move(receiver);
}

template <actor_behaviour B, class... A>
actor_ref<typename B::message_type> spawn_actor(runtime& rt, const spawn_options& options,
                                                A&&... args) {
  return actor_detail::spawn_in<B>(actors_of(rt), options, std::forward<A>(args)...);
}

template <actor_behaviour B, class... A>
  requires(!actor_detail::starts_with_options<A...>)
actor_ref<typename B::message_type> spawn_actor(runtime& rt, A&&... args) {
  return actor_detail::spawn_in<B>(actors_of(rt), spawn_options{}, std::forward<A>(args)...);
}
// From a worker of a runtime (a handler, a task): spawns on the calling executor.
template <actor_behaviour B, class... A>
actor_ref<typename B::message_type> spawn_actor_here(const spawn_options& options, A&&... args) {
  actor_system* system = current_actor_system();
  if (system == nullptr) throw usage_error("spindle: spawn_actor_here outside a runtime worker");
  return actor_detail::spawn_in<B>(*system, options, std::forward<A>(args)...);
}
// Function actors: the message type and a callable (M&, actor_context<M>&) or (M&).
template <class M, class F>
  requires(!actor_behaviour<M>) &&
          (std::invocable<std::decay_t<F>&, M&, actor_context<M>&> || std::invocable<std::decay_t<F>&, M&>)
actor_ref<M> spawn_actor(runtime& rt, F&& function, const spawn_options& options = {}) {
  using behaviour = actor_detail::function_behaviour<M, std::decay_t<F>>;
  return actor_detail::spawn_in<behaviour>(actors_of(rt), options,
                                           behaviour{std::forward<F>(function)});
}

}  // namespace spindle

// The members declared above whose definitions need more of the library: the timers of
// actor_context, actor_ref::call. Included last, so that either header may come first.
#include "spindle/actor/actor_timers.hpp"
#include "spindle/actor/call.hpp"
