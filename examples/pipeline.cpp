// A small tour of the foundation: a producer/consumer pipeline over a bounded channel, a
// join_set of workers, a timeout, and cancellation.
//
//   build/release/examples/spindle-example-pipeline
#include <cstdio>

#include "spindle/spindle.hpp"

using namespace std::chrono_literals;

namespace {

spindle::task<void> produce(spindle::channel<int>& numbers, int count) {
  for (int i = 1; i <= count; ++i) co_await numbers.send(i);  // waits while the channel is full
  numbers.close();
}

spindle::task<long> consume(spindle::channel<int>& numbers) {
  long sum = 0;
  while (auto n = co_await numbers.receive()) sum += long(*n) * *n;
  co_return sum;
}

spindle::task<int> slow_answer() {
  co_await spindle::sleep_for(10s);
  co_return 42;
}

spindle::task<int> program() {
  spindle::channel<int> numbers(64);
  auto producer = spindle::spawn(produce(numbers, 100000));
  spindle::join_set<long> consumers;
  for (int i = 0; i < 4; ++i) consumers.spawn(consume(numbers));
  long total = 0;
  for (long part : co_await consumers.join_all()) total += part;
  co_await std::move(producer);
  std::printf("sum of squares 1..100000 = %ld\n", total);

  try {
    co_await spindle::with_timeout(std::chrono::milliseconds(20), slow_answer());
  } catch (const spindle::timeout_error&) {
    std::printf("slow_answer timed out after 20 ms, as it should\n");
  }

  auto sleeper = spindle::spawn(slow_answer());
  sleeper.cancel();
  try {
    co_await std::move(sleeper);
  } catch (const spindle::task_cancelled&) {
    std::printf("cancelled task reported task_cancelled\n");
  }
  co_return 0;
}

}  // namespace

int main() {
  spindle::runtime runtime;  // one executor per hardware thread
  return runtime.block_on(program());
}
