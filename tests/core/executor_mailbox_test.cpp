// Inter-executor messages (executor_mailbox.hpp, docs/design/messaging.md): delivery on the
// receiving executor's thread with the payload intact, the return to the sender's pool and its
// reuse, sends to self and from foreign threads, wake-up of a parked receiver, replies sent from
// inside a deliver function, and the shutdown discard (receiver == nullptr, exactly once).
#include <spindle/spindle.hpp>
#include <spindle/core/executor.hpp>
#include <spindle/core/executor_mailbox.hpp>
#include <spindle/core/runtime_core.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;
using spindle::core::executor;
using spindle::core::executor_message;

// What deliver functions record; every field is written by the receiving executor (or by the
// shutdown thread), read by the test thread once `delivered` says so.
struct delivery_log {
  std::atomic<std::uint64_t> delivered{0};     // deliver calls with a receiver
  std::atomic<std::uint64_t> discarded{0};     // deliver calls with receiver == nullptr
  std::atomic<std::uint64_t> wrong_thread{0};  // receiver != executor::current()
  std::atomic<std::uint32_t> last_receiver{~0u};
  std::atomic<std::uintptr_t> last_words[3] = {};
  std::atomic<std::uint32_t> last_kind{0};
  std::atomic<std::uint32_t> last_sender{0};
};

// payload[0] is the log.
void record(executor_message& message, executor* receiver) noexcept {
  auto* log = static_cast<delivery_log*>(message.payload[0]);
  if (receiver == nullptr) {
    log->discarded.fetch_add(1);
    return;
  }
  if (executor::current() != receiver) log->wrong_thread.fetch_add(1);
  log->last_receiver.store(executor::current()->index());
  for (int i = 0; i < 3; ++i) {
    log->last_words[i].store(reinterpret_cast<std::uintptr_t>(message.payload[i]));
  }
  log->last_kind.store(message.kind);
  log->last_sender.store(message.sender);
  log->delivered.fetch_add(1);  // last: the test reads the fields above once it sees this
}

void* word(std::uintptr_t value) { return reinterpret_cast<void*>(value); }

spindle::core::executor_mailbox_stats stats_of(spindle::runtime& rt, std::uint32_t index) {
  return rt.core().executor_at(index).message_stats();
}

