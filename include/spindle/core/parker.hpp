// How an executor waits when it has nothing to do, behind one narrow interface.
//
// `park_driver` is what the executor loop calls; today's implementation is `futex_parker`
// (a futex on one 32-bit word); the I/O issue replaces it with a driver that waits in io_uring /
// epoll with the same contract:
//   wait(timeout)  - owner thread only. Returns after unpark() was called (since the last return
//                    from wait), after the timeout, or spuriously. A notification that arrives
//                    before wait() is not lost: the next wait() consumes it and returns at once.
//   unpark()       - any thread, any number of times; wakes the owner or pre-arms the next wait.
//
// futex_parker states (one atomic word):
//   empty    - nobody waiting, no notification pending
//   parked   - the owner is (about to be) blocked in futex_wait
//   notified - a notification is pending; the owner consumes it and returns
// Transitions: owner empty->parked (CAS), parked->empty (on timeout), notified->empty (consume);
// any thread: *->notified (exchange), issuing a futex wake only if it replaced `parked`.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "spindle/core/clock.hpp"

namespace spindle::core {

class park_driver {
 public:
  virtual ~park_driver() = default;
  virtual void wait(std::optional<clock_duration> timeout) noexcept = 0;
  virtual void unpark() noexcept = 0;
};

// The futex calls underneath (private flag): block while *word == expected (or until the
// timeout / a spurious wake-up), and wake one such waiter.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::optional<clock_duration> timeout) noexcept;
void futex_wake_one(std::atomic<std::uint32_t>* word) noexcept;

class futex_parker final : public park_driver {
 public:
  void wait(std::optional<clock_duration> timeout) noexcept override;
  void unpark() noexcept override;

 private:
  enum : std::uint32_t { empty = 0, parked = 1, notified = 2 };
  std::atomic<std::uint32_t> state_{empty};
};

}  // namespace spindle::core
