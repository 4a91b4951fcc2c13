// The live view's HTTP server (include/spindle/diagnostics/server.hpp; docs/design/diagnostics.md,
// "Live view (G5)").
//
// One thread, one poll() loop. Each connection goes through
//   reading  - bytes go to libhttp-parser; the request's line and headers are bounded
//              (max_header_bytes), the whole request must arrive before request_deadline;
//   writing  - the answer (built at once, the provider ran on this thread) is sent as the
//              socket takes it, before response_deadline;
//   draining - our side is shut for writing; what the client still sends is read and dropped
//              for a short while (a close with unread input would reset the connection, and
//              the client could lose the answer it has not read yet: a "lingering close");
// then it is closed. Sockets are non-blocking, so no client can hold the thread.
//
// A connection over max_connections is "refused": its 503 is sent at once (a fresh socket
// always takes those few hundred bytes), it is shut for writing and starts in `draining`, so
// its request, unread, cannot make the close a reset. Refused connections do not count against
// max_connections; at most max_lingering_refusals linger, the next are read once and closed.
//
// The answer budget: `answer_bytes_held` is the sum of the built answers not yet taken by the
// sockets (each connection's `output`), changed only on this thread. An endpoint's answer is
// built only if the endpoint's previous answer would still fit, and kept only if it does fit
// (server_limits::max_answer_bytes_held); otherwise the request gets 503 + Retry-After.
#include "spindle/diagnostics/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverlength-strings"
#endif
#include "spindle_diagnostics_page.hpp"  // generated from src/diagnostics/web/ (CMakeLists.txt)
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace spindle::diagnostics {

namespace {

using steady = std::chrono::steady_clock;

// How long a connection whose answer was sent may still be read from (lingering close), and
// how much is read from it at most.
constexpr auto drain_time = std::chrono::milliseconds(500);
constexpr std::size_t drain_bytes = 64 * 1024;

// What an answer adds to its body, at most (status line and headers), counted against the
// answer budget before the answer is serialised.
constexpr std::size_t head_allowance = 1024;

// --- addresses -------------------------------------------------------------------------------------

struct parsed_address {
  int family = AF_INET;
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string host;  // as it is written in a URL: "127.0.0.1", "[::1]"
  bool loopback = false;
};

bool parse_port(std::string_view text, std::uint16_t& port) {
  if (text.empty() || text.size() > 5) return false;
  unsigned value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value > 65535) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

// "HOST:PORT", "[V6]:PORT", "localhost:PORT", ":PORT", "PORT". False with `error` set otherwise.
bool parse_address(std::string_view text, parsed_address& out, std::string& error) {
  std::string_view host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      error = "an IPv6 address is written [ADDRESS]:PORT";
      return false;
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
    out.family = AF_INET6;
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      port_text = text;  // a bare port
    } else {
      host = text.substr(0, colon);
      port_text = text.substr(colon + 1);
    }
    if (host.find(':') != std::string_view::npos) {
      error = "an IPv6 address is written [ADDRESS]:PORT";
      return false;
    }
  }
  std::uint16_t port = 0;
  if (!parse_port(port_text, port)) {
    error = "the port must be a number from 0 to 65535 (0: any free port)";
    return false;
  }
  if (host.empty() || host == "localhost") host = out.family == AF_INET6 ? "::1" : "127.0.0.1";
  const std::string host_string(host);
  if (out.family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out.storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    if (inet_pton(AF_INET6, host_string.c_str(), &a->sin6_addr) != 1) {
      error = "'" + host_string + "' is not an IPv6 address";
      return false;
    }
    out.length = sizeof(sockaddr_in6);
    out.loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
    out.host = "[" + host_string + "]";
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&out.storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    if (inet_pton(AF_INET, host_string.c_str(), &a->sin_addr) != 1) {
      error = "'" + host_string + "' is not an IPv4 address (or localhost, or [IPv6])";
      return false;
    }
    out.length = sizeof(sockaddr_in);
    out.loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;  // 127.0.0.0/8
    out.host = host_string;
  }
  return true;
}

// --- answers ---------------------------------------------------------------------------------------

