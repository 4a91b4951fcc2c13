// TLS streams on both reactor backends: spindle client <-> spindle server (SNI, ALPN, buffered
// reader/writer over TLS, unix_stream as the transport), against `openssl s_server` and
// `openssl s_client`, verification failures (wrong host name, untrusted CA), a full-duplex
// transfer of several MB each way with every byte checked, close_notify against an abrupt close,
// a timed-out read mid-stream that leaves the stream usable, and a runtime destroyed with TLS
// streams open (descriptors back to where they were). The certificates are made at test time
// (support/tls_support.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/net_test_support.hpp"
#include "spindle/net/buffered.hpp"
#include "spindle/net/tls.hpp"
#include "spindle/net/unix.hpp"
#include "support/tls_support.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::net::tls_context;
using spindle::net::tls_errc;
using spindle::net::tls_error;
using spindle::net::tls_stream;
using spindle::testing::join_bounded;

// One CA, a server certificate for "server.test" / localhost / 127.0.0.1, and a second,
// untrusted CA: made once for the whole file (key generation is the slow part).
struct tls_test_pki {
  spindle::testing::test_certificate_authority authority{"spindle test CA"};
  spindle::testing::test_certificate_authority stranger{"untrusted CA"};
  spindle::testing::tls_identity server =
      authority.issue("server.test", "DNS:server.test,DNS:localhost,IP:127.0.0.1");
  spindle::testing::tls_identity other = authority.issue("other.test", "DNS:other.test");
  spindle::testing::tls_identity forged = stranger.issue("server.test", "DNS:server.test");
};

const tls_test_pki& tls_pki() {
  static const tls_test_pki pki;
  return pki;
}

tls_context tls_test_server_context(const spindle::testing::tls_identity& identity) {
  tls_context context = tls_context::server();
  context.use_certificate_chain_pem(identity.certificate_pem);
  context.use_private_key_pem(identity.key_pem);
  return context;
}

tls_context tls_test_client_context() {
  tls_context context = tls_context::client();
  context.trust_ca_pem(tls_pki().authority.certificate_pem());
  return context;
}

class NetTls : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetTls);

// --- spindle <-> spindle -----------------------------------------------------------------------

// Accepts one connection, answers each line with "echo: <line>", then sends close_notify once
// the client has.
task<std::string> tls_line_echo_server(tcp_listener& listener, tls_context context) {
  tls_stream stream = co_await tls_stream::accept(context, co_await listener.accept());
  std::string seen = stream.server_name() + "|" + stream.alpn_protocol();
  spindle::net::buffered_reader in(stream);
  spindle::net::buffered_writer out(stream);
  for (;;) {
    auto line = co_await in.read_line();
    if (!line) break;
    const std::string answer = "echo: " + *line + "\n";
    co_await out.write(answer);
    co_await out.flush();
  }
  co_await stream.shutdown();
  co_await stream.close();
  co_return seen;
}

task<std::vector<std::string>> tls_line_client(endpoint server, tls_context context, std::string name) {
  tls_stream stream = co_await tls_stream::connect(context, co_await tcp_stream::connect(server), name);
  std::vector<std::string> got{stream.protocol_version(), stream.alpn_protocol()};
  spindle::net::buffered_reader in(stream);
  for (const char* text : {"one", "two", "three"}) {
    const std::string request = std::string(text) + "\n";
    co_await stream.write_all(request);
    auto line = co_await in.read_line();
    got.push_back(line.value_or("(end)"));
  }
  co_await stream.shutdown();
  std::byte rest[16];
  got.push_back(std::to_string(co_await stream.read(rest)));  // the server's close_notify: 0
  co_return got;
}

