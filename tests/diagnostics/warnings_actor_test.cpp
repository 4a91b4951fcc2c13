// Attack finding (issue 15): one burst of messages into a busy actor was never reported as
// mailbox growth: the actor takes its whole mailbox at each look, so the burst was one look, and
// the rule wanted two looks in a row above the threshold.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

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

// Issue 15 (attack finding): a stall inside an actor's handler was reported as "a runnable that
// is not a task (an actor wheel's slice, a fork-join piece)": it names the actor now.
struct stalling_actor {
  using message_type = int;
  explicit stalling_actor(std::atomic<bool>* r) : release(r) {}
  std::atomic<bool>* release;
  void receive(int) {
    // The planted stall: busy on the steady clock until the test saw the warning (or 5 s).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!release->load() && std::chrono::steady_clock::now() < give_up) {
    }
  }
};

TEST(WarningsActors, AStallInAnActorsHandlerNamesTheActor) {
  spindle::runtime_options options;
  options.workers = 1;
  options.diagnostics.stall_threshold = std::chrono::milliseconds(10);
  options.diagnostics.woken_threshold = std::chrono::seconds(10);
  spindle::runtime rt(options);
  spindle::testing::warning_catcher catcher(rt.warnings());
  std::atomic<bool> release{false};
  spindle::spawn_options actor_options;
  actor_options.name = "stuck-actor";
  auto actor = spindle::spawn_actor<stalling_actor>(rt, actor_options, &release);
  actor.send(1);
  spindle::diagnostics::warning seen;
  const bool caught = catcher.wait_for(spindle::diagnostics::warning_kind::stall, &seen);
  release = true;
  ASSERT_TRUE(caught);
  const std::string line = spindle::diagnostics::warning_hub::format(seen);
  EXPECT_EQ(seen.subject.what, spindle::diagnostics::warning_subject::kind::actor) << line;
  EXPECT_EQ(seen.subject.id, actor.id()) << line;
  EXPECT_EQ(seen.subject.name, "stuck-actor") << line;
  EXPECT_NE(line.find("actor " + std::to_string(actor.id()) + " \"stuck-actor\""),
            std::string::npos) << line;
  EXPECT_EQ(line.find("not a task"), std::string::npos) << line;
  // The snapshot's actors section names the same actor by the same id.
  bool listed = false;
  for (const spindle::actor_info& a : spindle::actors_of(rt).snapshot()) {
    listed = listed || (a.id == seen.subject.id && a.name == "stuck-actor");
  }
  EXPECT_TRUE(listed);
}

}  // namespace
