// tls_stream (include/spindle/net/tls.hpp): OpenSSL's engine between two memory BIOs, the
// transport driven by spindle's reactor.
//
// Who takes part, and what each may touch:
//   - the engine: `ssl` with its BIOs `incoming` (ciphertext from the transport, not yet
//     consumed by the engine) and `outgoing` (ciphertext the engine produced, not yet taken for
//     sending), and the flags `failed`, `sent_close_notify`, `received_close_notify`. All of it
//     only under `engine_lock` (a std::mutex held for synchronous OpenSSL calls only, never
//     across a suspension), since the reader and the writer may run on two executors at once.
//   - the reader (one task at a time): owns `ciphertext_in`, the buffer the transport reads
//     into, and is the only caller of the transport's read.
//   - the holder of the send turn (`send_turn`, a spindle::mutex; at most one task): owns
//     `outbound` / `outbound_sent` (ciphertext taken from `outgoing` and not yet all written) and
//     is the only caller of the transport's write. The mutex's handoff orders one holder's
//     accesses before the next one's.
// Send turn: ciphertext must reach the transport in the order the engine produced it, so one
// task at a time moves it (drain: take what `outgoing` holds into `outbound`, write it, repeat
// until `outgoing` is empty). A writer encrypts and drains while holding the turn, waiting for it
// if need be. A reader whose engine call produced output (a TLS 1.3 KeyUpdate answer, an alert)
// takes the turn only if it is free, before it waits on the transport; if it is not, the holder
// sends that output: after letting the turn go, a holder looks at `outgoing` again (under the
// engine lock) and, if it holds bytes, tries to take the turn back. Either the reader's output
// was in `outgoing` when the holder looked (the holder, or the next holder, sends it), or it was
// added after the look, and then after the holder let the turn go, so the reader's try_lock sees
// the turn free unless yet another task took it (which looks again when it lets go).
// Cancellation: `outbound` survives a cancelled write: the next holder writes its rest first, so
// a record is never cut short on the wire. Ciphertext the reader received is given to the engine
// before any suspension (io::submit_and_wait returns a completed read's bytes even when a cancel
// raced it), and plaintext is returned without a suspension after the engine handed it out, so a
// cancelled read loses nothing.
// Lifetime: the state is on the heap, owned by the tls_stream; every call refers to it until its
// task completes (the caller keeps the stream alive, as for tcp_stream). The SSL object holds a
// reference to its SSL_CTX, and `context` keeps the tls_context's state (the SNI and ALPN
// callbacks' argument) alive as long as the SSL object.
#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "spindle/core/errors.hpp"
#include "spindle/io/io_wait.hpp"
#include "spindle/net/tls.hpp"
#include "spindle/sync/mutex.hpp"
#include "net/tls_internal.hpp"

namespace spindle::net {

namespace {

// Plaintext encrypted per engine call by a writer before draining: bounds `outgoing`'s growth.
constexpr std::size_t write_chunk = 64 * 1024;
// What one transport read asks for: a few records.
constexpr std::size_t read_chunk = 32 * 1024;

bool is_ip_address(const std::string& name) {
  unsigned char address[16];
  return ::inet_pton(AF_INET, name.c_str(), address) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), address) == 1;
}

}  // namespace

struct tls_stream::state {
  tls_context context;
  std::unique_ptr<detail::tls_transport> transport;

  std::mutex engine_lock;
  SSL* ssl = nullptr;        // owns both BIOs
  BIO* incoming = nullptr;   // under engine_lock
  BIO* outgoing = nullptr;   // under engine_lock
  bool failed = false;       // under engine_lock: a fatal engine error; no further engine calls
  std::string failure;       // under engine_lock: its text
  bool sent_close_notify = false;      // under engine_lock
  bool received_close_notify = false;  // under engine_lock

  std::vector<std::byte> ciphertext_in;  // the reader's

  spindle::mutex send_turn;
  std::vector<std::byte> outbound;  // the send turn holder's
  std::size_t outbound_sent = 0;    // the send turn holder's

  state(tls_context c, std::unique_ptr<detail::tls_transport> t)
      : context(std::move(c)), transport(std::move(t)) {
    ERR_clear_error();
    ssl = SSL_new(static_cast<SSL_CTX*>(context.native_handle()));
    incoming = BIO_new(BIO_s_mem());
    outgoing = BIO_new(BIO_s_mem());
    if (ssl == nullptr || incoming == nullptr || outgoing == nullptr) {
      BIO_free(incoming);
      BIO_free(outgoing);
      SSL_free(ssl);
      ssl = nullptr;
      detail::throw_tls(tls_errc::configuration, "SSL_new", detail::take_openssl_errors("out of memory"));
    }
    SSL_set_bio(ssl, incoming, outgoing);  // the SSL object owns them from here
  }
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() { SSL_free(ssl); }

