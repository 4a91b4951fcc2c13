// A session: one actor per client connection, a temporary child of the sessions' dynamic
// supervisor (never restarted: its socket dies with it). It reads requests, asks the store, and
// writes the replies (protocol.hpp).
//
// Who takes part:
//   - the session actor: owns the connection's state, handles one message at a time; its
//     receive is a coroutine (an awaiting handler), so it can call a store shard and write to
//     the socket in the middle of handling a request, while its other messages wait;
//   - one read task at a time (read_one_line): reads the next line and sends it to the session
//     as a message. This is OTP's socket in {active, once} mode: the session asks for the next
//     line only after it has answered this one, so a fast client cannot flood its mailbox, and
//     the socket has one reader and one writer, never two of either;
//   - two timers owned by the session: a one-shot idle_check (send_after, re-armed at every
//     request; a check that finds a request came after it was armed is stale and ignored, which
//     is how a cancel() that came too late is told apart) and a periodic heartbeat
//     (send_interval), on which it reports its commands to the stats actor. Both are cancelled
//     by the runtime when the session halts.
//
// Ending: the client closes (the read task sends input_ended), QUIT, the idle timeout, a
// stop request (its supervisor stopping), or a kill. In each case on_stop runs: it cancels the
// read in flight and shuts the socket down (shutdown(2)), so the client sees the connection
// closed at once, whatever still holds the socket. A kill while the handler awaits cancels the
// handler: a store call it was waiting for may still be carried out, and a reply it was writing
// may be cut off, which the client sees as a close without a whole reply line (protocol.hpp,
// promises 1 and 3).
//
// Lifetimes: the socket (`connection`) is shared by the session and its read task: the task may
// still be finishing its read after the session halted, and the socket is closed when the last
// of the two lets go. The handler's frame refers to the session's members (`this`); the runtime
// keeps the behaviour until the handler has ended, a killed one included (actor_await.hpp).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <variant>

#include <spindle/net/buffered.hpp>
#include <spindle/net/net.hpp>
#include <spindle/spindle.hpp>

#include "protocol.hpp"
#include "stats.hpp"
#include "store.hpp"

namespace kv {

namespace net = spindle::net;

inline constexpr const char* sessions_name = "kv.sessions";  // the sessions' supervisor

struct session_settings {
  std::size_t store_shards = 4;
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds heartbeat_period{1000};
  std::chrono::milliseconds store_timeout{5000};  // how long a request waits for its shard
};

// The socket, shared by the session and its read task (see "Lifetimes").
struct connection {
  explicit connection(net::tcp_stream accepted) : stream(std::move(accepted)), in(stream) {}
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  net::tcp_stream stream;
  net::buffered_reader<net::tcp_stream> in;  // reads `stream`: declared after it
};

// What a session receives: from its read task, and from its own timers.
struct line_received {
  std::string line;
};
struct input_ended {
  bool line_too_long = false;  // else: the client closed or reset the connection
};
struct idle_check {
  std::uint64_t requests_when_armed = 0;
};
struct heartbeat {};
using session_message = std::variant<line_received, input_ended, idle_check, heartbeat>;

// Reads one line and hands it to the session. A cancelled read (the session halted) ends the
// task with task_cancelled, which nobody needs to see.
inline spindle::task<void> read_one_line(std::shared_ptr<connection> socket,
                                         spindle::actor_ref<session_message> owner) {
  session_message next = input_ended{};
  try {
    std::optional<std::string> line = co_await socket->in.read_line(max_line_length);
    if (line) next = line_received{std::move(*line)};
  } catch (const std::system_error& error) {
    next = input_ended{error.code() == std::errc::message_size};
  }
  owner.send(std::move(next));  // dropped if the session halted meanwhile
}

class session {
 public:
  using message_type = session_message;
  using context = spindle::actor_context<session_message>;

  session(std::shared_ptr<connection> socket, session_settings settings)
      : socket_(std::move(socket)), settings_(settings) {}

  void on_start(context& ctx) {
    system_ = &ctx.system();
    ctx.send_interval(settings_.heartbeat_period, heartbeat{});  // cancelled when it halts
    arm_idle_timer(ctx);
    read_next_line(ctx);
  }

  spindle::task<void> receive(session_message& message, context& ctx) {
    if (auto* received = std::get_if<line_received>(&message)) {
      ++requests_;
      arm_idle_timer(ctx);  // before the reply: a client that has it finds the timer re-armed
      request parsed = parse_request(received->line);
      const verb what = parsed.what;
      std::string reply = co_await answer(std::move(parsed));
      ++commands_unreported_;
      const bool written = co_await write_line(std::move(reply));
      if (!written || what == verb::quit) {
        ctx.stop();
      } else {
        read_next_line(ctx);
      }
    } else if (const auto* ended = std::get_if<input_ended>(&message)) {
      if (ended->line_too_long) co_await write_line(error_reply("line too long"));
      ctx.stop();
    } else if (const auto* check = std::get_if<idle_check>(&message)) {
      if (check->requests_when_armed == requests_) ctx.stop();  // else a request came since
    } else {
      report_commands();  // heartbeat
    }
  }

