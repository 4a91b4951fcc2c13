// The snapshot's tasks (SPEC G1): names, spawn locations, parents, and what each suspended task
// waits on, in the structured API (runtime::snapshot) and in the JSON document.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "spindle/diagnostics/snapshot.hpp"
#include "spindle/io/io.hpp"
#include "spindle/spindle.hpp"
#include "spindle/task/snapshot.hpp"
#include "../io/io_test_support.hpp"
#include "../support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::task;
using spindle::task_info;
using spindle::task_state;
using spindle::testing::eventually;
using spindle::testing::join_bounded;

// The first snapshot in which `name` is suspended (waits for it, bounded).
// A waiter in a queue (mutex, semaphore, channel) is shown suspended just before it queues and
// learns its position (on_suspend comes first: after queuing, a waker owns the record's wake
// fields), so `queued` waits for the position too.
task_info wait_until_suspended(spindle::runtime& rt, std::string_view name, bool queued = false) {
  task_info found;
  const bool seen = eventually(
      [&] {
        spindle::runtime_snapshot snap = rt.snapshot();
        const task_info* t = snap.find_task(name);
        if (t == nullptr || t->state != task_state::suspended) return false;
        if (queued && t->waiting_on.number == 0) return false;
        found = *t;
        return true;
      },
      std::chrono::seconds(10));
  EXPECT_TRUE(seen) << "task " << name << " never showed as suspended";
  return found;
}

std::string describe(const task_info& t) {
  char text[96];
  spindle::describe_wait(t, text, sizeof text);
  return text;
}

// The task of that name in the JSON snapshot (null json if absent).
nlohmann::json json_task(spindle::runtime& rt, std::string_view name) {
  const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
  for (const nlohmann::json& t : doc.at("tasks")) {
    if (t.at("name") == name) return t;
  }
  return nullptr;
}

using spindle::testing::receive_or_minus_one;

TEST(SnapshotTasks, NamedTaskWaitingOnAChannelShowsTheChannelItsNameAndSpawnLine) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  spindle::channel<int> ch(4);
  const std::uint32_t spawn_line = __LINE__ + 1;
  auto h = rt.spawn_named("consumer", receive_or_minus_one(ch));
  const task_info t = wait_until_suspended(rt, "consumer");
  EXPECT_EQ(t.waiting_on.kind, spindle::wait_kind::channel_receive);
  EXPECT_EQ(describe(t), "channel#" + std::to_string(ch.diagnostic_id()) + " receive");
  EXPECT_EQ(t.line, spawn_line);
  ASSERT_NE(t.file, nullptr);
  EXPECT_NE(std::strstr(t.file, "snapshot_task_test.cpp"), nullptr) << t.file;
  EXPECT_FALSE(t.has_parent);  // spawned from the test's thread
  EXPECT_TRUE(t.waker_registered);
  EXPECT_GE(t.polls, 1u);

  const nlohmann::json j = json_task(rt, "consumer");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("state"), "suspended");
  EXPECT_EQ(j.at("waiting_on"), "channel#" + std::to_string(ch.diagnostic_id()) + " receive");
  EXPECT_EQ(j.at("location").at("line"), spawn_line);
  EXPECT_NE(j.at("location").at("file").get<std::string>().find("snapshot_task_test.cpp"),
            std::string::npos);

  ASSERT_TRUE(ch.try_send(7));
  EXPECT_EQ(join_bounded(std::move(h)), 7);
  EXPECT_EQ(rt.snapshot().find_task("consumer"), nullptr);  // completed: gone from the table
}

TEST(SnapshotTasks, TheDocumentHasExecutorsTasksSectionsAndItsTime) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  const nlohmann::json doc = nlohmann::json::parse(rt.snapshot_json());
  ASSERT_TRUE(doc.at("executors").is_array());
  EXPECT_EQ(doc.at("executors").size(), 2u);
  EXPECT_TRUE(doc.at("tasks").is_array());
  EXPECT_TRUE(doc.at("sections").is_object());
  EXPECT_FALSE(doc.at("sections").contains("tasks"));  // lifted to the top level
  EXPECT_GT(doc.at("taken_at_ns").get<std::uint64_t>(), 0u);
  EXPECT_EQ(doc.at("executors")[1].at("index"), 1);
  // The same document through the entry point the server calls.
  const nlohmann::json again =
      nlohmann::json::parse(spindle::diagnostics::snapshot_json(rt.diagnostics_registry()));
  EXPECT_EQ(again.at("executors").size(), 2u);
}

