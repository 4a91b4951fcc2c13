// net::resolve and tcp_stream::connect(host, port) on both backends, with only what resolves
// locally (no network): numeric IPv4 and IPv6 answered without a lookup, "localhost" and
// /etc/hosts entries through getaddrinfo on the resolver pool, a name that does not exist (a
// clear resolver error, quickly), many concurrent lookups, lookups held in flight by a test hook
// then cancelled or abandoned by a destroyed runtime (nothing may write into a cancelled task's
// frame: run under ASan), and no descriptor or thread left behind.
#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "net/net_test_support.hpp"
#include "spindle/core/atomic.hpp"
#include "spindle/net/resolve.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::net::address_family;
using spindle::net::endpoint;
using spindle::net::resolve_options;
using spindle::net::resolver_error;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::testing::join_bounded;

// ThreadSanitizer starts a background thread of its own when it first needs it, which may be
// during a test (10 threads counted against 9 allowed, under TSan only).
constexpr int tsan_thread = under_tsan ? 1 : 0;

class NetResolve : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetResolve);

// A name no resolver knows (.invalid is reserved for that, RFC 6761).
constexpr const char* resolve_missing_name = "spindle-no-such-host.invalid";

// --- helpers ---------------------------------------------------------------------------------

int resolve_thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = ::readdir(dir)) count += entry->d_name[0] != '.';
  ::closedir(dir);
  return count;
}

bool resolve_is_loopback(const endpoint& address) {
  if (address.family() == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address.native());
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address.native());
  return address.family() == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
}

task<std::vector<endpoint>> resolve_in_task(std::string host, std::uint16_t port,
                                            address_family family) {
  resolve_options options;
  options.family = family;
  co_return co_await spindle::net::resolve(std::move(host), port, options);
}

std::vector<endpoint> resolve_now(spindle::runtime& rt, std::string host, std::uint16_t port,
                                  address_family family = address_family::any) {
  return join_bounded(rt.spawn(resolve_in_task(std::move(host), port, family)), 60s);
}

// The error of a lookup that must fail, with how long it took.
struct resolve_failure {
  std::error_code code;
  std::string what;
  std::chrono::steady_clock::duration took{};
};

resolve_failure resolve_expecting_failure(spindle::runtime& rt, std::string host) {
  resolve_failure failure;
  const auto start = std::chrono::steady_clock::now();
  try {
    const std::vector<endpoint> found = resolve_now(rt, std::move(host), 80);
    ADD_FAILURE() << "resolved to " << found.size() << " addresses, first "
                  << (found.empty() ? "" : found.front().to_string());
  } catch (const std::system_error& e) {
    failure.code = e.code();
    failure.what = e.what();
  }
  failure.took = std::chrono::steady_clock::now() - start;
  return failure;
}

// The first name of /etc/hosts with the address on its line, if any (not "localhost").
std::pair<std::string, std::string> resolve_hosts_file_entry() {
  std::ifstream hosts("/etc/hosts");
  std::string line;
  while (std::getline(hosts, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string address;
    std::string name;
    if (!(fields >> address >> name)) continue;
    sockaddr_in6 probe{};
    const bool numeric = ::inet_pton(AF_INET, address.c_str(), &probe.sin6_addr) == 1 ||
                         ::inet_pton(AF_INET6, address.c_str(), &probe.sin6_addr) == 1;
    if (numeric && name != "localhost") return {name, address};
  }
  return {};
}

// --- tests -----------------------------------------------------------------------------------

TEST_P(NetResolve, NumericHostsAreAnsweredWithoutALookup) {
  spindle::runtime rt(options());
  const resolve_gate_scope counting(false);  // counts the lookups that reach a helper
  std::vector<endpoint> v4 = resolve_now(rt, "127.0.0.1", 8080);
  ASSERT_EQ(v4.size(), 1u);
  EXPECT_EQ(v4[0], endpoint("127.0.0.1", 8080));
  std::vector<endpoint> v6 = resolve_now(rt, "::1", 443);
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0].family(), AF_INET6);
  EXPECT_EQ(v6[0].to_string(), "[::1]:443");
  EXPECT_EQ(resolve_now(rt, "2001:db8::7", 1, address_family::v6).at(0).to_string(),
            "[2001:db8::7]:1");
  EXPECT_EQ(resolve_now(rt, "10.1.2.3", 0, address_family::v4).at(0).to_string(), "10.1.2.3:0");
  EXPECT_EQ(resolve_gate_entered(), 0);
  // A form only getaddrinfo accepts goes through it, with the same answer.
  EXPECT_EQ(resolve_now(rt, "127.1", 9).at(0), endpoint("127.0.0.1", 9));
  EXPECT_EQ(resolve_gate_entered(), 1);
}

