// timer_service::repeat: a fire callback arms its own entry again on the period grid (the
// actors' send_interval, actor/actor_timers.hpp). Virtual time on a manual_clock.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "spindle/core/clock.hpp"
#include "spindle/core/timer_wheel.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_duration;
using spindle::clock_time;
using spindle::core::timer_entry;
using spindle::core::timer_service;

constexpr clock_time repeat_start = clock_time{} + 300'000h;

struct repeating_timer : timer_entry {
  repeating_timer(timer_service& on, clock_duration every)
      : timer_entry(&on_fire), service(on), period(every) {}
  static void on_fire(timer_entry* entry) noexcept {
    auto* self = static_cast<repeating_timer*>(entry);
    self->fired_at_deadline.push_back(self->deadline());
    self->service.repeat(*self, self->period);
  }
  timer_service& service;
  clock_duration period;
  std::vector<clock_time> fired_at_deadline;
};

TEST(TimerServiceRepeat, StaysOnTheGridAndSkipsMissedPeriods) {
  spindle::manual_clock clock(repeat_start);
  timer_service service(clock);
  repeating_timer timer(service, 10ms);
  service.arm(timer, repeat_start + 10ms);
  clock.advance(10ms);
  EXPECT_EQ(service.fire_due(), 1u);
  EXPECT_EQ(service.size(), 1u);  // armed again within the same fire_due
  EXPECT_EQ(service.next_deadline(), repeat_start + 20ms);
  clock.advance(10ms);
  EXPECT_EQ(service.fire_due(), 1u);
  clock.advance(37ms);  // start + 57: 30, 40, 50 missed; one fire, next on the grid at 60
  EXPECT_EQ(service.fire_due(), 1u);
  EXPECT_EQ(service.next_deadline(), repeat_start + 60ms);
  clock.advance(3ms);
  EXPECT_EQ(service.fire_due(), 1u);
  ASSERT_EQ(timer.fired_at_deadline.size(), 4u);
  EXPECT_EQ(timer.fired_at_deadline[0], repeat_start + 10ms);
  EXPECT_EQ(timer.fired_at_deadline[1], repeat_start + 20ms);
  EXPECT_EQ(timer.fired_at_deadline[2], repeat_start + 30ms);
  EXPECT_EQ(timer.fired_at_deadline[3], repeat_start + 60ms);
  EXPECT_TRUE(service.disarm(timer));  // between fires a periodic entry is always armed
  clock.advance(1h);
  EXPECT_EQ(service.fire_due(), 0u);
  EXPECT_EQ(service.size(), 0u);
}

TEST(TimerServiceRepeat, NearTheEndOfTimeSaturates) {
  spindle::manual_clock clock(repeat_start);
  timer_service service(clock);
  repeating_timer timer(service, clock_duration::max());  // the next grid point is past the end
  service.arm(timer, repeat_start);
  EXPECT_EQ(service.fire_due(), 1u);
  EXPECT_EQ(service.size(), 1u);
  EXPECT_TRUE(service.disarm(timer));
}

}  // namespace
