// Stash, become and interleaving: a session keeps requests aside until it is connected (stash),
// then switches its handler (become) and has them handled, oldest first; a front lets other
// requests in while one of its handlers awaits a slow store (interleaving).
#include <spindle/spindle.hpp>

#include <optional>
#include <utility>
#include <variant>

struct request {
  int key;
  spindle::reply_to<int> reply;
};
struct connected {};
struct release {};

// --- stash and become ------------------------------------------------------------------------

using session_message = std::variant<connected, request>;

struct session {
  using message_type = session_message;
  int served = 0;
  // The "connecting" state: requests wait in the stash, in order.
  void receive(session_message& message, spindle::actor_context<session_message>& context) {
    if (std::holds_alternative<connected>(message)) {
      context.become([this](session_message& m) { serve(m); });  // the "connected" state
      context.unstash_all();  // the stashed requests are the next messages handled
      return;
    }
    context.stash(std::move(message));  // spawn_options::stash_capacity bounds it (1024)
  }
  void serve(session_message& message) {
    if (auto* r = std::get_if<request>(&message)) r->reply(r->key * 100 + served++);
  }
};

// Sends a request whose answer comes later (its receiver).
template <class M>
spindle::oneshot_receiver<int> ask_later(const spindle::actor_ref<M>& ref, int key) {
  auto [sender, receiver] = spindle::oneshot<int>();
  request r{key, spindle::reply_to<int>(std::move(sender))};
  ref.send(M(std::move(r)));
  return std::move(receiver);
}

// --- interleaving ----------------------------------------------------------------------------

using store_message = std::variant<request, release>;

// Answers its first request only once released.
struct slow_store {
  using message_type = store_message;
  std::optional<request> held;
  void receive(store_message& message) {
    if (auto* r = std::get_if<request>(&message)) {
      if (!held) {
        held.emplace(std::move(*r));
        return;
      }
      r->reply(r->key);
      return;
    }
    if (held) held->reply(held->key);
  }
};

struct front {
  using message_type = request;
  // Other requests are handled while a handler awaits (one step at a time, on one executor).
  static constexpr bool interleaves = true;
  spindle::actor_ref<store_message> store;
  spindle::task<void> receive(request& r, spindle::actor_context<request>&) {
    if (r.key < 0) {  // answered at once, even while a store request is outstanding
      r.reply(-1);
      co_return;
    }
    const int key = r.key;
    const int stored = co_await store.ask<int>([key](spindle::reply_to<int> reply) {
      return store_message(request{key, std::move(reply)});
    });
    r.reply(stored);
  }
};

int main() {
  spindle::runtime rt;

  auto connection = spindle::spawn_actor<session>(rt);
  auto first = ask_later(connection, 1);
  auto second = ask_later(connection, 2);
  connection.send(connected{});
  const bool in_order = first.blocking_receive() == 100 && second.blocking_receive() == 201;

  auto store = spindle::spawn_actor<slow_store>(rt);
  auto service = spindle::spawn_actor<front>(rt, store);
  auto slow = ask_later(service, 7);   // its handler now awaits the store
  auto fast = ask_later(service, -1);  // handled meanwhile
  const bool interleaved = fast.blocking_receive() == -1;
  store.send(release{});
  const bool slow_done = slow.blocking_receive() == 7;

  return in_order && interleaved && slow_done ? 0 : 1;
}
