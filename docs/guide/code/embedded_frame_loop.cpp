// spindle tasks inside a host's frame loop, driven tick by tick, in the host's own time.
#include <spindle/spindle.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

using namespace std::chrono_literals;

// The host: a game-style loop whose clock advances 16 ms per frame (virtual time).
class frame_loop final : public spindle::embed::integration {
 public:
  spindle::clock_time now() const noexcept override { return now_; }
  // "Tick again no later than `when`" (the next timer); called only inside tick().
  void tick_at(spindle::clock_time when) noexcept override { next_timer_ = when; }
  // "Tick again soon": any thread, any time.
  void tick_soon() noexcept override { tick_wanted_.store(true); }

  void run_frame(spindle::embed::embedded_executor& executor) {
    now_ += 16ms;
    // Consume the request BEFORE tick(): a request made during the tick must survive it.
    const bool wanted = tick_wanted_.exchange(false);
    if (wanted || now_ >= next_timer_) executor.tick();
  }

 private:
  spindle::clock_time now_{};
  spindle::clock_time next_timer_ = spindle::clock_time::max();
  std::atomic<bool> tick_wanted_{false};
};

spindle::task<int> animate(int frames) {
  for (int i = 0; i < frames; ++i) co_await spindle::sleep_for(100ms);  // the host's time
  co_return frames;
}

spindle::task<long> consume(spindle::channel<int>& messages) {
  long sum = 0;
  for (;;) {
    std::optional<int> message = co_await messages.receive();
    if (!message) break;
    sum += *message;
  }
  co_return sum;
}

spindle::task<long> game(spindle::channel<int>& messages) {
  auto animation = spindle::spawn(animate(5));  // spawns onto the same embedded executor
  const long sum = co_await consume(messages);
  const int frames = co_await std::move(animation);
  co_return frames == 5 ? sum : -1;
}

int main() {
  frame_loop loop;
  spindle::embed::embedded_executor executor(loop);
  spindle::channel<int> messages(128);
  auto handle = executor.spawn(game(messages));

  // Another thread wakes tasks on the executor: the wake-up only asks the host for a tick.
  std::thread network([&messages] {
    for (int i = 1; i <= 100; ++i) (void)messages.try_send(int(i));
    messages.close();
  });

  // The frames run as fast as they can (virtual time); give up after 10 s of real time.
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (!handle.is_finished() && std::chrono::steady_clock::now() < give_up) {
    loop.run_frame(executor);
  }
  network.join();
  return handle.is_finished() && handle.join() == 5050 ? 0 : 1;
}
