// The live view of a task host (include/spindle/task/live_view.hpp).
#include "spindle/task/live_view.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/diagnostics/json_writer.hpp"
#include "spindle/task/named_tasks.hpp"
#include "spindle/task/task_host.hpp"

// COORDINATOR SEAM (issue 15). 0: the providers below serve what this branch can read itself
// (executor counters, live task counts, named tasks, the registry's sections and metrics). Set
// it to 1 once G1 (diagnostics::snapshot_json), G2 (diagnostics::metrics_text) and G3
// (diagnostics::trace_json) are merged, and include their headers where marked below.
#define SPINDLE_LIVE_VIEW_USES_EXPORTS 0

#if SPINDLE_LIVE_VIEW_USES_EXPORTS
// #include "spindle/diagnostics/snapshot.hpp"  // G1: snapshot_json   (adjust to the real names)
// #include "spindle/diagnostics/metrics.hpp"   // G2: metrics_text
// #include "spindle/diagnostics/trace.hpp"     // G3: trace_json
#endif

namespace spindle::detail {

namespace {

#if !SPINDLE_LIVE_VIEW_USES_EXPORTS

constexpr double utilisation_scale = 65536.0;  // executor_stats::utilisation's unit

// The snapshot this branch can give on its own: the fields of the full snapshot's shape that it
// can fill honestly ("executors", "tasks", "sections", "warnings"), plus the live task count and
// the named tasks, and "notes" saying what is missing.
std::string interim_snapshot(task_host& host, core::runtime_core* core) {
  std::string out;
  diagnostics::json_writer w(out);
  w.begin_object();
  w.key("executors").begin_array();
  if (core != nullptr) {
    const std::uint32_t count = core->executor_count();
    const std::uint64_t now = core->coarse_now_ns();
    for (std::uint32_t i = 0; i < count; ++i) {
      core::executor& e = core->executor_at(i);
      const core::executor_stats& s = e.stats();
      // relaxed, all: samples of single-writer counters (executor_stats' contract).
      w.begin_object();
      w.member("index", i);
      w.member("kind", "worker");
      w.member("utilisation", s.utilisation.load(std::memory_order_relaxed) / utilisation_scale);
      w.member("busy_ns", e.busy_nanoseconds_until(now));
      w.member("polls", s.runnables_run.load(std::memory_order_relaxed));
      w.member("steals", s.steals.load(std::memory_order_relaxed));
      w.member("parks", s.parks.load(std::memory_order_relaxed));
      w.member("budget_exhaustions", s.budget_exhaustions.load(std::memory_order_relaxed));
      w.member("timers_fired", s.timers_fired.load(std::memory_order_relaxed));
      w.key("queues").begin_object();
      w.member("local", e.local().size());
      w.member("injector", static_cast<std::uint64_t>(core->global_injector().size(i)));
      w.member("inbox", e.inbox().empty() ? 0 : 1);  // the inbox tells only empty / not empty
      w.end_object();
      w.member("load", e.load());
      w.member("in_long_runnable", e.in_long_runnable());
      w.member("cpu", e.last_cpu());
      w.end_object();
    }
  } else {
    // The embedded executor's counters belong to its ticking thread (embedded_statistics).
    w.begin_object().member("index", 0).member("kind", "embedded").end_object();
  }
  w.end_array();
  w.member("live_tasks", static_cast<std::uint64_t>(host.tasks.live_count()));
  w.key("tasks").begin_array().end_array();
  w.key("named_tasks").begin_array();
  for (const auto& [name, live] : host.names->live_names()) {
    w.begin_object().member("name", name).member("live", static_cast<std::uint64_t>(live)).end_object();
  }
  w.end_array();
  w.key("sections");
  host.diagnostics_registry.write_snapshot_sections(w);
  w.key("warnings").begin_array().end_array();
  w.key("notes").begin_array();
  w.value("per-task records (G1) are not in this build: tasks are counted, and named tasks listed");
  w.value("warnings (G4) are not in this build");
  w.end_array();
  w.end_object();
  return out;
}

std::string interim_metrics(task_host& host, core::runtime_core* core) {
  std::string out;
  if (core != nullptr) {
    const std::uint32_t count = core->executor_count();
    const std::uint64_t now = core->coarse_now_ns();
    auto family = [&](const char* name, const char* type, const char* help, auto value_of) {
      out += "# HELP ";
      out += name;
      out += ' ';
      out += help;
      out += "\n# TYPE ";
      out += name;
      out += ' ';
      out += type;
      out += '\n';
      for (std::uint32_t i = 0; i < count; ++i) {
        out += name;
        out += "{executor=\"" + std::to_string(i) + "\"} ";
        out += value_of(core->executor_at(i));
        out += '\n';
      }
    };
    // relaxed, all: samples of single-writer counters.
    family("spindle_executor_utilisation", "gauge", "Busy time over wall time, smoothed (0..1).",
           [](core::executor& e) {
             return std::to_string(e.stats().utilisation.load(std::memory_order_relaxed) /
                                   utilisation_scale);
           });
    family("spindle_executor_busy_seconds_total", "counter", "Time spent not parked.",
           [now](core::executor& e) { return std::to_string(e.busy_nanoseconds_until(now) / 1e9); });
    family("spindle_executor_polls_total", "counter", "Runnables run.", [](core::executor& e) {
      return std::to_string(e.stats().runnables_run.load(std::memory_order_relaxed));
    });
    family("spindle_executor_steals_total", "counter", "Successful steals (batches).",
           [](core::executor& e) {
             return std::to_string(e.stats().steals.load(std::memory_order_relaxed));
           });
    family("spindle_executor_parks_total", "counter", "Times the executor parked.",
           [](core::executor& e) {
             return std::to_string(e.stats().parks.load(std::memory_order_relaxed));
           });
    family("spindle_executor_local_queue_depth", "gauge", "Runnables in the local queue.",
           [](core::executor& e) { return std::to_string(e.local().size()); });
  }
  out +=
      "# HELP spindle_tasks_live Spawned tasks not yet completed.\n"
      "# TYPE spindle_tasks_live gauge\n"
      "spindle_tasks_live " +
      std::to_string(host.tasks.live_count()) + "\n";
  host.diagnostics_registry.write_metrics(out);
  return out;
}

std::string interim_trace(core::runtime_core* core) {
  std::string out;
  diagnostics::json_writer w(out);
  w.begin_object();
  w.key("traceEvents").begin_array();
  // Thread names, so the empty trace still shows the executors' tracks.
  const std::uint32_t count = core != nullptr ? core->executor_count() : 1;
  for (std::uint32_t i = 0; i < count; ++i) {
    w.begin_object().member("ph", "M").member("name", "thread_name").member("pid", 1).member("tid", i);
    w.key("args").begin_object().member("name", "executor " + std::to_string(i)).end_object();
    w.end_object();
  }
  w.end_array();
  w.member("displayTimeUnit", "ms");
  w.key("otherData").begin_object();
  w.member("note", "tracing (G3) is not in this build: no events were recorded");
  w.end_object();
  w.end_object();
  return out;
}

#endif

}  // namespace

diagnostics::server_providers live_view_providers(task_host& host, core::runtime_core* core) {
  diagnostics::server_providers p;
#if SPINDLE_LIVE_VIEW_USES_EXPORTS
  (void)core;
  const diagnostics::registry& r = host.diagnostics_registry;
  p.metrics = [&r] { return diagnostics::metrics_text(r); };
  p.snapshot = [&r] { return diagnostics::snapshot_json(r); };
  p.trace = [&r](std::chrono::milliseconds last) { return diagnostics::trace_json(r, last); };
#else
  p.metrics = [&host, core] { return interim_metrics(host, core); };
  p.snapshot = [&host, core] { return interim_snapshot(host, core); };
  p.trace = [core](std::chrono::milliseconds) { return interim_trace(core); };
#endif
  return p;
}

std::unique_ptr<diagnostics::server> start_live_view(task_host& host, core::runtime_core* core,
                                                     const core::diagnostics_options& options,
                                                     const char* what) noexcept {
  try {
    const diagnostics::server_setting setting =
        diagnostics::resolve_server_setting(options, std::getenv("SPINDLE_DIAGNOSTICS"));
    if (setting.what == diagnostics::server_setting::kind::invalid) {
      std::fprintf(stderr, "%s\n", setting.error.c_str());
      return nullptr;
    }
    if (setting.what == diagnostics::server_setting::kind::off) return nullptr;
    auto server = std::make_unique<diagnostics::server>(setting.address,
                                                        live_view_providers(host, core));
    std::fprintf(stderr, "spindle: diagnostics of this %s at http://%s/\n", what,
                 server->address().c_str());
    return server;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle: no diagnostics server: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "spindle: no diagnostics server: unknown error\n");
  }
  return nullptr;
}

}  // namespace spindle::detail