// Sends one message with recognisable payload words from the executor this task runs on.
spindle::task<std::uint32_t> send_one(spindle::runtime* rt, std::uint32_t target, delivery_log* log) {
  executor::send_message(rt->core(), target, &record, log, word(0xdead'beef), word(42), 7);
  co_return executor::current()->index();
}

TEST(ExecutorMailbox, DeliverRunsOnTheTargetExecutorWithThePayloadIntact) {
  spindle::runtime rt({.workers = 3});
  for (std::uint32_t from = 0; from < 3; ++from) {
    for (std::uint32_t to = 0; to < 3; ++to) {
      delivery_log log;
      EXPECT_EQ(join_bounded(rt.spawn_on(from, send_one(&rt, to, &log))), from);
      ASSERT_TRUE(eventually([&] { return log.delivered.load() == 1; }));
      EXPECT_EQ(log.last_receiver.load(), to);
      EXPECT_EQ(log.wrong_thread.load(), 0u);
      EXPECT_EQ(log.last_words[0].load(), reinterpret_cast<std::uintptr_t>(&log));
      EXPECT_EQ(log.last_words[1].load(), 0xdead'beefu);
      EXPECT_EQ(log.last_words[2].load(), 42u);
      EXPECT_EQ(log.last_kind.load(), 7u);
      EXPECT_EQ(log.last_sender.load(), from);
    }
  }
}

// Rounds of messages driven by messages, so every send happens on a known executor (a task
// could be moved to another executor between two sends). `start_round` runs on the sender and
// sends `window` items to the receiver; the receiver's delivery of the last item of a round sends
// `start_round` back. By then the sender's mailbox holds the returns of that round's other items
// ahead of it (FIFO per sending executor), so at most window + 1 of its messages are out.
struct round_plan {
  spindle::core::runtime_core* core = nullptr;
  std::uint32_t sender = 0;
  std::uint32_t receiver = 0;
  std::uint32_t window = 0;
  std::uint32_t rounds = 0;
  std::uint32_t rounds_done = 0;  // touched by the receiver's deliveries only
  delivery_log items;
  std::atomic<std::uint64_t> wrong_executor{0};
  std::atomic<bool> done{false};
};

void start_round(executor_message& message, executor* receiver) noexcept;

void round_item_and_maybe_next(executor_message& message, executor* receiver) noexcept {
  auto* plan = static_cast<round_plan*>(message.payload[1]);
  if (receiver == nullptr) return;
  if (receiver->index() != plan->receiver || executor::current() != receiver) {
    plan->wrong_executor.fetch_add(1);
  }
  plan->items.delivered.fetch_add(1);
  const auto position = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(message.payload[2]));
  if (position + 1 < plan->window) return;
  if (++plan->rounds_done == plan->rounds) {
    plan->done.store(true);
    return;
  }
  executor::send_message(*plan->core, plan->sender, &start_round, nullptr, plan);
}

void start_round(executor_message& message, executor* receiver) noexcept {
  auto* plan = static_cast<round_plan*>(message.payload[1]);
  if (receiver == nullptr) return;
  if (receiver->index() != plan->sender) plan->wrong_executor.fetch_add(1);
  for (std::uint32_t i = 0; i < plan->window; ++i) {
    executor::send_message(*plan->core, plan->receiver, &round_item_and_maybe_next, nullptr, plan,
                           word(i));
  }
}

void run_rounds(spindle::runtime& rt, round_plan& plan) {
  plan.core = &rt.core();
  executor::send_message(rt.core(), plan.sender, &start_round, nullptr, &plan);  // foreign
  ASSERT_TRUE(eventually([&] { return plan.done.load(); }));
  EXPECT_EQ(plan.wrong_executor.load(), 0u);
  EXPECT_EQ(plan.items.delivered.load(), std::uint64_t(plan.rounds) * plan.window);
}

TEST(ExecutorMailbox, MessagesReturnToTheSendersPoolAndAreReused) {
  spindle::runtime rt({.workers = 2});
  round_plan plan;
  plan.sender = 0;
  plan.receiver = 1;
  plan.window = 64;
  plan.rounds = 300;
  run_rounds(rt, plan);
  const std::uint64_t items = 64 * 300;
  // The last round's returns may still be on their way; only the shutdown drain is sure to
  // have reclaimed them (the sender need not wake for a return).
  rt.shutdown();
  const auto sender = stats_of(rt, 0);
  const auto receiver = stats_of(rt, 1);
  EXPECT_EQ(sender.sent.load(), items);
  EXPECT_EQ(sender.returned_received.load(), items);  // every one came back through the mailbox
  EXPECT_EQ(sender.reclaimed.load(), items);
  EXPECT_EQ(sender.pool_chunks.load(), 1u);  // at most 65 out at once: the first chunk is reused
  EXPECT_EQ(sender.delivered.load(), 300u);  // the start_round messages
  EXPECT_EQ(sender.foreign_delivered.load(), 1u);
  EXPECT_EQ(receiver.delivered.load(), items);
  EXPECT_EQ(receiver.sent.load(), 299u);  // start_round for rounds 2..300
  EXPECT_EQ(receiver.reclaimed.load(), 299u);
  EXPECT_EQ(receiver.pool_chunks.load(), 1u);
}

TEST(ExecutorMailbox, SendToSelfIsDeliveredOnTheSameExecutorAndReclaimedDirectly) {
  spindle::runtime rt({.workers = 2});
  round_plan plan;
  plan.sender = 1;
  plan.receiver = 1;
  plan.window = 100;
  plan.rounds = 50;
  run_rounds(rt, plan);
  rt.shutdown();
  const std::uint64_t messages = 100 * 50 + 49;  // items plus start_round for rounds 2..50
  const auto self = stats_of(rt, 1);
  EXPECT_EQ(self.sent.load(), messages);
  EXPECT_EQ(self.delivered.load(), messages + 1);  // and the foreign first start_round
  EXPECT_EQ(self.reclaimed.load(), messages);
  EXPECT_EQ(self.returned_received.load(), 0u);  // no trip through the mailbox for a return
  EXPECT_EQ(self.pool_chunks.load(), 1u);
  const auto other = stats_of(rt, 0);
  EXPECT_EQ(other.delivered.load(), 0u);
  EXPECT_EQ(other.sent.load(), 0u);
}

TEST(ExecutorMailbox, ForeignThreadsSendHeapMessagesThatTheReceiverFrees) {
  spindle::runtime rt({.workers = 3});
  delivery_log log;
  constexpr std::uint32_t per_thread = 3'000;
  std::vector<std::thread> senders;
  for (std::uint32_t t = 0; t < 2; ++t) {
    senders.emplace_back([&rt, &log, t] {
      for (std::uint32_t i = 0; i < per_thread; ++i) {
        executor::send_message(rt.core(), (t + i) % 3, &record, &log, word(i));
      }
    });
  }
  for (auto& t : senders) t.join();
  ASSERT_TRUE(eventually([&] { return log.delivered.load() == 2 * per_thread; }));
  EXPECT_EQ(log.wrong_thread.load(), 0u);
  EXPECT_EQ(log.last_sender.load(), executor_message::foreign_sender);
  std::uint64_t foreign = 0;
  for (std::uint32_t i = 0; i < 3; ++i) {
    const auto s = stats_of(rt, i);
    EXPECT_EQ(s.delivered.load(), s.foreign_delivered.load());
    EXPECT_EQ(s.delivered.load(), per_thread * 2 / 3);  // round-robin over the three executors
    EXPECT_EQ(s.sent.load(), 0u);
    EXPECT_EQ(s.pool_chunks.load(), 0u);
    foreign += s.foreign_delivered.load();
  }
  EXPECT_EQ(foreign, 2 * per_thread);
  // ASan (asan-ubsan preset) checks that the receivers freed every heap message.
}

TEST(ExecutorMailbox, AMessageWakesAParkedExecutor) {
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < 50; ++round) {
    // With every executor parked and no timer armed, nothing but the send wakes one (apart from
    // a stuck-owner check still bounding a park that began while the other was awake): a lost
    // wake-up leaves the message undelivered and `eventually` fails.
    ASSERT_TRUE(eventually([&] { return rt.core().unparked_count() == 0; }));
    delivery_log log;
    executor::send_message(rt.core(), std::uint32_t(round % 2), &record, &log);
    ASSERT_TRUE(eventually([&] { return log.delivered.load() == 1; }));
    EXPECT_EQ(log.last_receiver.load(), std::uint32_t(round % 2));
  }
}

TEST(ExecutorMailbox, AWorkerSendWakesAParkedExecutor) {
  spindle::runtime rt({.workers = 2});
  for (int round = 0; round < 50; ++round) {
    // First a foreign message to executor 1: it wakes, delivers and parks again while executor 0
    // sleeps, so without the stuck-owner timeout. Then the task on executor 0 (woken through its
    // inbox, which does not wake executor 1) sends to it: only that send can wake executor 1.
    ASSERT_TRUE(eventually([&] { return rt.core().unparked_count() == 0; }));
    delivery_log first;
    executor::send_message(rt.core(), 1, &record, &first);
    ASSERT_TRUE(eventually([&] { return first.delivered.load() == 1; }));
    ASSERT_TRUE(eventually([&] { return rt.core().unparked_count() == 0; }));
    delivery_log log;
    EXPECT_EQ(join_bounded(rt.spawn_on(0, send_one(&rt, 1, &log))), 0u);
    ASSERT_TRUE(eventually([&] { return log.delivered.load() == 1; }));
    EXPECT_EQ(log.last_receiver.load(), 1u);
  }
}

// Ping-pong from inside deliver functions: each delivery sends the next message back from the
// receiving executor (so from its pool), until `remaining` reaches zero.
struct rally {
  spindle::core::runtime_core* core = nullptr;
  std::atomic<std::uint64_t> remaining{0};
  std::atomic<std::uint64_t> wrong_thread{0};
  std::atomic<bool> done{false};
};

void bounce(executor_message& message, executor* receiver) noexcept {
  auto* game = static_cast<rally*>(message.payload[0]);
  if (receiver == nullptr) return;
  const auto expected = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(message.payload[1]));
  if (receiver->index() != expected || executor::current() != receiver) game->wrong_thread.fetch_add(1);
  if (game->remaining.fetch_sub(1) == 1) {
    game->done.store(true);
    return;
  }
  const std::uint32_t other = 1 - receiver->index();
  executor::send_message(*game->core, other, &bounce, game, word(other));
}

