// fork_join: two computations, in parallel when that pays; run_on to start from main().
#include <spindle/spindle.hpp>

#include <stdexcept>

long fib(int n) {
  if (n < 2) return n;
  // No cutoff needed: a fork costs a few stores until another worker could take it.
  auto [a, b] = spindle::fork_join([n] { return fib(n - 1); }, [n] { return fib(n - 2); });
  return a + b;
}

int checked_half(int x) {
  if (x % 2 != 0) throw std::domain_error("odd");
  return x / 2;
}

int main() {
  spindle::runtime rt;

  // From a plain thread, run_on(rt, f) runs f on a worker and blocks until it returns.
  const long f30 = spindle::run_on(rt, [] { return fib(30); });

  // fork_join(rt, left, right) is the same for one pair.
  auto [x, y] = spindle::fork_join(rt, [] { return fib(20); }, [] { return fib(21); });

  // A branch's exception propagates once both branches have settled.
  bool threw = false;
  try {
    spindle::fork_join(rt, [] { return checked_half(4); }, [] { return checked_half(3); });
  } catch (const std::domain_error&) {
    threw = true;
  }
  return f30 == 832040 && x == 6765 && y == 10946 && threw ? 0 : 1;
}