  void on_stop(const spindle::exit_reason&) {
    if (reading_.valid()) reading_.cancel();
    try {
      socket_->stream.shutdown(SHUT_RDWR);  // the client sees the close now
    } catch (const std::system_error&) {
      // not connected any more: nothing to tell the client
    }
    report_commands();
  }

 private:
  void read_next_line(context& ctx) {
    reading_ = spindle::spawn(read_one_line(socket_, ctx.self()));
  }

  void arm_idle_timer(context& ctx) {
    idle_timer_.cancel();  // false if the check is queued already: it will find it is stale
    idle_timer_ = ctx.send_after(settings_.idle_timeout, idle_check{requests_});
  }

  void report_commands() {
    if (commands_unreported_ == 0 || system_ == nullptr) return;
    spindle::send_to<stats_message>(*system_, stats_name, commands_handled{commands_unreported_});
    commands_unreported_ = 0;  // a report the counter missed (it was restarting) is lost
  }

  // The reply to one request (a whole line).
  spindle::task<std::string> answer(request r) {
    switch (r.what) {
      case verb::set: {
        set_request question{std::move(r.key), std::move(r.value)};
        const std::optional<stored> done = co_await call_store(std::move(question));
        co_return done ? ok_reply() : unavailable_reply();
      }
      case verb::get: {
        get_request question{std::move(r.key)};
        const std::optional<lookup> found = co_await call_store(std::move(question));
        if (!found) co_return unavailable_reply();
        co_return found->found ? value_reply(found->value) : not_found_reply();
      }
      case verb::del: {
        del_request question{std::move(r.key)};
        const std::optional<bool> existed = co_await call_store(std::move(question));
        if (!existed) co_return unavailable_reply();
        co_return *existed ? deleted_reply() : not_found_reply();
      }
      case verb::stats: co_return co_await statistics();
      case verb::ping: co_return "PONG\n";
      case verb::quit: co_return "BYE\n";
      case verb::invalid: break;
    }
    co_return error_reply(r.error);
  }

  // Calls the shard that holds the request's key; nullopt if it could not answer. The shard is
  // looked up by name each time: after a crash its successor has the name, not the same ref.
  template <class Request>
  spindle::task<std::optional<typename Request::reply>> call_store(Request question) {
    std::string name = shard_name(shard_of(question.key, settings_.store_shards));
    co_return co_await call_named<store_message>(std::move(name), std::move(question));
  }

  // A typed call to the actor registered as `name`; nullopt if there is none (being
  // restarted), or it halted before answering, or it did not answer in time (then it may
  // still carry the request out: promise 3).
  template <class Message, class Request>
  spindle::task<std::optional<typename Request::reply>> call_named(std::string name,
                                                                    Request question) {
    const auto target = spindle::whereis<Message>(name);
    if (!target) co_return std::nullopt;
    const spindle::call_options limit{.timeout = settings_.store_timeout};
    try {
      co_return co_await target.call(std::move(question), limit);
    } catch (const spindle::actor_unavailable&) {  // it halted before the request was queued
    } catch (const spindle::channel_closed&) {     // it halted with the request queued: dropped
    } catch (const spindle::timeout_error&) {      // too slow
    }
    co_return std::nullopt;
  }

  spindle::task<std::string> statistics() {
    commands_query question;
    const std::optional<std::uint64_t> commands =
        co_await call_named<stats_message>(stats_name, std::move(question));
    const auto sessions = spindle::whereis<spindle::dynamic_supervisor_message>(sessions_name);
    if (!commands || !sessions) co_return unavailable_reply();
    // Always answered: by the supervisor, or (if it halted) by the question itself.
    const spindle::dynamic_supervisor_stats children =
        co_await spindle::dynamic_supervisor(sessions).stats();
    co_return "STATS sessions=" + std::to_string(children.listed) +
        " commands=" + std::to_string(*commands) + "\n";
  }

  // Writes one whole line; false if the client is gone, or has not taken it within the idle
  // timeout (a client that sends and never reads would otherwise hold its session forever:
  // the idle check is a message, and it waits behind this handler).
  spindle::task<bool> write_line(std::string line) {
    try {
      co_await socket_->stream.write_all(line, net::deadline::after(settings_.idle_timeout));
    } catch (const std::system_error&) {
      co_return false;
    } catch (const spindle::timeout_error&) {
      co_return false;
    }
    co_return true;
  }

  std::shared_ptr<connection> socket_;
  session_settings settings_;
  spindle::actor_system* system_ = nullptr;  // for reports from on_stop
  spindle::join_handle<void> reading_;       // the read in flight, if any
  spindle::actor_timer idle_timer_;
  std::uint64_t requests_ = 0;
  std::uint64_t commands_unreported_ = 0;
};

}  // namespace kv
