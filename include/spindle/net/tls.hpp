// TLS streams over OpenSSL: a tls_context (certificates, trust, verification, ALPN, SNI) and a
// tls_stream that runs TLS over an already connected stream (tcp_stream, unix_stream, or any
// movable stream with tcp_stream's read / write / shutdown / close calls).
//
//   auto context = net::tls_context::client();                 // verifies, system trust store
//   auto tcp = co_await net::tcp_stream::connect("example.org", 443);
//   auto tls = co_await net::tls_stream::connect(context, std::move(tcp), "example.org");
//   co_await tls.write_all("GET / HTTP/1.1\r\n...");
//   std::size_t n = co_await tls.read(buffer);                 // 0: the peer sent close_notify
//   co_await tls.shutdown();                                   // close_notify, then SHUT_WR
//
// Who takes part: the OpenSSL engine (an SSL object) never touches the socket. It reads
// ciphertext from one memory BIO (`incoming`, filled by the reading task with what the
// transport delivered) and writes ciphertext into another (`outgoing`, drained by whoever holds
// the send turn, through the transport's write). So every wait is an ordinary spindle I/O wait
// on the executor running the task (io_uring or epoll), cancellable, with deadlines.
// Concurrency: one reader and one writer may use a stream at once (full duplex), as for
// tcp_stream; they may run on different executors. OpenSSL's SSL object is not thread-safe and a
// read may need to write (a TLS 1.3 KeyUpdate answer), so: (1) every call into the SSL object and
// the two BIOs is made under the stream's engine lock (a std::mutex, held only for synchronous
// OpenSSL calls, never across a suspension); (2) ciphertext goes to the transport in the order
// the engine produced it, by one task at a time: the holder of the send turn (a spindle::mutex).
// A writer waits for the turn; a reader that left engine output behind takes the turn only if it
// is free (try_lock) and otherwise leaves the output to the holder, which looks for more output
// after letting the turn go (see src/net/tls.cpp, "Send turn"), so nothing is left stranded.
// Renegotiation (TLS 1.2) is refused; the minimum protocol version is TLS 1.2.
//
// Errors: tls_error (a std::system_error in tls_category()) with OpenSSL's reason text, e.g.
// "spindle: tls handshake: certificate verify failed: hostname mismatch"; the transport's own
// errors (std::system_error in the system category) pass through. End of stream: read returns 0
// only after the peer's close_notify (a clean end); a transport that ends without one throws
// tls_error(tls_errc::truncated), so a truncation attack is never taken for the end of the data.
//
// Cancellation and deadlines (io/deadline.hpp: the optional last argument; one deadline covers
// the whole call): a cancelled or timed-out read leaves the stream usable: it gives plaintext
// only when it returns (ciphertext it had read stays in the engine for the next read). A cancelled
// or timed-out write: the plaintext the engine accepted (whole calls' chunks, in order) is queued
// as ciphertext and goes out before any later write's, so the stream stays consistent, but how
// much of the cancelled write will reach the peer is unknown (as for tcp_stream). The handshake
// (connect / accept) cancelled or timed out leaves nothing: the stream is destroyed with it.
//
// Lifetimes: a tls_stream owns its transport (closed by close() or, synchronously, by the
// destructor) and its engine; it is movable (the state lives on the heap), not copyable; moving
// or destroying it while a call is pending is the caller's race, as for tcp_stream. A
// tls_context is a shared handle (copying it shares the OpenSSL SSL_CTX); each stream keeps its
// context alive. Configure a context before the first stream uses it: changing it afterwards
// is not synchronised with the streams' handshakes.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "spindle/io/deadline.hpp"
#include "spindle/net/net.hpp"
#include "spindle/task/task.hpp"

