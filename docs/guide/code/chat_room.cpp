// A chat room over TCP: every line a client sends reaches every client in the room. The server
// and three clients run in one program, which checks that each client heard every line.
#include <spindle/spindle.hpp>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <sys/socket.h>
#include <vector>

using namespace std::chrono_literals;
namespace net = spindle::net;
using room = spindle::broadcast<std::string>;
using line_reader = net::buffered_reader<net::tcp_stream>;

// --- the server: one task per connection ------------------------------------------------------

// The client's lines go to the room as "name: line" until the client leaves.
spindle::task<void> client_to_room(line_reader& in, room& chat, std::string name) {
  while (std::optional<std::string> line = co_await in.read_line()) {
    chat.send(name + ": " + *line);
  }
}

// The room's lines go to the client; the lines waiting are written together, in one call.
spindle::task<void> room_to_client(net::tcp_stream& stream, room::receiver& news) {
  for (;;) {
    std::string batch;
    try {
      std::optional<std::string> line = co_await news.receive();
      if (!line) co_return;  // the room closed
      do {
        batch += *line + "\n";
      } while ((line = news.try_receive()));
    } catch (const spindle::broadcast_lagged& lag) {  // this client fell too far behind
      batch = "* you missed " + std::to_string(lag.missed()) + " lines\n";
    }
    co_await stream.write_all(batch);
  }
}

void announce(room& chat, const std::string& text) {
  try {
    chat.send(text);
  } catch (const spindle::channel_closed&) {  // the room closed meanwhile: nobody to tell
  }
}

spindle::task<void> session(net::tcp_stream stream, room& chat) {
  line_reader in(stream);
  // The first line is the client's name; a client that says nothing for 10 s is let go.
  std::optional<std::string> name = co_await in.read_line(64, spindle::io::deadline::after(10s));
  if (!name) co_return;
  room::receiver news = chat.subscribe();  // before the announcement: the newcomer hears it too
  announce(chat, "* " + *name + " joined (" + std::to_string(chat.receiver_count()) + " here)");
  // Both directions at once. The first to end (the client left, or the room closed) wins;
  // the other is cancelled, and when_any returns once it has finished.
  co_await spindle::when_any(client_to_room(in, chat, *name), room_to_client(stream, news));
  announce(chat, "* " + *name + " left");
}

spindle::task<void> accept_clients(net::tcp_listener& listener, room& chat,
                                   spindle::join_set<void>& sessions) {
  for (;;) sessions.spawn(session(co_await listener.accept(), chat));
}

// --- a client ---------------------------------------------------------------------------------

// Says its name, waits until all three are in the room, says two lines, and listens until it
// has heard each client's two lines. Returns what it heard.
spindle::task<std::set<std::string>> client(net::endpoint server, std::string name) {
  net::tcp_stream stream = co_await net::tcp_stream::connect(server);
  line_reader in(stream);
  const std::string hello = name + "\n";
  co_await stream.write_all(hello);
  // No co_await in a loop condition beside && or ||: g++ 12 evaluates it even when the other
  // operand has decided (guide: pitfalls). The loops test their conditions in the body.
  for (;;) {
    std::optional<std::string> line = co_await in.read_line();
    if (!line || line->ends_with("(3 here)")) break;
  }
  const std::string said = "hello from " + name + "\nbye from " + name + "\n";
  co_await stream.write_all(said);
  std::set<std::string> heard;
  while (heard.size() < 6) {
    std::optional<std::string> line = co_await in.read_line();
    if (!line) break;
    if (!line->starts_with("* ")) heard.insert(*line);  // not an announcement
  }
  stream.shutdown(SHUT_WR);  // leaves the room
  co_return heard;
}

spindle::task<bool> chat_room() {
  room chat(64);  // a client more than 64 lines behind is told how many it missed
  net::tcp_listener listener = net::tcp_listener::bind(net::endpoint::loopback_v4(0));
  spindle::join_set<void> sessions;
  auto server = spindle::spawn(accept_clients(listener, chat, sessions));

  const std::vector<std::string> names{"ada", "bob", "cy"};
  std::set<std::string> everything;
  spindle::join_set<std::set<std::string>> clients;
  for (const std::string& name : names) {
    everything.insert(name + ": hello from " + name);
    everything.insert(name + ": bye from " + name);
    clients.spawn(client(listener.local_endpoint(), name));
  }
  bool each_heard_everything = true;
  while (std::optional<std::set<std::string>> heard = co_await clients.next()) {
    each_heard_everything = each_heard_everything && *heard == everything;
  }

  // Closing: no new clients; the room closes, which ends every session's writer and so the
  // session; shutdown() waits for them all (they use `chat`, which lives in this frame).
  server.cancel();
  try {
    co_await std::move(server);
  } catch (const spindle::task_cancelled&) {
  }
  chat.close();
  co_await sessions.shutdown();
  co_return each_heard_everything;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(chat_room()) ? 0 : 1;
}
