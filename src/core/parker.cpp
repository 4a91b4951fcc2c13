#include "spindle/core/parker.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace spindle::core {

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::optional<clock_duration> timeout) noexcept {
  timespec relative{};
  timespec* relative_pointer = nullptr;
  if (timeout) {
    const auto ns = timeout->count() < 0 ? 0 : timeout->count();
    relative.tv_sec = time_t(ns / 1'000'000'000);
    relative.tv_nsec = long(ns % 1'000'000'000);
    relative_pointer = &relative;
  }
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
          relative_pointer, nullptr, 0);
}

void futex_wake_one(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr,
          nullptr, 0);
}

void futex_parker::wait(std::optional<clock_duration> timeout) noexcept {
  // acquire (both CASes): consuming a notification must make visible whatever the notifier
  // published before unpark() (its release exchange).
  std::uint32_t expected = notified;
  if (state_.compare_exchange_strong(expected, empty, std::memory_order_acquire)) return;
  if (timeout && timeout->count() <= 0) return;
  expected = empty;
  if (!state_.compare_exchange_strong(expected, parked, std::memory_order_acquire)) {
    // Only the owner moves the word away from notified, so it is notified now: consume it.
    state_.store(empty, std::memory_order_relaxed);  // relaxed: the failed CAS acquired
    return;
  }
  futex_wait(&state_, parked, timeout);
  // Woken, timed out or spurious: whichever, leave the word empty. An exchange tells us which;
  // acquire for the same reason as above.
  state_.exchange(empty, std::memory_order_acquire);
}

void futex_parker::unpark() noexcept {
  // release: pairs with the owner's acquire, publishing the work we queued before unparking.
  if (state_.exchange(notified, std::memory_order_release) == parked) futex_wake_one(&state_);
}

}  // namespace spindle::core
