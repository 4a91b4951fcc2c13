// oneshot: one value, sent once; awaited in a task or received on a plain thread.
#include <spindle/spindle.hpp>

#include <string>
#include <utility>

spindle::task<void> answer(std::string question, spindle::oneshot_sender<std::string> reply) {
  co_await spindle::yield_now();
  reply.send("answer to " + question);
}

spindle::task<void> never_answers(spindle::oneshot_sender<int> reply) {
  (void)reply;  // dropped without sending
  co_return;
}

spindle::task<bool> demo() {
  auto [tx, rx] = spindle::oneshot<std::string>();
  spindle::spawn(answer("life", std::move(tx))).detach();
  const std::string got = co_await std::move(rx);

  auto [silent_tx, silent_rx] = spindle::oneshot<int>();
  spindle::spawn(never_answers(std::move(silent_tx))).detach();
  bool broken = false;
  try {
    co_await std::move(silent_rx);
  } catch (const spindle::channel_closed&) {  // the sender went away without sending
    broken = true;
  }
  co_return got == "answer to life" && broken;
}

int main() {
  spindle::runtime rt;
  const bool ok = rt.block_on(demo());

  // From a plain thread: blocking_receive().
  auto [tx, rx] = spindle::oneshot<int>();
  rt.spawn([sender = std::move(tx)]() mutable { sender.send(42); }).detach();
  const int value = rx.blocking_receive();
  return ok && value == 42 ? 0 : 1;
}
