// The snapshot's sections from the modules above tasks (SPEC G1): dispatchers (queued and
// running submissions) and fork-join activity (fork_join calls in flight per executor).
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "spindle/dispatch/dispatcher.hpp"
#include "spindle/fork/fork.hpp"
#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::testing::eventually;

nlohmann::json section(spindle::runtime& rt, const char* name) {
  const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
  const nlohmann::json& sections = doc.at("sections");
  return sections.contains(name) ? sections.at(name) : nlohmann::json();
}

TEST(SnapshotSections, ADispatcherShowsItsQueuedAndRunningSubmissions) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  spindle::dispatcher_options options;
  options.mode = spindle::dispatch_mode::sequential_uncancelable;
  options.name = "ingest";
  spindle::dispatcher d(rt, options);
  auto first = d.submit([&] {
    started.store(true);
    while (!release.load()) std::this_thread::yield();  // holds its worker: the rest queue
    return 1;
  });
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  auto second = d.submit([] { return 2; });
  auto third = d.submit([] { return 3; });
  const nlohmann::json dispatchers = section(rt, "dispatchers");
  ASSERT_TRUE(dispatchers.is_array());
  ASSERT_EQ(dispatchers.size(), 1u);
  EXPECT_EQ(dispatchers[0].at("name"), "ingest");
  EXPECT_EQ(dispatchers[0].at("mode"), std::string(spindle::to_string(options.mode)));
  EXPECT_EQ(dispatchers[0].at("outstanding"), 3);
  EXPECT_EQ(dispatchers[0].at("running").get<int>() + dispatchers[0].at("queued").get<int>(), 3);
  EXPECT_GE(dispatchers[0].at("running").get<int>(), 1);
  // Its worker task carries its name.
  EXPECT_NE(rt.snapshot().find_task("ingest"), nullptr);
  release.store(true);
  EXPECT_EQ(first.get() + second.get() + third.get(), 6);
  d.close();
}

TEST(SnapshotSections, ForkJoinShowsComputationsInFlightPerExecutor) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  std::atomic<bool> release{false};
  std::atomic<bool> inside{false};
  std::thread caller([&] {
    spindle::fork_join(
        rt,
        [&] {
          inside.store(true);
          while (!release.load()) std::this_thread::yield();
          return 1;
        },
        [] { return 2; });
  });
  ASSERT_TRUE(eventually([&] { return inside.load(); }));
  const nlohmann::json fork = section(rt, "fork_join");
  ASSERT_TRUE(fork.is_object()) << fork.dump();
  std::uint64_t in_flight = 0;
  for (const nlohmann::json& e : fork.at("executors")) {
    in_flight += e.at("fork_joins_in_flight").get<std::uint64_t>();
  }
  EXPECT_GE(in_flight, 1u);
  EXPECT_TRUE(fork.contains("promoted"));
  release.store(true);
  caller.join();
}

}  // namespace
