// Named tasks (SPEC T6; seed 004 "NamedFuture"): spawn a top-level task under a name, and wait
// for it by that name from anywhere on the same host.
//
//   spindle::spawn_named("index-rebuild", rebuild_index());     // inside a task or on a worker
//   rt.spawn_named("index-rebuild", rebuild_index());           // any thread
//   ...
//   co_await spindle::wait_named("index-rebuild");   // until no task of that name is live
//
// Why: the seed's tasks create new top-level tasks (so that timeouts, slots and tidy destructors
// apply to them) and later code that has no handle, often written by someone else, must wait for
// them. A name is that shared handle. Names are per host (a runtime, an embedded executor).
//
// Semantics
//   - Several live tasks may share a name; wait_named returns once none of them is live (at
//     once if none is). A task is live from spawn until it completes (tidy destructors included:
//     the name is released by a completion hook, before the outcome is published).
//   - wait_named is a cancellation point (throws task_cancelled). It says nothing about the
//     outcome: join the handle for that.
//   - live_named(name) is a snapshot count.
//
// Registry: one per host (task_host::names): a mutex around a map from name to (live count,
// waiters). The waiters are cancellable waits (spawned_task.hpp S3); lock order task lock ->
// registry lock; waking happens after the registry lock is released.
#pragma once

#include <coroutine>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "spindle/core/intrusive_list.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/task/task_extras.hpp"

namespace spindle {

namespace detail {

class named_task_registry {
 public:
  class wait_awaiter;

  // Spawner, before the task is scheduled: one more live task named `name`.
  void add(const std::string& name);
  // Completion hook: one fewer; the last one wakes every waiter.
  void remove(const std::string& name) noexcept;
  std::size_t live(const std::string& name) const;
  // Every name with live tasks and how many (a snapshot under the lock; diagnostics).
  std::vector<std::pair<std::string, std::size_t>> live_names() const;

 private:
  struct entry;
  friend class wait_awaiter;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<entry>> entries_;  // guarded by mutex_
};

class named_task_registry::wait_awaiter : public cancellable_wait {
 public:
  explicit wait_awaiter(std::string name) noexcept : name_(std::move(name)) {}
  wait_awaiter(const wait_awaiter&) = delete;
  wait_awaiter& operator=(const wait_awaiter&) = delete;
  ~wait_awaiter();

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h);
  void await_resume();
  bool try_cancel() noexcept override;

  wait_awaiter* previous = nullptr;  // links in the entry's waiter list (registry lock)
  wait_awaiter* next = nullptr;

 private:
  friend class named_task_registry;
  std::string name_;
  named_task_registry* registry_ = nullptr;
  entry* entry_ = nullptr;             // registry lock: set while registered
  spawned_task_base* task_ = nullptr;  // the waiting task, set when it suspends
  bool cancelled_ = false;             // written by the winning canceller under the task lock
};

struct named_task_registry::entry {
  std::size_t live = 0;
  core::intrusive_list<wait_awaiter, &wait_awaiter::previous, &wait_awaiter::next> waiters;
};

// Releases a name when its task completes.
class name_release_hook final : public completion_hook {
 public:
  name_release_hook(named_task_registry& registry, std::string name)
      : registry_(registry), name_(std::move(name)) {}
  void on_complete() noexcept override { registry_.remove(name_); }

 private:
  named_task_registry& registry_;
  std::string name_;
};

}  // namespace detail

// Waits until no task named `name` is live on the caller's host. A cancellation point.
inline detail::named_task_registry::wait_awaiter wait_named(std::string name) {
  return detail::named_task_registry::wait_awaiter(std::move(name));
}

}  // namespace spindle
