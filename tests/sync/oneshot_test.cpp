// spindle::oneshot<T>: delivery to a task or a thread, sender dropped, misuse, cancellation.
#include "spindle/sync/oneshot.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;

spindle::task<int> receive(spindle::oneshot_receiver<int>& rx) { co_return co_await rx; }

TEST(Oneshot, ValueSentBeforeTheAwait) {
  spindle::runtime rt({.workers = 2});
  auto [tx, rx] = spindle::oneshot<int>();
  EXPECT_FALSE(rx.is_ready());
  tx.send(42);
  EXPECT_TRUE(rx.is_ready());
  EXPECT_EQ(rt.block_on(receive(rx)), 42);
}

TEST(Oneshot, ValueSentWhileATaskWaits) {
  spindle::runtime rt({.workers = 2});
  auto [tx, rx] = spindle::oneshot<int>();
  auto receiver = rt.spawn(receive(rx));
  spin_until([&] { return rx.waiting() == 1; });
  rt.spawn([](spindle::oneshot_sender<int> tx) -> spindle::task<void> {
    tx.send(7);
    co_return;
  }(std::move(tx))).join();
  EXPECT_EQ(receiver.join(), 7);
}

TEST(Oneshot, TheSenderSeesTheReceiverDropped) {
  auto [tx, rx] = spindle::oneshot<int>();
  EXPECT_FALSE(tx.is_closed());
  { auto dropped = std::move(rx); }
  EXPECT_TRUE(tx.is_closed());
  tx.send(1);  // allowed: nobody reads it
  EXPECT_FALSE(tx.is_closed());  // an empty sender
}

TEST(Oneshot, SenderDroppedWithoutSendingClosesTheReceiver) {
  spindle::runtime rt({.workers = 2});
  auto [tx, rx] = spindle::oneshot<int>();
  auto receiver = rt.spawn(receive(rx));
  { auto dropped = std::move(tx); }
  EXPECT_THROW(receiver.join(), spindle::channel_closed);

  auto [tx2, rx2] = spindle::oneshot<int>();
  { auto dropped = std::move(tx2); }
  EXPECT_THROW(rx2.blocking_receive(), spindle::channel_closed);
}

TEST(Oneshot, SendingTwiceOrReceivingTwiceIsAUsageError) {
  spindle::runtime rt({.workers = 2});
  auto [tx, rx] = spindle::oneshot<int>();
  tx.send(1);
  EXPECT_THROW(tx.send(2), spindle::usage_error);
  EXPECT_EQ(rx.blocking_receive(), 1);
  EXPECT_THROW(rx.blocking_receive(), spindle::usage_error);
  EXPECT_THROW(rt.block_on(receive(rx)), spindle::usage_error);
}

TEST(Oneshot, BlockingReceiveOnAPlainThread) {
  auto [tx, rx] = spindle::oneshot<std::unique_ptr<std::string>>();
  std::thread sender([tx = std::move(tx)]() mutable { tx.send(std::make_unique<std::string>("hi")); });
  std::unique_ptr<std::string> value = rx.blocking_receive();
  sender.join();
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(*value, "hi");
}

TEST(Oneshot, BlockingReceiveOnAWorkerIsAUsageError) {
  spindle::runtime rt({.workers = 1});
  auto [tx, rx] = spindle::oneshot<int>();
  tx.send(1);
  EXPECT_THROW(rt.block_on([](spindle::oneshot_receiver<int>& rx) -> spindle::task<int> {
    co_return rx.blocking_receive();
  }(rx)),
               spindle::usage_error);
}

TEST(Oneshot, ACancelledReceiverLeavesTheValueForALaterReceive) {
  spindle::runtime rt({.workers = 2});
  auto [tx, rx] = spindle::oneshot<int>();
  auto victim = rt.spawn(receive(rx));
  spin_until([&] { return rx.waiting() == 1; });
  victim.cancel();
  EXPECT_TRUE(joined_cancelled(victim));
  EXPECT_EQ(rx.waiting(), 0u);
  tx.send(5);
  EXPECT_EQ(rx.blocking_receive(), 5);
}

}  // namespace
