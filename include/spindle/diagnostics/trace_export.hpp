// Trace export (SPEC G3): the events of core/trace.hpp as Chrome Trace Event JSON, which
// Perfetto (ui.perfetto.dev) and chrome://tracing open.
//
// What a trace shows (docs/design/diagnostics.md, "Tracing (G3)"):
//   - one process ("spindle runtime", pid 1) and a thread per executor ("executor 0", tid 1,
//     ...), sorted by index, plus a thread per other thread that recorded (a plain thread's
//     spawn or send, an embedded executor's host: "thread 3 (not an executor)", tid 10000 + n);
//   - complete slices ("ph":"X") for polls ("poll task 12", args: task index and serial, the
//     local queue depth when it began) and park spells ("parked"); a poll or park still going
//     on when the copy was taken ends at that moment with "unfinished": true (a stalled
//     executor's poll is the last slice on its thread);
//   - zero-length slices for the instant events (spawn, wake, steal, send, receive, I/O submit
//     and complete, timer fire, fork promotion, theft and merge), nested in the poll they
//     happened in;
//   - async tracks ("ph":"b"/"e", cat "task", id = the task's trace id) for task lifetimes,
//     from spawn (or the window's start) to the task's end (or the moment of the copy);
//   - flows (bind_id + flow_out on the start slice, flow_in on the end slice, ids numbered per
//     export) from each spawn to the task's first poll, from each message send to its receive,
//     from a fork-join promotion to its theft, from an I/O submit to its completion. Only flows
//     whose both ends are in the window are written;
//   - counters ("ph":"C") of each executor's local queue depth (sampled at poll starts, parks
//     and steals, written when it changes).
// Timestamps are microseconds of the monotonic clock (CLOCK_MONOTONIC), with nanosecond
// decimals.
#pragma once

#include <chrono>
#include <string>

#include "spindle/core/trace.hpp"
#include "spindle/diagnostics/registry.hpp"

namespace spindle::diagnostics {

// Chrome Trace Event JSON ({"traceEvents":[...], ...}) of a copy of the rings.
std::string chrome_trace_json(const core::trace_capture& capture);

// THE entry point of readers (the diagnostics server's GET /api/trace?ms=N): the last `last` of
// the registry's host's events as Chrome Trace Event JSON (a zero duration: everything the
// rings hold). Any thread, while the host runs; the executors never wait for it. A host
// without a trace source gives a trace with no events.
std::string trace_json(const registry& source, std::chrono::milliseconds last);

// Switches the host's tracing on or off at run time (runtime_options::diagnostics.tracing is
// the initial state); false if the host has no trace source.
bool set_tracing(registry& source, bool on);
bool tracing(const registry& source);

// Flight recorder: keeps the last `last` of events as a dump (core::trace_recorder::
// request_dump), and the newest dump as Chrome JSON (a trace with no events when none).
void request_trace_dump(registry& source, std::string reason, std::chrono::milliseconds last);
std::string last_trace_dump_json(const registry& source);

}  // namespace spindle::diagnostics
