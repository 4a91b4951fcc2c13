// A key-value service written in the Erlang/OTP style: a supervision tree of actors, names,
// timers to self, typed calls, and session handlers that await socket I/O.
//
//   spindle-example-kv_service [port] [threads]     (default 7379, one thread per core;
//                                                    port 0 picks a free one)
//   printf 'SET greeting hello world\nGET greeting\nQUIT\n' | nc 127.0.0.1 7379
//
// The protocol and what it promises: protocol.hpp. The tree: server.hpp. The parts, one file
// each: store.hpp (sharded store), stats.hpp (counter), session.hpp (a connection),
// acceptor.hpp. SIGINT/SIGTERM stop it gracefully (every connection is closed, exit status 0);
// if the tree gives up (too many crashes), it exits with status 1.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <variant>

#include <spindle/io/signals.hpp>
#include <spindle/spindle.hpp>

#include "server.hpp"

namespace {

// Waits for SIGINT/SIGTERM, or for the tree to give up; 0 for a signal.
spindle::task<int> serve(const kv::server& server, spindle::io::signal_set& stop_signals) {
  const auto first =
      co_await spindle::when_any(stop_signals.wait(), spindle::monitor_actor(server.supervisor()));
  co_return first.index() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::atoi(argv[1]) : 7379;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  if (port < 0 || port > 65535 || threads < 0) {
    std::fprintf(stderr, "usage: %s [port] [threads]\n", argv[0]);
    return 2;
  }
  spindle::io::block_signals({SIGINT, SIGTERM});  // before the runtime's threads exist
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  // Its descriptor before the server's first accept: a flood of connections may take every
  // descriptor the process has from then on.
  spindle::io::signal_set stop_signals({SIGINT, SIGTERM});
  kv::server server(rt, {.address = spindle::net::endpoint::loopback_v4(std::uint16_t(port))});
  std::fprintf(stderr, "kv_service listening on %s\n", server.local_endpoint().to_string().c_str());
  const int status = rt.block_on(serve(server, stop_signals));
  server.stop();
  std::fprintf(stderr, "kv_service stopped\n");
  return status;
}
