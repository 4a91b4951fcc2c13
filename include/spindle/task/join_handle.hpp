// join_handle<T>: the owner's handle to a spawned task.
//
//   co_await std::move(handle)  - inside a task: waits for the result (or rethrows the task's
//                                 exception, or throws task_cancelled); consumes the handle.
//   handle.join()               - on a plain thread: blocks for the same outcome. On a worker
//                                 thread of a runtime it throws usage_error (it would block an
//                                 executor; await instead).
//   handle.cancel()             - requests cancellation (see task/cancellation.hpp).
//   handle.detach()             - gives the task up: it runs to completion on its own.
//   handle.status()/is_finished - polls without waiting.
// A handle that was joined or detached is empty: joining or awaiting it again throws
// usage_error. Dropping a handle detaches the task (it keeps running), like std::jthread's
// opposite and like Tokio's JoinHandle.
//
// One waiter at a time. A handle is not shared: an await or a join takes the handle's reference
// when it starts (an atomic exchange), so the handle is empty while the wait lasts. A second
// await or join of the same handle meanwhile, from any task or thread, races for nothing: it
// finds the handle empty and throws usage_error, every time, whether the task is running or
// finished; of two racing awaits/joins exactly one wins. (Other calls on a handle while another
// thread awaits it - status(), cancel() - are a data race like on any object; they too find it
// empty and throw usage_error.)
// A wait that ends without the outcome gives the reference back: an await cancelled (the
// awaiting task's cancellation, a timeout around it) throws task_cancelled and leaves the handle
// as it was, so the owner may await, join, cancel or detach it again. A refused join (on a
// worker) does not take it at all. An await whose frame is destroyed while it waits (runtime
// shutdown) drops the reference: the handle stays empty.
//
// Identity: `id()` is the task's generational id (slot index + serial, task_table.hpp): once the
// task completes its slot's serial moves on, so an id kept around never names a newer task
// (runtime::is_live(id) tells). The handle itself holds a counted reference to the task's
// state, so a handle can never reach a different task either.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

namespace detail {

// A spawned task whose body is a task<T> coroutine (the root of its chain of awaits).
template <class T>
class spawned_task : public spawned_task_base {
 public:
  static spawned_task* create(task_host& host, task<T> body) {
    void* memory = core::allocate_frame(sizeof(spawned_task));
    return ::new (memory) spawned_task(host, std::move(body));
  }
  // The outcome of a completed task: its value, or its exception rethrown.
  T take_result() { return take_result_(this); }

 protected:
  using take_function = T (*)(spawned_task*);
  spawned_task(task_host& host, destroy_function destroy, frame_function destroy_frame,
               take_function take) noexcept
      : spawned_task_base(host, {}, destroy, destroy_frame), take_result_(take) {}

 private:
  spawned_task(task_host& host, task<T> body) noexcept
      : spawned_task_base(host, body.handle(), &destroy_self, &destroy_body),
        take_result_(&take_from_body),
        body_(std::move(body)) {
    body_.handle().promise().set_root(this);
  }
  static T take_from_body(spawned_task* self) { return self->body_.handle().promise().take_result(); }
  static void destroy_body(spawned_task_base* self) noexcept {
    static_cast<spawned_task*>(self)->body_ = task<T>();
  }
  static void destroy_self(spawned_task_base* self) noexcept {
    auto* typed = static_cast<spawned_task*>(self);
    typed->~spawned_task();
    core::deallocate_frame(typed);
  }
  take_function take_result_;
  task<T> body_;
};

// A spawned task whose body is a plain callable: one allocation, no coroutine frame, run
// directly by the executor (what foreign threads submit most often).
template <class T, class F>
class spawned_function final : public spawned_task<T> {
  using base = spawned_task<T>;

 public:
  static spawned_function* create(task_host& host, F function) {
    void* memory = core::allocate_frame(sizeof(spawned_function));
    return ::new (memory) spawned_function(host, std::move(function));
  }

