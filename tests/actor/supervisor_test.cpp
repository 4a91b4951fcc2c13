// Supervisors with real actors: start order, restarts as the plan predicts, escalation,
// nesting, placement, configuration errors. The decision logic itself is checked exhaustively
// in supervision_plan_test.cpp; here every decision must be carried out in the predicted order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "spindle/actor/supervisor.hpp"
#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::actor_context;
using spindle::actor_handle;
using spindle::exit_kind;
using spindle::restart_limit;
using spindle::restart_pattern;
using spindle::restart_type;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::spawn_options;
using spindle::supervised_child;
using spindle::supervisor_spec;

// Events in the order they happened: "start:<name>" from factories, "stop:<name>" when a child
// halts because its supervisor stopped it.
class event_log {
 public:
  void add(std::string event) {
    {
      std::lock_guard guard(mutex_);
      events_.push_back(std::move(event));
    }
    changed_.notify_all();
  }
  // Waits until at least `count` events were logged; returns them all.
  std::vector<std::string> wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return events_.size() >= count; });
    return events_;
  }
  std::size_t size() {
    std::lock_guard guard(mutex_);
    return events_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> events_;
};

// A child: crashes on a negative message, logs supervisor-initiated stops.
struct worker {
  using message_type = int;
  event_log* log;
  std::string name;
  void receive(int value) {
    if (value < 0) throw std::runtime_error("worker " + name + " crashed on purpose");
  }
  void on_stop(const spindle::exit_reason& reason) {
    if (reason.kind == exit_kind::shutdown) log->add("stop:" + name);
  }
};

supervised_child child(event_log& log, std::string name, std::vector<std::string> deps = {},
                       restart_type restart = restart_type::always, runtime* rt = nullptr) {
  supervised_child c;
  c.name = name;
  c.restart = restart;
  c.depends_on = std::move(deps);
  c.start = [&log, name, rt](const spawn_options& options) {
    log.add("start:" + name);
    if (rt != nullptr) return actor_handle(spawn_actor<worker>(*rt, options, &log, name));
    return actor_handle(spindle::spawn_actor_here<worker>(options, &log, name));
  };
  return c;
}

actor_handle child_handle(runtime& rt, const spindle::supervisor_ref& sup, const std::string& name) {
  return rt.block_on(sup.ask<actor_handle>([&](spindle::reply_to<actor_handle> r) {
    return spindle::supervisor_query{name, std::move(r)};
  }));
}

void crash(runtime& rt, const spindle::supervisor_ref& sup, const std::string& name) {
  actor_handle h = child_handle(rt, sup, name);
  ASSERT_TRUE(h) << name << " is not running";
  h.as<int>().send(-1);
}

TEST(Supervisor, StartsChildrenInDependencyOrder) {
  event_log log;
  runtime rt({.workers = 2});
  supervisor_spec spec;
  spec.children.push_back(child(log, "web", {"cache", "db"}));
  spec.children.push_back(child(log, "cache", {"db"}));
  spec.children.push_back(child(log, "db"));
  spec.children.push_back(child(log, "metrics"));
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  EXPECT_EQ(log.wait_for(4),
            (std::vector<std::string>{"start:db", "start:cache", "start:web", "start:metrics"}));
}

