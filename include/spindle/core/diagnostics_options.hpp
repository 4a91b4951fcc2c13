// What a runtime (or an embedded executor) records and serves about itself (SPEC G1-G5;
// docs/design/diagnostics.md). Everything here is off by default and costs nothing while off
// beyond what the design document measures (one relaxed load per trace point, the always-on
// counters a snapshot reads).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace spindle::core {

struct diagnostics_options {
  // --- G3 tracing ------------------------------------------------------------------------------
  // Start with tracing on (it can be switched on and off at run time as well).
  bool tracing = false;
  // Events each executor's ring holds (rounded up to a power of two); the oldest are overwritten.
  std::uint32_t trace_events_per_executor = 1u << 16;

  // --- G1 snapshot -----------------------------------------------------------------------------
  // Exact mailbox lengths for unbounded actor mailboxes: every send counts itself (one relaxed
  // read-modify-write per message, +15% on `spindle-bench pingpong`; docs/design/diagnostics.md,
  // "Snapshot (G1)"). Off: a snapshot shows the messages the actor took out of its mailbox and
  // has not handled yet, and whether more are waiting (bounded mailboxes are always exact).
  bool exact_mailbox_lengths = false;

  // --- G2 metrics ------------------------------------------------------------------------------
  // Poll-time and wake-to-poll histograms (one clock read per poll while on).
  bool histograms = false;

  // --- G4 warnings -----------------------------------------------------------------------------
  // A runnable running longer than this is a stall.
  std::chrono::nanoseconds stall_threshold = std::chrono::milliseconds(25);
  // Strict mode: any warning is a failure (the hook of tests).
  bool strict_warnings = false;

  // --- G5 live view ----------------------------------------------------------------------------
  // "127.0.0.1:PORT" (or "[::1]:PORT"; another address only when `serve_beyond_loopback`)
  // starts the diagnostics server on a thread of its own. Empty: the environment variable
  // SPINDLE_DIAGNOSTICS decides; "off" disables both.
  std::string server_address;
  bool serve_beyond_loopback = false;
};

}  // namespace spindle::core
