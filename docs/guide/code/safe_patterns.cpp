// Patterns that are correct on every compiler spindle supports, and the contracts that
// throw usage_error when broken (see pitfalls.md).
#include <spindle/spindle.hpp>

#include <optional>
#include <string>
#include <utility>

struct message {
  int id;
  std::string text;
};

// Parameters by value: the task's frame owns them however long it lives.
spindle::task<void> producer(spindle::channel<message>& out, std::string prefix) {
  for (int i = 0; i < 3; ++i) {
    message m{i, prefix + std::to_string(i)};  // not co_await out.send(message{...})
    co_await out.send(std::move(m));
  }
  out.close();
}

spindle::task<int> count(spindle::channel<message>& in) {
  int n = 0;
  for (;;) {  // not while (co_await ...) nor while (auto m = co_await ...)
    std::optional<message> m = co_await in.receive();
    if (!m) break;
    ++n;
  }
  co_return n;
}

spindle::task<bool> demo(spindle::runtime& rt) {
  spindle::channel<message> ch(4);
  // A coroutine lambda takes what it needs as parameters, never as captures.
  auto relay = [](spindle::channel<message>& c, std::string prefix) -> spindle::task<void> {
    co_await producer(c, std::move(prefix));
  };
  auto sending = spindle::spawn(relay(ch, "m"));
  const int received = co_await count(ch);
  co_await std::move(sending);

  // Blocking calls on a worker are refused: they would block an executor.
  bool refused_join = false, refused_block_on = false;
  auto child = spindle::spawn(count(ch));  // the channel is closed: returns 0 at once
  try {
    (void)child.join();
  } catch (const spindle::usage_error&) {
    refused_join = true;  // the handle is untouched: await it instead
  }
  const int none = co_await std::move(child);
  try {
    (void)rt.block_on(count(ch));
  } catch (const spindle::usage_error&) {
    refused_block_on = true;
  }
  co_return received == 3 && none == 0 && refused_join && refused_block_on;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo(rt)) ? 0 : 1;
}
