// spindle::join_set<T>: a set of spawned children, joined in completion order.
//
//   spindle::join_set<int> set;
//   for (int i = 0; i < n; ++i) set.spawn(work(i));
//   while (std::optional<int> v = co_await set.next()) use(*v);   // completion order
//   // or: std::vector<int> all = co_await set.join_all();
//   // or, knowing which child each outcome came from (spawn returns its task_id):
//   while (auto done = co_await set.next_with_id()) use(done->id, done->get());
//
// Design (docs/design/time.md, "join_set")
//   Participants: the owner (the task holding the set: spawn, next, cancel_all, destruction),
//   the children (spawned tasks; each completes on whatever executor runs it), and cancellers of
//   the owner (any thread, through the owner's cancellable wait in next()).
//   Shared state: a refcounted `join_set_core` (src/task/join_set.cpp) with one mutex guarding
//   two intrusive lists of child nodes, `running` and `completed`, the waiting next() (if any)
//   and a `closed` flag. Each node is the child's completion_waker and holds the reference the
//   join handle would hold. The child's joiner is registered before the child is first
//   scheduled, so every completion is seen: a value, an exception, a cancellation (including a
//   child cancelled before it ever ran, whose body never runs) and an abandonment at shutdown.
//   A completing child moves its node to `completed` and wakes the waiting next(), if any.
//   References on the core: one for the set, one per child not yet completed, so a child that
//   outlives its set (cancelled, still unwinding) finds the core alive and frees its own node.
//   next() is a cancellable wait (S3): exactly one of "a child completed" (the completer took the
//   waiter out under the mutex) and "the owner was cancelled" (try_cancel took it out) wakes the
//   owner. Lock order: owner task lock -> core mutex (try_cancel); the completer takes the core
//   mutex and then wakes, holding nothing. shutdown() uses the same waiter slot, not
//   cancellable, and is woken only by the completion that empties `running`.
//
// Semantics
//   - next(): the outcome of one completed child, in completion order: its value, or its
//     exception rethrown, or task_cancelled if it was cancelled; std::nullopt (void: false) when
//     the set is empty. If the owner itself is cancelled while waiting, next() throws
//     task_cancelled and no child is consumed. next() is always a cancellation point.
//   - join_all(): next() until empty; the values in completion order (void: nothing). The first
//     child exception propagates; the other children stay in the set.
//   - cancel_all(): requests cancellation of every child still running; their outcomes still come
//     out of next() (usually task_cancelled).
//   - Destroying the set (normally, or because the owner was cancelled and unwinds) cancels
//     every child still running; it cannot wait for them (a destructor cannot suspend), so they
//     finish unwinding on their own. Children must therefore not use objects of the owner's
//     frame, or the owner should `co_await set.shutdown()` first: it cancels every child and
//     waits for all of them, even if the owner is being cancelled.
//   - next_with_id(): as next(), but resumes with a joined_child: the child's id (the task_id
//     spawn() returned, as Tokio's join_next_with_id), its status and its outcome, which get()
//     returns or rethrows. A failed or cancelled child is handed out like a value, with its
//     id: nothing is thrown until get(). Still throws task_cancelled if the owner itself is
//     cancelled while waiting.
//   - size(): children spawned and not yet handed out by next().
//   - A set belongs to one task: spawn/next/cancel_all from one task at a time. spawn() works on
//     a runtime worker (the current runtime) or anywhere with spawn(runtime&, task).
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "spindle/core/errors.hpp"
#include "spindle/core/intrusive_list.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

namespace detail {

// Waits for `target` to complete without being a cancellation point: the owner's cancellation
// does not interrupt it. For structured cleanup (a parent that must not return before its child).
class completion_awaiter : public completion_waker {
 public:
  explicit completion_awaiter(spawned_task_base& target) noexcept
      : completion_waker{&wake_waiter}, target_(target) {}
  completion_awaiter(const completion_awaiter&) = delete;
  completion_awaiter& operator=(const completion_awaiter&) = delete;
  // Destroyed while suspended (the runtime abandons the waiter at shutdown, the target later):
  // withdraw, so the target's completion does not wake a destroyed frame.
  ~completion_awaiter() {
    if (registered_) target_.withdraw_joiner();
  }
  bool await_ready() const noexcept {
    return target_.is_complete() && cooperative_await::may_complete_inline();
  }
  bool await_suspend(std::coroutine_handle<> h);
  void await_resume() noexcept { registered_ = false; }

