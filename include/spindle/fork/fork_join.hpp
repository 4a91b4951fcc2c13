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
// Depth: each level costs native stack (about 112 bytes with g++ -O2 for a one-line recursion,
// more with bigger user frames and several times more under sanitizers): a worker's stack is
// `runtime_options::worker_stack_size` (default 8 MiB, about 74,000 such levels); plain
// fork_join on a plain thread uses that thread's own stack, run_on / fork_join(rt, ...) a
// worker's. The waiting owner helps only with pieces of its own computation (fork_state.hpp).
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

template <class Right, class Result>
struct fork_frame;

// The right continuation once published: runs the frame's `right` for the thief and fills the
// frame's result box (the owner reads it only after the merge, invariant M). Lives in the work
// slot of the frame's stack slot (fork_state.hpp, work_slot), not in the frame.
template <class Right, class Result>
struct right_work final : delegated_work {
  static void run(core::runnable* self) noexcept {
    auto* work = static_cast<right_work*>(self);
    {
      delegate_scope scope(work);  // the thread works for the piece's computation meanwhile
      try {
        work->frame->result.fill(*work->frame->right);
      } catch (...) {
        work->error = std::current_exception();
      }
    }
    finish_delegate(work);
  }
  static constexpr core::runnable_vtable vtable{&right_work::run, &drop_delegated};

  explicit right_work(fork_frame<Right, Result>* owner) noexcept
      : delegated_work(&vtable), frame(owner) {}
  fork_frame<Right, Result>* frame;
};

// The latent frame of one fork_join call: lives in fork_join's stack frame, one per recursion
// level, so it holds only what a promotion needs (the right branch, where its result goes).
template <class Right, class Result>
struct fork_frame final : latent_frame {
  using work_type = right_work<Right, Result>;
  static_assert(sizeof(work_type) <= work_slot_size &&
                alignof(work_type) <= work_slot_alignment);

  fork_frame(Right& function, std::uint64_t current_epoch) noexcept : right(&function) {
    promote = &fork_frame::promote_right;
    epoch = current_epoch;
  }
  static delegated_work* promote_right(latent_frame* base, void* storage) noexcept {
    return ::new (storage) work_type(static_cast<fork_frame*>(base));
  }
  static work_type& work(fork_thread_state* state, latent_frame** slot) noexcept {
    return *std::launder(static_cast<work_type*>(work_slot(state, slot)));
  }

  Right* right;
  value_box<Result> result;  // the right branch's, whoever runs it
};

// The rare ends of a fork_join whose right branch was published, out of line so that the call
// itself keeps few values alive across its left branch (each is stack the recursion pays per
// level, see "Depth" in fork-join.md): the owner takes the work back and runs the branch, or
// waits for the thief's merge.
template <class Frame>
[[gnu::noinline]] void join_published(fork_thread_state* state, latent_frame** slot,
                                      Frame& frame, delegated_work* published) {
  using work_type = typename Frame::work_type;
  if (withdraw(state, published)) {
    Frame::work(state, slot).~work_type();  // nobody took it: as if it had never been offered
    frame.result.fill(*frame.right);
    return;
  }
  wait_registered(state, slot, &frame, published);
  work_type& work = Frame::work(state, slot);
  if (work.error) {
    std::exception_ptr error = std::move(work.error);
    work.~work_type();
    std::rethrow_exception(std::move(error));
  }
  work.~work_type();
}

// The left branch threw: settles the right one (skipped, or waited for) before the exception
// goes on. The frame is the top one (the left branch's own frames are popped by now).
template <class Frame>
[[gnu::noinline]] void abandon_fork(Frame& frame) noexcept {
  using work_type = typename Frame::work_type;
  fork_thread_state* state = current_state;
  latent_frame** slot = state->top.load(std::memory_order_relaxed) - 1;  // relaxed: "Pings"
  pop_frame(state, slot);
  settle_after_exception(state, slot, frame);
  if (published_work(frame) != nullptr) Frame::work(state, slot).~work_type();
}

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

  fork_detail::fork_thread_state* state = fork_detail::thread_state();
  // relaxed: the frame stack is shared with this thread's ping handler only (fork_state.hpp).
  fork_detail::latent_frame** const slot = state->top.load(std::memory_order_relaxed);
  // relaxed: see above.
  fork_detail::fork_frame<right_function, right_type> frame(
      right, state->epoch.load(std::memory_order_relaxed));
  if (slot == state->limit) [[unlikely]] {
    // Not a worker, or the frame stack is full (a very deep recursion): serially.
    left_value.fill(left);
    frame.result.fill(right);
    return {left_value.take(), frame.result.take()};
  }

  fork_detail::push_frame(state, slot, &frame);
  if (fork_detail::count_down(state, 1)) [[unlikely]] fork_detail::on_countdown(state);
  try {
    left_value.fill(left);
  } catch (...) {
    fork_detail::abandon_fork(frame);
    throw;
  }
  // The state and the slot are kept across the left branch (two callee-saved registers), not
  // found again: the left branch popped every frame it pushed, so ours is the top one, in `slot`.
  // Finding them again (a TLS load, then `top` - 1) puts that load and the store-to-load
  // forwarding of `top` between every pop and the next push: fib 35 ran about 20% slower on one
  // worker (fork-join.md, "Depth"). Keeping them costs 16 bytes per level (96 -> 112 for fib).
  fork_detail::latent_frame** const top = slot;
  fork_detail::pop_frame(state, top);
  fork_detail::delegated_work* const published = fork_detail::published_work(frame);
  if (published == nullptr) [[likely]] {
    frame.result.fill(*frame.right);
  } else {
    fork_detail::join_published(state, top, frame, published);
  }
  return {left_value.take(), frame.result.take()};
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
