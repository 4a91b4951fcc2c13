// tls_context (include/spindle/net/tls.hpp): an SSL_CTX with spindle's defaults (TLS >= 1.2, no
// renegotiation, clients verify against the system trust store), certificate and trust loading
// from files or PEM text, ALPN and the server's SNI callback. The error category lives here too.
//
// The SSL_CTX's callbacks (SNI, ALPN) receive the context's `state` as their argument: a stream
// keeps its tls_context (and so the state) alive for as long as its SSL object exists, and a
// context chosen by an SNI selector is kept alive by the selector, which the first context's
// state owns.
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/net/tls.hpp"
#include "net/tls_internal.hpp"

namespace spindle::net {

namespace {

class tls_category_type final : public std::error_category {
 public:
  const char* name() const noexcept override { return "spindle.tls"; }
  std::string message(int code) const override {
    switch (tls_errc(code)) {
      case tls_errc::handshake_failed: return "TLS handshake failed";
      case tls_errc::verification_failed: return "certificate verify failed";
      case tls_errc::truncated: return "connection closed without close_notify";
      case tls_errc::protocol_error: return "TLS protocol error";
      case tls_errc::closed: return "TLS stream closed";
      case tls_errc::configuration: return "TLS configuration refused";
    }
    return "unknown TLS error";
  }
};

using bio_pointer = std::unique_ptr<BIO, decltype(&BIO_free)>;

bio_pointer memory_bio(std::string_view pem) {
  bio_pointer bio(BIO_new_mem_buf(pem.data(), int(pem.size())), &BIO_free);
  if (!bio) detail::throw_tls(tls_errc::configuration, "BIO_new_mem_buf", detail::take_openssl_errors("out of memory"));
  return bio;
}

// SNI (servers): the selector picks the context whose certificate answers this name.
int on_client_hello_name(SSL* ssl, int* alert, void* argument) {
  auto* self = static_cast<tls_context::state*>(argument);
  if (!self->select) return SSL_TLSEXT_ERR_OK;
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  try {
    const tls_context* chosen = self->select(name != nullptr ? std::string_view(name) : std::string_view());
    if (chosen != nullptr && chosen->shared_state() &&
        chosen->shared_state()->context != SSL_get_SSL_CTX(ssl)) {
      if (SSL_set_SSL_CTX(ssl, chosen->shared_state()->context) == nullptr) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
      }
    }
  } catch (...) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  return SSL_TLSEXT_ERR_OK;
}

// ALPN (servers): the first of our protocols the client offered; none in common: no ALPN.
int on_alpn_offer(SSL*, const unsigned char** out, unsigned char* out_length,
                  const unsigned char* offered, unsigned int offered_length, void* argument) {
  auto* self = static_cast<tls_context::state*>(argument);
  if (self->alpn_wire.empty()) return SSL_TLSEXT_ERR_NOACK;
  unsigned char* selected = nullptr;
  const int outcome = SSL_select_next_proto(&selected, out_length, self->alpn_wire.data(),
                                            unsigned(self->alpn_wire.size()), offered, offered_length);
  if (outcome != OPENSSL_NPN_NEGOTIATED) return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

std::shared_ptr<tls_context::state> new_context(tls_context::role side) {
  auto s = std::make_shared<tls_context::state>();
  s->side = side;
  ERR_clear_error();
  s->context = SSL_CTX_new(side == tls_context::role::client ? TLS_client_method() : TLS_server_method());
  if (s->context == nullptr) {
    detail::throw_tls(tls_errc::configuration, "SSL_CTX_new", detail::take_openssl_errors("failed"));
  }
  SSL_CTX_set_min_proto_version(s->context, TLS1_2_VERSION);
  SSL_CTX_set_options(s->context, SSL_OP_NO_RENEGOTIATION);
  return s;
}

}  // namespace

const std::error_category& tls_category() noexcept {
  static const tls_category_type category;
  return category;
}

std::string detail::take_openssl_errors(std::string_view fallback) {
  std::string text;
  while (const unsigned long error = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(error);
    if (!text.empty()) text += "; ";
    if (reason != nullptr) {
      text += reason;
    } else {
      char buffer[256];
      ERR_error_string_n(error, buffer, sizeof buffer);
      text += buffer;
    }
  }
  return text.empty() ? std::string(fallback) : text;
}

void detail::throw_tls(tls_errc code, std::string_view call, std::string_view reason) {
  std::string what = "spindle: tls ";
  what += call;
  what += ": ";
  what += reason;
  throw tls_error(code, what);
}

tls_context tls_context::client() {
  auto s = new_context(role::client);
  tls_context context(std::move(s));
  context.trust_default_paths();
  context.set_verify_peer(true);
  return context;
}

tls_context tls_context::server() {
  auto s = new_context(role::server);
  // Needed for session resumption when client certificates are verified.
  static constexpr unsigned char session_context[] = "spindle";
  SSL_CTX_set_session_id_context(s->context, session_context, sizeof session_context - 1);
  SSL_CTX_set_tlsext_servername_callback(s->context, on_client_hello_name);
  SSL_CTX_set_tlsext_servername_arg(s->context, s.get());
  SSL_CTX_set_alpn_select_cb(s->context, on_alpn_offer, s.get());
  return tls_context(std::move(s));
}

void tls_context::use_certificate_chain_file(const std::filesystem::path& file) {
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(state_->context, file.c_str()) != 1) {
    detail::throw_tls(tls_errc::configuration, "certificate chain " + file.string(),
                      detail::take_openssl_errors("unreadable"));
  }
}

