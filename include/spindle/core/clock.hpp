// The clock the runtime reads time from, injectable so timer tests run in virtual time.
//
// `clock` is the interface; `steady_clock_source` (the default) reads std::chrono::steady_clock;
// `manual_clock` only moves when a test calls advance(). The runtime subscribes to a manual
// clock so that advancing it wakes parked executors, which then fire the timers that became due.
// Executors never sleep on a manual clock's deadlines: they park until advanced or notified.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace spindle {

using clock_duration = std::chrono::nanoseconds;
using clock_time = std::chrono::time_point<std::chrono::steady_clock, clock_duration>;

class clock {
 public:
  virtual ~clock() = default;
  virtual clock_time now() const noexcept = 0;
  // True when time moves on its own (parking may time out at a deadline); false for clocks
  // that move only when told to (parking waits for a notification instead).
  virtual bool is_real_time() const noexcept { return true; }
  // Called by the runtime: `on_advance` runs (on the advancing thread) whenever time jumps.
  // Real-time clocks ignore it.
  virtual void subscribe(void* owner, std::function<void()> on_advance) { (void)owner; (void)on_advance; }
  virtual void unsubscribe(void* owner) { (void)owner; }
};

class steady_clock_source final : public clock {
 public:
  clock_time now() const noexcept override {
    return std::chrono::time_point_cast<clock_duration>(std::chrono::steady_clock::now());
  }
  static steady_clock_source& instance() noexcept;
};

class manual_clock final : public clock {
 public:
  explicit manual_clock(clock_time start = clock_time{}) : now_(start) {}
  clock_time now() const noexcept override;
  bool is_real_time() const noexcept override { return false; }
  void advance(clock_duration by);
  void set(clock_time to);  // must not go backwards
  void subscribe(void* owner, std::function<void()> on_advance) override;
  void unsubscribe(void* owner) override;

 private:
  void notify();
  mutable std::mutex mutex_;
  clock_time now_;
  std::vector<std::pair<void*, std::function<void()>>> subscribers_;
};

namespace core {

// Nanoseconds of the steady clock, for the runtime's own bookkeeping (utilisation windows,
// fork-join heartbeats), which must not follow an injected clock.
inline std::uint64_t monotonic_nanoseconds() noexcept {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count());
}

// The running thread's view of its runtime's coarse clock (runtime_monitor.hpp), for code that
// bounds a slice in time without reading a clock: `now` is null on threads that are not workers
// of a runtime (plain threads, an embedded executor's host thread). Set by the executor's loop.
struct slice_clock {
  const std::atomic<std::uint64_t>* now = nullptr;
  std::uint64_t length_ns = 0;  // the runtime's service interval
  std::uint64_t read() const noexcept {
    return now->load(std::memory_order_relaxed);  // relaxed: a sample of the time
  }
};
inline thread_local slice_clock current_slice_clock;

// xorshift32 step: a cheap owner-only random source, good enough to pick victims.
inline std::uint32_t next_xorshift(std::uint32_t& state) noexcept {
  std::uint32_t x = state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return state = x;
}

}  // namespace core
}  // namespace spindle
