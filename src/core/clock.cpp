#include "spindle/core/clock.hpp"

#include <algorithm>

#include "spindle/core/errors.hpp"

namespace spindle {

steady_clock_source& steady_clock_source::instance() noexcept {
  static steady_clock_source source;
  return source;
}

clock_time manual_clock::now() const noexcept {
  std::lock_guard lock(mutex_);
  return now_;
}

void manual_clock::advance(clock_duration by) {
  if (by < clock_duration::zero()) throw usage_error("manual_clock::advance: negative duration");
  {
    std::lock_guard lock(mutex_);
    now_ += by;
  }
  notify();
}

void manual_clock::set(clock_time to) {
  {
    std::lock_guard lock(mutex_);
    if (to < now_) throw usage_error("manual_clock::set: time must not go backwards");
    now_ = to;
  }
  notify();
}

void manual_clock::subscribe(void* owner, std::function<void()> on_advance) {
  std::lock_guard lock(mutex_);
  subscribers_.emplace_back(owner, std::move(on_advance));
}

void manual_clock::unsubscribe(void* owner) {
  std::lock_guard lock(mutex_);
  std::erase_if(subscribers_, [owner](const auto& s) { return s.first == owner; });
}

void manual_clock::notify() {
  // Subscribers are called under the mutex so unsubscribe() cannot return while one runs.
  std::lock_guard lock(mutex_);
  for (auto& s : subscribers_) s.second();
}

}  // namespace spindle
