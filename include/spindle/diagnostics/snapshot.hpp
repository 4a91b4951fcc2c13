// The snapshot (SPEC G1; docs/design/diagnostics.md, "Snapshot (G1)"): one JSON document with
// everything a host's contributors describe, taken on any thread while the host runs.
//
//   {"taken_at_ns": <steady-clock ns>,
//    "executors": [...],   // the task layer's "executors" section (task/snapshot.hpp)
//    "tasks": [...],       // the task layer's "tasks" section
//    "sections": {"actors": ..., "supervision_tree": ..., "dispatchers": ..., ...}}
//
// The diagnostics module knows no task: the task layer registers the "executors" and "tasks"
// writers into its host's registry when the runtime (or embedded executor) is created; this
// function only lifts them to the top level. A host without them gets empty arrays.
#pragma once

#include <string>

#include "spindle/diagnostics/registry.hpp"

namespace spindle::diagnostics {

std::string snapshot_json(const registry& sections);

}  // namespace spindle::diagnostics
