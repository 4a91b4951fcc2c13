// Cancelling a task, timing one out, and cleaning up asynchronously with tidy().
#include <spindle/spindle.hpp>

#include <atomic>
#include <chrono>
#include <utility>

using namespace std::chrono_literals;

spindle::task<int> waits_forever() {
  spindle::event never;
  co_await never.wait();  // a suspension point: cancellation is delivered here
  co_return 1;
}

spindle::task<void> say_goodbye(std::atomic<bool>& said) {
  co_await spindle::yield_now();  // clean-up may await
  said = true;
}

spindle::task<int> session(std::atomic<bool>& said, spindle::event& started) {
  // Runs when the task ends, however it ends, before its joiner hears about it.
  spindle::tidy([&said] { return say_goodbye(said); });
  started.set();
  co_return co_await waits_forever();
}

spindle::task<bool> demo() {
  // 1. cancel(): the task's next (or current) wait throws task_cancelled.
  auto stuck = spindle::spawn(waits_forever());
  stuck.cancel();
  bool cancelled = false;
  try {
    co_await std::move(stuck);
  } catch (const spindle::task_cancelled&) {
    cancelled = true;
  }

  // 2. with_timeout: the inner task is cancelled when time runs out.
  bool timed_out = false;
  try {
    co_await spindle::with_timeout(10ms, waits_forever());
  } catch (const spindle::timeout_error&) {
    timed_out = true;
  }

  // 3. A tidy destructor completes before the cancellation is reported.
  // (A task cancelled before it ever ran does not run at all: let it start first.)
  std::atomic<bool> said{false};
  spindle::event started;
  auto s = spindle::spawn(session(said, started));
  co_await started.wait();
  s.cancel();
  bool said_before_join = false;
  try {
    co_await std::move(s);
  } catch (const spindle::task_cancelled&) {
    said_before_join = said;
  }
  co_return cancelled && timed_out && said_before_join;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) ? 0 : 1;
}
