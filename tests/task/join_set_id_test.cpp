// join_set::next_with_id(): every outcome (value, exception, cancellation, void) comes out once,
// with the id spawn() returned for its child.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::task;
using spindle::task_id;
using spindle::task_status;
using namespace spindle::testing;

struct task_id_less {
  bool operator()(const task_id& a, const task_id& b) const noexcept {
    return a.index != b.index ? a.index < b.index : a.serial < b.serial;
  }
};

task<int> identified_child(int value) {
  for (int i = 0; i < value % 3; ++i) co_await spindle::yield_now();
  if (value % 5 == 4) throw boom();
  co_return value;
}

task<int> identified_sleeper() {
  co_await spindle::sleep_for(std::chrono::hours(1));
  co_return -1;
}

// Returns the number of outcomes matched to their spawn by id (values, exceptions, cancelled).
task<int> match_outcomes_by_id() {
  spindle::join_set<int> set;
  std::map<task_id, int, task_id_less> spawned;
  for (int i = 0; i < 20; ++i) spawned.emplace(set.spawn(identified_child(i)), i);
  const task_id sleeper = set.spawn(identified_sleeper());
  int matched = 0;
  bool sleeper_seen = false;
  for (;;) {
    if (set.size() == 1) set.cancel_all();  // only the sleeper is left
    std::optional<spindle::joined_child<int>> done = co_await set.next_with_id();
    if (!done) break;
    if (done->id == sleeper) {
      EXPECT_EQ(done->status, task_status::cancelled);
      EXPECT_THROW(done->get(), spindle::task_cancelled);
      sleeper_seen = true;
      continue;
    }
    auto it = spawned.find(done->id);
    EXPECT_NE(it, spawned.end());
    if (it == spawned.end()) continue;
    const int value = it->second;
    spawned.erase(it);  // each id comes out once
    if (value % 5 == 4) {
      EXPECT_EQ(done->status, task_status::failed);
      EXPECT_THROW(done->get(), boom);
    } else {
      EXPECT_EQ(done->status, task_status::completed);
      EXPECT_EQ(done->get(), value);
    }
    ++matched;
  }
  EXPECT_TRUE(sleeper_seen);
  EXPECT_TRUE(spawned.empty());
  co_return matched;
}

TEST(JoinSetId, EveryOutcomeComesWithItsChildsId) {
  spindle::runtime rt({.workers = 2});
  EXPECT_EQ(rt.block_on(match_outcomes_by_id()), 20);
}

task<void> identified_void() { co_await spindle::yield_now(); }

task<bool> void_child_with_id() {
  spindle::join_set<void> set;
  const task_id id = set.spawn(identified_void());
  std::optional<spindle::joined_child<void>> done = co_await set.next_with_id();
  if (!done || !(done->id == id)) co_return false;
  done->get();
  co_return !(co_await set.next_with_id()).has_value();
}

TEST(JoinSetId, VoidChildren) {
  spindle::runtime rt({.workers = 2});
  EXPECT_TRUE(rt.block_on(void_child_with_id()));
}

}  // namespace
