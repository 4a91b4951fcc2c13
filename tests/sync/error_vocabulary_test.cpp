// The error vocabulary (docs/design/errors.md), one test per rule for the sync primitives:
// a stream's end is an empty optional, a value that can no longer be delivered is
// channel_closed, a try_ operation reports "would wait" and "closed" as a result without
// throwing, misuse is usage_error.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::testing::receive_one;
using spindle::testing::send_one;

spindle::task<int> receive_oneshot(spindle::oneshot_receiver<int> rx) { co_return co_await rx; }

// Rule 1: receiving from a channel that is closed and drained is the end of the stream, not an
// error: an empty optional, from receive() and try_receive() alike.
TEST(ErrorVocabulary, ChannelReceiveAfterCloseIsAnEmptyOptional) {
  spindle::runtime rt({.workers = 1});
  spindle::channel<int> ch(2);
  ASSERT_TRUE(ch.try_send(1));
  ch.close();
  EXPECT_EQ(rt.block_on(receive_one(ch)), 1);  // buffered items first
  EXPECT_EQ(rt.block_on(receive_one(ch)), std::nullopt);
  EXPECT_EQ(ch.try_receive(), std::nullopt);
}

// Rule 2: a send that cannot deliver (the channel is closed) throws channel_closed.
TEST(ErrorVocabulary, ChannelSendAfterCloseThrowsChannelClosed) {
  spindle::runtime rt({.workers = 1});
  spindle::channel<int> ch(2);
  ch.close();
  EXPECT_THROW(rt.block_on(send_one(ch, 1)), spindle::channel_closed);
}

// Rule 3: try_send never throws for a state of the channel: full and closed are both results,
// told apart, and the item stays with the caller in both cases.
TEST(ErrorVocabulary, TrySendTellsFullFromClosedWithoutThrowing) {
  spindle::channel<std::unique_ptr<int>> ch(1);
  ASSERT_TRUE(ch.try_send(std::make_unique<int>(1)));
  auto item = std::make_unique<int>(2);
  const spindle::channel_send_status full = ch.try_send(std::move(item));
  EXPECT_FALSE(full);
  EXPECT_EQ(full, spindle::channel_send_status::full);
  EXPECT_TRUE(full.is_full());
  EXPECT_NE(item, nullptr);
  ch.close();
  EXPECT_NO_THROW({
    auto result = ch.try_send(std::move(item));
    EXPECT_FALSE(result);
    EXPECT_EQ(result, spindle::channel_send_status::closed);
    EXPECT_TRUE(result.is_closed());
    EXPECT_STREQ(spindle::to_string(result), "closed");
  });
  EXPECT_NE(item, nullptr);
  // Contextually true on success, as the bool it replaced.
  spindle::channel<int> open(1);
  const spindle::channel_send_status sent = open.try_send(1);
  EXPECT_TRUE(sent);
  EXPECT_EQ(sent, spindle::channel_send_status::sent);
}

// Rule 2 again: a oneshot whose sender went away without sending can never deliver its value:
// channel_closed, from the await and from blocking_receive alike (a promise broken, as
// std::future's broken_promise).
TEST(ErrorVocabulary, OneshotWhoseSenderDroppedThrowsChannelClosed) {
  spindle::runtime rt({.workers = 1});
  {
    auto [tx, rx] = spindle::oneshot<int>();
    { auto dropped = std::move(tx); }
    EXPECT_THROW(rt.block_on(receive_oneshot(std::move(rx))), spindle::channel_closed);
  }
  {
    auto [tx, rx] = spindle::oneshot<int>();
    { auto dropped = std::move(tx); }
    EXPECT_THROW(rx.blocking_receive(), spindle::channel_closed);
  }
}

// Rule 4: every "the caller broke the contract" error is a usage_error, and usage_error is a
// std::invalid_argument (so a std::logic_error): code that caught the standard type still does.
TEST(ErrorVocabulary, UsageErrorIsAStandardInvalidArgument) {
  EXPECT_TRUE((std::is_base_of_v<std::invalid_argument, spindle::usage_error>));
  EXPECT_TRUE((std::is_base_of_v<std::logic_error, spindle::usage_error>));
  EXPECT_TRUE((std::is_base_of_v<std::runtime_error, spindle::channel_closed>));
  EXPECT_TRUE((std::is_base_of_v<std::runtime_error, spindle::runtime_stopped>));
  EXPECT_THROW(spindle::channel<int>(0), std::invalid_argument);
}

}  // namespace
