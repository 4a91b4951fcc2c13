// The OTP-style example service (examples/kv_service/) run in-process and driven by clients on
// plain threads with blocking sockets: the protocol answers as protocol.hpp says, an idle
// session is closed by its own timer (virtual time), a full sessions' supervisor refuses, and
// under load (on each I/O backend), with sessions, store shards and the sessions' supervisor
// killed at random, every promise of protocol.hpp holds: acknowledged writes are never lost,
// every reply is one the client's history allows, nobody hangs, and no descriptor, actor or
// cell is left behind.
//
// Nothing sleeps to synchronise: a client waits for a reply with poll(), bounded by `patience`,
// which only turns a hang into a failure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kv_service/server.hpp"
#include "support/test_support.hpp"

namespace kv_service_test {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using spindle::testing::eventually;

// How long a client waits for something that must happen before it calls it a hang.
constexpr auto patience = 20s;

// --- a client: a blocking socket on a plain thread ------------------------------------------

class line_client {
 public:
  enum class outcome { line, closed, timed_out };
  struct reply {
    outcome how = outcome::closed;
    std::string line;  // without its "\n"
  };

  explicit line_client(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      close();
    }
  }
  line_client(const line_client&) = delete;
  line_client& operator=(const line_client&) = delete;
  ~line_client() { close(); }

  bool connected() const { return fd_ >= 0; }

  // Sends all of `text`; false if the connection is gone.
  bool send(std::string_view text) {
    while (!text.empty()) {
      if (fd_ < 0) return false;
      const ssize_t n = ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      text.remove_prefix(std::size_t(n));
    }
    return true;
  }

  // The next whole line. A connection closed (or reset) first is `closed`, whatever part of a
  // line came before the close (not a reply: protocol.hpp, promise 1).
  reply receive(clock_type::duration limit = patience) {
    const auto deadline = clock_type::now() + limit;
    for (;;) {
      const std::size_t end = buffer_.find('\n');
      if (end != std::string::npos) {
        reply r{outcome::line, buffer_.substr(0, end)};
        buffer_.erase(0, end + 1);
        return r;
      }
      if (fd_ < 0) return {};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) == 0) {
        return {outcome::timed_out, {}};
      }
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        if (!buffer_.empty()) ++partial_lines_;
        buffer_.clear();
        close();
        return {};
      }
      buffer_.append(chunk, std::size_t(n));
    }
  }

  // Sends one request line and returns the reply line, "<closed>" or "<timed out>".
  std::string request(std::string_view line) {
    std::string text(line);
    text += '\n';
    if (!send(text)) return "<closed>";
    const reply r = receive();
    return r.how == outcome::line ? r.line : r.how == outcome::closed ? "<closed>" : "<timed out>";
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int partial_lines() const { return partial_lines_; }

 private:
  int fd_ = -1;
  std::string buffer_;
  int partial_lines_ = 0;
};

// --- the service's state, seen from outside ----------------------------------------------------

std::size_t sessions_listed(spindle::runtime& rt) {
  const auto sessions = spindle::whereis<spindle::dynamic_supervisor_message>(rt, kv::sessions_name);
  if (!sessions) return std::size_t(-1);
  return spindle::testing::receive_within(spindle::dynamic_supervisor(sessions).stats()).listed;
}

// Actors homed on an executor and not halted (what the live view's spindle_actor_live counts).
std::uint64_t live_actors(spindle::runtime& rt) {
  std::uint64_t sum = 0;
  for (std::uint32_t i = 0; i < rt.executor_count(); ++i) {
    if (auto* scheduler = spindle::actors_of(rt).find_scheduler(i)) {
      sum += scheduler->stats().live_actors.load();
    }
  }
  return sum;
}

// The tree's child `name` now (empty while it is being restarted), asked from a plain thread.
spindle::actor_handle child_of(const spindle::supervisor_ref& tree, std::string name) {
  auto [reply, answer] = spindle::oneshot<spindle::actor_handle>();
  spindle::supervisor_message query(spindle::supervisor_query{
      std::move(name), spindle::reply_to<spindle::actor_handle>(std::move(reply))});
  if (tree.send(std::move(query)) != spindle::send_result::queued) return {};
  return spindle::testing::receive_within(std::move(answer));
}

