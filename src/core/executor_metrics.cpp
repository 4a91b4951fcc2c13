// G2 metrics points called out of line (metrics_points.hpp; design in executor_metrics.hpp).
#include "spindle/core/executor_metrics.hpp"

namespace spindle::core::metrics {

void record_forced_yield() noexcept {
  if (executor* e = executor::current()) bump(e->owner_stats().forced_yields);
}

}  // namespace spindle::core::metrics
