// parallel_for, parallel_map, parallel_reduce and parallel_sort, checked against serial code.
#include <spindle/spindle.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

int main() {
  spindle::runtime rt;
  std::vector<unsigned> values(1'000'000);
  std::vector<unsigned> squares(values.size());

  const bool ok = spindle::run_on(rt, [&] {
    // Each element written from its own index: no grain size to choose.
    spindle::parallel_for(std::size_t(0), values.size(), [&](std::size_t i) {
      values[i] = unsigned((i * 2654435761u) >> 7) % 1000;
    });
    spindle::parallel_map(values, squares, [](unsigned v) { return v * v; });
    const long sum = spindle::parallel_reduce(
        squares, 0L, [](unsigned v) { return long(v); }, std::plus<long>{});
    std::vector<unsigned> sorted = values;
    spindle::parallel_sort(sorted);

    long serial_sum = 0;
    for (unsigned v : values) serial_sum += long(v) * v;
    return sum == serial_sum && std::is_sorted(sorted.begin(), sorted.end());
  });
  return ok ? 0 : 1;
}
