// task_slot: a new occupant replaces the running one. Named tasks: wait by name.
#include <spindle/spindle.hpp>

#include <string>
#include <utility>

spindle::task<int> search(std::string query, spindle::event& results_ready) {
  co_await results_ready.wait();
  co_return static_cast<int>(query.size());
}

spindle::task<int> outcome(spindle::join_handle<int> handle) {
  try {
    co_return co_await std::move(handle);
  } catch (const spindle::task_cancelled&) {
    co_return -1;
  }
}

spindle::task<void> rebuild_index(int& rebuilt) {
  co_await spindle::yield_now();
  rebuilt = 1;
}

spindle::task<bool> demo() {
  spindle::event ready;
  spindle::task_slot searches("search");
  // Each keystroke starts a search that replaces the previous one.
  auto s1 = searches.spawn(search("s", ready));
  auto s2 = searches.spawn(search("sp", ready));
  auto s3 = searches.spawn(search("spi", ready));
  ready.set();
  const int r1 = co_await outcome(std::move(s1));
  const int r2 = co_await outcome(std::move(s2));
  const int r3 = co_await outcome(std::move(s3));

  // Somebody spawns under a name; somebody else, with no handle, waits for it.
  int rebuilt = 0;
  spindle::spawn_named("index-rebuild", rebuild_index(rebuilt)).detach();
  co_await spindle::wait_named("index-rebuild");  // until no task of that name is live
  co_return r1 == -1 && r2 == -1 && r3 == 3 && rebuilt == 1;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) ? 0 : 1;
}