TEST(ExecutorMailbox, DeliverFunctionsCanReplyAndPoolsStayAtOneChunk) {
  spindle::runtime rt({.workers = 2});
  rally game;
  game.core = &rt.core();
  constexpr std::uint64_t rounds = 20'000;
  game.remaining.store(rounds);
  executor::send_message(rt.core(), 0, &bounce, &game, word(0));  // the serve (foreign)
  ASSERT_TRUE(eventually([&] { return game.done.load(); }));
  EXPECT_EQ(game.wrong_thread.load(), 0u);
  rt.shutdown();  // returns still queued are reclaimed by the shutdown drain
  std::uint64_t sent = 0, delivered = 0, reclaimed = 0;
  for (std::uint32_t i = 0; i < 2; ++i) {
    const auto s = stats_of(rt, i);
    sent += s.sent.load();
    delivered += s.delivered.load();
    reclaimed += s.reclaimed.load();
    EXPECT_EQ(s.pool_chunks.load(), 1u);  // one message in flight at a time
  }
  EXPECT_EQ(sent, rounds - 1);
  EXPECT_EQ(delivered, rounds);  // the foreign serve plus every reply
  EXPECT_EQ(reclaimed, sent);
}

// Keeps its executor busy (never returning to the loop, so its mailbox is never polled) until
// the runtime stops.
spindle::task<void> hold_until_stopping(spindle::runtime* rt, std::atomic<bool>* started) {
  started->store(true);
  while (!rt->core().stopping()) spindle::core::cpu_relax();
  co_return;
}