// Every child of the tree started: the registered ones (shards, counter, sessions' supervisor)
// and the acceptor, which starts last.
bool tree_is_up(spindle::runtime& rt, const kv::server& server, std::size_t shards) {
  return spindle::registered_names(rt).size() == shards + 2 &&
         bool(child_of(server.supervisor(), "acceptor"));
}

kv::server_options options_for_tests() {
  kv::server_options options;
  options.session.store_shards = 4;
  options.session.heartbeat_period = 20ms;  // heartbeats interleave with requests
  options.restarts = spindle::restart_limit::unlimited();
  return options;
}

// --- the protocol ------------------------------------------------------------------------------

TEST(KvService, AnswersEveryRequestOfTheProtocol) {
  spindle::runtime rt({.workers = 2});
  kv::server server(rt, options_for_tests());
  const std::uint16_t port = server.local_endpoint().port();

  line_client client(port);
  ASSERT_TRUE(client.connected());
  EXPECT_EQ(client.request("PING"), "PONG");
  EXPECT_EQ(client.request("GET missing"), "NOT_FOUND");
  EXPECT_EQ(client.request("SET greeting hello  world "), "OK");
  EXPECT_EQ(client.request("GET greeting"), "VALUE hello  world ");  // the rest of the line
  EXPECT_EQ(client.request("SET empty "), "OK");
  EXPECT_EQ(client.request("GET empty"), "VALUE ");
  EXPECT_EQ(client.request("DEL greeting"), "DELETED");
  EXPECT_EQ(client.request("DEL greeting"), "NOT_FOUND");
  EXPECT_EQ(client.request("GET greeting"), "NOT_FOUND");
  EXPECT_EQ(client.request("GET greeting\r"), "NOT_FOUND");  // "\r\n" endings
  // Malformed requests are answered, and the session goes on.
  EXPECT_EQ(client.request("SET lonely"), "ERR usage: SET <key> <value>");
  EXPECT_EQ(client.request("GET a b"), "ERR usage: GET <key>");
  EXPECT_EQ(client.request("GET"), "ERR usage: GET <key>");
  EXPECT_EQ(client.request("GET "), "ERR bad key");
  EXPECT_EQ(client.request("SET \x01 v"), "ERR bad key");
  EXPECT_EQ(client.request(std::string("GET ") + std::string(251, 'k')), "ERR bad key");
  EXPECT_EQ(client.request("PING now"), "ERR usage: PING");
  EXPECT_EQ(client.request("get x"), "ERR unknown command");
  EXPECT_EQ(client.request(""), "ERR unknown command");
  // Pipelined: one write, the replies in order.
  ASSERT_TRUE(client.send("SET p1 one\nSET p2 two\nGET p1\nDEL p2\nGET p2\nPING\n"));
  for (const char* expected : {"OK", "OK", "VALUE one", "DELETED", "NOT_FOUND", "PONG"}) {
    const line_client::reply r = client.receive();
    ASSERT_EQ(r.how, line_client::outcome::line);
    EXPECT_EQ(r.line, expected);
  }
  const std::string stats = client.request("STATS");
  EXPECT_TRUE(stats.starts_with("STATS sessions=1 commands=")) << stats;
  // Another client sees the same store; the first one's writes were acknowledged.
  line_client other(port);
  EXPECT_EQ(other.request("GET p1"), "VALUE one");
  EXPECT_EQ(other.request("GET empty"), "VALUE ");
  // QUIT: BYE, then the server closes.
  EXPECT_EQ(client.request("QUIT"), "BYE");
  EXPECT_EQ(client.receive().how, line_client::outcome::closed);
  // A line over the limit: ERR line too long, then closed (the stream is out of step).
  ASSERT_TRUE(other.send(std::string(kv::max_line_length + 10, 'x') + "\n"));
  EXPECT_EQ(other.receive().line, "ERR line too long");
  EXPECT_EQ(other.receive().how, line_client::outcome::closed);
  EXPECT_TRUE(eventually([&] { return sessions_listed(rt) == 0; }, patience));
  // The commands reach the counter on the sessions' heartbeats and last reports.
  line_client third(port);
  EXPECT_TRUE(eventually([&] {
    const std::string s = third.request("STATS");
    return s.starts_with("STATS sessions=1 commands=") && std::stoul(s.substr(26)) >= 25;
  }, patience));
  // Stopping the server closes the connections it still has.
  server.stop();
  EXPECT_EQ(third.receive().how, line_client::outcome::closed);
}

