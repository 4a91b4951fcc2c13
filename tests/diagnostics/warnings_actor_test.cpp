// Attack finding (issue 15): one burst of messages into a busy actor was never reported as
// mailbox growth: the actor takes its whole mailbox at each look, so the burst was one look, and
// the rule wanted two looks in a row above the threshold.
#include <gtest/gtest.h>

#include <atomic>

#include "spindle/spindle.hpp"
#include "support/warnings_support.hpp"

namespace {

struct held_actor {
  using message_type = int;
  explicit held_actor(std::atomic<bool>* r) : release(r) {}
  std::atomic<bool>* release;
  void receive(int v) {
    if (v < 0) {
      while (!release->load()) {  // busy in its first message while the burst lands
      }
    }
  }
};

TEST(WarningsActors, ASingleBurstIntoABusyActorIsReported) {
  spindle::runtime_options options;
  options.workers = 2;
  options.diagnostics.mailbox_enable = 5'000;
  options.diagnostics.mailbox_disable = 1'000;
  spindle::runtime rt(options);
  spindle::testing::warning_catcher catcher(rt.warnings());
  std::atomic<bool> release{false};
  spindle::spawn_options actor_options;
  actor_options.name = "flooded-actor";
  auto actor = spindle::spawn_actor<held_actor>(rt, actor_options, &release);
  actor.send(-1);
  for (int i = 0; i < 20'000; ++i) actor.send(i);
  release = true;
  spindle::diagnostics::warning seen;
  ASSERT_TRUE(catcher.wait_for(spindle::diagnostics::warning_kind::mailbox_growth, &seen));
  EXPECT_EQ(seen.subject.name, "flooded-actor");
}

}  // namespace
