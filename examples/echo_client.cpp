// Load generator for echo_server: C connections each send M messages of S bytes and check that
// every byte comes back; prints throughput.
//
//   spindle-example-echo_client [port] [connections] [messages] [size] [threads]
//   (defaults: 18081 64 1000 4096, one thread per core)
#include <spindle/net/net.hpp>
#include <spindle/spindle.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct settings {
  std::uint16_t port;
  long messages;
  std::size_t size;
};

// Returns the number of bytes echoed correctly.
spindle::task<long> client(settings s, int id) {
  auto stream = co_await spindle::net::tcp_stream::connect(spindle::net::endpoint::loopback_v4(s.port));
  std::vector<std::byte> out(s.size), in(s.size);
  long verified = 0;
  for (long m = 0; m < s.messages; ++m) {
    for (std::size_t i = 0; i < s.size; ++i) out[i] = std::byte((i * 131 + m * 7 + id) & 0xff);
    co_await stream.write_all(out);
    co_await stream.read_exact(in);
    if (in != out) throw std::runtime_error("echo_client: corrupted echo");
    verified += long(s.size);
  }
  stream.shutdown(SHUT_WR);
  co_await stream.close();
  co_return verified;
}

spindle::task<long> run(settings s, int connections) {
  std::vector<spindle::join_handle<long>> clients;
  for (int c = 0; c < connections; ++c) clients.push_back(spindle::spawn(client(s, c)));
  long total = 0;
  for (auto& c : clients) total += co_await c;
  co_return total;
}

}  // namespace

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::atoi(argv[1]) : 18081;
  const int connections = argc > 2 ? std::atoi(argv[2]) : 64;
  const long messages = argc > 3 ? std::atol(argv[3]) : 1000;
  const long size = argc > 4 ? std::atol(argv[4]) : 4096;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  if (port <= 0 || port > 65535 || connections <= 0 || messages <= 0 || size <= 0 || threads < 0) {
    std::fprintf(stderr, "usage: %s [port] [connections] [messages] [size] [threads]\n", argv[0]);
    return 2;
  }
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  const auto start = std::chrono::steady_clock::now();
  const long bytes = rt.block_on(run({std::uint16_t(port), messages, std::size_t(size)}, connections));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("echo_client: %d connections, %ld bytes echoed and verified in %.3f s: %.1f MB/s\n",
              connections, bytes, seconds, double(bytes) / seconds / 1e6);
  return bytes == long(connections) * messages * size ? 0 : 1;
}
