// server: the live view (SPEC G5; docs/design/diagnostics.md, "Live view (G5)"). A small
// HTTP/1.1 server that lets a person (a browser, curl, Prometheus, spindle-top) look at a
// running program:
//
//   GET /                 one self-contained HTML page (no network access: its script, styles
//                         and the vendored uPlot chart library are inline)
//   GET /metrics          Prometheus text exposition (text/plain; version=0.0.4)
//   GET /api/snapshot     the snapshot, JSON
//   GET /api/trace?ms=N   Chrome Trace Event JSON of the last N ms (0 <= N <= max_trace_ms; 0
//                         or no ms: everything the rings hold, as diagnostics::trace_json(r, 0ms))
//
// Who takes part
//   - the owner (a runtime or an embedded executor; task/live_view.hpp): builds the server with
//     the three providers, stops it (stop() or the destructor) before it takes apart anything
//     the providers read;
//   - the server's own thread: accepts, reads, parses (libhttp-parser), calls a provider and
//     writes the answer, for every connection, with poll(). It is a plain thread, never one of
//     the runtime's executors, so an executor stuck in a runnable can still be inspected; and
//     the providers only read (diagnostics/registry.hpp's contract), so a request never makes
//     an executor wait.
//
// What the server defends against (a port on loopback is still reachable by every local user
// and, through DNS rebinding, by web pages): it binds loopback addresses only unless told
// otherwise; checks the request's host (DNS rebinding): an HTTP/1.1 request without a Host
// header, with two of them, or with a header name that has a blank in it ("Host :") is 400; a
// Host header or an absolute-form target (GET http://NAME/...) naming something other than
// 127.0.0.1, localhost, [::1] or the bound address (each with any port) is 403; reads at most
// `max_header_bytes` of request line and headers (431), no request body (413 past
// `max_body_bytes`), only GET (405), well-formed requests (400), known paths (404), bounded
// queries (400); gives each connection a deadline for the whole request and another for the
// answer (a slow or silent client is cut off); holds at most `max_connections` at once (the
// next ones get a complete 503 and an orderly close: at most `max_lingering_refusals` of them
// are read and dropped for a moment, so the kernel does not reset them); and holds at most
// `max_answer_bytes_held` of built answers at once (a request past it gets 503 with
// Retry-After, without its answer being built). Every answer closes its connection
// ("Connection: close"): no keep-alive state to defend.
//
// Threads. The constructor binds and starts the thread (or throws). stop() may be called from
// any thread, more than once; it returns once the thread has ended, every connection is closed
// and no provider runs any more. statistics() and port() may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "spindle/core/diagnostics_options.hpp"

namespace spindle::diagnostics {

// What the endpoints serve. Each runs on the server's thread, one request at a time; an empty
// function answers 404 ("not provided"), an exception answers 500 with its message.
struct server_providers {
  std::function<std::string()> metrics;                         // Prometheus text
  std::function<std::string()> snapshot;                        // JSON
  std::function<std::string(std::chrono::milliseconds)> trace;  // Chrome Trace Event JSON
};

struct server_limits {
  std::uint32_t max_connections = 32;
  std::uint32_t max_header_bytes = 8 * 1024;  // request line + headers
  std::uint32_t max_body_bytes = 0;           // GET has none; any body is 413
  // From accept to the end of the request's headers: a client that trickles (slowloris) or
  // says nothing is cut off with 408.
  std::chrono::milliseconds request_deadline{5000};
  // From the request's end to the answer's last byte: a client that does not read is cut off.
  std::chrono::milliseconds response_deadline{10000};
  std::uint32_t max_trace_ms = 60000;
  // Connections refused over max_connections get their 503, are shut for writing and are read
  // and dropped for at most 500 ms (or until the client closes), so the kernel closes them with
  // a FIN, not a reset caused by an unread request. At most this many linger at once; past
  // that (a flood) a refused connection is read once and closed at once. So a flood costs the
  // thread a few system calls per connection and at most this many descriptors.
  std::uint32_t max_lingering_refusals = 64;
  // The bytes of answers (built, not yet taken by the sockets) held at once, over every
  // connection: clients that ask for big answers and never read cannot make the process hold
  // more. A request whose answer would pass it is answered 503 with "Retry-After: 1"; its
  // provider does not run when the endpoint's previous answer already would not fit (the size
  // is not known before it is built: an answer that turns out not to fit is dropped at once).
  // An answer larger than the whole budget is still served when no other answer is held, so
  // no endpoint becomes unreachable: the bound is max(budget, the largest single answer).
  std::size_t max_answer_bytes_held = std::size_t{64} * 1024 * 1024;
};

// Counters since start (relaxed atomics: monotonic samples for tests and the page).
struct server_statistics {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_refused = 0;  // over max_connections (503)
  std::uint64_t requests_answered = 0;    // any status
  std::uint64_t requests_rejected = 0;    // 4xx/5xx answers and deadline cut-offs
  std::uint64_t answers_over_budget = 0;  // 503: max_answer_bytes_held would have been passed
  std::uint64_t answer_bytes_held = 0;    // now
  std::uint64_t answer_bytes_held_peak = 0;  // the most held at once since start
};

// Where a live view should listen, as the options and the environment say.
struct server_setting {
  enum class kind : std::uint8_t { off, serve, invalid };
  kind what = kind::off;
  std::string address;  // serve: "host:port" as given ("localhost" and bare ports resolved)
  std::string error;    // invalid: a sentence for stderr
};

// diagnostics_options::server_address wins when not empty ("off" disables); otherwise the
// value of SPINDLE_DIAGNOSTICS (`environment_value`, null when unset). Accepted: "HOST:PORT"
// with HOST an IPv4 literal, "[IPv6 literal]" or "localhost"; ":PORT" or "PORT" (127.0.0.1);
// PORT 0..65535 (0: the kernel picks one). "", "0", "off", "false", "no" mean off. A non-
// loopback HOST is invalid unless `serve_beyond_loopback`.
server_setting resolve_server_setting(const core::diagnostics_options& options,
                                      const char* environment_value);

class server {
 public:
  // Binds `address` (a "serve" setting's address; resolve_server_setting checked it) and
  // starts the thread. Throws std::system_error when the socket cannot be bound (port in use),
  // std::invalid_argument for an address it cannot parse.
  server(const std::string& address, server_providers providers, server_limits limits = {});
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Ends the thread and closes every connection (idempotent, any thread but the server's own).
  void stop() noexcept;

  // The bound port (the kernel's choice for port 0) and "host:port" to print.
  std::uint16_t port() const noexcept { return port_; }
  const std::string& address() const noexcept { return bound_address_; }
  server_statistics statistics() const noexcept;

  // The page (GET /), for tests and tools that want it without a socket.
  static std::string_view page() noexcept;

 private:
  struct state;
  void run() noexcept;

  std::unique_ptr<state> state_;
  std::uint16_t port_ = 0;
  std::string bound_address_;
  std::mutex stop_mutex_;  // serialises stop() callers
  std::thread thread_;     // guarded by stop_mutex_ once started
};

}  // namespace spindle::diagnostics
