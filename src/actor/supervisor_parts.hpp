// What the static supervisor (supervisor.cpp) and the dynamic one (dynamic_supervisor.cpp) both
// do when they start a child and report their restarts: one piece for both.
#pragma once

#include <cstdint>
#include <string>

#include "spindle/actor/actor.hpp"
#include "spindle/actor/supervisor.hpp"

namespace spindle::supervisor_parts {

// The options a child's factory gets: its placement resolved, its name, the supervisor's id and
// how many times that child was started before (diagnostics: the supervision tree).
inline spawn_options child_options(const child_placement& placement, const std::string& name,
                                   actor_id supervisor, std::uint32_t restarts) {
  spawn_options options;
  options.domain = domain_of(placement);
  if (placement.where == child_placement::kind::executor) {
    options.executor = placement.value;
    options.pinned = true;
  }
  options.name = name;
  options.supervisor = supervisor;
  options.restarts = restarts;
  return options;
}

// Marks a started child's cell (again: a factory may have ignored the options).
inline void mark_child(const actor_handle& child, actor_id supervisor, std::uint32_t restarts) {
  // relaxed: read by snapshots, each value whole.
  child.cell()->supervisor.store(supervisor, std::memory_order_relaxed);
  child.cell()->restarts.store(restarts, std::memory_order_relaxed);
}

// The supervision tree's copy of a supervisor's restart history, after a restart.
inline void publish_intensity(actor_system* system, actor_detail::supervisor_record& record,
                              const restart_intensity& intensity) {
  if (system == nullptr) return;
  system->with_directory_locked([&] { record.intensity = intensity; });
}

}  // namespace spindle::supervisor_parts
