// What a runtime (or an embedded executor) records and serves about itself (SPEC G1-G5;
// docs/design/diagnostics.md). Everything here but the records (on by default, `records`) and
// the warnings is off by default and costs nothing while off beyond what the design document
// measures (one relaxed load per trace point, the always-on counters a snapshot reads).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace spindle::core {

struct diagnostics_options {
  // --- G3 tracing ------------------------------------------------------------------------------
  // Start with tracing on (it can be switched on and off at run time as well).
  bool tracing = false;
  // Events each executor's ring holds (rounded up to a power of two, at least 64); the oldest
  // are overwritten. 32 bytes an event, allocated when tracing is first switched on. At most
  // `max_trace_events_per_executor` (2^22, 128 MiB a ring): more is a usage_error.
  static constexpr std::uint32_t max_trace_events_per_executor = 1u << 22;
  std::uint32_t trace_events_per_executor = 1u << 16;

  // --- G1 snapshot -----------------------------------------------------------------------------
  // Per-task records (spawn location, parent, name, state, what it waits on, polls, wakes, busy,
  // scheduled and idle time) and per-actor statistics (mailbox length and high-water mark,
  // messages handled, reductions). On by default: about 7 ns a task and 3 ns a message on the
  // spawn- and message-bound benchmarks (docs/design/diagnostics.md, "Cost at a glance"). Off: a
  // snapshot lists each live task by id only ("unrecorded"), actors with their names and states
  // and zero statistics, and the task warnings that read records (lost waker, self-wakes, woken
  // but not polled) do not fire; a stall still names its executor.
  bool records = true;
  // Exact mailbox lengths for unbounded actor mailboxes: every send counts itself (one relaxed
  // read-modify-write per message, +15% on `spindle-bench pingpong`; docs/design/diagnostics.md,
  // "Snapshot (G1)"). Off: a snapshot shows the messages the actor took out of its mailbox and
  // has not handled yet, and whether more are waiting (bounded mailboxes are always exact).
  // Needs `records` (what the actor handled is one of its statistics): ignored while it is off.
  bool exact_mailbox_lengths = false;

  // --- G2 metrics ------------------------------------------------------------------------------
  // Poll-time and wake-to-poll histograms per executor (core/executor_metrics.hpp). While on:
  // two TSC reads per poll and one per schedule (~12-33 ns per poll measured, diagnostics.md,
  // "Metrics (G2)"); off: one relaxed load per poll and per schedule. Can be switched while
  // running (runtime_core::set_histograms). The counters and gauges are always on.
  bool histograms = false;

  // --- G4 warnings -----------------------------------------------------------------------------
  // A runnable running longer than this is a stall.
  std::chrono::nanoseconds stall_threshold = std::chrono::milliseconds(25);
  // Strict mode: any warning is a failure (the hook of tests).
  bool strict_warnings = false;
  // Warnings on at all (the monitor's watch, the actors' and the embedded executor's checks).
  bool warnings = true;
  // A runnable queued (woken, spawned) and not run for this long: woken_not_polled.
  std::chrono::nanoseconds woken_threshold = std::chrono::milliseconds(100);
  // Mailbox growth (OTP's long_message_queue): raised when an actor's backlog reaches
  // `mailbox_enable` at a look (the actor takes its whole mailbox at each), lowered once it is
  // below `mailbox_disable`.
  std::uint32_t mailbox_enable = 10'000;
  std::uint32_t mailbox_disable = 7'500;
  // An embedded tick longer than this many times its time_per_tick (when it has one).
  double tick_over_budget_factor = 2.0;
  // Per-task lints (on the per-task view the task layer provides): self-wakes above
  // `self_wake_enable` of a task's wakes (lowered below `self_wake_disable`), once it has at
  // least `self_wake_minimum` wakes; a task suspended with no live waker for `lost_waker_after`.
  double self_wake_enable = 0.5;
  double self_wake_disable = 0.4;
  std::uint64_t self_wake_minimum = 100;
  std::chrono::nanoseconds lost_waker_after = std::chrono::milliseconds(100);
  // Deliveries to the hook per kind and second; the rest are counted as suppressed.
  std::uint32_t warnings_per_second = 10;

  // --- G5 live view ----------------------------------------------------------------------------
  // "127.0.0.1:PORT" (or "[::1]:PORT"; another address only when `serve_beyond_loopback`)
  // starts the diagnostics server on a thread of its own. Empty: the environment variable
  // SPINDLE_DIAGNOSTICS decides; "off" disables both.
  std::string server_address{};
  bool serve_beyond_loopback = false;
};

}  // namespace spindle::core