TEST(Supervisor, CycleIsRejectedBeforeAnythingStarts) {
  event_log log;
  runtime rt({.workers = 1});
  supervisor_spec spec;
  spec.children.push_back(child(log, "a", {"c"}));
  spec.children.push_back(child(log, "b", {"a"}));
  spec.children.push_back(child(log, "c", {"b"}));
  try {
    spindle::spawn_supervisor(rt, std::move(spec));
    FAIL() << "a cycle was accepted";
  } catch (const spindle::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
  EXPECT_EQ(log.size(), 0u);
}

TEST(Supervisor, UnknownDependencyAndBadPlacementAreRejected) {
  event_log log;
  runtime rt({.workers = 1});
  supervisor_spec spec;
  spec.children.push_back(child(log, "a", {"nobody"}));
  EXPECT_THROW(spindle::spawn_supervisor(rt, std::move(spec)), spindle::usage_error);
  supervisor_spec pinned;
  pinned.children.push_back(child(log, "a"));
  pinned.children.back().placement = spindle::child_placement::pinned_to(7);
  EXPECT_THROW(spindle::spawn_supervisor(rt, std::move(pinned)), spindle::usage_error);
}

TEST(Supervisor, HandlesCastOnlyToTheirMessageType) {
  event_log log;
  runtime rt({.workers = 1});
  supervisor_spec spec;
  spec.children.push_back(child(log, "a", {}, restart_type::always, &rt));
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(1);
  actor_handle a = child_handle(rt, sup, "a");
  EXPECT_THROW(a.as<std::string>(), spindle::usage_error);
  EXPECT_EQ(a.as<int>().send(1), spindle::send_result::queued);
}

TEST(Supervisor, PinnedPlacementIsHonoured) {
  event_log log;
  runtime rt({.workers = 2});
  supervisor_spec spec;
  spec.children.push_back(child(log, "a", {}, restart_type::always, &rt));
  spec.children.back().placement = spindle::child_placement::pinned_to(1);
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(1);
  EXPECT_EQ(child_handle(rt, sup, "a").home_executor(), 1u);
}

// NUMA-group and core-kind placement name the executors bound there (synthetic machines: the
// labels are real, the threads are not bound); a restarted child stays in its group.
TEST(Supervisor, NumaGroupPlacementIsHonouredAcrossRestarts) {
  event_log log;
  const auto machine = spindle::core::machine_topology::synthetic("numa:2 l3:1 core:2 pu:1");
  runtime rt({.workers = 4, .affinity = spindle::core::affinity_policy::depth_first,
              .topology = &machine});
  supervisor_spec spec;
  spec.limit = restart_limit::unlimited();
  spec.children.push_back(child(log, "near", {}, restart_type::always, &rt));
  spec.children.back().placement = spindle::child_placement::in_numa_group(0);
  spec.children.push_back(child(log, "far", {}, restart_type::always, &rt));
  spec.children.back().placement = spindle::child_placement::in_numa_group(1);
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(2);
  auto node_of = [&](const std::string& name) {
    return rt.core().executor_at(child_handle(rt, sup, name).home_executor()).placement().numa_node;
  };
  EXPECT_EQ(node_of("near"), 0u);
  EXPECT_EQ(node_of("far"), 1u);
  for (int i = 0; i < 10; ++i) {
    crash(rt, sup, "far");
    log.wait_for(3 + std::size_t(i));
    while (!child_handle(rt, sup, "far")) std::this_thread::yield();
    EXPECT_EQ(node_of("far"), 1u) << "restart " << i;
  }
}

TEST(Supervisor, CoreKindPlacementIsHonoured) {
  event_log log;
  using spindle::core::core_kind;
  const spindle::core::machine_topology hybrid({{0, 0, 0, 0, core_kind::big},
                                                {1, 1, 0, 0, core_kind::big},
                                                {2, 2, 0, 0, core_kind::little},
                                                {3, 3, 0, 0, core_kind::little}});
  runtime rt({.workers = 4, .affinity = spindle::core::affinity_policy::depth_first,
              .topology = &hybrid});
  supervisor_spec spec;
  spec.children.push_back(child(log, "efficient", {}, restart_type::always, &rt));
  spec.children.back().placement = spindle::child_placement::on_core_kind(core_kind::little);
  spec.children.push_back(child(log, "fast", {}, restart_type::always, &rt));
  spec.children.back().placement = spindle::child_placement::on_core_kind(core_kind::big);
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(2);
  auto kind_of = [&](const std::string& name) {
    return *rt.core().executor_at(child_handle(rt, sup, name).home_executor()).placement().kind;
  };
  EXPECT_EQ(kind_of("efficient"), core_kind::little);
  EXPECT_EQ(kind_of("fast"), core_kind::big);
}

TEST(Supervisor, PlacementNoExecutorCanHonourIsRejected) {
  event_log log;
  const auto machine = spindle::core::machine_topology::synthetic("numa:2 l3:1 core:2 pu:1");
  runtime rt({.workers = 4, .affinity = spindle::core::affinity_policy::depth_first,
              .topology = &machine});
  supervisor_spec spec;
  spec.children.push_back(child(log, "a", {}, restart_type::always, &rt));
  spec.children.back().placement = spindle::child_placement::in_numa_group(2);
  EXPECT_THROW(spindle::spawn_supervisor(rt, std::move(spec)), spindle::usage_error);
  // Unbound executors on a two-node machine are on no known node.
  runtime floating({.workers = 2, .topology = &machine});
  supervisor_spec unbound;
  unbound.children.push_back(child(log, "a", {}, restart_type::always, &floating));
  unbound.children.back().placement = spindle::child_placement::in_numa_group(0);
  EXPECT_THROW(spindle::spawn_supervisor(floating, std::move(unbound)), spindle::usage_error);
  EXPECT_EQ(log.size(), 0u);
}

// Random DAGs and crash schedules: the events equal the plan's decisions, in order.
TEST(Supervisor, RestartsFollowThePlanForRandomGraphs) {
  std::mt19937 random(20261122);
  for (int round = 0; round < 40; ++round) {
    event_log log;
    runtime rt({.workers = 2});
    const std::size_t n = 1 + random() % 6;
    supervisor_spec spec;
    spec.pattern = restart_pattern(random() % 4);
    spec.limit = restart_limit::unlimited();
    std::vector<spindle::child_spec> model_children;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<std::string> deps;
      std::vector<std::size_t> dep_indices;
      for (std::size_t j = 0; j < i; ++j) {
        if (random() % 3 == 0) {
          deps.push_back("c" + std::to_string(j));
          dep_indices.push_back(j);
        }
      }
      const auto restart = random() % 4 == 0 ? restart_type::on_crash_only : restart_type::always;
      spec.children.push_back(child(log, "c" + std::to_string(i), deps, restart));
      model_children.push_back({"c" + std::to_string(i), restart, dep_indices});
    }
    auto model = spindle::supervision_plan::create(model_children, spec.pattern, spec.limit,
                                                   rt.core().clock());
    std::vector<std::string> expected;
    for (std::size_t i : model.start_order()) expected.push_back("start:c" + std::to_string(i));
    auto sup = spindle::spawn_supervisor(rt, std::move(spec));
    ASSERT_EQ(log.wait_for(expected.size()), expected) << "round " << round;
    for (int step = 0; step < 4; ++step) {
      std::vector<std::size_t> present;
      for (std::size_t i = 0; i < n; ++i) {
        if (model.is_present(i)) present.push_back(i);
      }
      if (present.empty()) break;
      const std::size_t victim = present[random() % present.size()];
      const auto decision = model.on_child_exit(victim, spindle::child_outcome::crashed);
      for (std::size_t i : decision.stop) expected.push_back("stop:c" + std::to_string(i));
      for (std::size_t i : decision.start) expected.push_back("start:c" + std::to_string(i));
      crash(rt, sup, "c" + std::to_string(victim));
      ASSERT_EQ(log.wait_for(expected.size()), expected)
          << "round " << round << " step " << step << " crashed c" << victim;
    }
  }
}

