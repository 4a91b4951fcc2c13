// spindle::runtime: the multi-core runtime a program creates, and spawn().
//
//   spindle::runtime rt;                        // one executor per hardware thread
//   spindle::runtime rt({.workers = 4});
//   auto h = rt.spawn(my_task(42));             // from anywhere: P2C placement
//   int v = h.join();                           // block a plain thread on the result
//   int w = rt.block_on(my_task(7));            // spawn + join
//   // inside a task:
//   auto child = spindle::spawn(other());       // on the current executor (LIFO slot)
//   co_await std::move(child);
//
// The runtime owns a runtime_core (executors, queues, parking) and the task table: every
// spawned task has a slot from spawn to completion, so shutdown can destroy tasks that are
// suspended forever (and diagnostics can list them), and ids are generational.
//
// Shutdown (destructor or shutdown()): new spawns throw runtime_stopped; queued tasks are
// dropped and suspended tasks destroyed, each exactly once; their handles report cancelled.
// Destroying the runtime from one of its own workers does not deadlock: the shutdown starts and
// the last worker to leave finishes it. Functions posted with spawn() must not outlive objects
// they reference, as usual.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "spindle/core/errors.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/named_tasks.hpp"
#include "spindle/task/stop_token.hpp"
#include "spindle/task/task_host.hpp"
#include "spindle/task/task.hpp"

namespace spindle {

using runtime_options = core::runtime_options;
struct runtime_snapshot;

namespace detail {

// The task layer's per-runtime state, reachable from workers via runtime_core::layer_state():
// the task host of the multi-core runtime (its table shards are the executors).
struct runtime_state final : task_host {
  std::shared_ptr<core::runtime_core> core;
  // The executor families (diagnostics/metrics.hpp) in this host's registry, from the start
  // until this state is destroyed (after `core`'s users: the writer reads `core`, declared
  // before it), so the final figures stay readable after shutdown().
  spindle::diagnostics::registry::registration executor_metrics;
  // The snapshot's "executors" and "tasks" (task/snapshot.hpp); declared after `core`, so
  // dropped (waiting for a reader in progress) before the core goes.
  spindle::diagnostics::registry::registration executors_section;
  spindle::diagnostics::registry::registration tasks_section;
  spindle::diagnostics::registry::registration fork_join_section;  // written by the fork module
  explicit runtime_state(std::uint32_t executors) : task_host(executors) {}

  // task_host
  void schedule(core::runnable* r, core::schedule_hint hint) noexcept override {
    core->schedule(r, hint);
  }
  std::int32_t table_shard() const noexcept override;
  core::timer_service* timers_here() noexcept override;
  spindle::clock& clock() const noexcept override;
  bool stopping() const noexcept override { return core->stopping(); }
  entry enter() noexcept override;
  void leave() noexcept override { core->leave_from_outside(); }

