// Dynamic supervisors (dynamic_supervisor.hpp): children started and terminated at run time,
// restart types, back-off, restart intensity and escalation, stop timeouts, the diagnostics
// report, and races between foreign threads adding, removing and crashing children.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

// Named (not anonymous): the actor tests are one unity build, and supervisor_test.cpp has its own
// `worker` and `stubborn`.
namespace dynamic_supervisor_test {

using namespace std::chrono_literals;
using spindle::actor_context;
using spindle::actor_handle;
using spindle::dynamic_child_id;
using spindle::dynamic_child_spec;
using spindle::dynamic_supervisor;
using spindle::dynamic_supervisor_spec;
using spindle::exit_kind;
using spindle::restart_backoff;
using spindle::restart_limit;
using spindle::restart_type;
using spindle::runtime;
using spindle::spawn_options;
using spindle::start_child_error;
using spindle::terminate_result;
using spindle::testing::eventually;
using spindle::testing::receive_within;

// A child: crashes on a negative message, stops normally on 0.
struct worker {
  using message_type = int;
  void receive(int value, actor_context<int>& ctx) {
    if (value < 0) throw std::runtime_error("worker crashed on purpose");
    if (value == 0) ctx.stop(exit_kind::normal);
  }
};

// A child that crashes as soon as it starts (a crash loop).
struct crash_at_start {
  using message_type = int;
  void on_start(actor_context<int>&) { throw std::runtime_error("crash at start"); }
  void receive(int) {}
};

// A child that ignores its stop requests (it must be killed).
struct stubborn {
  using message_type = int;
  std::atomic<int>* stop_requests;
  void receive(int) {}
  void on_stop_request(const spindle::exit_reason&, actor_context<int>&) {
    stop_requests->fetch_add(1);
  }
};

// Factory calls and the actors they returned (any thread).
struct factory_log {
  std::mutex mutex;
  std::vector<std::chrono::steady_clock::time_point> starts;
  std::vector<actor_handle> actors;
  std::size_t count() {
    std::lock_guard guard(mutex);
    return starts.size();
  }
  void add(const actor_handle& a) {
    std::lock_guard guard(mutex);
    starts.push_back(std::chrono::steady_clock::now());
    actors.push_back(a);
  }
};

template <class B, class... A>
dynamic_child_spec child_of(runtime& rt, factory_log& log, restart_type restart, A... args) {
  dynamic_child_spec spec;
  spec.name = "w";
  spec.restart = restart;
  spec.start = [&rt, &log, args...](const spawn_options& options) {
    actor_handle a(spindle::spawn_actor<B>(rt, options, args...));
    log.add(a);
    return a;
  };
  return spec;
}

// A supervisor that never gives up, with this back-off.
dynamic_supervisor without_limit(runtime& rt, restart_backoff backoff) {
  dynamic_supervisor_spec spec;
  spec.limit = restart_limit::unlimited();
  spec.backoff = backoff;
  return spindle::spawn_dynamic_supervisor(rt, spec);
}

spindle::started_child start(const dynamic_supervisor& sup, dynamic_child_spec spec) {
  return receive_within(sup.start_child(std::move(spec)));
}

spindle::dynamic_supervisor_stats stats_of(const dynamic_supervisor& sup) {
  return receive_within(sup.stats());
}

// --- back-off --------------------------------------------------------------------------------

TEST(DynamicSupervisor, BackOffDelaysGrowByTheFactorAndCap) {
  const restart_backoff b{10ms, 2.0, 5s, 10s};
  EXPECT_EQ(b.delay(1), 10ms);
  EXPECT_EQ(b.delay(2), 20ms);
  EXPECT_EQ(b.delay(3), 40ms);
  EXPECT_EQ(b.delay(9), 2560ms);
  EXPECT_EQ(b.delay(10), 5s);  // 5120 ms capped
  EXPECT_EQ(b.delay(4'000'000'000u), 5s);  // no overflow however long the loop
  EXPECT_EQ(restart_backoff::none().delay(7), 0ns);
  const restart_backoff flat{3ms, 1.0, 1s, 1s};
  EXPECT_EQ(flat.delay(50), 3ms);
}

TEST(DynamicSupervisor, BadBackOffIsRejected) {
  runtime rt({.workers = 1});
  dynamic_supervisor_spec spec;
  spec.backoff.factor = 0.5;
  EXPECT_THROW(spindle::spawn_dynamic_supervisor(rt, spec), spindle::usage_error);
  spec.backoff.factor = 2;
  spec.backoff.initial = -1ms;
  EXPECT_THROW(spindle::spawn_dynamic_supervisor(rt, spec), spindle::usage_error);
}

// A crash-looping child is restarted after 20, 40, 80, 80, 80 ms: measured between factory
// calls, every gap is at least its delay (a timer never fires early; lower bounds only).
TEST(DynamicSupervisor, CrashLoopingChildIsRestartedAfterGrowingCappedDelays) {
  runtime rt({.workers = 2});
  auto sup = without_limit(rt, {20ms, 2.0, 80ms, 10s});
  factory_log log;
  auto started = start(sup, child_of<crash_at_start>(rt, log, restart_type::always));
  ASSERT_EQ(started.error, start_child_error::none);
  ASSERT_TRUE(eventually([&] { return log.count() >= 6; }, 20s));
  sup.ref().stop();
  std::lock_guard guard(log.mutex);
  const std::chrono::milliseconds expected[] = {20ms, 40ms, 80ms, 80ms, 80ms};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_GE(log.starts[i + 1] - log.starts[i], expected[i]) << "restart " << i + 1;
  }
  // The back-off is the only wait: the whole loop ends well before a second (generous).
  EXPECT_LT(log.starts[5] - log.starts[0], 20s);
}

// A child that stayed up longer than reset_after starts its back-off count again.
TEST(DynamicSupervisor, BackOffResetsAfterTheChildStayedUp) {
  runtime rt({.workers = 2});
  // Without the reset, the 2nd consecutive restart would wait 100 s: beyond every bound below.
  auto sup = without_limit(rt, {1ms, 100'000.0, 600s, 30ms});
  factory_log log;
  auto started = start(sup, child_of<worker>(rt, log, restart_type::always));
  for (int round = 1; round <= 3; ++round) {
    const auto up_since = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - up_since < 40ms) std::this_thread::yield();
    actor_handle current;
    {
      std::lock_guard guard(log.mutex);
      current = log.actors.back();
    }
    current.as<int>().send(-1);
    ASSERT_TRUE(eventually([&] { return log.count() == std::size_t(round) + 1; }, 20s));
  }
  // Each restart waited 1 ms, not 100 s and 600 s: three restarts within the bounds.
  EXPECT_EQ(stats_of(sup).restarts, 3u);
}

// --- restart types ---------------------------------------------------------------------------

TEST(DynamicSupervisor, TransientChildEndingNormallyIsNotRestarted) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {.backoff = restart_backoff::none()});
  factory_log log;
  auto child = start(sup, child_of<worker>(rt, log, restart_type::on_crash_only));
  ASSERT_EQ(child.error, start_child_error::none);
  auto down = spindle::monitor_actor(child.actor);
  child.actor.as<int>().send(0);  // a normal end
  EXPECT_EQ(receive_within(std::move(down)).kind, exit_kind::normal);
  ASSERT_TRUE(eventually([&] { return stats_of(sup).ended == 1; }));
  const auto s = stats_of(sup);
  EXPECT_EQ(s.restarts, 0u);
  EXPECT_EQ(s.listed, 0u);
  EXPECT_EQ(log.count(), 1u);
  EXPECT_TRUE(receive_within(sup.which_children()).empty());
}

TEST(DynamicSupervisor, TransientChildCrashingIsRestarted) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {.backoff = restart_backoff::none()});
  factory_log log;
  auto child = start(sup, child_of<worker>(rt, log, restart_type::on_crash_only));
  child.actor.as<int>().send(-1);
  ASSERT_TRUE(eventually([&] { return log.count() == 2; }));
  const auto children = receive_within(sup.which_children());
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(children[0].id, child.id);  // the same child, a new incarnation
  EXPECT_EQ(children[0].restarts, 1u);
  EXPECT_NE(children[0].actor, child.actor);
}

