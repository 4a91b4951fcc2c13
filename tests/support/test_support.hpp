// Helpers shared by the test executables (tests/<module>/*_test.cpp, tests/stress/*.cpp).
// Header-only; tests/ is on every test target's include path: #include "support/test_support.hpp".
//
// Waiting never sleeps: a test thread polls (yielding) until the runtime has reached the state it
// needs, and a task yields. Where a wait is bounded, the bound only turns a hang into a failure;
// it is not a timing assertion.
#pragma once

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "spindle/core/atomic.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/core/parker.hpp"
#include "spindle/spindle.hpp"
#include "support/descriptors.hpp"

namespace spindle::testing {

// --- the machine -----------------------------------------------------------------------------

// The CPUs this process may run on, lowest first (empty where the system cannot tell).
inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// --- waiting ---------------------------------------------------------------------------------

// Polls `done()` from a plain thread (yielding) until it holds; false after `limit` (a hang).
template <class Predicate>
bool eventually(Predicate done,
                std::chrono::steady_clock::duration limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Joins `h`, throwing instead of hanging when the task does not finish within `limit`.
template <class T>
T join_bounded(spindle::join_handle<T>&& h,
               std::chrono::steady_clock::duration limit = std::chrono::seconds(10)) {
  if (!eventually([&h] { return h.is_finished(); }, limit)) {
    throw std::runtime_error("task did not finish: lost wake-up (every executor parked?)");
  }
  return h.join();
}

// Receives a oneshot's value on a plain thread, throwing instead of hanging when it has not come
// within `limit` (blocking_receive has no bound).
template <class T>
T receive_within(spindle::oneshot_receiver<T> rx,
                 std::chrono::steady_clock::duration limit = std::chrono::seconds(20)) {
  if (!eventually([&rx] { return rx.is_ready(); }, limit)) {
    throw std::runtime_error("no answer within the bound (a lost reply?)");
  }
  return rx.blocking_receive();
}

// Polls `condition()` from a plain thread (yielding) until it holds, without a deadline.
template <class Condition>
void spin_until(Condition condition) {
  while (!condition()) std::this_thread::yield();
}

// Yields the calling task until `condition()` holds (e.g. other tasks queued on a primitive).
template <class Condition>
spindle::task<void> until(Condition condition) {
  while (!condition()) co_await spindle::yield_now();
}

// A task that keeps yielding until `flag` is set (acquire): stays running until released.
inline spindle::task<void> yield_until(std::atomic<bool>& flag) {
  while (!flag.load(std::memory_order_acquire)) co_await spindle::yield_now();
}

// Holds a runtime's only executor with a spinning task until release(), so what is spawned
// meanwhile waits in its queue.
class executor_blocker {
 public:
  explicit executor_blocker(spindle::runtime& rt)
      : task_(rt.spawn([this] {
          running_.store(true);
          while (!released_.load()) {
          }
        })) {
    spin_until([this] { return running_.load(); });
  }
  ~executor_blocker() { release(); }
  void release() {
    released_.store(true);
    if (task_.valid()) task_.join();
  }

 private:
  std::atomic<bool> running_{false};
  std::atomic<bool> released_{false};
  spindle::join_handle<void> task_;
};

// --- runtime and virtual-time fixtures -------------------------------------------------------

// Start time for manual_clock tests: far from the real steady clock, so a real-clock read shows.
inline constexpr spindle::clock_time virtual_start =
    spindle::clock_time{} + std::chrono::hours(1000);

// Timers armed on all executors of `rt` now: what a test waits for before advancing a clock.
inline std::size_t armed_timers(spindle::runtime& rt) {
  std::size_t count = 0;
  for (std::uint32_t i = 0; i < rt.executor_count(); ++i) {
    count += rt.core().executor_at(i).timers().size();
  }
  return count;
}

// Occupies a worker of `rt` until its shutdown begins; returns once that task runs.
inline void occupy_a_worker_until_shutdown(spindle::runtime& rt) {
  std::atomic<bool> occupied{false};  // touched only before this function returns
  rt.spawn([&occupied, runtime = &rt] {
      occupied.store(true);
      while (!runtime->core().stopping()) spindle::core::cpu_relax();
    }).detach();
  spin_until([&] { return occupied.load(); });
}

// --- small tasks -----------------------------------------------------------------------------

// A task that completes at once with `v`.
inline spindle::task<int> value(int v) { co_return v; }

// A task that completes at once with 1 (the element of long chains of immediate awaits).
inline spindle::task<int> immediate() { co_return 1; }

// The index of the executor the task runs on.
inline spindle::task<std::uint32_t> where_am_i() {
  co_return spindle::core::executor::current()->index();
}

// Cancels `*target` from inside the runtime (to race a cancel against a wake-up).
template <class T>
spindle::task<void> cancel_task(const spindle::join_handle<T>* target) {
  target->cancel();
  co_return;
}

// Waits on `primitive` (an event, a wait_group: anything whose wait() is awaitable).
template <class Waitable>
spindle::task<void> wait_for(Waitable& primitive) {
  co_await primitive.wait();
}

// --- frames, outcomes, errors ----------------------------------------------------------------

// Passed by value to a coroutine, counts its frame's destruction (a moved-from copy counts none).
struct frame_counter {
  std::atomic<int>* destroyed;
  explicit frame_counter(std::atomic<int>& d) : destroyed(&d) {}
  frame_counter(frame_counter&& other) noexcept : destroyed(std::exchange(other.destroyed, nullptr)) {}
  frame_counter& operator=(frame_counter&&) = delete;
  ~frame_counter() {
    if (destroyed != nullptr) destroyed->fetch_add(1);
  }
};

// Owned by something whose destruction a test checks: sets `flag` when destroyed.
struct destroy_flag {
  std::atomic<bool>* flag = nullptr;
  ~destroy_flag() {
    if (flag != nullptr) flag->store(true);
  }
};
inline std::shared_ptr<destroy_flag> make_destroy_flag(std::atomic<bool>& flag) {
  auto owned = std::make_shared<destroy_flag>();
  owned->flag = &flag;
  return owned;
}

// A task that yields forever, counting its frame's destruction (ends only by cancel or shutdown).
inline spindle::task<void> forever_yielding(frame_counter) {
  while (true) co_await spindle::yield_now();
}

// Joins `handle`: true if the task was cancelled, false if it finished normally.
template <class T>
bool joined_cancelled(spindle::join_handle<T>& handle) {
  try {
    handle.join();
    return false;
  } catch (const spindle::task_cancelled&) {
    return true;
  }
}

// Raises `maximum` to `value` if that is larger (an atomic fetch-max for high-water marks).
inline void raise_max(std::atomic<int>& maximum, int value) {
  int seen = maximum.load();
  while (value > seen && !maximum.compare_exchange_weak(seen, value)) {
  }
}

// An exception thrown by test tasks.
struct boom : std::exception {
  const char* what() const noexcept override { return "boom"; }
};

// An exception (not derived from std::exception) carrying a code, thrown by test tasks.
struct custom_error {
  int code;
};

// --- parkers ---------------------------------------------------------------------------------
// Ping-pong: each side publishes a counter, unparks the other, and waits (no timeout) until the
// other side answered. wait() may return spuriously: each side loops on its condition.

// Runs `rounds` ping-pong exchanges between this thread and another; a lost wake-up hangs.
inline void futex_ping_pong(spindle::core::futex_parker& a, spindle::core::futex_parker& b,
                            std::atomic<std::uint32_t>& ping, std::atomic<std::uint32_t>& pong,
                            std::uint32_t rounds) {
  std::thread other([&] {
    for (std::uint32_t i = 1; i <= rounds; ++i) {
      while (ping.load(std::memory_order_acquire) != i) b.wait(std::nullopt);
      pong.store(i, std::memory_order_release);
      a.unpark();
    }
  });
  for (std::uint32_t i = 1; i <= rounds; ++i) {
    ping.store(i, std::memory_order_release);
    b.unpark();
    while (pong.load(std::memory_order_acquire) != i) a.wait(std::nullopt);
  }
  other.join();
}

// --- iteration counts ------------------------------------------------------------------------

// Whether this is a ThreadSanitizer build (which runs about 5-10x slower): for smaller counts.
inline constexpr bool under_tsan =
#if defined(__SANITIZE_THREAD__) || defined(SPINDLE_TSAN)
    true;
#else
    false;
#endif

// Whether this is an AddressSanitizer build: for smaller counts.
inline constexpr bool under_asan =
#if defined(__SANITIZE_ADDRESS__)
    true;
#else
    false;
#endif

// --- sync test scaling -----------------------------------------------------------------------
// scaled(): `release_count` times SPINDLE_SYNC_SCALE if set (e.g. 0.1 for a quick run, 10 for a
// long soak), else times `tsan_factor` in SPINDLE_TSAN builds, else unchanged. Never below 1.

// The iteration count of a sync test for this build and environment.
inline std::uint64_t scaled(std::uint64_t release_count, double tsan_factor = 1.0) {
  double factor = 1.0;
#if defined(SPINDLE_TSAN)
  factor = tsan_factor;
#else
  (void)tsan_factor;
#endif
  if (const char* text = std::getenv("SPINDLE_SYNC_SCALE")) factor = std::atof(text);
  const auto n = static_cast<std::uint64_t>(double(release_count) * factor);
  return n == 0 ? 1 : n;
}

// --- helpers several test files share -----------------------------------------------------
// (One definition each: the test executables are unity builds, where two files' helpers of
// the same name would collide.)

// An executor's utilisation (0..1), from its statistics.
inline double utilisation_of(spindle::runtime& rt, std::uint32_t index) {
  return rt.core().executor_at(index).stats().utilisation.load() / 65536.0;
}

// The value of one sample line `series value` in a Prometheus exposition; -1 if absent.
inline double sample_value(const std::string& text, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const std::size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + key.size()));
}

