// Links and monitors at the edges (issue 14, item 8): a link is a set (linking twice is one
// link, one notification), a watch placed after the target halted reports the target's real
// exit reason (not no_actor), and a plain task can await any actor's exit.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <optional>
#include <variant>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"

namespace {

using spindle::actor_context;
using spindle::actor_handle;
using spindle::actor_state;
using spindle::exit_kind;
using spindle::runtime;
using spindle::spawn_actor;
using spindle::spawn_options;

// Crashes on a negative message.
struct crashes_on_negative {
  using message_type = int;
  void receive(int value) {
    if (value < 0) throw std::runtime_error("crashed on purpose");
  }
};

// Crashes in on_start: it is gone before anyone can watch it.
struct crashes_at_start {
  using message_type = int;
  void on_start(actor_context<int>&) { throw std::runtime_error("on_start failed"); }
  void receive(int) {}
};

void wait_halted(const actor_handle& target) {
  while (target.state() != actor_state::halted) std::this_thread::yield();
}

// Traps exits: links to the handles it is sent (as many times as it is sent them), then
// monitors the last one; counts the exit notifications that came before the down notification
// (a monitor placed after the links is told after them: the target tells its watchers in the
// order they registered, and one watcher's notifications are handled in the order queued).
struct double_linker {
  using message_type = std::variant<actor_handle, int>;
  std::promise<void>* ready;
  std::promise<int>* exits_before_down;
  std::vector<spindle::exit_message>* exits;
  int links = 0;
  void receive(message_type& m, actor_context<message_type>& ctx) {
    auto& target = std::get<actor_handle>(m);
    ctx.link(target);
    if (++links == 2) {
      ctx.monitor(target);
      ready->set_value();
    }
  }
  void on_exit(const spindle::exit_message& x, actor_context<message_type>&) { exits->push_back(x); }
  void on_down(const spindle::down_message&, actor_context<message_type>&) {
    exits_before_down->set_value(int(exits->size()));
  }
};

TEST(ActorWatch, LinkingTwiceIsOneLinkAndOneExitNotification) {
  runtime rt({.workers = 2});
  std::promise<void> ready;
  std::promise<int> exits_before_down;
  std::vector<spindle::exit_message> exits;
  auto target = spawn_actor<crashes_on_negative>(rt);
  auto linker = spawn_actor<double_linker>(rt, &ready, &exits_before_down, &exits);
  linker.send(actor_handle(target));
  linker.send(actor_handle(target));
  ready.get_future().get();
  target.send(-1);
  EXPECT_EQ(exits_before_down.get_future().get(), 1) << "one link, one exit notification";
  EXPECT_EQ(exits.at(0).reason.kind, exit_kind::crashed);
}

// Monitors (or links to, trapping exits) the handle it is sent and reports the notification.
struct late_watcher {
  using message_type = actor_handle;
  bool use_link;
  std::promise<spindle::exit_reason>* told;
  void receive(actor_handle& target, actor_context<actor_handle>& ctx) {
    if (use_link) {
      ctx.link(target);
    } else {
      ctx.monitor(target);
    }
  }
  void on_down(const spindle::down_message& d, actor_context<actor_handle>&) { told->set_value(d.reason); }
  void on_exit(const spindle::exit_message& x, actor_context<actor_handle>&) { told->set_value(x.reason); }
};

spindle::exit_reason watch_after_crash_at_start(bool use_link) {
  runtime rt({.workers = 2});
  auto target = spawn_actor<crashes_at_start>(rt);
  wait_halted(target);  // the window made certain: the crash happened before the watch
  std::promise<spindle::exit_reason> told;
  auto watcher = spawn_actor<late_watcher>(rt, use_link, &told);
  watcher.send(actor_handle(target));
  return told.get_future().get();
}

TEST(ActorWatch, MonitorPlacedAfterACrashInOnStartReportsTheCrash) {
  const spindle::exit_reason reason = watch_after_crash_at_start(false);
  EXPECT_EQ(reason.kind, exit_kind::crashed) << reason.describe();
  EXPECT_NE(reason.describe().find("on_start failed"), std::string::npos) << reason.describe();
}

TEST(ActorWatch, LinkPlacedAfterACrashInOnStartReportsTheCrash) {
  const spindle::exit_reason reason = watch_after_crash_at_start(true);
  EXPECT_EQ(reason.kind, exit_kind::crashed) << reason.describe();
  EXPECT_NE(reason.describe().find("on_start failed"), std::string::npos) << reason.describe();
}


// issue 14, attack: watching an empty handle from a handler used to dereference null (SIGSEGV).
// link and monitor throw usage_error, as every member of an empty handle does; unlink and
// demonitor (noexcept) do nothing.
struct empty_handle_watcher {
  using message_type = int;
  std::promise<std::vector<std::string>>* outcomes;
  void on_start(actor_context<int>& ctx) {
    std::vector<std::string> seen;
    const actor_handle empty;
    try {
      ctx.link(empty);
      seen.push_back("link returned");
    } catch (const spindle::usage_error&) {
      seen.push_back("link threw usage_error");
    }
    try {
      ctx.monitor(empty);
      seen.push_back("monitor returned");
    } catch (const spindle::usage_error&) {
      seen.push_back("monitor threw usage_error");
    }
    ctx.unlink(empty);
    ctx.demonitor(empty, 1);
    seen.push_back("unlink and demonitor did nothing");
    outcomes->set_value(std::move(seen));
  }
  void receive(int) {}
};

TEST(ActorWatch, WatchingAnEmptyHandleIsAUsageErrorAndUnwatchingItDoesNothing) {
  runtime rt({.workers = 2});
  std::promise<std::vector<std::string>> outcomes;
  auto watcher = spawn_actor<empty_handle_watcher>(rt, &outcomes);
  const std::vector<std::string> expected{"link threw usage_error", "monitor threw usage_error",
                                          "unlink and demonitor did nothing"};
  EXPECT_EQ(outcomes.get_future().get(), expected);
  EXPECT_NE(watcher.state(), actor_state::halted);  // the errors were caught: it still runs
}

// A plain task awaits an actor's exit (monitor_actor), before and after the actor halted; a
// plain thread waits on the same receiver.
TEST(ActorWatch, APlainTaskAwaitsAnActorsExit) {
  runtime rt({.workers = 2});
  auto target = spawn_actor<crashes_on_negative>(rt);
  auto before = spindle::monitor_actor(target);
  auto waiting = rt.spawn([](spindle::oneshot_receiver<spindle::exit_reason> down)
                              -> spindle::task<spindle::exit_reason> { co_return co_await down; }(
                                  std::move(before)));
  target.send(-1);
  const spindle::exit_reason seen_by_task = waiting.join();
  EXPECT_EQ(seen_by_task.kind, exit_kind::crashed);
  EXPECT_NE(seen_by_task.describe().find("crashed on purpose"), std::string::npos);
  // After the halt: the same reason at once, to a task and to a plain thread.
  const spindle::exit_reason late = rt.block_on(
      [](actor_handle t) -> spindle::task<spindle::exit_reason> {
        co_return co_await spindle::monitor_actor(t);
      }(target));
  EXPECT_EQ(late.kind, exit_kind::crashed);
  EXPECT_EQ(spindle::monitor_actor(target).blocking_receive().kind, exit_kind::crashed);
  EXPECT_THROW((void)spindle::monitor_actor(actor_handle{}), spindle::usage_error);
}

// A long-lived actor monitored by a task per request, each dropping its receiver unread: the
// watch list keeps only the monitors still held (before: every one, ~240 bytes each, until
// the actor halted). The ones still held are all told when it halts, exactly once.
TEST(ActorWatch, DroppedTaskMonitorsAreSweptAndHeldOnesAreStillTold) {
  runtime rt({.workers = 2});
  auto target = spawn_actor<crashes_on_negative>(rt);
  std::vector<spindle::oneshot_receiver<spindle::exit_reason>> held;
  for (int i = 0; i < 100'000; ++i) {
    auto dropped = spindle::monitor_actor(target);
    if (i % 1000 == 0) held.push_back(spindle::monitor_actor(target));
  }
  const spindle::actor_detail::actor_links* links = target.cell()->links.load();
  ASSERT_NE(links, nullptr);
  // At most about twice the held ones (100) plus the sweep's floor; 100,100 without sweeps.
  EXPECT_LT(links->watchers.size(), 2 * held.size() + 2 * spindle::actor_detail::actor_links::sweep_floor);
  target.send(-1);
  for (auto& down : held) EXPECT_EQ(down.blocking_receive().kind, exit_kind::crashed);
}

// The runtime's shutdown halts actors without telling actors that watch (none runs any more),
// but a thread waiting on monitor_actor is told (reason shutdown).
TEST(ActorWatch, AMonitorIsToldWhenShutdownHaltsTheActor) {
  std::optional<spindle::oneshot_receiver<spindle::exit_reason>> down;
  {
    runtime rt({.workers = 1});
    auto target = spawn_actor<crashes_on_negative>(rt);
    down.emplace(spindle::monitor_actor(target));
  }
  EXPECT_EQ(down->blocking_receive().kind, exit_kind::shutdown);
}

// Links and monitors placed, repeated and removed while their targets crash on the other
// executor: each watch still standing when its target halts is told exactly once, a removed one
// at most once (the removal may come after the halt told it), a repeated link is one link.
struct churn_results {
  std::map<spindle::actor_id, std::uint64_t> standing_monitor;  // target -> monitor id
  std::map<spindle::actor_id, int> standing_downs;
  std::map<spindle::actor_id, int> removed_downs;
  std::map<spindle::actor_id, int> exits;
  std::atomic<int> standing_told{0};
};

struct churn_watcher {
  using message_type = actor_handle;
  churn_results* results;
  void receive(actor_handle& target, actor_context<actor_handle>& ctx) {
    ctx.link(target);
    ctx.link(target);  // the same link
    const std::uint64_t removed = ctx.monitor(target);
    results->standing_monitor[target.id()] = ctx.monitor(target);
    target.as<int>().send(-1);  // the crash races with the removals below
    ctx.demonitor(target, removed);
    ctx.unlink(target);
  }
  void on_exit(const spindle::exit_message& x, actor_context<actor_handle>&) {
    ++results->exits[x.source];
  }
  void on_down(const spindle::down_message& d, actor_context<actor_handle>&) {
    if (results->standing_monitor.at(d.source) == d.monitor_id) {
      ++results->standing_downs[d.source];
      results->standing_told.fetch_add(1, std::memory_order_release);  // release: the maps
    } else {
      ++results->removed_downs[d.source];
    }
  }
};

TEST(ActorWatch, WatchesChurnedWhileTargetsCrashAreEachToldOnce) {
  constexpr int targets = 300;
  churn_results results;
  runtime rt({.workers = 2});
  auto watcher = spawn_actor<churn_watcher>(rt, spawn_options{.executor = 0}, &results);
  std::vector<actor_handle> handles;
  std::vector<spindle::oneshot_receiver<spindle::exit_reason>> told;
  for (int i = 0; i < targets; ++i) {
    auto target = spawn_actor<crashes_on_negative>(rt, spawn_options{.executor = 1});
    told.push_back(spindle::monitor_actor(target));
    watcher.send(actor_handle(target));
    handles.push_back(target);
  }
  for (auto& t : told) EXPECT_EQ(t.blocking_receive().kind, exit_kind::crashed);
  while (results.standing_told.load(std::memory_order_acquire) < targets) {
    std::this_thread::yield();
  }
  auto watcher_down = spindle::monitor_actor(watcher);
  watcher.stop();
  EXPECT_EQ(watcher_down.blocking_receive().kind, exit_kind::normal);  // after its handlers
  for (const actor_handle& h : handles) {
    EXPECT_EQ(results.standing_downs[h.id()], 1) << "target " << h.id();
    EXPECT_LE(results.removed_downs[h.id()], 1) << "target " << h.id();
    EXPECT_LE(results.exits[h.id()], 1) << "target " << h.id();
  }
  EXPECT_EQ(results.standing_downs.size(), std::size_t(targets));
}

}  // namespace
