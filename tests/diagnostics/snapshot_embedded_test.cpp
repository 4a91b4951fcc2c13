// The embedded executor's snapshot (SPEC G1): into caller-provided storage, with no thread and
// no allocation, from the ticking thread (inside a tick) or any other.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "spindle/spindle.hpp"
#include "spindle/task/snapshot.hpp"
#include "support/test_host.hpp"

// Allocations made on a thread while it counts them (replaces the global operator new for this
// test binary; every other thread and every other moment is left alone).
namespace {
thread_local bool counting_allocations = false;
std::atomic<std::size_t> counted_allocations{0};
void* allocate(std::size_t size) {
  if (counting_allocations) counted_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's buffer): every form must pair with the free above,
// or AddressSanitizer reports an alloc-dealloc mismatch.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return std::malloc(size ? size : 1); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return std::malloc(size ? size : 1); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using spindle::task;
using spindle::task_info;

struct allocation_count {
  allocation_count() {
    counted_allocations.store(0);
    counting_allocations = true;
  }
  ~allocation_count() { counting_allocations = false; }
  std::size_t made() const { return counted_allocations.load(); }
};

task<int> receive_named(spindle::channel<int>& ch, const char* name) {
  spindle::set_task_name(name);
  co_return (co_await ch.receive()).value_or(-1);
}

TEST(SnapshotEmbedded, FillsCallerStorageWithoutAllocating) {
  spindle::testing::test_host host;
  spindle::embed::embedded_executor executor(host);
  spindle::channel<int> ch(2);
  auto a = executor.spawn(receive_named(ch, "left"));
  const std::uint32_t spawn_line = __LINE__ + 1;
  auto b = executor.spawn(receive_named(ch, "right"));
  host.run_until_idle(executor);

  std::array<task_info, 4> storage;
  std::size_t found = 0;
  {
    allocation_count count;
    found = executor.snapshot(storage);
    EXPECT_EQ(count.made(), 0u);
  }
  ASSERT_EQ(found, 2u);
  const task_info* right = nullptr;
  for (std::size_t i = 0; i < found; ++i) {
    if (std::string_view(storage[i].name) == "right") right = &storage[i];
  }
  ASSERT_NE(right, nullptr);
  EXPECT_EQ(right->state, spindle::task_state::suspended);
  EXPECT_EQ(right->waiting_on.kind, spindle::wait_kind::channel_receive);
  EXPECT_EQ(right->waiting_on.object, ch.diagnostic_id());
  EXPECT_EQ(right->line, spawn_line);

  // Too little storage: the count says how many there were.
  std::array<task_info, 1> small;
  EXPECT_EQ(executor.snapshot(small), 2u);

  // The JSON form (allocates; for a server, not for a tick).
  const nlohmann::json doc = nlohmann::json::parse(executor.snapshot_json());
  EXPECT_EQ(doc.at("tasks").size(), 2u);
  EXPECT_EQ(doc.at("executors")[0].at("kind"), "embedded");

  ASSERT_TRUE(ch.try_send(1));
  ASSERT_TRUE(ch.try_send(2));
  host.run_until_idle(executor);
  EXPECT_TRUE(a.is_finished());
  EXPECT_TRUE(b.is_finished());
  EXPECT_EQ(executor.snapshot(storage), 0u);
}

// A task looks at its own executor from inside the tick: itself running, the other suspended.
task<std::size_t> look_inside(spindle::embed::embedded_executor& executor,
                              std::array<task_info, 8>& storage, std::size_t& allocations) {
  spindle::set_task_name("looker");
  allocation_count count;
  const std::size_t found = executor.snapshot(storage);
  allocations = count.made();
  co_return found;
}

TEST(SnapshotEmbedded, ATaskCanSnapshotItsOwnExecutorInsideATick) {
  spindle::testing::test_host host;
  spindle::embed::embedded_executor executor(host);
  spindle::event never;
  auto waiter = executor.spawn([](spindle::event& e) -> task<void> { co_await e.wait(); }(never));
  host.run_until_idle(executor);
  std::array<task_info, 8> storage;
  std::size_t allocations = 99;
  auto looker = executor.spawn(look_inside(executor, storage, allocations));
  host.run_until_idle(executor);
  ASSERT_TRUE(looker.is_finished());
  const std::size_t found = looker.join();
  EXPECT_EQ(found, 2u);
  EXPECT_EQ(allocations, 0u);
  bool saw_running_self = false;
  bool saw_waiter = false;
  for (std::size_t i = 0; i < found; ++i) {
    if (std::string_view(storage[i].name) == "looker") {
      saw_running_self = storage[i].state == spindle::task_state::running;
    } else {
      saw_waiter = storage[i].waiting_on.kind == spindle::wait_kind::event;
    }
  }
  EXPECT_TRUE(saw_running_self);
  EXPECT_TRUE(saw_waiter);
  waiter.cancel();
  host.run_until_idle(executor);
}

}  // namespace
