// How cancellation reaches a task: the one outcome used everywhere.
//
// Cancelling a task sets a flag; the task observes it at its next suspension point (an await
// that would wait: a join, a sleep, a lock, a channel, yield_now, or a cooperative-budget yield):
// that await throws `task_cancelled` instead of waiting. If the task is already waiting when the
// cancel arrives, the wait is interrupted and the await throws. Code that catches it may clean up
// and rethrow; a task that lets it escape completes as "cancelled", and whoever joins it gets
// `task_cancelled` thrown in turn. A task cancelled before it ever ran does not run at all.
#pragma once

#include <exception>

namespace spindle {

class task_cancelled : public std::exception {
 public:
  const char* what() const noexcept override { return "spindle: task cancelled"; }
};

}  // namespace spindle
