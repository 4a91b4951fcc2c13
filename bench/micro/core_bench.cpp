// Micro-benchmarks of the scheduling primitives: local queue push/pop/steal, parker
// unpark/wait, spawn+join through the runtime.
#include <benchmark/benchmark.h>

#include <atomic>
#include <thread>
#include <vector>

#include "spindle/core/local_queue.hpp"
#include "spindle/core/parker.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/spindle.hpp"

namespace {

using queue = spindle::core::local_queue<spindle::core::runnable, 256>;
auto drop_overflow = [](spindle::core::runnable**, std::uint32_t) {};

void BM_LocalQueuePushPop(benchmark::State& state) {
  queue q;
  spindle::core::runnable item(nullptr);
  for (auto _ : state) {
    q.push(&item, drop_overflow);
    benchmark::DoNotOptimize(q.pop());
  }
}
BENCHMARK(BM_LocalQueuePushPop);

void BM_LocalQueueStealHalf(benchmark::State& state) {
  queue victim, thief;
  std::vector<spindle::core::runnable> items(128, spindle::core::runnable(nullptr));
  for (auto _ : state) {
    state.PauseTiming();
    for (auto& item : items) victim.push(&item, drop_overflow);
    state.ResumeTiming();
    benchmark::DoNotOptimize(victim.steal_into(thief));
    state.PauseTiming();
    while (victim.pop() != nullptr) {}
    while (thief.pop() != nullptr) {}
    state.ResumeTiming();
  }
}
BENCHMARK(BM_LocalQueueStealHalf);

// Unpark before wait: the notification is consumed without a system call.
void BM_ParkerNotifiedWait(benchmark::State& state) {
  spindle::core::futex_parker parker;
  for (auto _ : state) {
    parker.unpark();
    parker.wait(std::nullopt);
  }
}
BENCHMARK(BM_ParkerNotifiedWait);

// A real cross-thread wake-up: ping-pong between two parkers.
void BM_ParkerPingPong(benchmark::State& state) {
  spindle::core::futex_parker ping, pong;
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    for (;;) {
      ping.wait(std::nullopt);
      if (stop.load(std::memory_order_acquire)) return;
      pong.unpark();
    }
  });
  for (auto _ : state) {
    ping.unpark();
    pong.wait(std::nullopt);
  }
  stop.store(true, std::memory_order_release);
  ping.unpark();
  partner.join();
}
BENCHMARK(BM_ParkerPingPong)->UseRealTime();

spindle::task<int> leaf() { co_return 1; }

spindle::task<long> spawn_many(int count) {
  long sum = 0;
  for (int i = 0; i < count; ++i) sum += co_await spindle::spawn(leaf());
  co_return sum;
}

// Spawn + join of a trivial task from inside the runtime, per task.
void BM_SpawnJoin(benchmark::State& state) {
  spindle::runtime rt({.workers = 1});
  constexpr int batch = 10000;
  for (auto _ : state) benchmark::DoNotOptimize(rt.block_on(spawn_many(batch)));
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_SpawnJoin)->UseRealTime();

// Spawn from a thread the runtime does not own, then block on the result.
void BM_ForeignSpawnJoin(benchmark::State& state) {
  spindle::runtime rt({.workers = 1});
  for (auto _ : state) benchmark::DoNotOptimize(rt.block_on(leaf()));
}
BENCHMARK(BM_ForeignSpawnJoin)->UseRealTime();

}  // namespace
