// Stress for for_each_concurrent (task/concurrent.hpp): many rounds over a channel, random limits,
// random delays in the items (yields, short sleeps), and in some rounds an item that throws or the
// consumer cancelled midway. Every item made is accounted for exactly once: it is destroyed
// exactly once (processed, dropped with a cancelled child, left in the channel or refused by a
// closed channel), processed at most once, and in the rounds that end normally, processed
// exactly once; the limit is never exceeded. About 100 rounds of up to 3000 items: ~1 s on 2
// cores in release. SPINDLE_CONCURRENT_SCALE overrides the round count.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace spindle::testing;

struct item_ledger {
  explicit item_ledger(std::size_t count) : created(count), destroyed(count), processed(count) {}
  std::vector<std::atomic<int>> created, destroyed, processed;
  std::atomic<int> in_flight{0}, most_in_flight{0};
};

// Move-only: the object that holds the id (not a moved-from one) records its destruction.
class tracked_item {
 public:
  tracked_item(int id, item_ledger* ledger) : id_(id), ledger_(ledger) {
    ledger_->created[std::size_t(id_)].fetch_add(1);
  }
  tracked_item(tracked_item&& other) noexcept : id_(std::exchange(other.id_, -1)), ledger_(other.ledger_) {}
  tracked_item& operator=(tracked_item&&) = delete;
  ~tracked_item() {
    if (id_ >= 0) ledger_->destroyed[std::size_t(id_)].fetch_add(1);
  }
  int id() const noexcept { return id_; }

 private:
  int id_;
  item_ledger* ledger_;
};

spindle::task<void> stress_produce(spindle::channel<tracked_item>& ch, item_ledger& ledger,
                                   int count) {
  try {
    for (int i = 0; i < count; ++i) {
      tracked_item item(i, &ledger);
      co_await ch.send(std::move(item));
    }
  } catch (const spindle::channel_closed&) {
    co_return;  // the consumer ended early: the refused item was destroyed with its send
  }
  ch.close();
}

struct round_plan {
  int count;
  std::size_t limit;
  int throw_at;    // -1: none
  int cancel_at;   // -1: none (processed count at which the test cancels the consumer)
  unsigned seed;
};

spindle::task<void> stress_process(tracked_item item, item_ledger* ledger, int throw_at,
                                   unsigned delay) {
  const int now = ledger->in_flight.fetch_add(1) + 1;
  raise_max(ledger->most_in_flight, now);
  struct leave {
    item_ledger* ledger;
    ~leave() { ledger->in_flight.fetch_sub(1); }
  } on_exit{ledger};
  if (delay % 7 == 0) co_await spindle::sleep_for(std::chrono::microseconds(delay % 200));
  for (unsigned i = 0; i < delay % 4; ++i) co_await spindle::yield_now();
  if (item.id() == throw_at) throw boom();
  ledger->processed[std::size_t(item.id())].fetch_add(1);
}

spindle::task<void> stress_consume(spindle::channel<tracked_item>& ch, item_ledger& ledger,
                                   round_plan plan) {
  co_await spindle::for_each_concurrent(ch, plan.limit, [&ledger, plan](tracked_item item) {
    const unsigned delay = unsigned(item.id()) * 2654435761u ^ plan.seed;
    return stress_process(std::move(item), &ledger, plan.throw_at, delay);
  });
}

int processed_total(item_ledger& ledger) {
  int total = 0;
  for (auto& count : ledger.processed) total += count.load();
  return total;
}

TEST(ConcurrentStress, EveryItemAccountedForExactlyOnce) {
  const char* scale = std::getenv("SPINDLE_CONCURRENT_SCALE");
  const int rounds = scale != nullptr ? std::atoi(scale) : (under_tsan ? 30 : 100);
  spindle::runtime_options options;
  options.workers = 2;
  spindle::runtime rt(options);
  std::mt19937 random(16);
  for (int round = 0; round < rounds; ++round) {
    round_plan plan{};
    plan.count = int(random() % 3000) + 1;
    plan.limit = random() % 16 + 1;
    const unsigned kind = random() % 4;  // 0, 1: clean; 2: an item throws; 3: cancelled
    plan.throw_at = kind == 2 ? int(random() % unsigned(plan.count)) : -1;
    plan.cancel_at = kind == 3 ? int(random() % unsigned(plan.count)) : -1;
    plan.seed = unsigned(random());
    item_ledger ledger(std::size_t(plan.count));
    auto ch = std::make_unique<spindle::channel<tracked_item>>(random() % 8 + 1);
    auto producer = rt.spawn(stress_produce(*ch, ledger, plan.count));
    auto consumer = rt.spawn(stress_consume(*ch, ledger, plan));
    if (plan.cancel_at >= 0) {
      ASSERT_TRUE(eventually([&] {
        return processed_total(ledger) >= plan.cancel_at || consumer.is_finished();
      }));
      consumer.cancel();
    }
    bool threw = false, cancelled = false;
    try {
      consumer.join();
    } catch (const boom&) {
      threw = true;
    } catch (const spindle::task_cancelled&) {
      cancelled = true;
    }
    EXPECT_EQ(ledger.in_flight.load(), 0) << "round " << round;  // no child outlives the call
    ch->close();        // a producer blocked on a full channel gets channel_closed
    producer.join();
    ch.reset();         // items left in the channel are destroyed
    EXPECT_LE(ledger.most_in_flight.load(), int(plan.limit)) << "round " << round;
    if (plan.throw_at >= 0) {
      EXPECT_TRUE(threw) << "round " << round;
    }
    if (plan.throw_at < 0 && plan.cancel_at < 0) {
      EXPECT_FALSE(threw || cancelled) << "round " << round;
    }
    for (std::size_t i = 0; i < std::size_t(plan.count); ++i) {
      const int created = ledger.created[i].load();
      ASSERT_LE(created, 1) << "round " << round << " item " << i;
      ASSERT_EQ(ledger.destroyed[i].load(), created) << "round " << round << " item " << i;
      ASSERT_LE(ledger.processed[i].load(), created) << "round " << round << " item " << i;
      if (!threw && !cancelled) {
        ASSERT_EQ(ledger.processed[i].load(), 1) << "round " << round << " item " << i;
      }
    }
  }
}

}  // namespace