// Beyond the limit the supervisor stops its children (reverse order) and crashes; whoever
// monitors it sees the escalation.
struct observer {
  using message_type = actor_handle;
  std::promise<void>* monitored;
  std::promise<spindle::down_message>* down;
  void receive(actor_handle& target, actor_context<actor_handle>& ctx) {
    ctx.monitor(target);
    monitored->set_value();
  }
  void on_down(const spindle::down_message& d, actor_context<actor_handle>&) { down->set_value(d); }
};

TEST(Supervisor, EscalatesBeyondTheLimit) {
  event_log log;
  runtime rt({.workers = 2});
  supervisor_spec spec;
  spec.pattern = restart_pattern::one;
  spec.limit = restart_limit::at_most(1);
  spec.children.push_back(child(log, "a"));
  spec.children.push_back(child(log, "b", {"a"}));
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(2);
  std::promise<void> monitored;
  std::promise<spindle::down_message> down;
  auto watcher = spawn_actor<observer>(rt, &monitored, &down);
  watcher.send(sup);
  monitored.get_future().get();
  crash(rt, sup, "b");
  log.wait_for(3);  // start:b again
  crash(rt, sup, "b");
  const spindle::down_message d = down.get_future().get();
  EXPECT_EQ(d.reason.kind, exit_kind::crashed);
  EXPECT_NE(d.reason.describe().find("restart limit"), std::string::npos) << d.reason.describe();
  EXPECT_EQ(log.wait_for(4), (std::vector<std::string>{"start:a", "start:b", "start:b", "stop:a"}));
}

