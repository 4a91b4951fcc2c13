// The options and specs as the documentation writes them (designated initializers naming only
// some members), built by the package consumer with -Wall -Wextra -Werror: user code written
// that way must compile without warnings (g++ 12 warns, -Wmissing-field-initializers, for every
// member left out that has no default member initializer; each has one). It also runs: a
// supervised actor, a dispatcher submission and an embedded tick, each checked.
#include <spindle/spindle.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

namespace {

struct counter {
  using message_type = int;
  int seen = 0;
  void receive(int value) { seen += value; }
};

spindle::task<int> forty_two() { co_return 42; }

// The smallest host loop: ticks whenever asked.
struct ticking_host : spindle::embed::integration {
  spindle::clock_time now() const noexcept override {
    return spindle::steady_clock_source::instance().now();
  }
  void tick_at(spindle::clock_time) noexcept override {}
  void tick_soon() noexcept override {}
};

}  // namespace

int main() {
  spindle::core::diagnostics_options diagnostics{.records = true};
  spindle::runtime rt({.workers = 2, .diagnostics = diagnostics});

  // A task.
  if (rt.spawn(forty_two()).join() != 42) return 1;

  // A dispatcher, as README shows it.
  spindle::dispatcher d(rt, {.mode = spindle::dispatch_mode::sequential, .name = "documented"});
  if (d.submit([] { return 7; }).get() != 7) return 2;

  // A supervised actor, as supervisor.hpp shows it.
  spindle::supervisor_spec spec;
  spec.children.push_back({.name = "counter", .start = [&](const spindle::spawn_options& o) {
                             return spindle::actor_handle(spindle::spawn_actor<counter>(rt, o));
                           }});
  spindle::supervisor_ref supervisor = spindle::spawn_supervisor(rt, std::move(spec));
  auto actor = spindle::spawn_actor<counter>(rt, {.executor = 0, .name = "plain"});
  actor.send(1);

  // An embedded executor driven by hand.
  ticking_host host;
  spindle::embed::embedded_executor embedded(host, {.tasks_per_tick = 64});
  auto answer = embedded.spawn(forty_two());
  for (int i = 0; i < 1000 && !answer.is_finished(); ++i) embedded.tick();
  if (!answer.is_finished() || answer.join() != 42) return 3;

  std::puts("documented usage: OK");
  return 0;
}
