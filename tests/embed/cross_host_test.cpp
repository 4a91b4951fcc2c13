// Tasks of an embedded executor and of other hosts (a spindle::runtime, a second embedded
// executor on another host thread) awaiting each other: every wake-up that crosses into the
// embedded executor only queues and asks the host for a tick (SPEC E3, E4).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <utility>

#include "embed/embed_test_support.hpp"
#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::embed::embedded_executor;
using spindle::testing::test_host;

using spindle::testing::sleep_then;

spindle::task<int> await_plus_one(spindle::join_handle<int> h, std::atomic<bool>& started) {
  started.store(true);
  co_return co_await std::move(h) + 1;
}

TEST(EmbeddedCrossHost, RuntimeTaskAwaitsAnEmbeddedTaskTickedToCompletionByTheHost) {
  test_host host;
  embedded_executor executor(host);
  spindle::runtime rt({.workers = 1});
  const auto start = host.now();
  auto embedded = executor.spawn(sleep_then(10ms, 41));
  host.run_until_idle(executor);  // asleep in host time
  std::atomic<bool> started{false};
  auto joiner = rt.spawn(await_plus_one(std::move(embedded), started));
  spindle::testing::spin_until([&] { return started.load(); });
  EXPECT_FALSE(joiner.is_finished());  // the embedded task cannot complete between ticks
  EXPECT_EQ(host.requested_at, start + 10ms);
  host.advance(10ms);
  executor.tick();  // completes the embedded task, which wakes the runtime task
  EXPECT_EQ(spindle::testing::join_bounded(std::move(joiner)), 42);
}

spindle::task<int> wait_then_value(spindle::event& e, int v) {
  co_await e.wait();
  co_return v;
}

spindle::task<int> await_doubled(spindle::join_handle<int> h) {
  co_return co_await std::move(h) * 2;
}

TEST(EmbeddedCrossHost, EmbeddedTaskAwaitsARuntimeTaskAndTheCompletionAsksForATick) {
  test_host host;
  embedded_executor executor(host);
  spindle::runtime rt({.workers = 2});
  spindle::event go;
  auto on_runtime = rt.spawn(wait_then_value(go, 21));
  auto embedded = executor.spawn(await_doubled(std::move(on_runtime)));
  host.run_until_idle(executor);
  ASSERT_FALSE(embedded.is_finished());
  EXPECT_EQ(executor.statistics().blocked_tasks, 1u);
  EXPECT_EQ(host.take_soon_requests(), 0u);
  go.set();                      // the runtime task completes on a worker...
  host.wait_for_soon_request();  // ...and its completion asks the host for a tick
  EXPECT_FALSE(embedded.is_finished());  // nothing ran outside a tick
  const auto before = executor.statistics().foreign_wakes;
  executor.tick();
  ASSERT_TRUE(embedded.is_finished());
  EXPECT_EQ(embedded.join(), 42);
  EXPECT_EQ(executor.statistics().foreign_wakes, before + 1);
}

spindle::task<long> echo_doubled(spindle::channel<int>& in, spindle::channel<int>& out) {
  long n = 0;
  for (;;) {
    std::optional<int> v = co_await in.receive();
    if (!v) break;
    co_await out.send(*v * 2);
    ++n;
  }
  out.close();
  co_return n;
}

spindle::task<long> ping(spindle::channel<int>& out, spindle::channel<int>& in, int rounds) {
  long sum = 0;
  for (int i = 1; i <= rounds; ++i) {
    co_await out.send(i);
    std::optional<int> v = co_await in.receive();
    if (!v || *v != 2 * i) co_return -1;
    sum += *v;
  }
  out.close();
  co_return sum;
}

TEST(EmbeddedCrossHost, PingPongBetweenAnEmbeddedTaskAndARuntimeTask) {
  test_host host;
  embedded_executor executor(host);
  spindle::runtime rt({.workers = 2});
  const int rounds = spindle::testing::under_tsan ? 200 : 2000;
  spindle::channel<int> to_runtime(1);
  spindle::channel<int> to_embedded(1);
  auto echo = rt.spawn(echo_doubled(to_runtime, to_embedded));
  auto pinger = executor.spawn(ping(to_runtime, to_embedded, rounds));
  spindle::testing::drive_until_finished(host, executor, pinger);
  EXPECT_EQ(pinger.join(), long(rounds) * (rounds + 1));
  EXPECT_EQ(spindle::testing::join_bounded(std::move(echo)), rounds);
}

TEST(EmbeddedCrossHost, PingPongBetweenTwoEmbeddedExecutorsOnTwoHostThreads) {
  const int rounds = spindle::testing::under_tsan ? 200 : 2000;
  spindle::channel<int> a_to_b(1);
  spindle::channel<int> b_to_a(1);
  long pinged = 0;
  long echoed = 0;
  std::thread host_b([&] {
    test_host host;
    embedded_executor executor(host);
    auto h = executor.spawn(echo_doubled(a_to_b, b_to_a));
    spindle::testing::drive_until_finished(host, executor, h);
    echoed = h.join();
  });
  {
    test_host host;
    embedded_executor executor(host);
    auto h = executor.spawn(ping(a_to_b, b_to_a, rounds));
    spindle::testing::drive_until_finished(host, executor, h);
    pinged = h.join();
  }
  host_b.join();
  EXPECT_EQ(pinged, long(rounds) * (rounds + 1));
  EXPECT_EQ(echoed, rounds);
}

TEST(EmbeddedCrossHost, PlainThreadJoinsAnEmbeddedTaskWhileTheHostThreadTicks) {
  test_host host;
  embedded_executor executor(host);
  spindle::event go;
  auto h = executor.spawn(wait_then_value(go, 9));
  host.run_until_idle(executor);
  std::atomic<int> joined{0};
  std::thread joiner([&] { joined.store(h.join()); });  // blocks this plain thread
  go.set();
  host.wait_for_soon_request();
  executor.tick();
  joiner.join();
  EXPECT_EQ(joined.load(), 9);
}


TEST(EmbeddedCrossHost, TwoExecutorsOnOneHostThreadWakeEachOtherThroughTheirActionQueues) {
  const int rounds = 500;
  test_host host_a;
  test_host host_b;
  embedded_executor a(host_a);
  embedded_executor b(host_b);
  spindle::channel<int> a_to_b(1);
  spindle::channel<int> b_to_a(1);
  auto pinger = a.spawn(ping(a_to_b, b_to_a, rounds));
  auto echo = b.spawn(echo_doubled(a_to_b, b_to_a));
  std::uint64_t ticks = 0;
  // One host loop for both: a wake-up of b's task from a's tick only queues on b and asks
  // b's host for a tick, and the other way round.
  while (!(pinger.is_finished() && echo.is_finished()) && ticks < 100'000) {
    const bool a_asked = host_a.take_soon_requests() > 0;
    const bool b_asked = host_b.take_soon_requests() > 0;
    ASSERT_TRUE(a_asked || b_asked || a.has_ready_work() || b.has_ready_work())
        << "neither executor asked for a tick: a lost wake-up";
    a.tick();
    b.tick();
    ticks += 2;
  }
  EXPECT_EQ(pinger.join(), long(rounds) * (rounds + 1));
  EXPECT_EQ(echo.join(), rounds);
  EXPECT_GE(a.statistics().foreign_wakes, std::uint64_t(rounds));
  EXPECT_GE(b.statistics().foreign_wakes, std::uint64_t(rounds));
}

}  // namespace
