// The key-value service's line protocol: what a client may send, what it gets back, and what the
// service promises. Parsing and formatting only; no I/O, no actors.
//
// Requests, one per line ("\n" or "\r\n"; at most max_line_length bytes):
//   SET <key> <value>   -> OK                       the value is the rest of the line (spaces too)
//   GET <key>           -> VALUE <value> | NOT_FOUND
//   DEL <key>           -> DELETED | NOT_FOUND
//   STATS               -> STATS sessions=<n> commands=<n>
//   PING                -> PONG
//   QUIT                -> BYE, then the server closes the connection
// Anything else         -> ERR <why>                (the session goes on)
// A key is 1 to 250 bytes, none of them a space or a control character. A line longer than the
// limit is answered ERR line too long, and the connection is closed (the stream is out of step).
// A session that receives no request for the idle timeout (30 s by default) is closed, silently.
//
// What the service promises (the load test, tests/actor/kv_service_test.cpp, checks each one):
//   1. One reply per request, in request order; a client may send several requests before
//      reading (pipelining). A reply is a whole line: bytes followed by a close without "\n"
//      are not a reply.
//   2. Acknowledged is durable: once a SET was answered OK (a DEL answered DELETED or NOT_FOUND),
//      every later GET of that key answers that value (that absence) until a later SET or DEL of
//      the key takes effect: for the life of the server, even if the session that sent it is
//      killed afterwards, even if the store shard that holds the key crashes and is restarted.
//   3. Unacknowledged is at most once, in order: a request answered ERR unavailable, or left
//      without a reply because the connection closed, took effect once or not at all; if it did,
//      then before anything the same client sends after it saw the error or the close. So a
//      stale write never overwrites a newer one from the same client.
//   4. Never a wrong reply: a session that is killed, times out or is stopped closes the
//      connection; what the client received before that is correct. A GET answers a value that
//      some SET of that key wrote, never another key's.
// Not promised: durability across a restart of the server (the store is in memory), fairness
// between clients, an exact STATS (its counts come from periodic reports).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace kv {

inline constexpr std::size_t max_key_length = 250;
inline constexpr std::size_t max_line_length = 8192;

enum class verb { set, get, del, stats, ping, quit, invalid };

// A parsed request line. For `invalid`, `error` says why (the text of the ERR reply).
struct request {
  verb what = verb::invalid;
  std::string key;
  std::string value;
  std::string error;
};

inline bool is_valid_key(std::string_view key) {
  if (key.empty() || key.size() > max_key_length) return false;
  for (const char c : key) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
  }
  return true;
}

inline request invalid_request(std::string why) {
  request r;
  r.error = std::move(why);
  return r;
}

// Splits "VERB[ rest]" and checks each verb's arguments.
inline request parse_request(std::string_view line) {
  const std::size_t space = line.find(' ');
  const std::string_view name = line.substr(0, space);
  const std::string_view rest = space == std::string_view::npos ? "" : line.substr(space + 1);
  const bool has_rest = space != std::string_view::npos;
  request r;
  if (name == "SET") {
    const std::size_t split = rest.find(' ');
    if (split == std::string_view::npos) return invalid_request("usage: SET <key> <value>");
    r.key = rest.substr(0, split);
    r.value = rest.substr(split + 1);
    r.what = verb::set;
  } else if (name == "GET" || name == "DEL") {
    if (!has_rest || rest.find(' ') != std::string_view::npos) {
      return invalid_request(std::string("usage: ").append(name).append(" <key>"));
    }
    r.key = rest;
    r.what = name == "GET" ? verb::get : verb::del;
  } else if (name == "STATS" || name == "PING" || name == "QUIT") {
    if (has_rest) return invalid_request(std::string("usage: ").append(name));
    r.what = name == "STATS" ? verb::stats : name == "PING" ? verb::ping : verb::quit;
    return r;
  } else {
    return invalid_request("unknown command");
  }
  if (!is_valid_key(r.key)) return invalid_request("bad key");
  return r;
}

// The reply lines, each with its "\n".
inline std::string ok_reply() { return "OK\n"; }
inline std::string value_reply(std::string_view value) {
  return std::string("VALUE ").append(value).append("\n");
}
inline std::string not_found_reply() { return "NOT_FOUND\n"; }
inline std::string deleted_reply() { return "DELETED\n"; }
inline std::string error_reply(std::string_view why) {
  return std::string("ERR ").append(why).append("\n");
}
// The store could not answer (a shard restarting, or too slow): see promise 3.
inline std::string unavailable_reply() { return error_reply("unavailable"); }

}  // namespace kv
