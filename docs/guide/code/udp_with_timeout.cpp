// UDP datagrams, and a receive bounded by with_timeout.
#include <spindle/spindle.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <string_view>

namespace net = spindle::net;
using namespace std::chrono_literals;

spindle::task<bool> demo() {
  auto a = net::udp_socket::bind(net::endpoint::loopback_v4(0));
  auto b = net::udp_socket::bind(net::endpoint::loopback_v4(0));

  co_await a.send_to(net::as_bytes("ping"), b.local_endpoint());
  std::array<std::byte, 64> buffer;
  const net::udp_socket::received got = co_await b.receive_from(buffer);
  const std::string_view text(reinterpret_cast<const char*>(buffer.data()), got.size);

  // Nothing else was sent: the receive is cancelled when the time is up.
  bool timed_out = false;
  try {
    co_await spindle::with_timeout(20ms, b.receive_from(buffer));
  } catch (const spindle::timeout_error&) {
    timed_out = true;
  }
  co_return text == "ping" && got.sender == a.local_endpoint() && !got.truncated && timed_out;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) ? 0 : 1;
}
