// Fan out with a join_set and collect the results in completion order.
#include <spindle/spindle.hpp>

#include <optional>
#include <stdexcept>

spindle::task<int> square(int x) {
  co_await spindle::yield_now();  // let others run: the order of completion varies
  if (x < 0) throw std::invalid_argument("negative input");
  co_return x * x;
}

spindle::task<int> sum_of_squares(int n) {
  spindle::join_set<int> children;
  for (int i = 1; i <= n; ++i) children.spawn(square(i));
  int sum = 0;
  for (;;) {
    std::optional<int> value = co_await children.next();  // the next child to finish
    if (!value) break;                                     // none left
    sum += *value;
  }
  co_return sum;
}

spindle::task<bool> failure_propagates() {
  spindle::join_set<int> children;
  children.spawn(square(3));
  children.spawn(square(-1));
  try {
    auto all = co_await children.join_all();  // rethrows the first exception
    (void)all;
  } catch (const std::invalid_argument&) {
    co_return true;
  }
  co_return false;
}

int main() {
  spindle::runtime rt;
  const int sum = rt.block_on(sum_of_squares(100));
  const bool failed = rt.block_on(failure_propagates());
  return sum == 338350 && failed ? 0 : 1;
}
