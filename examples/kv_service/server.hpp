// The key-value service's supervision tree, and a handle to start and stop it.
//
//   spindle::runtime rt;
//   kv::server server(rt, {.address = net::endpoint::loopback_v4(7379)});
//   ... server.local_endpoint() ...
//   server.stop();   // or the destructor: stops the tree and waits for it (a plain thread)
//
// The tree (a static supervisor, "kv", pattern downstream: a child and those that depend on it):
//
//   kv ─┬─ store.0 .. store.N-1   shards of the store, registered "kv.store.<i>" (store.hpp)
//       ├─ stats                  the command counter, registered "kv.stats" (stats.hpp)
//       ├─ sessions               a dynamic supervisor, registered "kv.sessions": one temporary
//       │                         child per connection (session.hpp)
//       └─ acceptor               depends on sessions (acceptor.hpp)
//
// Children are found by name, not held by reference: a session asks "kv.store.3" for every
// request, so a shard that crashed and was restarted is found again without anyone being told.
// That is also why sessions do not depend on the shards in the tree: a shard's restart must not
// restart every session. The acceptor does depend on the sessions' supervisor: if that one is
// restarted (its sessions are then all stopped), the acceptor is restarted after it.
//
// What outlives what: the listening socket and the shards' tables belong to the server object
// (shared with the children's factories, which the tree holds), so they outlive any restart of a
// child; the runtime outlives the server (construct the server after the runtime). The names
// are fixed: one server per runtime.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include <spindle/net/net.hpp>
#include <spindle/spindle.hpp>

#include "acceptor.hpp"
#include "session.hpp"
#include "stats.hpp"
#include "store.hpp"

namespace kv {

struct server_options {
  net::endpoint address = net::endpoint::loopback_v4(0);  // port 0: a free one
  std::size_t max_sessions = 10000;                       // then ERR busy
  session_settings session{};
  // How many child restarts the tree absorbs (a shard, the counter, the acceptor or the
  // sessions' supervisor) before it gives up, stops everything and reports the failure.
  spindle::restart_limit restarts = spindle::restart_limit::at_most(10, std::chrono::seconds(10));
};

// Registers `actor` as `name` (OTP's start_link({local, Name}, ...)), from a child's factory.
// A name still taken (cannot happen under a supervisor, which starts a child again only after
// the old one halted, which freed its name) kills the new actor: the supervisor sees the
// factory's exception as a failed start.
inline spindle::actor_handle register_or_kill(spindle::runtime& rt, const std::string& name,
                                              spindle::actor_handle actor) {
  try {
    spindle::register_name(rt, name, actor);
  } catch (...) {
    actor.kill();
    throw;
  }
  return actor;
}

class server {
 public:
  server(spindle::runtime& rt, server_options options) : rt_(rt) {
    auto listener = std::make_shared<net::tcp_listener>(net::tcp_listener::bind(options.address));
    endpoint_ = listener->local_endpoint();
    spindle::supervisor_spec tree;
    tree.pattern = spindle::restart_pattern::downstream;
    tree.limit = options.restarts;
    for (std::size_t shard = 0; shard < options.session.store_shards; ++shard) {
      tree.children.push_back(store_child(shard));
    }
    tree.children.push_back(stats_child());
    tree.children.push_back(sessions_child(options.max_sessions));
    tree.children.push_back(acceptor_child(std::move(listener), options.session));
    top_ = spindle::spawn_supervisor(rt, std::move(tree), {.name = "kv"});
  }
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  ~server() { stop(); }

  net::endpoint local_endpoint() const { return endpoint_; }
  // The tree's root: monitor it to learn that the service gave up.
  const spindle::supervisor_ref& supervisor() const noexcept { return top_; }

  // Stops the tree (the acceptor first, then the sessions, each closing its connection, then
  // the counter and the shards) and waits until it has halted. From a plain thread, not from a
  // task or a handler (it blocks).
  void stop() {
    if (!top_) return;
    auto down = spindle::monitor_actor(top_);
    top_.stop();
    (void)down.blocking_receive();
    top_ = {};
  }

 private:
  spindle::supervised_child store_child(std::size_t shard) {
    spindle::supervised_child child;
    child.name = "store." + std::to_string(shard);
    child.stop_timeout = std::chrono::seconds(1);
    // The table is made once, here, and handed to every incarnation of the shard.
    child.start = [&rt = rt_, shard, data = std::make_shared<table>()](
                      const spindle::spawn_options& options) {
      return register_or_kill(rt, shard_name(shard),
                              spindle::spawn_actor_here<store_shard>(options, data));
    };
    return child;
  }

  spindle::supervised_child stats_child() {
    spindle::supervised_child child;
    child.name = "stats";
    child.stop_timeout = std::chrono::seconds(1);
    child.start = [&rt = rt_](const spindle::spawn_options& options) {
      return register_or_kill(rt, stats_name, spindle::spawn_actor_here<stats_counter>(options));
    };
    return child;
  }

  spindle::supervised_child sessions_child(std::size_t max_sessions) {
    spindle::supervised_child child;
    child.name = "sessions";
    // It stops its sessions all at once, each within its own stop timeout (1 s), then halts.
    child.stop_timeout = std::chrono::seconds(3);
    child.start = [&rt = rt_, max_sessions](const spindle::spawn_options& options) {
      spindle::dynamic_supervisor_spec spec;
      spec.max_children = max_sessions;
      spec.limit = spindle::restart_limit::unlimited();  // its children are never restarted
      const spindle::dynamic_supervisor sessions =
          spindle::spawn_dynamic_supervisor_here(spec, options);
      return register_or_kill(rt, sessions_name, sessions.ref());
    };
    return child;
  }

  static spindle::supervised_child acceptor_child(std::shared_ptr<net::tcp_listener> listener,
                                                  session_settings settings) {
    spindle::supervised_child child;
    child.name = "acceptor";
    child.depends_on = {"sessions"};
    child.stop_timeout = std::chrono::milliseconds(0);  // killed at once: see acceptor.hpp
    child.start = [listener = std::move(listener), settings](const spindle::spawn_options& options) {
      return spindle::actor_handle(spindle::spawn_actor_here<acceptor>(options, listener, settings));
    };
    return child;
  }

  spindle::runtime& rt_;
  net::endpoint endpoint_;
  spindle::supervisor_ref top_;
};

}  // namespace kv