// A supervisor under a supervisor: the inner one escalates, the outer one restarts it (and it
// starts its own children again).
TEST(Supervisor, NestedSupervisorIsRestartedByItsParent) {
  event_log log;
  runtime rt({.workers = 2});
  supervisor_spec outer;
  outer.limit = restart_limit::unlimited();
  supervised_child inner;
  inner.name = "inner";
  inner.start = [&log](const spawn_options& options) {
    log.add("start:inner");
    supervisor_spec spec;
    spec.limit = restart_limit::at_most(0);
    spec.children.push_back(child(log, "leaf"));
    return actor_handle(spindle::spawn_supervisor_here(std::move(spec), options));
  };
  outer.children.push_back(std::move(inner));
  auto sup = spindle::spawn_supervisor(rt, std::move(outer));
  log.wait_for(2);
  auto inner_handle = child_handle(rt, sup, "inner");
  crash(rt, inner_handle.as<spindle::supervisor_message>(), "leaf");  // the inner limit is 0: it escalates at once
  EXPECT_EQ(log.wait_for(4), (std::vector<std::string>{"start:inner", "start:leaf", "start:inner",
                                                       "start:leaf"}));
}


// Issue 14, item 7: a stopping supervisor stops its children in reverse start order, one at a
// time: a child's stop request is sent only once the child stopped before it is down. "web" has
// a backlog of messages ahead of its stop request (its stop takes many turns); if all stops went
// out at once, cache and db (nothing queued) would halt first.
TEST(Supervisor, StopsChildrenOneAtATimeInReverseStartOrder) {
  event_log log;
  runtime rt({.workers = 2});
  supervisor_spec spec;
  spec.children.push_back(child(log, "web", {"cache"}));
  spec.children.push_back(child(log, "cache", {"db"}));
  spec.children.push_back(child(log, "db"));
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(3);
  actor_handle web = child_handle(rt, sup, "web");
  ASSERT_TRUE(web);
  for (int i = 0; i < 20000; ++i) web.as<int>().send(1);
  sup.stop();
  EXPECT_EQ(log.wait_for(6), (std::vector<std::string>{"start:db", "start:cache", "start:web",
                                                       "stop:web", "stop:cache", "stop:db"}));
}

// Issue 14, item 7: runtime shutdown follows the supervision tree: a supervisor's children are
// halted in reverse start order (not in the order the executors happen to list them).
TEST(Supervisor, RuntimeShutdownStopsChildrenInReverseStartOrder) {
  event_log log;
  {
    runtime rt({.workers = 2});
    supervisor_spec spec;
    // Spread over both executors (db on the first one): executor by executor is not the order.
    spec.children.push_back(child(log, "db"));
    spec.children.push_back(child(log, "web", {"cache"}));
    spec.children.push_back(child(log, "cache", {"db"}));
    spec.children[0].placement = spindle::child_placement::pinned_to(0);
    spec.children[1].placement = spindle::child_placement::pinned_to(1);
    spec.children[2].placement = spindle::child_placement::pinned_to(1);
    auto sup = spindle::spawn_supervisor(rt, std::move(spec));
    log.wait_for(3);
    (void)child_handle(rt, sup, "web");  // all three started and known to the supervisor
  }
  EXPECT_EQ(log.wait_for(6), (std::vector<std::string>{"start:db", "start:cache", "start:web",
                                                       "stop:web", "stop:cache", "stop:db"}));
}


// Issue 14, item 8: a top-level supervisor that gives up does not halt silently: the actor
// system's failure hook is called (before it halts), and a plain task awaiting its exit
// (monitor_actor) sees the escalation.
TEST(Supervisor, ATopLevelSupervisorGivingUpIsReported) {
  event_log log;
  runtime rt({.workers = 2});
  std::promise<spindle::actor_system::supervisor_failure> reported;
  spindle::actors_of(rt).set_supervisor_failure_hook(
      [&](const spindle::actor_system::supervisor_failure& f) { reported.set_value(f); });
  supervisor_spec spec;
  spec.limit = restart_limit::at_most(0);
  spec.children.push_back(child(log, "a"));
  spec.children.push_back(child(log, "b", {"a"}));
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(2);
  auto awaited = rt.spawn([](spindle::supervisor_ref s) -> spindle::task<spindle::exit_reason> {
    co_return co_await spindle::monitor_actor(s);
  }(sup));
  crash(rt, sup, "b");
  const spindle::actor_system::supervisor_failure f = reported.get_future().get();
  EXPECT_EQ(f.supervisor, sup.id());
  EXPECT_EQ(f.child, "b");
  EXPECT_NE(f.description.find("restart limit"), std::string::npos) << f.description;
  const spindle::exit_reason why = awaited.join();
  EXPECT_EQ(why.kind, exit_kind::crashed);
  EXPECT_NE(why.describe().find("restart limit"), std::string::npos) << why.describe();
  EXPECT_EQ(log.wait_for(3), (std::vector<std::string>{"start:a", "start:b", "stop:a"}));
}

