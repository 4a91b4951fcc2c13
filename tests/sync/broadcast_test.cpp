// spindle::broadcast: every receiver sees every message in order; a lagging receiver is told how
// many it missed and goes on from the oldest kept; close drains then ends; waiting receivers are
// all woken by one send; a cancelled waiting receiver loses nothing; and concurrent receivers
// account for every message exactly once (received or counted as missed).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::broadcast;
using spindle::broadcast_lagged;
using spindle::task;
using namespace spindle::testing;

TEST(Broadcast, LaggingReceiverIsToldHowManyItMissed) {
  broadcast<int> bus(4);
  auto rx = bus.subscribe();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(bus.send(i), 1u);
  try {
    (void)rx.try_receive();
    FAIL() << "no lag reported";
  } catch (const broadcast_lagged& lag) {
    EXPECT_EQ(lag.missed(), 6u);
  }
  for (int i = 6; i < 10; ++i) EXPECT_EQ(rx.try_receive(), std::optional<int>(i));
  EXPECT_EQ(rx.try_receive(), std::nullopt);
}

TEST(Broadcast, SubscribersSeeOnlyLaterMessagesAndSendWithoutReceiversKeepsNothing) {
  broadcast<int> bus(4);
  EXPECT_EQ(bus.send(1), 0u);
  auto early = bus.subscribe();
  EXPECT_EQ(bus.send(2), 1u);
  auto late = bus.subscribe();
  EXPECT_EQ(bus.send(3), 2u);
  EXPECT_EQ(bus.receiver_count(), 2u);
  EXPECT_EQ(early.try_receive(), std::optional<int>(2));
  EXPECT_EQ(early.try_receive(), std::optional<int>(3));
  EXPECT_EQ(late.try_receive(), std::optional<int>(3));
  {
    auto moved = std::move(late);
    EXPECT_EQ(bus.receiver_count(), 2u);
  }
  EXPECT_EQ(bus.receiver_count(), 1u);
}

task<std::vector<int>> broadcast_drain(broadcast<int>::receiver* rx) {
  std::vector<int> got;
  for (;;) {
    std::optional<int> message = co_await rx->receive();
    if (!message) break;
    got.push_back(*message);
  }
  co_return got;
}

TEST(Broadcast, CloseDrainsThenEnds) {
  spindle::runtime rt({.workers = 2});
  broadcast<int> bus(8);
  auto rx = bus.subscribe();
  bus.send(1);
  bus.send(2);
  bus.close();
  EXPECT_THROW(bus.send(3), spindle::channel_closed);
  EXPECT_EQ(rt.block_on(broadcast_drain(&rx)), (std::vector<int>{1, 2}));
}

TEST(Broadcast, OneSendWakesEveryWaitingReceiver) {
  spindle::runtime rt({.workers = 2});
  broadcast<int> bus(8);
  std::vector<broadcast<int>::receiver> receivers;
  for (int i = 0; i < 3; ++i) receivers.push_back(bus.subscribe());
  std::vector<spindle::join_handle<std::vector<int>>> handles;
  for (auto& rx : receivers) handles.push_back(rt.spawn(broadcast_drain(&rx)));
  ASSERT_TRUE(eventually([&] { return bus.waiting_receivers() == 3; }));
  bus.send(7);
  bus.close();
  for (auto& handle : handles) EXPECT_EQ(handle.join(), (std::vector<int>{7}));
}

task<std::optional<int>> broadcast_receive_one(broadcast<int>::receiver* rx) {
  co_return co_await rx->receive();
}

TEST(Broadcast, ACancelledWaitingReceiverLosesNothing) {
  spindle::runtime rt({.workers = 2});
  broadcast<int> bus(8);
  auto rx = bus.subscribe();
  auto handle = rt.spawn(broadcast_receive_one(&rx));
  ASSERT_TRUE(eventually([&] { return bus.waiting_receivers() == 1; }));
  handle.cancel();
  EXPECT_THROW(handle.join(), spindle::task_cancelled);
  EXPECT_EQ(bus.waiting_receivers(), 0u);
  bus.send(5);
  EXPECT_EQ(rt.spawn(broadcast_receive_one(&rx)).join(), std::optional<int>(5));
}

struct broadcast_tally {
  std::uint64_t received = 0;
  std::uint64_t missed = 0;
  bool in_order = true;
};

// Receives until closed, counting lags: every message is either received or missed, once.
task<broadcast_tally> broadcast_count(broadcast<int>::receiver* rx) {
  broadcast_tally tally;
  int last = -1;
  for (;;) {
    try {
      std::optional<int> message = co_await rx->receive();
      if (!message) break;
      if (*message <= last) tally.in_order = false;
      last = *message;
      ++tally.received;
    } catch (const broadcast_lagged& lag) {
      tally.missed += lag.missed();
    }
  }
  co_return tally;
}

task<void> broadcast_send_all(broadcast<int>* bus, int count) {
  for (int i = 0; i < count; ++i) {
    bus->send(i);
    if (i % 7 == 0) co_await spindle::yield_now();
  }
  bus->close();
}

TEST(Broadcast, ConcurrentReceiversAccountForEveryMessageOnce) {
  constexpr int messages = 20000;
  spindle::runtime rt({.workers = 2});
  broadcast<int> bus(16);
  std::vector<broadcast<int>::receiver> receivers;
  for (int i = 0; i < 4; ++i) receivers.push_back(bus.subscribe());
  std::vector<spindle::join_handle<broadcast_tally>> handles;
  for (auto& rx : receivers) handles.push_back(rt.spawn(broadcast_count(&rx)));
  rt.spawn(broadcast_send_all(&bus, messages)).join();
  for (auto& handle : handles) {
    const broadcast_tally tally = handle.join();
    EXPECT_TRUE(tally.in_order);
    EXPECT_EQ(tally.received + tally.missed, std::uint64_t(messages));
  }
}

}  // namespace
