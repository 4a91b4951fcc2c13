// The time module: everything about time in tasks (docs/design/time.md).
//
//   spindle::now(), co_await spindle::sleep_for(d) / sleep_until(t)   - time/sleep.hpp
//   spindle::interval, co_await iv.tick()                              - time/interval.hpp
//   co_await spindle::with_timeout(d, t) / with_deadline(at, t), over a task<T> (a child) or
//   any other awaitable (a cancellation scope, no child), spindle::timeout_error - time/timeout.hpp
//
// All of them read the runtime's clock (runtime_options::clock): with a manual_clock, time is
// virtual and moves only when a test advances it.
#pragma once

#include "spindle/time/interval.hpp"
#include "spindle/time/sleep.hpp"
#include "spindle/time/timeout.hpp"
