// task_host: the part every host shares (include/spindle/task/task_host.hpp).
#include "spindle/task/task_host.hpp"

#include <vector>

#include "spindle/diagnostics/server.hpp"
#include "spindle/task/named_tasks.hpp"
#include "spindle/task/spawned_task.hpp"

namespace spindle::detail {

task_host::task_host(std::uint32_t shards)
    : tasks(shards), names(std::make_unique<named_task_registry>()) {}

task_host::~task_host() { stop_live_view(); }

void task_host::stop_live_view() noexcept {
  if (live_view) live_view->stop();
}

void task_host::abandon_all() noexcept {
  // Collect first: abandoning runs frame destructors and frees slots. Repeat in case a
  // destructor made another task live (it cannot spawn: the host is stopping).
  for (;;) {
    std::vector<spawned_task_base*> victims;
    tasks.for_each_live([&victims](spawned_task_base* t) { victims.push_back(t); });
    if (victims.empty()) return;
    for (spawned_task_base* t : victims) t->abandon();
  }
}

}  // namespace spindle::detail