TEST(DynamicSupervisor, TemporaryChildIsNeverRestarted) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {.backoff = restart_backoff::none()});
  factory_log log;
  auto child = start(sup, child_of<worker>(rt, log, restart_type::never));
  child.actor.as<int>().send(-1);  // a crash
  ASSERT_TRUE(eventually([&] { return stats_of(sup).ended == 1; }));
  EXPECT_EQ(stats_of(sup).restarts, 0u);
  EXPECT_EQ(log.count(), 1u);
}

// --- intensity and escalation ----------------------------------------------------------------

TEST(DynamicSupervisor, IntensityExceededStopsTheOthersAndEscalates) {
  runtime rt({.workers = 2});
  std::atomic<int> reports{0};
  std::string reported_child;
  spindle::actors_of(rt).set_supervisor_failure_hook(
      [&](const spindle::actor_system::supervisor_failure& f) {
        reported_child = f.child;
        reports.fetch_add(1);  // after the write: the test reads the name once it sees this
      });
  dynamic_supervisor_spec spec;
  spec.limit = restart_limit::at_most(2, 10s);
  spec.backoff = restart_backoff::none();
  auto sup = spindle::spawn_dynamic_supervisor(rt, spec);
  auto sup_down = spindle::monitor_actor(sup.ref());
  factory_log calm_log;
  auto calm = start(sup, child_of<worker>(rt, calm_log, restart_type::always));
  auto calm_down = spindle::monitor_actor(calm.actor);
  factory_log loop_log;
  dynamic_child_spec looping = child_of<crash_at_start>(rt, loop_log, restart_type::always);
  looping.name = "looping";
  ASSERT_EQ(start(sup, looping).error, start_child_error::none);
  const spindle::exit_reason why = receive_within(std::move(sup_down));
  EXPECT_EQ(why.kind, exit_kind::crashed);
  EXPECT_NE(why.describe().find("restart limit"), std::string::npos) << why.describe();
  EXPECT_EQ(loop_log.count(), 3u);  // the first start and two restarts; the third escalates
  // The other child was stopped by its supervisor before it escalated.
  EXPECT_EQ(receive_within(std::move(calm_down)).kind, exit_kind::shutdown);
  ASSERT_EQ(reports.load(), 1);
  EXPECT_EQ(reported_child, "looping");
  // A start after the end is refused, never lost.
  EXPECT_EQ(start(sup, looping).error, start_child_error::supervisor_gone);
}

