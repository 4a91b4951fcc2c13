// Timers to an actor (a one-shot timeout and a periodic tick), and typed calls whose reply type
// comes from the request.
#include <spindle/spindle.hpp>

#include <chrono>
#include <variant>

using namespace std::chrono_literals;

struct tick {};
struct give_up {};
struct ticks_so_far {
  using reply = int;  // what call() yields: checked at compile time
};

struct heartbeat {
  using message_type = std::variant<tick, give_up, spindle::call_message<ticks_so_far>>;
  int ticks = 0;
  spindle::actor_timer beat;
  void on_start(spindle::actor_context<message_type>& ctx) {
    beat = ctx.send_interval(1ms, tick{});  // every 1 ms, on the grid; skipped if still queued
    ctx.send_after(10s, give_up{});         // a timeout to itself; the handle may be dropped
  }
  void receive(message_type& message, spindle::actor_context<message_type>& ctx) {
    if (std::holds_alternative<tick>(message)) {
      if (++ticks == 5) beat.cancel();  // true: no further tick is sent
    } else if (std::holds_alternative<give_up>(message)) {
      ctx.stop();
    } else {
      auto& call = std::get<spindle::call_message<ticks_so_far>>(message);
      call.reply_with([&](const ticks_so_far&) { return ticks; });  // must return an int
    }
  }
};

spindle::task<int> ask_ticks(spindle::actor_ref<heartbeat::message_type> ref) {
  ticks_so_far question;  // a named request: never a temporary inside co_await (g++ 12)
  int seen = co_await ref.call(question);
  while (seen < 5) {
    co_await spindle::sleep_for(1ms);
    seen = co_await ref.call(question, {.timeout = 1s});  // timeout_error past it
  }
  co_return seen;
}

int main() {
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<heartbeat>(rt);
  const int ticks = rt.block_on(ask_ticks(ref));

  // From any thread: a one-shot that is cancelled in time never arrives.
  auto timer = spindle::send_after(ref, 1h, give_up{});
  const bool prevented = timer.cancel();

  // Stopping the actor cancels every timer still aimed at it (here the 10 s give_up).
  auto down = spindle::monitor_actor(ref);
  ref.stop();
  (void)down.blocking_receive();
  return ticks == 5 && prevented && !timer.pending() ? 0 : 1;
}
