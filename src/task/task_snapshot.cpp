// The task layer's part of the snapshot: see include/spindle/task/snapshot.hpp.
#include "spindle/task/snapshot.hpp"

#include <cstdio>
#include <cstring>

#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/diagnostics/snapshot.hpp"
#include "spindle/task/runtime.hpp"

namespace spindle {

const task_info* runtime_snapshot::find_task(std::string_view name) const noexcept {
  for (const task_info& t : tasks) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

const task_info* runtime_snapshot::find_task(task_id id) const noexcept {
  for (const task_info& t : tasks) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

namespace detail {

void collect_executors(const core::runtime_core& core, std::vector<executor_info>& out) {
  const std::uint32_t count = core.executor_count();
  out.reserve(out.size() + count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const core::executor& e = core.executor_at(i);
    const core::executor_stats& stats = e.stats();
    // relaxed: counters sampled for a person; each is whole.
    constexpr auto relaxed = std::memory_order_relaxed;
    executor_info info;
    info.index = i;
    info.cpu = e.last_cpu();
    info.utilisation = double(stats.utilisation.load(relaxed)) / 65536.0;
    info.load = e.load();
    info.in_long_runnable = e.in_long_runnable();
    info.runnables_run = stats.runnables_run.load(relaxed);
    info.steals = stats.steals.load(relaxed);
    info.parks = stats.parks.load(relaxed);
    info.budget_exhaustions = stats.budget_exhaustions.load(relaxed);
    info.timers_fired = stats.timers_fired.load(relaxed);
    info.forced_yields = stats.forced_yields.load(relaxed);
    info.busy_ns = stats.busy_nanoseconds.load(relaxed);
    // The queues' and timers' size queries are reads (a sample, or under the service's lock)
    // that their interfaces do not mark const.
    auto& sampled_core = const_cast<core::runtime_core&>(core);
    core::executor& sampled = sampled_core.executor_at(i);
    info.timers_pending = sampled.timers().size();
    info.local_queue = sampled.local().size();
    info.injector_queue = sampled_core.global_injector().size(i);
    // Taken first, then pushed: the difference cannot go negative.
    const std::uint64_t taken = stats.taken_from_inbox.load(relaxed);
    const std::uint64_t pushed = stats.inbox_pushes.load(relaxed);
    info.inbox_queue = pushed > taken ? pushed - taken : 0;
    out.push_back(info);
  }
}

void write_executor_json(diagnostics::json_writer& out, const executor_info& e) {
  out.begin_object();
  out.member("index", e.index);
  out.member("cpu", e.cpu);
  out.member("utilisation", e.utilisation);
  out.member("load", e.load);
  out.member("in_long_runnable", e.in_long_runnable);
  out.member("runnables_run", e.runnables_run);
  out.member("steals", e.steals);
  out.member("parks", e.parks);
  out.member("budget_exhaustions", e.budget_exhaustions);
  out.member("timers_fired", e.timers_fired);
  out.member("forced_yields", e.forced_yields);
  out.member("busy_ns", e.busy_ns);
  out.member("polls", e.runnables_run);
  out.member("timers_pending", e.timers_pending);
  out.key("queues").begin_object();
  out.member("local", e.local_queue).member("injector", e.injector_queue).member("inbox", e.inbox_queue);
  out.end_object();
  out.end_object();
}

namespace {
std::string_view wait_kind_key(wait_kind kind) noexcept {
  switch (kind) {
    case wait_kind::channel_receive: return "channel_receive";
    case wait_kind::channel_send: return "channel_send";
    case wait_kind::join_set: return "join_set";
    default: return to_string(kind);
  }
}
}  // namespace

void write_task_json(diagnostics::json_writer& out, const task_info& t) {
  out.begin_object();
  char id[32];
  std::snprintf(id, sizeof id, "%u.%u", t.id.index, t.id.serial);
  out.member("id", std::string_view(id));
  out.member("name", std::string_view(t.name));
  // The function's name (a long signature) stays in the structured API: it would double the
  // document's size.
  out.key("location").begin_object();
  out.member("file", t.file != nullptr ? t.file : "");
  out.member("line", t.line);
  out.end_object();
  if (t.has_parent) {
    std::snprintf(id, sizeof id, "%u.%u", t.parent.index, t.parent.serial);
    out.member("parent", std::string_view(id));
  } else {
    out.key("parent").null();
  }
  if (t.executor != no_executor) {
    out.member("executor", unsigned(t.executor));
  } else {
    out.key("executor").null();
  }
  out.member("state", to_string(t.state));
  if (t.state == task_state::suspended) {
    char what[96];
    describe_wait(t, what, sizeof what);
    out.member("waiting_on", std::string_view(what));
    out.key("wait").begin_object();
    out.member("kind", wait_kind_key(t.waiting_on.kind));
    out.member("object", t.waiting_on.object);
    out.member("number", t.waiting_on.number);
    out.member("for_ns", t.state_for_ns);
    // A sleep: time to its deadline when the snapshot read the host's clock (<= 0: due).
    if (t.waiting_on.kind == wait_kind::sleep) out.member("left_ns", t.sleep_left_ns);
    out.end_object();
  } else {
    out.key("waiting_on").null();
  }
  out.member("waker_registered", t.waker_registered);
  out.member("polls", t.polls);
  out.member("wakes", t.wakes);
  out.member("self_wakes", t.self_wakes);
  out.member("busy_ns", t.busy_ns);
  out.member("scheduled_ns", t.scheduled_ns);
  out.member("idle_ns", t.idle_ns);
  out.member("age_ns", t.age_ns);
  out.member("last_wake_ns", t.last_wake_ns);
  out.end_object();
}

diagnostics::registry::registration register_tasks_section(
    diagnostics::registry& registry, const task_table& table,
    const std::atomic<std::uint64_t>* record_clock, const spindle::clock& timer_clock) {
  return registry.add_snapshot_section("tasks", [&table, record_clock, &timer_clock](
                                                    diagnostics::json_writer& out) {
    out.begin_array();
    for_each_task_record(table, record_clock, timer_clock,
                         [&out](const task_info& t) { write_task_json(out, t); });
    out.end_array();
  });
}

diagnostics::registry::registration register_executors_section(
    diagnostics::registry& registry, const core::runtime_core& core) {
  return registry.add_snapshot_section("executors", [&core](diagnostics::json_writer& out) {
    std::vector<executor_info> executors;
    collect_executors(core, executors);
    out.begin_array();
    for (const executor_info& e : executors) write_executor_json(out, e);
    out.end_array();
  });
}

}  // namespace detail

runtime_snapshot runtime::snapshot() const {
  runtime_snapshot result;
  result.taken_at_ns = core::monotonic_nanoseconds();
  detail::collect_executors(*state_->core, result.executors);
  result.tasks.reserve(state_->tasks.live_count());
  detail::for_each_task_record(state_->tasks, state_->record_clock, state_->clock(),
                               [&result](const task_info& t) {
    result.tasks.push_back(t);
    if (t.executor < result.executors.size()) ++result.executors[t.executor].tasks;
  });
  return result;
}

std::string runtime::snapshot_json() const {
  return diagnostics::snapshot_json(state_->diagnostics_registry);
}

}  // namespace spindle
