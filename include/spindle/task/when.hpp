// when_all / when_any: awaiting several awaitables at once (tasks, channel receives, sleeps,
// joins, asks, socket reads: anything co_await-able in a spindle task).
//
//   auto [page, item] = co_await spindle::when_all(fetch(url), ch.receive());   // std::tuple
//   auto first = co_await spindle::when_any(ch.receive(), spindle::sleep_for(1s));
//   if (first.index() == 0) use(std::get<0>(first));                          // std::variant
//
// Design (docs/design/tasks.md, "when_all and when_any")
//   Participants: the caller (the task awaiting when_all / when_any), one child task per
//   operand, and cancellers of the caller. A task waits on one thing at a time (one registered
//   wait, spawned_task.hpp S3), so each operand is awaited by a child of its own, spawned on
//   the caller's host: the child co_awaits the operand, which stays in the caller's frame, and
//   either writes its value into the caller's slot for it (when_all) or returns it as
//   alternative I of the variant (when_any). The children are gathered in a join_set
//   (join_set.hpp): it delivers every child's outcome exactly once, in completion order
//   (including a child cancelled before it ran, and one abandoned at shutdown), and its
//   shutdown() cancels the children still running and waits for all of them without being a
//   cancellation point. The caller always ends with that wait (or with every child consumed),
//   so no child outlives the call: the operands, the slots and whatever the operands refer to
//   in the caller's frame are alive while any child can touch them. A slot is written by its
//   child before the child completes and read by the caller after next() handed that child
//   out (the join_set's mutex orders the two).
//   Whether next()'s task_cancelled is a child's outcome or the caller's own cancellation is
//   told by the set's size: a handed-out child is counted out first (join_set.hpp).
//
// Semantics
//   when_all(a...) -> std::tuple<V...>, V = what each operand resumes with (void:
//     std::monostate, T&: std::reference_wrapper<T>), in operand order, once every operand
//     completed. The first operand to fail (an exception, or task_cancelled of its own) fails
//     the whole: the others are cancelled, waited for, and that exception is rethrown (as
//     std::execution::when_all; the others' outcomes are discarded).
//   when_any(a...) -> std::variant<V...>: the first operand to complete, as alternative I
//     (index() tells which, duplicates included); if it failed, its exception is rethrown. The
//     others are cancelled and waited for before when_any returns. A loser that completed
//     anyway (it raced the winner, or handled its cancellation and returned) has its value
//     destroyed: an item one of them had received is dropped (docs/design/tasks.md).
//   Either: if the caller is cancelled while waiting, every child is cancelled and waited for
//   (not interruptible), then task_cancelled propagates. Both are cancellation points.
//   Operands passed as movable rvalues are moved into the returned task, others are referred
//   to (task/awaitable.hpp): await the result in the full expression that made it.
//   Costs: one spawn per operand (a child frame and a spawned task), and a join_set.
//   Must be awaited in a task on a runtime worker or embedded executor (usage_error otherwise).
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "spindle/task/awaitable.hpp"
#include "spindle/task/join_set.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

namespace detail {

template <class R>
struct when_value {
  using type = std::remove_cvref_t<R>;
};
template <>
struct when_value<void> {
  using type = std::monostate;
};
template <class R>
struct when_value<R&> {
  using type = std::reference_wrapper<R>;
};

}  // namespace detail

// What when_all / when_any hold for an operand that resumes with R.
template <class R>
using when_value_t = typename detail::when_value<R>::type;

