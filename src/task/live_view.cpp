// The live view of a task host (include/spindle/task/live_view.hpp).
#include "spindle/task/live_view.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/task/task_host.hpp"

#include "spindle/diagnostics/metrics.hpp"
#include "spindle/diagnostics/snapshot.hpp"
#include "spindle/diagnostics/trace_export.hpp"

namespace spindle::detail {

diagnostics::server_providers live_view_providers(task_host& host, core::runtime_core* core) {
  (void)core;
  diagnostics::server_providers p;
  // The registry lives in the host, which stops its server before it goes (task_host.hpp).
  const diagnostics::registry& r = host.diagnostics_registry;
  p.metrics = [&r] { return diagnostics::metrics_text(r); };
  p.snapshot = [&r] { return diagnostics::snapshot_json(r); };
  p.trace = [&r](std::chrono::milliseconds last) { return diagnostics::trace_json(r, last); };
  return p;
}

std::unique_ptr<diagnostics::server> start_live_view(task_host& host, core::runtime_core* core,
                                                     const core::diagnostics_options& options,
                                                     const char* what) noexcept {
  try {
    const diagnostics::server_setting setting =
        diagnostics::resolve_server_setting(options, std::getenv("SPINDLE_DIAGNOSTICS"));
    if (setting.what == diagnostics::server_setting::kind::invalid) {
      std::fprintf(stderr, "%s\n", setting.error.c_str());
      return nullptr;
    }
    if (setting.what == diagnostics::server_setting::kind::off) return nullptr;
    auto server = std::make_unique<diagnostics::server>(setting.address,
                                                        live_view_providers(host, core));
    std::fprintf(stderr, "spindle: diagnostics of this %s at http://%s/\n", what,
                 server->address().c_str());
    return server;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle: no diagnostics server: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "spindle: no diagnostics server: unknown error\n");
  }
  return nullptr;
}

}  // namespace spindle::detail
