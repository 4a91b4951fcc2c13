// Fork-join from a plain main(): generate, map, sort and reduce a vector on the runtime's
// workers, then check each step against the serial standard library.
//
//   spindle-example-parallel [elements]   (default 10 million)
#include <spindle/spindle.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <ranges>
#include <vector>

namespace {

// A fork at every call, no cutoff: the heartbeat decides what actually runs in parallel.
long fib(int n) {
  if (n < 2) return n;
  auto [a, b] = spindle::fork_join([n] { return fib(n - 1); }, [n] { return fib(n - 2); });
  return a + b;
}

}  // namespace

int main(int argc, char** argv) {
  const long count = argc > 1 ? std::atol(argv[1]) : 10'000'000;
  if (count <= 0) {
    std::fprintf(stderr, "usage: %s [elements > 0]\n", argv[0]);
    return 2;
  }
  spindle::runtime rt;
  std::vector<unsigned> values(static_cast<std::size_t>(count));
  std::vector<unsigned> squares(values.size());

  const bool ok = spindle::run_on(rt, [&] {
    // Pseudo-random values, written in parallel (each element from its own index).
    spindle::parallel_for(std::size_t(0), values.size(), [&](std::size_t i) {
      values[i] = unsigned((i * 2654435761u) >> 7);
    });
    spindle::parallel_map(values, squares, [](unsigned v) { return v % 1000 * (v % 1000); });
    const long sum = spindle::parallel_reduce(
        squares, 0L, [](unsigned v) { return long(v); }, std::plus<long>{});
    std::vector<unsigned> sorted = values;
    spindle::parallel_sort(sorted);

    std::vector<unsigned> reference = values;
    std::sort(reference.begin(), reference.end());
    long serial_sum = 0;
    for (unsigned v : values) serial_sum += long(v % 1000 * (v % 1000));
    std::printf("sum of squares %ld (serial %ld), sorted %s, fib(30) = %ld\n", sum, serial_sum,
                sorted == reference ? "correctly" : "WRONGLY", fib(30));
    return sum == serial_sum && sorted == reference && fib(30) == 832040;
  });
  return ok ? 0 : 1;
}