const char* reason_of(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

const char* default_reason_of_refusal(int status) {
  switch (status) {
    case 405: return "only GET is served";
    case 413: return "requests have no body here";
    case 431: return "request line and headers are limited to max_header_bytes (8 KiB)";
    default: return "malformed request";
  }
}

struct answer {
  int status = 200;
  std::string_view content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string_view extra_headers;  // each line ends in \r\n
};

answer error_answer(int status, std::string_view why) {
  answer a;
  a.status = status;
  a.body = std::to_string(status) + " " + reason_of(status) + "\n";
  if (!why.empty()) {
    a.body += why;
    a.body += '\n';
  }
  if (status == 405) a.extra_headers = "Allow: GET\r\n";
  if (status == 503) a.extra_headers = "Retry-After: 1\r\n";
  return a;
}

std::string serialise(const answer& a, bool with_body = true) {
  std::string out;
  out.reserve(a.body.size() + 256);
  out += "HTTP/1.1 ";
  out += std::to_string(a.status);
  out += ' ';
  out += reason_of(a.status);
  out += "\r\nContent-Type: ";
  out += a.content_type;
  out += "\r\nContent-Length: ";
  out += std::to_string(a.body.size());
  out += "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n";
  out += a.extra_headers;
  out += "\r\n";
  if (with_body) out += a.body;
  return out;
}

// The page may run inline script and styles and talk to this server only.
constexpr std::string_view page_headers =
    "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src data:; connect-src 'self'\r\n";
constexpr std::string_view trace_headers =
    "Content-Disposition: attachment; filename=\"spindle-trace.json\"\r\n";

// --- connections -----------------------------------------------------------------------------------

enum class phase : std::uint8_t { reading, writing, draining };

struct connection {
  int fd = -1;
  phase now = phase::reading;
  steady::time_point deadline;
  http_parser parser{};
  std::uint32_t header_bytes = 0;
  std::uint32_t header_limit = 0;
  std::string url;
  std::string host;
  bool field_is_host = false;
  std::uint8_t host_headers = 0;  // how many Host headers (more than one: 400)
  std::string field;  // the current header's name (its first 16 characters)
  std::uint64_t body_bytes = 0;
  std::uint64_t body_limit = 0;
  bool last_was_value = false;
  bool message_done = false;
  int refusal = 0;  // a status decided while parsing (400, 405, 413, 431)
  const char* refusal_why = nullptr;  // its sentence (null: default_reason_of_refusal)
  bool refused = false;  // over max_connections: a 503 sent, lingering (not a serving slot)
  std::string output;
  std::size_t written = 0;
  std::size_t drained = 0;
};

}  // namespace

struct server::state {
  server_providers providers;
  server_limits limits;
  parsed_address bound;
  int listen_fd = -1;
  int wake_fd = -1;  // eventfd: stop() wakes the poll
  std::atomic<bool> stopping{false};
  // relaxed, all four: monotonic samples, nothing is published through them.
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> answered{0};
  std::atomic<std::uint64_t> rejected{0};
  std::atomic<std::uint64_t> over_budget{0};
  // The answer budget (see the file's first comment). `held_bytes` is this thread's; the two
  // atomics mirror it for statistics() (relaxed: samples, nothing is published through them).
  std::size_t held_bytes = 0;
  std::atomic<std::uint64_t> held_now{0};
  std::atomic<std::uint64_t> held_peak{0};
  // Each endpoint's previous answer size: the guess of the next one's (server thread only).
  enum endpoint : std::uint8_t { page_endpoint, metrics_endpoint, snapshot_endpoint, trace_endpoint,
                                 endpoint_count };
  std::size_t last_answer_bytes[endpoint_count]{};
  http_parser_settings settings{};

  ~state() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  int host_verdict(std::string_view host) const;
  answer route(const connection& c);

  // May an answer of `bytes` (its body) be held now? Always when nothing else is held, so an
  // answer larger than the whole budget is still served alone.
  bool fits(std::size_t bytes) const {
    return held_bytes == 0 || held_bytes + bytes + head_allowance <= limits.max_answer_bytes_held;
  }
  void hold(std::size_t bytes) {
    held_bytes += bytes;
    // relaxed: samples for statistics(); only this thread writes them.
    held_now.store(held_bytes, std::memory_order_relaxed);
    if (held_bytes > held_peak.load(std::memory_order_relaxed)) {
      held_peak.store(held_bytes, std::memory_order_relaxed);
    }
  }
  void release(std::size_t bytes) {
    held_bytes -= bytes;
    held_now.store(held_bytes, std::memory_order_relaxed);  // relaxed: a sample
  }
  answer over_budget_answer() {
    over_budget.fetch_add(1, std::memory_order_relaxed);  // relaxed: a sample
    return error_answer(503, "the diagnostics server holds as many answers as it may "
                             "(max_answer_bytes_held); try again when clients have read theirs");
  }
};

