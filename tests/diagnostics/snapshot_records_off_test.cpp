// diagnostics_options::records = false (SPEC G1; docs/design/diagnostics.md, "Records off"):
// tasks are still listed, by id only ("unrecorded"); actors keep their names and states but
// no statistics; everything else runs as with records on.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <optional>
#include <string>

#include "spindle/actor/actors.hpp"
#include "spindle/embed/embedded_executor.hpp"
#include "spindle/spindle.hpp"
#include "spindle/task/snapshot.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::task;
using spindle::task_info;
using spindle::task_state;
using spindle::testing::eventually;

using spindle::testing::receive_or_minus_one;

spindle::runtime_options without_records() {
  spindle::runtime_options options{.workers = 2};
  options.diagnostics.records = false;
  return options;
}

TEST(SnapshotRecordsOff, TasksAreListedByIdOnlyAndStillRun) {
  spindle::runtime rt(without_records());
  spindle::channel<int> ch(4);
  auto h = rt.spawn_named("consumer", receive_or_minus_one(ch));
  const spindle::task_id id = h.id();
  // Listed (by id), unrecorded: no name, location, wait or counts.
  std::optional<task_info> seen;
  ASSERT_TRUE(eventually([&] {
    for (const task_info& t : rt.snapshot().tasks) {
      if (t.id == id) seen = t;
    }
    return seen.has_value();
  }));
  EXPECT_EQ(seen->state, task_state::unrecorded);
  EXPECT_EQ(seen->name[0], '\0');
  EXPECT_EQ(seen->file, nullptr);
  EXPECT_EQ(seen->polls, 0u);
  EXPECT_EQ(seen->waiting_on.kind, spindle::wait_kind::none);
  const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
  bool listed = false;
  for (const nlohmann::json& t : doc.at("tasks")) {
    if (t.at("state") == "unrecorded") listed = true;
    if (t.at("state") == "unrecorded") {
      EXPECT_TRUE(t.at("waiting_on").is_null());
    }
  }
  EXPECT_TRUE(listed);
  // The task runs as with records on.
  ASSERT_TRUE(ch.try_send(7));
  EXPECT_EQ(h.join(), 7);
}

struct counter {
  using message_type = int;
  std::atomic<int>* handled;
  explicit counter(std::atomic<int>* h) : handled(h) {}
  void receive(int) { handled->fetch_add(1); }
};

TEST(SnapshotRecordsOff, ActorsKeepNameAndStateButNoStatistics) {
  spindle::runtime rt(without_records());
  spindle::actor_system& actors = spindle::actors_of(rt);
  std::atomic<int> handled{0};
  spindle::spawn_options options;
  options.name = "quiet";
  auto a = spindle::spawn_actor<counter>(rt, options, &handled);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.send(i), spindle::send_result::queued);
  ASSERT_TRUE(eventually([&] { return handled.load() == 100; }));
  bool found = false;
  for (const spindle::actor_info& info : actors.snapshot()) {
    if (info.name != "quiet") continue;
    found = true;
    EXPECT_FALSE(info.statistics);
    EXPECT_EQ(info.messages_handled, 0u);
    EXPECT_EQ(info.reductions, 0u);
    EXPECT_EQ(info.mailbox_high_water, 0u);
  }
  EXPECT_TRUE(found);
  const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
  bool listed = false;
  for (const nlohmann::json& j : doc.at("sections").at("actors")) {
    if (j.at("name") != "quiet") continue;
    listed = true;
    EXPECT_EQ(j.at("statistics"), false);
  }
  EXPECT_TRUE(listed);
  a.stop();
}

// Issue 15's attack: with exact_mailbox_lengths on as well, the senders still counted their
// pushes while the owner no longer counted what it handled, so an idle actor that had handled
// 1000 messages was listed with an exact mailbox length (and high-water mark) of 1000.
TEST(SnapshotRecordsOff, ExactMailboxLengthsDoNotCountMessagesAlreadyHandled) {
  spindle::runtime_options options = without_records();
  options.diagnostics.exact_mailbox_lengths = true;
  spindle::runtime rt(options);
  spindle::actor_system& actors = spindle::actors_of(rt);
  std::atomic<int> handled{0};
  spindle::spawn_options spawn;
  spawn.name = "exact";
  auto a = spindle::spawn_actor<counter>(rt, spawn, &handled);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.send(i), spindle::send_result::queued);
  ASSERT_TRUE(eventually([&] { return handled.load() == 1000; }));
  bool found = false;
  for (const spindle::actor_info& info : actors.snapshot()) {
    if (info.name != "exact") continue;
    found = true;
    EXPECT_FALSE(info.statistics);
    EXPECT_EQ(info.mailbox_length, 0u);
    EXPECT_EQ(info.mailbox_high_water, 0u);
  }
  EXPECT_TRUE(found);
  a.stop();
}

TEST(SnapshotRecordsOff, WithRecordsOnTheSameActorCountsItsMessages) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  spindle::actor_system& actors = spindle::actors_of(rt);
  std::atomic<int> handled{0};
  spindle::spawn_options options;
  options.name = "counted";
  auto a = spindle::spawn_actor<counter>(rt, options, &handled);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.send(i), spindle::send_result::queued);
  ASSERT_TRUE(eventually([&] {
    for (const spindle::actor_info& info : actors.snapshot()) {
      if (info.name == "counted" && info.messages_handled == 100) return info.statistics;
    }
    return false;
  }));
  a.stop();
}

}  // namespace
