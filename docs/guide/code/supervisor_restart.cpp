// A supervision tree: the cache depends on the database, the web front on the cache.
// Crashing the cache restarts it and what depends on it; the database keeps running.
#include <spindle/spindle.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

struct service {
  using message_type = std::string;
  service(std::string name, std::atomic<int>& starts, spindle::semaphore& started)
      : name(std::move(name)), starts(starts), started(started) {}
  void on_start(spindle::actor_context<std::string>&) {
    ++starts;
    started.release();  // a semaphore may be released from anywhere
  }
  void receive(const std::string& command) {
    if (command == "crash") throw std::runtime_error(name + " crashed");
  }
  std::string name;
  std::atomic<int>& starts;
  spindle::semaphore& started;
};

spindle::supervised_child child(spindle::runtime& rt, std::string name,
                                std::vector<std::string> depends_on, std::atomic<int>& starts,
                                spindle::semaphore& started) {
  spindle::supervised_child c;
  c.name = name;
  c.depends_on = std::move(depends_on);
  c.start = [&rt, name, &starts, &started](const spindle::spawn_options& options) {
    return spindle::actor_handle(spindle::spawn_actor<service>(rt, options, name, starts, started));
  };
  return c;
}

spindle::task<void> wait_for_starts(spindle::semaphore& started, int count) {
  for (int i = 0; i < count; ++i) co_await started.acquire();
}

// The supervisor answers a supervisor_query with the child's current handle. (The reply
// channel is built by hand here: ask() with a callable that captures crashed under g++ 12.)
spindle::task<spindle::actor_handle> child_named(spindle::supervisor_ref supervisor,
                                                 std::string name) {
  auto [reply, answer] = spindle::oneshot<spindle::actor_handle>();
  spindle::supervisor_message query(spindle::supervisor_query{
      std::move(name), spindle::reply_to<spindle::actor_handle>(std::move(reply))});
  if (supervisor.send(std::move(query)) != spindle::send_result::queued) co_return spindle::actor_handle();
  co_return co_await std::move(answer);
}

int main() {
  spindle::runtime rt;
  std::atomic<int> database{0}, cache{0}, web{0};
  spindle::semaphore started(0);

  spindle::supervisor_spec spec;
  spec.pattern = spindle::restart_pattern::downstream;  // the child and its dependents
  spec.limit = spindle::restart_limit::at_most(3, std::chrono::seconds(5));
  spec.children.push_back(child(rt, "database", {}, database, started));
  spec.children.push_back(child(rt, "cache", {"database"}, cache, started));
  spec.children.push_back(child(rt, "web", {"cache"}, web, started));
  auto supervisor = spindle::spawn_supervisor(rt, std::move(spec));
  rt.block_on(wait_for_starts(started, 3));

  spindle::actor_handle old_cache = rt.block_on(child_named(supervisor, "cache"));
  old_cache.as<std::string>().send("crash");
  rt.block_on(wait_for_starts(started, 2));  // the new cache, then the new web front

  return database == 1 && cache == 2 && web == 2 ? 0 : 1;
}
