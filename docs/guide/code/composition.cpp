// Awaiting several things at once, timeouts over any awaitable, std::stop_token.
#include <spindle/spindle.hpp>

#include <chrono>
#include <optional>
#include <stop_token>
#include <tuple>
#include <utility>
#include <variant>

using namespace std::chrono_literals;

spindle::task<int> square(int value) { co_return value * value; }

spindle::task<bool> compose(spindle::channel<int>& numbers) {
  // when_all: every operand, in operand order (a task and a channel receive here).
  auto [squared, received] = co_await spindle::when_all(square(7), numbers.receive());
  const bool all_ok = squared == 49 && received == std::optional<int>(1);

  // when_any: the first to complete; index() says which. The loser (the sleep) is cancelled
  // and waited for before when_any returns.
  auto first = co_await spindle::when_any(numbers.receive(), spindle::sleep_for(10s));
  const bool any_ok = first.index() == 0 && std::get<0>(first) == std::optional<int>(2);

  // with_timeout over a receive: no child task; timeout_error if nothing comes in time.
  bool timed_out = false;
  try {
    co_await spindle::with_timeout(20ms, numbers.receive());
  } catch (const spindle::timeout_error&) {
    timed_out = true;
  }
  co_return all_ok && any_ok && timed_out;
}

// A task's cancellation, seen as a std::stop_token by code that only knows the standard.
spindle::task<bool> watch_for_stop(std::stop_token outside) {
  std::stop_token mine = spindle::this_task::stop_token();
  while (!mine.stop_requested()) co_await spindle::yield_now();
  co_return outside.stop_requested();
}

int main() {
  spindle::runtime_options options;
  options.workers = 2;
  spindle::runtime rt(options);

  spindle::channel<int> numbers(8);
  rt.block_on([](spindle::channel<int>& ch) -> spindle::task<void> {
    co_await ch.send(1);
    co_await ch.send(2);
  }(numbers));
  const bool composed = rt.block_on(compose(numbers));

  // A std::stop_source that cancels a task: spawn(body, token).
  std::stop_source source;
  auto watcher = rt.spawn(watch_for_stop(source.get_token()), source.get_token());
  source.request_stop();
  bool stopped = false;
  try {
    // Either the task saw its token stopped and returned, or it was cancelled at its yield.
    stopped = watcher.join();
  } catch (const spindle::task_cancelled&) {
    stopped = true;
  }
  return composed && stopped ? 0 : 1;
}