spindle::task<spindle::exit_reason> exit_of(actor_handle target) {
  co_return co_await spindle::monitor_actor(target);
}

// issue 14, attack: two factories returning the same actor made the supervisor track it twice
// (the second child overwrote the first in its map by actor id), and stop() then waited forever
// for a down notification already consumed. A factory result that is already a running child
// is a failed start of the second child: the supervisor runs the actor once, and stops it once.
TEST(Supervisor, AFactoryReturningAnotherChildsActorIsAFailedStart) {
  event_log log;
  runtime rt({.workers = 2});
  auto shared = std::make_shared<actor_handle>();
  supervisor_spec spec;
  supervised_child first = child(log, "a", {}, restart_type::always, &rt);
  first.start = [&log, &rt, shared](const spawn_options& options) {
    log.add("start:a");
    *shared = actor_handle(spawn_actor<worker>(rt, options, &log, std::string("a")));
    return *shared;
  };
  spec.children.push_back(std::move(first));
  supervised_child second;
  second.name = "b";
  second.restart = restart_type::never;  // its failed start is not retried
  second.depends_on = {"a"};
  second.start = [&log, shared](const spawn_options&) {
    log.add("start:b");
    return *shared;  // the actor child "a" runs already
  };
  spec.children.push_back(std::move(second));
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(2);
  EXPECT_TRUE(child_handle(rt, sup, "a"));
  EXPECT_FALSE(child_handle(rt, sup, "b")) << "the same actor is tracked as two children";
  auto down = rt.spawn(exit_of(sup));
  sup.stop(exit_kind::shutdown);
  spindle::exit_reason why;
  ASSERT_NO_THROW(why = spindle::testing::join_bounded(std::move(down), std::chrono::seconds(5)))
      << "stop() did not complete";
  EXPECT_EQ(why.kind, exit_kind::shutdown);
  EXPECT_EQ(log.wait_for(3), (std::vector<std::string>{"start:a", "start:b", "stop:a"}));
}

// A child that never stops (it keeps a stop request for itself and ignores it) is killed after
// its stop timeout; the children before it in the stop order are stopped first, the ones after
// it only once it is down; then the supervisor halts with the reason it was asked for.
struct stubborn {
  using message_type = int;
  event_log* log;
  void receive(int) {}
  void on_stop_request(const spindle::exit_reason&, actor_context<int>&) { log->add("ignored"); }
  void on_stop(const spindle::exit_reason& reason) {
    log->add(std::string("halted:stubborn:") + spindle::to_string(reason.kind));
  }
};

TEST(Supervisor, AChildThatNeverStopsIsKilledAfterItsStopTimeout) {
  event_log log;
  runtime rt({.workers = 2});
  supervisor_spec spec;
  spec.children.push_back(child(log, "db"));
  supervised_child middle;
  middle.name = "stubborn";
  middle.depends_on = {"db"};
  middle.stop_timeout = std::chrono::milliseconds(20);
  middle.start = [&log](const spawn_options& options) {
    log.add("start:stubborn");
    return actor_handle(spindle::spawn_actor_here<stubborn>(options, &log));
  };
  spec.children.push_back(std::move(middle));
  spec.children.push_back(child(log, "web", {"stubborn"}));
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  log.wait_for(3);
  auto down = spindle::monitor_actor(sup);
  const auto asked = std::chrono::steady_clock::now();
  sup.stop(exit_kind::shutdown);
  EXPECT_EQ(down.blocking_receive().kind, exit_kind::shutdown);
  // Killed by the timer, not before it (a lower bound: never flaky under load).
  EXPECT_GE(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(20));
  EXPECT_EQ(log.wait_for(7),
            (std::vector<std::string>{"start:db", "start:stubborn", "start:web", "stop:web",
                                      "ignored", "halted:stubborn:killed", "stop:db"}));
}