// --- the idle timeout: a timer to self, in virtual time ----------------------------------------

TEST(KvService, AnIdleSessionIsClosedByItsOwnTimerAndRequestsPutItOff) {
  spindle::manual_clock clock(spindle::testing::virtual_start);
  spindle::runtime rt({.workers = 2, .clock = &clock});
  kv::server_options options = options_for_tests();
  options.session.idle_timeout = 10s;
  options.session.heartbeat_period = 1s;
  kv::server server(rt, options);

  line_client client(server.local_endpoint().port());
  // Each reply comes after the session re-armed its timer: 10 s from that request.
  EXPECT_EQ(client.request("SET a 1"), "OK");  // t = 0: due at 10
  clock.advance(6s);
  EXPECT_EQ(client.request("GET a"), "VALUE 1");  // t = 6: due at 16 (the one due at 10 is void)
  clock.advance(6s);
  EXPECT_EQ(client.request("GET a"), "VALUE 1");  // t = 12: due at 22
  clock.advance(9s);
  EXPECT_EQ(client.request("PING"), "PONG");  // t = 21: due at 31
  EXPECT_EQ(sessions_listed(rt), 1u);
  clock.advance(10s);  // t = 31: idle for 10 s
  EXPECT_EQ(client.receive().how, line_client::outcome::closed);
  EXPECT_TRUE(eventually([&] { return sessions_listed(rt) == 0; }, patience));
}

// --- a full sessions' supervisor ----------------------------------------------------------------

TEST(KvService, RefusesConnectionsBeyondMaxSessions) {
  spindle::runtime rt({.workers = 2});
  kv::server_options options = options_for_tests();
  options.max_sessions = 2;
  kv::server server(rt, options);
  const std::uint16_t port = server.local_endpoint().port();
  line_client first(port), second(port);
  EXPECT_EQ(first.request("PING"), "PONG");
  EXPECT_EQ(second.request("PING"), "PONG");
  line_client third(port);
  EXPECT_EQ(third.receive().line, "ERR busy");
  EXPECT_EQ(third.receive().how, line_client::outcome::closed);
  first.close();  // its session ends, which makes room
  EXPECT_TRUE(eventually([&] { return sessions_listed(rt) == 1; }, patience));
  line_client fourth(port);
  EXPECT_EQ(fourth.request("PING"), "PONG");
}

// --- the load test --------------------------------------------------------------------------

// What one client wrote to one key, and what it knows took effect. writes[0] is the key's
// state before any write (absent); a SET appends its value, a DEL nullopt. The key's state is
// writes[m] for some m in [known, writes.size() - 1]: the writes after `known` were sent and not
// acknowledged (promise 3: each took effect once or not at all, in order).
struct key_history {
  std::vector<std::optional<std::string>> writes{std::nullopt};
  std::size_t known = 0;

  std::size_t latest() const { return writes.size() - 1; }
  // The first state in [known, last] equal to `state`, if any.
  std::optional<std::size_t> find(const std::optional<std::string>& state, std::size_t last) const {
    for (std::size_t m = known; m <= last; ++m) {
      if (writes[m] == state) return m;
    }
    return std::nullopt;
  }
};

struct load_figures {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> acknowledged_writes{0};
  std::atomic<std::uint64_t> unavailable{0};
  std::atomic<std::uint64_t> busy{0};
  std::atomic<std::uint64_t> closes{0};  // requests left without a reply by a close
  std::atomic<std::uint64_t> partial_lines{0};
  std::atomic<std::uint64_t> session_kills{0};
  std::atomic<std::uint64_t> shard_kills{0};
  std::atomic<std::uint64_t> acceptor_kills{0};
  std::atomic<std::uint64_t> supervisor_kills{0};
};

class load_client {
 public:
  load_client(int id, std::uint16_t port, int keys, load_figures& figures)
      : id_(id), port_(port), figures_(figures), keys_(std::size_t(keys)), random_(std::uint32_t(id) * 7919u + 1) {}

