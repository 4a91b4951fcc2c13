// HTTP/1.1 keep-alive "hello" server: the http workload of ../shared/BENCH.md.
//
//   spindle-example-http_hello [port] [threads]      (default 18080, one per core)
//
// One task per connection; requests are parsed with the maintained http-parser library
// (libhttp-parser-dev), pipelined requests are answered in order, each with
// "HTTP/1.1 200 OK ... hello". A malformed request gets "400 Bad Request" and the connection is
// closed. Bounded waiting (slowloris): a request must arrive completely within
// `request_timeout` of its first byte, and an idle keep-alive connection is closed after
// `idle_timeout`; a watchdog task per connection shuts the socket down when the deadline passes.
// SIGINT/SIGTERM stop the server gracefully: no new connections, the runtime then cancels the
// open ones. accept() keeps serving after the process runs out of file descriptors (the net
// module waits and retries).
#include <http_parser.h>
#include <signal.h>

#include <spindle/io/signals.hpp>
#include <spindle/net/net.hpp>
#include <spindle/spindle.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using namespace std::chrono_literals;

constexpr std::string_view hello_response =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
constexpr std::string_view bad_request_response =
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
constexpr spindle::clock_duration request_timeout = 10s;
constexpr spindle::clock_duration idle_timeout = 60s;

// Parser state of one connection: counts completed requests and whether each keeps alive.
struct request_counter {
  http_parser parser{};
  std::size_t completed = 0;
  bool close_after = false;
  bool in_message = false;

  request_counter() {
    http_parser_init(&parser, HTTP_REQUEST);
    parser.data = this;
  }
  static const http_parser_settings& settings() {
    static const http_parser_settings table = [] {
      http_parser_settings s{};
      s.on_message_begin = [](http_parser* p) {
        static_cast<request_counter*>(p->data)->in_message = true;
        return 0;
      };
      s.on_message_complete = [](http_parser* p) {
        auto* self = static_cast<request_counter*>(p->data);
        ++self->completed;
        self->in_message = false;
        if (!http_should_keep_alive(p)) self->close_after = true;
        return 0;
      };
      return s;
    }();
    return table;
  }
  // Feeds bytes; false on a parse error.
  bool feed(const char* data, std::size_t size) {
    const std::size_t parsed = http_parser_execute(&parser, &settings(), data, size);
    return HTTP_PARSER_ERRNO(&parser) == HPE_OK && parsed == size;
  }
};

// Shuts the connection down once `deadline` passes without being pushed back.
spindle::task<void> watchdog(spindle::net::tcp_stream& stream, const spindle::clock_time& deadline) {
  for (;;) {
    const spindle::clock_time target = deadline;
    co_await spindle::sleep_until(target);
    if (spindle::now() >= deadline) {
      stream.shutdown(SHUT_RDWR);  // the pending read returns 0: the connection task ends
      co_return;
    }
  }
}

spindle::task<void> serve(spindle::net::tcp_stream stream) {
  stream.set_no_delay(true);
  request_counter requests;
  spindle::clock_time deadline = spindle::now() + idle_timeout;
  auto guard = spindle::spawn(watchdog(stream, deadline));
  std::array<std::byte, 8192> buffer;
  std::string out;
  try {
    for (;;) {
      const std::size_t n = co_await stream.read(buffer);
      if (n == 0) break;
      if (!requests.feed(reinterpret_cast<const char*>(buffer.data()), n)) {
        co_await stream.write_all(bad_request_response);
        break;
      }
      out.clear();
      for (; requests.completed > 0; --requests.completed) out.append(hello_response);
      if (!out.empty()) co_await stream.write_all(out);
      if (requests.close_after) break;
      // A request in progress must finish soon; between requests the idle limit applies.
      deadline = spindle::now() + (requests.in_message ? request_timeout : idle_timeout);
    }
  } catch (const std::system_error&) {
    // reset by the peer, broken pipe: the connection is over
  }
  guard.cancel();
  try {
    co_await std::move(guard);
  } catch (const spindle::task_cancelled&) {
  }
  co_await stream.close();
}

spindle::task<void> accept_loop(spindle::net::tcp_listener& listener) {
  for (;;) {
    spindle::net::tcp_stream connection = co_await listener.accept();
    spindle::spawn(serve(std::move(connection))).detach();
  }
}

spindle::task<int> run_server(std::uint16_t port) {
  spindle::io::signal_set stop_signals({SIGINT, SIGTERM});
  auto listener = spindle::net::tcp_listener::bind(spindle::net::endpoint::loopback_v4(port));
  std::fprintf(stderr, "http_hello listening on %s\n", listener.local_endpoint().to_string().c_str());
  auto acceptor = spindle::spawn(accept_loop(listener));
  const int signal_number = co_await stop_signals.wait();
  std::fprintf(stderr, "http_hello: signal %d, stopping\n", signal_number);
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
  const int port = argc > 1 ? std::atoi(argv[1]) : 18080;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  if (port <= 0 || port > 65535 || threads < 0) {
    std::fprintf(stderr, "usage: %s [port] [threads]\n", argv[0]);
    return 2;
  }
  // Before any thread exists, so every worker inherits the mask and the signals reach the
  // signalfd instead of killing the process.
  spindle::io::block_signals({SIGINT, SIGTERM});
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  return rt.block_on(run_server(std::uint16_t(port)));
}
