// fork_join(left, right): run two computations, in parallel when that pays, and return both
// results (F1). The machinery and its invariants are in fork_state.hpp.
//
//   auto [a, b] = spindle::fork_join([&] { return fib(n - 1); }, [&] { return fib(n - 2); });
//
// Results: std::pair of the two results; a branch returning void yields std::monostate, one
// returning a reference yields the reference. Move-only results are fine.
// Where it runs:
//   - on a worker of a runtime (inside a task, or inside another fork_join): left inline, right
//     latent; a heartbeat, or a ping while the left branch runs a leaf that never forks, may hand
//     the right branch to another worker. The call is synchronous:
//     a task calling it occupies its worker until both branches are done (the worker helps with
//     other fork-join work while it waits for a stolen branch).
//   - on any other thread: fork_join(rt, left, right) runs the pair on `rt` and blocks the
//     calling thread until it is done; plain fork_join(left, right) runs both branches serially,
//     left then right.
// Exceptions (F6): if a branch throws, fork_join throws the exception after both branches are
// settled: a right branch that was not started yet is skipped, one that a thief is running is
// waited for. If both throw, the left one's exception wins (the right one's is dropped).
// Branches must be safe to run concurrently with each other (pure computations, or disjoint
// data); they are always invoked as lvalues, at most once each.
#pragma once

#include <concepts>
#include <functional>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "spindle/core/errors.hpp"
#include "spindle/fork/fork_state.hpp"
#include "spindle/task/runtime.hpp"

namespace spindle {
namespace fork_detail {

// What a branch returns, as held between the call and the return: an rvalue reference is held
// (moved) as a value, an lvalue reference as a reference.
template <class F>
using branch_result_t = std::conditional_t<std::is_rvalue_reference_v<std::invoke_result_t<F&>>,
                                           std::remove_cvref_t<std::invoke_result_t<F&>>,
                                           std::invoke_result_t<F&>>;
// What a branch's result becomes in the returned pair.
template <class T>
using result_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

// Holds a branch's result between the call and the return.
template <class T>
class value_box {
 public:
  template <class F>
  void fill(F& function) {
    value_.emplace(std::invoke(function));
  }
  T take() { return std::move(*value_); }
  void adopt(value_box& other) { value_.emplace(std::move(*other.value_)); }

 private:
  std::optional<T> value_;
};
template <class T>
class value_box<T&> {
 public:
  template <class F>
  void fill(F& function) {
    value_ = std::addressof(std::invoke(function));
  }
  T& take() { return *value_; }
  void adopt(value_box& other) { value_ = other.value_; }

 private:
  T* value_ = nullptr;
};
template <>
class value_box<void> {
 public:
  template <class F>
  void fill(F& function) {
    std::invoke(function);
  }
  std::monostate take() { return {}; }
  void adopt(value_box&) {}
};

// Empty std::function objects and null function pointers are rejected before anything runs.
template <class F>
void check_callable(const F& function) {
  using plain = std::remove_cvref_t<F>;
  if constexpr (std::is_pointer_v<plain> || std::is_member_pointer_v<plain>) {
    if (function == nullptr) throw usage_error("spindle: fork-join given a null callable");
  } else if constexpr (requires { typename plain::result_type; function.target_type(); }) {
    if (!function) throw usage_error("spindle: fork-join given an empty std::function");
  }
}

// The right continuation once published: runs `right` for the thief and keeps its result.
template <class Right, class Result>
struct right_work final : delegated_work {
  static void run(core::runnable* self) noexcept {
    auto* work = static_cast<right_work*>(self);
    begin_delegate(work);
    try {
      work->result.fill(*work->right);
    } catch (...) {
      work->error = std::current_exception();
    }
    finish_delegate(work);
  }
  static constexpr core::runnable_vtable vtable{&right_work::run, &drop_delegated};

  explicit right_work(Right* function) noexcept : delegated_work(&vtable), right(function) {}
  Right* right;
  value_box<Result> result;
};

// The latent frame of one fork_join call: lives in fork_join's stack frame.
template <class Right, class Result>
struct fork_frame final : latent_frame {
  using work_type = right_work<Right, Result>;

