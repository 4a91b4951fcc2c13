// spindle::mutex: design in include/spindle/sync/mutex.hpp.
#include "spindle/sync/mutex.hpp"

namespace spindle {

mutex::~mutex() {
  detail::wake_list to_wake;  // before the guard: wakes after unlocking
  std::lock_guard guard(state_lock());
  waiters_.complete_all(detail::sync_waiter::outcome::cancelled, to_wake);
}

bool mutex::try_lock() noexcept {
  std::lock_guard guard(state_lock());
  if (locked_) return false;
  locked_ = true;
  return true;
}

void mutex::unlock() {
  detail::wake_list to_wake;  // before the guard: wakes after unlocking
  std::lock_guard guard(state_lock());
  if (!locked_) throw usage_error("spindle: mutex::unlock on a mutex that is not locked");
  hand_off(to_wake);
}

void mutex::unlock_owned() noexcept {
  detail::wake_list to_wake;  // before the guard: wakes after unlocking
  std::lock_guard guard(state_lock());
  hand_off(to_wake);
}

void mutex::hand_off(detail::wake_list& to_wake) noexcept {
  if (detail::sync_waiter* next_owner = waiters_.pop_front()) {
    to_wake.add(next_owner, detail::sync_waiter::outcome::done);  // FIFO handoff: stays locked
  } else {
    locked_ = false;
  }
}

bool mutex::is_locked() const noexcept {
  std::lock_guard guard(state_lock());
  return locked_;
}

std::size_t mutex::waiting() const noexcept {
  std::lock_guard guard(state_lock());
  return waiters_.size();
}

}  // namespace spindle