TEST_P(NetTls, ClientAndServerExchangeLinesWithSniAndAlpn) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  tls_context server_context = tls_test_server_context(tls_pki().server);
  server_context.set_alpn_protocols({"http/1.1"});
  tls_context client_context = tls_test_client_context();
  client_context.set_alpn_protocols({"spindle/1", "http/1.1"});
  auto served = rt.spawn(tls_line_echo_server(listener, server_context));
  auto client = rt.spawn(tls_line_client(listener.local_endpoint(), client_context, "server.test"));
  const std::vector<std::string> got = join_bounded(std::move(client), 30s);
  EXPECT_EQ(got, (std::vector<std::string>{"TLSv1.3", "http/1.1", "echo: one", "echo: two",
                                           "echo: three", "0"}));
  EXPECT_EQ(join_bounded(std::move(served), 30s), "server.test|http/1.1");
}

TEST_P(NetTls, ServerNameSelectsTheCertificate) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  tls_context server_context = tls_test_server_context(tls_pki().server);
  const tls_context other_context = tls_test_server_context(tls_pki().other);
  std::atomic<int> asked{0};
  server_context.on_server_name([&asked, other_context](std::string_view name) -> const tls_context* {
    asked.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count read after the join
    return name == "other.test" ? &other_context : nullptr;
  });
  auto served = rt.spawn(tls_line_echo_server(listener, server_context));
  // "other.test" verifies only against the other certificate: the selector must have switched.
  auto client = rt.spawn(tls_line_client(listener.local_endpoint(), tls_test_client_context(), "other.test"));
  EXPECT_EQ(join_bounded(std::move(client), 30s).at(2), "echo: one");
  EXPECT_EQ(join_bounded(std::move(served), 30s), "other.test|");
  EXPECT_EQ(asked.load(), 1);
}

task<std::string> tls_unix_pair_exchange(tls_context server_context, tls_context client_context) {
  auto [a, b] = spindle::net::unix_stream::pair();
  auto accepting = spindle::spawn(tls_stream::accept(server_context, std::move(a)));
  tls_stream client = co_await tls_stream::connect(client_context, std::move(b), "localhost");
  tls_stream server = co_await std::move(accepting);
  co_await client.write_all("over a unix socket");
  co_await client.shutdown();
  std::string got(18, '\0');
  co_await server.read_exact(std::as_writable_bytes(std::span(got)));
  std::byte rest[4];
  if (co_await server.read(rest) != 0) got += "(no close_notify)";
  co_return got;
}

TEST_P(NetTls, RunsOverAUnixStream) {
  spindle::runtime rt(options());
  auto done = rt.spawn(tls_unix_pair_exchange(tls_test_server_context(tls_pki().server),
                                              tls_test_client_context()));
  EXPECT_EQ(join_bounded(std::move(done), 30s), "over a unix socket");
}

// --- verification failures -------------------------------------------------------------------

// Accepts one connection and returns how its handshake ended ("ok" or the error's text).
task<std::string> tls_accept_outcome(tcp_listener& listener, tls_context context) {
  tcp_stream tcp = co_await listener.accept();
  try {
    tls_stream stream = co_await tls_stream::accept(context, std::move(tcp));
    co_return std::string("ok");
  } catch (const tls_error& e) {
    co_return std::string(e.what());
  }
}

// Connects and returns the code and text of the handshake's failure ({0, "ok"} on success).
task<std::pair<int, std::string>> tls_connect_outcome(endpoint server, tls_context context, std::string name) {
  tcp_stream tcp = co_await tcp_stream::connect(server);
  try {
    tls_stream stream = co_await tls_stream::connect(context, std::move(tcp), name);
    co_return std::pair{0, std::string("ok")};
  } catch (const tls_error& e) {
    co_return std::pair{e.code().value(), std::string(e.what())};
  }
}

TEST_P(NetTls, WrongHostNameFailsVerification) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto served = rt.spawn(tls_accept_outcome(listener, tls_test_server_context(tls_pki().server)));
  auto client = rt.spawn(tls_connect_outcome(listener.local_endpoint(), tls_test_client_context(), "wrong.test"));
  const auto [code, text] = join_bounded(std::move(client), 30s);
  EXPECT_EQ(code, int(tls_errc::verification_failed)) << text;
  EXPECT_NE(text.find("certificate verify failed: hostname mismatch"), std::string::npos) << text;
  EXPECT_NE(join_bounded(std::move(served), 30s), "ok");  // the client's alert ends it too
}