  // Under engine_lock, right after a failed engine call: what went wrong (and the stream is
  // failed for good unless it was only a want-read).
  std::pair<tls_errc, std::string> engine_failure(int result, bool handshaking) {
    const int error = SSL_get_error(ssl, result);
    if (error == SSL_ERROR_ZERO_RETURN) return {tls_errc::closed, "close_notify received"};
    failed = true;
    tls_errc code = handshaking ? tls_errc::handshake_failed : tls_errc::protocol_error;
    std::string text;
    const long verified = SSL_get_verify_result(ssl);
    if (handshaking && verified != X509_V_OK) {
      code = tls_errc::verification_failed;
      ERR_clear_error();
      text = std::string("certificate verify failed: ") + X509_verify_cert_error_string(verified);
    } else {
      text = detail::take_openssl_errors(error == SSL_ERROR_SYSCALL ? "unexpected end of stream"
                                                                   : "engine error " + std::to_string(error));
    }
    failure = text;
    return {code, std::move(text)};
  }

  void throw_if_failed(std::string_view call) {  // under engine_lock
    if (failed) detail::throw_tls(tls_errc::closed, call, "the stream failed before: " + failure);
  }
};

namespace {

using state = tls_stream::state;

// Gives `bytes` (received from the transport) to the engine.
void feed(state& s, std::span<const std::byte> bytes) {
  std::lock_guard lock(s.engine_lock);
  // A memory BIO takes everything (it grows).
  BIO_write(s.incoming, bytes.data(), int(bytes.size()));
}

// One transport read into the reader's buffer, handed to the engine; the bytes read (0: the
// transport ended).
task<std::size_t> receive(state& s, deadline limit) {
  if (s.ciphertext_in.size() < read_chunk) s.ciphertext_in.resize(read_chunk);
  const std::size_t n = co_await s.transport->read(s.ciphertext_in, limit);
  if (n > 0) feed(s, std::span<const std::byte>(s.ciphertext_in.data(), n));
  co_return n;
}

bool output_pending(state& s) {
  std::lock_guard lock(s.engine_lock);
  return BIO_ctrl_pending(s.outgoing) > 0;
}

// With the send turn held: writes `outbound`'s rest and everything `outgoing` holds.
task<void> drain(state& s, deadline limit) {
  for (;;) {
    if (s.outbound_sent == s.outbound.size()) {
      s.outbound_sent = 0;
      std::lock_guard lock(s.engine_lock);
      const std::size_t pending = BIO_ctrl_pending(s.outgoing);
      s.outbound.resize(pending);
      if (pending == 0) co_return;
      BIO_read(s.outgoing, s.outbound.data(), int(pending));
    }
    const std::span<const std::byte> rest(s.outbound.data() + s.outbound_sent,
                                          s.outbound.size() - s.outbound_sent);
    const std::size_t n = co_await s.transport->write(rest, limit);
    if (n == 0) throw std::system_error(EPIPE, std::system_category(), "spindle: tls send");
    s.outbound_sent += n;
  }
}

// With the send turn held: drains, lets the turn go, and takes it again while output appeared
// meanwhile that no other task took the turn to send (see "Send turn" at the top).
task<void> send_and_release(state& s, deadline limit) {
  for (;;) {
    try {
      co_await drain(s, limit);
    } catch (...) {
      s.send_turn.unlock();
      throw;
    }
    s.send_turn.unlock();
    if (!output_pending(s) || !s.send_turn.try_lock()) co_return;
  }
}

// Encrypts `plaintext` into `outgoing` (the send turn held, so the order is the caller's).
void encrypt(state& s, std::span<const std::byte> plaintext, std::string_view call) {
  std::lock_guard lock(s.engine_lock);
  s.throw_if_failed(call);
  if (s.sent_close_notify) detail::throw_tls(tls_errc::closed, call, "the stream was shut down");
  while (!plaintext.empty()) {
    ERR_clear_error();
    std::size_t written = 0;
    const int result = SSL_write_ex(s.ssl, plaintext.data(), plaintext.size(), &written);
    if (result != 1) {
      auto [code, text] = s.engine_failure(result, false);
      detail::throw_tls(code, call, text);
    }
    plaintext = plaintext.subspan(written);
  }
}

// Runs the handshake to its end (one task: nobody else has the stream yet).
task<void> handshake(state& s, deadline limit) {
  for (;;) {
    int result = 0;
    bool want_read = false;
    tls_errc code{};
    std::string text;
    {
      std::lock_guard lock(s.engine_lock);
      ERR_clear_error();
      result = SSL_do_handshake(s.ssl);
      if (result != 1) {
        want_read = SSL_get_error(s.ssl, result) == SSL_ERROR_WANT_READ;
        if (!want_read) std::tie(code, text) = s.engine_failure(result, true);
      }
    }
    if (!want_read && result != 1) {
      // Tell the peer why (the engine queued an alert), if it still listens.
      try {
        co_await drain(s, limit);
      } catch (...) {
      }
      detail::throw_tls(code, "handshake", text);
    }
    co_await drain(s, limit);
    if (result == 1) co_return;
    if (co_await receive(s, limit) == 0) {
      detail::throw_tls(tls_errc::handshake_failed, "handshake",
                        "the peer closed the connection during the handshake");
    }
  }
}

}  // namespace

