// Switching behaviour (issue 17, Akka's become/unbecome): a handler installs another handler
// for the actor's next user messages:
//
//   void receive(command& c, spindle::actor_context<command>& ctx) {
//     if (c.kind == command::open) {
//       ctx.become([this](command& next, spindle::actor_context<command>& ctx) { ... });
//     }
//   }
//   ... ctx.unbecome();   // back to the behaviour's own receive
//
// The handler is any callable a function actor could have: (M&, actor_context<M>&) or (M&) (or
// taking M by value, rvalue or const reference), returning void or task<void> (it may await,
// as receive may: actor_await.hpp). It handles user messages only; on_start, on_down, on_exit,
// on_stop_request and on_stop stay the behaviour's.
//
// Replace, not a stack: become(h) replaces the current handler, unbecome() returns to receive.
// A state machine's transitions are replacements (gen_statem's next state, Akka Typed's
// returned behaviour); a stack (Akka classic's become(h, discardOld = false), CAF's
// keep_behavior) grows by one at every become that is not paired with an unbecome, the leak
// Akka's documentation warns about. A behaviour that wants to go back to a state it was in
// names it (become(that_state) again), so the depth of its history is its own choice.
//
// Lifetime: a replaced handler may still be running (it replaced itself), or its coroutines may
// still be suspended (an awaiting handler's frame refers to the callable's captures), so it is
// retired, not destroyed. Each handler counts its coroutines not yet destroyed (`in_flight`: a
// claim taken when its receive returns a task, dropped when that task's frame goes); a retired
// handler is destroyed at the next point where no handler call is on the stack (a user
// message's handling starts, or a synchronous handler call returned) once its own count is zero,
// and all of them at halt, after on_stop and before the behaviour (they may refer to it). Its
// own count, not the actor's: an interleaving actor may always have some handler in flight (one
// parked for an hour), and a handler that replaced itself at every message was then kept once
// per message for the actor's life (the issue 17 attack). A sweep costs what it frees, not
// what is retired: a retired handler that has ended (retired with nothing in flight, or its
// count dropped to zero since) is put on the state's `ended` list, and the sweep removes just
// those (each knows its place in `retired`). An interleaving actor with thousands of
// self-replacing handlers parked (each alive, its coroutine suspended) paid a copy and a scan
// of the whole list at every message: 50x the time of the same actor without become at 50,000
// parked, and still quadratic when every other handler ended at once (the attack C tests).
//
// Who touches it: owner-only (the owner's run, or a handler's step on the home executor,
// actor_await.hpp). Cost: one test of the cell's `become_active` per user message (a flag, not
// the state's pointer: it is false again after an unbecome, when the retired handlers still
// need the state), and no call: the test jumps to an out-of-line handler (a call there would
// make every handle() save registers for it).
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "spindle/actor/actor_cell.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

template <class M>
class actor_context;

namespace actor_detail {

// What a function actor's function may be (and a become handler): called with the message (as
// an rvalue if it takes one, else as an lvalue) and the context, or with the message only.
template <class F, class M>
concept message_handler =
    std::invocable<F&, M&&, actor_context<M>&> || std::invocable<F&, M&, actor_context<M>&> ||
    std::invocable<F&, M&&> || std::invocable<F&, M&>;

template <class M, class F>
decltype(auto) call_message_handler(F& handler, M& message, actor_context<M>& context) {
  if constexpr (std::invocable<F&, M&&, actor_context<M>&>) {
    return handler(std::move(message), context);
  } else if constexpr (std::invocable<F&, M&, actor_context<M>&>) {
    return handler(message, context);
  } else if constexpr (std::invocable<F&, M&&>) {
    return handler(std::move(message));
  } else {
    return handler(message);
  }
}

struct become_handler_base {
  virtual ~become_handler_base() = default;
  // Owner-only (every step of a handler runs on the home executor, and its frame is destroyed
  // there): this handler's coroutines not yet destroyed (see "Lifetime").
  std::uint32_t in_flight = 0;
  // Once retired: its index in the state's `retired`, and the state's `ended` list, which it
  // joins when it has ended (its count is zero: a retired handler is never called again, so
  // the count only goes down). The state owns the retired handlers: it outlives both.
  std::size_t retired_index = 0;
  become_handler_base** ended_list = nullptr;
  become_handler_base* next_ended = nullptr;