namespace {

connection& of(http_parser* p) { return *static_cast<connection*>(p->data); }

// Counts the request line and header bytes; past the limit the parse stops (431).
int count_header_bytes(http_parser* p, std::size_t length, std::uint32_t limit) {
  connection& c = of(p);
  c.header_bytes += static_cast<std::uint32_t>(std::min<std::size_t>(length, limit + 1)) + 2;
  if (c.header_bytes > limit) {
    c.refusal = 431;
    return 1;
  }
  return 0;
}

// What the parser tells us. A nonzero return stops the parse (an error the caller reads from
// `refusal` or the parser's errno).
http_parser_settings parser_settings() {
  http_parser_settings settings;
  http_parser_settings_init(&settings);
  settings.on_url = [](http_parser* p, const char* at, std::size_t length) {
    connection& c = of(p);
    if (count_header_bytes(p, length, c.header_limit) != 0) return 1;
    c.url.append(at, length);
    return 0;
  };
  settings.on_header_field = [](http_parser* p, const char* at, std::size_t length) {
    connection& c = of(p);
    if (count_header_bytes(p, length, c.header_limit) != 0) return 1;
    // libhttp-parser (not strict) takes "Host : x" as a field named "Host ": a header name
    // with a blank is refused, so no Host header can hide from the check.
    if (std::any_of(at, at + length, [](char ch) { return ch == ' ' || ch == '\t'; })) {
      c.refusal = 400;
      c.refusal_why = "a header name has a blank in it (\"Host :\")";
      return 1;
    }
    // A field name may come in pieces (split across reads); a new one starts after a value.
    if (c.last_was_value) c.field.clear();
    c.last_was_value = false;
    c.field.append(at, std::min<std::size_t>(length, 16 - std::min<std::size_t>(c.field.size(), 16)));
    return 0;
  };
  settings.on_header_value = [](http_parser* p, const char* at, std::size_t length) {
    connection& c = of(p);
    if (count_header_bytes(p, length, c.header_limit) != 0) return 1;
    if (!c.last_was_value) {  // the field name is complete
      c.field_is_host = c.field.size() == 4 && std::equal(c.field.begin(), c.field.end(), "host",
                                                          [](char x, char y) {
                                                            return std::tolower(
                                                                       static_cast<unsigned char>(x)) == y;
                                                          });
      if (c.field_is_host && ++c.host_headers > 1) {
        c.refusal = 400;
        c.refusal_why = "more than one Host header";
        return 1;
      }
    }
    c.last_was_value = true;
    if (c.field_is_host) c.host.append(at, length);
    return 0;
  };
  settings.on_headers_complete = [](http_parser* p) {
    connection& c = of(p);
    if (c.host_headers == 0 && (p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1))) {
      c.refusal = 400;
      c.refusal_why = "an HTTP/1.1 request must have a Host header";
    } else if (p->method != HTTP_GET) {
      c.refusal = 405;
    } else if ((p->flags & F_CHUNKED) != 0 ||
               (p->content_length != ULLONG_MAX && p->content_length > c.body_limit)) {
      c.refusal = 413;
    }
    if (c.refusal != 0) return -1;  // stop here (HPE_CB_headers_complete)
    return 0;
  };
  settings.on_body = [](http_parser* p, const char*, std::size_t length) {
    connection& c = of(p);
    c.body_bytes += length;
    if (c.body_bytes > c.body_limit) {
      c.refusal = 413;
      return 1;
    }
    return 0;
  };
  settings.on_message_complete = [](http_parser* p) {
    of(p).message_done = true;
    http_parser_pause(p, 1);  // one request per connection: the rest is not parsed
    return 0;
  };
  return settings;
}

}  // namespace

