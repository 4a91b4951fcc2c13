// task_host: what a spawned task sees of whatever runs it.
//
// Two things run spawned tasks: the multi-core runtime (detail::runtime_state, one per runtime)
// and the embedded executor driven by a host's ticks (spindle::embed::embedded_executor). The
// task layer and everything built on it (time, sync, join sets) talk to this interface only, so
// the same task<T> code runs on both (SPEC E4).
//
// Who calls what
//   - schedule (core::scheduler): wakers from any thread, the running task (yield), spawn;
//   - table_shard: the thread creating or completing a task, to pick its task-table shard;
//   - timers_here / clock: a task arming a timer (sleep, timeout) on the thread running it;
//   - stopping: spawn, before creating a task;
//   - enter / leave: a thread that may be outside the host (a spawn, a waker) around the span in
//     which it touches one of its tasks, so the host's shutdown cannot destroy the task (or the
//     host) under it (the gate of core/runtime_core.hpp). host_entry is the RAII form.
// A task finds its host through the spawned task it runs in (spawned_task_base::host()), so no
// thread-local lookup is needed inside a task; current_task_host() adds the worker threads'
// runtime for code that runs outside any task (an actor's handler, a plain spawn from a worker).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "spindle/core/clock.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/diagnostics/registry.hpp"
#include "spindle/diagnostics/warnings.hpp"
#include "spindle/task/task_table.hpp"

namespace spindle::core {
class timer_service;
}

namespace spindle::diagnostics {
class server;
}

namespace spindle::detail {

class named_task_registry;

class task_host : public core::scheduler {
 public:
  // `shards`: task-table shards owned by threads of this host (executors; 1 for an embedded
  // executor); one more is added for every other thread.
  explicit task_host(std::uint32_t shards);

  // The table shard of the calling thread: its own index if it is one of this host's threads
  // running now, else -1 (the shared, locked shard).
  virtual std::int32_t table_shard() const noexcept = 0;
  // The timer service a task running on the calling thread arms its timers on; null when the
  // calling thread runs none of this host's tasks.
  virtual core::timer_service* timers_here() noexcept = 0;
  virtual spindle::clock& clock() const noexcept = 0;
  // True once the host began shutting down: spawn then throws runtime_stopped.
  virtual bool stopping() const noexcept = 0;

  // The gate. own_thread: the caller is one of the host's own threads (nothing counted, nothing
  // to leave); entered: call leave() when done; refused: the host is draining its tasks, the
  // caller must not touch them (a spawn throws runtime_stopped, a waker does not wake).
  // Called with the task alive (its lock or a primitive's lock held, or before it exists).
  enum class entry : std::uint8_t { own_thread, entered, refused };
  virtual entry enter() noexcept { return entry::own_thread; }
  virtual void leave() noexcept {}

  // Shutdown (the host's last step, once nothing runs its tasks any more): abandons every task
  // still in the table (destroys its frames, records "cancelled"), until none is left.
  void abandon_all() noexcept;

  // The clock of its tasks' records (task_record.hpp): one relaxed load on any thread. The
  // runtime's coarse clock; an embedded executor's own, advanced by its ticks. Null: the steady
  // clock is read.
  const std::atomic<std::uint64_t>* record_clock = nullptr;
  // Whether spawns fill their tasks' records (diagnostics_options::records; set at construction).
  bool task_records = true;

  // What the parts above the task layer contribute to this host's snapshot and metrics
  // (diagnostics/registry.hpp). Declared first, so destroyed last: contributors are gone by then.
  spindle::diagnostics::registry diagnostics_registry;
  // Warnings about this host's executors, tasks and actors (diagnostics/warnings.hpp, G4); adds
  // its section and metrics to the registry above, so it is declared after it.
  spindle::diagnostics::warning_hub warnings{diagnostics_registry};
  // Every spawned task not yet completed has a slot here (ids, shutdown, diagnostics).
  task_table tasks;
  // Names of live tasks, for spawn_named / wait_named (task/named_tasks.hpp).
  const std::unique_ptr<named_task_registry> names;
  // The live view (diagnostics/server.hpp), when runtime_options::diagnostics or the variable
  // SPINDLE_DIAGNOSTICS asked for one (task/live_view.hpp); null otherwise. Set while the host
  // is built, before any other thread can reach it; declared last, so destroyed first.
  std::unique_ptr<spindle::diagnostics::server> live_view;
  // Stops the live view's thread (idempotent, any thread): the host's shutdown calls it before
  // it takes apart what the server reads (the table, the registry's contributors, executors).
  void stop_live_view() noexcept;

 protected:
  ~task_host();
};

// enter() ... leave() for a scope (spawn paths).
class host_entry {
 public:
  explicit host_entry(task_host& host) noexcept : host_(host), entry_(host.enter()) {}
  ~host_entry() {
    if (entry_ == task_host::entry::entered) host_.leave();
  }
  host_entry(const host_entry&) = delete;
  host_entry& operator=(const host_entry&) = delete;
  bool refused() const noexcept { return entry_ == task_host::entry::refused; }

 private:
  task_host& host_;
  task_host::entry entry_;
};

}  // namespace spindle::detail
