// What a running program says about itself: snapshot, JSON, metrics, trace, warnings.
#include <spindle/spindle.hpp>
#include <spindle/diagnostics/metrics.hpp>
#include <spindle/diagnostics/trace_export.hpp>
#include <spindle/diagnostics/warnings.hpp>
#include <spindle/task/snapshot.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

using namespace std::chrono_literals;

spindle::task<int> wait_for_order(spindle::channel<int>& orders) {
  std::optional<int> order = co_await orders.receive();
  co_return order ? *order : -1;
}

spindle::task<void> stall_until_noticed(const std::atomic<int>& stalls) {
  // Never suspends: its executor is stuck in this task until the monitor reports a stall.
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (stalls == 0 && std::chrono::steady_clock::now() < give_up) {
  }
  co_return;
}

int main() {
  spindle::runtime_options options;
  options.workers = 2;
  options.diagnostics.stall_threshold = 10ms;
  spindle::runtime rt(options);
  std::atomic<int> stalls{0};
  rt.warnings().set_warning_hook([&stalls](const spindle::diagnostics::warning& w) {
    if (w.kind == spindle::diagnostics::warning_kind::stall) ++stalls;
  });

  spindle::channel<int> orders(1);
  auto waiter = rt.spawn_named("order-waiter", wait_for_order(orders));

  // The snapshot lists every live task: its name, state, and what it waits on.
  std::string waits_on;
  for (int attempt = 0; attempt < 1'000'000 && waits_on.empty(); ++attempt) {
    const spindle::runtime_snapshot snapshot = rt.snapshot();
    const spindle::task_info* task = snapshot.find_task("order-waiter");
    if (task != nullptr && task->state == spindle::task_state::suspended) {
      char text[96];
      spindle::describe_wait(*task, text, sizeof text);  // "channel#N receive"
      waits_on = text;
    } else {
      std::this_thread::yield();
    }
  }

  const std::string json = rt.snapshot_json();  // with actors, dispatchers, warnings, ...
  const std::string metrics = spindle::diagnostics::metrics_text(rt.diagnostics_registry());

  // Tracing: switch it on, run something, export Chrome Trace Event JSON (Perfetto opens it).
  spindle::diagnostics::set_tracing(rt.diagnostics_registry(), true);
  rt.block_on(stall_until_noticed(stalls));
  const std::string trace = spindle::diagnostics::trace_json(rt.diagnostics_registry(), 0ms);
  spindle::diagnostics::set_tracing(rt.diagnostics_registry(), false);

  (void)orders.try_send(7);
  const bool ok = waiter.join() == 7 && waits_on.find("channel") != std::string::npos &&
                  json.find("order-waiter") != std::string::npos &&
                  metrics.find("spindle_") != std::string::npos &&
                  trace.find("traceEvents") != std::string::npos && stalls > 0;
  rt.warnings().set_warning_hook(nullptr);  // before `stalls` goes
  return ok ? 0 : 1;
}