// 0: the request may be answered; 400: `host` is not NAME[:PORT]; 403: NAME is not one of
// 127.0.0.1, localhost, [::1] and the bound address (DNS rebinding: a page whose name resolves
// to 127.0.0.1 sends its own name). Every form is checked even when serving beyond loopback.
int server::state::host_verdict(std::string_view host) const {
  while (!host.empty() && (host.back() == ' ' || host.back() == '\t')) host.remove_suffix(1);
  std::string_view name = host;
  std::string_view port;
  bool has_port = false;
  if (!name.empty() && name.front() == '[') {
    const auto close = name.find(']');
    if (close == std::string_view::npos) return 400;
    const std::string_view rest = name.substr(close + 1);
    name = name.substr(0, close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return 400;
      port = rest.substr(1);
      has_port = true;
    }
  } else if (const auto colon = name.find(':'); colon != std::string_view::npos) {
    port = name.substr(colon + 1);
    name = name.substr(0, colon);
    has_port = true;
  }
  std::uint16_t ignored = 0;
  if (name.empty() || (has_port && !port.empty() && !parse_port(port, ignored))) return 400;
  // A blank or a control character (a folded "Host: a\r\n b", a NUL) makes no host name.
  if (std::any_of(name.begin(), name.end(),
                  [](char ch) { return static_cast<unsigned char>(ch) <= ' ' || ch == 0x7f; })) {
    return 400;
  }
  if (!bound.loopback) return 0;  // the user chose to serve beyond loopback
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const bool ours =
      lower == "localhost" || lower == "127.0.0.1" || lower == "[::1]" || lower == bound.host;
  return ours ? 0 : 403;
}

answer server::state::route(const connection& c) {
  http_parser_url parts;
  http_parser_url_init(&parts);
  if (http_parser_parse_url(c.url.data(), c.url.size(), 0, &parts) != 0 ||
      !(parts.field_set & (1 << UF_PATH))) {
    return error_answer(400, "malformed request target");
  }
  // An absolute-form target (GET http://NAME/...) names the host the request is for, whatever
  // the Host header says: it is checked the same way.
  if (parts.field_set & (1 << UF_HOST)) {
    std::string named(c.url.data() + parts.field_data[UF_HOST].off, parts.field_data[UF_HOST].len);
    if (named.find(':') != std::string::npos) named = "[" + named + "]";  // an IPv6 literal
    if (parts.field_set & (1 << UF_PORT)) {
      named += ':';
      named.append(c.url.data() + parts.field_data[UF_PORT].off, parts.field_data[UF_PORT].len);
    }
    if (const int verdict = host_verdict(named); verdict != 0) {
      return error_answer(verdict, verdict == 403 ? "the request's target names another host "
                                                    "(DNS rebinding?)"
                                                  : "malformed host in the request's target");
    }
  }
  const std::string_view path(c.url.data() + parts.field_data[UF_PATH].off,
                              parts.field_data[UF_PATH].len);
  std::string_view query;
  if (parts.field_set & (1 << UF_QUERY)) {
    query = std::string_view(c.url.data() + parts.field_data[UF_QUERY].off,
                             parts.field_data[UF_QUERY].len);
  }
  // Builds an endpoint's answer within the budget: not at all when the endpoint's previous
  // answer would not fit now, dropped at once when this one does not.
  auto call = [this](endpoint which, const auto& build, std::string_view type,
                     std::string_view headers = {}) {
    if (!fits(last_answer_bytes[which])) return over_budget_answer();
    answer a;
    a.content_type = type;
    a.extra_headers = headers;
    a.body = build();
    last_answer_bytes[which] = a.body.size();
    if (!fits(a.body.size())) return over_budget_answer();
    return a;
  };
  if (path == "/" || path == "/index.html") {
    return call(page_endpoint, [] { return std::string(server::page()); },
                "text/html; charset=utf-8", page_headers);
  }
  if (path == "/metrics") {
    if (!providers.metrics) return error_answer(404, "not provided by this program");
    return call(metrics_endpoint, providers.metrics, "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/api/snapshot") {
    if (!providers.snapshot) return error_answer(404, "not provided by this program");
    return call(snapshot_endpoint, providers.snapshot, "application/json");
  }
  if (path == "/api/trace") {
    // 0 (and no ms): everything the rings hold, as diagnostics::trace_json(registry, 0ms).
    std::uint32_t ms = 0;
    // Parameters are name=value pairs joined by '&'; only "ms" means something here.
    std::string_view rest = query;
    while (!rest.empty()) {
      const auto amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
      if (pair.substr(0, 3) != "ms=") continue;
      const std::string_view value = pair.substr(3);
      unsigned n = 0;
      auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || error != std::errc() || end != value.data() + value.size() ||
          n > limits.max_trace_ms) {
        return error_answer(400, "ms must be a whole number of milliseconds from 0 (everything "
                                 "the rings hold) to " + std::to_string(limits.max_trace_ms));
      }
      ms = n;
    }
    if (!providers.trace) return error_answer(404, "not provided by this program");
    return call(trace_endpoint, [&] { return providers.trace(std::chrono::milliseconds(ms)); },
                "application/json", trace_headers);
  }
  return error_answer(404, "endpoints: /, /metrics, /api/snapshot, /api/trace?ms=N");
}

