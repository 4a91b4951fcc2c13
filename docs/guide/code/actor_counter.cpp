// A typed actor: send never blocks, ask returns a task; watching an actor end.
#include <spindle/spindle.hpp>

#include <stdexcept>
#include <utility>
#include <variant>

struct add {
  int amount;
};
struct get_total {
  spindle::reply_to<int> reply;
};

struct counter {
  using message_type = std::variant<add, get_total>;
  int total = 0;
  // One message at a time, on the actor's executor: no locks needed.
  void receive(message_type& message, spindle::actor_context<message_type>& context) {
    if (auto* a = std::get_if<add>(&message)) {
      if (a->amount < 0) throw std::invalid_argument("negative amount");  // crashes the actor
      total += a->amount;
    } else {
      std::get<get_total>(message).reply(total);
    }
    (void)context;  // context.self(), stop(), link(), monitor(), ...
  }
};

get_total ask_total(spindle::reply_to<int> reply) { return get_total{std::move(reply)}; }

spindle::task<int> total_of(spindle::actor_ref<counter::message_type> ref) {
  co_return co_await ref.ask<int>(ask_total);
}

int main() {
  spindle::runtime rt;
  auto ref = spindle::spawn_actor<counter>(rt);
  for (int i = 1; i <= 10; ++i) ref.send(add{i});  // queued; never waits
  const int total = rt.block_on(total_of(ref));     // messages are handled in order

  // A function actor: the message type and a handler.
  int seen = 0;
  auto echo = spindle::spawn_actor<int>(rt, [&seen](int& n) { seen += n; });
  echo.send(5);

  // Watch for the end: a oneshot receiver of the exit reason.
  auto counter_down = spindle::monitor_actor(ref);
  ref.send(add{-1});
  const spindle::exit_reason why = counter_down.blocking_receive();

  auto echo_down = spindle::monitor_actor(echo);
  echo.stop();  // handled after the messages queued before it
  const spindle::exit_reason echo_why = echo_down.blocking_receive();

  return total == 55 && why.kind == spindle::exit_kind::crashed &&
                 echo_why.kind == spindle::exit_kind::normal && seen == 5
             ? 0
             : 1;
}
