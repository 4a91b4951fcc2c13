// spindle::channel<T>: order, exactly-once delivery, back-pressure, close, move-only payloads,
// cancellation, destruction, cancel/wake races.
#include "spindle/sync/channel.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

TEST(Channel, CapacityZeroIsAUsageError) {
  EXPECT_THROW(spindle::channel<int>(0), spindle::usage_error);
}

TEST(Channel, TrySendAndTryReceiveKeepFifoOrder) {
  spindle::channel<int> ch(3);
  EXPECT_EQ(ch.capacity(), 3u);
  EXPECT_TRUE(ch.try_send(1));
  EXPECT_TRUE(ch.try_send(2));
  EXPECT_TRUE(ch.try_send(3));
  int rejected = 4;
  EXPECT_EQ(ch.try_send(std::move(rejected)), spindle::channel_send_status::full);
  EXPECT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch.try_receive(), 1);
  EXPECT_TRUE(ch.try_send(std::move(rejected)));
  EXPECT_EQ(ch.try_receive(), 2);
  EXPECT_EQ(ch.try_receive(), 3);
  EXPECT_EQ(ch.try_receive(), 4);
  EXPECT_EQ(ch.try_receive(), std::nullopt);
}

spindle::task<void> send_all(spindle::channel<std::uint64_t>& ch, std::uint64_t first,
                             std::uint64_t count) {
  for (std::uint64_t i = 0; i < count; ++i) co_await ch.send(first + i);
}

spindle::task<std::vector<std::uint64_t>> receive_all(spindle::channel<std::uint64_t>& ch) {
  std::vector<std::uint64_t> got;
  while (std::optional<std::uint64_t> item = co_await ch.receive()) got.push_back(*item);
  co_return got;
}

TEST(Channel, OneProducerOneConsumerPreservesOrder) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<std::uint64_t> ch(4);
  const std::uint64_t count = scaled(50000);
  auto consumer = rt.spawn(receive_all(ch));
  rt.block_on(send_all(ch, 0, count));
  ch.close();
  std::vector<std::uint64_t> got = consumer.join();
  ASSERT_EQ(got.size(), count);
  for (std::uint64_t i = 0; i < count; ++i) ASSERT_EQ(got[i], i);
}

TEST(Channel, ManyProducersManyConsumersDeliverEachItemExactlyOnce) {
  spindle::runtime rt({.workers = 4});
  spindle::channel<std::uint64_t> ch(64);
  constexpr std::uint64_t producers = 8;
  constexpr std::uint64_t consumers = 8;
  const std::uint64_t per_producer = scaled(100000);
  std::vector<std::vector<std::uint64_t>> received = rt.block_on(
      [&]() -> spindle::task<std::vector<std::vector<std::uint64_t>>> {
        std::vector<spindle::join_handle<std::vector<std::uint64_t>>> readers;
        for (std::uint64_t c = 0; c < consumers; ++c) readers.push_back(spindle::spawn(receive_all(ch)));
        std::vector<spindle::join_handle<void>> writers;
        for (std::uint64_t p = 0; p < producers; ++p) {
          writers.push_back(spindle::spawn(send_all(ch, p * per_producer, per_producer)));
        }
        for (auto& w : writers) co_await std::move(w);
        ch.close();
        std::vector<std::vector<std::uint64_t>> all;
        for (auto& r : readers) all.push_back(co_await std::move(r));
        co_return all;
      }());
  std::vector<std::uint8_t> seen(producers * per_producer, 0);
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
  for (const auto& items : received) {
    std::vector<std::uint64_t> last_of_producer(producers, UINT64_MAX);
    for (std::uint64_t item : items) {
      ASSERT_LT(item, seen.size());
      ASSERT_EQ(seen[item]++, 0) << "item " << item << " received twice";
      // FIFO: one consumer sees each producer's items in send order.
      const std::uint64_t p = item / per_producer;
      ASSERT_TRUE(last_of_producer[p] == UINT64_MAX || last_of_producer[p] < item);
      last_of_producer[p] = item;
      ++count;
      sum += item;
    }
  }
  const std::uint64_t n = producers * per_producer;
  EXPECT_EQ(count, n);
  EXPECT_EQ(sum, n * (n - 1) / 2);
}

using spindle::testing::send_one;
using spindle::testing::receive_one;

TEST(Channel, ASenderWaitsWhileFullAndItsItemFollowsTheBufferedOnes) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(2);
  ASSERT_TRUE(ch.try_send(1));
  ASSERT_TRUE(ch.try_send(2));
  auto blocked = rt.spawn(send_one(ch, 3));
  spin_until([&] { return ch.waiting_senders() == 1; });
  EXPECT_FALSE(blocked.is_finished());
  int extra = 4;
  EXPECT_FALSE(ch.try_send(std::move(extra)));  // still full: the waiting sender holds its item
  EXPECT_EQ(ch.try_receive(), 1);               // frees a slot: the waiting sender's item moves in
  blocked.join();
  EXPECT_EQ(ch.waiting_senders(), 0u);
  EXPECT_EQ(ch.size(), 2u);
  EXPECT_EQ(ch.try_receive(), 2);
  EXPECT_EQ(ch.try_receive(), 3);
}

TEST(Channel, AWaitingReceiverGetsTheItemDirectly) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  auto receiver = rt.spawn(receive_one(ch));
  spin_until([&] { return ch.waiting_receivers() == 1; });
  EXPECT_TRUE(ch.try_send(5));
  EXPECT_EQ(receiver.join(), 5);
  EXPECT_EQ(ch.size(), 0u);
}