 private:
  static void wake_waiter(completion_waker* self) noexcept;
  spawned_task_base& target_;
  spawned_task_base* waiter_ = nullptr;
  bool registered_ = false;  // owner-side: registered as the target's joiner, not yet resumed
};

class join_set_core;

// One child: its completion waker and the reference a join handle would hold.
struct join_set_child : completion_waker {
  join_set_core* owner = nullptr;
  spawned_task_base* task = nullptr;
  join_set_child* previous = nullptr;
  join_set_child* next = nullptr;
  join_set_child() noexcept;
};

// Releases a consumed child node (its task reference, then the node) when it goes out of scope.
struct join_set_child_release {
  join_set_child* child;
  ~join_set_child_release();
};

// The shared, refcounted state (see the design comment above). Non-template.
class join_set_core {
 public:
  static join_set_core* create();  // one reference, the set's
  // Owner: a node for a child about to be prepared (allocation first, so a failed spawn leaks
  // nothing); then attach() it to the prepared, not yet scheduled task (noexcept).
  static join_set_child* allocate_child();
  static void free_child(join_set_child* child) noexcept;
  void attach(join_set_child* child, spawned_task_base& task) noexcept;
  void cancel_running() noexcept;
  // The set goes away: cancels running children, frees unconsumed ones, drops the set's ref.
  void close() noexcept;

  // The awaiter behind next() and shutdown().
  //   mode::next_child: a cancellable wait (S3) for one completed child; resumes with it (the
  //     caller releases it) or with null when the set is empty.
  //   mode::all_children: not a cancellation point (structured cleanup); cancels every running
  //     child, waits until none is running, frees every unconsumed outcome, resumes with null.
  enum class mode { next_child, all_children };
  class next_wait : public cancellable_wait {
   public:
    next_wait(join_set_core& core, mode m) noexcept : core_(core), mode_(m) {}
    next_wait(const next_wait&) = delete;
    next_wait& operator=(const next_wait&) = delete;
    ~next_wait();
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h);
    join_set_child* await_resume();
    bool try_cancel() noexcept override;

   private:
    friend class join_set_core;
    // Whether a completion with `running_` in this state should wake this waiter.
    bool satisfied_by_locked() const noexcept;
    join_set_core& core_;
    spawned_task_base* task_ = nullptr;
    const mode mode_;
    bool suspended_ = false;   // owner-side: suspended and not yet resumed
    bool cancelled_ = false;   // written by the winning canceller under the task lock
  };

 private:
  using child_list =
      core::intrusive_list<join_set_child, &join_set_child::previous, &join_set_child::next>;
  friend struct join_set_child;
  join_set_core() = default;
  static void on_child_complete(completion_waker* self) noexcept;
  void release() noexcept;
  // Appends every running child's task, with an extra reference each; mutex_ held.
  void collect_running_locked(std::vector<spawned_task_base*>& out);

  std::mutex mutex_;
  child_list running_;     // guarded by mutex_
  child_list completed_;   // guarded by mutex_
  next_wait* waiter_ = nullptr;  // guarded by mutex_
  bool closed_ = false;          // guarded by mutex_
  std::atomic<std::uint32_t> references_{1};
};

}  // namespace detail

// One child's outcome as join_set::next_with_id() hands it out: which child, and how it ended.
template <class T>
class joined_child {
 public:
  using value_holder = std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;

  joined_child(task_id id, task_status status, value_holder value, std::exception_ptr error)
      : id(id), status(status), value_(std::move(value)), error_(std::move(error)) {}

  task_id id;          // as spawn() returned it
  task_status status;  // completed, failed or cancelled

  // The child's value; its exception rethrown (failed); task_cancelled (cancelled).
  T get() {
    if (error_) std::rethrow_exception(error_);
    if constexpr (!std::is_void_v<T>) return std::move(*value_);
  }

 private:
  value_holder value_;
  std::exception_ptr error_;
};

template <class T>
class join_set {
  static_assert(!std::is_reference_v<T>, "spindle::join_set<T&> is not supported");

 public:
  // What next() resumes with: the value of a completed child, or nothing when empty.
  using next_result = std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;

