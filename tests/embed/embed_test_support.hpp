// Helpers for the embedded-executor tests (tests/embed): a phase recorder and host loops.
// Header-only; included by tests/embed/*_test.cpp only.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace spindle::testing {

// Records every phase of an executor through set_phase_observer, split into ticks (a new tick
// starts whenever the executor's tick counter moved). Ticking thread only, like the observer.
// Tasks read phase_number() to log in which phase they run.
class phase_log {
 public:
  explicit phase_log(spindle::embed::embedded_executor& executor) : executor_(executor) {
    executor.set_phase_observer(&phase_log::observe, this);
  }
  ~phase_log() { executor_.set_phase_observer(nullptr, nullptr); }
  phase_log(const phase_log&) = delete;
  phase_log& operator=(const phase_log&) = delete;

  // The phases of each tick seen so far, in order.
  const std::vector<std::vector<spindle::embed::phase>>& ticks() const noexcept { return ticks_; }
  // 1-based number of the phase running now (0 before the first phase), over all ticks.
  std::uint64_t phase_number() const noexcept { return phases_; }
  // The kind of the phase running now.
  spindle::embed::phase current() const noexcept { return current_; }
  // 1-based index of the tick running now.
  std::uint64_t tick_number() const noexcept { return ticks_.size(); }
  // Number of execute phases seen so far.
  std::uint64_t execute_phases() const noexcept { return executes_; }

 private:
  static void observe(void* context, spindle::embed::phase p) {
    auto* self = static_cast<phase_log*>(context);
    const std::uint64_t tick = self->executor_.statistics().ticks;
    if (tick != self->last_tick_) {
      self->last_tick_ = tick;
      self->ticks_.emplace_back();
    }
    self->ticks_.back().push_back(p);
    self->current_ = p;
    ++self->phases_;
    if (p == spindle::embed::phase::execute) ++self->executes_;
  }

  spindle::embed::embedded_executor& executor_;
  std::vector<std::vector<spindle::embed::phase>> ticks_;
  std::uint64_t last_tick_ = 0;
  std::uint64_t phases_ = 0;
  std::uint64_t executes_ = 0;
  spindle::embed::phase current_ = spindle::embed::phase::service;
};

// A host loop for one task: ticks while asked to, moves the virtual time to the next timer when
// nothing else is left, and waits for a foreign tick request (another thread or runtime) when
// not even a timer is pending. Returns once `handle` is finished.
template <class T>
void drive_until_finished(test_host& host, spindle::embed::embedded_executor& executor,
                          const spindle::join_handle<T>& handle) {
  for (;;) {
    host.run_until_idle(executor);
    if (handle.is_finished()) return;
    const spindle::clock_time deadline = executor.next_deadline();
    if (deadline != spindle::clock_time::max()) {
      if (deadline > host.now()) host.set(deadline);
      executor.tick();
      continue;
    }
    host.wait_for_soon_request();
  }
}

// Runs `body` on `executor` (driven by `host` as above) and returns its outcome.
template <class T>
T run_embedded(test_host& host, spindle::embed::embedded_executor& executor,
               spindle::task<T> body) {
  auto handle = executor.spawn(std::move(body));
  drive_until_finished(host, executor, handle);
  return handle.join();
}

}  // namespace spindle::testing
