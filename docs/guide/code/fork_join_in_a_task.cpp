// Async code feeding a parallel computation: receive the data, then fork-join over it.
#include <spindle/spindle.hpp>

#include <functional>
#include <optional>
#include <utility>
#include <vector>

spindle::task<void> produce(spindle::channel<std::vector<int>>& batches) {
  for (int b = 0; b < 4; ++b) {
    std::vector<int> batch(10'000, b + 1);
    co_await batches.send(std::move(batch));
  }
  batches.close();
}

spindle::task<long> consume(spindle::channel<std::vector<int>>& batches) {
  long total = 0;
  for (;;) {
    std::optional<std::vector<int>> batch = co_await batches.receive();
    if (!batch) break;
    // A synchronous call: this worker is busy until the reduction is done, and other
    // workers help with it. Keep such calls short, or they delay this executor's tasks.
    total += spindle::parallel_reduce(*batch, 0L, [](int v) { return long(v); }, std::plus<long>{});
  }
  co_return total;
}

spindle::task<long> demo() {
  spindle::channel<std::vector<int>> batches(2);
  auto producer = spindle::spawn(produce(batches));
  const long total = co_await consume(batches);
  co_await std::move(producer);
  co_return total;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) == 10'000L * (1 + 2 + 3 + 4) ? 0 : 1;
}