tls_stream::tls_stream(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {}
tls_stream::tls_stream(tls_stream&&) noexcept = default;
tls_stream& tls_stream::operator=(tls_stream&&) noexcept = default;
tls_stream::~tls_stream() = default;

task<tls_stream> tls_stream::connect_over(tls_context context,
                                          std::unique_ptr<detail::tls_transport> transport,
                                          std::string server_name, deadline limit) {
  const deadline whole = io::whole_call_deadline(limit);
  if (!context.shared_state() || context.context_role() != tls_context::role::client) {
    throw usage_error("spindle: tls_stream::connect needs a client tls_context");
  }
  if (!transport || !transport->is_open()) {
    throw usage_error("spindle: tls_stream::connect over a stream that is not open");
  }
  if (server_name.empty() && context.verifies_peer()) {
    throw usage_error("spindle: tls_stream::connect: a verifying context needs the server's name");
  }
  auto s = std::make_unique<state>(std::move(context), std::move(transport));
  SSL_set_connect_state(s->ssl);
  if (!server_name.empty()) {
    const bool numeric = is_ip_address(server_name);
    ERR_clear_error();
    // SNI carries host names only (RFC 6066 3).
    if (!numeric && SSL_set_tlsext_host_name(s->ssl, server_name.c_str()) != 1) {
      detail::throw_tls(tls_errc::configuration, "server name", detail::take_openssl_errors(server_name));
    }
    if (s->context.verifies_peer()) {
      const int set = numeric ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), server_name.c_str())
                              : SSL_set1_host(s->ssl, server_name.c_str());
      if (set != 1) {
        detail::throw_tls(tls_errc::configuration, "server name", detail::take_openssl_errors(server_name));
      }
      SSL_set_hostflags(s->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    }
  }
  co_await handshake(*s, whole);
  co_return tls_stream(std::move(s));
}

task<tls_stream> tls_stream::accept_over(tls_context context,
                                         std::unique_ptr<detail::tls_transport> transport,
                                         deadline limit) {
  const deadline whole = io::whole_call_deadline(limit);
  if (!context.shared_state() || context.context_role() != tls_context::role::server) {
    throw usage_error("spindle: tls_stream::accept needs a server tls_context");
  }
  if (!transport || !transport->is_open()) {
    throw usage_error("spindle: tls_stream::accept over a stream that is not open");
  }
  auto s = std::make_unique<state>(std::move(context), std::move(transport));
  SSL_set_accept_state(s->ssl);
  co_await handshake(*s, whole);
  co_return tls_stream(std::move(s));
}

task<std::size_t> tls_stream::read(std::span<std::byte> buffer, deadline limit) {
  if (!state_) detail::throw_tls(tls_errc::closed, "read", "no stream (moved from)");
  if (buffer.empty()) co_return 0;
  state& s = *state_;
  const deadline whole = io::whole_call_deadline(limit);
  for (;;) {
    bool output = false;
    {
      std::lock_guard lock(s.engine_lock);
      if (s.received_close_notify) co_return 0;
      s.throw_if_failed("read");
      ERR_clear_error();
      std::size_t got = 0;
      const int result = SSL_read_ex(s.ssl, buffer.data(), buffer.size(), &got);
      if (result == 1) co_return got;  // no suspension after taking plaintext (see the top)
      const int error = SSL_get_error(s.ssl, result);
      if (error == SSL_ERROR_ZERO_RETURN) {
        s.received_close_notify = true;
        co_return 0;
      }
      if (error != SSL_ERROR_WANT_READ) {
        auto [code, text] = s.engine_failure(result, false);
        detail::throw_tls(code, "read", text);
      }
      output = BIO_ctrl_pending(s.outgoing) > 0;
    }
    // The engine's answers (KeyUpdate) go out before this task waits; if a writer holds the
    // turn, it sends them.
    if (output && s.send_turn.try_lock()) co_await send_and_release(s, whole);
    if (co_await receive(s, whole) == 0) {
      std::lock_guard lock(s.engine_lock);
      s.failed = true;
      s.failure = "the peer closed the connection without close_notify";
      detail::throw_tls(tls_errc::truncated, "read", s.failure);
    }
  }
}

