// Chrome Trace Event JSON of trace captures (design: include/spindle/diagnostics/trace_export.hpp).
#include "spindle/diagnostics/trace_export.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "spindle/diagnostics/json_writer.hpp"

namespace spindle::diagnostics {

namespace {

using core::trace_kind;
using core::trace_record_view;

constexpr std::int64_t foreign_tid_base = 10000;

std::int64_t tid_of(std::uint16_t executor) {
  if ((executor & core::foreign_thread_flag) != 0) {
    return foreign_tid_base + (executor & ~core::foreign_thread_flag);
  }
  return std::int64_t(executor) + 1;
}

// Microseconds with nanosecond decimals, exactly (no double rounding).
std::string micros(std::uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%" PRIu64 ".%03u", ns / 1000, unsigned(ns % 1000));
  return text;
}

std::string hex_id(std::uint64_t id) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIx64, id);
  return text;
}

std::string task_name(std::uint64_t id) {
  return "task " + std::to_string(id >> 32) + "." + std::to_string(std::uint32_t(id));
}

// One event of the output, before serialisation (sorted by time first).
struct out_event {
  std::uint64_t ns = 0;
  std::uint64_t duration_ns = 0;
  char phase = 'X';
  std::int64_t tid = 0;
  std::string name;
  const char* category = "";
  std::string id;  // async events
  std::uint64_t flow = 0;
  bool flow_out = false;
  bool flow_in = false;
  std::string args;  // serialised JSON object, or empty
};

struct located {
  std::size_t ring;
  std::size_t index;
};

// Flows whose both ends are in the capture: start event -> flow number, end event -> number.
struct flow_table {
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> out, in;
};

enum class flow_role { none, start, end };
struct flow_key {
  flow_role role = flow_role::none;
  int family = 0;  // spawn, message, fork, io
  std::uint64_t key = 0;
};

flow_key flow_of(const trace_record_view& e) {
  switch (e.kind) {
    case trace_kind::spawn: return {flow_role::start, 0, e.id};
    case trace_kind::poll_start: return {flow_role::end, 0, e.id};
    case trace_kind::actor_send: return {flow_role::start, 1, e.ref};
    case trace_kind::actor_receive: return {flow_role::end, 1, e.ref};
    case trace_kind::fork_promote: return {flow_role::start, 2, e.ref};
    case trace_kind::fork_theft: return {flow_role::end, 2, e.ref};
    case trace_kind::io_submit: return {flow_role::start, 3, e.ref};
    case trace_kind::io_complete: return {flow_role::end, 3, e.ref};
    default: return {};
  }
}

