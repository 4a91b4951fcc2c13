// A mutex held across co_await, a semaphore bounding concurrency, a wait_group and an event.
#include <spindle/spindle.hpp>

#include <algorithm>

struct stats {
  spindle::mutex lock;
  int running = 0;      // guarded by lock
  int most_running = 0; // guarded by lock
};

spindle::task<void> download(spindle::event& go, spindle::semaphore& slots, stats& s,
                             spindle::wait_group& finished) {
  co_await go.wait();     // every download starts together
  co_await slots.acquire();  // at most 3 at a time
  {
    auto held = co_await s.lock.lock();  // a task waits here, not its thread
    ++s.running;
    s.most_running = std::max(s.most_running, s.running);
  }
  co_await spindle::yield_now();  // "the download": others run meanwhile
  {
    auto held = co_await s.lock.lock();
    --s.running;
  }  // held's destructor unlocks
  slots.release();
  finished.done();
}

spindle::task<bool> demo() {
  spindle::event go;
  spindle::semaphore slots(3);
  spindle::wait_group finished;
  stats s;
  finished.add(20);  // before starting the activities
  for (int i = 0; i < 20; ++i) spindle::spawn(download(go, slots, s, finished)).detach();
  go.set();
  co_await finished.wait();  // all 20 called done()
  auto held = co_await s.lock.lock();
  co_return s.running == 0 && s.most_running >= 1 && s.most_running <= 3;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) ? 0 : 1;
}
