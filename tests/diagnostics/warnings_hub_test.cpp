// The warnings hub (diagnostics/warnings.hpp, G4): delivery to the hook, one delivery per
// episode, counts in the metrics text, the snapshot section, rate limits, strict mode and the
// test helper, and the detectors' hysteresis (mailbox, task lints) fed directly.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "spindle/core/clock.hpp"
#include "spindle/diagnostics/registry.hpp"
#include "spindle/diagnostics/warnings.hpp"
#include "support/warnings_support.hpp"

namespace {

using spindle::diagnostics::registry;
using spindle::diagnostics::task_view;
using spindle::diagnostics::warning;
using spindle::diagnostics::warning_hub;
using spindle::diagnostics::warning_kind;
using spindle::diagnostics::warning_subject;

warning_subject task_subject(std::uint64_t id, std::string name = "worker") {
  warning_subject s;
  s.what = warning_subject::kind::task;
  s.id = id;
  s.name = std::move(name);
  s.location = "app.cpp:12";
  s.executor = 0;
  return s;
}

std::uint64_t now() { return spindle::core::monotonic_nanoseconds(); }

nlohmann::json snapshot_of(const registry& r) {
  std::string text;
  spindle::diagnostics::json_writer out(text);
  r.write_snapshot_sections(out);  // the whole {"name": value, ...} object
  return nlohmann::json::parse(text);
}

std::string metrics_of(const registry& r) {
  std::string text;
  r.write_metrics(text);
  return text;
}

TEST(WarningHub, ARaiseIsDeliveredOnceCountedListedAndLowered) {
  registry r;
  warning_hub hub(r);
  std::vector<warning> delivered;
  hub.set_warning_hook([&](const warning& w) { delivered.push_back(w); });
  const warning_subject subject = task_subject((std::uint64_t(3) << 32) | 1);
  hub.raise(warning_kind::stall, subject, "ran 60 ms", now());
  hub.raise(warning_kind::stall, subject, "ran 70 ms", now());  // same episode: no new delivery
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0].kind, warning_kind::stall);
  EXPECT_EQ(delivered[0].subject, subject);
  EXPECT_EQ(delivered[0].message, "ran 60 ms");
  EXPECT_EQ(hub.raised(warning_kind::stall), 1u);
  EXPECT_NE(metrics_of(r).find("spindle_warnings_total{kind=\"stall\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics_of(r).find("spindle_warnings_active{kind=\"stall\"} 1\n"), std::string::npos);

  nlohmann::json section = snapshot_of(r)["warnings"];
  ASSERT_EQ(section["current"].size(), 1u);
  EXPECT_EQ(section["current"][0]["kind"], "stall");
  EXPECT_EQ(section["current"][0]["subject"]["kind"], "task");
  EXPECT_EQ(section["current"][0]["subject"]["id"], "3.1");
  EXPECT_EQ(section["current"][0]["subject"]["name"], "worker");
  EXPECT_EQ(section["current"][0]["subject"]["location"], "app.cpp:12");
  EXPECT_EQ(section["current"][0]["message"], "ran 70 ms");  // the latest word
  EXPECT_EQ(section["totals"]["stall"]["raised"], 1);

  hub.lower(warning_kind::stall, subject, now());
  section = snapshot_of(r)["warnings"];
  EXPECT_EQ(section["current"].size(), 0u);
  ASSERT_EQ(section["recent"].size(), 1u);
  EXPECT_EQ(section["recent"][0]["active"], false);
  EXPECT_GE(section["recent"][0]["last_seen_ns"].get<std::uint64_t>(),
            section["recent"][0]["first_seen_ns"].get<std::uint64_t>());
  // A new episode of the same subject is a new warning.
  hub.raise(warning_kind::stall, subject, "again", now());
  EXPECT_EQ(delivered.size(), 2u);
  EXPECT_EQ(delivered[1].raised_count, 2u);
  EXPECT_EQ(hub.raised(warning_kind::stall), 2u);
}

