// How a fork notices the heartbeat (docs/design/fork-join.md, "Noticing the heartbeat"): the
// cost each option adds to a fork, measured on fib(27) with a fork at every call and nothing
// else, and how close to the 100 us quantum each one actually notices it.
//
//   none       no check: the floor.
//   countdown  a per-thread counter decremented at every fork; at zero, read the clock and
//              recalibrate so the reads come about four times per quantum (what spindle does).
//   clock      read std::chrono::steady_clock at every fork.
//   tsc        read the time-stamp counter (rdtsc) at every fork (x86 only).
//   flag       a ticker thread sets a per-worker flag every quantum; every fork loads it.
//   ping       no check at forks: a pinger thread sends the worker a signal every quantum (TPAL's
//              ping thread; spindle's runtime monitor pings a worker that has not checked the clock
//              for two quanta, fork_state.hpp "Pings"); the handler notices.
// And what a fork's frame-stack push and pop cost (the countdown checked too):
//   frames         plain stores (spindle before pings);
//   frames_signal  relaxed atomics and signal fences, so a ping handler on the same thread reads
//                  a consistent stack (spindle with pings).
// Counters: `late_us` is the mean delay between a quantum's end and the fork that noticed it
// (ping: between the signal's sending and its handler).
#include <benchmark/benchmark.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace {

using steady = std::chrono::steady_clock;
constexpr std::int64_t quantum_ns = 100'000;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
      .count();
}

struct detector_stats {
  std::int64_t noticed = 0;
  std::int64_t total_late_ns = 0;
};

struct no_check {
  bool due() { return false; }
};

struct countdown_check {
  std::int64_t countdown = 1, interval = 1, last = now_ns(), next = now_ns() + quantum_ns;
  detector_stats* stats;
  bool due() {
    if (--countdown > 0) [[likely]] return false;
    const std::int64_t now = now_ns();
    const std::int64_t elapsed = now - last;
    last = now;
    constexpr std::int64_t target = quantum_ns / 4;
    if (elapsed < target / 2 && interval < (1 << 20)) interval *= 2;
    else if (elapsed > target * 2 && interval > 1) interval /= 2;
    countdown = interval;
    if (now < next) return false;
    stats->noticed++;
    stats->total_late_ns += now - next;
    next = now + quantum_ns;
    return true;
  }
};

struct clock_check {
  std::int64_t next = now_ns() + quantum_ns;
  detector_stats* stats;
  bool due() {
    const std::int64_t now = now_ns();
    if (now < next) [[likely]] return false;
    stats->noticed++;
    stats->total_late_ns += now - next;
    next = now + quantum_ns;
    return true;
  }
};

#if defined(__x86_64__)
struct tsc_check {
  std::uint64_t next, ticks_per_quantum;
  detector_stats* stats;
  bool due() {
    const std::uint64_t now = __rdtsc();
    if (now < next) [[likely]] return false;
    stats->noticed++;
    next = now + ticks_per_quantum;
    return true;
  }
};
#endif

struct flag_check {
  std::atomic<bool>* flag;
  detector_stats* stats;
  bool due() {
    if (!flag->load(std::memory_order_relaxed)) [[likely]] return false;
    flag->store(false, std::memory_order_relaxed);
    stats->noticed++;
    return true;
  }
};

template <class Check>
__attribute__((noinline)) long fib(int n, Check& check) {
  if (n < 2) return n;
  if (check.due()) [[unlikely]] benchmark::ClobberMemory();  // "promote"
  return fib(n - 1, check) + fib(n - 2, check);
}

template <class Check>
void run(benchmark::State& state, Check& check, detector_stats& stats) {
  long forks = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(fib(27, check));
    forks += 317810;  // fib(27) internal nodes
  }
  state.counters["ns_per_fork"] =
      benchmark::Counter(double(forks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  if (stats.noticed > 0) {
    state.counters["late_us"] = double(stats.total_late_ns) / double(stats.noticed) / 1000.0;
  }
}

void BM_HeartbeatNone(benchmark::State& state) {
  no_check check;
  detector_stats stats;
  run(state, check, stats);
}
BENCHMARK(BM_HeartbeatNone);

void BM_HeartbeatCountdown(benchmark::State& state) {
  detector_stats stats;
  countdown_check check{.stats = &stats};
  run(state, check, stats);
}
BENCHMARK(BM_HeartbeatCountdown);

void BM_HeartbeatClockEveryFork(benchmark::State& state) {
  detector_stats stats;
  clock_check check{.stats = &stats};
  run(state, check, stats);
}
BENCHMARK(BM_HeartbeatClockEveryFork);

#if defined(__x86_64__)
void BM_HeartbeatTscEveryFork(benchmark::State& state) {
  detector_stats stats;
  // Calibrate the TSC against the steady clock over 10 ms.
  const std::uint64_t tsc0 = __rdtsc();
  const std::int64_t t0 = now_ns();
  while (now_ns() - t0 < 10'000'000) {
  }
  const double ticks_per_ns = double(__rdtsc() - tsc0) / double(now_ns() - t0);
  const auto per_quantum = std::uint64_t(ticks_per_ns * quantum_ns);
  tsc_check check{__rdtsc() + per_quantum, per_quantum, &stats};
  run(state, check, stats);
}
BENCHMARK(BM_HeartbeatTscEveryFork);
#endif

void BM_HeartbeatTickerFlag(benchmark::State& state) {
  detector_stats stats;
  std::atomic<bool> flag{false}, stop{false};
  std::thread ticker([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(quantum_ns));
      flag.store(true, std::memory_order_relaxed);
    }
  });
  flag_check check{&flag, &stats};
  run(state, check, stats);
  stop = true;
  ticker.join();
  state.counters["heartbeats_per_s"] = benchmark::Counter(double(stats.noticed),
                                                          benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HeartbeatTickerFlag)->UseRealTime();