namespace spindle::net {

// What went wrong in TLS (tls_error's code, in tls_category()).
enum class tls_errc {
  handshake_failed = 1,  // the handshake failed (no common protocol or cipher, bad messages...)
  verification_failed,   // the peer's certificate did not verify (untrusted, expired, name)
  truncated,             // the transport ended without the peer's close_notify
  protocol_error,        // a TLS error after the handshake (bad record MAC, unexpected message)
  closed,                // the stream was shut down, failed before, or is moved from / closed
  configuration,         // a context setting was refused (a key that does not match, bad PEM)
};

const std::error_category& tls_category() noexcept;
inline std::error_code make_error_code(tls_errc e) noexcept { return {int(e), tls_category()}; }

// what() is the message as given ("spindle: tls handshake: certificate verify failed: hostname
// mismatch"), without the category's text appended; code() says which kind of failure.
class tls_error : public std::system_error {
 public:
  tls_error(tls_errc code, const std::string& what)
      : std::system_error(make_error_code(code)), message_(what) {}
  const char* what() const noexcept override { return message_.what(); }

 private:
  std::runtime_error message_;  // a reference-counted string: copying never throws
};

class tls_context {
 public:
  enum class role { client, server };

  // A client context: verifies the server's certificate chain against the system's default
  // trust store (/etc/ssl/certs) and its name against the one given to connect. TLS >= 1.2.
  static tls_context client();
  // A server context: give it a certificate chain and key. It asks for no client certificate
  // (set_verify_peer(true) requires one, verified against the trust store given).
  static tls_context server();

  // The certificate chain (leaf first) and its private key, from PEM files or PEM text.
  // tls_error(configuration) when unreadable or when the key does not match the certificate.
  void use_certificate_chain_file(const std::filesystem::path& file);
  void use_private_key_file(const std::filesystem::path& file);
  void use_certificate_chain_pem(std::string_view pem);
  void use_private_key_pem(std::string_view pem);

  // Trust: the system's default paths, and/or CA certificates from a PEM file or PEM text
  // (each adds to what is trusted).
  void trust_default_paths();
  void trust_ca_file(const std::filesystem::path& file);
  void trust_ca_pem(std::string_view pem);

  // Verification of the peer's certificate: on by default for clients (turning it off makes
  // the connection open to any man in the middle: tests only); off by default for servers.
  void set_verify_peer(bool verify);
  bool verifies_peer() const noexcept;

  // ALPN: a client offers these protocols in order; a server picks the first of its list that
  // the client offered (no overlap: no protocol is selected, the handshake goes on).
  void set_alpn_protocols(std::vector<std::string> protocols);

  // Servers: called during the handshake with the name the client asked for (SNI; empty if it
  // sent none); it returns the context to serve the connection with (a server context with
  // another certificate), or nullptr to keep this one. An exception from it fails the
  // handshake. It runs on the executor running accept, with the stream's engine lock held: it
  // must not block or call into the stream. The callback and the contexts it returns are kept
  // alive by this context.
  using server_name_selector = std::function<const tls_context*(std::string_view server_name)>;
  void on_server_name(server_name_selector select);

  role context_role() const noexcept;
  // The SSL_CTX*, for settings spindle does not wrap (ciphers, session caching).
  void* native_handle() const noexcept;

  struct state;
  const std::shared_ptr<state>& shared_state() const noexcept { return state_; }

 private:
  explicit tls_context(std::shared_ptr<state> s) noexcept : state_(std::move(s)) {}
  std::shared_ptr<state> state_;
};

namespace detail {

// The stream under TLS, type-erased: the few calls the engine needs.
class tls_transport {
 public:
  virtual ~tls_transport() = default;
  virtual task<std::size_t> read(std::span<std::byte> buffer, deadline limit) = 0;
  virtual task<std::size_t> write(std::span<const std::byte> buffer, deadline limit) = 0;
  virtual void shutdown_write() = 0;
  virtual task<void> close() = 0;
  virtual bool is_open() const noexcept = 0;
  virtual int native_handle() const noexcept = 0;
};

template <class Stream>
class tls_transport_over final : public tls_transport {
 public:
  explicit tls_transport_over(Stream stream) noexcept : stream_(std::move(stream)) {}
  task<std::size_t> read(std::span<std::byte> buffer, deadline limit) override {
    return stream_.read(buffer, limit);
  }
  task<std::size_t> write(std::span<const std::byte> buffer, deadline limit) override {
    return stream_.write(buffer, limit);
  }
  void shutdown_write() override { stream_.shutdown(SHUT_WR); }
  task<void> close() override { return stream_.close(); }
  bool is_open() const noexcept override { return stream_.is_open(); }
  int native_handle() const noexcept override { return stream_.native_handle(); }