TEST(WarningHub, TheDefaultHookWritesOneLineOnStderr) {
  registry r;
  warning_hub hub(r);
  testing::internal::CaptureStderr();
  hub.raise(warning_kind::lost_waker, task_subject(7, "reader"), "suspended 120.0 ms", now());
  const std::string text = testing::internal::GetCapturedStderr();
  EXPECT_EQ(text,
            "spindle warning [lost_waker] task 0.7 \"reader\" at app.cpp:12: suspended 120.0 ms\n");
}

TEST(WarningHub, DeliveriesAreRateLimitedPerKindAndTheRestCountedAsSuppressed) {
  registry r;
  warning_hub hub(r);
  spindle::core::diagnostics_options options;
  options.warnings_per_second = 3;
  hub.configure(options);
  int stalls = 0, mailboxes = 0;
  hub.set_warning_hook([&](const warning& w) {
    (w.kind == warning_kind::stall ? stalls : mailboxes)++;
  });
  const std::uint64_t t = now();
  for (std::uint64_t i = 0; i < 10; ++i) hub.raise(warning_kind::stall, task_subject(i), "x", t);
  hub.raise(warning_kind::mailbox_growth, task_subject(1), "x", t);  // another kind's bucket
  EXPECT_EQ(stalls, 3);
  EXPECT_EQ(mailboxes, 1);
  EXPECT_EQ(hub.raised(warning_kind::stall), 10u);  // all counted
  EXPECT_EQ(hub.suppressed(warning_kind::stall), 7u);
  EXPECT_EQ(hub.current().size(), 11u);  // all listed
  const std::string metrics = metrics_of(r);
  EXPECT_NE(metrics.find("spindle_warnings_total{kind=\"stall\"} 10\n"), std::string::npos);
  EXPECT_NE(metrics.find("spindle_warnings_suppressed_total{kind=\"stall\"} 7\n"),
            std::string::npos);
}

TEST(WarningHub, OnWarningListenersHearEveryDeliveredRaise) {
  registry r;
  warning_hub hub(r);
  hub.set_warning_hook([](const warning&) {});
  int dumps = 0;
  const std::uint64_t id = hub.add_on_warning([&](const warning&) { ++dumps; });
  hub.raise(warning_kind::stall, task_subject(1), "x", now());
  hub.remove_on_warning(id);
  hub.raise(warning_kind::stall, task_subject(2), "x", now());
  EXPECT_EQ(dumps, 1);
}

TEST(WarningHub, StrictModeRecordsEveryRaiseAsAFailure) {
  registry r;
  warning_hub hub(r);
  spindle::core::diagnostics_options options;
  options.strict_warnings = true;
  options.warnings_per_second = 1;
  hub.configure(options);
  hub.set_warning_hook([](const warning&) {});
  hub.raise(warning_kind::stall, task_subject(1), "a", now());
  hub.raise(warning_kind::self_wakes, task_subject(2), "b", now());
  hub.raise(warning_kind::self_wakes, task_subject(3), "c", now());  // suppressed, still a failure
  ASSERT_EQ(hub.failures().size(), 3u);
  EXPECT_EQ(hub.failures()[2].message, "c");
  hub.clear_failures();
  EXPECT_TRUE(hub.failures().empty());
}

TEST(WarningHub, FailOnWarningsFailsTheTestThatRaisedOne) {
  registry r;
  warning_hub hub(r);
  spindle::core::diagnostics_options options;
  options.strict_warnings = true;
  hub.configure(options);
  hub.set_warning_hook([](const warning&) {});
  // The helper's failure is caught here (gtest-spi), so this test itself passes.
  EXPECT_NONFATAL_FAILURE(
      {
        spindle::testing::fail_on_warnings guard(hub);
        hub.raise(warning_kind::stall, task_subject(5, "spinner"), "ran 60 ms", now());
      },
      "[stall] task 0.5 \"spinner\"");
  // Without strict mode it still fails, by the counts.
  hub.configure(spindle::core::diagnostics_options{});
  EXPECT_NONFATAL_FAILURE(
      {
        spindle::testing::fail_on_warnings guard(hub);
        hub.raise(warning_kind::stall, task_subject(6), "x", now());
      },
      "1 warning(s) raised during the test");
  // And no failure when nothing is raised.
  spindle::testing::fail_on_warnings quiet(hub);
}