flow_table pair_flows(const core::trace_capture& capture) {
  std::vector<std::pair<std::uint64_t, located>> all;
  for (std::size_t r = 0; r < capture.rings.size(); ++r) {
    const auto& events = capture.rings[r].events;
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (flow_of(events[i]).role != flow_role::none) all.push_back({events[i].ns, {r, i}});
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<std::pair<int, std::uint64_t>, located> pending;
  flow_table flows;
  std::uint64_t next = 1;
  for (const auto& [ns, where] : all) {
    const trace_record_view& e = capture.rings[where.ring].events[where.index];
    const flow_key f = flow_of(e);
    const auto key = std::make_pair(f.family, f.key);
    if (f.role == flow_role::start) {
      pending[key] = where;  // the newest start of this identity (addresses are reused)
    } else if (auto it = pending.find(key); it != pending.end()) {
      const std::uint64_t number = next++;
      flows.out[{it->second.ring, it->second.index}] = number;
      flows.in[{where.ring, where.index}] = number;
      pending.erase(it);
    }
  }
  return flows;
}

std::string instant_name(const trace_record_view& e) {
  switch (e.kind) {
    case trace_kind::spawn: return "spawn " + task_name(e.id);
    case trace_kind::wake: return "wake " + task_name(e.id);
    case trace_kind::task_end: return "end of " + task_name(e.id);
    case trace_kind::steal: return "steal from executor " + std::to_string(e.id);
    case trace_kind::fork_promote: return "fork promotion";
    case trace_kind::fork_theft: return "fork theft";
    case trace_kind::fork_merge: return "fork merge";
    case trace_kind::actor_send: return "send to actor " + std::to_string(e.id);
    case trace_kind::actor_receive: return "receive by actor " + std::to_string(e.id);
    case trace_kind::io_submit: return "io submit fd " + std::to_string(std::int64_t(e.id));
    case trace_kind::io_complete: return "io complete fd " + std::to_string(std::int64_t(e.id));
    case trace_kind::timer_fire: return "timer fire";
    default: return core::trace_kind_name(e.kind);
  }
}

const char* category_of(trace_kind kind) {
  switch (kind) {
    case trace_kind::spawn:
    case trace_kind::wake:
    case trace_kind::task_end:
    case trace_kind::poll_start:
    case trace_kind::poll_end: return "task";
    case trace_kind::steal:
    case trace_kind::park:
    case trace_kind::unpark: return "scheduler";
    case trace_kind::fork_promote:
    case trace_kind::fork_theft:
    case trace_kind::fork_merge: return "fork";
    case trace_kind::actor_send:
    case trace_kind::actor_receive: return "actor";
    case trace_kind::io_submit:
    case trace_kind::io_complete: return "io";
    case trace_kind::timer_fire: return "timer";
    default: return "spindle";
  }
}

std::string instant_args(const trace_record_view& e) {
  std::string args;
  json_writer w(args);
  w.begin_object();
  switch (e.kind) {
    case trace_kind::spawn:
    case trace_kind::wake:
    case trace_kind::task_end:
      w.member("task", e.id >> 32).member("serial", std::uint64_t(std::uint32_t(e.id)));
      if (e.kind == trace_kind::task_end) w.member("outcome", std::uint64_t(e.aux));
      break;
    case trace_kind::actor_send:
    case trace_kind::actor_receive: w.member("actor", e.id).member("message", hex_id(e.ref)); break;
    case trace_kind::io_submit: w.member("fd", std::int64_t(e.id)).member("opcode", std::uint64_t(e.aux)); break;
    case trace_kind::io_complete:
      w.member("fd", std::int64_t(e.id)).member("result", std::int64_t(std::int32_t(e.aux)));
      break;
    case trace_kind::steal: w.member("victim", e.id).member("local_queue_depth", std::uint64_t(e.aux)); break;
    case trace_kind::fork_promote:
    case trace_kind::fork_theft:
    case trace_kind::fork_merge: w.member("executor", e.id).member("work", hex_id(e.ref)); break;
    case trace_kind::timer_fire: w.member("timer", hex_id(e.ref)); break;
    default: break;
  }
  w.end_object();
  return args;
}

struct task_life {
  std::optional<std::uint64_t> begin_ns, end_ns;
  std::uint64_t first_ns = 0;
  std::int64_t begin_tid = 0, end_tid = 0;
};

}  // namespace