TEST_P(NetResolve, LocalhostResolvesToLoopback) {
  spindle::runtime rt(options());
  const resolve_gate_scope counting(false);
  const std::vector<endpoint> found = resolve_now(rt, "localhost", 8080);
  ASSERT_FALSE(found.empty());
  for (const endpoint& address : found) {
    EXPECT_TRUE(resolve_is_loopback(address)) << address.to_string();
    EXPECT_EQ(address.port(), 8080);
  }
  for (std::size_t i = 0; i < found.size(); ++i) {
    for (std::size_t j = i + 1; j < found.size(); ++j) EXPECT_FALSE(found[i] == found[j]);
  }
  EXPECT_EQ(resolve_gate_entered(), 1);  // one lookup, on a helper
  for (const endpoint& address : resolve_now(rt, "localhost", 1, address_family::v4)) {
    EXPECT_EQ(address.family(), AF_INET) << address.to_string();
  }
}

TEST_P(NetResolve, HostsFileEntriesResolve) {
  const auto [name, address] = resolve_hosts_file_entry();
  if (name.empty()) GTEST_SKIP() << "no entry besides localhost in /etc/hosts";
  spindle::runtime rt(options());
  const std::vector<endpoint> found = resolve_now(rt, name, 22);
  const endpoint expected(address, 22);
  bool listed = false;
  for (const endpoint& each : found) listed = listed || each == expected;
  EXPECT_TRUE(listed) << name << " did not resolve to " << address;
}

TEST_P(NetResolve, AMissingNameFailsWithTheResolversError) {
  spindle::runtime rt(options());
  const resolve_failure failure = resolve_expecting_failure(rt, resolve_missing_name);
  EXPECT_EQ(failure.code.category(), spindle::net::resolver_category());
  // No network: /etc/hosts does not list it and DNS either says so or cannot be reached.
  EXPECT_TRUE(failure.code == resolver_error::host_not_found ||
              failure.code == resolver_error::no_address ||
              failure.code == resolver_error::try_again || failure.code == resolver_error::failure)
      << failure.code.value() << " " << failure.what;
  EXPECT_NE(failure.what.find(resolve_missing_name), std::string::npos) << failure.what;
  EXPECT_NE(failure.what.find(::gai_strerror(failure.code.value())), std::string::npos)
      << failure.what;
  // Generous: the resolver's own timeouts (resolv.conf) bound it; here it takes about 1 ms.
  EXPECT_LT(failure.took, 30s);
  std::printf("[ info ] missing name: %s after %.3f ms\n", failure.what.c_str(),
              std::chrono::duration<double, std::milli>(failure.took).count());
}

TEST_P(NetResolve, MalformedHostsAreUsageErrors) {
  spindle::runtime rt(options());
  EXPECT_THROW(resolve_now(rt, "", 80), spindle::usage_error);
  EXPECT_THROW(resolve_now(rt, std::string("local\0host", 10), 80), spindle::usage_error);
}