// --- settings ----------------------------------------------------------------------------------

server_setting resolve_server_setting(const core::diagnostics_options& options,
                                      const char* environment_value) {
  server_setting s;
  std::string source;
  std::string text;
  if (!options.server_address.empty()) {
    source = "runtime_options::diagnostics.server_address";
    text = options.server_address;
  } else if (environment_value != nullptr) {
    source = "SPINDLE_DIAGNOSTICS";
    text = environment_value;
  } else {
    return s;
  }
  // Trim blanks around the value (a shell quirk, not an error).
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  text = first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (lower.empty() || lower == "0" || lower == "off" || lower == "false" || lower == "no") {
    return s;
  }
  parsed_address a;
  std::string error;
  const auto invalid = [&](const std::string& why) {
    s.what = server_setting::kind::invalid;
    s.error = "spindle: " + source + "=\"" + text + "\": " + why +
              "; expected HOST:PORT, e.g. 127.0.0.1:9100 (port 0: any free port). No "
              "diagnostics server started.";
    return s;
  };
  if (!parse_address(text, a, error)) return invalid(error);
  if (!a.loopback && !options.serve_beyond_loopback) {
    return invalid(a.host +
                   " is not a loopback address (set diagnostics_options::serve_beyond_loopback "
                   "to serve beyond this machine)");
  }
  std::uint16_t port = ntohs(a.family == AF_INET6
                                 ? reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port
                                 : reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port);
  s.what = server_setting::kind::serve;
  s.address = a.host + ":" + std::to_string(port);
  return s;
}

// --- the server --------------------------------------------------------------------------------

std::string_view server::page() noexcept { return diagnostics_page_html; }