TEST_P(NetTls, UntrustedAuthorityFailsVerification) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto served = rt.spawn(tls_accept_outcome(listener, tls_test_server_context(tls_pki().forged)));
  auto client = rt.spawn(tls_connect_outcome(listener.local_endpoint(), tls_test_client_context(), "server.test"));
  const auto [code, text] = join_bounded(std::move(client), 30s);
  EXPECT_EQ(code, int(tls_errc::verification_failed)) << text;
  EXPECT_NE(text.find("certificate verify failed"), std::string::npos) << text;
  EXPECT_NE(join_bounded(std::move(served), 30s), "ok");
}

TEST_P(NetTls, AnIpAddressIsCheckedAgainstTheCertificatesAddresses) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto served = rt.spawn(tls_accept_outcome(listener, tls_test_server_context(tls_pki().server)));
  auto client = rt.spawn(tls_connect_outcome(listener.local_endpoint(), tls_test_client_context(), "127.0.0.1"));
  EXPECT_EQ(join_bounded(std::move(client), 30s).second, "ok");
  EXPECT_EQ(join_bounded(std::move(served), 30s), "ok");
}

// --- a full-duplex bulk transfer --------------------------------------------------------------

task<void> tls_send_pattern(tls_stream& stream, std::uint32_t id, std::size_t size) {
  const std::vector<std::byte> data = pattern(id, size);
  std::size_t done = 0;
  while (done < size) {  // uneven pieces: record boundaries fall anywhere
    const std::size_t step = std::min<std::size_t>(size - done, 1000 + (done * 7) % 150000);
    co_await stream.write_all(std::span<const std::byte>(data).subspan(done, step));
    done += step;
  }
  co_await stream.shutdown();
}

// Reads until close_notify; the number of bytes that matched `id`'s pattern, in order.
task<std::size_t> tls_receive_pattern(tls_stream& stream, std::uint32_t id) {
  std::vector<std::byte> buffer(50000);
  std::size_t total = 0;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) co_return total;
    const std::size_t good = first_mismatch(std::span<const std::byte>(buffer.data(), n), id, total);
    if (good != n) co_return total + good;  // a mismatch: stop counting there
    total += n;
  }
}

// Both directions at once on one stream: a writer task and this task reading.
task<std::size_t> tls_duplex_side(tls_stream stream, std::uint32_t send_id, std::uint32_t receive_id,
                                   std::size_t size) {
  auto writer = spindle::spawn(tls_send_pattern(stream, send_id, size));
  const std::size_t received = co_await tls_receive_pattern(stream, receive_id);
  co_await std::move(writer);
  co_await stream.close();
  co_return received;
}

task<std::size_t> tls_duplex_server(tcp_listener& listener, tls_context context, std::size_t size) {
  tls_stream stream = co_await tls_stream::accept(context, co_await listener.accept());
  co_return co_await tls_duplex_side(std::move(stream), 2, 1, size);
}

task<std::size_t> tls_duplex_client(endpoint server, tls_context context, std::size_t size) {
  tls_stream stream =
      co_await tls_stream::connect(context, co_await tcp_stream::connect(server), "server.test");
  co_return co_await tls_duplex_side(std::move(stream), 1, 2, size);
}