task<void> tls_stream::read_exact(std::span<std::byte> buffer, deadline limit) {
  const deadline whole = io::whole_call_deadline(limit);
  std::size_t done = 0;
  while (done < buffer.size()) {
    const std::size_t n = co_await read(buffer.subspan(done), whole);
    if (n == 0) {
      throw std::system_error(ECONNRESET, std::system_category(),
                              "spindle: tls read_exact: stream ended after " + std::to_string(done) +
                                  " of " + std::to_string(buffer.size()) + " bytes");
    }
    done += n;
  }
}

task<std::size_t> tls_stream::write(std::span<const std::byte> buffer, deadline limit) {
  if (!state_) detail::throw_tls(tls_errc::closed, "write", "no stream (moved from)");
  if (buffer.empty()) co_return 0;
  // At most one chunk: a write may be short, as tcp_stream's.
  const std::span<const std::byte> chunk = buffer.first(std::min(buffer.size(), write_chunk));
  co_await write_all(chunk, limit);
  co_return chunk.size();
}

task<void> tls_stream::write_all(buffer_list buffers, deadline limit) {
  if (!state_) detail::throw_tls(tls_errc::closed, "write", "no stream (moved from)");
  state& s = *state_;
  const deadline whole = io::whole_call_deadline(limit);
  auto turn = co_await s.send_turn.lock();
  turn.release();  // send_and_release lets it go
  try {
    std::size_t since_drain = 0;
    for (std::span<const std::byte> buffer : buffers) {
      while (!buffer.empty()) {
        const std::size_t step = std::min(buffer.size(), write_chunk - since_drain);
        encrypt(s, buffer.first(step), "write");
        buffer = buffer.subspan(step);
        since_drain += step;
        if (since_drain == write_chunk) {
          co_await drain(s, whole);
          since_drain = 0;
        }
      }
    }
  } catch (...) {
    s.send_turn.unlock();
    throw;
  }
  co_await send_and_release(s, whole);
}

task<void> tls_stream::write_all(std::span<const std::byte> buffer, deadline limit) {
  const std::span<const std::byte> one[1] = {buffer};
  co_await write_all(buffer_list(one), limit);
}

task<void> tls_stream::write_all(std::string_view text, deadline limit) {
  const std::span<const std::byte> one[1] = {as_bytes(text)};
  co_await write_all(buffer_list(one), limit);
}

task<void> tls_stream::shutdown(deadline limit) {
  if (!state_) detail::throw_tls(tls_errc::closed, "shutdown", "no stream (moved from)");
  state& s = *state_;
  const deadline whole = io::whole_call_deadline(limit);
  auto turn = co_await s.send_turn.lock();
  turn.release();  // send_and_release lets it go
  bool first = false;
  {
    std::lock_guard lock(s.engine_lock);
    if (!s.sent_close_notify && !s.failed) {
      ERR_clear_error();
      SSL_shutdown(s.ssl);  // queues close_notify in `outgoing` (0: the peer's is still to come)
      ERR_clear_error();
      s.sent_close_notify = true;
      first = true;
    }
  }
  co_await send_and_release(s, whole);
  if (first && s.transport->is_open()) {
    try {
      s.transport->shutdown_write();
    } catch (const std::system_error& e) {
      // ENOTCONN: the peer is gone already (it read our last bytes and closed): nothing to end.
      if (e.code() != std::error_code(ENOTCONN, std::system_category())) throw;
    }
  }
}

task<void> tls_stream::close() {
  if (!state_ || !state_->transport->is_open()) co_return;
  co_await state_->transport->close();
}

bool tls_stream::is_open() const noexcept { return state_ && state_->transport->is_open(); }

int tls_stream::native_handle() const noexcept {
  return state_ ? state_->transport->native_handle() : -1;
}

std::string tls_stream::alpn_protocol() const {
  if (!state_) return {};
  std::lock_guard lock(state_->engine_lock);
  const unsigned char* name = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(state_->ssl, &name, &length);
  return name != nullptr ? std::string(reinterpret_cast<const char*>(name), length) : std::string();
}

std::string tls_stream::server_name() const {
  if (!state_) return {};
  std::lock_guard lock(state_->engine_lock);
  const char* name = SSL_get_servername(state_->ssl, TLSEXT_NAMETYPE_host_name);
  return name != nullptr ? std::string(name) : std::string();
}

std::string tls_stream::protocol_version() const {
  if (!state_) return {};
  std::lock_guard lock(state_->engine_lock);
  return SSL_get_version(state_->ssl);
}

}  // namespace spindle::net
