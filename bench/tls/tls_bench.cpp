// TLS costs against plain TCP (docs/design/io.md, "TLS"): bulk throughput over loopback and the
// HTTPS example's request rate and latency.
//
//   spindle-tls-bench bulk MB CERT KEY
//       MB each way one direction, in one process, over TCP and then over TLS: MB/s.
//   spindle-tls-bench http PORT CONNECTIONS SECONDS [--tls CA]
//       keep-alive GET loop against http_hello on 127.0.0.1:PORT (TLS verified against CA,
//       host name "localhost"): requests/s, p50 and p99 latency.
#include <spindle/spindle.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace net = spindle::net;
using steady = std::chrono::steady_clock;

namespace {

spindle::task<void> end(net::tcp_stream& stream) {
  stream.shutdown(SHUT_WR);
  co_return;
}
spindle::task<void> end(net::tls_stream& stream) { co_await stream.shutdown(); }

template <class Stream>
spindle::task<std::size_t> sink(Stream stream) {
  std::vector<std::byte> buffer(256 * 1024);
  std::size_t total = 0;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    total += n;
  }
  co_await end(stream);  // the source's last read sees a clean end
  co_return total;
}

template <class Stream>
spindle::task<void> source(Stream stream, std::size_t bytes) {
  std::vector<std::byte> buffer(256 * 1024, std::byte{7});
  for (std::size_t sent = 0; sent < bytes; sent += buffer.size()) co_await stream.write_all(buffer);
  co_await end(stream);
  std::byte rest[16];
  co_await stream.read(rest);  // until the peer closes
}

spindle::task<double> bulk(std::size_t bytes, std::optional<std::pair<net::tls_context, net::tls_context>> tls) {
  auto listener = net::tcp_listener::bind(net::endpoint::loopback_v4(0));
  auto accepting = spindle::spawn(listener.accept());
  net::tcp_stream client = co_await net::tcp_stream::connect(listener.local_endpoint());
  net::tcp_stream server = co_await std::move(accepting);
  const auto start = steady::now();
  std::size_t received = 0;
  if (tls) {
    auto server_side = spindle::spawn(net::tls_stream::accept(tls->first, std::move(server)));
    net::tls_stream tls_client = co_await net::tls_stream::connect(tls->second, std::move(client), "localhost");
    net::tls_stream tls_server = co_await std::move(server_side);
    auto sending = spindle::spawn(source(std::move(tls_client), bytes));
    received = co_await sink(std::move(tls_server));
    co_await std::move(sending);
  } else {
    auto sending = spindle::spawn(source(std::move(client), bytes));
    received = co_await sink(std::move(server));
    co_await std::move(sending);
  }
  const double seconds = std::chrono::duration<double>(steady::now() - start).count();
  co_return double(received) / (1 << 20) / seconds;
}

constexpr std::string_view request = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
constexpr std::size_t response_size = 68;  // http_hello's "hello" answer

template <class Stream>
spindle::task<void> http_loop(Stream stream, steady::time_point until, std::vector<double>& latencies) {
  std::vector<std::byte> answer(response_size);
  while (steady::now() < until) {
    const auto sent = steady::now();
    co_await stream.write_all(request);
    co_await stream.read_exact(answer);
    latencies.push_back(std::chrono::duration<double, std::micro>(steady::now() - sent).count());
  }
}

spindle::task<void> http_client(std::uint16_t port, std::optional<net::tls_context> tls,
                                steady::time_point until, std::vector<double>& latencies) {
  net::tcp_stream tcp = co_await net::tcp_stream::connect(net::endpoint::loopback_v4(port));
  tcp.set_no_delay(true);
  if (tls) {
    co_await http_loop(co_await net::tls_stream::connect(*tls, std::move(tcp), "localhost"), until, latencies);
  } else {
    co_await http_loop(std::move(tcp), until, latencies);
  }
}

spindle::task<void> http(std::uint16_t port, int connections, double seconds, std::optional<net::tls_context> tls) {
  const auto until = steady::now() + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(connections));
  std::vector<spindle::join_handle<void>> clients;
  for (int i = 0; i < connections; ++i) {
    clients.push_back(spindle::spawn(http_client(port, tls, until, latencies[std::size_t(i)])));
  }
  for (auto& client : clients) co_await std::move(client);
  std::vector<double> all;
  for (auto& one : latencies) all.insert(all.end(), one.begin(), one.end());
  std::sort(all.begin(), all.end());
  if (all.empty()) co_return;
  std::printf("%s: %.0f requests/s, p50 %.1f us, p99 %.1f us (%zu requests, %d connections)\n",
              tls ? "https" : "http", double(all.size()) / seconds, all[all.size() / 2],
              all[all.size() * 99 / 100], all.size(), connections);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "bulk" && argc == 5) {
    const std::size_t bytes = std::size_t(std::atoi(argv[2])) << 20;
    net::tls_context server = net::tls_context::server();
    server.use_certificate_chain_file(argv[3]);
    server.use_private_key_file(argv[4]);
    net::tls_context client = net::tls_context::client();
    client.trust_ca_file(argv[3]);
    spindle::runtime rt({.workers = 2});
    const double tcp = rt.block_on(bulk(bytes, std::nullopt));
    const double tls = rt.block_on(bulk(bytes, std::pair{server, client}));
    std::printf("bulk %s MB one way: tcp %.0f MB/s, tls %.0f MB/s (%s)\n", argv[2], tcp, tls,
                "TLSv1.3, TLS_AES_256_GCM_SHA384");
    return 0;
  }
  if (mode == "http" && (argc == 5 || argc == 7)) {
    std::optional<net::tls_context> tls;
    if (argc == 7) {
      tls = net::tls_context::client();
      tls->trust_ca_file(argv[6]);
    }
    spindle::runtime rt({.workers = 1});
    rt.block_on(http(std::uint16_t(std::atoi(argv[2])), std::atoi(argv[3]), std::atof(argv[4]), tls));
    return 0;
  }
  std::fprintf(stderr, "usage: %s bulk MB CERT KEY | http PORT CONNECTIONS SECONDS [--tls CA]\n", argv[0]);
  return 2;
}