warning_subject actor_subject() {
  warning_subject s;
  s.what = warning_subject::kind::actor;
  s.id = 42;
  s.name = "actor 42";
  return s;
}

TEST(WarningHubMailbox, ABacklogOscillatingAroundTheEnableThresholdRaisesOnce) {
  registry r;
  warning_hub hub(r);
  int delivered = 0;
  hub.set_warning_hook([&](const warning&) { ++delivered; });
  warning_hub::mailbox_watch state;
  // Around 10,000, up and down, many times: raised once (the first look at or above it), never
  // lowered (it never fell below 7,500), so never raised again.
  const std::uint64_t lengths[] = {10'010, 10'020, 9'990, 10'030, 9'980, 10'050, 9'995, 10'001};
  for (int round = 0; round < 50; ++round) {
    for (std::uint64_t n : lengths) {
      if (hub.mailbox_look_matters(state, n)) hub.observe_mailbox(state, n, actor_subject);
    }
  }
  EXPECT_EQ(delivered, 1);
  EXPECT_EQ(hub.raised(warning_kind::mailbox_growth), 1u);
  EXPECT_TRUE(hub.is_active(warning_kind::mailbox_growth, actor_subject()));
  // Below the enable threshold but above the disable one: still raised.
  hub.observe_mailbox(state, 8'000, actor_subject);
  EXPECT_TRUE(hub.is_active(warning_kind::mailbox_growth, actor_subject()));
  // Below the disable threshold: lowered.
  hub.observe_mailbox(state, 7'000, actor_subject);
  EXPECT_FALSE(hub.is_active(warning_kind::mailbox_growth, actor_subject()));
  EXPECT_FALSE(hub.mailbox_look_matters(state, 7'000));
  EXPECT_EQ(delivered, 1);
}

TEST(WarningHubTaskLints, LostWakerSelfWakesAndWokenNotPolledFromTaskViews) {
  registry r;
  warning_hub hub(r);
  std::vector<warning> delivered;
  hub.set_warning_hook([&](const warning& w) { delivered.push_back(w); });
  std::vector<task_view> views(4);
  views[0] = {.id = 1, .name = "lost", .location = "a.cpp:1", .executor = 0,
              .current = task_view::state::suspended, .waker_registered = false,
              .state_for_ns = 200'000'000};
  views[1] = {.id = 2, .name = "waiting", .location = "a.cpp:2", .executor = 0,
              .current = task_view::state::suspended, .waker_registered = true,
              .state_for_ns = 900'000'000};  // a registered waker: fine however long
  views[2] = {.id = 3, .name = "poller", .location = "a.cpp:3", .executor = 1,
              .current = task_view::state::running, .wakes = 1000, .self_wakes = 900};
  views[3] = {.id = 4, .name = "starved", .location = "a.cpp:4", .executor = 1,
              .current = task_view::state::scheduled, .state_for_ns = 150'000'000};
  const auto sweep = [&] {
    hub.evaluate_tasks([&](std::uint32_t, std::uint32_t, const auto& visit) {
      for (const task_view& v : views) visit(v);
      return spindle::diagnostics::task_sweep_done;
    }, now());
  };
  sweep();
  ASSERT_EQ(delivered.size(), 3u);
  warning_subject lost{warning_subject::kind::task, 1};
  warning_subject poller{warning_subject::kind::task, 3};
  warning_subject starved{warning_subject::kind::task, 4};
  EXPECT_TRUE(hub.is_active(warning_kind::lost_waker, lost));
  EXPECT_TRUE(hub.is_active(warning_kind::self_wakes, poller));
  EXPECT_TRUE(hub.is_active(warning_kind::woken_not_polled, starved));
  for (const warning& w : delivered) {
    if (w.kind == warning_kind::lost_waker) {
      EXPECT_EQ(w.subject.name, "lost");
      EXPECT_EQ(w.subject.location, "a.cpp:1");
    }
  }
  // Self-wakes between the two thresholds (45%): stays raised, no flicker, no new delivery.
  views[2].wakes = 2000;
  views[2].self_wakes = 900;
  sweep();
  EXPECT_TRUE(hub.is_active(warning_kind::self_wakes, poller));
  // Below the lower threshold (30%): lowered. The lost task was woken; the starved one polled.
  views[2].wakes = 3000;
  views[0].current = task_view::state::running;
  views.pop_back();  // task 4 completed
  sweep();
  EXPECT_FALSE(hub.is_active(warning_kind::self_wakes, poller));
  EXPECT_FALSE(hub.is_active(warning_kind::lost_waker, lost));
  EXPECT_FALSE(hub.is_active(warning_kind::woken_not_polled, starved));
  EXPECT_EQ(delivered.size(), 3u);
  // Too few wakes to judge: nothing, whatever the share.
  views[2] = {.id = 5, .current = task_view::state::running, .wakes = 10, .self_wakes = 10};
  sweep();
  EXPECT_EQ(delivered.size(), 3u);
}

// A sweep that finds 100,000 tasks woken and not polled raises 16 of them one by one and one
// warning (subject `tasks`) for the rest; the next pass that finds none lowers all 17. Before
// the cap a pass raised each one: on the monitor's thread, a million findings (strings, map
// inserts, rate-limit bookkeeping) held it for seconds and with it every timer of a loaded
// 2-core runtime (issue 13: mixed-together timer p99 of 1-3 s).
TEST(WarningHubTaskLints, ManyStarvedTasksAreSixteenWarningsAndOneForTheRest) {
  registry r;
  warning_hub hub(r);
  std::vector<warning> delivered;
  hub.set_warning_hook([&](const warning& w) { delivered.push_back(w); });
  constexpr std::uint32_t starved = 100'000;
  std::uint32_t visited = 0;
  bool present = true;
  // A table of `starved` tasks, visited in the steps the visitor is asked for.
  const auto visitor = [&](std::uint32_t from, std::uint32_t count, const auto& visit) {
    const std::uint32_t end = count >= starved - std::min(from, starved) ? starved : from + count;
    for (std::uint32_t i = from; present && i < end; ++i) {
      ++visited;
      visit(task_view{.id = (std::uint64_t(i) << 32) | 1, .file = "flood.cpp", .line = 7,
                      .current = task_view::state::scheduled,
                      .state_for_ns = 150'000'000 + std::uint64_t(i)});
    }
    return end >= starved ? spindle::diagnostics::task_sweep_done : end;
  };
  hub.evaluate_tasks(visitor, now());
  EXPECT_EQ(visited, starved);
  std::size_t one_by_one = 0, summaries = 0;
  for (const warning& w : hub.current()) {
    ASSERT_EQ(w.kind, warning_kind::woken_not_polled);
    if (w.subject.what == warning_subject::kind::task) {
      ++one_by_one;
      EXPECT_EQ(w.subject.location, "flood.cpp:7");  // built for a reported task only
    } else {
      ASSERT_EQ(w.subject.what, warning_subject::kind::tasks);
      ++summaries;
      EXPECT_NE(w.message.find("99984 more tasks than the 16 reported one by one"),
                std::string::npos) << w.message;
      EXPECT_NE(w.message.find("the longest 150.1 ms"), std::string::npos) << w.message;
      EXPECT_EQ(warning_hub::format(w).rfind("spindle warning [woken_not_polled] tasks: ", 0), 0u)
          << warning_hub::format(w);
    }
  }
  EXPECT_EQ(one_by_one, warning_hub::task_warnings_per_kind);
  EXPECT_EQ(summaries, 1u);
  EXPECT_LE(hub.raised(warning_kind::woken_not_polled), warning_hub::task_warnings_per_kind + 1);
  // Again: the same 16 keep theirs (no new raise), the summary is refreshed, not raised again.
  const std::uint64_t raised_before = hub.raised(warning_kind::woken_not_polled);
  hub.evaluate_tasks(visitor, now());
  EXPECT_EQ(hub.raised(warning_kind::woken_not_polled), raised_before);
  EXPECT_EQ(hub.current().size(), warning_hub::task_warnings_per_kind + 1);
  // All polled: everything lowered by the next pass.
  present = false;
  hub.evaluate_tasks(visitor, now());
  EXPECT_TRUE(hub.current().empty());
}

TEST(WarningHubEmbeddedTicks, OverBudgetTicksRaiseOnceAndLowerAfterTicksWithinBudget) {
  registry r;
  warning_hub hub(r);
  int delivered = 0;
  hub.set_warning_hook([&](const warning&) { ++delivered; });
  warning_hub::tick_watch state;
  const auto subject = [] {
    warning_subject s;
    s.what = warning_subject::kind::embedded_executor;
    s.id = 9;
    return s;
  };
  const std::uint64_t budget = 1'000'000;
  hub.observe_tick(state, 1'500'000, budget, subject);  // over budget, under 2x: nothing
  EXPECT_EQ(delivered, 0);
  hub.observe_tick(state, 3'000'000, budget, subject);
  EXPECT_EQ(delivered, 1);
  // Alternating long and short ticks: no flicker (lowered only after 8 successive good ones).
  for (int i = 0; i < 20; ++i) {
    hub.observe_tick(state, i % 2 ? 3'000'000 : 500'000, budget, subject);
  }
  EXPECT_EQ(delivered, 1);
  for (int i = 0; i < 8; ++i) hub.observe_tick(state, 500'000, budget, subject);
  EXPECT_FALSE(hub.is_active(warning_kind::embedded_tick_over_budget, subject()));
  EXPECT_EQ(hub.recent().size(), 1u);
}

}  // namespace

namespace spindle::diagnostics {
namespace {

// Attack finding (issue 15): a hook that replaced the hook from inside itself waited for its own
// delivery for ever, and every later raise (an executor's mailbox check) blocked behind it.
TEST(WarningHubReentry, AHookThatReplacesTheHookFromInsideItselfDoesNotDeadlock) {
  auto* r = new registry;  // leaked if the hub deadlocks: the detached thread still uses them
  auto* hub = new warning_hub(*r);
  auto first_calls = std::make_shared<std::atomic<int>>(0);
  auto second_calls = std::make_shared<std::atomic<int>>(0);
  hub->set_warning_hook([hub, first_calls, second_calls](const warning&) {
    first_calls->fetch_add(1);
    hub->set_warning_hook([second_calls](const warning&) { second_calls->fetch_add(1); });
  });
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::thread raiser([hub, finished] {
    warning_subject a;
    a.what = warning_subject::kind::task;
    a.id = 1;
    warning_subject b = a;
    b.id = 2;
    hub->raise(warning_kind::stall, a, "ran 60 ms", 1);
    hub->raise(warning_kind::stall, b, "ran 70 ms", 2);
    finished->store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!finished->load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  if (!finished->load()) {
    raiser.detach();
    FAIL() << "raise did not return: the hook's own set_warning_hook waits for itself";
  }
  raiser.join();
  EXPECT_EQ(first_calls->load(), 1);
  EXPECT_EQ(second_calls->load(), 1);
  delete hub;
  delete r;
}

}  // namespace
}  // namespace spindle::diagnostics