spindle::task<void> send_many(spindle::runtime* rt, std::uint32_t target, delivery_log* log,
                              std::uint32_t count) {
  for (std::uint32_t i = 0; i < count; ++i) executor::send_message(rt->core(), target, &record, log);
  co_return;
}

TEST(ExecutorMailbox, ShutdownDiscardsMessagesInFlightExactlyOnce) {
  constexpr std::uint32_t from_worker = 700;  // more than a chunk: the pool grows
  constexpr std::uint32_t from_foreign = 300;
  delivery_log log;
  spindle::runtime rt({.workers = 2});
  std::atomic<bool> started{false};
  auto holder = rt.spawn_on(1, hold_until_stopping(&rt, &started));
  spin_until([&] { return started.load(); });
  // Executor 1 runs the holder until shutdown, so these stay in its mailbox: once the holder
  // returns the loop sees `stopping` and leaves without polling again.
  join_bounded(rt.spawn_on(0, send_many(&rt, 1, &log, from_worker)));
  for (std::uint32_t i = 0; i < from_foreign; ++i) executor::send_message(rt.core(), 1, &record, &log);
  EXPECT_EQ(log.delivered.load(), 0u);
  rt.shutdown();
  EXPECT_EQ(log.delivered.load(), 0u);
  EXPECT_EQ(log.discarded.load(), from_worker + from_foreign);
  const auto sender = stats_of(rt, 0);
  const auto receiver = stats_of(rt, 1);
  EXPECT_EQ(sender.sent.load(), from_worker);
  EXPECT_EQ(sender.reclaimed.load(), from_worker);  // back in the pool before it is freed
  EXPECT_EQ(sender.pool_chunks.load(), 3u);          // 700 messages in flight, 256 per chunk
  EXPECT_EQ(receiver.delivered.load(), from_worker + from_foreign);
  EXPECT_EQ(receiver.foreign_delivered.load(), from_foreign);

  // After the shutdown the mailboxes are closed: a send is discarded at once, on this thread.
  executor::send_message(rt.core(), 0, &record, &log);
  EXPECT_EQ(log.discarded.load(), from_worker + from_foreign + 1);
  EXPECT_EQ(log.delivered.load(), 0u);
  (void)joined_cancelled(holder);
}

// Sends `count` messages to `target`, then keeps its executor busy until the runtime stops.
spindle::task<void> send_then_hold(spindle::runtime* rt, std::uint32_t target, delivery_log* log,
                                   std::uint32_t count, std::atomic<bool>* sent) {
  for (std::uint32_t i = 0; i < count; ++i) executor::send_message(rt->core(), target, &record, log);
  sent->store(true);
  while (!rt->core().stopping()) spindle::core::cpu_relax();
  co_return;
}

TEST(ExecutorMailbox, ReturnsQueuedAtShutdownAreReclaimed) {
  // Messages delivered by executor 1 go back to executor 0, which is kept busy and never polls
  // its mailbox again: the returns are still queued at shutdown and the drain reclaims them.
  delivery_log log;
  constexpr std::uint32_t count = 100;
  spindle::runtime rt({.workers = 2});
  std::atomic<bool> started{false};
  auto holder = rt.spawn_on(0, send_then_hold(&rt, 1, &log, count, &started));
  spin_until([&] { return started.load(); });
  ASSERT_TRUE(eventually([&] { return log.delivered.load() == count; }));
  ASSERT_TRUE(eventually([&] { return !rt.core().executor_at(0).mailbox().empty(); }));
  EXPECT_EQ(stats_of(rt, 0).reclaimed.load(), 0u);
  rt.shutdown();
  const auto sender = stats_of(rt, 0);
  EXPECT_EQ(sender.returned_received.load(), count);
  EXPECT_EQ(sender.reclaimed.load(), count);
  EXPECT_EQ(log.discarded.load(), 0u);
  (void)joined_cancelled(holder);
}

}  // namespace