// --- frame stacks ----------------------------------------------------------------------------

struct frame {
  void* promote = nullptr;
  std::uint64_t epoch = 0;
  std::atomic<void*> published{nullptr};
};

// The frame stack as spindle kept it before pings: plain stores.
struct plain_stack {
  frame** top = slots;
  frame* slots[64];
  std::uint64_t epoch = 2;
  frame** push(frame* f) {
    frame** slot = top;
    *slot = f;
    top = slot + 1;
    return slot;
  }
  void pop(frame** slot) { top = slot; }
  std::uint64_t current_epoch() const { return epoch; }
};

// ... and with pings: a handler on the same thread may read it between any two instructions.
struct signal_safe_stack {
  std::atomic<frame**> top{slots};  // first, as in fork_thread_state
  frame* slots[64];
  std::atomic<std::uint64_t> epoch{2};
  frame** push(frame* f) {
    frame** slot = top.load(std::memory_order_relaxed);
    *slot = f;
    std::atomic_signal_fence(std::memory_order_release);
    top.store(slot + 1, std::memory_order_relaxed);
    return slot;
  }
  void pop(frame** slot) {
    top.store(slot, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  std::uint64_t current_epoch() const { return epoch.load(std::memory_order_relaxed); }
};

template <class Stack>
__attribute__((noinline)) long fib_framed(int n, Stack& stack, countdown_check& check) {
  if (n < 2) return n;
  frame f;
  f.epoch = stack.current_epoch();
  frame** slot = stack.push(&f);
  if (check.due()) [[unlikely]] benchmark::ClobberMemory();
  const long left = fib_framed(n - 1, stack, check);
  stack.pop(slot);
  if (f.published.load(std::memory_order_relaxed) != nullptr) [[unlikely]] {
    benchmark::ClobberMemory();
  }
  return left + fib_framed(n - 2, stack, check);
}

template <class Stack>
void run_framed(benchmark::State& state) {
  detector_stats stats;
  countdown_check check{.stats = &stats};
  Stack stack;
  long forks = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(fib_framed(27, stack, check));
    forks += 317810;
  }
  state.counters["ns_per_fork"] =
      benchmark::Counter(double(forks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_HeartbeatCountdownFrames(benchmark::State& state) { run_framed<plain_stack>(state); }
BENCHMARK(BM_HeartbeatCountdownFrames);

void BM_HeartbeatCountdownFramesSignalSafe(benchmark::State& state) {
  run_framed<signal_safe_stack>(state);
}
BENCHMARK(BM_HeartbeatCountdownFramesSignalSafe);

// --- ping --------------------------------------------------------------------------------------

std::atomic<std::int64_t> ping_sent_ns{0};
std::atomic<std::int64_t> pings_noticed{0};
std::atomic<std::int64_t> ping_total_late_ns{0};

void on_ping(int) {
  // relaxed: same-thread bookkeeping (the sender's time is a sample).
  const std::int64_t sent = ping_sent_ns.load(std::memory_order_relaxed);
  if (sent != 0) {
    ping_total_late_ns.fetch_add(now_ns() - sent, std::memory_order_relaxed);
    pings_noticed.fetch_add(1, std::memory_order_relaxed);
  }
}

void BM_HeartbeatPingSignal(benchmark::State& state) {
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = &on_ping;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGURG, &action, &previous);
  pings_noticed = 0;
  ping_total_late_ns = 0;
  const pthread_t worker = pthread_self();
  std::atomic<bool> stop{false};
  std::thread pinger([&] {
    auto next = steady::now();
    while (!stop.load(std::memory_order_relaxed)) {
      next += std::chrono::nanoseconds(quantum_ns);
      std::this_thread::sleep_until(next);
      ping_sent_ns.store(now_ns(), std::memory_order_relaxed);
      pthread_kill(worker, SIGURG);
    }
  });
  no_check check;
  detector_stats stats;
  run(state, check, stats);
  stop = true;
  pinger.join();
  sigaction(SIGURG, &previous, nullptr);
  state.counters["heartbeats_per_s"] =
      benchmark::Counter(double(pings_noticed.load()), benchmark::Counter::kIsRate);
  if (pings_noticed.load() > 0) {
    state.counters["late_us"] =
        double(ping_total_late_ns.load()) / double(pings_noticed.load()) / 1000.0;
  }
}
BENCHMARK(BM_HeartbeatPingSignal)->UseRealTime();

}  // namespace
