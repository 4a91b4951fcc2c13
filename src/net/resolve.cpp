// net::resolve and tcp_stream::connect(host, port) (include/spindle/net/resolve.hpp): numeric
// hosts in the task, names with getaddrinfo on the resolver helper pool (src/io/helper_pool.hpp).
#include "spindle/net/resolve.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "spindle/core/errors.hpp"
#include "spindle/task/cancellation.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/time/timeout.hpp"
#include "io/helper_pool.hpp"
#include "net/net_common.hpp"

namespace spindle::net {

static_assert(resolver_threads == io::detail::resolver_helper_threads);

namespace {

// relaxed would do for the pointer alone; acquire pairs with set_resolve_hook's release so the
// helper that calls a hook sees whatever the test set up before installing it.
std::atomic<detail::resolve_hook> resolve_hook_in_force{nullptr};

class resolver_category_type final : public std::error_category {
 public:
  const char* name() const noexcept override { return "spindle.resolver"; }
  std::string message(int code) const override { return ::gai_strerror(code); }
};

int native_family(address_family family) noexcept {
  switch (family) {
    case address_family::v4: return AF_INET;
    case address_family::v6: return AF_INET6;
    default: return AF_UNSPEC;
  }
}

// The endpoint of a numeric host of an allowed family, parsed here (inet_pton, as
// endpoint(text, port) does); nullopt for anything else (a name, a scoped IPv6 address, the
// other family), which getaddrinfo decides.
std::optional<endpoint> numeric_endpoint(const std::string& host, std::uint16_t port,
                                         address_family family) noexcept {
  if (family != address_family::v6) {
    sockaddr_in v4{};
    if (::inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
      v4.sin_family = AF_INET;
      v4.sin_port = htons(port);
      return endpoint::from_native(reinterpret_cast<const sockaddr*>(&v4), sizeof v4);
    }
  }
  if (family != address_family::v4) {
    sockaddr_in6 v6{};
    if (::inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1) {
      v6.sin6_family = AF_INET6;
      v6.sin6_port = htons(port);
      return endpoint::from_native(reinterpret_cast<const sockaddr*>(&v6), sizeof v6);
    }
  }
  return std::nullopt;
}

// One getaddrinfo on a resolver helper: everything it reads and writes is its own (the task
// that queued it may be gone when it runs; resolve.hpp, "Lifetimes").
struct resolve_job final : io::detail::helper_job {
  resolve_job(std::string name, std::uint16_t port, resolve_options options)
      : host(std::move(name)), service(std::to_string(port)) {
    hints.ai_family = native_family(options.family);
    hints.ai_socktype = SOCK_STREAM;  // one entry per address, not one per socket type
    hints.ai_flags = AI_NUMERICSERV | (options.only_configured_families ? AI_ADDRCONFIG : 0);
  }

  void run() noexcept override {
    // acquire: see resolve_hook_in_force.
    if (const detail::resolve_hook hook = resolve_hook_in_force.load(std::memory_order_acquire)) {
      hook(host.c_str());
    }
    addrinfo* list = nullptr;
    status = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
    if (status == EAI_SYSTEM) system_error = errno;
    if (status != 0) return;
    try {
      for (const addrinfo* entry = list; entry != nullptr; entry = entry->ai_next) {
        if (entry->ai_family != AF_INET && entry->ai_family != AF_INET6) continue;
        const endpoint address = endpoint::from_native(entry->ai_addr, entry->ai_addrlen);
        bool seen = false;
        for (const endpoint& earlier : addresses) seen = seen || earlier == address;
        if (!seen) addresses.push_back(address);
      }
      if (addresses.empty()) status = EAI_NODATA;
    } catch (const std::bad_alloc&) {
      status = EAI_MEMORY;
    } catch (...) {
      status = EAI_FAIL;  // an entry endpoint refused (a length too short for its family)
    }
    ::freeaddrinfo(list);
  }

  std::string host;
  std::string service;
  addrinfo hints{};
  std::vector<endpoint> addresses;
  int status = 0;        // getaddrinfo's result (0 or EAI_*)
  int system_error = 0;  // errno, for EAI_SYSTEM
};

[[noreturn]] void throw_resolve_error(const resolve_job& job) {
  const std::string what = "spindle: resolve \"" + job.host + "\"";
  if (job.status == EAI_SYSTEM) {
    throw std::system_error(job.system_error != 0 ? job.system_error : EIO,
                            std::system_category(), what);
  }
  throw std::system_error(job.status, resolver_category(), what);
}

}  // namespace

const std::error_category& resolver_category() noexcept {
  static const resolver_category_type category;
  return category;
}

void detail::set_resolve_hook(resolve_hook hook) noexcept {
  // release: see resolve_hook_in_force.
  resolve_hook_in_force.store(hook, std::memory_order_release);
}

task<std::vector<endpoint>> resolve(std::string host, std::uint16_t port,
                                    resolve_options options, deadline limit) {
  if (host.empty() || host.find('\0') != std::string::npos) {
    throw usage_error("spindle: resolve: not a host name: \"" + host + "\"");
  }
  if (std::optional<endpoint> numeric = numeric_endpoint(host, port, options.family)) {
    std::vector<endpoint> one;
    one.push_back(*numeric);
    co_return one;
  }
  // A cancel that already arrived queues nothing (the lookup would only be dropped).
  if (const spindle::detail::spawned_task_base* current =
          spindle::detail::spawned_task_base::current();
      current != nullptr && current->cancellation_requested()) {
    throw task_cancelled();
  }
  const std::optional<clock_time> when = detail::resolve_limit(limit);
  auto job = std::make_shared<resolve_job>(std::move(host), port, options);
  if (!co_await io::detail::run_on_helper(job, io::detail::helper_pool_kind::resolver, when)) {
    throw timeout_error();
  }
  if (job->status != 0) throw_resolve_error(*job);
  co_return std::move(job->addresses);
}

task<tcp_stream> tcp_stream::connect(std::string host, std::uint16_t port, deadline limit) {
  // One absolute deadline for the lookup and every attempt (resolve.hpp).
  const std::optional<clock_time> when = detail::resolve_limit(limit);
  const deadline whole = when ? deadline::at(*when) : deadline::none();
  const resolve_options options{};  // a named local: no aggregate in a co_await operand (g++ 12)
  const std::vector<endpoint> addresses = co_await resolve(host, port, options, whole);
  std::error_code last;
  for (const endpoint& address : addresses) {
    try {
      co_return co_await connect(address, whole);
    } catch (const std::system_error& failure) {
      last = failure.code();  // try the next address; task_cancelled, timeout_error not caught
    }
  }
  throw std::system_error(last, "spindle: connect \"" + host + "\" port " + std::to_string(port) +
                                    " (" + std::to_string(addresses.size()) +
                                    (addresses.size() == 1 ? " address" : " addresses") +
                                    " tried, the last failure)");
}

}  // namespace spindle::net
