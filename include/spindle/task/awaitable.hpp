// What may follow co_await in a spindle task, as types: the awaitable concept, the awaiter a
// co_await expression would use, and the type it resumes with.
//
// The combinators that take "any awaitable" (with_timeout / with_deadline, when_all, when_any)
// hold the operand and drive its awaiter themselves, so they need the language's lookup:
// a member operator co_await, else a free one, else the object is its own awaiter. Operands are
// stored by value when passed as movable rvalues (moved in), and by reference when passed as
// lvalues or as rvalues that cannot move (a sleep_for's awaiter: its timer entry has an
// address): such a combinator must be awaited in the full expression that made it, as in
// `co_await with_timeout(1s, sleep_for(2s))`, which is how they are meant to be written anyway.
// Each operand is co_await'ed as what it was passed as (task<T>::operator co_await() && for a
// moved task).
#pragma once

#include <concepts>
#include <coroutine>
#include <type_traits>
#include <utility>

namespace spindle {

namespace detail {

template <class T>
concept has_member_co_await = requires(T&& value) { static_cast<T&&>(value).operator co_await(); };
template <class T>
concept has_free_co_await = requires(T&& value) { operator co_await(static_cast<T&&>(value)); };

// The awaiter `co_await value` would use (a prvalue, or `value` itself as a reference).
template <class T>
decltype(auto) get_awaiter(T&& value) {
  if constexpr (has_member_co_await<T>) {
    return static_cast<T&&>(value).operator co_await();
  } else if constexpr (has_free_co_await<T>) {
    return operator co_await(static_cast<T&&>(value));
  } else {
    return static_cast<T&&>(value);
  }
}

template <class A>
concept is_awaiter = requires(A& awaiter, std::coroutine_handle<> h) {
  { awaiter.await_ready() } -> std::convertible_to<bool>;
  awaiter.await_suspend(h);
  awaiter.await_resume();
};

}  // namespace detail

// Something `co_await`-able in a spindle task (passed as T: an rvalue; T&: an lvalue).
template <class T>
concept awaitable = requires(T&& value) {
  { detail::get_awaiter(static_cast<T&&>(value)) };
} && detail::is_awaiter<std::remove_reference_t<decltype(detail::get_awaiter(std::declval<T&&>()))>>;

// The awaiter type of `co_await std::declval<T>()` (a reference when T is its own awaiter).
template <class T>
using awaiter_type_t = decltype(detail::get_awaiter(std::declval<T&&>()));

// The type `co_await std::declval<T>()` resumes with.
template <class T>
using await_result_t = decltype(std::declval<std::remove_reference_t<awaiter_type_t<T>>&>().await_resume());

namespace detail {

// How a combinator stores an operand passed as A&& (see above): A itself, or a reference.
template <class A>
using operand_storage_t =
    std::conditional_t<!std::is_reference_v<A> && std::is_move_constructible_v<A>, A, A&&>;

// Drives a stored operand's awaiter (with_timeout, when_all/when_any's operand tasks): holds
// the operand (Awaitable: a value type, or an lvalue reference) and the awaiter made from it.
// Neither copyable nor movable: the awaiter may refer to the operand.
template <class Awaitable>
class awaiter_holder {
 public:
  template <class Operand>
  explicit awaiter_holder(Operand&& operand)
      : operand_(static_cast<Operand&&>(operand)),
        awaiter_(get_awaiter(static_cast<Awaitable&&>(operand_))) {}
  awaiter_holder(const awaiter_holder&) = delete;
  awaiter_holder& operator=(const awaiter_holder&) = delete;

  std::remove_reference_t<awaiter_type_t<Awaitable>>& awaiter() noexcept { return awaiter_; }

 private:
  Awaitable operand_;
  awaiter_type_t<Awaitable> awaiter_;
};

}  // namespace detail

}  // namespace spindle