std::string chrome_trace_json(const core::trace_capture& capture) {
  const flow_table flows = pair_flows(capture);
  std::vector<out_event> events;
  std::map<std::int64_t, std::string> thread_names;
  for (std::uint32_t i = 0; i < capture.executors; ++i) {
    thread_names[tid_of(std::uint16_t(i))] = capture.thread_label + " " + std::to_string(i);
  }
  std::map<std::uint64_t, task_life> tasks;  // ordered: deterministic output
  auto life = [&](std::uint64_t id, std::uint64_t ns) -> task_life& {
    auto [it, inserted] = tasks.try_emplace(id);
    if (inserted) it->second.first_ns = ns;
    return it->second;
  };
  std::uint64_t earliest = capture.taken_at_ns;

  for (std::size_t r = 0; r < capture.rings.size(); ++r) {
    const auto& ring = capture.rings[r];
    // Per thread (the foreign ring holds several): open polls and parks, last queue depth.
    struct open_slice {
      std::uint64_t id;
      std::uint64_t ns;
      std::size_t index;
      std::uint32_t depth;
    };
    std::map<std::int64_t, std::vector<open_slice>> polls;
    std::map<std::int64_t, std::optional<std::uint64_t>> parked_since;
    std::map<std::int64_t, std::optional<std::uint32_t>> last_depth;
    auto depth_counter = [&](std::int64_t tid, std::uint64_t ns, std::uint32_t depth) {
      auto& last = last_depth[tid];
      if (last && *last == depth) return;
      last = depth;
      out_event c;
      c.phase = 'C';
      c.ns = ns;
      c.tid = tid;
      c.name = "local queue depth (" + thread_names[tid] + ")";
      c.category = "scheduler";
      c.args = "{\"depth\":" + std::to_string(depth) + "}";
      events.push_back(std::move(c));
    };
    for (std::size_t i = 0; i < ring.events.size(); ++i) {
      const trace_record_view& e = ring.events[i];
      const std::int64_t tid = tid_of(e.executor);
      earliest = std::min(earliest, e.ns);
      if (tid >= foreign_tid_base && !thread_names.count(tid)) {
        thread_names[tid] =
            "thread " + std::to_string(tid - foreign_tid_base) + " (not an executor)";
      }
      switch (e.kind) {
        case trace_kind::poll_start:
          polls[tid].push_back({e.id, e.ns, i, e.aux});
          life(e.id, e.ns);
          if (tid < foreign_tid_base) depth_counter(tid, e.ns, e.aux);
          continue;
        case trace_kind::poll_end: {
          auto& open = polls[tid];
          // The innermost open poll of this thread (or none: its start left the window).
          if (open.empty() || (e.id != 0 && open.back().id != e.id)) continue;
          const open_slice s = open.back();
          open.pop_back();
          out_event x;
          x.ns = s.ns;
          x.duration_ns = e.ns - s.ns;
          x.tid = tid;
          x.name = "poll " + task_name(s.id);
          x.category = "task";
          x.args = "{\"task\":" + std::to_string(s.id >> 32) +
                   ",\"serial\":" + std::to_string(std::uint32_t(s.id)) +
                   ",\"local_queue_depth\":" + std::to_string(s.depth) + "}";
          if (auto it = flows.in.find({r, s.index}); it != flows.in.end()) {
            x.flow = it->second;
            x.flow_in = true;
          }
          events.push_back(std::move(x));
          continue;
        }
        case trace_kind::park:
          parked_since[tid] = e.ns;
          if (tid < foreign_tid_base) depth_counter(tid, e.ns, e.aux);
          continue;
        case trace_kind::unpark: {
          auto& since = parked_since[tid];
          if (!since) continue;
          out_event x;
          x.ns = *since;
          x.duration_ns = e.ns - *since;
          x.tid = tid;
          x.name = "parked";
          x.category = "scheduler";
          events.push_back(std::move(x));
          since.reset();
          continue;
        }
        default: break;
      }
      if (e.kind == trace_kind::spawn) {
        task_life& t = life(e.id, e.ns);
        if (!t.begin_ns) {
          t.begin_ns = e.ns;
          t.begin_tid = tid;
        }
      } else if (e.kind == trace_kind::task_end) {
        task_life& t = life(e.id, e.ns);
        t.end_ns = e.ns;
        t.end_tid = tid;
      } else if (e.kind == trace_kind::wake) {
        life(e.id, e.ns);
      }
      if (e.kind == trace_kind::steal && tid < foreign_tid_base) depth_counter(tid, e.ns, e.aux);
      out_event x;
      x.ns = e.ns;
      x.tid = tid;
      x.name = instant_name(e);
      x.category = category_of(e.kind);
      x.args = instant_args(e);
      if (auto it = flows.out.find({r, i}); it != flows.out.end()) {
        x.flow = it->second;
        x.flow_out = true;
      } else if (auto in = flows.in.find({r, i}); in != flows.in.end()) {
        x.flow = in->second;
        x.flow_in = true;
      }
      events.push_back(std::move(x));
    }
    // Still going on when the copy was taken: they end there, marked unfinished.
    for (auto& [tid, open] : polls) {
      while (!open.empty()) {
        const open_slice s = open.back();
        open.pop_back();
        out_event x;
        x.ns = s.ns;
        x.duration_ns = capture.taken_at_ns > s.ns ? capture.taken_at_ns - s.ns : 0;
        x.tid = tid;
        x.name = "poll " + task_name(s.id);
        x.category = "task";
        x.args = "{\"task\":" + std::to_string(s.id >> 32) +
                 ",\"serial\":" + std::to_string(std::uint32_t(s.id)) + ",\"unfinished\":true}";
        if (auto it = flows.in.find({r, s.index}); it != flows.in.end()) {
          x.flow = it->second;
          x.flow_in = true;
        }
        events.push_back(std::move(x));
      }
    }
    for (auto& [tid, since] : parked_since) {
      if (!since) continue;
      out_event x;
      x.ns = *since;
      x.duration_ns = capture.taken_at_ns > *since ? capture.taken_at_ns - *since : 0;
      x.tid = tid;
      x.name = "parked";
      x.category = "scheduler";
      x.args = "{\"unfinished\":true}";
      events.push_back(std::move(x));
    }
  }

  // Task lifetimes: async begin/end pairs, clamped to the window.
  const std::uint64_t window_start =
      capture.window_start_ns != 0 ? std::min(capture.window_start_ns, earliest) : earliest;
  for (const auto& [id, t] : tasks) {
    out_event b, e;
    b.phase = 'b';
    e.phase = 'e';
    b.name = e.name = task_name(id);
    b.category = e.category = "task";
    b.id = e.id = hex_id(id);
    b.ns = t.begin_ns.value_or(std::min(window_start, t.first_ns));
    b.tid = t.begin_ns ? t.begin_tid : 1;
    e.ns = t.end_ns.value_or(std::max(capture.taken_at_ns, b.ns));
    e.tid = t.end_ns ? t.end_tid : b.tid;
    if (e.ns < b.ns) e.ns = b.ns;
    b.args = t.begin_ns ? "{}" : "{\"spawned_before_window\":true}";
    e.args = t.end_ns ? "{}" : "{\"still_running\":true}";
    events.push_back(std::move(b));
    events.push_back(std::move(e));
  }

  // Time order; at equal times the longer slice first (it encloses the shorter), and an async
  // begin before an end.
  std::stable_sort(events.begin(), events.end(), [](const out_event& a, const out_event& b) {
    if (a.ns != b.ns) return a.ns < b.ns;
    return a.duration_ns > b.duration_ns;
  });

  std::string out;
  json_writer w(out);
  w.begin_object();
  w.member("displayTimeUnit", "ns");
  w.key("otherData").begin_object();
  w.member("source", "spindle");
  w.member("clock", core::trace_clock_is_tsc() ? "tsc (converted to CLOCK_MONOTONIC)"
                                                : "CLOCK_MONOTONIC");
  w.member("window_start_us", std::string_view(micros(capture.window_start_ns)));
  w.member("taken_at_us", std::string_view(micros(capture.taken_at_ns)));
  std::uint64_t overwritten = 0, torn = 0;
  for (const auto& ring : capture.rings) {
    overwritten += ring.overwritten;
    torn += ring.torn;
  }
  w.member("events_overwritten", overwritten);
  w.member("events_torn", torn);
  if (!capture.reason.empty()) w.member("dump_reason", std::string_view(capture.reason));
  w.end_object();
  w.key("traceEvents").begin_array();
  auto metadata = [&](const char* name, std::int64_t tid, auto value, const char* arg) {
    w.begin_object();
    w.member("ph", "M").member("name", name).member("pid", 1).member("tid", tid);
    w.key("args").begin_object().member(arg, value).end_object();
    w.end_object();
  };
  metadata("process_name", 0, std::string_view("spindle runtime"), "name");
  for (const auto& [tid, name] : thread_names) {
    metadata("thread_name", tid, std::string_view(name), "name");
    metadata("thread_sort_index", tid, tid, "sort_index");
  }
  for (const out_event& e : events) {
    w.begin_object();
    const char phase[2] = {e.phase, 0};
    w.member("ph", phase);
    w.member("name", std::string_view(e.name));
    w.member("cat", e.category);
    w.member("pid", 1).member("tid", e.tid);
    w.key("ts").raw(micros(e.ns));
    if (e.phase == 'X') w.key("dur").raw(micros(e.duration_ns));
    if (!e.id.empty()) w.member("id", std::string_view(e.id));
    if (e.flow != 0) {
      w.member("bind_id", std::string_view(hex_id(e.flow)));
      if (e.flow_out) w.member("flow_out", true);
      if (e.flow_in) w.member("flow_in", true);
    }
    if (!e.args.empty()) w.key("args").raw(e.args);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return out;
}

std::string trace_json(const registry& source, std::chrono::milliseconds last) {
  std::shared_ptr<core::trace_recorder> recorder = source.trace_source();
  if (!recorder) return chrome_trace_json(core::trace_capture{});
  return chrome_trace_json(recorder->collect(last));
}

bool set_tracing(registry& source, bool on) {
  std::shared_ptr<core::trace_recorder> recorder = source.trace_source();
  if (!recorder) return false;
  recorder->set_enabled(on);
  return true;
}

bool tracing(const registry& source) {
  std::shared_ptr<core::trace_recorder> recorder = source.trace_source();
  return recorder && recorder->enabled();
}

void request_trace_dump(registry& source, std::string reason, std::chrono::milliseconds last) {
  if (std::shared_ptr<core::trace_recorder> recorder = source.trace_source()) {
    recorder->request_dump(std::move(reason), last);
  }
}

std::string last_trace_dump_json(const registry& source) {
  std::shared_ptr<core::trace_recorder> recorder = source.trace_source();
  if (!recorder) return chrome_trace_json(core::trace_capture{});
  std::vector<core::trace_capture> dumps = recorder->dumps();
  if (dumps.empty()) return chrome_trace_json(core::trace_capture{});
  return chrome_trace_json(dumps.back());
}

}  // namespace spindle::diagnostics
