// spindle: the umbrella header. Including it gives the whole public API.
#pragma once

#include "spindle/core/clock.hpp"
#include "spindle/core/errors.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task.hpp"
#if __has_include("spindle/time/sleep.hpp")
#include "spindle/time/sleep.hpp"
#endif
#if __has_include("spindle/sync/sync.hpp")
#include "spindle/sync/sync.hpp"
#endif

namespace spindle {

// The library version, "MAJOR.MINOR.PATCH".
const char* version_string() noexcept;

}  // namespace spindle