  // Runs `requests` requests; false (with `failure` set) on a wrong reply or a hang.
  bool run(int requests, std::atomic<std::uint64_t>& completed) {
    auto connection = std::make_unique<line_client>(port_);
    for (int i = 0; i < requests; ++i) {
      if (!connection->connected()) connection = std::make_unique<line_client>(port_);
      const std::size_t k = random_() % keys_.size();
      key_history& history = keys_[k];
      const int choice = int(random_() % 100);
      std::string line;
      enum { set, get, del } kind;
      if (choice < 45) {
        kind = set;
        history.writes.push_back(key_name(k) + "=" + std::to_string(history.writes.size()));
        line = "SET " + key_name(k) + " " + *history.writes.back();
      } else if (choice < 85) {
        kind = get;
        line = "GET " + key_name(k);
      } else {
        kind = del;
        history.writes.push_back(std::nullopt);
        line = "DEL " + key_name(k);
      }
      figures_.requests.fetch_add(1);
      line += '\n';
      const bool sent = connection->send(line);
      const line_client::reply reply = sent ? connection->receive() : line_client::reply{};
      completed.fetch_add(1);
      if (reply.how == line_client::outcome::timed_out) {
        return fail("no reply within " + std::to_string(patience.count()) + " s to " + line);
      }
      if (reply.how == line_client::outcome::closed) {
        figures_.closes.fetch_add(1);
        figures_.partial_lines.fetch_add(std::uint64_t(connection->partial_lines()));
        connection->close();
        continue;
      }
      if (reply.line == "ERR unavailable") {
        figures_.unavailable.fetch_add(1);
        continue;
      }
      if (reply.line == "ERR busy") {  // refused before it was read: the sessions' restarting
        figures_.busy.fetch_add(1);
        connection->close();
        continue;
      }
      if (!check(kind == get ? 'G' : kind == set ? 'S' : 'D', history, reply.line)) {
        return fail("key " + key_name(k) + ": " + line.substr(0, line.size() - 1) + " -> " +
                    reply.line + " (" + describe(history) + ")");
      }
    }
    return true;
  }

  // After the load: every key of this client read back on a fresh connection.
  bool verify(line_client& reader) {
    for (std::size_t k = 0; k < keys_.size(); ++k) {
      std::string reply = reader.request("GET " + key_name(k));
      const auto deadline = clock_type::now() + patience;  // a shard may be restarting
      while (reply == "ERR unavailable" && clock_type::now() < deadline) {
        reply = reader.request("GET " + key_name(k));
      }
      if (!check('G', keys_[k], reply)) {
        return fail("verifying " + key_name(k) + " -> " + reply + " (" + describe(keys_[k]) + ")");
      }
    }
    return true;
  }

  const std::string& failure() const { return failure_; }

 private:
  std::string key_name(std::size_t k) const {
    return "c" + std::to_string(id_) + ".k" + std::to_string(k);
  }

  // Whether `reply` is one the history allows; narrows it (what was seen took effect).
  bool check(char kind, key_history& history, const std::string& reply) {
    const std::size_t latest = history.latest();
    if (kind == 'S') {
      if (reply != "OK") return false;
      history.known = latest;
      figures_.acknowledged_writes.fetch_add(1);
      return true;
    }
    if (kind == 'D') {
      // The state before this DEL was some write in [known, latest - 1]: present or absent.
      bool present_possible = false, absent_possible = false;
      for (std::size_t m = history.known; m < latest; ++m) {
        (history.writes[m] ? present_possible : absent_possible) = true;
      }
      if (reply == "DELETED" ? !present_possible : reply == "NOT_FOUND" ? !absent_possible : true) {
        return false;
      }
      history.known = latest;
      figures_.acknowledged_writes.fetch_add(1);
      return true;
    }
    std::optional<std::string> state;
    if (reply.starts_with("VALUE ")) {
      state = reply.substr(6);
    } else if (reply != "NOT_FOUND") {
      return false;
    }
    const std::optional<std::size_t> at = history.find(state, latest);
    if (!at) return false;
    history.known = *at;  // reads are monotonic: nothing older can come back
    return true;
  }

  static std::string describe(const key_history& history) {
    std::string text = "known " + std::to_string(history.known) + " of";
    for (const auto& w : history.writes) text += " " + w.value_or("<absent>");
    return text;
  }

