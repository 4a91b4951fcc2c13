// The acceptor: an actor that accepts connections and starts a session for each, as a child of
// the sessions' dynamic supervisor (OTP's acceptor process in front of a simple_one_for_one
// supervisor).
//
// Who takes part: the acceptor (an awaiting handler: one accept_next message is one accept,
// then the start of that connection's session, then an accept_next to itself for the next
// one); the listening socket, which the server owns and lends to every incarnation of the
// acceptor (so the port stays the same across restarts); the sessions' supervisor, found by its
// name for each connection (it may have been restarted since the last one).
//
// Stopping: the acceptor spends its life waiting in accept, where a stop request would wait
// behind it; it has nothing to lose, so its supervisor kills it at once (stop_timeout zero),
// which cancels the accept. A failed accept crashes it (let it crash): its supervisor restarts
// it. A connection the sessions' supervisor refuses (max_sessions reached, or it is restarting)
// is answered ERR busy and closed.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <spindle/net/net.hpp>
#include <spindle/spindle.hpp>

#include "protocol.hpp"
#include "session.hpp"

namespace kv {

// The session of one connection, as a dynamic supervisor's child: temporary (restart never),
// since its socket dies with it.
inline spindle::dynamic_child_spec session_child(std::shared_ptr<connection> socket,
                                                 session_settings settings) {
  spindle::dynamic_child_spec child;
  child.name = "session";
  child.restart = spindle::restart_type::never;
  child.stop_timeout = std::chrono::seconds(1);  // then killed (a client that does not read)
  child.start = [socket = std::move(socket), settings](const spindle::spawn_options& options) {
    return spindle::actor_handle(spindle::spawn_actor_here<session>(options, socket, settings));
  };
  return child;
}

struct accept_next {};

class acceptor {
 public:
  using message_type = accept_next;
  using context = spindle::actor_context<accept_next>;

  acceptor(std::shared_ptr<net::tcp_listener> listener, session_settings settings)
      : listener_(std::move(listener)), settings_(settings) {}

  void on_start(context& ctx) { ctx.self().send(accept_next{}); }

  spindle::task<void> receive(accept_next, context& ctx) {
    net::tcp_stream accepted = co_await listener_->accept();
    auto socket = std::make_shared<connection>(std::move(accepted));
    co_await start_session(std::move(socket));
    ctx.self().send(accept_next{});
  }

 private:
  spindle::task<void> start_session(std::shared_ptr<connection> socket) {
    const auto sessions = spindle::whereis<spindle::dynamic_supervisor_message>(sessions_name);
    spindle::started_child started;  // start_child_error::supervisor_gone until answered
    if (sessions) {
      spindle::dynamic_child_spec child = session_child(socket, settings_);
      started = co_await spindle::dynamic_supervisor(sessions).start_child(std::move(child));
    }
    if (started.error == spindle::start_child_error::none) co_return;
    const std::string busy = error_reply("busy");
    try {
      co_await socket->stream.write_all(busy, net::deadline::after(std::chrono::seconds(1)));
    } catch (const std::system_error&) {   // gone already
    } catch (const spindle::timeout_error&) {  // not reading: closed anyway
    }
  }  // the last reference to a refused connection: closed here

  std::shared_ptr<net::tcp_listener> listener_;
  session_settings settings_;
};

}  // namespace kv
