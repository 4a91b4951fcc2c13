// Deadlines on accept, connect (name lookup included) and datagram receives: the last argument
// of the call, no wrapper task.
#include <spindle/spindle.hpp>

#include <array>
#include <chrono>
#include <cstddef>

namespace net = spindle::net;
using namespace std::chrono_literals;
using spindle::io::deadline;

spindle::task<bool> demo() {
  auto listener = net::tcp_listener::bind(net::endpoint::loopback_v4(0));

  // Nobody connects: the accept gives up after 20 ms, and the listener stays usable.
  bool accept_timed_out = false;
  try {
    (void)co_await listener.accept(deadline::after(20ms));
  } catch (const spindle::timeout_error&) {
    accept_timed_out = true;
  }

  // One deadline covers resolving the host and connecting to its addresses.
  auto accepting = spindle::spawn(listener.accept(deadline::after(5s)));
  net::tcp_stream client =
      co_await net::tcp_stream::connect("localhost", listener.local_endpoint().port(),
                                        deadline::after(5s));
  net::tcp_stream server = co_await std::move(accepting);

  // A datagram receive with nothing sent times out; a datagram that arrives is never lost.
  auto socket = net::udp_socket::bind(net::endpoint::loopback_v4(0));
  std::array<std::byte, 64> buffer;
  bool receive_timed_out = false;
  try {
    (void)co_await socket.receive_from(buffer, deadline::after(20ms));
  } catch (const spindle::timeout_error&) {
    receive_timed_out = true;
  }
  co_return accept_timed_out && receive_timed_out && client.is_open() && server.is_open();
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) ? 0 : 1;
}
