// SPEC E4: the same task<T> code runs on the embedded executor and on the multi-core runtime.
// A small library of coroutines, written once against the task layer only, runs unchanged on a
// spindle::runtime (rt.block_on) and on an embedded_executor driven by a host loop (virtual time:
// the loop moves the host's clock to the next timer when nothing else is left); the results must
// be identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "embed/embed_test_support.hpp"
#include "spindle/embed/turnstile.hpp"
#include "spindle/spindle.hpp"
#include "support/test_host.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;

// ================================================================================================
// The library: knows nothing of where it runs.
// ================================================================================================
namespace lib {

spindle::task<long> square(long x) {
  co_await spindle::yield_now();
  co_return x * x;
}

// spawn + join
spindle::task<long> sum_of_squares(long n) {
  std::vector<spindle::join_handle<long>> children;
  for (long i = 1; i <= n; ++i) children.push_back(spindle::spawn(square(i)));
  long sum = 0;
  for (auto& child : children) sum += co_await std::move(child);
  co_return sum;
}

// join_set (completion order differs between hosts: sorted)
spindle::task<std::vector<long>> squares_by_join_set(long n) {
  spindle::join_set<long> set;
  for (long i = 1; i <= n; ++i) set.spawn(square(i));
  std::vector<long> values = co_await set.join_all();
  std::sort(values.begin(), values.end());
  co_return values;
}

// channel: two producers, one consumer
spindle::task<void> produce_range(spindle::channel<long>& ch, long first, long last) {
  for (long i = first; i <= last; ++i) co_await ch.send(i);
}
spindle::task<long> close_when_done(spindle::channel<long>& ch, spindle::join_handle<void> a,
                                    spindle::join_handle<void> b) {
  co_await std::move(a);
  co_await std::move(b);
  ch.close();
  co_return 0;
}
spindle::task<long> channel_sum(long n) {
  spindle::channel<long> ch(3);
  auto a = spindle::spawn(produce_range(ch, 1, n / 2));
  auto b = spindle::spawn(produce_range(ch, n / 2 + 1, n));
  auto closer = spindle::spawn(close_when_done(ch, std::move(a), std::move(b)));
  long sum = 0;
  for (;;) {
    std::optional<long> v = co_await ch.receive();
    if (!v) break;
    sum += *v;
  }
  co_await std::move(closer);
  co_return sum;
}

// mutex-protected counter
struct counter_state {
  spindle::mutex m;
  long value = 0;
  int inside = 0;
  int max_inside = 0;
};
spindle::task<void> increment(counter_state& s, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    auto held = co_await s.m.lock();
    s.max_inside = std::max(s.max_inside, ++s.inside);
    co_await spindle::yield_now();
    ++s.value;
    --s.inside;
  }
}
spindle::task<std::pair<long, int>> mutex_counter(int tasks, int rounds) {
  counter_state s;
  spindle::join_set<void> set;
  for (int i = 0; i < tasks; ++i) set.spawn(increment(s, rounds));
  co_await set.join_all();
  co_return std::pair<long, int>(s.value, s.max_inside);
}

// with_timeout: not expiring, and expiring
spindle::task<long> quick(long v) {
  co_await spindle::sleep_for(1ms);
  co_return v;
}
spindle::task<long> never_ready(spindle::event& never) {
  co_await never.wait();
  co_return -2;
}
spindle::task<std::string> timeouts() {
  std::string out;
  out += std::to_string(co_await spindle::with_timeout(1h, quick(7)));
  spindle::event never;
  try {
    (void)co_await spindle::with_timeout(2ms, never_ready(never));
    out += ",no timeout";
  } catch (const spindle::timeout_error&) {
    out += ",timeout";
  }
  co_return out;
}

// sleep: time moves forward by at least the duration
spindle::task<bool> sleep_advances_time(spindle::clock_duration d) {
  const spindle::clock_time before = spindle::now();
  co_await spindle::sleep_for(d);
  const spindle::clock_time after = spindle::now();
  co_return after - before >= d;
}

