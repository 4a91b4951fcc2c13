// Stress for the sync primitives: millions of operations across workers, with cancellations
// mixed in, checking conservation (every item exactly once, every increment counted, every
// permit returned). About 10 million primitive operations in all: ~3 s on 2 cores in release,
// ~30 s under ThreadSanitizer (which runs half the counts). SPINDLE_SYNC_SCALE overrides.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "spindle/sync/sync.hpp"
#include "support/exactly_once.hpp"
#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

spindle::task<void> produce(spindle::channel<std::uint64_t>& ch, std::uint64_t first,
                            std::uint64_t count) {
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t item = first + i;
    // Mix the fast non-suspending path in with the awaiting one.
    if (i % 3 == 0 && ch.try_send(std::move(item))) continue;
    co_await ch.send(item);
  }
}

// Appends what it receives to `got` (owned by the test, so it survives a cancellation).
spindle::task<void> consume(spindle::channel<std::uint64_t>& ch, std::vector<std::uint64_t>& got,
                            std::atomic<std::uint64_t>& progress) {
  while (std::optional<std::uint64_t> item = co_await ch.receive()) {
    got.push_back(*item);
    // relaxed: a progress hint for the test thread; the join publishes `got`.
    progress.fetch_add(1, std::memory_order_relaxed);
  }
}

TEST(SyncStress, ChannelManyProducersManyConsumers) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<std::uint64_t> ch(16);
  constexpr std::uint64_t producers = 8;
  constexpr std::uint64_t consumers = 8;
  const std::uint64_t per_producer = scaled(400000, 0.5);
  std::vector<std::vector<std::uint64_t>> received(consumers);
  std::atomic<std::uint64_t> progress{0};
  std::vector<spindle::join_handle<void>> readers;
  for (std::uint64_t c = 0; c < consumers; ++c) readers.push_back(rt.spawn(consume(ch, received[c], progress)));
  std::vector<spindle::join_handle<void>> writers;
  for (std::uint64_t p = 0; p < producers; ++p) writers.push_back(rt.spawn(produce(ch, p * per_producer, per_producer)));
  for (auto& w : writers) w.join();
  ch.close();
  for (auto& r : readers) r.join();
  expect_each_exactly_once(received, producers * per_producer);
}

TEST(SyncStress, ChannelConsumersCancelledMidStreamLoseNothing) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<std::uint64_t> ch(8);
  constexpr std::uint64_t producers = 4;
  constexpr std::uint64_t consumers = 8;
  const std::uint64_t per_producer = scaled(200000, 0.5);
  const std::uint64_t total = producers * per_producer;
  std::vector<std::vector<std::uint64_t>> received(consumers + 1);
  std::atomic<std::uint64_t> progress{0};
  std::vector<spindle::join_handle<void>> readers;
  for (std::uint64_t c = 0; c < consumers; ++c) readers.push_back(rt.spawn(consume(ch, received[c], progress)));
  std::vector<spindle::join_handle<void>> writers;
  for (std::uint64_t p = 0; p < producers; ++p) writers.push_back(rt.spawn(produce(ch, p * per_producer, per_producer)));
  // Cancel every other consumer, each after a further slice of the stream went through.
  std::uint64_t cancelled = 0;
  for (std::uint64_t c = 0; c < consumers; c += 2) {
    const std::uint64_t mark = total / 8 * (c / 2 + 1);
    // relaxed: only a trigger; the joins below order the data.
    spin_until([&] { return progress.load(std::memory_order_relaxed) >= mark; });
    readers[c].cancel();
  }
  for (auto& w : writers) w.join();
  ch.close();
  for (std::uint64_t c = 0; c < consumers; ++c) {
    if (joined_cancelled(readers[c])) ++cancelled;
  }
  while (auto item = ch.try_receive()) received[consumers].push_back(*item);  // leftovers
  EXPECT_GE(cancelled, 1u);
  expect_each_exactly_once(received, total);
}