TEST_P(NetResolve, ErrorCodesSpeakGetaddrinfo) {
  const std::error_code code = resolver_error::host_not_found;
  EXPECT_EQ(code.category(), spindle::net::resolver_category());
  EXPECT_STREQ(code.category().name(), "spindle.resolver");
  EXPECT_EQ(code.value(), EAI_NONAME);
  EXPECT_EQ(code.message(), ::gai_strerror(EAI_NONAME));
}

task<int> resolve_many(int count) {
  std::vector<spindle::join_handle<std::vector<endpoint>>> lookups;
  for (int i = 0; i < count; ++i) {
    const bool numeric = i % 3 == 0;
    lookups.push_back(spindle::spawn(
        resolve_in_task(numeric ? "127.0.0.1" : "localhost", std::uint16_t(i), address_family::any)));
    if (i % 128 == 127) co_await spindle::yield_now();  // a long spawn loop is a stall otherwise
  }
  int correct = 0;
  for (int i = 0; i < count; ++i) {
    const std::vector<endpoint> found = co_await lookups[std::size_t(i)];
    correct += !found.empty() && found.front().port() == std::uint16_t(i) &&
               resolve_is_loopback(found.front());
  }
  co_return correct;
}

TEST_P(NetResolve, ManyConcurrentLookupsLeaveNoDescriptorOrThread) {
  const int count = scaled(2000, 300, 100);
  const int descriptors_before = spindle::testing::open_descriptor_count();
  const int threads_before = resolve_thread_count();
  {
    spindle::runtime rt(options());
    EXPECT_EQ(join_bounded(rt.spawn(resolve_many(count)), 120s), count);
  }
  // Each job's eventfd closes when the helper drops it, possibly after the task went on.
  EXPECT_TRUE(spindle::testing::eventually([&] { return spindle::testing::open_descriptor_count() == descriptors_before; }));
  // The runtime's threads are gone; at most the resolver pool's started ones remain.
  EXPECT_LE(resolve_thread_count(), threads_before + int(spindle::net::resolver_threads) + tsan_thread);
}

task<std::vector<endpoint>> resolve_held(std::uint16_t port) {
  const resolve_options defaults;
  co_return co_await spindle::net::resolve("localhost", port, defaults);
}

TEST_P(NetResolve, CancelledLookupsEndAtOnce) {
  const int count = scaled(200, 100, 50);
  const int descriptors_before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    resolve_gate_scope gate(true);
    std::vector<spindle::join_handle<std::vector<endpoint>>> lookups;
    for (int i = 0; i < count; ++i) lookups.push_back(rt.spawn(resolve_held(std::uint16_t(i))));
    // Every helper is now held in a lookup; the rest wait in the pool's queue.
    ASSERT_TRUE(spindle::testing::eventually([] {
      return resolve_gate_entered() == int(spindle::net::resolver_threads);
    }));
    const auto start = std::chrono::steady_clock::now();
    for (auto& lookup : lookups) lookup.cancel();
    int cancelled = 0;
    for (auto& lookup : lookups) {
      try {
        join_bounded(std::move(lookup), 30s);
      } catch (const spindle::task_cancelled&) {
        ++cancelled;
      }
    }
    EXPECT_EQ(cancelled, count);  // the gate is closed: none could finish
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    gate.open();  // the helpers finish the held lookups into their jobs, then drop them
    // A lookup after the cancelled ones works (behind the dropped ones in the queue).
    EXPECT_FALSE(join_bounded(rt.spawn(resolve_held(1)), 60s).empty());
  }
  EXPECT_TRUE(spindle::testing::eventually([&] { return spindle::testing::open_descriptor_count() == descriptors_before; }));
}

// Spins (no suspension point, so a cancel cannot land in a wait) until `go`, then resolves.
task<std::vector<endpoint>> resolve_after(std::atomic<bool>& started, std::atomic<bool>& go) {
  started.store(true, std::memory_order_relaxed);  // relaxed: says only that the task runs
  // acquire: the test's cancel() happened before its store of `go`, so the cancel is seen now.
  while (!go.load(std::memory_order_acquire)) spindle::core::cpu_relax();
  const resolve_options defaults;
  co_return co_await spindle::net::resolve("localhost", 1, defaults);
}