TEST_P(NetTls, FullDuplexTransferOfSeveralMegabytesEachWay) {
  const std::size_t size = std::size_t(scaled(8, 2, 2)) << 20;
  const int before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
    auto served = rt.spawn(tls_duplex_server(listener, tls_test_server_context(tls_pki().server), size));
    auto client = rt.spawn(tls_duplex_client(listener.local_endpoint(), tls_test_client_context(), size));
    EXPECT_EQ(join_bounded(std::move(client), 120s), size);
    EXPECT_EQ(join_bounded(std::move(served), 120s), size);
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

// --- the end of a stream ----------------------------------------------------------------------

// Accepts, sends "bye", then ends with close_notify (clean) or by closing the socket (abrupt).
task<void> tls_ending_server(tcp_listener& listener, tls_context context, bool clean) {
  tls_stream stream = co_await tls_stream::accept(context, co_await listener.accept());
  co_await stream.write_all("bye");
  if (clean) co_await stream.shutdown();
  co_await stream.close();
}

// "bye" then what the next read said: "0" (clean end) or the error code.
task<std::string> tls_read_to_end(endpoint server, tls_context context) {
  tls_stream stream =
      co_await tls_stream::connect(context, co_await tcp_stream::connect(server), "server.test");
  std::string got(3, '\0');
  co_await stream.read_exact(std::as_writable_bytes(std::span(got)));
  std::byte more[8];
  try {
    got += " " + std::to_string(co_await stream.read(more));
  } catch (const tls_error& e) {
    got += e.code() == tls_errc::truncated ? " truncated" : std::string(" ") + e.what();
  }
  co_return got;
}

TEST_P(NetTls, CloseNotifyIsACleanEndAndAnAbruptCloseIsNot) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  for (const bool clean : {true, false}) {
    auto served = rt.spawn(tls_ending_server(listener, tls_test_server_context(tls_pki().server), clean));
    auto client = rt.spawn(tls_read_to_end(listener.local_endpoint(), tls_test_client_context()));
    EXPECT_EQ(join_bounded(std::move(client), 30s), clean ? "bye 0" : "bye truncated");
    join_bounded(std::move(served), 30s);
  }
}

// --- cancellation -----------------------------------------------------------------------------

// Reads "first", then a read that times out (nothing sent yet), then tells the server to go on
// and reads the rest: the timed-out read left the stream usable.
task<std::string> tls_read_with_a_timeout(endpoint server, tls_context context, std::atomic<bool>& timed_out) {
  tls_stream stream =
      co_await tls_stream::connect(context, co_await tcp_stream::connect(server), "server.test");
  std::string got(5, '\0');
  co_await stream.read_exact(std::as_writable_bytes(std::span(got)));
  std::byte buffer[64];
  try {
    co_await spindle::with_timeout(50ms, stream.read(buffer));
    got += " (read did not time out)";
  } catch (const spindle::timeout_error&) {
  }
  try {
    co_await stream.read(buffer, spindle::io::deadline::after(20ms));
    got += " (read did not time out)";
  } catch (const spindle::timeout_error&) {
  }
  timed_out.store(true, std::memory_order_release);  // release: the server goes on after this
  co_await stream.write_all("go");
  std::string rest(6, '\0');
  co_await stream.read_exact(std::as_writable_bytes(std::span(rest)));
  co_return got + rest;
}

task<void> tls_server_that_pauses(tcp_listener& listener, tls_context context) {
  tls_stream stream = co_await tls_stream::accept(context, co_await listener.accept());
  co_await stream.write_all("first");
  std::byte go[2];
  co_await stream.read_exact(go);
  co_await stream.write_all("second");
  co_await stream.shutdown();
}

TEST_P(NetTls, ATimedOutReadMidStreamLeavesTheStreamUsable) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  std::atomic<bool> timed_out{false};
  auto served = rt.spawn(tls_server_that_pauses(listener, tls_test_server_context(tls_pki().server)));
  auto client = rt.spawn(tls_read_with_a_timeout(listener.local_endpoint(), tls_test_client_context(), timed_out));
  EXPECT_EQ(join_bounded(std::move(client), 30s), "firstsecond");
  EXPECT_TRUE(timed_out.load(std::memory_order_acquire));
  join_bounded(std::move(served), 30s);
}

// --- runtime shutdown with streams open -------------------------------------------------------

task<void> tls_read_forever(tls_stream stream, std::atomic<int>& waiting) {
  waiting.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count polled by the test
  std::byte buffer[64];
  for (;;) {
    if (co_await stream.read(buffer) == 0) co_return;
  }
}

