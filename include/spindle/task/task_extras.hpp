// What few spawned tasks use, kept out of every task's header (spawned_task.hpp): one pointer
// there, this block allocated on first use. Owner-only: written before the task is first
// scheduled or by the thread running the task, read by the thread completing it (the same
// thread, or the shutdown thread once nothing runs).
#pragma once

#include <coroutine>

#include "spindle/task/spawned_task.hpp"

namespace spindle::detail {

// Something to do when a task completes (leaving a task_slot's queue, a name's release).
class completion_hook {
 public:
  virtual ~completion_hook() = default;
  virtual void on_complete() noexcept = 0;
  completion_hook* next = nullptr;
};

struct task_extras {
  tidy_entry* tidy_top = nullptr;          // the registered clean-ups, last first (tidy.hpp)
  std::coroutine_handle<> tidy_runner;     // set once the clean-ups started (owns its frame)
  spawned_task_base::outcome_kind finishing = spawned_task_base::outcome_kind::value;
  completion_hook* hooks = nullptr;        // run and deleted by complete_with
};

}  // namespace spindle::detail
