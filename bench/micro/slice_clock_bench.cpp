// Which clock the executor reads after every runnable to bound its service interval in time
// (docs/design/time-slicing.md, "The clock"). Each benchmark is the per-runnable cost of one
// reading plus the comparison against the last service; the loop body stands for a runnable.
//
//   steady          std::chrono::steady_clock::now() (vDSO clock_gettime(CLOCK_MONOTONIC)).
//   monotonic_coarse clock_gettime(CLOCK_MONOTONIC_COARSE): cheap, but its resolution is the
//                   kernel tick (reported as `resolution_us`), often 4 ms: too coarse for 1 ms.
//   tsc             rdtsc (x86 only; needs a calibration to nanoseconds, not shown).
//   monitor         a relaxed load of a word a monitor thread rewrites every 250 us (what
//                   spindle does: runtime_monitor.hpp); resolution = the monitor's tick.
#include <benchmark/benchmark.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace {

constexpr std::uint64_t interval_ns = 1'000'000;

std::uint64_t steady_ns() {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count());
}

std::uint64_t coarse_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return std::uint64_t(t.tv_sec) * 1'000'000'000u + std::uint64_t(t.tv_nsec);
}

// One "runnable" and the service check after it; `services` keeps the branch honest.
template <class Now>
void run(benchmark::State& state, Now now) {
  std::uint64_t last = now();
  std::uint64_t services = 0;
  for (auto _ : state) {
    const std::uint64_t t = now();
    if (t - last >= interval_ns) {
      last = t;
      ++services;
    }
    benchmark::DoNotOptimize(services);
  }
  state.counters["services"] = double(services);
}

void BM_SliceClock_steady(benchmark::State& state) { run(state, steady_ns); }

void BM_SliceClock_monotonic_coarse(benchmark::State& state) {
  timespec resolution;
  clock_getres(CLOCK_MONOTONIC_COARSE, &resolution);
  run(state, coarse_ns);
  state.counters["resolution_us"] = double(resolution.tv_nsec) / 1000.0;
}

#if defined(__x86_64__)
void BM_SliceClock_tsc(benchmark::State& state) {
  run(state, [] { return std::uint64_t(__rdtsc()); });
}
BENCHMARK(BM_SliceClock_tsc);
#endif

void BM_SliceClock_monitor(benchmark::State& state) {
  static std::atomic<std::uint64_t> coarse{steady_ns()};
  std::atomic<bool> stop{false};
  std::thread monitor([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      coarse.store(steady_ns(), std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::microseconds(250));
    }
  });
  run(state, [] { return coarse.load(std::memory_order_relaxed); });
  stop.store(true);
  monitor.join();
}

BENCHMARK(BM_SliceClock_steady);
BENCHMARK(BM_SliceClock_monotonic_coarse);
BENCHMARK(BM_SliceClock_monitor);

}  // namespace
