// Metrics (SPEC G2; docs/design/diagnostics.md, "Metrics (G2)"): the Prometheus exposition of a
// host's registry, and the runtime's per-executor families.
//
// What an executor reports (label executor="<index>"), after tokio's RuntimeMetrics:
//   counters  polls, steals, parks, budget exhaustions (a service forced by the executor's
//             runnable budget while local work waited), forced yields (tasks whose cooperative
//             budget ran out), services, timers fired, rescues, standbys, local schedules,
//             overflows into the injector, runnables taken from the injector and from the inbox,
//             fork-join promotions and thefts, executor messages sent and delivered, I/O
//             operations submitted and completed, busy time;
//   gauges    utilisation (0..1, smoothed), queue depths (local ring, own injector shard, inbox),
//             timers pending, I/O in flight, whether it is inside a long runnable;
//   histograms (while runtime_options::diagnostics.histograms, or runtime_core::set_histograms,
//             is on, or once anything was recorded): poll time and wake-to-poll latency as
//             Prometheus histograms (powers of two, 128 ns .. 17 s) and as summaries with p50,
//             p90, p99 and p999 read from the 312 log-linear buckets (core/histogram.hpp).
// Every value is read with relaxed loads from another thread while the executors run (the
// timers-pending gauge takes the timer service's mutex for one size read); no executor waits.
// The actor system, dispatchers and the embedded executor add their own families to their
// host's registry (spindle_actor_*, spindle_dispatcher_*, spindle_embedded_*).
#pragma once

#include <string>
#include <string_view>

#include "spindle/diagnostics/registry.hpp"

namespace spindle::core {
class runtime_core;
}

namespace spindle::diagnostics {

// The Content-Type of metrics_text's output.
inline constexpr std::string_view metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";

// The exposition of everything registered: every metrics writer's lines, regrouped so each
// family's lines are together (prometheus.hpp, regroup_families). Any thread; the registry's
// rules apply (writers run under its mutex).
std::string metrics_text(const registry& source);

// Appends the executor families of `core` (what the task layer's runtime registers with its
// host's registry when it starts). Any thread, while `core` lives.
void write_executor_metrics(std::string& out, core::runtime_core& core);

}  // namespace spindle::diagnostics
