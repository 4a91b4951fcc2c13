// Finding a runtime's actor system, and where a new actor lives (actor.hpp, "Placement").
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spindle/actor/actor.hpp"
#include "spindle/core/clock.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/diagnostics/prometheus.hpp"

namespace spindle {
namespace {

// The actor system as an extension of the task layer's runtime state: shut down right after
// the runtime's tasks were abandoned (shutdown step 6), destroyed with the runtime.
struct actor_extension final : detail::runtime_state::extension {
  explicit actor_extension(detail::runtime_state& state)
      : system(*state.core, actor_system_options{}),
        metrics(state.diagnostics_registry.add_metrics(
            [this](std::string& out) { system.write_metrics(out); })) {}
  void on_runtime_stopped() noexcept override { system.shutdown(); }
  actor_system system;
  // The spindle_actor_* families (G2) in the runtime's registry, while the system lives.
  diagnostics::registry::registration metrics;
};

actor_system& system_in(detail::runtime_state& state) {
  auto& extension = state.extension_at(detail::runtime_state::actor_extension, [&state] {
    return std::make_unique<actor_extension>(state);
  });
  return static_cast<actor_extension&>(extension).system;
}

thread_local std::uint32_t placement_random = 0x85ebca6bu;

}  // namespace

void actor_system::write_metrics(std::string& out) const {
  using diagnostics::metric_type;
  const std::uint32_t count = core_.executor_count();
  std::vector<std::string> indexes;
  std::vector<const actor_scheduler*> wheels;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (const actor_scheduler* wheel = find_scheduler(i)) {
      indexes.push_back(std::to_string(i));
      wheels.push_back(wheel);
    }
  }
  diagnostics::prometheus_writer w(out);
  // One family at a time, a sample per executor that has a wheel (relaxed loads: samples of
  // the wheels' single-writer counters).
  auto each = [&](std::string_view name, metric_type type, std::string_view help, auto&& value) {
    w.family(name, type, help);
    for (std::size_t i = 0; i < wheels.size(); ++i) {
      const diagnostics::metric_label label{"executor", indexes[i]};
      w.sample(name, std::span<const diagnostics::metric_label>(&label, 1), value(wheels[i]->stats()));
    }
  };
  constexpr auto relaxed = std::memory_order_relaxed;
  each("spindle_actor_messages_total", metric_type::counter,
       "Actor messages handled on this executor.",
       [](const actor_scheduler_stats& s) { return s.messages_handled.load(relaxed); });
  each("spindle_actor_runs_total", metric_type::counter, "Actor runs on this executor.",
       [](const actor_scheduler_stats& s) { return s.actor_runs.load(relaxed); });
  each("spindle_actor_runs_cut_by_time_total", metric_type::counter,
       "Actor runs that spent their whole time slice.",
       [](const actor_scheduler_stats& s) { return s.runs_cut_by_time.load(relaxed); });
  each("spindle_actor_migrations_in_total", metric_type::counter,
       "Actors that moved to this executor.",
       [](const actor_scheduler_stats& s) { return s.migrations_in.load(relaxed); });
  each("spindle_actor_migrations_out_total", metric_type::counter,
       "Actors that moved away from this executor.",
       [](const actor_scheduler_stats& s) { return s.migrations_out.load(relaxed); });
  each("spindle_actor_halted_total", metric_type::counter, "Actors that halted on this executor.",
       [](const actor_scheduler_stats& s) { return s.halted.load(relaxed); });
  each("spindle_actor_busy_seconds_total", metric_type::counter,
       "Time actors ran on this executor (coarse clock).",
       [](const actor_scheduler_stats& s) { return double(s.busy_nanoseconds.load(relaxed)) / 1e9; });
  each("spindle_actor_live", metric_type::gauge, "Actors homed on this executor, not halted.",
       [](const actor_scheduler_stats& s) { return s.live_actors.load(relaxed); });
  w.family("spindle_actor_wheel_queued_work_seconds", metric_type::gauge,
           "Estimated CPU demand of the actors waiting in this executor's wheel.");
  for (std::size_t i = 0; i < wheels.size(); ++i) {
    const diagnostics::metric_label label{"executor", indexes[i]};
    w.sample("spindle_actor_wheel_queued_work_seconds",
             std::span<const diagnostics::metric_label>(&label, 1),
             double(wheels[i]->queued_work_ns()) / 1e9);
  }
  w.family("spindle_actor_supervisor_restarts_total", metric_type::counter,
           "Children restarted by supervisors of this runtime.");
  w.sample("spindle_actor_supervisor_restarts_total", {}, supervisor_restarts());
}

actor_system& actor_system_of(core::runtime_core& core) {
  auto* state = static_cast<detail::runtime_state*>(core.layer_state());
  if (state == nullptr) throw usage_error("spindle: actors need a spindle::runtime");
  return system_in(*state);
}

actor_system& actors_of(runtime& rt) { return actor_system_of(rt.core()); }

actor_system* current_actor_system() noexcept {
  detail::runtime_state* state = detail::current_runtime_state();
  if (state == nullptr) return nullptr;
  try {
    return &system_in(*state);
  } catch (...) {
    return nullptr;  // out of memory creating it
  }
}

namespace actor_detail {

std::uint32_t pick_home(actor_system& system, const spawn_options& options) {
  core::runtime_core& core = system.core();
  if (options.executor) {
    if (*options.executor >= core.executor_count()) {
      throw usage_error("spindle: spawn_options::executor names no executor");
    }
    if (!options.domain.contains(core.executor_at(*options.executor).placement())) {
      throw usage_error("spindle: spawn_options::executor is outside spawn_options::domain");
    }
    return *options.executor;
  }
  const std::int32_t here = system.current_index();
  if (here >= 0 && options.domain.contains(core.executor_at(std::uint32_t(here)).placement())) {
    return std::uint32_t(here);
  }
  if (options.domain.where == core::executor_domain::kind::any) {
    return core.pick_two_choices(placement_random);
  }
  const std::optional<std::uint32_t> member = core.pick_two_choices_in(options.domain,
                                                                       placement_random);
  if (!member) throw usage_error("spindle: no executor of this runtime is in spawn_options::domain");
  return *member;
}

}  // namespace actor_detail
}  // namespace spindle
