// A producer and a consumer connected by a bounded channel.
#include <spindle/spindle.hpp>

#include <optional>
#include <utility>

spindle::task<long> sum_of_squares(spindle::channel<int>& numbers) {
  long sum = 0;
  for (;;) {
    std::optional<int> n = co_await numbers.receive();
    if (!n) break;  // closed, and every value received
    sum += long(*n) * *n;
  }
  co_return sum;
}

spindle::task<long> produce_and_sum() {
  spindle::channel<int> numbers(64);  // bounded: send() waits while 64 values are queued
  auto consumer = spindle::spawn(sum_of_squares(numbers));
  for (int i = 1; i <= 1000; ++i) co_await numbers.send(i);
  numbers.close();
  co_return co_await std::move(consumer);  // the consumer's result
}

int main() {
  spindle::runtime rt;  // one executor (worker thread) per hardware thread
  const long total = rt.block_on(produce_and_sum());
  return total == 333833500 ? 0 : 1;
}
