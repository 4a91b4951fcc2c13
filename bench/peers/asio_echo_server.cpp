// TCP echo server on Boost.Asio, the peer that examples/echo_server.cpp is measured against
// (docs/design/benchmarks.md, "echo"): the same protocol and the same 16 KiB read buffer, in
// Asio's idiomatic form (completion handlers, one io_context run by <threads> threads). Driven by
// spindle-example-echo_client, which checks every byte.
//
//   spindle-asio-echo-server <port> <threads>
#include <utility>  // Boost 1.74 asio/awaitable.hpp misses it under g++ 12 -std=c++20
#include <array>
#include <boost/asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

class connection : public std::enable_shared_from_this<connection> {
 public:
  explicit connection(tcp::socket socket) : socket_(std::move(socket)) {}
  void read() {
    socket_.async_read_some(asio::buffer(buffer_),
                            [self = shared_from_this()](boost::system::error_code error,
                                                        std::size_t size) {
                              if (!error) self->write(size);
                            });
  }

 private:
  void write(std::size_t size) {
    asio::async_write(socket_, asio::buffer(buffer_.data(), size),
                      [self = shared_from_this()](boost::system::error_code error, std::size_t) {
                        if (!error) self->read();
                      });
  }
  tcp::socket socket_;
  std::array<char, 16384> buffer_;
};

void accept_next(tcp::acceptor& acceptor) {
  acceptor.async_accept([&acceptor](boost::system::error_code error, tcp::socket socket) {
    if (!error) std::make_shared<connection>(std::move(socket))->read();
    accept_next(acceptor);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::atoi(argv[1]) : 18082;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  if (port <= 0 || port > 65535 || threads <= 0) {
    std::fprintf(stderr, "usage: %s <port> <threads>\n", argv[0]);
    return 2;
  }
  asio::io_context context(threads);
  tcp::acceptor acceptor(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                                static_cast<unsigned short>(port)));
  accept_next(acceptor);
  asio::signal_set stop_signals(context, SIGINT, SIGTERM);
  stop_signals.async_wait([&](auto, int) { context.stop(); });
  std::fprintf(stderr, "asio_echo_server listening on 127.0.0.1:%d with %d threads\n", port, threads);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([&] { context.run(); });
  context.run();
  for (auto& thread : pool) thread.join();
  return 0;
}