task<void> hold_then_release(spindle::mutex& m, spindle::event& release) {
  auto held = co_await m.lock();
  spindle::set_task_name("holder");
  co_await release.wait();
}

task<void> lock_once(spindle::mutex& m) {
  auto held = co_await m.lock();
}

TEST(SnapshotTasks, TasksQueuedOnAHeldMutexShowItAndTheirQueuePositions) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  spindle::mutex m;
  spindle::event release;
  auto holder = rt.spawn(hold_then_release(m, release));
  const task_info held = wait_until_suspended(rt, "holder");
  EXPECT_EQ(held.waiting_on.kind, spindle::wait_kind::event);
  EXPECT_EQ(describe(held), "event#" + std::to_string(release.diagnostic_id()));

  auto first = rt.spawn_named("first", lock_once(m));
  const task_info one = wait_until_suspended(rt, "first", /*queued=*/true);
  auto second = rt.spawn_named("second", lock_once(m));
  const task_info two = wait_until_suspended(rt, "second", /*queued=*/true);
  const std::string mutex_name = "mutex#" + std::to_string(m.diagnostic_id());
  EXPECT_EQ(describe(one), mutex_name + " (queued 1st)");
  EXPECT_EQ(describe(two), mutex_name + " (queued 2nd)");

  release.set();
  join_bounded(std::move(holder));
  join_bounded(std::move(first));
  join_bounded(std::move(second));
}

task<int> child_waits(spindle::event& go) {
  spindle::set_task_name("child");
  co_await go.wait();
  co_return 5;
}

task<int> parent_joins(spindle::event& go) {
  spindle::set_task_name("parent");
  auto child = spindle::spawn(child_waits(go));
  co_return co_await std::move(child);
}

TEST(SnapshotTasks, AJoiningParentShowsTheChildItJoinsAndTheChildItsParent) {
  spindle::runtime rt(spindle::runtime_options{.workers = 2});
  spindle::event go;
  auto h = rt.spawn(parent_joins(go));
  const task_info parent = wait_until_suspended(rt, "parent");
  const task_info child = wait_until_suspended(rt, "child");
  ASSERT_TRUE(child.has_parent);
  EXPECT_EQ(child.parent, parent.id);
  EXPECT_EQ(parent.waiting_on.kind, spindle::wait_kind::join);
  EXPECT_EQ(describe(parent), "join task " + std::to_string(child.id.index) + "." +
                                  std::to_string(child.id.serial));
  const nlohmann::json j = json_task(rt, "child");
  EXPECT_EQ(j.at("parent"),
            std::to_string(parent.id.index) + "." + std::to_string(parent.id.serial));
  go.set();
  EXPECT_EQ(join_bounded(std::move(h)), 5);
}

task<void> sleeper() {
  spindle::set_task_name("sleeper");
  co_await spindle::sleep_for(1h);
}

TEST(SnapshotTasks, ASleepingTaskShowsItsDeadline) {
  spindle::runtime rt(spindle::runtime_options{.workers = 1});
  const auto before = rt.core().clock().now();
  auto h = rt.spawn(sleeper());
  const task_info t = wait_until_suspended(rt, "sleeper");
  EXPECT_EQ(t.waiting_on.kind, spindle::wait_kind::sleep);
  const auto deadline_ns = std::chrono::nanoseconds(t.waiting_on.number);
  EXPECT_GE(deadline_ns, (before + 1h).time_since_epoch());
  EXPECT_LE(deadline_ns, (before + 1h + 60s).time_since_epoch());
  // Issue 15 (attack finding): the description showed the deadline as the clock's absolute
  // reading ("sleep until 37407860.182 ms"); it says how long is left, measured by the snapshot.
  EXPECT_GT(t.sleep_left_ns, std::int64_t((1h - 60s) / 1ns));
  EXPECT_LE(t.sleep_left_ns, std::int64_t(1h / 1ns));
  double left_ms = 0;
  ASSERT_EQ(std::sscanf(describe(t).c_str(), "sleep, %lf ms left", &left_ms), 1) << describe(t);
  EXPECT_GT(left_ms, 3'540'000.0) << describe(t);
  EXPECT_LE(left_ms, 3'600'000.0) << describe(t);
  const nlohmann::json j = json_task(rt, "sleeper");
  const std::string shown = j.at("waiting_on");
  ASSERT_EQ(std::sscanf(shown.c_str(), "sleep, %lf ms left", &left_ms), 1) << shown;
  EXPECT_GT(left_ms, 3'540'000.0) << shown;
  EXPECT_LE(left_ms, 3'600'000.0) << shown;
  EXPECT_GT(j.at("wait").at("left_ns").get<std::int64_t>(), std::int64_t((1h - 60s) / 1ns));
  h.cancel();
  EXPECT_THROW(join_bounded(std::move(h)), spindle::task_cancelled);
}

