// Spawn-and-link and spawn-and-monitor (actor_context::spawn_link, spawn_monitor): the watch is
// placed before the child can run, so a child that crashes at once, in its on_start, is seen
// by its parent every time: as an exit signal (trapped, or fatal), or a down notification with
// the monitor id spawn_monitor returned.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::actor_context;
using spindle::actor_id;
using spindle::actor_state;
using spindle::exit_kind;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::testing::eventually;

constexpr auto bound = std::chrono::seconds(30);  // a hang, not a timing assertion

struct crashes_in_on_start {
  using message_type = int;
  void on_start(actor_context<int>&) { throw std::runtime_error("on_start failed"); }
  void receive(int) {}
};

struct crashes_on_message {
  using message_type = int;
  void receive(int) { throw std::runtime_error("crashed on purpose"); }
};

struct idles {
  using message_type = int;
  void receive(int) {}
};

// Traps exits; each message n spawn_links n children that crash in on_start; counts the
// crashed exits of its own children, and fulfils `all_seen` when it saw `expected`.
struct trapping_parent {
  using message_type = int;
  int expected;
  std::promise<void>* all_seen;
  std::set<actor_id> children{};
  int seen = 0;
  int strangers = 0;
  void receive(int n, actor_context<int>& ctx) {
    for (int i = 0; i < n; ++i) children.insert(ctx.spawn_link<crashes_in_on_start>().id());
  }
  void on_exit(const spindle::exit_message& x, actor_context<int>&) {
    if (children.count(x.source) == 0 || x.reason.kind != exit_kind::crashed) {
      ++strangers;
      return;
    }
    children.erase(x.source);
    if (++seen == expected && strangers == 0) all_seen->set_value();
  }
};

TEST(ActorSpawnLink, AChildCrashingInOnStartIsAlwaysSeenByItsTrappingParent) {
  runtime rt({.workers = 2});
  constexpr int rounds = 200, per_round = 10;
  std::promise<void> all_seen;
  auto parent = spawn_actor<trapping_parent>(rt, rounds * per_round, &all_seen);
  for (int i = 0; i < rounds; ++i) parent.send(per_round);
  ASSERT_EQ(all_seen.get_future().wait_for(bound), std::future_status::ready)
      << "a child's crash was not seen";
  EXPECT_NE(parent.state(), actor_state::halted);
}

// Does not trap exits: its linked child's crash halts it (exit_kind::linked).
struct plain_parent {
  using message_type = int;
  void receive(int, actor_context<int>& ctx) { ctx.spawn_link<crashes_in_on_start>(); }
};

TEST(ActorSpawnLink, AChildCrashingInOnStartTakesANonTrappingParentDown) {
  runtime rt({.workers = 2});
  for (int round = 0; round < 300; ++round) {
    auto parent = spawn_actor<plain_parent>(rt);
    auto down = spindle::monitor_actor(parent);
    parent.send(1);
    EXPECT_EQ(down.blocking_receive().kind, exit_kind::linked) << "round " << round;
  }
}

// spawn_monitor: the down notification carries the id spawn_monitor returned.
struct monitoring_parent {
  using message_type = int;
  int expected;
  std::promise<void>* all_seen;
  std::set<std::pair<actor_id, std::uint64_t>> pending{};
  int seen = 0;
  int mismatched = 0;
  void receive(int n, actor_context<int>& ctx) {
    for (int i = 0; i < n; ++i) {
      auto [child, monitor_id] = ctx.spawn_monitor<crashes_in_on_start>();
      EXPECT_NE(monitor_id, 0u);
      pending.emplace(child.id(), monitor_id);
    }
  }
  void on_down(const spindle::down_message& d, actor_context<int>&) {
    if (pending.erase({d.source, d.monitor_id}) != 1 || d.reason.kind != exit_kind::crashed) {
      ++mismatched;
      return;
    }
    if (++seen == expected && mismatched == 0) all_seen->set_value();
  }
};

TEST(ActorSpawnLink, SpawnMonitorSeesAnOnStartCrashWithItsMonitorId) {
  runtime rt({.workers = 2});
  constexpr int rounds = 200, per_round = 10;
  std::promise<void> all_seen;
  auto parent = spawn_actor<monitoring_parent>(rt, rounds * per_round, &all_seen);
  for (int i = 0; i < rounds; ++i) parent.send(per_round);
  ASSERT_EQ(all_seen.get_future().wait_for(bound), std::future_status::ready)
      << "a child's crash was not seen with its monitor id";
  // A monitor is one-way: the parent lives on.
  EXPECT_NE(parent.state(), actor_state::halted);
}

// A link goes both ways: the parent's crash halts its (non-trapping) child. The child is
// spawned with options (a diagnostics name) and its own constructor argument.
struct crashing_parent {
  using message_type = int;
  std::promise<spindle::actor_handle>* child;
  void receive(int value, actor_context<int>& ctx) {
    if (value == 0) {
      child->set_value(ctx.spawn_link<idles>(spindle::spawn_options{.name = "linked-child"}));
      return;
    }
    throw std::runtime_error("parent crashed");
  }
};

TEST(ActorSpawnLink, TheParentsCrashHaltsItsLinkedChild) {
  runtime rt({.workers = 2});
  std::promise<spindle::actor_handle> child_promise;
  auto parent = spawn_actor<crashing_parent>(rt, &child_promise);
  parent.send(0);
  auto child_future = child_promise.get_future();
  ASSERT_EQ(child_future.wait_for(bound), std::future_status::ready);
  const spindle::actor_handle child = child_future.get();
  bool listed = false;
  for (const spindle::actor_info& info : spindle::actors_of(rt).snapshot()) {
    if (info.id == child.id()) listed = info.name == "linked-child";
  }
  EXPECT_TRUE(listed);
  auto child_down = spindle::monitor_actor(child);
  parent.send(1);
  EXPECT_EQ(child_down.blocking_receive().kind, exit_kind::linked);
}

// A plain task awaits the exit of a child found by name: spawn_link'ed children registered by
// their parent, looked up with whereis.
struct registering_parent {
  using message_type = int;
  void receive(int, actor_context<int>& ctx) {
    auto child = ctx.spawn_link<crashes_on_message>();
    spindle::register_name(ctx.system(), "worker", child);
  }
  void on_exit(const spindle::exit_message&, actor_context<int>&) {}
};

TEST(ActorSpawnLink, ATaskAwaitsAChildFoundByName) {
  runtime rt({.workers = 2});
  auto parent = spawn_actor<registering_parent>(rt);
  parent.send(1);
  ASSERT_TRUE(eventually([&] { return bool(spindle::whereis(rt, "worker")); }, bound));
  const auto child = spindle::whereis<int>(rt, "worker");
  auto waiting = rt.spawn([](spindle::actor_ref<int> target) -> spindle::task<exit_kind> {
    const spindle::exit_reason why = co_await spindle::monitor_actor(target);
    co_return why.kind;
  }(child));
  child.send(1);
  EXPECT_EQ(spindle::testing::join_bounded(std::move(waiting)), exit_kind::crashed);
  EXPECT_FALSE(spindle::whereis(rt, "worker"));
  EXPECT_NE(parent.state(), actor_state::halted);  // it traps exits
}

}  // namespace
