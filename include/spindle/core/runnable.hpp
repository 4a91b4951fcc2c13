// A runnable is the unit the executors schedule: an intrusive header with two entry points.
//
// The core module knows nothing about coroutines: the task module derives its spawned tasks
// from `runnable`, later modules (fork-join, actors) derive their own units. The executors only
// move pointers to runnables between queues and call the two entry points.
//
// Ownership: a runnable pointer sitting in a queue is owned by that queue. `run` hands it to the
// runnable's own code; once `run` returns the executor must not touch the pointer again (the
// runnable may already have been woken, resumed and freed on another executor). `drop` is called
// instead of `run` at shutdown for runnables still queued: it must release the runnable without
// running user code (a task records "cancelled" and frees its frame).
#pragma once

namespace spindle::core {

struct runnable;

struct runnable_vtable {
  void (*run)(runnable*) noexcept;
  void (*drop)(runnable*) noexcept;
};

struct runnable {
  const runnable_vtable* vtable;
  // Intrusive link, used only while the runnable sits in a mutex-protected list (injector
  // shards). The local queue stores pointers in its ring and does not use it.
  runnable* next = nullptr;
  // When it was last scheduled, in histogram_clock ticks; written by the scheduling thread
  // before the push that publishes the runnable, read and cleared by the executor that polls it,
  // and only while histograms are on (executor_metrics.hpp); 0: not stamped.
  std::uint64_t scheduled_at_ticks = 0;

  explicit runnable(const runnable_vtable* table) noexcept : vtable(table) {}
  void run() noexcept { vtable->run(this); }
  void drop() noexcept { vtable->drop(this); }
};

// Where a runnable came from when it is handed to the scheduler; the scheduler picks a queue.
enum class schedule_hint {
  spawn,  // newly spawned: newest end of the local queue on a worker, P2C from outside
  wake,   // woken by an event: like spawn
  yield,  // gave up the CPU voluntarily: oldest end of the local queue, behind the rest
};

// The interface a task sees of whatever runs it: the multi-core runtime, later the embedded
// executor driven by a host's ticks. Tasks depend on this, never on the executors themselves.
class scheduler {
 public:
  virtual void schedule(runnable* r, schedule_hint hint) noexcept = 0;

 protected:
  ~scheduler() = default;
};

}  // namespace spindle::core
