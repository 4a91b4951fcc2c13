// A handler that awaits: the front asks the store and sleeps inside its handler; meanwhile
// its other messages wait (one message at a time, as OTP's gen_server).
#include <spindle/spindle.hpp>

#include <chrono>
#include <utility>

struct store {
  using message_type = spindle::reply_to<int>;
  int value = 41;
  void receive(spindle::reply_to<int>& reply) { reply(value); }
};

spindle::reply_to<int> question(spindle::reply_to<int> reply) { return reply; }

struct front {
  using message_type = spindle::reply_to<int>;
  spindle::actor_ref<spindle::reply_to<int>> backend;
  int answered = 0;
  // A coroutine: it may ask, sleep, read a socket. An exception crashes the actor as usual.
  spindle::task<void> receive(spindle::reply_to<int> reply,
                              spindle::actor_context<message_type>& context) {
    const int stored = co_await backend.ask<int>(question);
    co_await spindle::sleep_for(std::chrono::milliseconds(1));
    ++answered;  // no lock: no other handler of this actor runs until this one ends
    reply(stored + answered);
    (void)context;  // valid until the handler ends, like the message
  }
};

int main() {
  spindle::runtime rt;
  auto backend = spindle::spawn_actor<store>(rt);
  auto ref = spindle::spawn_actor<front>(rt, backend);
  const int first = rt.block_on(ref.ask<int>(question));
  const int second = rt.block_on(ref.ask<int>(question));
  return first == 42 && second == 43 ? 0 : 1;
}