TEST(Channel, CloseWakesWaitingReceiversWithNullopt) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(4);
  std::vector<spindle::join_handle<std::optional<int>>> receivers;
  for (int i = 0; i < 3; ++i) receivers.push_back(rt.spawn(receive_one(ch)));
  spin_until([&] { return ch.waiting_receivers() == 3; });
  ch.close();
  ch.close();  // idempotent
  for (auto& r : receivers) EXPECT_EQ(r.join(), std::nullopt);
  EXPECT_TRUE(ch.is_closed());
}

TEST(Channel, ReceiversDrainBufferedItemsBeforeSeeingTheClose) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(4);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(ch.try_send(int(i)));
  ch.close();
  EXPECT_EQ(ch.try_send(9), spindle::channel_send_status::closed);  // a result, not a throw
  EXPECT_THROW(rt.block_on(send_one(ch, 9)), spindle::channel_closed);
  EXPECT_EQ(rt.block_on(receive_one(ch)), 1);
  EXPECT_EQ(rt.block_on(receive_one(ch)), 2);
  EXPECT_EQ(rt.block_on(receive_one(ch)), 3);
  EXPECT_EQ(rt.block_on(receive_one(ch)), std::nullopt);
  EXPECT_EQ(rt.block_on(receive_one(ch)), std::nullopt);
}

TEST(Channel, CloseFailsWaitingSendersButKeepsCompletedSends) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  ASSERT_TRUE(ch.try_send(1));
  auto first = rt.spawn(send_one(ch, 2));
  auto second = rt.spawn(send_one(ch, 3));
  spin_until([&] { return ch.waiting_senders() == 2; });
  ch.close();
  EXPECT_THROW(first.join(), spindle::channel_closed);
  EXPECT_THROW(second.join(), spindle::channel_closed);
  EXPECT_EQ(ch.try_receive(), 1);  // sent before the close: not lost
  EXPECT_EQ(ch.try_receive(), std::nullopt);
}

spindle::task<void> send_pointer(spindle::channel<std::unique_ptr<int>>& ch, int value) {
  co_await ch.send(std::make_unique<int>(value));
}

TEST(Channel, MoveOnlyPayloads) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<std::unique_ptr<int>> ch(1);
  rt.block_on(send_pointer(ch, 1));
  auto kept = std::make_unique<int>(2);
  EXPECT_FALSE(ch.try_send(std::move(kept)));
  ASSERT_NE(kept, nullptr);  // a failed try_send leaves the item with the caller
  auto blocked = rt.spawn(send_pointer(ch, 3));
  spin_until([&] { return ch.waiting_senders() == 1; });
  std::optional<std::unique_ptr<int>> a = rt.block_on(
      [&]() -> spindle::task<std::optional<std::unique_ptr<int>>> { co_return co_await ch.receive(); }());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(**a, 1);
  blocked.join();
  auto b = ch.try_receive();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(**b, 3);
}

TEST(Channel, ACancelledReceiverDoesNotSwallowAnItem) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(2);
  auto victim = rt.spawn(receive_one(ch));
  spin_until([&] { return ch.waiting_receivers() == 1; });
  victim.cancel();
  EXPECT_TRUE(joined_cancelled(victim));
  EXPECT_EQ(ch.waiting_receivers(), 0u);
  ASSERT_TRUE(ch.try_send(7));
  EXPECT_EQ(ch.try_receive(), 7);
}

TEST(Channel, ACancelledSenderSendsNothing) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  ASSERT_TRUE(ch.try_send(1));
  auto victim = rt.spawn(send_one(ch, 2));
  spin_until([&] { return ch.waiting_senders() == 1; });
  victim.cancel();
  EXPECT_TRUE(joined_cancelled(victim));
  EXPECT_EQ(ch.waiting_senders(), 0u);
  EXPECT_EQ(ch.try_receive(), 1);
  EXPECT_EQ(ch.try_receive(), std::nullopt);
}

TEST(Channel, DestroyingAChannelWakesItsWaitersWithTaskCancelled) {
  spindle::runtime rt({.workers = 2});
  auto ch = std::make_unique<spindle::channel<int>>(1);
  auto receiver = rt.spawn(receive_one(*ch));
  spin_until([&] { return ch->waiting_receivers() == 1; });
  ch.reset();
  EXPECT_TRUE(joined_cancelled(receiver));
}

TEST(Channel, CancelRacingASendNeitherLosesNorDuplicatesTheItem) {
  spindle::runtime rt({.workers = 2});
  spindle::channel<int> ch(1);
  const std::uint64_t iterations = scaled(10000);
  std::uint64_t received = 0;
  std::uint64_t cancelled = 0;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    auto receiver = rt.spawn(receive_one(ch));
    if (i % 2 == 0) spin_until([&] { return ch.waiting_receivers() == 1; });
    auto canceller = rt.spawn(cancel_task(&receiver));
    ASSERT_TRUE(ch.try_send(int(i)));  // races the cancel
    canceller.join();
    try {
      std::optional<int> got = receiver.join();
      ASSERT_EQ(got, int(i));
      ++received;
      ASSERT_EQ(ch.try_receive(), std::nullopt);  // not duplicated
    } catch (const spindle::task_cancelled&) {
      ++cancelled;
      ASSERT_EQ(ch.try_receive(), int(i));  // not lost
    }
    ASSERT_EQ(ch.waiting_receivers(), 0u);
  }
  EXPECT_EQ(received + cancelled, iterations);
  // Both outcomes should normally occur; not asserted (it depends on timing), only reported.
  std::printf("[   info   ] %llu received, %llu cancelled\n", (unsigned long long)received, (unsigned long long)cancelled);
}

}  // namespace
