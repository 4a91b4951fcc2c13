// A broadcast every subscriber reads in full, and semaphore permits held by a guard.
#include <spindle/spindle.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

// Reads every message until the broadcast is closed.
spindle::task<std::vector<std::string>> listen(spindle::broadcast<std::string>::receiver news) {
  std::vector<std::string> heard;
  for (;;) {
    std::optional<std::string> message = co_await news.receive();
    if (!message) break;  // closed, and everything kept was read
    heard.push_back(std::move(*message));
  }
  co_return heard;
}

// At most two of these hold a permit at once: the guard gives it back when it goes out of scope.
spindle::task<void> use_a_slot(spindle::semaphore& slots, std::atomic<int>& inside,
                               std::atomic<int>& most_inside) {
  spindle::semaphore::permit held = co_await slots.acquire_permit();
  const int now = inside.fetch_add(1) + 1;
  for (int seen = most_inside.load(); now > seen && !most_inside.compare_exchange_weak(seen, now);) {
  }
  co_await spindle::yield_now();
  inside.fetch_sub(1);
}  // `held` released here

spindle::task<bool> run() {
  spindle::broadcast<std::string> news(16);
  auto first = spindle::spawn(listen(news.subscribe()));  // subscribed before the sends
  auto second = spindle::spawn(listen(news.subscribe()));
  news.send("fork");  // never waits; every receiver gets its copy
  news.send("join");
  news.close();
  const auto heard_first = co_await std::move(first);
  const auto heard_second = co_await std::move(second);
  const std::vector<std::string> expected{"fork", "join"};

  spindle::semaphore slots(2);
  std::atomic<int> inside{0}, most_inside{0};
  spindle::join_set<void> users;
  for (int i = 0; i < 8; ++i) users.spawn(use_a_slot(slots, inside, most_inside));
  co_await users.join_all();  // waits for every one of them
  co_return heard_first == expected && heard_second == expected && most_inside.load() <= 2 &&
      slots.available() == 2;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(run()) ? 0 : 1;
}
