// Micro-benchmarks of the timing wheel and the timer service: the cost per timer of the two
// lifetimes a timer has: cancelled before it fires (a timeout whose operation finished first),
// or fired.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "spindle/core/clock.hpp"
#include "spindle/core/timer_wheel.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::clock_duration;
using spindle::clock_time;
using spindle::core::timer_entry;
using spindle::core::timer_service;
using spindle::core::timer_wheel;

void count_fire(timer_entry*) noexcept {}

struct bench_timer : timer_entry {
  bench_timer() : timer_entry(&count_fire) {}
};

constexpr clock_time origin = clock_time{} + 1h;

std::vector<clock_time> random_deadlines(std::size_t count, clock_duration range) {
  std::mt19937_64 random(42);
  std::uniform_int_distribution<std::int64_t> offset(0, range.count());
  std::vector<clock_time> deadlines(count);
  for (auto& deadline : deadlines) deadline = origin + clock_duration(offset(random));
  return deadlines;
}

// Deadlines spread over 10 s (levels 0 to 2); every timer is removed before it fires.
void BM_TimerWheel_InsertRemove(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const std::vector<clock_time> deadlines = random_deadlines(count, 10s);
  std::vector<bench_timer> timers(count);
  timer_wheel wheel(origin);
  for (auto _ : state) {
    for (std::size_t i = 0; i < count; ++i) wheel.insert(timers[i], deadlines[i]);
    for (std::size_t i = 0; i < count; ++i) wheel.remove(timers[i]);
    benchmark::DoNotOptimize(wheel.size());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BM_TimerWheel_InsertRemove)->Arg(1 << 10)->Arg(1 << 14)->Arg(1 << 17);

// Deadlines spread over 1 s, expired the way an executor does: one expire per millisecond.
void BM_TimerWheel_InsertExpireEveryMillisecond(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const std::vector<clock_time> deadlines = random_deadlines(count, 1s);
  std::vector<bench_timer> timers(count);
  for (auto _ : state) {
    timer_wheel wheel(origin);
    for (std::size_t i = 0; i < count; ++i) wheel.insert(timers[i], deadlines[i]);
    std::size_t expired = 0;
    for (clock_time now = origin; expired < count; now += 1ms)
      expired += wheel.expire(now, [](timer_entry& entry) { benchmark::DoNotOptimize(&entry); });
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BM_TimerWheel_InsertExpireEveryMillisecond)->Arg(1 << 10)->Arg(1 << 14)->Arg(1 << 17);

// Deadlines spread over 1 h (levels 0 to 3), all expired by one call: the cost of cascading.
void BM_TimerWheel_InsertExpireAtOnce(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const std::vector<clock_time> deadlines = random_deadlines(count, 1h);
  std::vector<bench_timer> timers(count);
  for (auto _ : state) {
    timer_wheel wheel(origin);
    for (std::size_t i = 0; i < count; ++i) wheel.insert(timers[i], deadlines[i]);
    benchmark::DoNotOptimize(wheel.expire(origin + 2h, [](timer_entry& entry) { benchmark::DoNotOptimize(&entry); }));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BM_TimerWheel_InsertExpireAtOnce)->Arg(1 << 10)->Arg(1 << 14)->Arg(1 << 17);

// The service adds one uncontended mutex round trip per operation.
void BM_TimerService_ArmDisarm(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const std::vector<clock_time> deadlines = random_deadlines(count, 10s);
  std::vector<bench_timer> timers(count);
  spindle::manual_clock clock(origin);
  timer_service service(clock);
  for (auto _ : state) {
    for (std::size_t i = 0; i < count; ++i) service.arm(timers[i], deadlines[i]);
    for (std::size_t i = 0; i < count; ++i) benchmark::DoNotOptimize(service.disarm(timers[i]));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BM_TimerService_ArmDisarm)->Arg(1 << 10)->Arg(1 << 14);

}  // namespace
