// Errors every module shares. Each says what the caller did wrong or what state the runtime is
// in; none is used for control flow inside the runtime except `task_cancelled` (task module).
#pragma once

#include <stdexcept>

namespace spindle {

// The caller broke an API contract: awaiting a join handle twice, joining a detached task,
// an absurd worker or executor count (0 workers means "one per hardware thread"), blocking on
// a runtime from one of its own workers, and so on.
class usage_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// The runtime is shutting down (or has shut down) and accepts no new work.
class runtime_stopped : public std::runtime_error {
 public:
  runtime_stopped() : std::runtime_error("spindle: the runtime is shutting down") {}
};

}  // namespace spindle
