// The live view: a runtime serves its diagnostics over HTTP on a loopback port.
#include <spindle/spindle.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace net = spindle::net;

// A minimal HTTP/1.1 GET with spindle's own sockets (the server closes every connection).
spindle::task<std::string> http_get(std::uint16_t port, std::string path) {
  net::tcp_stream stream = co_await net::tcp_stream::connect(net::endpoint::loopback_v4(port));
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  co_await stream.write_all(request);
  std::string response;
  std::array<std::byte, 4096> buffer;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    response.append(reinterpret_cast<const char*>(buffer.data()), n);
  }
  co_return response;
}

int main() {
  spindle::runtime_options options;
  options.diagnostics.server_address = "127.0.0.1:0";  // or SPINDLE_DIAGNOSTICS=127.0.0.1:0
  spindle::runtime rt(options);
  const std::uint16_t port = rt.diagnostics_port();  // 0 when nothing serves
  if (port == 0) return 1;

  const std::string metrics = rt.block_on(http_get(port, "/metrics"));
  const std::string snapshot = rt.block_on(http_get(port, "/api/snapshot"));
  return metrics.starts_with("HTTP/1.1 200") && metrics.find("spindle_") != std::string::npos &&
                 snapshot.starts_with("HTTP/1.1 200") &&
                 snapshot.find("\"executors\"") != std::string::npos
             ? 0
             : 1;
}