  fork_frame(Right& function, std::uint64_t current_epoch) noexcept : right(&function) {
    promote = &fork_frame::promote_right;
    epoch = current_epoch;
  }
  static delegated_work* promote_right(latent_frame* base) noexcept {
    auto* frame = static_cast<fork_frame*>(base);
    return ::new (static_cast<void*>(frame->work_storage)) work_type(frame->right);
  }
  work_type& work() noexcept {
    return *std::launder(reinterpret_cast<work_type*>(work_storage));
  }

  Right* right;
  alignas(work_type) unsigned char work_storage[sizeof(work_type)];
};

}  // namespace fork_detail

template <class Left, class Right>
  requires std::invocable<Left&> && std::invocable<Right&>
auto fork_join(Left&& left, Right&& right)
    -> std::pair<fork_detail::result_t<fork_detail::branch_result_t<Left>>,
                 fork_detail::result_t<fork_detail::branch_result_t<Right>>> {
  using left_type = fork_detail::branch_result_t<Left>;
  using right_type = fork_detail::branch_result_t<Right>;
  using right_function = std::remove_reference_t<Right>;
  fork_detail::check_callable(left);
  fork_detail::check_callable(right);
  fork_detail::value_box<left_type> left_value;
  fork_detail::value_box<right_type> right_value;

  fork_detail::fork_thread_state* state = fork_detail::thread_state();
  // relaxed: the frame stack is shared with this thread's ping handler only (fork_state.hpp).
  fork_detail::latent_frame** const slot = state->top.load(std::memory_order_relaxed);
  if (slot == state->limit) [[unlikely]] {
    // Not a worker, or the frame stack is full (a very deep recursion): serially.
    left_value.fill(left);
    right_value.fill(right);
    return {left_value.take(), right_value.take()};
  }

  // relaxed: see above.
  fork_detail::fork_frame<right_function, right_type> frame(
      right, state->epoch.load(std::memory_order_relaxed));
  fork_detail::push_frame(state, slot, &frame);
  if (fork_detail::count_down(state, 1)) [[unlikely]] fork_detail::on_countdown(state);
  try {
    left_value.fill(left);
  } catch (...) {
    fork_detail::pop_frame(state, slot);
    fork_detail::settle_after_exception(state, frame);
    if (fork_detail::published_work(frame) != nullptr) frame.work().~right_work();
    throw;
  }
  fork_detail::pop_frame(state, slot);

  fork_detail::delegated_work* const published = fork_detail::published_work(frame);
  if (published == nullptr) [[likely]] {
    right_value.fill(right);
  } else if (fork_detail::withdraw(state, published)) {
    frame.work().~right_work();  // nobody took it: as if it had never been offered
    right_value.fill(right);
  } else {
    fork_detail::wait_for_merge(state, published);
    auto& work = frame.work();
    if (work.error) {
      std::exception_ptr error = std::move(work.error);
      work.~right_work();
      std::rethrow_exception(std::move(error));
    }
    right_value.adopt(work.result);
    work.~right_work();
  }
  return {left_value.take(), right_value.take()};
}

// Runs `function` on one of `rt`'s workers and returns its result: inline on a worker of `rt`,
// otherwise spawned there while the calling thread blocks. The entry point for fork-join
// computations started from plain threads. From a worker of another runtime, or from inside any
// task (an embedded executor's, whose ticking thread cannot block either), it is a usage_error,
// raised before anything is spawned.
template <class F>
  requires std::invocable<F&>
decltype(auto) run_on(runtime& rt, F&& function) {
  fork_detail::check_callable(function);
  if (detail::current_executor_index(rt.core()) >= 0) return std::invoke(function);
  if (detail::on_worker_thread()) {
    throw usage_error("spindle: run_on(rt, ...) from a worker of another runtime or a task");
  }
  return rt.spawn([&function]() -> decltype(auto) { return std::invoke(function); }).join();
}

// fork_join on `rt`: from a plain thread, blocks until both branches are done.
template <class Left, class Right>
  requires std::invocable<Left&> && std::invocable<Right&>
auto fork_join(runtime& rt, Left&& left, Right&& right) {
  return run_on(rt, [&] { return fork_join(left, right); });
}

}  // namespace spindle