  // A layer built on tasks (the actor system) keeps its per-runtime state here: created on
  // first use, shut down right after the tasks were abandoned, destroyed with this state.
  struct extension {
    virtual ~extension() = default;
    virtual void on_runtime_stopped() noexcept = 0;
  };
  // Returns the extension in `slot`, creating it with `make` on first use (thread-safe).
  template <class Make>
  extension& extension_at(std::size_t slot, Make&& make) {
    // acquire: pairs with the release store below (the object is fully built).
    if (extension* e = extension_pointers[slot].load(std::memory_order_acquire)) return *e;
    std::lock_guard guard(extension_mutex);
    if (!extensions[slot]) {
      extensions[slot] = make();
      extension_pointers[slot].store(extensions[slot].get(), std::memory_order_release);
    }
    return *extensions[slot];
  }
  void stop_extensions() noexcept;
  static constexpr std::size_t actor_extension = 0;
  static constexpr std::size_t extension_slots = 2;
  std::mutex extension_mutex;
  std::unique_ptr<extension> extensions[extension_slots];  // guarded by extension_mutex
  std::atomic<extension*> extension_pointers[extension_slots] = {};
};

// Index of the calling worker if it belongs to `core`'s runtime, else -1.
std::int32_t current_executor_index(const core::runtime_core& core) noexcept;

runtime_state* current_runtime_state() noexcept;

// The host of the task running on this thread, else the runtime of this worker thread, else
// null: where spindle::spawn, now() and join sets find what runs them.
task_host* current_task_host() noexcept;

// A spawned task created and entered in the table but not yet scheduled, so the caller can
// register a joiner or keep a raw reference before it can run. The caller then schedules it
// exactly once (schedule_prepared, or schedule_on for a specific executor). Holds the usual two
// references (running + handle). A caller that may be outside the host holds a host_entry from
// before this call until the task is scheduled: a shutdown's drain then waits for the schedule,
// so the task runs or ends cancelled (issue 14, item 1).
template <class T>
spawned_task<T>* prepare_spawn(task_host& host, task<T> body,
                               const spawn_location& where = spawn_location::current()) {
  if (!body.valid()) throw usage_error("spindle: spawn of an empty task");
  if (host.stopping()) throw runtime_stopped();
  auto* spawned = spawned_task<T>::create(host, std::move(body));
  spawned->enter_table(where);
  return spawned;
}
inline void schedule_prepared(task_host& host, spawned_task_base* spawned) noexcept {
  host.schedule(spawned, core::schedule_hint::spawn);
}

// A prepared task that must not run after all (setting it up further failed): it is scheduled
// cancelled, so it completes without starting and leaves the table the usual way.
inline void cancel_prepared(task_host& host, spawned_task_base* spawned) noexcept {
  spawned->request_cancel();
  schedule_prepared(host, spawned);
}

// spawn_in under a name (named_tasks.hpp): the name is live until the task completes.
template <class T>
join_handle<T> spawn_named_in(task_host& host, std::string name, task<T> body,
                              const spawn_location& where) {
  host_entry entry(host);
  if (entry.refused()) throw runtime_stopped();
  auto hook = std::make_unique<name_release_hook>(*host.names, name);
  auto* spawned = prepare_spawn(host, std::move(body), where);
  spawned->set_name(name);  // the snapshot's name (before the task is published)
  join_handle<T> handle(spawned);
  try {
    host.names->add(name);
  } catch (...) {
    cancel_prepared(host, spawned);
    throw;
  }
  try {
    spawned->add_completion_hook(hook.get());
    hook.release();
  } catch (...) {
    host.names->remove(name);
    cancel_prepared(host, spawned);
    throw;
  }
  schedule_prepared(host, spawned);
  return handle;
}

template <class T>
join_handle<T> spawn_in(task_host& state, task<T> body, const spawn_location& where) {
  host_entry entry(state);
  if (entry.refused()) throw runtime_stopped();
  auto* spawned = prepare_spawn(state, std::move(body), where);
  schedule_prepared(state, spawned);
  return join_handle<T>(spawned);
}

// spawn_in, with a std::stop_token whose stop cancels the task (task/stop_token.hpp).
template <class T>
join_handle<T> spawn_stoppable_in(task_host& state, task<T> body, std::stop_token token,
                                  const spawn_location& where) {
  host_entry entry(state);
  if (entry.refused()) throw runtime_stopped();
  auto* spawned = prepare_spawn(state, std::move(body), where);
  join_handle<T> handle(spawned);
  try {
    auto hook = std::make_unique<stop_request_hook>(*spawned, std::move(token));
    spawned->add_completion_hook(hook.get());
    hook.release();
  } catch (...) {
    cancel_prepared(state, spawned);
    throw;
  }
  schedule_prepared(state, spawned);
  return handle;
}

template <class T>
inline constexpr bool is_task_v = false;
template <class T>
inline constexpr bool is_task_v<task<T>> = true;

template <class F>
auto spawn_function_in(task_host& host, F function, const spawn_location& where) {
  using result = std::invoke_result_t<F&>;
  host_entry entry(host);  // as in prepare_spawn
  if (entry.refused() || host.stopping()) throw runtime_stopped();
  auto* spawned = spawned_function<result, F>::create(host, std::move(function));
  spawned->enter_table(where);
  host.schedule(spawned, core::schedule_hint::spawn);
  return join_handle<result>(spawned);
}

}  // namespace detail

class runtime {
 public:
  explicit runtime(runtime_options options = {});
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  // Spawns a task; from a worker of this runtime it goes to that executor's queue, from
  // anywhere else to the less loaded of two random executors. Throws runtime_stopped after
  // shutdown began.
  template <class T>
  join_handle<T> spawn(task<T> body, spawn_location where = spawn_location::current()) {
    return detail::spawn_in(*state_, std::move(body), where);
  }
  // As spawn(body), and the task is cancelled when `token`'s source requests stop (a token
  // already stopped: it never runs). task/stop_token.hpp.
  template <class T>
  join_handle<T> spawn(task<T> body, std::stop_token token,
                       spawn_location where = spawn_location::current()) {
    return detail::spawn_stoppable_in(*state_, std::move(body), std::move(token), where);
  }
  // Spawns a plain callable as a task (its result, or exception, is the task's outcome).
  template <class F>
    requires(!detail::is_task_v<std::remove_cvref_t<F>>) && std::invocable<std::decay_t<F>&>
  auto spawn(F&& function, spawn_location where = spawn_location::current()) {
    return detail::spawn_function_in(*state_, std::decay_t<F>(std::forward<F>(function)), where);
  }
  // Spawns under a name (task/named_tasks.hpp): wait_named(name) waits for it.
  template <class T>
  join_handle<T> spawn_named(std::string name, task<T> body, spawn_location where = spawn_location::current()) {
    return detail::spawn_named_in(*state_, std::move(name), std::move(body), where);
  }
  // Live tasks spawned under `name` (a snapshot).
  std::size_t live_named(const std::string& name) const { return state_->names->live(name); }
  // Spawns on one specific executor (its inbox); the task runs there first.
  template <class T>
  join_handle<T> spawn_on(std::uint32_t executor_index, task<T> body, spawn_location where = spawn_location::current());

