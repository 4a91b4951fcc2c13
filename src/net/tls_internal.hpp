// What tls_context.cpp and tls.cpp share (private to src/net): the context's state around its
// SSL_CTX, and the reading of OpenSSL's error queue into tls_error text.
//
// OpenSSL's error queue is per thread and a task may move between threads at every suspension:
// each engine call is preceded by ERR_clear_error() and its errors are read before the next
// suspension (tls.cpp does both under the engine lock).
#pragma once

#include <openssl/ssl.h>

#include <string>
#include <string_view>
#include <vector>

#include "spindle/net/tls.hpp"

namespace spindle::net {

struct tls_context::state {
  SSL_CTX* context = nullptr;  // owned (one reference); streams' SSL objects hold their own
  role side = role::client;
  bool verify_peer = false;
  // ALPN protocols in wire format (each: one length byte, then the name).
  std::vector<unsigned char> alpn_wire;
  server_name_selector select;

  state() = default;
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() { SSL_CTX_free(context); }
};

namespace detail {

// The reasons in OpenSSL's error queue (emptied), "; "-separated; `fallback` if it is empty.
std::string take_openssl_errors(std::string_view fallback);

[[noreturn]] void throw_tls(tls_errc code, std::string_view call, std::string_view reason);

}  // namespace detail
}  // namespace spindle::net
