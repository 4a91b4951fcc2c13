// A deadline for one I/O operation: the optional last argument of the socket calls
// (net/net.hpp), e.g. `co_await stream.read(buffer, io::deadline::after(5s))`.
//
// What it does: the call arms a timer on the calling executor's timer service next to the
// operation it submits (io_wait.hpp, "Deadlines"); if the timer fires first, the operation is
// cancelled in the kernel (io_uring: an async cancel; epoll: the operation is taken off its
// descriptor's wait list) and the call throws spindle::timeout_error. An operation that
// completed before the cancellation took effect keeps its result: no data is lost, the deadline
// simply did not matter. It is not a wrapper task: nothing is spawned, the operation and the
// timer share the calling task's frame.
//
// Time is the runtime's clock (runtime_options::clock): a manual_clock moves deadlines only
// when advanced. `after(d)` is counted from the moment the call starts (its first suspension
// point reads the clock), `at(t)` is absolute; one deadline covers the whole call, retries and
// readiness waits included (read_exact, write_all: every step gets the same absolute deadline).
// `none()` (the default of every call) arms nothing and costs nothing.
#pragma once

#include <chrono>

#include "spindle/core/clock.hpp"

namespace spindle::io {

class deadline {
 public:
  // No deadline.
  constexpr deadline() noexcept = default;
  static constexpr deadline none() noexcept { return deadline(); }
  // At `when` on the runtime's clock.
  static constexpr deadline at(clock_time when) noexcept { return deadline(kind::absolute, when, {}); }
  // `timeout` after the call starts (rounded up to the clock's nanoseconds). A zero or negative
  // timeout has passed at once: the operation is still attempted and may complete (see above).
  // One beyond the clock's range saturates (as with_timeout's and sleep_for's): seconds::max()
  // never passes, instead of overflowing the conversion into a deadline already past.
  template <class Rep, class Period>
  static constexpr deadline after(std::chrono::duration<Rep, Period> timeout) noexcept {
    return deadline(kind::relative, {}, saturating_ceil(timeout));
  }

  constexpr bool is_set() const noexcept { return kind_ != kind::unset; }
  // The absolute time, with `now` the clock's reading at the start of the call.
  constexpr clock_time resolve(clock_time now) const noexcept {
    if (kind_ == kind::absolute) return when_;
    const clock_duration since_epoch = now.time_since_epoch();
    if (timeout_ > clock_duration::zero() && since_epoch > clock_duration::max() - timeout_) {
      return clock_time::max();  // saturate instead of overflowing
    }
    return now + timeout_;
  }

 private:
  // `timeout` in the clock's nanoseconds, rounded up; clock_duration::max() / min() beyond its
  // range (and max() for NaN). The range is checked in long double, which holds every count of
  // every integral unit and the clock's limits exactly enough to compare.
  template <class Rep, class Period>
  static constexpr clock_duration saturating_ceil(std::chrono::duration<Rep, Period> timeout) noexcept {
    using wide = std::chrono::duration<long double, std::nano>;
    const wide nanoseconds(timeout);
    if (!(nanoseconds < wide(clock_duration::max()))) return clock_duration::max();
    if (!(nanoseconds > wide(clock_duration::min()))) return clock_duration::min();
    return std::chrono::ceil<clock_duration>(timeout);
  }

  enum class kind : unsigned char { unset, absolute, relative };
  constexpr deadline(kind k, clock_time when, clock_duration timeout) noexcept
      : kind_(k), when_(when), timeout_(timeout) {}
  kind kind_ = kind::unset;
  clock_time when_{};
  clock_duration timeout_{};
};

}  // namespace spindle::io