task<void> tls_park_connections(tcp_listener& listener, int count, std::atomic<int>& waiting) {
  const tls_context server_context = tls_test_server_context(tls_pki().server);
  const tls_context client_context = tls_test_client_context();
  for (int i = 0; i < count; ++i) {
    auto [client_tcp, server_tcp] = co_await connected_pair(listener);
    auto accepting = spindle::spawn(tls_stream::accept(server_context, std::move(server_tcp)));
    tls_stream client =
        co_await tls_stream::connect(client_context, std::move(client_tcp), "server.test");
    tls_stream server = co_await std::move(accepting);
    spindle::spawn(tls_read_forever(std::move(client), waiting)).detach();
    spindle::spawn(tls_read_forever(std::move(server), waiting)).detach();
  }
}

TEST_P(NetTls, RuntimeDestroyedWithStreamsOpenLeaksNothing) {
  tls_pki();  // made before counting
  const int before = spindle::testing::open_descriptor_count();
  {
    auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
    spindle::runtime rt(options());
    std::atomic<int> waiting{0};
    join_bounded(rt.spawn(tls_park_connections(listener, 16, waiting)), 60s);
    ASSERT_TRUE(spindle::testing::eventually([&] { return waiting.load() == 32; }));
  }  // runtime destroyed: reads cancelled, frames (their streams and sockets) destroyed
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

// --- against the openssl command-line tools ---------------------------------------------------

#ifdef SPINDLE_OPENSSL_PROGRAM

task<std::string> tls_talk_to_s_server(std::uint16_t port, tls_context context) {
  tls_stream stream = co_await tls_stream::connect(
      context, co_await tcp_stream::connect(endpoint::loopback_v4(port)), "server.test");
  co_await stream.write_all("hello s_server\n");
  spindle::net::buffered_reader in(stream);
  auto line = co_await in.read_line();  // s_server -rev answers each line reversed
  co_await stream.shutdown();
  co_return line.value_or("(end)");
}

TEST_P(NetTls, ClientAgainstOpensslServer) {
  spindle::testing::temporary_directory directory;
  const auto certificate = directory.write("server.pem", tls_pki().server.certificate_pem);
  const auto key = directory.write("server.key", tls_pki().server.key_pem);
  spindle::testing::child_process server({SPINDLE_OPENSSL_PROGRAM, "s_server", "-4", "-accept", "0",
                                          "-cert", certificate.string(), "-key", key.string(),
                                          "-naccept", "1", "-rev"});
  ASSERT_TRUE(server.read_until("ACCEPT")) << server.output();
  ASSERT_TRUE(server.read_until("\n")) << server.output();
  const std::size_t colon = server.output().rfind(':');
  const int port = std::atoi(server.output().c_str() + colon + 1);
  ASSERT_GT(port, 0) << server.output();
  spindle::runtime rt(options());
  auto client = rt.spawn(tls_talk_to_s_server(std::uint16_t(port), tls_test_client_context()));
  EXPECT_EQ(join_bounded(std::move(client), 30s), "revres_s olleh");
}

task<std::string> tls_serve_s_client(tcp_listener& listener, tls_context context) {
  tls_stream stream = co_await tls_stream::accept(context, co_await listener.accept());
  spindle::net::buffered_reader in(stream);
  auto line = co_await in.read_line();
  const std::string answer = "spindle heard: " + line.value_or("(end)") + "\n";
  co_await stream.write_all(answer);
  co_await stream.shutdown();
  co_return stream.server_name();
}

TEST_P(NetTls, ServerAgainstOpensslClient) {
  spindle::testing::temporary_directory directory;
  const auto authority = directory.write("ca.pem", tls_pki().authority.certificate_pem());
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  auto served = rt.spawn(tls_serve_s_client(listener, tls_test_server_context(tls_pki().server)));
  spindle::testing::child_process client(
      {SPINDLE_OPENSSL_PROGRAM, "s_client", "-connect", listener.local_endpoint().to_string(),
       "-servername", "server.test", "-verify_hostname", "server.test", "-CAfile", authority.string(),
       "-verify_return_error", "-quiet"});
  client.write_input("ping\n");
  EXPECT_TRUE(client.read_until("spindle heard: ping\n")) << client.output();
  EXPECT_EQ(join_bounded(std::move(served), 30s), "server.test");
  client.close_input();
  EXPECT_EQ(client.finish(), 0) << client.output();
}

#endif

}  // namespace
