// The task layer's runtime: the task table, spawn entry points, shutdown step 5.
#include "spindle/task/runtime.hpp"

#include "spindle/task/snapshot.hpp"

#include "spindle/core/executor.hpp"
#include "spindle/core/frame_allocator.hpp"
#include "spindle/diagnostics/server.hpp"
#include "spindle/task/live_view.hpp"
#include "spindle/diagnostics/metrics.hpp"

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

// The task layer's side of the warnings (diagnostics/warnings.hpp): thresholds, the describer
// that tells which task a stalled runnable is (by the task table's slots, without touching the
// runnable), and the monitor's watch. G1's records add the name, location and per-task views.
void connect_warnings(detail::runtime_state& state, core::runtime_core& core) {
  diagnostics::warning_hub& hub = state.warnings;
  hub.configure(core.options().diagnostics);
  detail::task_table* table = &state.tasks;
  hub.set_runnable_describer([table](const core::runnable* r, diagnostics::warning_subject& out) {
    task_id id;
    if (!table->find_runnable(r, id)) return false;
    out.what = diagnostics::warning_subject::kind::task;
    out.id = (std::uint64_t(id.index) << 32) | id.serial;
    return true;
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
  core->set_layer_state(state_.get());
  // Warnings (G4): the monitor watches the executors; a stall names its task through the table.
  connect_warnings(*state_, *core);
  state_->executor_metrics = state_->diagnostics_registry.add_metrics(
      [raw = core.get()](std::string& out) { diagnostics::write_executor_metrics(out, *raw); });
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
  state_->tasks_section = detail::register_tasks_section(state_->diagnostics_registry, state_->tasks);
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