// --- terminate, max_children, stop -----------------------------------------------------------

TEST(DynamicSupervisor, TerminateChildThatIgnoresItsStopKillsItAfterTheTimeout) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {});
  std::atomic<int> stop_requests{0};
  factory_log log;
  dynamic_child_spec spec = child_of<stubborn>(rt, log, restart_type::always, &stop_requests);
  spec.stop_timeout = 30ms;
  auto child = start(sup, spec);
  auto down = spindle::monitor_actor(child.actor);
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_EQ(receive_within(sup.terminate_child(child.id)), terminate_result::killed);
  EXPECT_GE(std::chrono::steady_clock::now() - asked, 30ms);  // not before its timeout
  EXPECT_EQ(receive_within(std::move(down)).kind, exit_kind::killed);
  EXPECT_EQ(stop_requests.load(), 1);
  EXPECT_EQ(log.count(), 1u);  // terminated: never restarted
  EXPECT_EQ(receive_within(sup.terminate_child(child.id)), terminate_result::not_found);
  const auto s = stats_of(sup);
  EXPECT_EQ(s.terminated, 1u);
  EXPECT_EQ(s.listed, 0u);
}

TEST(DynamicSupervisor, TerminateChildThatStopsIsStoppedAndNotRestarted) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {});
  factory_log log;
  auto child = start(sup, child_of<worker>(rt, log, restart_type::always));
  auto down = spindle::monitor_actor(child.actor);
  EXPECT_EQ(receive_within(sup.terminate_child(child.id)), terminate_result::stopped);
  EXPECT_EQ(receive_within(std::move(down)).kind, exit_kind::shutdown);
  EXPECT_EQ(receive_within(sup.terminate_child(777)), terminate_result::not_found);
  EXPECT_EQ(log.count(), 1u);
}