TEST_P(NetResolve, ACancelBeforeTheLookupQueuesNothing) {
  spindle::runtime rt(options());
  const resolve_gate_scope counting(false);
  std::atomic<bool> started{false};
  std::atomic<bool> go{false};
  auto lookup = rt.spawn(resolve_after(started, go));
  // relaxed: only that the task runs (so the cancel below cannot stop it before it starts).
  ASSERT_TRUE(spindle::testing::eventually([&] { return started.load(std::memory_order_relaxed); }));
  lookup.cancel();
  go.store(true, std::memory_order_release);  // release: publishes the cancel to the task
  EXPECT_THROW(join_bounded(std::move(lookup), 30s), spindle::task_cancelled);
  EXPECT_EQ(resolve_gate_entered(), 0);  // nothing reached a helper
}

TEST_P(NetResolve, RuntimeDestroyedWithLookupsInFlight) {
  const int count = scaled(200, 100, 50);
  const int descriptors_before = spindle::testing::open_descriptor_count();
  const int threads_before = resolve_thread_count();
  {
    resolve_gate_scope gate(true);
    {
      spindle::runtime rt(options());
      for (int i = 0; i < count; ++i) rt.spawn(resolve_held(std::uint16_t(i))).detach();
      ASSERT_TRUE(spindle::testing::eventually([] {
        return resolve_gate_entered() == int(spindle::net::resolver_threads);
      }));
      EXPECT_EQ(rt.live_tasks(), std::size_t(count));
    }  // runtime destroyed: the waits cancelled, the frames gone, the jobs still queued or held
    gate.open();  // now the helpers write into the jobs (not the frames) and free them
  }
  EXPECT_TRUE(spindle::testing::eventually([&] { return spindle::testing::open_descriptor_count() == descriptors_before; }));
  EXPECT_LE(resolve_thread_count(), threads_before + int(spindle::net::resolver_threads) + tsan_thread);
}

task<endpoint> resolve_connect_by_name(std::uint16_t port) {
  tcp_stream stream = co_await tcp_stream::connect("localhost", port);
  endpoint remote = stream.remote_endpoint();
  co_await stream.close();
  co_return remote;
}

TEST_P(NetResolve, ConnectByNameReachesALocalListener) {
  spindle::runtime rt(options());
  auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
  const std::uint16_t port = listener.local_endpoint().port();
  auto accepting = rt.spawn(listener.accept());
  const endpoint remote = join_bounded(rt.spawn(resolve_connect_by_name(port)), 60s);
  EXPECT_EQ(remote, endpoint::loopback_v4(port));  // "localhost" may list ::1 first: refused, next
  tcp_stream accepted = join_bounded(std::move(accepting), 30s);
  EXPECT_TRUE(accepted.is_open());
}

task<void> resolve_connect_by_missing_name(std::uint16_t port) {
  tcp_stream stream = co_await tcp_stream::connect(resolve_missing_name, port);
  co_await stream.close();
}

TEST_P(NetResolve, ConnectByNameReportsTheLastFailure) {
  spindle::runtime rt(options());
  std::uint16_t port = 0;
  {
    auto listener = tcp_listener::bind(endpoint::loopback_v4(0));
    port = listener.local_endpoint().port();
  }  // closed: nothing listens on `port` now
  try {
    join_bounded(rt.spawn(resolve_connect_by_name(port)), 60s);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::error_code(ECONNREFUSED, std::system_category())) << e.what();
    EXPECT_NE(std::string(e.what()).find("tried"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("localhost"), std::string::npos) << e.what();
  }
  try {
    join_bounded(rt.spawn(resolve_connect_by_missing_name(port)), 60s);
    ADD_FAILURE() << "connected to a missing name";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().category(), spindle::net::resolver_category()) << e.what();
  }
}

}  // namespace
