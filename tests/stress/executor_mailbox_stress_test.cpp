// Stress: inter-executor messages (executor_mailbox.hpp) between 2, 3 and 4 executors plus a
// foreign thread. Every (sender, receiver) pair, self included, carries its own numbered
// sequence; every number must be delivered exactly once (a bitmap), on the right executor, in
// order per pair (the mailbox keeps each sending thread's order: docs/design/messaging.md), and
// every pool message must be reclaimed exactly once by its sender (the stats add up). A second
// test shuts the runtime down while messages fly: each number sent is then delivered or
// discarded (receiver == nullptr) exactly once.
//
// Senders on executors are "pumps": a message whose delivery sends a burst of items and then a
// pump message to its own executor, so every send runs on a known executor (a task could be moved
// between executors) and the executor keeps delivering what arrives between bursts.
//
// Scale: `scale` divides the message counts under sanitizers (as in spawn_stress_test.cpp; a
// message costs far less than a spawn under TSan, so the division is smaller here: about a second
// for the whole file in either build on two cores).
#include <spindle/spindle.hpp>
#include <spindle/core/executor.hpp>
#include <spindle/core/executor_mailbox.hpp>
#include <spindle/core/runtime_core.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;
using spindle::core::executor;
using spindle::core::executor_message;

constexpr std::uint64_t scale = under_tsan ? 4 : under_asan ? 2 : 1;

struct stopwatch {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

struct alignas(spindle::core::cache_line_size) padded_counter {
  std::atomic<std::uint64_t> value{0};
};

// The message plan. Senders are the executors [0, executors) and the foreign threads
// [executors, senders). Message id = (sender * executors + receiver) * per_pair + k, where k is
// the position in that pair's sequence.
struct mesh {
  mesh(spindle::core::runtime_core& c, std::uint32_t executor_count, std::uint32_t foreign_count,
       std::uint64_t messages_per_pair)
      : core(&c),
        executors(executor_count),
        senders(executor_count + foreign_count),
        per_pair(messages_per_pair),
        seen(std::size_t(senders) * executors * per_pair),
        next_to_send(std::size_t(senders) * executors, 0),
        next_expected(std::size_t(executors) * senders, 0),
        pump_cursor(executors, 0),
        delivered_by(executors) {}

  std::uint64_t id(std::uint32_t sender, std::uint32_t receiver, std::uint64_t k) const {
    return (std::uint64_t(sender) * executors + receiver) * per_pair + k;
  }
  std::uint64_t total() const { return seen.size(); }
  std::uint64_t delivered() const {
    std::uint64_t sum = 0;
    for (const auto& c : delivered_by) sum += c.value.load(std::memory_order_relaxed);
    return sum;
  }