// Nested supervision, stopped from the top: the inner supervisor stops its own children (in
// reverse order) when its parent stops it, before the parent goes on to what it started
// earlier. Runtime shutdown follows the same tree.
supervisor_spec nested_spec(event_log& log) {
  supervisor_spec outer;
  outer.children.push_back(child(log, "db"));
  supervised_child inner;
  inner.name = "inner";
  inner.depends_on = {"db"};
  inner.start = [&log](const spawn_options& options) {
    supervisor_spec spec;
    spec.children.push_back(child(log, "leaf1"));
    spec.children.push_back(child(log, "leaf2", {"leaf1"}));
    return actor_handle(spindle::spawn_supervisor_here(std::move(spec), options));
  };
  outer.children.push_back(std::move(inner));
  outer.children.push_back(child(log, "web", {"inner"}));
  return outer;
}

// The stops, in the order they happened (the inner supervisor starts its children in its own
// first turn, so web may start before the leaves: only the stops are compared).
std::vector<std::string> stops_in(const std::vector<std::string>& events) {
  std::vector<std::string> stops;
  for (const std::string& e : events) {
    if (e.rfind("stop:", 0) == 0) stops.push_back(e);
  }
  return stops;
}

TEST(Supervisor, NestedSupervisorsStopDepthFirstInReverseOrder) {
  const std::vector<std::string> expected{"stop:web", "stop:leaf2", "stop:leaf1", "stop:db"};
  {
    event_log log;
    runtime rt({.workers = 2});
    auto sup = spindle::spawn_supervisor(rt, nested_spec(log));
    log.wait_for(4);
    auto down = spindle::monitor_actor(sup);
    sup.stop();
    EXPECT_EQ(down.blocking_receive().kind, exit_kind::normal);
    EXPECT_EQ(stops_in(log.wait_for(8)), expected) << "stopped";
  }
  event_log log;
  {
    runtime rt({.workers = 2});
    auto sup = spindle::spawn_supervisor(rt, nested_spec(log));
    log.wait_for(4);
    (void)child_handle(rt, sup, "web");  // every child known to its supervisor
    auto inner = child_handle(rt, sup, "inner");
    (void)child_handle(rt, inner.as<spindle::supervisor_message>(), "leaf2");
  }
  EXPECT_EQ(stops_in(log.wait_for(8)), expected) << "runtime shutdown";
}


// A supervisor stopped while its children crash and restart: it still stops every child and
// halts, and every incarnation started ends exactly once (no restart after the stop request, no
// child left running, none told twice).
struct counted_worker {
  using message_type = int;
  std::atomic<int>* ends;
  void receive(int value) {
    if (value < 0) throw std::runtime_error("counted worker crashed on purpose");
  }
  void on_stop(const spindle::exit_reason&) { ends->fetch_add(1); }
};

TEST(Supervisor, StoppedWhileChildrenCrashEveryIncarnationEndsOnce) {
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> starts{0};
    std::atomic<int> ends{0};
    {
      runtime rt({.workers = 2});
      supervisor_spec spec;
      spec.pattern = round % 2 == 0 ? restart_pattern::one : restart_pattern::all;
      spec.limit = restart_limit::unlimited();
      for (int i = 0; i < 5; ++i) {
        supervised_child c;
        c.name = "w" + std::to_string(i);
        if (i > 0) c.depends_on = {"w" + std::to_string(i - 1)};
        c.start = [&](const spawn_options& options) {
          starts.fetch_add(1);
          return actor_handle(spindle::spawn_actor_here<counted_worker>(options, &ends));
        };
        spec.children.push_back(std::move(c));
      }
      auto sup = spindle::spawn_supervisor(rt, std::move(spec));
      auto down = spindle::monitor_actor(sup);
      std::atomic<bool> stop_crashing{false};
      std::thread crasher([&] {
        std::uint32_t n = 0;
        while (!stop_crashing.load()) {
          try {
            actor_handle h = child_handle(rt, sup, "w" + std::to_string(n++ % 5));
            if (h) h.as<int>().send(-1);
          } catch (const std::exception&) {
            return;  // the supervisor has halted: asks are refused
          }
        }
      });
      while (starts.load() < 5 + 10) std::this_thread::yield();  // some restarts happened
      sup.stop();
      EXPECT_EQ(down.blocking_receive().kind, exit_kind::normal) << "round " << round;
      stop_crashing.store(true);
      crasher.join();
      EXPECT_EQ(ends.load(), starts.load()) << "round " << round;
    }
    EXPECT_EQ(ends.load(), starts.load()) << "round " << round << " after shutdown";
  }
}

}  // namespace
