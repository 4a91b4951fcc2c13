// Tidy destructors: the coroutine that runs a finishing task's clean-ups (task/tidy.hpp).
#include "spindle/task/tidy.hpp"

#include <memory>

namespace spindle::detail {
namespace {

// Runs the clean-ups last-registered first, each to completion; the task is shielded meanwhile
// (spawned_task.cpp). Its final suspend calls t.on_root_finished, which then publishes the
// body's outcome.
task<void> run_tidy_stack(spawned_task_base* t) {
  for (;;) {
    // Owned here: destroyed with this frame if the task is abandoned mid-clean-up.
    std::unique_ptr<tidy_entry> entry(t->pop_tidy());
    if (!entry) break;
    if (entry->dismissed) continue;
    try {
      co_await entry->start();
    } catch (...) {
      // A clean-up's failure does not change the task's outcome (tidy.hpp).
    }
  }
}

}  // namespace

std::coroutine_handle<> start_tidy_runner(spawned_task_base& t) {
  task<void> runner = run_tidy_stack(&t);
  runner.handle().promise().set_root(&t);
  return runner.release();
}

}  // namespace spindle::detail
