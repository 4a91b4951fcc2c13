// The task layer's runtime: the task table, spawn entry points, shutdown step 5.
#include "spindle/task/runtime.hpp"

#include "spindle/task/snapshot.hpp"

#include "spindle/core/executor.hpp"
#include "spindle/core/frame_allocator.hpp"
#include "spindle/diagnostics/server.hpp"
#include "spindle/task/live_view.hpp"
#include "spindle/diagnostics/metrics.hpp"
#include "spindle/diagnostics/prometheus.hpp"
#include "spindle/diagnostics/trace_export.hpp"
#include "spindle/task/task_record.hpp"

namespace spindle {
namespace detail {

void runtime_state::stop_extensions() noexcept {
  for (std::size_t slot = 0; slot < extension_slots; ++slot) {
    // acquire: pairs with extension_at's release store.
    if (extension* e = extension_pointers[slot].load(std::memory_order_acquire)) {
      e->on_runtime_stopped();
    }
  }
}

std::int32_t current_executor_index(const core::runtime_core& core) noexcept {
  core::executor* e = core::executor::current();
  return e != nullptr && &e->core() == &core ? std::int32_t(e->index()) : -1;
}

runtime_state* current_runtime_state() noexcept {
  core::executor* e = core::executor::current();
  return e != nullptr ? static_cast<runtime_state*>(e->core().layer_state()) : nullptr;
}

task_host* current_task_host() noexcept {
  if (spawned_task_base* t = spawned_task_base::current()) return &t->host();
  return current_runtime_state();
}

task_host& current_host_or_throw(const char* what) {
  task_host* host = current_task_host();
  if (host == nullptr) throw usage_error(what);
  return *host;
}

task_host::entry runtime_state::enter() noexcept {
  if (current_executor_index(*core) >= 0) return entry::own_thread;
  return core->enter_from_outside() ? entry::entered : entry::refused;
}

std::int32_t runtime_state::table_shard() const noexcept { return current_executor_index(*core); }

core::timer_service* runtime_state::timers_here() noexcept {
  core::executor* e = core::executor::current();
  return e != nullptr && &e->core() == core.get() ? &e->timers() : nullptr;
}

spindle::clock& runtime_state::clock() const noexcept { return core->clock(); }

}  // namespace detail

namespace {

// The task layer's side of the warnings (diagnostics/warnings.hpp): thresholds; the describer
// that tells which task a stalled runnable is (by the task table's slots, without touching the
// runnable) with its name and spawn location from the slot's record (task_record.hpp); the
// per-task views the task lints (self-wakes, lost waker, woken but not polled) sweep; the
// monitor's watch; and a flight-recorder dump of the trace (G3) on every warning while tracing.
// Everything captured lives in the runtime state, which outlives the hub's use of it (the
// monitor stops at shutdown before the state goes).
void connect_warnings(detail::runtime_state& state, core::runtime_core& core) {
  diagnostics::warning_hub& hub = state.warnings;
  hub.configure(core.options().diagnostics);
  detail::runtime_state* host = &state;
  // The state owns the hub, so the describer stays for the hub's life (its id is not kept).
  hub.add_runnable_describer([host](const core::runnable* r, diagnostics::warning_subject& out) {
    task_id id;
    if (!host->tasks.find_runnable(r, id)) return false;
    out.what = diagnostics::warning_subject::kind::task;
    out.id = detail::pack_task_id(id.index, id.serial);
    task_info info;
    if (host->tasks.read_record(id.index, info, detail::record_now_ns(host->record_clock)) &&
        info.id == id) {
      out.name = info.name;
      if (info.file != nullptr) out.location = std::string(info.file) + ":" + std::to_string(info.line);
    }
    return true;
  });
  // One step of the task lints' sweep: slots [from, from + count) of the table. The monitor
  // calls it; a slot's address is stable for the runtime's life (task_table.hpp), and the state
  // owns the hub, so `host` outlives every call.
  hub.set_task_visitor([host](std::uint32_t from, std::uint32_t count,
                              const std::function<void(const diagnostics::task_view&)>& visit) {
    const std::uint64_t now = detail::record_now_ns(host->record_clock);
    const std::uint32_t slots = host->tasks.slot_capacity();
    const std::uint32_t end = count >= slots - std::min(from, slots) ? slots : from + count;
    task_info info;
    for (std::uint32_t index = from; index < end; ++index) {
      if (!host->tasks.read_record(index, info, now)) continue;
      diagnostics::task_view view;
      view.id = detail::pack_task_id(info.id.index, info.id.serial);
      view.name = info.name;
      view.file = info.file;  // the text "file:line" only for a task reported (warnings.cpp)
      view.line = info.line;
      view.executor = info.executor == no_executor ? -1 : std::int32_t(info.executor);
      view.waker_registered = info.waker_registered;
      view.wakes = info.wakes;
      view.self_wakes = info.self_wakes;
      switch (info.state) {
        case task_state::scheduled:
          view.current = diagnostics::task_view::state::scheduled;
          view.state_for_ns = now > info.last_wake_ns ? now - info.last_wake_ns : 0;
          break;
        case task_state::running:
          view.current = diagnostics::task_view::state::running;
          break;
        case task_state::suspended:
          view.current = diagnostics::task_view::state::suspended;
          view.state_for_ns = info.state_for_ns;
          break;
        default:
          view.current = diagnostics::task_view::state::other;
      }
      visit(view);
    }
    return end >= slots ? diagnostics::task_sweep_done : end;
  });
  diagnostics::registry* registry = &state.diagnostics_registry;
  hub.add_on_warning([registry](const diagnostics::warning& w) {
    if (diagnostics::tracing(*registry)) {
      diagnostics::request_trace_dump(*registry, diagnostics::warning_hub::format(w),
                                      std::chrono::milliseconds(100));
    }
  });
  hub.watch_runtime(core);
}

}  // namespace

runtime::runtime(runtime_options options) {
  if (options.workers > 4096) throw usage_error("spindle: absurd worker count (> 4096)");
  auto core = std::make_shared<core::runtime_core>(std::move(options));
  state_ = std::make_shared<detail::runtime_state>(core->options().max_executors);
  state_->core = core;
  state_->diagnostics_registry.set_trace_source(core->trace_shared());  // G3: trace_json
  state_->record_clock = &core->coarse_clock();
  state_->task_records = core->options().diagnostics.records;
  core->set_layer_state(state_.get());
  // Warnings (G4): the monitor watches the executors; a stall names its task through the table.
  connect_warnings(*state_, *core);
  state_->executor_metrics = state_->diagnostics_registry.add_metrics(
      [raw = core.get(), tasks = &state_->tasks](std::string& out) {
        diagnostics::write_executor_metrics(out, *raw);
        diagnostics::prometheus_writer w(out);
        w.family("spindle_tasks_live", diagnostics::metric_type::gauge,
                 "Spawned tasks not yet completed (a scan of the task table).");
        w.sample("spindle_tasks_live", {}, std::uint64_t(tasks->live_count()));
      });
  // Step 5 of shutdown (then the layers above tasks stop). The hook keeps the task state alive until the shutdown finished (workers
  // and tasks use it through raw pointers); the core drops the hook after running it, which
  // breaks the cycle state -> core -> hook -> state.
  std::shared_ptr<detail::runtime_state> keep = state_;
  core->set_on_stopped([keep] {
    keep->stop_live_view();  // a shutdown started on the core directly: the server goes first
    keep->abandon_all();
    keep->stop_extensions();
  });
  state_->executors_section =
      detail::register_executors_section(state_->diagnostics_registry, *core);
  state_->tasks_section = detail::register_tasks_section(state_->diagnostics_registry, state_->tasks,
                                                       state_->record_clock, core->clock());
  state_->fork_join_section = state_->diagnostics_registry.add_snapshot_section(
      "fork_join", [raw = core.get()](diagnostics::json_writer& out) {
        // acquire: pairs with the fork module's release store of its writer.
        if (auto write = detail::fork_section_writer.load(std::memory_order_acquire)) {
          write(*raw, out);
        } else {
          out.null();  // nothing forked in this process yet
        }
      });
  core->start(core);
  // The live view (task/live_view.hpp), once the executors exist: it lists them.
  state_->live_view = detail::start_live_view(*state_, core.get(), core->options().diagnostics,
                                              "runtime");
}

runtime::~runtime() {
  shutdown();
  // The task state and the extensions (the actor system) may be the last to free frames: drop
  // them here, then give back what they left in this thread's private frame cache (shutdown
  // already gave back the runtime's share of the depot; frame_allocator.hpp).
  state_.reset();
  core::release_thread_frame_cache();
}

void runtime::shutdown() noexcept {
  if (!state_) return;
  // The server reads the executors, the task table and the registry's contributors: it stops
  // before the core's shutdown takes any of them apart.
  state_->stop_live_view();
  if (auto core = state_->core) core->shutdown();
}

std::uint16_t runtime::diagnostics_port() const noexcept {
  return state_->live_view ? state_->live_view->port() : 0;
}

}  // namespace spindle
