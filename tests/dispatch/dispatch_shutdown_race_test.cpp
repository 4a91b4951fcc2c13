// Regression test for issue 14, item 2: a submit from a plain thread racing the runtime's
// destruction, with the dispatcher's worker idle (waiting for work), so that the submitter's wake
// (after it released the queue lock) meets the worker's frame that shutdown is destroying.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::testing::spin_until;

TEST(DispatchShutdownRace, SubmitToAnIdleWorkerRacingRuntimeDestruction) {
  constexpr int rounds = 150;
  constexpr int submitters = 3;
  int accepted = 0;
  for (int round = 0; round < rounds; ++round) {
    auto rt = std::make_unique<spindle::runtime>(spindle::runtime_options{.workers = 1});
    spindle::dispatcher d(*rt, {.mode = spindle::dispatch_mode::parallel, .shards = 1});
    // One submission through: the worker then goes back to waiting on its empty queue.
    EXPECT_EQ(d.submit([] { return 1; }).get(), 1);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<spindle::dispatch_future<int>> futures(submitters);
    std::vector<std::thread> threads;
    for (int t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        spin_until([&] { return go.load(); });
        try {
          futures[t] = d.submit([] { return 2; });
        } catch (const spindle::dispatcher_closed&) {
        }
      });
    }
    spin_until([&] { return ready.load() == submitters; });
    go.store(true);
    rt.reset();  // shutdown destroys the idle worker's frame while the submitters wake it
    for (auto& thread : threads) thread.join();
    for (auto& f : futures) {
      if (!f.valid()) continue;
      ++accepted;
      // Accepted: it ran, or shutdown ended it as cancelled; either way it is ready now.
      EXPECT_TRUE(f.is_ready()) << "round " << round;
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
