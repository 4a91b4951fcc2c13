// The integration wrappers on their own (SPEC E2): reentering_integration holds tick_soon()
// requests made during a tick and passes one on after it; sleep_catcher passes tick_at() on only
// when it changes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "spindle/embed/integration.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_time;
using spindle::embed::reentering_integration;
using spindle::embed::sleep_catcher;
using spindle::testing::test_host;

// Records what reaches it. tick_soon() from any thread; the rest from the test's thread.
class recording_integration final : public spindle::embed::integration {
 public:
  clock_time now() const noexcept override { return time; }
  void tick_at(clock_time when) noexcept override { tick_ats.push_back(when); }
  void tick_soon() noexcept override { soon.fetch_add(1); }

  clock_time time = spindle::testing::virtual_start;
  std::vector<clock_time> tick_ats;
  std::atomic<std::uint64_t> soon{0};
};

// --- reentering_integration ---------------------------------------------------------------------

TEST(ReenteringIntegration, RequestOutsideATickPassesStraightThrough) {
  recording_integration inner;
  reentering_integration wrapper(inner);
  wrapper.tick_soon();
  EXPECT_EQ(inner.soon.load(), 1u);
  wrapper.tick_soon();
  EXPECT_EQ(inner.soon.load(), 2u);  // not collapsed outside a tick: each passes on
  std::thread other([&wrapper] { wrapper.tick_soon(); });
  other.join();
  EXPECT_EQ(inner.soon.load(), 3u);
}

TEST(ReenteringIntegration, RequestsDuringATickArePassedOnOnceAfterIt) {
  recording_integration inner;
  reentering_integration wrapper(inner);
  wrapper.begin_tick();
  wrapper.tick_soon();
  wrapper.tick_soon();
  wrapper.request_reentry();
  EXPECT_EQ(inner.soon.load(), 0u);  // held
  wrapper.end_tick();
  EXPECT_EQ(inner.soon.load(), 1u);  // once
  // The next tick starts clean: nothing is held over.
  wrapper.begin_tick();
  wrapper.end_tick();
  EXPECT_EQ(inner.soon.load(), 1u);
}

TEST(ReenteringIntegration, RequestsFromAnotherThreadDuringATickAreHeldUntilItEnds) {
  recording_integration inner;
  reentering_integration wrapper(inner);
  wrapper.begin_tick();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&wrapper] {
      for (int i = 0; i < 100; ++i) wrapper.tick_soon();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(inner.soon.load(), 0u);
  wrapper.end_tick();
  EXPECT_EQ(inner.soon.load(), 1u);
  wrapper.tick_soon();  // after the tick: straight through again
  EXPECT_EQ(inner.soon.load(), 2u);
}

TEST(ReenteringIntegration, TickWithoutRequestsPassesNothingOn) {
  recording_integration inner;
  reentering_integration wrapper(inner);
  for (int i = 0; i < 10; ++i) {
    wrapper.begin_tick();
    wrapper.end_tick();
  }
  EXPECT_EQ(inner.soon.load(), 0u);
}

TEST(ReenteringIntegration, NowAndTickAtPassStraightThrough) {
  recording_integration inner;
  reentering_integration wrapper(inner);
  inner.time = spindle::testing::virtual_start + 5ms;
  EXPECT_EQ(wrapper.now(), inner.time);
  const clock_time t = spindle::testing::virtual_start + 1s;
  wrapper.begin_tick();
  wrapper.tick_at(t);
  wrapper.tick_at(t);  // no catching here: that is sleep_catcher's job
  wrapper.end_tick();
  EXPECT_EQ(inner.tick_ats, (std::vector<clock_time>{t, t}));
}

// A request made while ticks come and go is never lost: it passes on at once or at the end of
// the tick it fell into. Each requester waits until its request has reached the host.
TEST(ReenteringIntegration, ConcurrentRequestsAreNeverLost) {
  recording_integration inner;
  reentering_integration wrapper(inner);
  const int rounds = spindle::testing::under_tsan ? 300 : 3000;
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      wrapper.begin_tick();
      wrapper.end_tick();
    }
  });
  bool lost = false;
  for (int i = 0; i < rounds && !lost; ++i) {
    const std::uint64_t before = inner.soon.load();
    wrapper.tick_soon();
    // Passed on now, or by the tick running now when it ends (the ticker keeps ticking).
    lost = !spindle::testing::eventually([&] { return inner.soon.load() > before; },
                                         std::chrono::seconds(10));
  }
  stop.store(true);
  ticker.join();
  EXPECT_FALSE(lost);
  EXPECT_LE(inner.soon.load(), std::uint64_t(rounds));  // never more than was asked for
}

// --- sleep_catcher ------------------------------------------------------------------------------

TEST(SleepCatcher, PassesOnlyChangedDeadlines) {
  recording_integration inner;
  sleep_catcher catcher(inner);
  const clock_time a = spindle::testing::virtual_start + 10ms;
  const clock_time b = spindle::testing::virtual_start + 20ms;
  catcher.tick_at(a);
  catcher.tick_at(a);
  catcher.tick_at(a);
  catcher.tick_at(b);
  catcher.tick_at(b);
  catcher.tick_at(a);
  catcher.tick_at(clock_time::max());
  catcher.tick_at(clock_time::max());
  EXPECT_EQ(inner.tick_ats, (std::vector<clock_time>{a, b, a, clock_time::max()}));
}

TEST(SleepCatcher, HostStartsWithNoTimedRequestSoMaxIsNotPassedFirst) {
  recording_integration inner;
  sleep_catcher catcher(inner);
  catcher.tick_at(clock_time::max());
  EXPECT_TRUE(inner.tick_ats.empty());
  const clock_time a = spindle::testing::virtual_start + 1ms;
  catcher.tick_at(a);
  catcher.tick_at(clock_time::max());
  EXPECT_EQ(inner.tick_ats, (std::vector<clock_time>{a, clock_time::max()}));
}

TEST(SleepCatcher, TickSoonAndNowAlwaysPassThrough) {
  recording_integration inner;
  sleep_catcher catcher(inner);
  for (int i = 0; i < 3; ++i) catcher.tick_soon();
  EXPECT_EQ(inner.soon.load(), 3u);
  inner.time = spindle::testing::virtual_start + 7ms;
  EXPECT_EQ(catcher.now(), inner.time);
}

// The two stacked as the executor stacks them, over the test host.
TEST(IntegrationWrappers, StackedOverTheTestHostBehaveAsEachAlone) {
  test_host host;
  sleep_catcher catcher(host);
  reentering_integration wrapper(catcher);
  const clock_time t = host.now() + 3ms;
  for (int tick = 0; tick < 5; ++tick) {
    wrapper.begin_tick();
    wrapper.tick_soon();
    wrapper.tick_at(t);
    wrapper.end_tick();
  }
  EXPECT_EQ(host.take_soon_requests(), 5u);  // one per tick that asked
  EXPECT_EQ(host.tick_at_requests, std::vector<clock_time>{t});
}

}  // namespace
