// A TCP echo server and a client on loopback; port 0 picks a free port.
#include <spindle/spindle.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace net = spindle::net;

spindle::task<void> serve(net::tcp_stream peer) {
  std::array<std::byte, 4096> buffer;
  for (;;) {
    const std::size_t n = co_await peer.read(buffer);
    if (n == 0) break;  // the client shut its side down
    co_await peer.write_all(std::span<const std::byte>(buffer.data(), n));
  }
  // Close now: the task's frame (and the socket in it) may be kept until it is joined.
  co_await peer.close();
}

spindle::task<void> accept_loop(net::tcp_listener& listener, int connections) {
  spindle::join_set<void> sessions;
  for (int i = 0; i < connections; ++i) {
    net::tcp_stream peer = co_await listener.accept();
    sessions.spawn(serve(std::move(peer)));  // one task per connection
  }
  co_await sessions.join_all();
}

spindle::task<std::string> call(net::endpoint server, std::string text) {
  net::tcp_stream stream = co_await net::tcp_stream::connect(server);
  co_await stream.write_all(text);
  stream.shutdown();  // SHUT_WR: no more to send
  std::string reply;
  std::array<std::byte, 4096> buffer;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    reply.append(reinterpret_cast<const char*>(buffer.data()), n);
  }
  co_return reply;
}

spindle::task<bool> demo() {
  auto listener = net::tcp_listener::bind(net::endpoint::loopback_v4(0));
  auto server = spindle::spawn(accept_loop(listener, 2));
  const net::endpoint where = listener.local_endpoint();
  const std::string a = co_await call(where, "hello");
  const std::string b = co_await call(where, std::string(10'000, 'x'));
  co_await std::move(server);
  co_return a == "hello" && b == std::string(10'000, 'x');
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) ? 0 : 1;
}
