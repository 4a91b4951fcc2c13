// Runtime options, an executor added while running, placement, and yielding in long loops.
#include <spindle/spindle.hpp>

#include <chrono>
#include <cstdint>

using namespace std::chrono_literals;

spindle::task<long> long_computation(long n) {
  long sum = 0;
  for (long i = 1; i <= n; ++i) {
    sum += i;
    // A loop that never awaits holds its executor: yield now and then so its
    // queued tasks, timers and I/O get their turn.
    if (i % 100'000 == 0) co_await spindle::yield_now();
  }
  co_return sum;
}

int main() {
  spindle::runtime_options options;
  options.workers = 2;                             // default 0: one per hardware thread
  options.budget = 64;                             // runnables between timer/I/O checks
  options.service_interval = 1ms;                  // ... or this much busy time
  options.affinity = spindle::core::affinity_policy::none;  // or SPINDLE_AFFINITY=...
  spindle::runtime rt(options);

  const std::uint32_t added = rt.add_executor();  // grows while running
  auto on_added = rt.spawn_on(added, long_computation(1'000'000));  // runs there first
  const long sum = on_added.join();
  return rt.executor_count() == 3 && sum == 500'000'500'000L ? 0 : 1;
}
