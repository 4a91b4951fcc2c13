// Registered names, and spawn_link: OTP's register, whereis and spawn_link.
#include <spindle/spindle.hpp>

#include <stdexcept>
#include <utility>
#include <variant>

// A worker that crashes on a negative number.
struct worker {
  using message_type = int;
  int total = 0;
  void receive(int n) {
    if (n < 0) throw std::invalid_argument("negative");
    total += n;
  }
};

struct start_worker {};
struct restarts_so_far {
  spindle::reply_to<int> reply;
};

// Starts a worker linked to itself (before the worker can run: no crash goes unseen), names
// it "worker", and starts a new one after a crash: a one-child supervisor written by hand.
struct keeper {
  using message_type = std::variant<start_worker, restarts_so_far>;
  int restarts = 0;
  void receive(message_type& m, spindle::actor_context<message_type>& ctx) {
    if (std::holds_alternative<start_worker>(m)) {
      start(ctx);
    } else {
      std::get<restarts_so_far>(m).reply(restarts);
    }
  }
  // Having on_exit means it traps exit signals: a linked worker's crash arrives here.
  void on_exit(const spindle::exit_message& exit, spindle::actor_context<message_type>& ctx) {
    if (exit.reason.kind == spindle::exit_kind::crashed) {
      ++restarts;
      start(ctx);  // the crashed worker's name was freed when it halted
    }
  }
  void start(spindle::actor_context<message_type>& ctx) {
    auto child = ctx.spawn_link<worker>(spindle::spawn_options{.name = "worker"});
    spindle::register_name(ctx.system(), "worker", child);
  }
};

// Messages are handled in order: when the answer comes, what was sent before was handled.
spindle::task<int> restarts_of(spindle::actor_ref<keeper::message_type> k) {
  co_return co_await k.ask<int>([](spindle::reply_to<int> r) { return restarts_so_far{std::move(r)}; });
}

// A plain task awaits an actor's end.
spindle::task<spindle::exit_kind> end_of(spindle::oneshot_receiver<spindle::exit_reason> down) {
  const spindle::exit_reason why = co_await std::move(down);
  co_return why.kind;
}

int main() {
  spindle::runtime rt;
  auto k = spindle::spawn_actor<keeper>(rt);
  k.send(start_worker{});
  rt.block_on(restarts_of(k));  // the worker is started and named

  const bool sent = spindle::send_to<int>(rt, "worker", 5) == spindle::send_result::queued;
  const auto first = spindle::whereis<int>(rt, "worker");  // a typed ref; empty if no such name
  const bool unknown = spindle::send_to<int>(rt, "nobody", 1) == spindle::send_result::no_such_name;

  // Watches the actor that has the name now (the watch stays with it, whatever the name does).
  auto end = rt.spawn(end_of(spindle::monitor_name(rt, "worker")));
  first.send(-1);  // crashes it; the keeper starts another
  const spindle::exit_kind how = end.join();
  const int restarts = rt.block_on(restarts_of(k));  // after the keeper's on_exit
  const auto second = spindle::whereis<int>(rt, "worker");

  // One actor per name, one name per actor: a second registration is a usage error.
  bool refused = false;
  try {
    spindle::register_name(rt, "worker", k);
  } catch (const spindle::name_in_use&) {
    refused = true;
  }
  return sent && unknown && how == spindle::exit_kind::crashed && restarts == 1 && second &&
                 second != first && refused
             ? 0
             : 1;
}