TEST(DynamicSupervisor, TerminatingAChildInBackOffCancelsItsRestart) {
  runtime rt({.workers = 2});
  dynamic_supervisor_spec spec;
  spec.backoff = {60s, 2.0, 60s, 60s};  // never elapses within the test
  auto sup = spindle::spawn_dynamic_supervisor(rt, spec);
  factory_log log;
  auto child = start(sup, child_of<worker>(rt, log, restart_type::always));
  child.actor.as<int>().send(-1);
  ASSERT_TRUE(eventually([&] {
    const auto c = receive_within(sup.which_children());
    return c.size() == 1 && c[0].state == spindle::dynamic_child_info::phase::backing_off;
  }));
  EXPECT_FALSE(receive_within(sup.which_children())[0].actor);
  EXPECT_EQ(receive_within(sup.terminate_child(child.id)), terminate_result::stopped);
  EXPECT_EQ(log.count(), 1u);
  EXPECT_EQ(stats_of(sup).listed, 0u);
}

TEST(DynamicSupervisor, StartsBeyondMaxChildrenAreRefused) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {.max_children = 2});
  factory_log log;
  auto a = start(sup, child_of<worker>(rt, log, restart_type::always));
  auto b = start(sup, child_of<worker>(rt, log, restart_type::always));
  EXPECT_EQ(start(sup, child_of<worker>(rt, log, restart_type::always)).error,
            start_child_error::at_max_children);
  EXPECT_EQ(receive_within(sup.terminate_child(a.id)), terminate_result::stopped);
  EXPECT_EQ(start(sup, child_of<worker>(rt, log, restart_type::always)).error,
            start_child_error::none);
  EXPECT_EQ(log.count(), 3u);
}

TEST(DynamicSupervisor, AFailingFactoryIsAFailedStartNotARestart) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {});
  dynamic_child_spec spec;
  spec.start = [](const spawn_options&) -> actor_handle { throw std::runtime_error("no"); };
  EXPECT_EQ(start(sup, spec).error, start_child_error::start_failed);
  spec.start = [](const spawn_options&) { return actor_handle(); };
  EXPECT_EQ(start(sup, spec).error, start_child_error::start_failed);
  EXPECT_EQ(stats_of(sup).listed, 0u);
  EXPECT_THROW(sup.start_child(dynamic_child_spec{}), spindle::usage_error);  // no factory
}

TEST(DynamicSupervisor, TemplateFactoryTakesArgumentsPerStart) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {});
  std::mutex mutex;
  std::vector<int> seen;
  spindle::dynamic_child_template<int> tmpl;
  tmpl.name = "numbered";
  tmpl.start = [&](const spawn_options& options, const int& n) {
    {
      std::lock_guard guard(mutex);
      seen.push_back(n);
    }
    return actor_handle(spindle::spawn_actor<worker>(rt, options));
  };
  EXPECT_EQ(receive_within(sup.start_child(tmpl, 7)).error, start_child_error::none);
  EXPECT_EQ(receive_within(sup.start_child(tmpl, 9)).error, start_child_error::none);
  std::lock_guard guard(mutex);
  EXPECT_EQ(seen, (std::vector<int>{7, 9}));
}

// Starts `count` children that ignore their stop requests (counted in `stop_requests`); returns
// their spec.
dynamic_child_spec start_stubborn(runtime& rt, const dynamic_supervisor& sup, factory_log& log,
                                  std::atomic<int>& stop_requests,
                                  std::chrono::milliseconds stop_timeout, int count) {
  dynamic_child_spec spec = child_of<stubborn>(rt, log, restart_type::always, &stop_requests);
  spec.stop_timeout = stop_timeout;
  for (int i = 0; i < count; ++i) EXPECT_EQ(start(sup, spec).error, start_child_error::none);
  return spec;
}

// A stop request reaches every child at once: three children that ignore it all see it while
// none is down yet (one at a time, the second would wait for the first's minute-long timeout).
TEST(DynamicSupervisor, StopSendsEveryChildItsStopRequestAtOnce) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {});
  std::atomic<int> stop_requests{0};
  factory_log log;
  const dynamic_child_spec spec = start_stubborn(rt, sup, log, stop_requests, 60s, 3);
  auto sup_down = spindle::monitor_actor(sup.ref());
  sup.ref().stop(exit_kind::shutdown);
  ASSERT_TRUE(eventually([&] { return stop_requests.load() == 3; }, 20s));
  EXPECT_FALSE(sup_down.is_ready());  // it waits for them
  EXPECT_EQ(start(sup, spec).error, start_child_error::supervisor_gone);  // while stopping
  {
    std::lock_guard guard(log.mutex);
    for (const actor_handle& a : log.actors) a.kill();
  }
  EXPECT_EQ(receive_within(std::move(sup_down)).kind, exit_kind::shutdown);
}