  join_set() : core_(detail::join_set_core::create()) {}
  join_set(join_set&& other) noexcept
      : core_(std::exchange(other.core_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  join_set& operator=(join_set&& other) noexcept {
    if (this != &other) {
      close();
      core_ = std::exchange(other.core_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  join_set(const join_set&) = delete;
  join_set& operator=(const join_set&) = delete;
  // Cancels every child still running (structured cancellation), without waiting.
  ~join_set() { close(); }

  // Spawns `body` on the current runtime (on a worker) / on `rt` (anywhere). Returns the
  // child's id, which next_with_id() hands back with its outcome.
  task_id spawn(task<T> body, spawn_location where = spawn_location::current()) {
    return spawn_into(
        detail::current_host_or_throw(
            "spindle: join_set::spawn(task) outside a task or worker; pass the runtime"),
        std::move(body), where);
  }
  task_id spawn(runtime& rt, task<T> body, spawn_location where = spawn_location::current()) {
    return spawn_into(detail::state_of(rt), std::move(body), where);
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  // Requests cancellation of every running child; their outcomes still come out of next().
  void cancel_all() noexcept {
    if (core_ != nullptr) core_->cancel_running();
  }

  class [[nodiscard]] next_awaiter : public detail::join_set_core::next_wait {
   public:
    explicit next_awaiter(join_set& owner)
        : next_wait(*owner.checked_core(), detail::join_set_core::mode::next_child),
          owner_(owner) {}
    next_result await_resume() {
      detail::join_set_child* child = next_wait::await_resume();
      if (child == nullptr) return next_result{};
      --owner_.size_;
      detail::join_set_child_release release{child};
      auto* typed = static_cast<detail::spawned_task<T>*>(child->task);
      // acquire was done by the completer/mutex: the child is complete, its outcome published.
      if (typed->outcome() == detail::spawned_task_base::outcome_kind::cancelled) {
        throw task_cancelled();
      }
      if constexpr (std::is_void_v<T>) {
        typed->take_result();
        return true;
      } else {
        return next_result(typed->take_result());
      }
    }

   private:
    join_set& owner_;
  };

  // The next child to complete (see the design comment). A cancellation point.
  next_awaiter next() { return next_awaiter(*this); }

  class [[nodiscard]] next_with_id_awaiter : public detail::join_set_core::next_wait {
   public:
    explicit next_with_id_awaiter(join_set& owner)
        : next_wait(*owner.checked_core(), detail::join_set_core::mode::next_child),
          owner_(owner) {}
    std::optional<joined_child<T>> await_resume() {
      detail::join_set_child* child = next_wait::await_resume();
      if (child == nullptr) return std::nullopt;
      --owner_.size_;
      detail::join_set_child_release release{child};
      auto* typed = static_cast<detail::spawned_task<T>*>(child->task);
      const task_id id = typed->id();
      // As in next(): the child is complete, its outcome published.
      const task_status status = typed->status();
      if (status == task_status::cancelled) {
        return joined_child<T>(id, status, {}, std::make_exception_ptr(task_cancelled()));
      }
      try {
        if constexpr (std::is_void_v<T>) {
          typed->take_result();
          return joined_child<T>(id, status, true, nullptr);
        } else {
          return joined_child<T>(id, status, typed->take_result(), nullptr);
        }
      } catch (...) {
        return joined_child<T>(id, status, {}, std::current_exception());
      }
    }

   private:
    join_set& owner_;
  };

  // As next(), with which child it was (see the design comment). A cancellation point.
  next_with_id_awaiter next_with_id() { return next_with_id_awaiter(*this); }

  // Every remaining child's value in completion order (void: just waits for all).
  // (The loops take the co_await out of the loop condition: g++ 12.2 miscompiles
  // `while (co_await x)`; such a coroutine never runs past its initial suspend.)
  task<std::vector<T>> join_all()
    requires(!std::is_void_v<T>)
  {
    std::vector<T> values;
    values.reserve(size_);
    for (;;) {
      std::optional<T> value = co_await next();
      if (!value) break;
      values.push_back(std::move(*value));
    }
    co_return values;
  }
  task<void> join_all()
    requires std::is_void_v<T>
  {
    for (;;) {
      const bool got_one = co_await next();
      if (!got_one) break;
    }
  }

  class [[nodiscard]] shutdown_awaiter : public detail::join_set_core::next_wait {
   public:
    explicit shutdown_awaiter(join_set& owner)
        : next_wait(*owner.checked_core(), detail::join_set_core::mode::all_children),
          owner_(owner) {}
    void await_resume() {
      next_wait::await_resume();
      owner_.size_ = 0;
    }

   private:
    join_set& owner_;
  };

  // Cancels every child and waits until all have completed, discarding their outcomes. Not a
  // cancellation point: it also waits in an owner that is being cancelled (structured cleanup).
  // An awaiter rather than a task, so that awaiting it cannot itself be interrupted.
  shutdown_awaiter shutdown() { return shutdown_awaiter(*this); }

 private:
  detail::join_set_core* checked_core() const {
    if (core_ == nullptr) throw usage_error("spindle: join_set used after being moved from");
    return core_;
  }
  task_id spawn_into(detail::task_host& state, task<T> body, const spawn_location& where) {
    detail::join_set_core* core = checked_core();
    detail::host_entry entry(state);  // as for any spawn from outside (task/runtime.hpp)
    if (entry.refused()) throw runtime_stopped();
    detail::join_set_child* child = detail::join_set_core::allocate_child();
    detail::spawned_task<T>* spawned;
    try {
      spawned = detail::prepare_spawn(state, std::move(body), where);
    } catch (...) {
      detail::join_set_core::free_child(child);
      throw;
    }
    core->attach(child, *spawned);  // registers the joiner before the child can run
    ++size_;
    const task_id id = spawned->id();  // before scheduling: then it may complete and go
    detail::schedule_prepared(state, spawned);
    return id;
  }
  void close() noexcept {
    if (core_ != nullptr) std::exchange(core_, nullptr)->close();
    size_ = 0;
  }

  detail::join_set_core* core_;
  std::size_t size_ = 0;
};

}  // namespace spindle
