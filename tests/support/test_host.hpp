// A host for embedded-executor tests: virtual time the test moves, and a record of what the
// executor asked of it (tick_at, tick_soon). Header-only; used by tests/embed and tests/stress.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "spindle/embed/embedded_executor.hpp"
#include "support/test_support.hpp"

namespace spindle::testing {

class test_host final : public spindle::embed::integration {
 public:
  // Host-thread side -------------------------------------------------------------------------
  spindle::clock_time now() const noexcept override {
    // relaxed: the time is set by the test's own thread, which is also the ticking thread.
    return spindle::clock_time(spindle::clock_duration(time_.load(std::memory_order_relaxed)));
  }
  void tick_at(spindle::clock_time when) noexcept override {
    tick_at_requests.push_back(when);
    requested_at = when;
  }
  // Any thread.
  void tick_soon() noexcept override {
    // release: pairs with take_soon_requests' acquire (what the requester published is seen).
    soon_requests_.fetch_add(1, std::memory_order_release);
    soon_requests_.notify_all();
  }

  void advance(spindle::clock_duration by) {
    time_.fetch_add(by.count(), std::memory_order_relaxed);  // relaxed: see now()
  }
  void set(spindle::clock_time to) { time_.store(to.time_since_epoch().count()); }
  // How many tick_soon() calls arrived since the last take (and resets the count).
  std::uint64_t take_soon_requests() noexcept {
    return soon_requests_.exchange(0, std::memory_order_acquire);  // acquire: see tick_soon
  }
  std::uint64_t soon_requests() const noexcept {
    return soon_requests_.load(std::memory_order_acquire);
  }
  // Blocks the host thread until some thread asks for a tick (a foreign wake-up or spawn).
  void wait_for_soon_request() noexcept {
    while (soon_requests_.load(std::memory_order_acquire) == 0) soon_requests_.wait(0);
  }

  // A host loop: ticks while a tick was asked for or work is ready; returns the ticks run.
  std::uint64_t run_until_idle(spindle::embed::embedded_executor& executor,
                               std::uint64_t limit = 10'000'000) {
    std::uint64_t ticks = 0;
    while ((take_soon_requests() > 0 || executor.has_ready_work()) && ticks < limit) {
      executor.tick();
      ++ticks;
    }
    return ticks;
  }

  std::vector<spindle::clock_time> tick_at_requests;  // ticking thread
  spindle::clock_time requested_at = spindle::clock_time::max();

 private:
  std::atomic<spindle::clock_duration::rep> time_{virtual_start.time_since_epoch().count()};
  std::atomic<std::uint64_t> soon_requests_{0};
};

}  // namespace spindle::testing