TEST(DynamicSupervisor, StopKillsChildrenPastTheirTimeoutAndHalts) {
  runtime rt({.workers = 2});
  auto sup = spindle::spawn_dynamic_supervisor(rt, {});
  std::atomic<int> stop_requests{0};
  factory_log log;
  start_stubborn(rt, sup, log, stop_requests, 20ms, 4);
  ASSERT_EQ(start(sup, child_of<worker>(rt, log, restart_type::always)).error,
            start_child_error::none);
  auto sup_down = spindle::monitor_actor(sup.ref());
  sup.ref().stop(exit_kind::shutdown);
  EXPECT_EQ(receive_within(std::move(sup_down)).kind, exit_kind::shutdown);
  std::lock_guard guard(log.mutex);
  for (const actor_handle& a : log.actors) EXPECT_EQ(a.state(), spindle::actor_state::halted);
}

// Runtime shutdown with a child in back-off and another being stopped (its kill an hour away):
// the supervisor's timer entry is disarmed as it halts, and every actor is freed.
TEST(DynamicSupervisor, RuntimeShutdownWithPendingDeadlinesFreesEverything) {
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  std::optional<spindle::oneshot_receiver<terminate_result>> terminated;  // outlives the runtime
  {
    runtime rt({.workers = 2});
    dynamic_supervisor_spec spec;
    spec.backoff = {3600s, 2.0, 3600s, 3600s};
    auto sup = spindle::spawn_dynamic_supervisor(rt, spec);
    factory_log log;
    auto crashing = start(sup, child_of<worker>(rt, log, restart_type::always));
    crashing.actor.as<int>().send(-1);
    std::atomic<int> stop_requests{0};
    dynamic_child_spec spec_stubborn =
        child_of<stubborn>(rt, log, restart_type::always, &stop_requests);
    spec_stubborn.stop_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(3600s);
    auto held = start(sup, spec_stubborn);
    terminated = sup.terminate_child(held.id);
    ASSERT_TRUE(eventually([&] { return stop_requests.load() == 1; }));
    ASSERT_TRUE(eventually([&] {
      const auto c = receive_within(sup.which_children());
      return c.size() == 2 && c[0].state == spindle::dynamic_child_info::phase::backing_off;
    }));
    log.actors.clear();
  }
  // The supervisor halted with the terminate pending: its question still got its one answer.
  EXPECT_EQ(receive_within(std::move(*terminated)), terminate_result::supervisor_gone);
  EXPECT_TRUE(eventually([&] { return spindle::actor_system::live_cells() == cells_before; }, 20s))
      << spindle::actor_system::live_cells() - cells_before << " cells left";
}

// --- diagnostics -----------------------------------------------------------------------------

TEST(DynamicSupervisor, SnapshotsReportRestartsPerChildAndTheIntensity) {
  runtime rt({.workers = 2});
  dynamic_supervisor_spec spec;
  spec.limit = restart_limit::at_most(10, 60s);
  spec.backoff = restart_backoff::none();
  spawn_options options;
  options.name = "pool";
  auto sup = spindle::spawn_dynamic_supervisor(rt, spec, options);
  factory_log log;
  auto a = start(sup, child_of<worker>(rt, log, restart_type::always));
  auto b = start(sup, child_of<worker>(rt, log, restart_type::always));
  a.actor.as<int>().send(-1);
  ASSERT_TRUE(eventually([&] { return log.count() == 3; }));
  std::vector<spindle::supervisor_info> tree;
  ASSERT_TRUE(eventually([&] {
    tree = spindle::actors_of(rt).supervision_tree();
    return tree.size() == 1 && tree[0].children.size() == 2 && tree[0].children[0].running &&
           tree[0].children[0].restarts == 1;
  }));
  EXPECT_TRUE(tree[0].dynamic);
  EXPECT_EQ(tree[0].name, "pool");
  EXPECT_EQ(tree[0].restarts, 1u);
  EXPECT_EQ(tree[0].restarts_in_window, 1u);
  EXPECT_EQ(tree[0].max_restarts, 10u);
  EXPECT_EQ(tree[0].window, std::chrono::nanoseconds(60s));
  EXPECT_EQ(tree[0].children[1].restarts, 0u);
  const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
  const nlohmann::json& root = doc.at("sections").at("supervision_tree").at(0);
  EXPECT_EQ(root.at("kind"), "dynamic");
  EXPECT_EQ(root.at("restarts_in_window"), 1);
  EXPECT_EQ(root.at("max_restarts"), 10);
  EXPECT_EQ(root.at("children").size(), 2u);
  EXPECT_EQ(root.at("children")[0].at("restarts"), 1);
  EXPECT_GE(spindle::actors_of(rt).supervisor_restarts(), 1u);
}