  bool fail(std::string why) {
    failure_ = "client " + std::to_string(id_) + ": " + std::move(why);
    return false;
  }

  int id_;
  std::uint16_t port_;
  load_figures& figures_;
  std::vector<key_history> keys_;
  std::mt19937 random_;
  std::string failure_;
};

// Kills a random session each `every` completed requests; every 10th round a random store
// shard instead, every 10th + 5 the acceptor (in accept: a connection may be accepted as it is
// cancelled), and at one round the sessions' supervisor (every session ends; the tree restarts
// it, and the acceptor after it).
void kill_at_random(spindle::runtime& rt, const spindle::supervisor_ref& tree, std::size_t shards,
                    std::uint64_t every, const std::atomic<std::uint64_t>& completed,
                    const std::atomic<bool>& done, load_figures& figures) {
  std::mt19937 random(2024);
  std::uint64_t next = every;
  for (std::uint64_t round = 1;; ++round) {
    while (completed.load() < next) {
      if (done.load()) return;
      std::this_thread::yield();
    }
    next += every;
    if (round == 25) {
      if (auto sessions = spindle::whereis(rt, kv::sessions_name)) {
        sessions.kill();
        figures.supervisor_kills.fetch_add(1);
      }
    } else if (round % 10 == 5) {
      if (auto acceptor = child_of(tree, "acceptor")) {
        acceptor.kill();
        figures.acceptor_kills.fetch_add(1);
      }
    } else if (round % 10 == 0) {
      if (auto shard = spindle::whereis(rt, kv::shard_name(random() % shards))) {
        shard.kill();
        figures.shard_kills.fetch_add(1);
      }
    } else if (const auto sessions =
                   spindle::whereis<spindle::dynamic_supervisor_message>(rt, kv::sessions_name)) {
      const std::vector<spindle::dynamic_child_info> children =
          spindle::testing::receive_within(spindle::dynamic_supervisor(sessions).which_children());
      if (children.empty()) continue;
      const spindle::dynamic_child_info& victim = children[random() % children.size()];
      if (victim.actor) {
        victim.actor.kill();
        figures.session_kills.fetch_add(1);
      }
    }
  }
}

// On each I/O backend: the sessions' reads, writes and cancellations are the reactor's.
class KvServiceLoad : public ::testing::TestWithParam<spindle::core::io_backend> {};