  void join_ended_list() noexcept {
    next_ended = *ended_list;
    *ended_list = this;
  }
};

// One coroutine of a handler in flight: taken when its receive returns the task, dropped when
// the task's frame is destroyed (the claim is a parameter of the frame that awaits the task, and
// the last thing that frame destroys), whether it ran or not.
class in_flight_claim {
 public:
  explicit in_flight_claim(become_handler_base& handler) noexcept : handler_(&handler) {
    ++handler.in_flight;
  }
  in_flight_claim(in_flight_claim&& other) noexcept : handler_(std::exchange(other.handler_, nullptr)) {}
  in_flight_claim& operator=(in_flight_claim&&) = delete;
  ~in_flight_claim() {
    if (handler_ == nullptr) return;
    // A retired handler whose last coroutine is gone has ended: the next sweep frees it.
    if (--handler_->in_flight == 0 && handler_->ended_list != nullptr) handler_->join_ended_list();
  }

 private:
  become_handler_base* handler_;
};

// The handler's task, awaited inside a frame that holds its claim. `claim` is the first
// parameter so it is destroyed after `handler_task` (the handler's own frame, which may refer
// to the handler's captures).
inline task<void> awaited_with_claim(in_flight_claim claim, task<void> handler_task) {
  (void)claim;
  co_await std::move(handler_task);
}

template <class M>
struct become_handler : become_handler_base {
  // Handles one user message: the handler's task if it awaits (not started), else empty.
  virtual task<void> receive(M& message, actor_context<M>& context) = 0;
};

template <class M, class F>
struct become_function final : become_handler<M> {
  using result = std::remove_cvref_t<decltype(call_message_handler<M>(
      std::declval<F&>(), std::declval<M&>(), std::declval<actor_context<M>&>()))>;
  static_assert(std::is_void_v<result> || std::is_same_v<result, task<void>>,
                "spindle: a become handler returns void or task<void>");

  explicit become_function(F f) : function(std::move(f)) {}
  task<void> receive(M& message, actor_context<M>& context) override {
    if constexpr (std::is_void_v<result>) {
      call_message_handler<M>(function, message, context);
      return task<void>();
    } else {
      // The claim before the call: a handler that replaces itself in its first step (which runs
      // later) is already counted.
      in_flight_claim claim(*this);
      return awaited_with_claim(std::move(claim), call_message_handler<M>(function, message, context));
    }
  }
  F function;
};

template <class M>
struct become_state final : become_state_base {
  std::unique_ptr<become_handler<M>> current;  // null: the behaviour's own receive
  std::vector<std::unique_ptr<become_handler<M>>> retired;  // see "Lifetime"
  become_handler_base* ended = nullptr;  // retired handlers that have ended (see "Lifetime")
};

// Destroys the retired handlers that have ended: no call of theirs on the stack (the caller's
// word) and no coroutine of theirs in flight. Costs what it frees (nothing when none ended).
template <class M>
void release_ended_handlers(become_state<M>& state) noexcept {
  while (become_handler_base* ended = state.ended) {
    state.ended = ended->next_ended;
    // Out of the list by swapping with the last (the order of the retired means nothing).
    const std::size_t index = ended->retired_index;
    if (index + 1 != state.retired.size()) {
      std::swap(state.retired[index], state.retired.back());
      state.retired[index]->retired_index = index;
    }
    state.retired.pop_back();
  }
}

template <class M>
become_state<M>& become_state_of(actor_cell& cell) {
  if (cell.become == nullptr) cell.become = new become_state<M>();
  // The cell's message type is M (actor_context<M> and typed_cell agree): the state is ours.
  return static_cast<become_state<M>&>(*cell.become);
}

// Retires the current handler. push_back first (geometric growth; if it throws, nothing has
// changed: the handler stays current), then its place and the ended list.
template <class M>
void retire_current(become_state<M>& state) {
  if (!state.current) return;
  state.retired.push_back(std::move(state.current));
  become_handler<M>& retiring = *state.retired.back();
  retiring.retired_index = state.retired.size() - 1;
  retiring.ended_list = &state.ended;
  if (retiring.in_flight == 0) retiring.join_ended_list();  // ended once its call returns
}

template <class M, class F>
void become(actor_cell& cell, F&& handler) {
  auto installed = std::make_unique<become_function<M, std::decay_t<F>>>(std::forward<F>(handler));
  become_state<M>& state = become_state_of<M>(cell);
  retire_current(state);
  state.current = std::move(installed);
  cell.become_active = true;
}

template <class M>
void unbecome(actor_cell& cell) {
  if (cell.become == nullptr) return;
  retire_current(static_cast<become_state<M>&>(*cell.become));
  cell.become_active = false;
}

}  // namespace actor_detail
}  // namespace spindle
