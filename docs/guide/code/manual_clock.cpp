// Tests with virtual time: a manual_clock moves only when the test advances it.
#include <spindle/spindle.hpp>

#include <chrono>

using namespace std::chrono_literals;

spindle::task<int> wake_up_at(spindle::clock_time when) {
  co_await spindle::sleep_until(when);
  co_return 1;
}

spindle::task<int> never_replies() {
  spindle::event never;
  co_await never.wait();
  co_return 1;
}

spindle::task<bool> times_out() {
  try {
    co_await spindle::with_timeout(1h, never_replies());  // an hour, in microseconds
  } catch (const spindle::timeout_error&) {
    co_return true;
  }
  co_return false;
}

int main() {
  spindle::manual_clock clock;
  spindle::runtime_options options;
  options.clock = &clock;  // must outlive the runtime
  spindle::runtime rt(options);

  // A deadline fixed before the task runs, so the order of events does not matter.
  auto sleeper = rt.spawn(wake_up_at(clock.now() + 10min));
  clock.advance(10min);
  const int woke = sleeper.join();

  // A timeout counts from when with_timeout's task starts: advance until it gives up.
  auto waiter = rt.spawn(times_out());
  while (!waiter.is_finished()) clock.advance(1h);
  return woke == 1 && waiter.join() ? 0 : 1;
}
