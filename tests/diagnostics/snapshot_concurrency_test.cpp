// Snapshots taken while two workers spawn and complete tasks at a high rate (SPEC G1: cheap and
// safe on a live runtime): every listed task is whole and valid JSON, nothing crashes, and the
// run is clean under TSan (the records are atomics, validated by the slot's serial).
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>

#include "spindle/spindle.hpp"
#include "spindle/task/snapshot.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::task;

task<int> short_lived(int i) {
  if (i % 3 == 0) spindle::set_task_name("short-" + std::to_string(i % 100));
  if (i % 2 == 0) co_await spindle::yield_now();
  co_return i;
}

task<void> churn(std::atomic<bool>& stop, std::atomic<std::uint64_t>& spawned) {
  spindle::set_task_name("churn");
  int i = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    auto a = spindle::spawn(short_lived(i++));
    auto b = spindle::spawn(short_lived(i++));
    spindle::spawn(short_lived(i++)).detach();
    co_await std::move(a);
    co_await std::move(b);
    spawned.fetch_add(3, std::memory_order_relaxed);
  }
}

TEST(SnapshotConcurrency, SnapshotsWhileTwoWorkersSpawnAndCompleteTasks) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> spawned{0};
  auto first = rt.spawn_on(0, churn(stop, spawned));
  auto second = rt.spawn_on(1, churn(stop, spawned));
  ASSERT_TRUE(spindle::testing::eventually([&] { return spawned.load() > 1000; }));
  const int rounds = spindle::testing::under_tsan ? 20 : 200;
  std::size_t tasks_seen = 0;
  for (int round = 0; round < rounds; ++round) {
    const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
    ASSERT_EQ(doc.at("executors").size(), 2u);
    for (const nlohmann::json& t : doc.at("tasks")) {
      ASSERT_TRUE(t.at("id").is_string());
      const std::string state = t.at("state");
      ASSERT_TRUE(state == "scheduled" || state == "running" || state == "suspended" ||
                  state == "completing")
          << state;
      ASSERT_LE(t.at("busy_ns").get<std::uint64_t>() + t.at("scheduled_ns").get<std::uint64_t>(),
                t.at("age_ns").get<std::uint64_t>() + 1'000'000'000ull);
      const std::string name = t.at("name");
      ASSERT_TRUE(name.empty() || name == "churn" || name.rfind("short-", 0) == 0) << name;
      ++tasks_seen;
    }
    const spindle::runtime_snapshot snap = rt.snapshot();
    for (const spindle::task_info& t : snap.tasks) {
      ASSERT_TRUE(t.executor < 2u || t.executor == spindle::no_executor) << t.executor;
    }
  }
  stop.store(true);
  spindle::testing::join_bounded(std::move(first));
  spindle::testing::join_bounded(std::move(second));
  EXPECT_GT(tasks_seen, 0u);
}

}  // namespace
