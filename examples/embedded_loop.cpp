// spindle tasks inside somebody else's event loop (docs/design/embedded.md).
//
// The "host" here is a small single-threaded event loop of the kind a GUI toolkit or a game
// engine owns: it sleeps on a condition variable until its next timer or until somebody posts to
// it, and knows nothing about coroutines. It implements spindle::embed::integration and calls
// embedded_executor::tick() when asked. On it run ordinary spindle tasks:
//   - an "animation" that sleeps from frame to frame (timers in the host's time: tick_at);
//   - a consumer of messages that a plain std::thread (a "network" thread) sends over a
//     spindle::channel (wake-ups from another thread: tick_soon, then a tick);
//   - a download through a callback API that calls back on its own thread, awaited with a
//     turnstile (a poll function plus a waker the callback fires);
//   - a request with_timeout that the host's time runs out on.
// The loop ends when the main task has finished. Prints what happened; exit status 0 when every
// result is as expected.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spindle/spindle.hpp>

namespace {

using namespace std::chrono_literals;

// --- the host's event loop --------------------------------------------------------------------

class event_loop final : public spindle::embed::integration {
 public:
  spindle::clock_time now() const noexcept override {
    return spindle::steady_clock_source::instance().now();
  }
  // Only called from inside tick(), on the loop's own thread.
  void tick_at(spindle::clock_time when) noexcept override { next_timer_ = when; }
  // Any thread.
  void tick_soon() noexcept override {
    {
      std::lock_guard lock(mutex_);
      tick_wanted_ = true;
    }
    wake_.notify_one();
  }

  // Runs until `done()`: ticks when asked to, or when the requested time has come.
  template <class Done>
  void run(spindle::embed::embedded_executor& executor, Done done) {
    while (!done()) {
      {
        std::unique_lock lock(mutex_);
        const auto due = [&] { return tick_wanted_ || now() >= next_timer_; };
        if (next_timer_ == spindle::clock_time::max()) {
          wake_.wait(lock, due);
        } else {
          wake_.wait_until(lock, next_timer_, due);
        }
        tick_wanted_ = false;
      }
      executor.tick();
      ++ticks;
    }
  }

  long ticks = 0;

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool tick_wanted_ = false;                              // guarded by mutex_
  spindle::clock_time next_timer_ = spindle::clock_time::max();  // the loop's thread
};

// --- a callback API, the way many C and toolkit libraries look --------------------------------

class legacy_download {
 public:
  // Calls `on_progress(bytes)` from its own thread a few times, then `on_done()`.
  template <class Progress, class Done>
  void start(Progress on_progress, Done on_done) {
    worker_ = std::thread([=] {
      for (int chunk = 1; chunk <= 4; ++chunk) on_progress(chunk * 1024);
      on_done();
    });
  }
  ~legacy_download() {
    if (worker_.joinable()) worker_.join();
  }

 private:
  std::thread worker_;
};

// Awaits a legacy_download: its callbacks only record and fire the waker; the turnstile polls.
spindle::task<long> download() {
  struct progress {
    std::atomic<long> bytes{0};
    std::atomic<bool> done{false};
    std::optional<spindle::embed::waker> waker;  // set before start()
  };
  auto state = std::make_shared<progress>();
  legacy_download api;
  bool started = false;
  const long total = co_await spindle::embed::turnstile(
      [&](const spindle::embed::waker& w) -> std::optional<long> {
        if (!started) {
          started = true;
          state->waker.emplace(w);
          api.start([state](long bytes) {
                      state->bytes.store(bytes);
                      state->waker->wake();
                    },
                    [state] {
                      state->done.store(true);
                      state->waker->wake();
                    });
        }
        if (state->done.load()) return state->bytes.load();
        return std::nullopt;
      });
  co_return total;
}

// --- the tasks -----------------------------------------------------------------------------------

spindle::task<int> animate(int frames) {
  for (int frame = 0; frame < frames; ++frame) co_await spindle::sleep_for(20ms);
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

spindle::task<int> never_answers() {
  spindle::event never;
  co_await never.wait();
  co_return 0;
}

struct results {
  int frames = 0;
  long sum = 0;
  long downloaded = 0;
  bool timed_out = false;
};

spindle::task<results> main_task(spindle::channel<int>& messages) {
  results r;
  auto animation = spindle::spawn(animate(5));
  auto consumer = spindle::spawn(consume(messages));
  r.downloaded = co_await download();
  try {
    co_await spindle::with_timeout(50ms, never_answers());
  } catch (const spindle::timeout_error&) {
    r.timed_out = true;
  }
  r.frames = co_await std::move(animation);
  r.sum = co_await std::move(consumer);
  co_return r;
}

}  // namespace

int main() {
  event_loop loop;
  spindle::embed::embedded_executor executor(loop);
  spindle::channel<int> messages(128);  // room for every message: the sender never waits

  auto handle = executor.spawn(main_task(messages));
  // A plain thread the runtime knows nothing about: a "network" thread delivering messages.
  std::thread network([&messages] {
    for (int i = 1; i <= 100; ++i) {
      if (!messages.try_send(int(i))) std::printf("message %d refused\n", i);
    }
    messages.close();
  });

  const auto start = std::chrono::steady_clock::now();
  loop.run(executor, [&] { return handle.is_finished(); });
  network.join();
  const results r = handle.join();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::printf("frames animated: %d\n", r.frames);
  std::printf("messages summed: %ld\n", r.sum);
  std::printf("bytes downloaded: %ld\n", r.downloaded);
  std::printf("request timed out: %s\n", r.timed_out ? "yes" : "no");
  std::printf("host ticks: %ld in %.0f ms\n", loop.ticks, ms);
  const bool ok = r.frames == 5 && r.sum == 5050 && r.downloaded == 4096 && r.timed_out;
  std::printf("%s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