 private:
  Stream stream_;
};

}  // namespace detail

class tls_stream {
 public:
  tls_stream() = default;
  tls_stream(tls_stream&&) noexcept;
  tls_stream& operator=(tls_stream&&) noexcept;
  ~tls_stream();

  // The client handshake over `transport` (connected). `server_name` is sent as SNI (unless it
  // is an IP address) and checked against the certificate when the context verifies (an IP
  // address against its IP entries); empty: no SNI, and a verifying context refuses (usage_error).
  template <class Stream>
  static task<tls_stream> connect(const tls_context& context, Stream transport,
                                  std::string server_name, deadline limit = {}) {
    return connect_over(context, std::make_unique<detail::tls_transport_over<Stream>>(std::move(transport)),
                        std::move(server_name), limit);
  }
  // The server handshake over `transport` (accepted).
  template <class Stream>
  static task<tls_stream> accept(const tls_context& context, Stream transport, deadline limit = {}) {
    return accept_over(context, std::make_unique<detail::tls_transport_over<Stream>>(std::move(transport)),
                       limit);
  }
  static task<tls_stream> connect_over(tls_context context,
                                       std::unique_ptr<detail::tls_transport> transport,
                                       std::string server_name, deadline limit = {});
  static task<tls_stream> accept_over(tls_context context,
                                      std::unique_ptr<detail::tls_transport> transport,
                                      deadline limit = {});

  // At most buffer.size() bytes of plaintext; 0 once the peer sent close_notify (and for an
  // empty buffer); tls_error(truncated) if the transport ended without it.
  task<std::size_t> read(std::span<std::byte> buffer, deadline limit = {});
  // Exactly buffer.size() bytes; std::system_error(ECONNRESET) if the stream ends cleanly first.
  task<void> read_exact(std::span<std::byte> buffer, deadline limit = {});
  // Encrypts up to a chunk (64 KiB) of `buffer`, sends it; returns the plaintext bytes taken.
  task<std::size_t> write(std::span<const std::byte> buffer, deadline limit = {});
  task<void> write_all(std::span<const std::byte> buffer, deadline limit = {});
  task<void> write_all(std::string_view text, deadline limit = {});
  // Every buffer in order; small buffers share records (one engine call per 64 KiB).
  task<void> write_all(buffer_list buffers, deadline limit = {});
  // Sends close_notify, then shuts the transport's sending side (SHUT_WR); reading may go on
  // until the peer's close_notify. Writes afterwards throw tls_error(closed).
  task<void> shutdown(deadline limit = {});
  // Closes the transport (no close_notify: shutdown() first for a clean end).
  task<void> close();

  bool is_open() const noexcept;
  // The transport's descriptor (-1 when closed).
  int native_handle() const noexcept;
  // What the handshake settled: the protocol selected by ALPN (empty: none), the server name
  // the client asked for (on a server; empty: no SNI), "TLSv1.3" / "TLSv1.2".
  std::string alpn_protocol() const;
  std::string server_name() const;
  std::string protocol_version() const;

  struct state;

 private:
  explicit tls_stream(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

}  // namespace spindle::net

template <>
struct std::is_error_code_enum<spindle::net::tls_errc> : std::true_type {};
