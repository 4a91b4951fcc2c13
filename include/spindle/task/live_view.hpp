// live_view: how a task host (the runtime, the embedded executor) gets its diagnostics server
// (diagnostics/server.hpp; docs/design/diagnostics.md, "Live view (G5)").
//
// The host calls start_live_view once it is built: when runtime_options::diagnostics (or
// embedded_options::diagnostics) names an address, or else the environment variable
// SPINDLE_DIAGNOSTICS does, the server starts on a thread of its own and its address is printed
// to stderr once ("spindle: diagnostics at http://127.0.0.1:PORT/"). A bad value, or an address
// that cannot be bound, is reported on stderr and the program goes on without a server: a
// diagnostics switch never stops a program. The host stops the server (task_host::
// stop_live_view) before its shutdown takes apart anything the providers read.
#pragma once

#include <memory>

#include "spindle/core/diagnostics_options.hpp"
#include "spindle/diagnostics/server.hpp"

namespace spindle::core {
class runtime_core;
}

namespace spindle::detail {

class task_host;

// What the endpoints of `host`'s server serve. `core`: the runtime's core, whose executors the
// snapshot lists; null for an embedded executor.
diagnostics::server_providers live_view_providers(task_host& host, core::runtime_core* core);

// Starts the server when asked (see above); null when not asked, or when it could not start.
// `what`: the host's kind, for the line on stderr ("runtime", "embedded executor"). Never throws.
std::unique_ptr<diagnostics::server> start_live_view(task_host& host, core::runtime_core* core,
                                                     const core::diagnostics_options& options,
                                                     const char* what) noexcept;

}  // namespace spindle::detail
