// HTTPS-style TLS over TCP: a server and a client in one program, with a throwaway certificate.
#include <spindle/spindle.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

namespace net = spindle::net;

spindle::task<std::string> serve_one(net::tcp_listener& listener, net::tls_context context) {
  // The TLS handshake runs over the accepted TCP stream; then the same calls as tcp_stream.
  net::tls_stream stream = co_await net::tls_stream::accept(context, co_await listener.accept());
  net::buffered_reader in(stream);
  std::optional<std::string> line = co_await in.read_line();
  const std::string answer = "hello, " + line.value_or("nobody") + "\n";
  co_await stream.write_all(answer);
  co_await stream.shutdown();  // close_notify: the client's next read returns 0
  co_return stream.server_name();  // the name the client asked for (SNI)
}

spindle::task<std::string> ask(net::endpoint server, net::tls_context context) {
  net::tcp_stream tcp = co_await net::tcp_stream::connect(server);
  // Verifies the certificate chain and that it names "localhost"; sends "localhost" as SNI.
  net::tls_stream stream = co_await net::tls_stream::connect(context, std::move(tcp), "localhost");
  co_await stream.write_all("spindle\n");
  net::buffered_reader in(stream);
  std::optional<std::string> reply = co_await in.read_line();
  std::optional<std::string> end = co_await in.read_line();  // nullopt: a clean end
  co_return reply.value_or("") + (end ? " (no clean end)" : "");
}

spindle::task<bool> run(std::filesystem::path directory) {
  auto listener = net::tcp_listener::bind(net::endpoint::loopback_v4(0));
  net::tls_context server_context = net::tls_context::server();
  server_context.use_certificate_chain_file(directory / "cert.pem");
  server_context.use_private_key_file(directory / "key.pem");
  net::tls_context client_context = net::tls_context::client();  // verifies, system trust store
  client_context.trust_ca_file(directory / "cert.pem");           // ...and our self-signed one
  auto server = spindle::spawn(serve_one(listener, server_context));
  const std::string reply = co_await ask(listener.local_endpoint(), client_context);
  const std::string asked_for = co_await std::move(server);
  co_return reply == "hello, spindle" && asked_for == "localhost";
}

int main() {
  // A self-signed certificate for "localhost", made by the openssl tool in a temp directory.
  std::string directory = (std::filesystem::temp_directory_path() / "tls-guide-XXXXXX").string();
  if (::mkdtemp(directory.data()) == nullptr) return 1;
  const std::string make_certificate =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
      "-subj /CN=localhost -addext subjectAltName=DNS:localhost "
      "-keyout " + directory + "/key.pem -out " + directory + "/cert.pem 2>/dev/null";
  bool ok = std::system(make_certificate.c_str()) == 0;
  if (ok) {
    spindle::runtime rt;
    ok = rt.block_on(run(directory));
  }
  std::filesystem::remove_all(directory);
  return ok ? 0 : 1;
}
