// spindle::net::endpoint (include/spindle/net/net.hpp) and the helpers of net_common.hpp.
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "spindle/core/errors.hpp"
#include "spindle/net/net.hpp"
#include "net/net_common.hpp"

namespace spindle::net {
namespace detail {

void throw_error(int error, const char* call) {
  throw std::system_error(error, std::system_category(), std::string("spindle: ") + call);
}

void throw_errno(const char* call) { throw_error(errno, call); }

int open_socket(int family, int type) {
  const int fd = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("socket");
  return fd;
}

endpoint socket_name(int fd, bool peer) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  auto* native = reinterpret_cast<sockaddr*>(&address);
  const int rc = peer ? ::getpeername(fd, native, &length) : ::getsockname(fd, native, &length);
  if (rc != 0) throw_errno(peer ? "getpeername" : "getsockname");
  return endpoint::from_native(native, length);
}

void close_quietly(int fd) noexcept {
  if (fd >= 0) ::close(fd);
}

}  // namespace detail

endpoint::endpoint(std::string_view address, std::uint16_t port) {
  // inet_pton wants a NUL-terminated string; longer than any numeric address means invalid.
  char text[INET6_ADDRSTRLEN + 1];
  if (address.empty() || address.size() >= sizeof text ||
      address.find('\0') != std::string_view::npos) {
    throw usage_error("spindle: not an IPv4 or IPv6 address: \"" + std::string(address) +
                                "\"");
  }
  std::memcpy(text, address.data(), address.size());
  text[address.size()] = '\0';

  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage_);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage_);
  if (::inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    length_ = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    length_ = sizeof(sockaddr_in6);
  } else {
    storage_ = {};
    throw usage_error("spindle: not an IPv4 or IPv6 address: \"" + std::string(address) +
                      "\" (host names: co_await net::resolve(host, port))");
  }
}

endpoint endpoint::loopback_v4(std::uint16_t port) {
  endpoint e;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&e.storage_);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  e.length_ = sizeof(sockaddr_in);
  return e;
}

endpoint endpoint::any_v4(std::uint16_t port) {
  endpoint e;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&e.storage_);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  v4->sin_addr.s_addr = htonl(INADDR_ANY);
  e.length_ = sizeof(sockaddr_in);
  return e;
}

endpoint endpoint::from_native(const sockaddr* address, socklen_t length) {
  if (address == nullptr || length < socklen_t(sizeof(sa_family_t))) {
    throw usage_error("spindle: endpoint::from_native: no address");
  }
  endpoint e;
  if (address->sa_family == AF_INET && length >= socklen_t(sizeof(sockaddr_in))) {
    std::memcpy(&e.storage_, address, sizeof(sockaddr_in));
    e.length_ = sizeof(sockaddr_in);
  } else if (address->sa_family == AF_INET6 && length >= socklen_t(sizeof(sockaddr_in6))) {
    std::memcpy(&e.storage_, address, sizeof(sockaddr_in6));
    e.length_ = sizeof(sockaddr_in6);
  } else {
    throw usage_error("spindle: endpoint::from_native: not an IPv4 or IPv6 address");
  }
  return e;
}

std::uint16_t endpoint::port() const noexcept {
  switch (storage_.ss_family) {
    case AF_INET: return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
    case AF_INET6: return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
    default: return 0;
  }
}

std::string endpoint::to_string() const {
  const int family = storage_.ss_family;
  if (family != AF_INET && family != AF_INET6) return {};
  char text[INET6_ADDRSTRLEN] = {};
  const void* address =
      family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  ::inet_ntop(family, address, text, sizeof text);
  std::string result;
  result.reserve(sizeof text + 8);
  if (family == AF_INET6) result.push_back('[');
  result.append(text);
  if (family == AF_INET6) result.push_back(']');
  result.push_back(':');
  result.append(std::to_string(port()));
  return result;
}

bool operator==(const endpoint& a, const endpoint& b) noexcept {
  if (a.family() != b.family()) return false;
  switch (a.family()) {
    case AF_INET: {
      const auto* x = reinterpret_cast<const sockaddr_in*>(a.native());
      const auto* y = reinterpret_cast<const sockaddr_in*>(b.native());
      return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    case AF_INET6: {
      const auto* x = reinterpret_cast<const sockaddr_in6*>(a.native());
      const auto* y = reinterpret_cast<const sockaddr_in6*>(b.native());
      return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
             std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    default:
      return true;  // both unspecified
  }
}

}  // namespace spindle::net
