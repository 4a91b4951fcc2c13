// spindle: the umbrella header. Including it gives the whole public API.
#pragma once

#include "spindle/core/clock.hpp"
#include "spindle/core/errors.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"
#include "spindle/task/join_set.hpp"
#include "spindle/task/when.hpp"
#include "spindle/task/concurrent.hpp"
#include "spindle/task/stop_token.hpp"
#include "spindle/task/tidy.hpp"
#include "spindle/task/task_slot.hpp"
#include "spindle/task/named_tasks.hpp"
#include "spindle/time/time.hpp"
#include "spindle/sync/sync.hpp"
#include "spindle/fork/fork.hpp"
#include "spindle/io/io.hpp"
#include "spindle/net/net.hpp"
#include "spindle/net/resolve.hpp"
#include "spindle/net/unix.hpp"
#include "spindle/net/buffered.hpp"
#include "spindle/net/tls.hpp"
#include "spindle/actor/actors.hpp"
#include "spindle/dispatch/dispatcher.hpp"
#include "spindle/embed/embed.hpp"

namespace spindle {

// The library version, "MAJOR.MINOR.PATCH".
const char* version_string() noexcept;

}  // namespace spindle
