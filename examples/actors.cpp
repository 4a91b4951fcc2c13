// Actors and a supervisor: a counter answering asks, and a small service tree where a crashing
// cache is restarted (with what depends on it) by its supervisor.
//
//   build/release/examples/spindle-example-actors
#include <cstdio>
#include <stdexcept>
#include <string>
#include <variant>

#include "spindle/spindle.hpp"

namespace {

// A counter: add to it, or ask for the total.
struct counter {
  using message_type = std::variant<int, spindle::reply_to<int>>;
  int total = 0;
  void receive(message_type& message) {
    if (auto* amount = std::get_if<int>(&message)) {
      total += *amount;
    } else {
      std::get<spindle::reply_to<int>>(message)(total);
    }
  }
};

// A service that crashes when told to, and says when it starts and stops.
struct service {
  using message_type = std::string;
  std::string name;
  void on_start(spindle::actor_context<std::string>&) { std::printf("  %s started\n", name.c_str()); }
  void receive(const std::string& command) {
    if (command == "crash") throw std::runtime_error(name + " crashed on request");
  }
  void on_stop(const spindle::exit_reason& reason) {
    std::printf("  %s stopped (%s)\n", name.c_str(), reason.describe().c_str());
  }
};

spindle::supervised_child service_child(spindle::runtime& rt, std::string name,
                                        std::vector<std::string> depends_on) {
  spindle::supervised_child child;
  child.name = name;
  child.depends_on = std::move(depends_on);
  child.start = [&rt, name](const spindle::spawn_options& options) {
    return spindle::actor_handle(spindle::spawn_actor<service>(rt, options, name));
  };
  return child;
}

}  // namespace

int main() {
  spindle::runtime rt({.workers = 2});

  auto total = spindle::spawn_actor<counter>(rt);
  for (int i = 1; i <= 10; ++i) total.send(i);
  const int sum = rt.block_on(total.ask<int>(
      [](spindle::reply_to<int> reply) { return counter::message_type(std::move(reply)); }));
  std::printf("counter: 1 + ... + 10 = %d\n", sum);

  std::printf("supervisor (downstream restarts):\n");
  spindle::supervisor_spec spec;
  spec.pattern = spindle::restart_pattern::downstream;
  spec.limit = spindle::restart_limit::at_most(3, std::chrono::seconds(5));
  spec.children.push_back(service_child(rt, "database", {}));
  spec.children.push_back(service_child(rt, "cache", {"database"}));
  spec.children.push_back(service_child(rt, "web", {"cache"}));
  auto supervisor = spindle::spawn_supervisor(rt, std::move(spec));

  auto cache = rt.block_on(supervisor.ask<spindle::actor_handle>([](auto reply) {
    return spindle::supervisor_message(spindle::supervisor_query{"cache", std::move(reply)});
  }));
  std::printf("crashing the cache: it and the web front restart, the database keeps running\n");
  cache.as<std::string>().send("crash");
  // Wait until the new cache is up: ask until the supervisor hands out a different one.
  for (;;) {
    auto now = rt.block_on(supervisor.ask<spindle::actor_handle>([](auto reply) {
      return spindle::supervisor_message(spindle::supervisor_query{"web", std::move(reply)});
    }));
    if (now && now.state() != spindle::actor_state::halted) {
      auto current_cache = rt.block_on(supervisor.ask<spindle::actor_handle>([](auto reply) {
        return spindle::supervisor_message(spindle::supervisor_query{"cache", std::move(reply)});
      }));
      if (current_cache && !(current_cache == cache)) break;
    }
  }
  std::printf("done\n");
  return sum == 55 ? 0 : 1;
}
