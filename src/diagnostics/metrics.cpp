// Metrics: the design is in include/spindle/diagnostics/metrics.hpp.
#include "spindle/diagnostics/metrics.hpp"

#include <charconv>
#include <cstdint>
#include <vector>

#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/diagnostics/prometheus.hpp"

namespace spindle::diagnostics {

std::string metrics_text(const registry& source) {
  std::string raw;
  source.write_metrics(raw);
  return regroup_families(raw);
}

namespace {

// relaxed: samples of single-writer counters, read from another thread (metrics.hpp).
std::uint64_t sample_of(const std::atomic<std::uint64_t>& counter) noexcept {
  return counter.load(std::memory_order_relaxed);
}

}  // namespace

void write_executor_metrics(std::string& out, core::runtime_core& core) {
  const std::uint32_t count = core.executor_count();
  std::vector<std::string> indexes(count);
  for (std::uint32_t i = 0; i < count; ++i) indexes[i] = std::to_string(i);
  prometheus_writer writer(out);

  writer.family("spindle_runtime_executors", metric_type::gauge, "Executors of the runtime.");
  writer.sample("spindle_runtime_executors", {}, std::uint64_t(count));

  // One family at a time, every executor's sample in it (a family's lines stay together).
  auto each = [&](std::string_view name, metric_type type, std::string_view help, auto&& value) {
    writer.family(name, type, help);
    for (std::uint32_t i = 0; i < count; ++i) {
      core::executor& e = core.executor_at(i);
      const metric_label label{"executor", indexes[i]};
      writer.sample(name, std::span<const metric_label>(&label, 1), value(e));
    }
  };
  auto counter = [&](std::string_view name, std::string_view help,
                     std::atomic<std::uint64_t> core::executor_stats::*field) {
    each(name, metric_type::counter, help,
         [field](core::executor& e) { return sample_of(e.stats().*field); });
  };
  using stats = core::executor_stats;
  counter("spindle_executor_polls_total", "Runnables run (task polls, actor wheel turns, ...).",
          &stats::runnables_run);
  counter("spindle_executor_steals_total",
          "Successful steals from other executors' local queues (batches).", &stats::steals);
  counter("spindle_executor_parks_total", "Times the executor parked (idle).", &stats::parks);
  counter("spindle_executor_budget_exhaustions_total",
          "Services forced by the executor's runnable budget while local work waited.",
          &stats::budget_exhaustions);
  counter("spindle_executor_forced_yields_total",
          "Tasks on this executor whose cooperative budget ran out, forcing a yield.",
          &stats::forced_yields);
  counter("spindle_executor_services_total",
          "Services (due timers fired, reactor polled, stuck executors rescued).",
          &stats::services);
  counter("spindle_executor_timers_fired_total", "Timers fired by this executor.",
          &stats::timers_fired);
  counter("spindle_executor_rescues_total",
          "Timers and runnables taken over from executors stuck in a long runnable.",
          &stats::rescues);
  counter("spindle_executor_standbys_total",
          "Times the executor stood by for a sibling sharing its CPU.", &stats::standbys);
  counter("spindle_executor_contention_standbys_total",
          "Of those, times the monitor asked for it: its thread waited for a CPU a sibling's did not.",
          &stats::contention_standbys);
  counter("spindle_executor_local_schedules_total",
          "Spawns, wakes and yields pushed onto this executor's local queue by its own thread.",
          &stats::local_schedules);
  counter("spindle_executor_overflows_total",
          "Times the local queue overflowed and half of it moved to the injector.",
          &stats::overflows);
  counter("spindle_executor_injector_runnables_total",
          "Runnables taken from the injector: scheduled from outside the workers, or overflowed.",
          &stats::taken_from_injector);
  counter("spindle_executor_inbox_runnables_total",
          "Runnables taken from the inbox (work addressed to this executor).",
          &stats::taken_from_inbox);
  counter("spindle_executor_fork_promotions_total",
          "Fork-join continuations this executor promoted (offered to others).",
          &stats::fork_promotions);
  counter("spindle_executor_fork_thefts_total",
          "Promoted fork-join work of another executor that this executor took and ran.",
          &stats::fork_thefts);
  each("spindle_executor_messages_sent_total", metric_type::counter,
       "Executor messages sent from this executor's pool.",
       [](core::executor& e) { return e.message_stats().sent.load(std::memory_order_relaxed); });
  each("spindle_executor_messages_delivered_total", metric_type::counter,
       "Executor messages delivered to this executor.", [](core::executor& e) {
         return e.message_stats().delivered.load(std::memory_order_relaxed);
       });
  each("spindle_executor_io_submitted_total", metric_type::counter,
       "I/O operations submitted to this executor's reactor.",
       [](core::executor& e) { return e.io().operations_submitted(); });
  each("spindle_executor_io_completed_total", metric_type::counter,
       "I/O operations of this executor's reactor that completed.",
       [](core::executor& e) { return e.io().operations_completed(); });
  each("spindle_executor_busy_seconds_total", metric_type::counter,
       "Time the executor was awake (not parked), as the monitor last sampled it.",
       [](core::executor& e) { return double(sample_of(e.stats().busy_nanoseconds)) / 1e9; });

  each("spindle_executor_utilisation_ratio", metric_type::gauge,
       "Busy time over wall time, smoothed over the monitor's window (0..1).",
       [](core::executor& e) {
         // relaxed: a sample the monitor writes.
         return double(e.stats().utilisation.load(std::memory_order_relaxed)) / 65536.0;
       });
  each("spindle_executor_local_queue_depth", metric_type::gauge,
       "Runnables in the executor's local queue.",
       [](core::executor& e) { return std::uint64_t(e.local().size()); });
  each("spindle_executor_injector_queue_depth", metric_type::gauge,
       "Runnables in the executor's injector shard.", [&core](core::executor& e) {
         return std::uint64_t(core.global_injector().size(e.index()));
       });
  each("spindle_executor_inbox_queue_depth", metric_type::gauge,
       "Runnables pushed onto the executor's inbox and not yet taken.", [](core::executor& e) {
         // Taken first, then pushed: the difference cannot go negative.
         const std::uint64_t taken = sample_of(e.stats().taken_from_inbox);
         const std::uint64_t pushed = sample_of(e.stats().inbox_pushes);
         return pushed > taken ? pushed - taken : std::uint64_t(0);
       });
  each("spindle_executor_timers_pending", metric_type::gauge, "Timers armed on this executor.",
       [](core::executor& e) { return std::uint64_t(e.timers().size()); });
  each("spindle_executor_io_in_flight", metric_type::gauge,
       "I/O operations submitted and not yet completed.", [](core::executor& e) {
         // Completed first, then submitted: the difference cannot go negative.
         const std::uint64_t completed = e.io().operations_completed();
         const std::uint64_t submitted = e.io().operations_submitted();
         return submitted > completed ? submitted - completed : std::uint64_t(0);
       });
  each("spindle_executor_in_long_runnable", metric_type::gauge,
       "1 while the executor has been inside one runnable longer than long_runnable_after.",
       [](core::executor& e) { return std::uint64_t(e.in_long_runnable() ? 1 : 0); });

  // Histograms: while on, or once anything was recorded (switched off later).
  std::vector<core::histogram_snapshot> poll_time(count), wake_to_poll(count);
  bool any = core.histograms_on();
  for (std::uint32_t i = 0; i < count; ++i) {
    const core::executor_histograms& h = core.executor_at(i).histograms();
    poll_time[i] = h.poll_time.snapshot();
    wake_to_poll[i] = h.wake_to_poll.snapshot();
    any = any || poll_time[i].count() != 0 || wake_to_poll[i].count() != 0;
  }
  if (!any) return;
  auto histogram = [&](std::string_view name, std::string_view help,
                       const std::vector<core::histogram_snapshot>& snapshots) {
    writer.family(name, metric_type::histogram, help);
    for (std::uint32_t i = 0; i < count; ++i) {
      const metric_label label{"executor", indexes[i]};
      writer.histogram_seconds(name, std::span<const metric_label>(&label, 1), snapshots[i]);
    }
    const std::string quantiles = std::string(name.substr(0, name.size() - 8)) +
                                  "_quantiles_seconds";  // name ends in "_seconds"
    writer.family(quantiles, metric_type::summary,
                  std::string(help) + " Quantiles read from log-linear buckets (within 12.5%).");
    for (std::uint32_t i = 0; i < count; ++i) {
      const metric_label label{"executor", indexes[i]};
      writer.summary_seconds(quantiles, std::span<const metric_label>(&label, 1), snapshots[i]);
    }
  };
  histogram("spindle_executor_poll_time_seconds", "Time one runnable ran (one poll).", poll_time);
  histogram("spindle_executor_wake_to_poll_seconds",
            "Time from a runnable's schedule (spawn, wake, yield) to the start of its poll.",
            wake_to_poll);
}

}  // namespace spindle::diagnostics