 private:
  spawned_function(task_host& host, F function)
      : base(host, &destroy_self, &destroy_function, &take_stored), function_(std::move(function)) {
    static const core::runnable_vtable table = {&run_entry, &spawned_task_base::drop_entry};
    this->vtable = &table;
  }
  static void run_entry(core::runnable* r) noexcept {
    auto* self = static_cast<spawned_function*>(r);
    if (!self->begin_function_run()) return;  // cancelled before it ran: it never runs
    try {
      if constexpr (std::is_void_v<T>) {
        (*self->function_)();
      } else {
        ::new (static_cast<void*>(&self->value_)) T((*self->function_)());
        self->has_value_ = true;
      }
    } catch (...) {
      self->exception_ = std::current_exception();
    }
    self->function_.reset();
    self->finish_function_run(self->exception_ ? spawned_task_base::outcome_kind::exception
                                               : spawned_task_base::outcome_kind::value);
  }
  static T take_stored(base* task) {
    auto* self = static_cast<spawned_function*>(task);
    if (self->exception_) std::rethrow_exception(self->exception_);
    if constexpr (!std::is_void_v<T>) return std::move(*std::launder(reinterpret_cast<T*>(&self->value_)));
  }
  static void destroy_function(spawned_task_base* self) noexcept {
    static_cast<spawned_function*>(self)->function_.reset();
  }
  static void destroy_self(spawned_task_base* self) noexcept {
    auto* typed = static_cast<spawned_function*>(self);
    typed->~spawned_function();
    core::deallocate_frame(typed);
  }
  ~spawned_function() {
    if constexpr (!std::is_void_v<T>) {
      if (has_value_) std::launder(reinterpret_cast<T*>(&value_))->~T();
    }
  }

  std::optional<F> function_;
  std::exception_ptr exception_;
  struct empty {};
  using storage = std::conditional_t<std::is_void_v<T>, empty, T>;
  alignas(storage) unsigned char value_[sizeof(storage)];
  bool has_value_ = false;
};

// Blocks a plain thread until a task completes.
// States of `signalled`: 0 waiting, 1 woken (the waker may still be notifying), 2 the waker
// is done with this object. The waiter returns only at 2, so the waker never touches a waker
// object that the returning thread has already popped off its stack.
struct thread_waker : completion_waker {
  std::atomic<std::uint32_t> signalled{0};
  thread_waker() noexcept : completion_waker{&wake_thread} {}
  static void wake_thread(completion_waker* self) noexcept {
    auto* w = static_cast<thread_waker*>(self);
    // release: the joined task's outcome (already published) is visible after the wait.
    w->signalled.store(1, std::memory_order_release);
    w->signalled.notify_one();
    w->signalled.store(2, std::memory_order_release);  // release: last touch of *w
  }
  void wait() noexcept {
    // acquire: pairs with the releases above.
    for (std::uint32_t seen; (seen = signalled.load(std::memory_order_acquire)) != 2;) {
      if (seen == 0) {
        signalled.wait(0, std::memory_order_acquire);
      } else {
        core::cpu_relax();  // between the waker's notify and its final store: a few cycles
      }
    }
  }
};

bool on_worker_thread() noexcept;

// Awaiting a spawned task from another task: a cancellable wait (S2/S3 in spawned_task.hpp).
// The awaiter owns one reference to the target (taken from the handle when the await started,
// join_handle.hpp): released when the frame goes while waiting, else handed back (taken out with
// take_target) by the handle's awaiter.
class join_awaiter_base : public completion_waker, public cancellable_wait {
 public:
  explicit join_awaiter_base(spawned_task_base* target) noexcept
      : completion_waker{&wake_joiner}, target_(target) {}
  join_awaiter_base(const join_awaiter_base&) = delete;
  join_awaiter_base& operator=(const join_awaiter_base&) = delete;
  // Destroyed while suspended (shutdown abandons the joiner before the target): withdraw, so
  // the target's completion does not wake a destroyed frame; then drop our reference (S4: a
  // registered joiner holds one, so the withdrawal comes first).
  ~join_awaiter_base() {
    if (registered_) target_->withdraw_joiner();
    if (target_ != nullptr) target_->release();
  }
  // Complete: at once, unless the cooperative budget is used up (await_suspend then yields).
  bool await_ready() const noexcept {
    return target_->is_complete() && cooperative_await::may_complete_inline();
  }
  bool await_suspend(std::coroutine_handle<> h);
  bool try_cancel() noexcept override;