// Each task counts its own increments (in a slot it alone writes), so a cancelled task's work
// is still accounted for.
spindle::task<void> increment(spindle::mutex& m, std::uint64_t& shared, std::uint64_t& mine,
                              std::uint64_t rounds) {
  for (std::uint64_t i = 0; i < rounds; ++i) {
    auto held = co_await m.lock();
    ++shared;
    ++mine;
  }
}

TEST(SyncStress, MutexWithCancellations) {
  spindle::runtime rt({.workers = 2});
  spindle::mutex m;
  constexpr std::size_t tasks = 16;
  const std::uint64_t rounds = scaled(200000, 0.5);
  std::uint64_t shared = 0;
  std::vector<std::uint64_t> per_task(tasks, 0);
  std::vector<spindle::join_handle<void>> handles;
  for (std::size_t t = 0; t < tasks; ++t) handles.push_back(rt.spawn(increment(m, shared, per_task[t], rounds)));
  for (std::size_t t = 0; t < tasks; t += 4) handles[t].cancel();
  std::uint64_t cancelled = 0;
  for (auto& h : handles) {
    if (joined_cancelled(h)) ++cancelled;
  }
  std::uint64_t sum = 0;
  for (std::uint64_t n : per_task) sum += n;
  EXPECT_EQ(shared, sum);
  EXPECT_GE(sum, (tasks - cancelled) * rounds);
  EXPECT_FALSE(m.is_locked());
  EXPECT_EQ(m.waiting(), 0u);
}

spindle::task<void> bounded_work(spindle::semaphore& s, std::atomic<int>& holders,
                                 std::atomic<int>& max_holders, std::uint64_t rounds) {
  for (std::uint64_t i = 0; i < rounds; ++i) {
    co_await s.acquire();
    const int now = holders.fetch_add(1) + 1;
    raise_max(max_holders, now);
    if (i % 16 == 0) co_await spindle::yield_now();
    holders.fetch_sub(1);
    s.release();
  }
}

TEST(SyncStress, SemaphoreBoundsConcurrency) {
  spindle::runtime rt({.workers = 2});
  constexpr int permits = 3;
  spindle::semaphore s(permits);
  std::atomic<int> holders{0};
  std::atomic<int> max_holders{0};
  const std::uint64_t rounds = scaled(100000, 0.5);
  std::vector<spindle::join_handle<void>> handles;
  for (int t = 0; t < 12; ++t) handles.push_back(rt.spawn(bounded_work(s, holders, max_holders, rounds)));
  for (auto& h : handles) h.join();
  EXPECT_LE(max_holders.load(), permits);
  EXPECT_EQ(s.available(), std::size_t(permits));
}

// Rounds of fan-out/fan-in: workers wait on a start event, report to a wait_group, the
// coordinator waits for the group, then answers each through a oneshot.
TEST(SyncStress, EventWaitGroupOneshotRounds) {
  spindle::runtime rt({.workers = 2});
  const std::uint64_t rounds = scaled(10000, 0.5);
  constexpr int fan = 8;
  const std::uint64_t total = rt.block_on([&]() -> spindle::task<std::uint64_t> {
    std::uint64_t sum = 0;
    for (std::uint64_t r = 0; r < rounds; ++r) {
      spindle::event start;
      spindle::wait_group arrived;
      arrived.add(fan);
      std::vector<spindle::oneshot_sender<std::uint64_t>> answers;
      std::vector<spindle::join_handle<std::uint64_t>> members;
      for (int i = 0; i < fan; ++i) {
        auto [tx, rx] = spindle::oneshot<std::uint64_t>();
        answers.push_back(std::move(tx));
        members.push_back(spindle::spawn(
            [](spindle::event& start, spindle::wait_group& arrived,
               spindle::oneshot_receiver<std::uint64_t> rx) -> spindle::task<std::uint64_t> {
              co_await start.wait();
              arrived.done();
              co_return co_await rx;
            }(start, arrived, std::move(rx))));
      }
      start.set();
      co_await arrived.wait();
      for (int i = 0; i < fan; ++i) answers[std::size_t(i)].send(r);
      for (auto& m : members) sum += co_await std::move(m);
    }
    co_return sum;
  }());
  EXPECT_EQ(total, fan * rounds * (rounds - 1) / 2);
}

}  // namespace