TEST_P(KvServiceLoad, KillingSessionsShardsAndTheirSupervisorLosesNothingAcknowledged) {
  using spindle::testing::under_asan;
  using spindle::testing::under_tsan;
  const int clients = under_tsan ? 16 : under_asan ? 24 : 50;
  const int requests_each = under_tsan ? 150 : under_asan ? 150 : 300;
  const int keys_each = 4;
  const std::uint64_t kill_every = std::uint64_t(clients) * std::uint64_t(requests_each) / 150;

  const std::unique_ptr<spindle::runtime> owned = spindle::testing::runtime_on(GetParam(), 3);
  if (!owned) GTEST_SKIP() << "no epoll backend on this kernel";
  spindle::runtime& rt = *owned;
  const std::uint64_t cells_before = spindle::actor_system::live_cells();
  const std::uint64_t actors_before = live_actors(rt);
  const int descriptors_before = spindle::testing::open_descriptor_count();
  {
    kv::server_options options = options_for_tests();
    kv::server server(rt, options);
    const std::uint16_t port = server.local_endpoint().port();
    ASSERT_TRUE(eventually([&] { return tree_is_up(rt, server, options.session.store_shards); },
                           patience));
    // The idle server: the tree's actors (kv, the shards, stats, sessions, acceptor), each
    // with its cell, and the listener's descriptor.
    const std::uint64_t tree_size = options.session.store_shards + 4;
    const std::uint64_t cells_with_server = cells_before + tree_size;
    const std::uint64_t actors_with_server = actors_before + tree_size;
    const int descriptors_with_server = descriptors_before + 1;
    EXPECT_TRUE(eventually([&] { return live_actors(rt) == actors_with_server; }, patience));
    EXPECT_EQ(spindle::actor_system::live_cells(), cells_with_server);
    EXPECT_EQ(spindle::testing::open_descriptor_count(), descriptors_with_server);

    load_figures figures;
    std::atomic<std::uint64_t> completed{0};
    std::atomic<bool> clients_done{false};
    std::vector<std::unique_ptr<load_client>> load;
    for (int c = 0; c < clients; ++c) {
      load.push_back(std::make_unique<load_client>(c, port, keys_each, figures));
    }
    const auto started = clock_type::now();
    std::thread killer(kill_at_random, std::ref(rt), std::cref(server.supervisor()),
                       options.session.store_shards, kill_every,
                       std::cref(completed), std::cref(clients_done), std::ref(figures));
    std::vector<std::thread> threads;
    std::vector<char> passed(std::size_t(clients), 0);
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        passed[std::size_t(c)] = load[std::size_t(c)]->run(requests_each, completed) ? 1 : 0;
      });
    }
    for (auto& t : threads) t.join();
    clients_done.store(true);
    killer.join();
    const double seconds = std::chrono::duration<double>(clock_type::now() - started).count();
    for (int c = 0; c < clients; ++c) {
      EXPECT_TRUE(passed[std::size_t(c)]) << load[std::size_t(c)]->failure();
    }

    // Every key read back: its state is one its client's history allows.
    {
      line_client reader(port);
      for (int c = 0; c < clients; ++c) {
        EXPECT_TRUE(load[std::size_t(c)]->verify(reader)) << load[std::size_t(c)]->failure();
      }
    }
    std::printf(
        "kv_service load (%s): %d clients, %llu requests in %.2f s (%.0f/s), %llu writes "
        "acknowledged; %llu unavailable, %llu busy, %llu closes (%llu mid-line); killed %llu "
        "sessions, %llu shards, %llu acceptors, %llu sessions' supervisors\n",
        GetParam() == spindle::core::io_backend::uring ? "uring" : "epoll", clients,
        (unsigned long long)figures.requests.load(), seconds,
        double(figures.requests.load()) / seconds,
        (unsigned long long)figures.acknowledged_writes.load(),
        (unsigned long long)figures.unavailable.load(), (unsigned long long)figures.busy.load(),
        (unsigned long long)figures.closes.load(), (unsigned long long)figures.partial_lines.load(),
        (unsigned long long)figures.session_kills.load(),
        (unsigned long long)figures.shard_kills.load(),
        (unsigned long long)figures.acceptor_kills.load(),
        (unsigned long long)figures.supervisor_kills.load());
    EXPECT_GT(figures.session_kills.load(), 0u);
    EXPECT_GT(figures.shard_kills.load(), 0u);
    EXPECT_GT(figures.acceptor_kills.load(), 0u);
    EXPECT_EQ(figures.supervisor_kills.load(), 1u);
    EXPECT_GT(figures.acknowledged_writes.load(), 0u);

    // Every client gone: no session, descriptor, actor or cell left beyond the tree's own.
    load.clear();
    EXPECT_TRUE(eventually([&] { return sessions_listed(rt) == 0; }, patience));
    EXPECT_TRUE(eventually([&] {
      return spindle::testing::open_descriptor_count() == descriptors_with_server;
    }, patience)) << spindle::testing::open_descriptor_count() << " descriptors, "
                  << descriptors_with_server << " with the idle server";
    EXPECT_TRUE(eventually([&] { return live_actors(rt) == actors_with_server; }, patience))
        << live_actors(rt) << " actors, " << actors_with_server << " with the idle server";
    EXPECT_TRUE(eventually([&] {
      return spindle::actor_system::live_cells() == cells_with_server;
    }, patience)) << spindle::actor_system::live_cells() << " cells, " << cells_with_server
                  << " with the idle server";
  }  // the server's destructor stops the tree
  EXPECT_TRUE(eventually([&] { return live_actors(rt) == actors_before; }, patience));
  EXPECT_TRUE(eventually([&] { return spindle::actor_system::live_cells() == cells_before; },
                         patience));
  EXPECT_TRUE(eventually([&] {
    return spindle::testing::open_descriptor_count() == descriptors_before;
  }, patience));
}

INSTANTIATE_TEST_SUITE_P(Backends, KvServiceLoad,
                         ::testing::Values(spindle::core::io_backend::uring,
                                           spindle::core::io_backend::epoll),
                         spindle::testing::backend_name);

}  // namespace kv_service_test