  spindle::core::runtime_core* core;
  const std::uint32_t executors;
  const std::uint32_t senders;
  const std::uint64_t per_pair;
  static constexpr std::uint32_t burst = 48;
  std::vector<std::atomic<std::uint8_t>> seen;  // deliver calls per id (null receiver included)
  std::vector<std::uint64_t> next_to_send;      // [sender][receiver]: written by the sender only
  std::vector<std::uint64_t> next_expected;     // [receiver][sender]: written by the receiver only
  std::vector<std::uint32_t> pump_cursor;       // [executor]: its pump's next receiver
  std::vector<padded_counter> delivered_by;     // [receiver], with a receiver
  std::atomic<std::uint64_t> discarded{0};      // deliver calls with receiver == nullptr
  std::atomic<std::uint64_t> misrouted{0};
  std::atomic<std::uint64_t> out_of_order{0};
  std::atomic<std::uint64_t> pumps{0};          // pump messages delivered (or discarded)
};

void* word(std::uint64_t value) { return reinterpret_cast<void*>(std::uintptr_t(value)); }

void mesh_item(executor_message& message, executor* receiver) noexcept {
  auto& plan = *static_cast<mesh*>(message.payload[0]);
  const std::uint64_t id = reinterpret_cast<std::uintptr_t>(message.payload[1]);
  plan.seen[id].fetch_add(1, std::memory_order_relaxed);
  if (receiver == nullptr) {
    plan.discarded.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const std::uint64_t k = id % plan.per_pair;
  const auto to = std::uint32_t(id / plan.per_pair % plan.executors);
  const auto from = std::uint32_t(id / plan.per_pair / plan.executors);
  const std::uint32_t expected_sender = from < plan.executors ? from : executor_message::foreign_sender;
  if (receiver->index() != to || executor::current() != receiver || message.sender != expected_sender) {
    plan.misrouted.fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t& expected = plan.next_expected[std::size_t(to) * plan.senders + from];
  if (k != expected) plan.out_of_order.fetch_add(1, std::memory_order_relaxed);
  expected = k + 1;
  plan.delivered_by[to].value.fetch_add(1, std::memory_order_relaxed);
}

// Runs on executor `receiver`: sends a burst of items, round-robin over the receivers that still
// expect some, then a pump message to itself to go on after what arrived meanwhile.
void mesh_pump(executor_message& message, executor* receiver) noexcept {
  auto& plan = *static_cast<mesh*>(message.payload[0]);
  plan.pumps.fetch_add(1, std::memory_order_relaxed);
  if (receiver == nullptr) return;
  const std::uint32_t self = receiver->index();
  std::uint32_t& cursor = plan.pump_cursor[self];
  std::uint32_t sent = 0;
  for (std::uint32_t idle = 0; sent < mesh::burst && idle < plan.executors;) {
    const std::uint32_t to = cursor;
    cursor = (cursor + 1) % plan.executors;
    std::uint64_t& next = plan.next_to_send[std::size_t(self) * plan.executors + to];
    if (next == plan.per_pair) {
      ++idle;
      continue;
    }
    idle = 0;
    executor::send_message(*plan.core, to, &mesh_item, &plan, word(plan.id(self, to, next)));
    ++next;
    ++sent;
  }
  if (sent != 0) executor::send_message(*plan.core, self, &mesh_pump, &plan);
}

// A foreign thread's sends: its pair sequences, interleaved over the receivers, until done or
// until `stop` (then `next_to_send` says how far each pair got).
void foreign_sender(mesh& plan, std::uint32_t sender, const std::atomic<bool>* stop) {
  for (std::uint64_t k = 0; k < plan.per_pair; ++k) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return;
    for (std::uint32_t to = 0; to < plan.executors; ++to) {
      executor::send_message(*plan.core, to, &mesh_item, &plan, word(plan.id(sender, to, k)));
      plan.next_to_send[std::size_t(sender) * plan.executors + to] = k + 1;
    }
  }
}

struct mailbox_totals {
  std::uint64_t sent = 0, delivered = 0, returned_received = 0, reclaimed = 0, foreign_delivered = 0,
                pool_chunks = 0;
};

mailbox_totals totals_of(spindle::runtime& rt) {
  mailbox_totals t;
  for (std::uint32_t i = 0; i < rt.executor_count(); ++i) {
    const auto s = rt.core().executor_at(i).message_stats();
    t.sent += s.sent.load();
    t.delivered += s.delivered.load();
    t.returned_received += s.returned_received.load();
    t.reclaimed += s.reclaimed.load();
    t.foreign_delivered += s.foreign_delivered.load();
    t.pool_chunks += s.pool_chunks.load();
  }
  return t;
}

// Counts ids not seen exactly once; reports the first.
std::uint64_t not_exactly_once(const mesh& plan, std::uint64_t& first) {
  std::uint64_t wrong = 0;
  first = ~std::uint64_t(0);
  for (std::uint64_t i = 0; i < plan.total(); ++i) {
    if (plan.seen[i].load(std::memory_order_relaxed) != 1 && wrong++ == 0) first = i;
  }
  return wrong;
}

class MailboxStress : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(MailboxStress, EveryMessageDeliveredAndReclaimedExactlyOnceInOrderPerPair) {
  const std::uint32_t executors = GetParam();
  constexpr std::uint32_t foreign_threads = 1;
  const std::uint64_t pairs = std::uint64_t(executors + foreign_threads) * executors;
  const std::uint64_t per_pair = 2'400'000 / scale / pairs;
  stopwatch watch;
  std::unique_ptr<mesh> plan;  // outlives the runtime: its shutdown may still discard into it
  spindle::runtime rt({.workers = executors});
  plan = std::make_unique<mesh>(rt.core(), executors, foreign_threads, per_pair);
  // Start every pump (a foreign message each), then the foreign sender.
  for (std::uint32_t e = 0; e < executors; ++e) {
    executor::send_message(rt.core(), e, &mesh_pump, plan.get());
  }
  std::thread foreign([&] { foreign_sender(*plan, executors, nullptr); });
  foreign.join();
  ASSERT_TRUE(eventually([&] { return plan->delivered() == plan->total(); }, std::chrono::minutes(5)))
      << plan->delivered() << " of " << plan->total() << " delivered";
  const double seconds = watch.seconds();
  rt.shutdown();  // returns still queued are reclaimed here; pumps are all finished

  std::uint64_t first_wrong = 0;
  EXPECT_EQ(not_exactly_once(*plan, first_wrong), 0u) << "first id not delivered once: " << first_wrong;
  EXPECT_EQ(plan->discarded.load(), 0u);
  EXPECT_EQ(plan->misrouted.load(), 0u);
  EXPECT_EQ(plan->out_of_order.load(), 0u);
  for (std::uint32_t to = 0; to < executors; ++to) {
    for (std::uint32_t from = 0; from < plan->senders; ++from) {
      EXPECT_EQ(plan->next_expected[std::size_t(to) * plan->senders + from], per_pair);
    }
  }
  const mailbox_totals t = totals_of(rt);
  const std::uint64_t pumps = plan->pumps.load();
  const std::uint64_t foreign_items = per_pair * executors * foreign_threads;
  // Pool messages: every item an executor sent plus every pump but the first (foreign) ones.
  EXPECT_EQ(t.sent, plan->total() - foreign_items + pumps - executors);
  EXPECT_EQ(t.delivered, plan->total() + pumps);
  EXPECT_EQ(t.foreign_delivered, foreign_items + executors);
  EXPECT_EQ(t.reclaimed, t.sent);  // every pool message came back exactly once
  EXPECT_LE(t.returned_received, t.reclaimed);
  std::printf("%u executors + %u foreign thread: %llu messages (%llu pumps) in %.2f s, "
              "%llu pool chunks, %llu returns via mailboxes\n",
              executors, foreign_threads, (unsigned long long)plan->total(),
              (unsigned long long)pumps, seconds, (unsigned long long)t.pool_chunks,
              (unsigned long long)t.returned_received);
}

TEST_P(MailboxStress, ShutdownWhileMessagesFlyDeliversOrDiscardsEachExactlyOnce) {
  const std::uint32_t executors = GetParam();
  const std::uint32_t rounds = std::uint32_t(std::max<std::uint64_t>(3, 24 / scale));
  std::uint64_t discarded = 0;
  for (std::uint32_t round = 0; round < rounds; ++round) {
    std::unique_ptr<mesh> plan;  // outlives the runtime
    spindle::runtime rt({.workers = executors});
    // Far more than gets sent before the shutdown: the pumps are still going when it starts.
    plan = std::make_unique<mesh>(rt.core(), executors, 1, 200'000 / scale);
    for (std::uint32_t e = 0; e < executors; ++e) {
      executor::send_message(rt.core(), e, &mesh_pump, plan.get());
    }
    std::atomic<bool> stop{false};
    std::thread foreign([&] { foreign_sender(*plan, executors, &stop); });
    const std::uint64_t threshold = 2'000 + 3'000 * round;
    ASSERT_TRUE(eventually([&] { return plan->delivered() >= threshold; }));
    rt.shutdown();  // the foreign thread keeps sending into closed mailboxes for a while
    stop.store(true);
    foreign.join();

    // Each id a sender sent (k < next_to_send of its pair) was handed to deliver exactly once,
    // with a receiver or with null; no other id was.
    std::uint64_t wrong = 0, first_wrong = ~std::uint64_t(0), sent = 0;
    for (std::uint32_t from = 0; from < plan->senders; ++from) {
      for (std::uint32_t to = 0; to < executors; ++to) {
        const std::uint64_t count = plan->next_to_send[std::size_t(from) * executors + to];
        sent += count;
        for (std::uint64_t k = 0; k < plan->per_pair; ++k) {
          const std::uint64_t id = plan->id(from, to, k);
          if (plan->seen[id].load(std::memory_order_relaxed) != (k < count ? 1u : 0u) &&
              wrong++ == 0) {
            first_wrong = id;
          }
        }
      }
    }
    EXPECT_EQ(wrong, 0u) << "round " << round << ", first id: " << first_wrong;
    EXPECT_EQ(plan->delivered() + plan->discarded.load(), sent);
    EXPECT_EQ(plan->misrouted.load(), 0u);
    EXPECT_EQ(plan->out_of_order.load(), 0u);
    const mailbox_totals t = totals_of(rt);
    EXPECT_EQ(t.reclaimed, t.sent) << "round " << round;  // pool messages: back exactly once
    discarded += plan->discarded.load();
  }
  std::printf("%u executors: %u shutdowns in flight, %llu messages discarded in all\n", executors,
              rounds, (unsigned long long)discarded);
}

INSTANTIATE_TEST_SUITE_P(Executors, MailboxStress, ::testing::Values(2u, 3u, 4u));

}  // namespace
