// The task layer's part of the snapshot (SPEC G1; docs/design/diagnostics.md, "Snapshot (G1)"):
// executors and live tasks, as a structured copy (runtime::snapshot, for tests and spindle-top)
// and as the "executors" and "tasks" sections of the host's registry (diagnostics::
// snapshot_json), registered when a runtime or an embedded executor is created.
//
// A snapshot never stops the runtime: it scans the task table's slots (task_table.hpp, "Records")
// and reads executor counters, all atomics; a task that completes while it is read is left out.
// Cost: docs/design/diagnostics.md (about 10^5 tasks in a few milliseconds).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include "spindle/core/clock.hpp"
#include "spindle/diagnostics/json_writer.hpp"
#include "spindle/diagnostics/registry.hpp"
#include "spindle/task/task_record.hpp"
#include "spindle/task/task_table.hpp"

namespace spindle {

namespace core {
class runtime_core;
}

struct executor_info {
  std::uint32_t index = 0;
  std::int32_t cpu = -1;            // the CPU it last ran on (-1: unknown)
  double utilisation = 0;           // busy share over the monitor's last window, 0..1
  std::uint32_t load = 0;           // queued work as placement counts it
  bool in_long_runnable = false;    // inside one runnable for longer than long_runnable_after
  std::uint64_t runnables_run = 0;
  std::uint64_t steals = 0;
  std::uint64_t parks = 0;
  std::uint64_t budget_exhaustions = 0;
  std::uint64_t timers_fired = 0;
  std::uint64_t forced_yields = 0;  // tasks whose cooperative budget ran out here
  std::uint64_t busy_ns = 0;        // time awake (not parked), as the monitor last sampled it
  std::uint64_t timers_pending = 0;
  // Queue depths, sampled: the local queue, its injector shard, its inbox (pushed - taken).
  std::uint64_t local_queue = 0;
  std::uint64_t injector_queue = 0;
  std::uint64_t inbox_queue = 0;
  std::uint64_t tasks = 0;  // live tasks it polled last (filled by runtime::snapshot)
};

struct runtime_snapshot {
  std::uint64_t taken_at_ns = 0;  // steady-clock nanoseconds
  std::vector<executor_info> executors;
  std::vector<task_info> tasks;
  // The first task of that name, or null.
  const task_info* find_task(std::string_view name) const noexcept;
  const task_info* find_task(task_id id) const noexcept;
};

namespace detail {

// Every live task's record, by a scan; `f(const task_info&)`. Returns how many were visited.
// `record_clock`: the host's (task_host::record_clock; null: the steady clock), the clock every
// stamp in the records comes from. `timer_clock`: the host's clock (task_host::clock()), the one
// sleep deadlines are on; read once, at the first sleeping task, for task_info::sleep_left_ns.
template <class F>
std::size_t for_each_task_record(const task_table& table,
                                 const std::atomic<std::uint64_t>* record_clock,
                                 const spindle::clock& timer_clock, F&& f) {
  const std::uint64_t now = record_now_ns(record_clock);
  const std::uint32_t slots = table.slot_capacity();
  std::size_t visited = 0;
  task_info info;
  bool timer_now_read = false;
  std::int64_t timer_now = 0;
  for (std::uint32_t i = 0; i < slots; ++i) {
    if (table.read_record(i, info, now)) {
      info.sleep_left_ns = 0;
      if (info.waiting_on.kind == wait_kind::sleep) {
        if (!timer_now_read) {
          timer_now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          timer_clock.now().time_since_epoch())
                          .count();
          timer_now_read = true;
        }
        info.sleep_left_ns = std::int64_t(info.waiting_on.number) - timer_now;
      }
      f(static_cast<const task_info&>(info));
      ++visited;
    }
  }
  return visited;
}

void collect_executors(const core::runtime_core& core, std::vector<executor_info>& out);
void write_task_json(diagnostics::json_writer& out, const task_info& task);
void write_executor_json(diagnostics::json_writer& out, const executor_info& executor);
// Registers a table's "tasks" section (and, with a core, its "executors" section).
// `timer_clock` must outlive the registration (the host's clock).
diagnostics::registry::registration register_tasks_section(
    diagnostics::registry& registry, const task_table& table,
    const std::atomic<std::uint64_t>* record_clock, const spindle::clock& timer_clock);
diagnostics::registry::registration register_executors_section(
    diagnostics::registry& registry, const core::runtime_core& core);

// The fork module's writer of a runtime's "fork_join" section (fork/fork_state.cpp), installed
// when a worker first forks (release; read with acquire). The runtime owns the section and
// calls it, because a fork worker's thread may outlive its runtime: the section must go with
// the runtime's registry, not with the threads. Null until something forked: no section.
using fork_section_writer_type = void (*)(const core::runtime_core&, diagnostics::json_writer&);
inline std::atomic<fork_section_writer_type> fork_section_writer{nullptr};

}  // namespace detail
}  // namespace spindle