// The static supervisor reports its intensity the same way.
TEST(DynamicSupervisor, StaticSupervisorReportsItsIntensityToo) {
  runtime rt({.workers = 2});
  spindle::supervisor_spec spec;
  spec.limit = restart_limit::at_most(3, 5s);
  spindle::supervised_child c;
  c.name = "db";
  c.start = [&rt](const spawn_options& o) {
    return actor_handle(spindle::spawn_actor<worker>(rt, o));
  };
  spec.children.push_back(c);
  auto sup = spindle::spawn_supervisor(rt, std::move(spec));
  std::vector<spindle::supervisor_info> tree;
  ASSERT_TRUE(eventually([&] {
    tree = spindle::actors_of(rt).supervision_tree();
    return tree.size() == 1 && tree[0].children[0].running;
  }));
  EXPECT_FALSE(tree[0].dynamic);
  EXPECT_EQ(tree[0].restarts_in_window, 0u);
  const spindle::actor_id first = tree[0].children[0].actor;
  actor_handle db = rt.block_on(sup.ask<actor_handle>([](spindle::reply_to<actor_handle> r) {
    return spindle::supervisor_query{"db", std::move(r)};
  }));
  ASSERT_EQ(db.id(), first);
  db.as<int>().send(-1);
  ASSERT_TRUE(eventually([&] {
    tree = spindle::actors_of(rt).supervision_tree();
    return tree[0].restarts == 1;
  }));
  EXPECT_EQ(tree[0].restarts_in_window, 1u);
  EXPECT_EQ(tree[0].max_restarts, 3u);
  const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
  const nlohmann::json& root = doc.at("sections").at("supervision_tree").at(0);
  EXPECT_EQ(root.at("kind"), "static");
  EXPECT_EQ(root.at("restarts_in_window"), 1);
  EXPECT_EQ(root.at("window_ms"), 5000.0);
}

// --- races -----------------------------------------------------------------------------------

