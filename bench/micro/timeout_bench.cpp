// Micro-benchmarks of with_timeout's cost per call (docs/design/time.md, "Timeouts over any
// awaitable"): the same waiting operation (one yield to the executor) awaited plainly, inside
// with_timeout over a task (a spawned child and its join), and inside with_timeout over the
// awaitable itself (a cancellation scope of the caller, no child). The timeout never fires; its
// timer is armed and disarmed on every call. Per call = time per item; subtract the plain line
// for the overhead. One worker: no stealing noise.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>

#include "spindle/spindle.hpp"

namespace {

using namespace std::chrono_literals;

constexpr int calls_per_run = 10000;

spindle::task<void> one_yield() { co_await spindle::yield_now(); }
spindle::task<int> ready_value() { co_return 1; }

spindle::task<void> plain_yields(int calls) {
  for (int i = 0; i < calls; ++i) co_await spindle::yield_now();
}
spindle::task<void> yields_in_child_timeouts(int calls) {
  for (int i = 0; i < calls; ++i) co_await spindle::with_timeout(1s, one_yield());
}
spindle::task<void> yields_in_scoped_timeouts(int calls) {
  for (int i = 0; i < calls; ++i) co_await spindle::with_timeout(1s, spindle::yield_now());
}
// Operands ready at once: a finished task (still spawned) / a channel holding an item.
spindle::task<void> ready_child_timeouts(int calls) {
  for (int i = 0; i < calls; ++i) benchmark::DoNotOptimize(co_await spindle::with_timeout(1s, ready_value()));
}
spindle::task<void> ready_scoped_timeouts(spindle::channel<int>* ch, int calls) {
  for (int i = 0; i < calls; ++i) {
    int item = i;
    (void)ch->try_send(std::move(item));
    benchmark::DoNotOptimize(co_await spindle::with_timeout(1s, ch->receive()));
  }
}

template <class Body>
void run_calls(benchmark::State& state, Body body) {
  spindle::runtime rt({.workers = 1});
  for (auto _ : state) rt.spawn(body()).join();
  state.SetItemsProcessed(state.iterations() * calls_per_run);
}

void BM_Timeout_PlainYield(benchmark::State& state) {
  run_calls(state, [] { return plain_yields(calls_per_run); });
}
void BM_Timeout_TaskOverloadYield(benchmark::State& state) {
  run_calls(state, [] { return yields_in_child_timeouts(calls_per_run); });
}
void BM_Timeout_AwaitableOverloadYield(benchmark::State& state) {
  run_calls(state, [] { return yields_in_scoped_timeouts(calls_per_run); });
}
void BM_Timeout_TaskOverloadReady(benchmark::State& state) {
  run_calls(state, [] { return ready_child_timeouts(calls_per_run); });
}
void BM_Timeout_AwaitableOverloadReady(benchmark::State& state) {
  spindle::channel<int> ch(1);
  run_calls(state, [&ch] { return ready_scoped_timeouts(&ch, calls_per_run); });
}
BENCHMARK(BM_Timeout_PlainYield)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Timeout_TaskOverloadYield)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Timeout_AwaitableOverloadYield)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Timeout_TaskOverloadReady)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Timeout_AwaitableOverloadReady)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
