// for_each_concurrent and parallel_consume: an async source feeding work, at most N in flight.
#include <spindle/spindle.hpp>

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

spindle::task<void> produce(spindle::channel<std::string>& texts) {
  for (int i = 0; i < 1000; ++i) {
    std::string text = "one two  three\nfour ";
    co_await texts.send(std::move(text));  // waits while the consumer is at its limit
  }
  texts.close();
}

std::size_t count_words(std::string text) {  // CPU work: runs on whichever worker is free
  std::size_t words = 0;
  bool after_space = true;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n';
    words += after_space && !space;
    after_space = space;
  }
  return words;
}

spindle::task<bool> program() {
  // parallel_consume: map each item as it arrives, fold the results (order-free: use + or max).
  spindle::channel<std::string> texts(8);
  auto producer = spindle::spawn(produce(texts));
  const std::size_t words = co_await spindle::parallel_consume(
      texts, 4, std::size_t{0}, count_words, [](std::size_t a, std::size_t b) { return a + b; });
  co_await std::move(producer);

  // for_each_concurrent: an async function per item, never more than 3 running at once.
  std::vector<int> ids(20);
  std::atomic<int> running{0}, most{0}, done{0};
  co_await spindle::for_each_concurrent(ids, 3, [&](int) -> spindle::task<void> {
    int now = ++running;
    for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);) {}
    co_await spindle::yield_now();
    --running;
    ++done;
  });
  co_return words == 4000 && done == 20 && most <= 3;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(program()) ? 0 : 1;
}