server::server(const std::string& address, server_providers providers, server_limits limits)
    : state_(std::make_unique<state>()) {
  state& st = *state_;
  st.providers = std::move(providers);
  st.limits = limits;
  std::string error;
  if (!parse_address(address, st.bound, error)) {
    throw std::invalid_argument("spindle diagnostics server: " + address + ": " + error);
  }
  st.listen_fd = ::socket(st.bound.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (st.listen_fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  const int one = 1;
  ::setsockopt(st.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (st.bound.family == AF_INET6) {
    ::setsockopt(st.listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  }
  if (::bind(st.listen_fd, reinterpret_cast<sockaddr*>(&st.bound.storage), st.bound.length) != 0) {
    throw std::system_error(errno, std::generic_category(), "bind " + address);
  }
  if (::listen(st.listen_fd, 64) != 0) {
    throw std::system_error(errno, std::generic_category(), "listen " + address);
  }
  sockaddr_storage actual{};
  socklen_t length = sizeof actual;
  ::getsockname(st.listen_fd, reinterpret_cast<sockaddr*>(&actual), &length);
  port_ = ntohs(actual.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&actual)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&actual)->sin_port);
  bound_address_ = st.bound.host + ":" + std::to_string(port_);
  st.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (st.wake_fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");

  st.settings = parser_settings();
  thread_ = std::thread([this] { run(); });
}

server::~server() { stop(); }

void server::stop() noexcept {
  std::lock_guard guard(stop_mutex_);
  if (!thread_.joinable()) return;
  // relaxed: the eventfd write below is what wakes the thread; it re-reads the flag after poll.
  state_->stopping.store(true, std::memory_order_relaxed);
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto ignored = ::write(state_->wake_fd, &one, sizeof one);
  thread_.join();
}

server_statistics server::statistics() const noexcept {
  server_statistics s;
  // relaxed: samples.
  s.connections_accepted = state_->accepted.load(std::memory_order_relaxed);
  s.connections_refused = state_->refused.load(std::memory_order_relaxed);
  s.requests_answered = state_->answered.load(std::memory_order_relaxed);
  s.requests_rejected = state_->rejected.load(std::memory_order_relaxed);
  s.answers_over_budget = state_->over_budget.load(std::memory_order_relaxed);
  s.answer_bytes_held = state_->held_now.load(std::memory_order_relaxed);
  s.answer_bytes_held_peak = state_->held_peak.load(std::memory_order_relaxed);
  return s;
}


// --- the thread --------------------------------------------------------------------------------

void server::run() noexcept {
  state& st = *state_;
  std::vector<connection> connections;
  connections.reserve(std::size_t{st.limits.max_connections} + st.limits.max_lingering_refusals);
  std::uint32_t serving = 0;    // connections that are not refused ones
  std::uint32_t lingering = 0;  // refused connections still being drained
  std::vector<pollfd> fds;
  // After EMFILE/ENFILE the listening socket stays readable; it is left alone for a moment.
  steady::time_point accept_paused_until{};
  const std::string busy = serialise(error_answer(503, "too many connections to the diagnostics server"));

  // The answer's bytes leave the budget when the socket has taken them or the connection goes.
  const auto release_output = [&st](connection& c) {
    st.release(c.output.size());
    std::string().swap(c.output);
  };
  const auto close_connection = [&](connection& c) {
    release_output(c);
    ::close(c.fd);
    c.fd = -1;
    if (c.refused) {
      --lingering;
    } else {
      --serving;
    }
  };
  const auto respond = [&st](connection& c, const answer& a) {
    st.release(c.output.size());  // (none: one answer per connection)
    c.output = serialise(a);
    st.hold(c.output.size());
    c.written = 0;
    c.now = phase::writing;
    c.deadline = steady::now() + st.limits.response_deadline;
    // relaxed: samples.
    st.answered.fetch_add(1, std::memory_order_relaxed);
    if (a.status >= 400) st.rejected.fetch_add(1, std::memory_order_relaxed);
  };
  const auto answer_request = [&st, &respond](connection& c) {
    answer a;
    // An HTTP/1.0 request may have no Host (the parser refused an HTTP/1.1 one without).
    const int verdict = c.host_headers == 0 ? 0 : st.host_verdict(c.host);
    if (verdict == 403) {
      a = error_answer(403, "the Host header names no loopback address (DNS rebinding?)");
    } else if (verdict != 0) {
      a = error_answer(400, "the Host header is not NAME[:PORT]");
    } else {
      try {
        a = st.route(c);
      } catch (const std::exception& e) {
        a = error_answer(500, e.what());
      } catch (...) {
        a = error_answer(500, "unknown exception");
      }
    }
    respond(c, a);
  };
  // Reads what is there; answers once the request is complete or refused.
  const auto read_some = [&](connection& c) -> bool {  // false: close now
    char buffer[4096];
    c.parser.data = &c;  // connections move inside the vector
    for (;;) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (n == 0) return false;  // the client gave up before its request was complete
      const std::size_t parsed =
          http_parser_execute(&c.parser, &st.settings, buffer, static_cast<std::size_t>(n));
      const auto error = HTTP_PARSER_ERRNO(&c.parser);
      if (c.message_done) {
        answer_request(c);
        return true;
      }
      if (c.refusal != 0) {
        respond(c, error_answer(c.refusal, c.refusal_why != nullptr
                                               ? c.refusal_why
                                               : default_reason_of_refusal(c.refusal)));
        return true;
      }
      if (error != HPE_OK || parsed != static_cast<std::size_t>(n)) {
        respond(c, error_answer(400, http_errno_description(error)));
        return true;
      }
    }
  };
  const auto write_some = [&release_output](connection& c) -> bool {  // false: close now
    while (c.written < c.output.size()) {
      const ssize_t n = ::send(c.fd, c.output.data() + c.written, c.output.size() - c.written,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.written += static_cast<std::size_t>(n);
    }
    ::shutdown(c.fd, SHUT_WR);
    c.now = phase::draining;
    c.deadline = steady::now() + drain_time;
    release_output(c);
    return true;
  };
  const auto drain_some = [](connection& c) -> bool {  // false: close now
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (n == 0) return false;
      c.drained += static_cast<std::size_t>(n);
      if (c.drained > drain_bytes) return false;
    }
  };
  const auto accept_all = [&] {
    // At most a listen backlog's worth per round, so the loop also serves its connections.
    for (int round = 0; round < 64; ++round) {
      const int fd = ::accept4(st.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          accept_paused_until = steady::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      if (serving >= st.limits.max_connections) {
        // relaxed: samples.
        st.refused.fetch_add(1, std::memory_order_relaxed);
        // The whole 503 fits a fresh socket's send buffer; then our FIN.
        [[maybe_unused]] const auto ignored =
            ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(fd, SHUT_WR);
        if (lingering < st.limits.max_lingering_refusals) {
          // Its request is read and dropped until the client closes (or drain_time): closing
          // with it unread would answer with a reset, and the client could lose the 503.
          connection& c = connections.emplace_back();
          c.fd = fd;
          c.refused = true;
          c.now = phase::draining;
          c.deadline = steady::now() + drain_time;
          ++lingering;
        } else {
          // A flood: no time for it, but what has arrived is read, so the close is a FIN.
          char buffer[4096];
          for (int reads = 0; reads < 4 && ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT) > 0;
               ++reads) {
          }
          ::close(fd);
        }
        continue;
      }
      st.accepted.fetch_add(1, std::memory_order_relaxed);  // relaxed: a sample
      ++serving;
      connection& c = connections.emplace_back();
      c.fd = fd;
      c.deadline = steady::now() + st.limits.request_deadline;
      c.header_limit = st.limits.max_header_bytes;
      c.body_limit = st.limits.max_body_bytes;
      http_parser_init(&c.parser, HTTP_REQUEST);
    }
  };

  // relaxed: stop() writes the eventfd after the flag; poll wakes and this re-reads it.
  while (!st.stopping.load(std::memory_order_relaxed)) {
    const auto now = steady::now();
    // Deadlines: a request that did not arrive gets 408; an answer or a drain that did not
    // finish is cut off.
    for (connection& c : connections) {
      if (c.fd < 0 || now < c.deadline) continue;
      if (c.now == phase::reading) {
        respond(c, error_answer(408, "the request did not arrive in time"));
        c.deadline = now + std::chrono::milliseconds(100);  // one short try to tell the client
        if (!write_some(c)) close_connection(c);
        continue;
      }
      if (c.now == phase::writing) st.rejected.fetch_add(1, std::memory_order_relaxed);  // relaxed
      close_connection(c);
    }
    std::erase_if(connections, [](const connection& c) { return c.fd < 0; });

    fds.clear();
    fds.push_back({st.wake_fd, POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    fds.push_back({accepting ? st.listen_fd : -1, POLLIN, 0});
    auto next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, accept_paused_until);
    for (const connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.now == phase::writing ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - now);
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, wait.count())));
    if (ready < 0) continue;  // EINTR
    if (fds[1].revents & POLLIN) accept_all();
    for (std::size_t i = 0; i < connections.size() && i + 2 < fds.size(); ++i) {
      connection& c = connections[i];
      const short events = fds[i + 2].revents;
      if (events == 0) continue;
      bool keep = true;
      if (c.now == phase::reading) {
        keep = read_some(c);
        if (keep && c.now == phase::writing) keep = write_some(c);
      } else if (c.now == phase::writing) {
        keep = (events & (POLLERR | POLLHUP)) == 0 && write_some(c);
      } else {
        keep = drain_some(c);
      }
      if (!keep) close_connection(c);
    }
  }
  for (connection& c : connections) {
    if (c.fd >= 0) close_connection(c);
  }
  // The port is free once stop() returns (the destructor may come much later).
  ::close(st.listen_fd);
  st.listen_fd = -1;
}

}  // namespace spindle::diagnostics