// cancellation of a blocked child
spindle::task<long> blocked_forever(spindle::event& never) {
  co_await never.wait();
  co_return 1;
}
spindle::task<std::string> cancel_a_child() {
  spindle::event never;
  auto child = spindle::spawn(blocked_forever(never));
  co_await spindle::yield_now();
  child.cancel();
  try {
    (void)co_await std::move(child);
    co_return "completed";
  } catch (const spindle::task_cancelled&) {
    co_return "cancelled";
  }
}

// oneshot, wait_group, semaphore
spindle::task<void> send_after_yield(spindle::oneshot_sender<long> tx, long v) {
  co_await spindle::yield_now();
  tx.send(v);
}
spindle::task<void> take_slot(spindle::semaphore& slots, spindle::wait_group& wg,
                              std::atomic<int>& inside, std::atomic<int>& max_inside) {
  co_await slots.acquire();
  spindle::testing::raise_max(max_inside, inside.fetch_add(1) + 1);
  co_await spindle::yield_now();
  inside.fetch_sub(1);
  slots.release();
  wg.done();
}
// The oneshot's value, and whether the semaphore kept at most 2 tasks inside (how many were
// inside at once depends on scheduling: not part of the result).
spindle::task<std::pair<long, bool>> oneshot_and_groups() {
  auto [tx, rx] = spindle::oneshot<long>();
  spindle::spawn(send_after_yield(std::move(tx), 99)).detach();
  const long v = co_await rx;
  spindle::semaphore slots(2);
  spindle::wait_group wg;
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  wg.add(6);
  for (int i = 0; i < 6; ++i) spindle::spawn(take_slot(slots, wg, inside, max_inside)).detach();
  co_await wg.wait();
  co_return std::pair<long, bool>(v, max_inside.load() <= 2 && slots.available() == 2);
}

// turnstile woken by another task
struct ticket_box {
  std::mutex m;
  std::optional<spindle::embed::waker> w;  // under m
  std::atomic<int> tickets{0};
  std::optional<spindle::embed::waker> get() {
    std::lock_guard guard(m);
    return w;
  }
};
struct ticket_poll {
  ticket_box* box;
  std::optional<int> operator()(const spindle::embed::waker& w) const {
    {
      std::lock_guard guard(box->m);
      if (!box->w) box->w.emplace(w);
    }
    const int tickets = box->tickets.load();
    if (tickets >= 3) return tickets;
    return std::nullopt;
  }
};
spindle::task<void> hand_out_tickets(ticket_box& box) {
  for (int i = 0; i < 3; ++i) {
    std::optional<spindle::embed::waker> w;
    for (;;) {  // until the poller published its waker
      w = box.get();
      if (w) break;
      co_await spindle::yield_now();
    }
    box.tickets.fetch_add(1);
    w->wake();
    co_await spindle::yield_now();
  }
}
spindle::task<int> turnstile_woken_by_a_task() {
  ticket_box box;
  auto giver = spindle::spawn(hand_out_tickets(box));
  const int got = co_await spindle::embed::turnstile(ticket_poll{&box});
  co_await std::move(giver);
  co_return got;
}

}  // namespace lib

// ================================================================================================
// The hosts
// ================================================================================================

struct on_runtime {
  template <class T>
  static T run(spindle::task<T> body) {
    spindle::runtime rt({.workers = 2});
    return rt.block_on(std::move(body));
  }
};

struct on_embedded {
  template <class T>
  static T run(spindle::task<T> body) {
    spindle::testing::test_host host;
    spindle::embed::embedded_executor executor(host);
    return spindle::testing::run_embedded(host, executor, std::move(body));
  }
};

struct on_embedded_small_ticks {
  template <class T>
  static T run(spindle::task<T> body) {
    spindle::testing::test_host host;
    spindle::embed::embedded_executor executor(
        host, {.tasks_per_tick = 3, .tasks_per_execute_phase = 1});
    return spindle::testing::run_embedded(host, executor, std::move(body));
  }
};

