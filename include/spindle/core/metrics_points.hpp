// G2 metrics points for layers whose headers do not include the executor (the task layer's
// inline awaits): out-of-line calls, each on a path that is already a slow one
// (executor_metrics.hpp has the inline points and the design).
#pragma once

namespace spindle::core::metrics {

// A task's cooperative budget forced it to yield: counted on the executor running this thread
// (nothing on other threads, e.g. an embedded executor's host, which counts its own).
void record_forced_yield() noexcept;

}  // namespace spindle::core::metrics