inline spindle::task<int> sleep_then(spindle::clock_duration duration, int value) {
  co_await spindle::sleep_for(duration);
  co_return value;
}

inline spindle::task<void> send_one(spindle::channel<int>& ch, int value) {
  co_await ch.send(std::move(value));
}

inline spindle::task<std::optional<int>> receive_one(spindle::channel<int>& ch) {
  co_return co_await ch.receive();
}

// The next value, or -1 once the channel is closed and empty.
inline spindle::task<int> receive_or_minus_one(spindle::channel<int>& ch) {
  std::optional<int> value = co_await ch.receive();
  co_return value.value_or(-1);
}

// The name of a test parameterised by I/O backend ("uring", "epoll"), for INSTANTIATE_TEST_SUITE_P.
inline std::string backend_name(
    const ::testing::TestParamInfo<spindle::core::io_backend>& info) {
  return info.param == spindle::core::io_backend::uring ? "uring" : "epoll";
}

// A runtime on `backend`; null where the kernel lacks it (epoll's ENOSYS).
inline std::unique_ptr<spindle::runtime> runtime_on(spindle::core::io_backend backend,
                                                     std::uint32_t workers = 2) {
  try {
    return std::make_unique<spindle::runtime>(
        spindle::runtime_options{.workers = workers, .io_backend = backend});
  } catch (const std::system_error& e) {
    if (backend == spindle::core::io_backend::epoll && e.code().value() == ENOSYS) return nullptr;
    throw;
  }
}

}  // namespace spindle::testing