// Four foreign threads start children of every restart type, crash them, end them normally and
// terminate them, all at once. Afterwards every child started is accounted for exactly once:
// listed (running), terminated (a terminate_child that answered stopped or killed), or ended (not
// restarted); the supervisor's own counts agree with what the callers saw.
TEST(DynamicSupervisorRace, ChildrenAddedAndRemovedFromFourThreadsWhileTheyCrash) {
  runtime rt({.workers = 2});
  auto sup = without_limit(rt, {1ms, 2.0, 4ms, 1s});
  factory_log log;
  constexpr int threads = 4;
  constexpr int operations = 150;
  std::mutex mutex;
  std::set<dynamic_child_id> started_ids;
  std::map<dynamic_child_id, int> terminations;  // stopped or killed answers per child
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t) {
    callers.emplace_back([&, t] {
      std::mt19937 random(1234u + unsigned(t));
      std::vector<spindle::started_child> mine;
      for (int i = 0; i < operations; ++i) {
        const unsigned what = random() % 10;
        if (what < 4 || mine.empty()) {
          const restart_type type = restart_type(random() % 3);
          auto c = start(sup, child_of<worker>(rt, log, type));
          ASSERT_EQ(c.error, start_child_error::none);
          mine.push_back(c);
          std::lock_guard guard(mutex);
          EXPECT_TRUE(started_ids.insert(c.id).second) << "id " << c.id << " given twice";
          continue;
        }
        const spindle::started_child& c = mine[random() % mine.size()];
        if (what < 7) {
          c.actor.as<int>().send(-1);  // crashes the first incarnation (if it still runs)
        } else if (what < 8) {
          c.actor.as<int>().send(0);  // a normal end
        } else {
          const terminate_result r = receive_within(sup.terminate_child(c.id));
          ASSERT_NE(r, terminate_result::supervisor_gone);
          if (r == terminate_result::stopped || r == terminate_result::killed) {
            std::lock_guard guard(mutex);
            ++terminations[c.id];
          }
        }
      }
    });
  }
  for (std::thread& c : callers) c.join();
  // Quiet: no crash in flight, nobody backing off, the counts stable around the listing.
  std::vector<spindle::dynamic_child_info> listed;
  spindle::dynamic_supervisor_stats final_stats;
  ASSERT_TRUE(eventually([&] {
    const auto before = stats_of(sup);
    listed = receive_within(sup.which_children());
    final_stats = stats_of(sup);
    const bool settled = std::none_of(listed.begin(), listed.end(), [](const auto& c) {
      return c.state != spindle::dynamic_child_info::phase::running;
    });
    return settled && before.ended == final_stats.ended &&
           before.terminated == final_stats.terminated && before.restarts == final_stats.restarts;
  }));
  std::size_t terminated = 0;
  for (const auto& [id, count] : terminations) {
    EXPECT_EQ(count, 1) << "child " << id << " terminated " << count << " times";
    ++terminated;
  }
  for (const auto& c : listed) {
    EXPECT_TRUE(started_ids.contains(c.id)) << "listed child " << c.id << " was never started";
    EXPECT_FALSE(terminations.contains(c.id)) << "child " << c.id << " terminated yet listed";
  }
  const std::size_t ended = started_ids.size() - listed.size() - terminated;
  EXPECT_EQ(final_stats.started, started_ids.size());
  EXPECT_EQ(final_stats.listed, listed.size());
  EXPECT_EQ(final_stats.terminated, terminated);
  EXPECT_EQ(final_stats.ended, ended);
  // Every incarnation ever started ends once the supervisor stops.
  auto down = spindle::monitor_actor(sup.ref());
  sup.ref().stop();
  EXPECT_EQ(receive_within(std::move(down)).kind, exit_kind::normal);
  std::lock_guard guard(log.mutex);
  EXPECT_EQ(log.actors.size(), started_ids.size() + final_stats.restarts);
  for (const actor_handle& a : log.actors) {
    EXPECT_TRUE(eventually([&] { return a.state() == spindle::actor_state::halted; }, 20s));
  }
}

// Start calls from four threads race the supervisor's stop: each gets exactly one answer, a
// child or supervisor_gone; every child started is stopped; the supervisor halts.
TEST(DynamicSupervisorRace, SupervisorStoppedWhileStartCallsRaceIt) {
  for (int round = 0; round < 5; ++round) {
    runtime rt({.workers = 2});
    auto sup = spindle::spawn_dynamic_supervisor(rt, {});
    factory_log log;
    std::atomic<int> answered{0}, started{0}, gone{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t) {
      callers.emplace_back([&] {
        // Starts until refused: each thread sees the stop, whenever it comes.
        for (;;) {
          const auto c = start(sup, child_of<worker>(rt, log, restart_type::always));
          answered.fetch_add(1);
          if (c.error != start_child_error::none) {
            EXPECT_EQ(c.error, start_child_error::supervisor_gone);
            gone.fetch_add(1);
            break;
          }
          started.fetch_add(1);
        }
        // Refused once, refused for good.
        EXPECT_EQ(start(sup, child_of<worker>(rt, log, restart_type::always)).error,
                  start_child_error::supervisor_gone);
      });
    }
    ASSERT_TRUE(eventually([&] { return answered.load() >= 40 * (round + 1); }));
    auto down = spindle::monitor_actor(sup.ref());
    sup.ref().stop(exit_kind::shutdown);
    for (std::thread& c : callers) c.join();
    EXPECT_EQ(receive_within(std::move(down)).kind, exit_kind::shutdown);
    EXPECT_EQ(gone.load(), 4);
    EXPECT_EQ(answered.load(), started.load() + 4);
    std::lock_guard guard(log.mutex);
    EXPECT_EQ(log.actors.size(), std::size_t(started.load()));
    for (const actor_handle& a : log.actors) {
      EXPECT_TRUE(eventually([&] { return a.state() == spindle::actor_state::halted; }, 20s));
    }
  }
}

}  // namespace dynamic_supervisor_test