TEST(SnapshotTasks, ASleepPastItsDeadlineIsDescribedAsDue) {
  task_info t;
  t.state = task_state::suspended;
  t.waiting_on = {spindle::wait_kind::sleep, 0, 123'456'789};
  char text[96];
  t.sleep_left_ns = -2'000'000;
  spindle::describe_wait(t, text, sizeof text);
  EXPECT_STREQ(text, "sleep, due");
  t.sleep_left_ns = 12'500'000;
  spindle::describe_wait(t, text, sizeof text);
  EXPECT_STREQ(text, "sleep, 12.500 ms left");
  // A descriptor alone has no reading of the clock to measure against: no absolute number.
  spindle::describe_wait(t.waiting_on, text, sizeof text);
  EXPECT_STREQ(text, "sleep");
}

task<std::int32_t> named_pipe_reader(int fd) {
  spindle::set_task_name("reader");
  char byte = 0;
  spindle::core::io_operation op;
  op.opcode = spindle::core::io_opcode::read;
  op.fd = fd;
  op.buffer = &byte;
  op.length = 1;
  co_return co_await spindle::io::submit_and_wait(op);
}

class SnapshotIo : public ::testing::TestWithParam<spindle::core::io_backend> {};

TEST_P(SnapshotIo, ATaskReadingAnEmptyPipeShowsTheDescriptor) {
  spindle::runtime rt(spindle::runtime_options{.workers = 1, .io_backend = GetParam()});
  spindle::testing::fd_pair pipe(spindle::testing::nonblocking_pipe);
  ASSERT_GE(pipe.read_end, 0);
  auto h = rt.spawn(named_pipe_reader(pipe.read_end));
  const task_info t = wait_until_suspended(rt, "reader");
  EXPECT_EQ(t.waiting_on.kind, spindle::wait_kind::io);
  EXPECT_EQ(describe(t), "read fd " + std::to_string(pipe.read_end));
  ASSERT_EQ(::write(pipe.write_end, "x", 1), 1);
  EXPECT_EQ(join_bounded(std::move(h)), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, SnapshotIo,
                         ::testing::Values(spindle::core::io_backend::uring,
                                           spindle::core::io_backend::epoll),
                         spindle::testing::backend_name);

task<void> yields_a_lot(int times) {
  spindle::set_task_name("yielder");
  for (int i = 0; i < times; ++i) co_await spindle::yield_now();
}

TEST(SnapshotTasks, YieldsCountAsSelfWakesAndPolls) {
  spindle::runtime rt(spindle::runtime_options{.workers = 1});
  spindle::event go;
  auto h = rt.spawn([](spindle::event& go) -> task<void> {
    co_await yields_a_lot(50);
    spindle::set_task_name("yielded");
    co_await go.wait();
  }(go));
  const task_info t = wait_until_suspended(rt, "yielded");
  EXPECT_GE(t.polls, 51u);
  EXPECT_GE(t.self_wakes, 50u);
  EXPECT_GE(t.wakes, t.self_wakes);
  EXPECT_GE(t.age_ns, t.busy_ns);
  go.set();
  join_bounded(std::move(h));
}

TEST(SnapshotTasks, LongNamesAreCutAndKept) {
  spindle::runtime rt(spindle::runtime_options{.workers = 1});
  spindle::event go;
  const std::string long_name(100, 'n');
  auto h = rt.spawn_named(long_name, [](spindle::event& go) -> task<void> { co_await go.wait(); }(go));
  const task_info t = wait_until_suspended(rt, std::string(spindle::task_name_capacity, 'n'));
  EXPECT_EQ(std::strlen(t.name), spindle::task_name_capacity);
  go.set();
  join_bounded(std::move(h));
}

}  // namespace