template <class Host>
class SameCode : public ::testing::Test {};

using hosts = ::testing::Types<on_runtime, on_embedded, on_embedded_small_ticks>;

class host_names {
 public:
  template <class T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, on_runtime>) return "runtime";
    if constexpr (std::is_same_v<T, on_embedded>) return "embedded";
    return "embedded_small_ticks";
  }
};

TYPED_TEST_SUITE(SameCode, hosts, host_names);

TYPED_TEST(SameCode, SpawnAndJoin) { EXPECT_EQ(TypeParam::run(lib::sum_of_squares(10)), 385); }

TYPED_TEST(SameCode, JoinSet) {
  EXPECT_EQ(TypeParam::run(lib::squares_by_join_set(6)),
            (std::vector<long>{1, 4, 9, 16, 25, 36}));
}

TYPED_TEST(SameCode, ChannelProducersAndConsumer) {
  EXPECT_EQ(TypeParam::run(lib::channel_sum(200)), 200L * 201 / 2);
}

TYPED_TEST(SameCode, MutexProtectedCounter) {
  EXPECT_EQ(TypeParam::run(lib::mutex_counter(5, 40)), (std::pair<long, int>(200, 1)));
}

TYPED_TEST(SameCode, WithTimeoutInTimeAndExpired) {
  EXPECT_EQ(TypeParam::run(lib::timeouts()), "7,timeout");
}

TYPED_TEST(SameCode, SleepMovesTimeForward) {
  EXPECT_TRUE(TypeParam::run(lib::sleep_advances_time(2ms)));
}

TYPED_TEST(SameCode, CancellingABlockedChild) {
  EXPECT_EQ(TypeParam::run(lib::cancel_a_child()), "cancelled");
}

TYPED_TEST(SameCode, OneshotSemaphoreAndWaitGroup) {
  EXPECT_EQ(TypeParam::run(lib::oneshot_and_groups()), (std::pair<long, bool>(99, true)));
}

TYPED_TEST(SameCode, TurnstileWokenByAnotherTask) {
  EXPECT_EQ(TypeParam::run(lib::turnstile_woken_by_a_task()), 3);
}

// Everything at once, awaited in sequence inside one task, with the two hosts' results
// compared with each other.
spindle::task<std::vector<std::string>> everything() {
  std::vector<std::string> out;
  out.push_back(std::to_string(co_await lib::sum_of_squares(7)));
  const std::vector<long> squares = co_await lib::squares_by_join_set(4);
  std::string joined;
  for (long v : squares) joined += std::to_string(v) + " ";
  out.push_back(joined);
  out.push_back(std::to_string(co_await lib::channel_sum(50)));
  const std::pair<long, int> counted = co_await lib::mutex_counter(3, 10);
  out.push_back(std::to_string(counted.first) + "/" + std::to_string(counted.second));
  out.push_back(co_await lib::timeouts());
  out.push_back(co_await lib::sleep_advances_time(1ms) ? "slept" : "early");
  out.push_back(co_await lib::cancel_a_child());
  const std::pair<long, bool> grouped = co_await lib::oneshot_and_groups();
  out.push_back(std::to_string(grouped.first) + (grouped.second ? "/limited" : "/overrun"));
  out.push_back(std::to_string(co_await lib::turnstile_woken_by_a_task()));
  co_return out;
}

TEST(SameCodeOnBothHosts, ResultsAreIdentical) {
  const std::vector<std::string> on_rt = on_runtime::run(everything());
  const std::vector<std::string> on_emb = on_embedded::run(everything());
  EXPECT_EQ(on_rt, on_emb);
  EXPECT_EQ(on_rt, (std::vector<std::string>{"140", "1 4 9 16 ", "1275", "30/1", "7,timeout",
                                             "slept", "cancelled", "99/limited", "3"}));
}

}  // namespace
