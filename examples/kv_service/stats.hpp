// The statistics actor, registered as "kv.stats": it adds up the commands the sessions report on
// their heartbeats, and answers STATS.
//
// Who takes part: every session casts a commands_handled every heartbeat (a send_interval timer
// to itself, session.hpp) and once more when it stops, with the commands it handled since its
// last report; a session answering STATS calls it with a commands_query. Reports are casts, so
// a session never waits for the counter, and the counter never waits for anyone. Its count is
// as of the last reports (not promised exact: protocol.hpp); a crash of it restarts it at zero.
#pragma once

#include <cstdint>
#include <variant>

#include <spindle/spindle.hpp>

namespace kv {

inline constexpr const char* stats_name = "kv.stats";

struct commands_handled {
  std::uint64_t count = 0;
};
struct commands_query {
  using reply = std::uint64_t;
};
using stats_message = std::variant<commands_handled, spindle::call_message<commands_query>>;

class stats_counter {
 public:
  using message_type = stats_message;

  void receive(message_type& message) {
    if (const auto* report = std::get_if<commands_handled>(&message)) {
      commands_ += report->count;
    } else {
      std::get<spindle::call_message<commands_query>>(message).reply(commands_);
    }
  }

 private:
  std::uint64_t commands_ = 0;
};

}  // namespace kv
