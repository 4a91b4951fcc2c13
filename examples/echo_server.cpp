// TCP echo server: every connection gets back exactly the bytes it sends.
//
//   spindle-example-echo_server [port] [threads]     (default 18081, one thread per core)
//
// One task per connection (read, write_all, repeat until the peer closes); SIGINT/SIGTERM stop
// it gracefully. `spindle-example-echo_client` is the matching load generator.
#include <signal.h>

#include <spindle/io/signals.hpp>
#include <spindle/net/net.hpp>
#include <spindle/spindle.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace {

spindle::task<void> echo(spindle::net::tcp_stream stream) {
  std::array<std::byte, 16384> buffer;
  try {
    for (;;) {
      const std::size_t n = co_await stream.read(buffer);
      if (n == 0) break;
      co_await stream.write_all(std::span(buffer.data(), n));
    }
  } catch (const std::system_error&) {
    // reset by the peer: done with this connection
  }
  co_await stream.close();
}

spindle::task<void> accept_loop(spindle::net::tcp_listener& listener) {
  for (;;) spindle::spawn(echo(co_await listener.accept())).detach();
}

spindle::task<int> run(std::uint16_t port) {
  spindle::io::signal_set stop_signals({SIGINT, SIGTERM});
  auto listener = spindle::net::tcp_listener::bind(spindle::net::endpoint::loopback_v4(port));
  std::fprintf(stderr, "echo_server listening on %s\n", listener.local_endpoint().to_string().c_str());
  auto acceptor = spindle::spawn(accept_loop(listener));
  co_await stop_signals.wait();
  acceptor.cancel();
  try {
    co_await std::move(acceptor);
  } catch (const spindle::task_cancelled&) {
  }
  co_await listener.close();
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::atoi(argv[1]) : 18081;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  if (port <= 0 || port > 65535 || threads < 0) {
    std::fprintf(stderr, "usage: %s [port] [threads]\n", argv[0]);
    return 2;
  }
  spindle::io::block_signals({SIGINT, SIGTERM});
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  return rt.block_on(run(std::uint16_t(port)));
}