void tls_context::use_private_key_file(const std::filesystem::path& file) {
  ERR_clear_error();
  if (SSL_CTX_use_PrivateKey_file(state_->context, file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(state_->context) != 1) {
    detail::throw_tls(tls_errc::configuration, "private key " + file.string(),
                      detail::take_openssl_errors("unreadable"));
  }
}

void tls_context::use_certificate_chain_pem(std::string_view pem) {
  ERR_clear_error();
  bio_pointer bio = memory_bio(pem);
  X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr) {
    detail::throw_tls(tls_errc::configuration, "certificate chain PEM", detail::take_openssl_errors("no certificate"));
  }
  const int used = SSL_CTX_use_certificate(state_->context, leaf);
  X509_free(leaf);
  if (used != 1 || SSL_CTX_clear_chain_certs(state_->context) != 1) {
    detail::throw_tls(tls_errc::configuration, "certificate chain PEM", detail::take_openssl_errors("refused"));
  }
  while (X509* issuer = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(state_->context, issuer) != 1) {  // takes `issuer` on success
      X509_free(issuer);
      detail::throw_tls(tls_errc::configuration, "certificate chain PEM", detail::take_openssl_errors("refused"));
    }
  }
  ERR_clear_error();  // the end of the PEM text reads as "no start line"
}

void tls_context::use_private_key_pem(std::string_view pem) {
  ERR_clear_error();
  bio_pointer bio = memory_bio(pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) {
    detail::throw_tls(tls_errc::configuration, "private key PEM", detail::take_openssl_errors("no key"));
  }
  const int used = SSL_CTX_use_PrivateKey(state_->context, key);
  EVP_PKEY_free(key);
  if (used != 1 || SSL_CTX_check_private_key(state_->context) != 1) {
    detail::throw_tls(tls_errc::configuration, "private key PEM", detail::take_openssl_errors("refused"));
  }
}

void tls_context::trust_default_paths() {
  ERR_clear_error();
  if (SSL_CTX_set_default_verify_paths(state_->context) != 1) {
    detail::throw_tls(tls_errc::configuration, "default trust paths", detail::take_openssl_errors("refused"));
  }
}

void tls_context::trust_ca_file(const std::filesystem::path& file) {
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(state_->context, file.c_str(), nullptr) != 1) {
    detail::throw_tls(tls_errc::configuration, "CA file " + file.string(),
                      detail::take_openssl_errors("unreadable"));
  }
}

void tls_context::trust_ca_pem(std::string_view pem) {
  ERR_clear_error();
  bio_pointer bio = memory_bio(pem);
  X509_STORE* store = SSL_CTX_get_cert_store(state_->context);
  int added = 0;
  while (X509* certificate = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    const int ok = X509_STORE_add_cert(store, certificate);  // takes its own reference
    X509_free(certificate);
    if (ok != 1) detail::throw_tls(tls_errc::configuration, "CA PEM", detail::take_openssl_errors("refused"));
    ++added;
  }
  ERR_clear_error();  // the end of the PEM text reads as "no start line"
  if (added == 0) detail::throw_tls(tls_errc::configuration, "CA PEM", "no certificate");
}

void tls_context::set_verify_peer(bool verify) {
  state_->verify_peer = verify;
  int mode = SSL_VERIFY_NONE;
  if (verify) {
    mode = state_->side == role::client ? SSL_VERIFY_PEER
                                        : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  }
  SSL_CTX_set_verify(state_->context, mode, nullptr);
}

bool tls_context::verifies_peer() const noexcept { return state_->verify_peer; }

void tls_context::set_alpn_protocols(std::vector<std::string> protocols) {
  std::vector<unsigned char> wire;
  for (const std::string& protocol : protocols) {
    if (protocol.empty() || protocol.size() > 255) {
      throw usage_error("spindle: tls_context::set_alpn_protocols: a protocol name is 1-255 bytes");
    }
    wire.push_back(static_cast<unsigned char>(protocol.size()));
    wire.insert(wire.end(), protocol.begin(), protocol.end());
  }
  if (state_->side == role::client &&
      SSL_CTX_set_alpn_protos(state_->context, wire.data(), unsigned(wire.size())) != 0) {  // 0: success
    detail::throw_tls(tls_errc::configuration, "ALPN", detail::take_openssl_errors("refused"));
  }
  state_->alpn_wire = std::move(wire);
}

void tls_context::on_server_name(server_name_selector select) { state_->select = std::move(select); }

tls_context::role tls_context::context_role() const noexcept { return state_->side; }

void* tls_context::native_handle() const noexcept { return state_->context; }

}  // namespace spindle::net