 protected:
  void finish_wait();
  // The reference, out of the awaiter (which then releases nothing).
  spawned_task_base* take_target() noexcept { return std::exchange(target_, nullptr); }
  spawned_task_base* target_;

 private:
  static void wake_joiner(completion_waker* self) noexcept;
  spawned_task_base* joiner_ = nullptr;
  bool cancelled_ = false;
  bool registered_ = false;  // registered as target_'s joiner and not yet resumed (owner-side)
};

}  // namespace detail

template <class T>
class [[nodiscard]] join_handle {
 public:
  join_handle() noexcept = default;
  explicit join_handle(detail::spawned_task<T>* task) noexcept : task_(task) {}
  join_handle(join_handle&& other) noexcept : task_(other.take_or_null()) {}
  join_handle& operator=(join_handle&& other) noexcept {
    if (this != &other) {
      reset();
      // relaxed: the owner's own handle; see "One waiter at a time" for sharing.
      task_.store(other.take_or_null(), std::memory_order_relaxed);
    }
    return *this;
  }
  join_handle(const join_handle&) = delete;
  join_handle& operator=(const join_handle&) = delete;
  ~join_handle() { reset(); }

  bool valid() const noexcept {
    return task_.load(std::memory_order_acquire) != nullptr;  // acquire: pairs with give_back
  }
  task_id id() const { return checked()->id(); }
  bool is_finished() const { return checked()->is_complete(); }
  task_status status() const { return checked()->status(); }
  void cancel() const { checked()->request_cancel(); }
  void detach() noexcept { reset(); }

  // Blocking join from a plain thread.
  T join() {
    checked();
    if (detail::on_worker_thread()) {
      throw usage_error("spindle: join_handle::join() on a worker thread; use co_await");
    }
    detail::spawned_task<T>* task = take();  // one waiter at a time (header)
    detail::thread_waker waiter;
    if (task->register_joiner(&waiter)) waiter.wait();
    return consume(task);
  }

  class awaiter : public detail::join_awaiter_base {
   public:
    explicit awaiter(join_handle& owner) : join_awaiter_base(owner.take()), owner_(owner) {}
    T await_resume() {
      try {
        finish_wait();
      } catch (...) {
        owner_.give_back(static_cast<detail::spawned_task<T>*>(take_target()));  // cancelled
        throw;
      }
      return consume(static_cast<detail::spawned_task<T>*>(take_target()));
    }

   private:
    join_handle& owner_;
  };
  awaiter operator co_await() & { return awaiter(*this); }
  awaiter operator co_await() && { return awaiter(*this); }

 private:
  detail::spawned_task<T>* checked() const {
    // acquire: a reference given back by a cancelled await of another thread is whole.
    detail::spawned_task<T>* task = task_.load(std::memory_order_acquire);
    if (task == nullptr) throw empty_error();
    return task;
  }
  static usage_error empty_error() {
    return usage_error(
        "spindle: empty join_handle (already joined, detached, moved from, or awaited or joined "
        "by someone else right now)");
  }
  // The handle's reference, for one waiter: exactly one of racing takers gets it.
  detail::spawned_task<T>* take() {
    detail::spawned_task<T>* task = take_or_null();
    if (task == nullptr) throw empty_error();
    return task;
  }
  detail::spawned_task<T>* take_or_null() noexcept {
    // acq_rel: one winner among racing takers; the winner sees what the giver wrote.
    return task_.exchange(nullptr, std::memory_order_acq_rel);
  }
  void give_back(detail::spawned_task<T>* task) noexcept {
    // release: pairs with the acquire of the next taker. The handle is empty here (we took it).
    task_.store(task, std::memory_order_release);
  }
  // Completed: hand out the outcome and drop the reference.
  static T consume(detail::spawned_task<T>* t) {
    struct releaser {
      detail::spawned_task<T>* task;
      ~releaser() { task->release(); }
    } guard{t};
    if (t->outcome() == detail::spawned_task_base::outcome_kind::cancelled) throw task_cancelled();
    return t->take_result();
  }
  void reset() noexcept {
    if (detail::spawned_task<T>* task = take_or_null()) task->release();
  }
  std::atomic<detail::spawned_task<T>*> task_{nullptr};
};

}  // namespace spindle