namespace detail {

// A when_all child: awaits `operand` (in the caller's frame) and fills the caller's `slot`.
template <class Stored, class Value>
task<void> when_all_operand(Stored& operand, std::optional<Value>* slot) {
  if constexpr (std::is_void_v<await_result_t<Stored>>) {
    co_await static_cast<Stored&&>(operand);
    slot->emplace();
  } else {
    // One expression: a reference result may refer into the operand's awaiter, which lives
    // until the end of the full expression.
    slot->emplace(co_await static_cast<Stored&&>(operand));
  }
}

// A when_any child: awaits `operand` and returns its value as alternative I.
template <std::size_t I, class Result, class Stored>
task<Result> when_any_operand(Stored& operand) {
  if constexpr (std::is_void_v<await_result_t<Stored>>) {
    co_await static_cast<Stored&&>(operand);
    co_return Result(std::in_place_index<I>);
  } else {
    co_return Result(std::in_place_index<I>, co_await static_cast<Stored&&>(operand));
  }
}

// How a next() that threw ended: a child's failure, or the caller's own cancellation.
struct when_wait_state {
  std::exception_ptr failure;
  bool caller_cancelled = false;
  bool done() const noexcept { return failure || caller_cancelled; }
  // In a catch block of next(), with the set's size before and after the call.
  void on_next_threw(std::size_t size_before, std::size_t size_after) noexcept {
    if (size_before == size_after) {
      caller_cancelled = true;  // no child handed out: next() was interrupted (join_set.hpp)
    } else {
      failure = std::current_exception();
    }
  }
  // After the children were all waited for: rethrows what ended the wait early.
  void rethrow() const {
    if (caller_cancelled) throw task_cancelled();
    if (failure) std::rethrow_exception(failure);
  }
};

template <class... Stored, std::size_t... I>
task<std::tuple<when_value_t<await_result_t<Stored>>...>> when_all_body(
    std::index_sequence<I...>, Stored... operands) {
  std::tuple<std::optional<when_value_t<await_result_t<Stored>>>...> slots;
  join_set<void> children;
  when_wait_state state;
  try {
    (children.spawn(when_all_operand<Stored>(operands, &std::get<I>(slots))), ...);
  } catch (...) {
    state.failure = std::current_exception();  // runtime_stopped, bad_alloc: no more children
  }
  while (!state.done() && !children.empty()) {
    const std::size_t before = children.size();
    try {
      (void)co_await children.next();
    } catch (...) {
      state.on_next_threw(before, children.size());
    }
  }
  if (state.done()) co_await children.shutdown();  // the others: cancelled and waited for
  state.rethrow();
  co_return std::tuple<when_value_t<await_result_t<Stored>>...>(std::move(*std::get<I>(slots))...);
}

template <class... Stored, std::size_t... I>
task<std::variant<when_value_t<await_result_t<Stored>>...>> when_any_body(
    std::index_sequence<I...>, Stored... operands) {
  using result = std::variant<when_value_t<await_result_t<Stored>>...>;
  join_set<result> children;
  when_wait_state state;
  try {
    (children.spawn(when_any_operand<I, result, Stored>(operands)), ...);
  } catch (...) {
    state.failure = std::current_exception();
  }
  std::optional<result> winner;
  if (!state.done()) {
    const std::size_t before = children.size();
    try {
      winner = co_await children.next();
    } catch (...) {
      state.on_next_threw(before, children.size());
    }
  }
  co_await children.shutdown();  // the losers: cancelled and waited for
  state.rethrow();
  co_return std::move(*winner);
}

}  // namespace detail

// Every operand's value, in operand order (see the semantics above).
template <class... Awaitables>
  requires(sizeof...(Awaitables) > 0 && (awaitable<Awaitables> && ...))
auto when_all(Awaitables&&... operands) {
  return detail::when_all_body<detail::operand_storage_t<Awaitables>...>(
      std::index_sequence_for<Awaitables...>{}, static_cast<Awaitables&&>(operands)...);
}

// The first operand to complete, as alternative I of a variant; the others cancelled and
// waited for (see the semantics above).
template <class... Awaitables>
  requires(sizeof...(Awaitables) > 0 && (awaitable<Awaitables> && ...))
auto when_any(Awaitables&&... operands) {
  return detail::when_any_body<detail::operand_storage_t<Awaitables>...>(
      std::index_sequence_for<Awaitables...>{}, static_cast<Awaitables&&>(operands)...);
}

}  // namespace spindle
