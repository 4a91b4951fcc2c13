// task<T>: a lazy coroutine producing a T (any type: move-only, references, void).
//
// A task does nothing until it is awaited (co_await t, inside another task) or spawned
// (runtime::spawn / spindle::spawn, which turns it into a spawned task with a join handle).
// Awaiting a task starts it and resumes the awaiter when it finishes, through the trampoline
// (task/trampoline.hpp), so chains of any length use constant stack. An exception escaping the
// task's body is rethrown in whoever awaits it.
//
// A task<T> owns its coroutine frame; it is move-only and destroys the frame when destroyed.
// Awaiting consumes it (co_await std::move(t) or co_await make_task()).
//
// The cooperative budget (C6, spawned_task.hpp): each await of a child task consumes one unit of
// the running spawned task's budget, as every other await does; when it runs out the spawned task
// yields to its executor before the child starts (a pending cancellation is delivered there
// instead), so a task whose awaits never actually wait still lets others run.
#pragma once

#include <cassert>
#include <coroutine>
#include <exception>
#include <new>
#include <type_traits>
#include <utility>

#include "spindle/core/frame_allocator.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/task/trampoline.hpp"

namespace spindle {

template <class T = void>
class task;

namespace detail {

class promise_base {
 public:
  std::suspend_always initial_suspend() const noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() const noexcept { return false; }
    template <class Promise>
    void await_suspend(std::coroutine_handle<Promise> finished) noexcept {
      promise_base& p = finished.promise();
      if (p.continuation_) {
        transfer_to(p.continuation_);
      } else if (p.root_ != nullptr) {
        // The root of a spawned task: publish the outcome; this may free the frame.
        p.root_->on_root_finished(p.root_outcome());
      }
    }
    void await_resume() const noexcept {}
  };
  final_awaiter final_suspend() const noexcept { return {}; }

  void unhandled_exception() noexcept { exception_ = std::current_exception(); }

  static void* operator new(std::size_t size) { return core::allocate_frame(size); }
  static void operator delete(void* pointer) noexcept { core::deallocate_frame(pointer); }
  static void operator delete(void* pointer, std::size_t) noexcept {
    core::deallocate_frame(pointer);
  }

  void set_continuation(std::coroutine_handle<> c) noexcept { continuation_ = c; }
  void set_root(spawned_task_base* root) noexcept { root_ = root; }
  const std::exception_ptr& exception() const noexcept { return exception_; }

  spawned_task_base::outcome_kind root_outcome() const noexcept {
    if (!exception_) return spawned_task_base::outcome_kind::value;
    try {
      std::rethrow_exception(exception_);
    } catch (const task_cancelled&) {
      return spawned_task_base::outcome_kind::cancelled;
    } catch (...) {
      return spawned_task_base::outcome_kind::exception;
    }
  }

 protected:
  void rethrow_if_failed() const {
    if (exception_) std::rethrow_exception(exception_);
  }

 private:
  std::coroutine_handle<> continuation_;
  spawned_task_base* root_ = nullptr;
  std::exception_ptr exception_;
};

template <class T>
class promise final : public promise_base {
 public:
  task<T> get_return_object() noexcept;

  template <class U>
    requires std::is_convertible_v<U&&, T>
  void return_value(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    ::new (static_cast<void*>(&storage_)) T(std::forward<U>(value));
    has_value_ = true;
  }

  T take_result() {
    rethrow_if_failed();
    assert(has_value_);
    return std::move(*std::launder(reinterpret_cast<T*>(&storage_)));
  }

  ~promise() {
    if (has_value_) std::launder(reinterpret_cast<T*>(&storage_))->~T();
  }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
  bool has_value_ = false;
};

template <class T>
class promise<T&> final : public promise_base {
 public:
  task<T&> get_return_object() noexcept;
  void return_value(T& value) noexcept { value_ = std::addressof(value); }
  T& take_result() {
    rethrow_if_failed();
    return *value_;
  }

 private:
  T* value_ = nullptr;
};

template <>
class promise<void> final : public promise_base {
 public:
  task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take_result() { rethrow_if_failed(); }
};

}  // namespace detail

template <class T>
class [[nodiscard]] task {
 public:
  using promise_type = detail::promise<T>;
  using value_type = T;
  using handle_type = std::coroutine_handle<promise_type>;

  task() noexcept = default;
  explicit task(handle_type h) noexcept : handle_(h) {}
  task(task&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() { reset(); }

  bool valid() const noexcept { return static_cast<bool>(handle_); }
  handle_type handle() const noexcept { return handle_; }
  handle_type release() noexcept { return std::exchange(handle_, nullptr); }

  struct awaiter {
    handle_type child;
    bool cancelled = false;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> parent) noexcept {
      child.promise().set_continuation(parent);
      if (detail::consume_cooperative_budget()) {
        // Budget exhausted: a suspension point. Deliver a pending cancellation here (without
        // starting the child), else let the executor run others first and resume in the child.
        if (auto* current = detail::spawned_task_base::current()) {
          if (current->cancellation_requested()) {
            cancelled = true;
            return false;  // resume the parent now; await_resume throws
          }
          return detail::cooperative_await::yield(*current, child);
        }
      }
      detail::transfer_to(child);
      return true;
    }
    decltype(auto) await_resume() {
      if (cancelled) throw task_cancelled();
      return child.promise().take_result();
    }
  };

  // Awaiting starts the task and yields its result (or rethrows its exception).
  // The task object keeps owning the frame; it is freed when the task object is destroyed.
  awaiter operator co_await() && noexcept {
    assert(handle_ && "spindle: awaiting an empty task");
    return awaiter{handle_};
  }
  awaiter operator co_await() & noexcept {
    assert(handle_ && "spindle: awaiting an empty task");
    return awaiter{handle_};
  }

 private:
  void reset() noexcept {
    if (handle_) handle_.destroy();
    handle_ = nullptr;
  }
  handle_type handle_;
};

namespace detail {
template <class T>
task<T> promise<T>::get_return_object() noexcept {
  return task<T>(std::coroutine_handle<promise<T>>::from_promise(*this));
}
template <class T>
task<T&> promise<T&>::get_return_object() noexcept {
  return task<T&>(std::coroutine_handle<promise<T&>>::from_promise(*this));
}
inline task<void> promise<void>::get_return_object() noexcept {
  return task<void>(std::coroutine_handle<promise<void>>::from_promise(*this));
}
}  // namespace detail

}  // namespace spindle
