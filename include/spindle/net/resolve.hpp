// Name resolution for tasks, without blocking an executor (docs/design/io.md, "Name resolution").
//
//   std::vector<net::endpoint> all = co_await net::resolve("localhost", 8080);
//   net::tcp_stream stream = co_await net::tcp_stream::connect("localhost", 8080);
//
// Who does the work:
//   - a numeric host (an IPv4 dotted quad or an IPv6 address, as endpoint(text, port) parses
//     them) is answered in the calling task, at once: no thread, no system call.
//   - any other host is looked up with the system resolver, getaddrinfo(3), so /etc/hosts,
//     nsswitch.conf, resolv.conf and gai.conf apply exactly as for every other program on the
//     machine. getaddrinfo blocks, so it runs on a helper thread of the resolver pool (process-
//     wide, started on first use, at most `resolver_threads` threads that live until the process
//     exits; a pool apart from the file helpers of io/directory.hpp, so a lookup stuck on a dead
//     DNS server never delays a directory listing). The task waits on an eventfd read through
//     its own reactor, so the executor runs other tasks meanwhile. Lookups beyond
//     `resolver_threads` at once wait in the pool's queue, in order.
// Lifetimes: the host name and options are parameters (they live in the coroutine's frame); the
// lookup itself is a job shared between the task and the helper (its own copy of the name, the
// hints, the results and the eventfd). A task cancelled while waiting returns at once; the helper
// finishes the lookup into the job, which stays alive because the helper still holds its
// reference, and frees it (and closes the eventfd) when it drops that reference. Nothing the
// helper writes belongs to the task's frame.
//
// Results: the addresses in getaddrinfo's order (RFC 6724 sorting, gai.conf), each once, with
// `port` set; never empty (no address is an error). Errors: std::system_error whose code is in
// resolver_category() (getaddrinfo's EAI_* value; compare with resolver_error, e.g.
// e.code() == net::resolver_error::host_not_found) and whose what() names the host and says what
// getaddrinfo said (gai_strerror); EAI_SYSTEM is reported as the errno it stands for
// (std::system_category()). An empty host or one containing '\0' is usage_error. A name that does
// not exist fails as fast as the configured resolver answers (no network: /etc/hosts and then DNS
// that cannot be reached; the time is the resolver's, resolv.conf's timeout and attempts).
// Cancellation: task_cancelled, as for every other wait (a cancel that arrives before the lookup
// was queued queues nothing). Names need a task on a runtime worker (usage_error otherwise).
//
// Deadlines (io/deadline.hpp): a lookup on the helper pool stops waiting when its deadline passes
// and throws timeout_error (the helper finishes the lookup into the job, as after a
// cancellation); a numeric host is answered at once whatever the deadline.
//
// tcp_stream::connect(host, port, deadline): resolves, then connects to each address in order
// until one accepts; when every address fails, the last failure is thrown (a std::system_error
// naming the host and how many addresses were tried). Not happy eyeballs (RFC 8305): the attempts
// are one after the other, so an address that never answers delays the next by the kernel's
// connect timeout. The deadline is resolved once and covers the lookup and every attempt: when it
// passes, the call throws timeout_error, whichever step it was in.
#pragma once

#include <netdb.h>

#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "spindle/net/net.hpp"
#include "spindle/task/task.hpp"

namespace spindle::net {

// The most helper threads the resolver pool starts (see above): the lookups that can be waiting
// on the system resolver at once.
inline constexpr unsigned resolver_threads = 8;

enum class address_family : std::uint8_t {
  any,  // IPv4 and IPv6 (AF_UNSPEC)
  v4,   // AF_INET
  v6,   // AF_INET6
};

struct resolve_options {
  address_family family = address_family::any;
  // AI_ADDRCONFIG: only the families this machine has a non-loopback address of. Off by default
  // (as in Tokio and Go): with it, a machine with loopback only finds nothing for "localhost".
  bool only_configured_families = false;
};
// The default argument below is built inside the caller's co_await operand; g++ 12 may destroy
// such an aggregate twice (README, known hazards), which is harmless only while it has nothing to
// destroy.
static_assert(std::is_trivially_destructible_v<resolve_options>);

// The addresses of `host` with `port` (see above for numeric hosts, order, errors).
task<std::vector<endpoint>> resolve(std::string host, std::uint16_t port,
                                    resolve_options options = {}, deadline limit = {});

// getaddrinfo's errors, as error codes of resolver_category(). The values are glibc's EAI_*.
enum class resolver_error : int {
  host_not_found = EAI_NONAME,      // "Name or service not known"
  no_address = EAI_NODATA,          // the name exists but has no address
  family_not_found = EAI_ADDRFAMILY,  // no address of the family asked for
  try_again = EAI_AGAIN,            // temporary failure (e.g. no DNS server answered)
  failure = EAI_FAIL,               // permanent failure of the name server
  out_of_memory = EAI_MEMORY,
};

const std::error_category& resolver_category() noexcept;

inline std::error_code make_error_code(resolver_error error) noexcept {
  return {static_cast<int>(error), resolver_category()};
}

namespace detail {
// Test hook: when set, called on the helper thread with the host name just before getaddrinfo
// (a test blocks in it to keep lookups in flight). Not for production use.
using resolve_hook = void (*)(const char* host) noexcept;
void set_resolve_hook(resolve_hook hook) noexcept;
}  // namespace detail

}  // namespace spindle::net

template <>
struct std::is_error_code_enum<spindle::net::resolver_error> : std::true_type {};