  // Spawns and blocks the calling (plain) thread until the task finishes. From a worker or
  // inside a task it is a usage_error, raised before anything is spawned.
  template <class T>
  T block_on(task<T> body) {
    if (detail::on_worker_thread()) {
      throw usage_error("spindle: runtime::block_on on a worker thread or in a task; use co_await");
    }
    return spawn(std::move(body)).join();
  }

  // Adds one executor while running (C1); returns its index.
  std::uint32_t add_executor() { return state_->core->add_executor(); }
  std::uint32_t executor_count() const noexcept { return state_->core->executor_count(); }
  core::runtime_core& core() const noexcept { return *state_->core; }
  // Warnings about this runtime (diagnostics/warnings.hpp): hook, counts, strict failures.
  spindle::diagnostics::warning_hub& warnings() const noexcept { return state_->warnings; }
  // Number of spawned tasks not yet completed (a scan: for tests and diagnostics).
  std::size_t live_tasks() const noexcept { return state_->tasks.live_count(); }
  // Whether the task with this id is still live (ids are generational: never a newer task).
  bool is_live(task_id id) const noexcept { return state_->tasks.contains(id); }
  // The TCP port of this runtime's live view (diagnostics/server.hpp; runtime_options::
  // diagnostics.server_address or SPINDLE_DIAGNOSTICS), 0 when none is serving.
  std::uint16_t diagnostics_port() const noexcept;

  // Diagnostics (SPEC G1, task/snapshot.hpp): every executor and live task, read while the
  // runtime runs (it is not stopped; the copy is approximate, each record whole).
  runtime_snapshot snapshot() const;
  // The same as JSON, with every contributor's section (actors, dispatchers, ...):
  // diagnostics::snapshot_json(diagnostics_registry()).
  std::string snapshot_json() const;
  // Where contributors register their sections and metrics (diagnostics/registry.hpp).
  diagnostics::registry& diagnostics_registry() const noexcept {
    return state_->diagnostics_registry;
  }

  // Stops the runtime (see above). Idempotent; the destructor calls it.
  void shutdown() noexcept;

 private:
  friend class dispatcher;  // keeps the runtime's state alive while its submissions may run
  std::shared_ptr<detail::runtime_state> state_;
};

namespace detail {
// The task layer's state of `rt`.
inline runtime_state& state_of(runtime& rt) noexcept {
  return *static_cast<runtime_state*>(rt.core().layer_state());
}
// What runs the calling task (or the runtime of the calling worker); usage_error(what) elsewhere.
task_host& current_host_or_throw(
    const char* what = "spindle: needs a task, or a runtime worker; pass the runtime");
}  // namespace detail

template <class T>
join_handle<T> runtime::spawn_on(std::uint32_t executor_index, task<T> body,
                                 spawn_location where) {
  if (executor_index >= executor_count()) throw usage_error("spindle: no such executor");
  detail::host_entry entry(*state_);
  if (entry.refused()) throw runtime_stopped();
  auto* spawned = detail::prepare_spawn(*state_, std::move(body), where);
  state_->core->schedule_on(executor_index, spawned);
  return join_handle<T>(spawned);
}

// Spawns onto what runs the calling task (its runtime, or its embedded executor), or onto the
// runtime of the calling worker thread. Throws usage_error anywhere else.
template <class T>
join_handle<T> spawn(task<T> body, spawn_location where = spawn_location::current()) {
  detail::task_host* host = detail::current_task_host();
  if (host == nullptr) throw usage_error("spindle::spawn called outside a task or runtime worker");
  return detail::spawn_in(*host, std::move(body), where);
}
// spawn(body), cancelled when `token`'s source requests stop (task/stop_token.hpp).
template <class T>
join_handle<T> spawn(task<T> body, std::stop_token token,
                     spawn_location where = spawn_location::current()) {
  detail::task_host* host = detail::current_task_host();
  if (host == nullptr) throw usage_error("spindle::spawn called outside a task or runtime worker");
  return detail::spawn_stoppable_in(*host, std::move(body), std::move(token), where);
}

// spawn() under a name (task/named_tasks.hpp).
template <class T>
join_handle<T> spawn_named(std::string name, task<T> body, spawn_location where = spawn_location::current()) {
  return detail::spawn_named_in(
      detail::current_host_or_throw("spindle::spawn_named called outside a task or runtime worker"),
      std::move(name), std::move(body), where);
}

// Names the task running on this thread, for snapshots (at most task_name_capacity bytes are
// kept). No effect outside a spawned task.
inline void set_task_name(std::string_view name) noexcept {
  if (detail::spawned_task_base* t = detail::spawned_task_base::current()) t->set_name(name);
}

}  // namespace spindle
