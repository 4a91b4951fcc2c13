// Threads the runtime does not own hand it work through a dispatcher.
#include <spindle/spindle.hpp>

#include <latch>
#include <thread>
#include <vector>

spindle::task<int> square(int x) {
  co_await spindle::yield_now();
  co_return x * x;
}

spindle::task<int> wait_for(std::latch& started, spindle::event& release) {
  started.count_down();
  co_await release.wait();
  co_return 1;
}

int main() {
  spindle::runtime rt;

  // Parallel mode: each submission is a task of its own, in no particular order.
  spindle::dispatcher pool(rt);
  std::vector<long> sums(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &sums, t] {
      for (int i = 1; i <= 100; ++i) {
        auto a = pool.submit(square(i));          // a task<T> ...
        auto b = pool.submit([i] { return i; });  // ... or a callable
        sums[t] += a.get() + b.get();             // get() blocks this thread
      }
    });
  }
  for (auto& thread : threads) thread.join();

  // Cancelling a running submission: its task is cancelled at its next suspension point.
  spindle::event never;
  std::latch started(1);
  auto stuck = pool.submit(wait_for(started, never));
  started.wait();                       // (a plain thread may block)
  auto cancel = stuck.cancel_action();  // may be handed to any thread
  const bool requested = cancel();
  bool cancelled = false;
  try {
    stuck.get();
  } catch (const spindle::task_cancelled&) {
    cancelled = true;
  }
  pool.close();  // waits for whatever is still running (close_policy::await_all)

  bool all_right = requested && cancelled;
  for (long s : sums) all_right = all_right && s == 338350 + 5050;
  return all_right ? 0 : 1;
}
