// HTTP/1.1 keep-alive "hello" server: the http workload of ../shared/BENCH.md.
//
//   spindle-example-http_hello [port] [threads]      (default 18080, one per core)
//   spindle-example-http_hello port threads --tls cert.pem key.pem      (HTTPS)
//
// With --tls the same server speaks HTTPS (net/tls.hpp): the certificate chain and key are PEM
// files, each accepted connection first runs the TLS handshake (bounded by the request timeout:
// a client that never completes it is cut off like a slow request), and a connection the server
// ends gets close_notify before the close.
// Port 0 binds a free port; the "http_hello listening on 127.0.0.1:PORT" line on stderr names it.
// One task per connection; requests are parsed with the maintained http-parser library
// (libhttp-parser-dev), pipelined requests are answered in order, each with
// "HTTP/1.1 200 OK ... hello" (HEAD: the same header, no body). A malformed request gets
// "400 Bad Request" (after the answers to the requests before it) and the connection is closed;
// so is one after a request that does not keep the connection alive ("Connection: close",
// HTTP/1.0), without reading further requests. What this server does not speak gets "501 Not
// Implemented" (in order too) and the close: CONNECT (a 2xx would mean "tunnel established") and
// a protocol upgrade ("Connection: upgrade" with "Upgrade: websocket", "h2c", ...; an Upgrade
// header without that Connection option is ignored, as RFC 9110 7.8 allows). A version other
// than HTTP/1.x gets "505 HTTP Version Not Supported" and the close; white space in a header
// field name ("Host : x"), which the lenient Debian http-parser build takes, gets 400; so does
// the rest of what that build takes and RFC 9112 rejects (obsolete line folding, a bare LF or CR
// ending a line, chunk data not followed by CRLF, junk after a chunk size): `strict_framing`
// checks the raw bytes ahead of the parser. What http-parser 2.9.4 already rejects in any build
// (Content-Length with Transfer-Encoding, two Content-Lengths, a final coding other than chunked,
// control characters in a field) gets 400 from it. Transfer-Encoding in an HTTP/1.0 request gets
// 400 (RFC 9112 6.1: faulty framing), a coding this server does not decode before the final
// chunked ("gzip, chunked") 501. Host (RFC 9112 3.2): an HTTP/1.1 request without one, a request
// with two Host field lines or with a Host that is not uri-host [":" port] gets 400 (an HTTP/1.0
// request may leave it out). White space around a field value may be HTAB as well as SP (RFC
// 9110 5.6.3), although http-parser takes only SP after "chunked", "close" or a Content-Length.
// Bounded waiting (slowloris): a request must arrive completely within `request_timeout` of the
// read that brought its first byte, and a keep-alive connection is closed when no request begins
// within `idle_timeout` of the last answer (or of the accept); bytes that begin no request (empty
// lines) do not extend it. A watchdog task per connection shuts the socket down when the deadline
// passes. Both limits can be set in milliseconds through the environment:
//   SPINDLE_HTTP_REQUEST_TIMEOUT_MS (default 10000), SPINDLE_HTTP_IDLE_TIMEOUT_MS (default 60000);
// each from 1 ms to a day (86400000): another value is refused at start (exit status 2).
// SIGINT/SIGTERM stop the server gracefully: no new connections, the runtime then cancels the
// open ones. accept() keeps serving after the process runs out of file descriptors (the net
// module waits and retries). The I/O backend follows SPINDLE_IO_BACKEND=uring|epoll.
// tests/examples/http_hello_test.cpp drives this program as a process.
#include <http_parser.h>
#include <signal.h>
#include <sys/socket.h>

#include <spindle/io/signals.hpp>
#include <spindle/net/net.hpp>
#include <spindle/net/tls.hpp>
#include <spindle/spindle.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

namespace {

using namespace std::chrono_literals;

constexpr std::string_view hello_response =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
// The answer to HEAD: the same header, no body (RFC 9110, 9.3.2).
constexpr std::string_view hello_head_response = hello_response.substr(0, hello_response.size() - 5);
constexpr std::string_view bad_request_response =
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
constexpr std::string_view version_not_supported_response =
    "HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
constexpr std::string_view not_implemented_response =
    "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

struct timeouts {
  spindle::clock_duration request_timeout = 10s;
  spindle::clock_duration idle_timeout = 60s;
};

// What a chunk of bytes did to the connection.
enum class parse_result {
  more,       // every byte parsed; the connection stays open
  closing,    // a request that does not keep the connection alive was completed: answer, close
  malformed,  // a parse error: 400, close
  refused,    // CONNECT or an upgrade, which this server does not speak: 501, close
  unsupported_version,  // an HTTP major version other than 1: 505, close
};

// RFC 9112 framing checks that the non-strict http-parser build (Debian's, not
// HTTP_PARSER_STRICT; strictness is a compile-time switch, there is none at run time) leaves out,
// made on the raw bytes of a connection ahead of the parser, one pass, whatever the reads' sizes:
//   - every line of a header section (request line, field lines, the empty line) and of a chunked
//     body (chunk-size lines, the CRLF after chunk data, the trailer section) ends in CRLF. A bare
//     LF is refused although RFC 9112 2.2 lets a recipient take it as a line end: http-parser
//     would, a proxy in front of this server may not, and two parsers that split the same bytes
//     into different lines see different headers and framing (request smuggling); a conforming
//     client never sends one (2.2: "MUST NOT generate"). A bare CR is refused (2.2 allows that or
//     reading it as SP; the non-strict parser took the byte after any CR as the LF).
//   - no field line begins with SP or HTAB: obsolete line folding, which a server may reject with
//     400 (5.2), and white space before the first field line (2.2: reject or consume).
//   - a chunk size (hex digits) is followed only by optional white space and ";" extensions
//     (visible characters, SP, HTAB), then CRLF; chunk data is followed by CRLF (7.1). The
//     non-strict parser takes any two bytes after the data and ignores anything after "size ".
// The checks are a strict subset of what the parser accepts and frame messages as it does, so
// both agree where every message ends. One thing is rewritten, not checked: HTAB in a field line
// (header or trailer section) becomes SP before the parser sees it. OWS is SP or HTAB (RFC 9110
// 5.6.3) and HTAB is white space anywhere in a field value (5.5), but http-parser 2.9.4 takes only
// SP after a Content-Length's digits, after "chunked" and after a Connection option, so
// "Content-Length: 3<HTAB>" got 400 and "Connection: close<HTAB>" kept the connection open. In a
// field name HTAB stays an error: as SP it is refused by on_header_field. The request line keeps
// its bytes (SP is its only separator, RFC 9112 3). The one thing read from the parser is a
// body's framing, known only once it has parsed the header section: scan() stops just past the
// header section's end, the caller feeds the parser up to there and hands the framing over
// (begin_body()).
// Everything else (tokens, versions, Content-Length values, control characters in fields) is
// the parser's.
class strict_framing {
 public:
  enum class stop {
    end_of_input,        // every byte given passes
    header_section_end,  // the bytes up to and including the end of a header section pass
    invalid,             // the byte at `length` is one RFC 9112 rejects
  };
  struct scan_result {
    std::size_t length;  // bytes that pass
    stop reason;
  };

  scan_result scan(char* data, std::size_t size) {
    std::size_t i = 0;
    while (i < size) {
      const char c = data[i];
      switch (state_) {
        case state::between:  // empty lines (CRLF) before a request line are skipped (2.2)
          if (c == '\r') {
            state_ = state::between_lf;
            ++i;
          } else if (c == '\n') {
            return {i, stop::invalid};
          } else {
            state_ = state::in_request_line;  // the parser checks what it holds
          }
          break;
        case state::between_lf:
          if (c != '\n') return {i, stop::invalid};
          state_ = state::between;
          ++i;
          break;
        case state::in_request_line:  // up to its CR
          while (i < size && data[i] != '\r' && data[i] != '\n') ++i;
          if (i == size) break;
          if (data[i] == '\n') return {i, stop::invalid};
          state_ = state::line_lf;
          ++i;
          break;
        case state::in_field_line:  // up to its CR; HTAB becomes SP (see above)
          for (; i < size && data[i] != '\r' && data[i] != '\n'; ++i) {
            if (data[i] == '\t') data[i] = ' ';
          }
          if (i == size) break;
          if (data[i] == '\n') return {i, stop::invalid};
          state_ = state::line_lf;
          ++i;
          break;
        case state::line_lf:
          if (c != '\n') return {i, stop::invalid};
          state_ = state::line_start;
          ++i;
          break;
        case state::line_start:  // a field line, or the empty line ending the section
          if (c == '\r') {
            state_ = state::section_end_lf;
            ++i;
          } else if (c == '\n' || c == ' ' || c == '\t') {
            return {i, stop::invalid};
          } else {
            state_ = state::in_field_line;
          }
          break;
        case state::section_end_lf:
          if (c != '\n') return {i, stop::invalid};
          ++i;
          if (in_trailers_) {  // the end of a chunked message
            in_trailers_ = false;
            state_ = state::between;
            break;
          }
          state_ = state::awaiting_framing;
          return {i, stop::header_section_end};
        case state::awaiting_framing:
          // begin_body() was not called: a caller's mistake. Nothing passes.
          return {i, stop::invalid};
        case state::body: {
          const std::size_t take = std::size_t(std::min<std::uint64_t>(remaining_, size - i));
          i += take;
          remaining_ -= take;
          if (remaining_ == 0) state_ = state::between;
          break;
        }
        case state::chunk_size_start:
          if (hex_value(c) < 0) return {i, stop::invalid};
          state_ = state::chunk_size;
          break;
        case state::chunk_size:
          if (const int digit = hex_value(c); digit >= 0) {
            // A size that overflows 64 bits is refused (as the parser does).
            if (remaining_ > (std::numeric_limits<std::uint64_t>::max() >> 4)) {
              return {i, stop::invalid};
            }
            remaining_ = remaining_ * 16 + std::uint64_t(digit);
          } else if (c == '\r') {
            state_ = state::chunk_size_lf;
          } else if (c == ' ' || c == '\t') {
            state_ = state::chunk_size_space;
          } else if (c == ';') {
            state_ = state::chunk_extension;
          } else {
            return {i, stop::invalid};
          }
          ++i;
          break;
        case state::chunk_size_space:  // BWS: only before a ";" (7.1.1)
          if (c == ';') {
            state_ = state::chunk_extension;
          } else if (c != ' ' && c != '\t') {
            return {i, stop::invalid};
          }
          ++i;
          break;
        case state::chunk_extension:  // ignored, but no control character other than HTAB
          if (c == '\r') {
            state_ = state::chunk_size_lf;
          } else if (is_control(c)) {
            return {i, stop::invalid};
          }
          ++i;
          break;
        case state::chunk_size_lf:
          if (c != '\n') return {i, stop::invalid};
          ++i;
          if (remaining_ == 0) {  // the last chunk: a trailer section follows
            in_trailers_ = true;
            state_ = state::line_start;
          } else {
            state_ = state::chunk_data;
          }
          break;
        case state::chunk_data: {
          const std::size_t take = std::size_t(std::min<std::uint64_t>(remaining_, size - i));
          i += take;
          remaining_ -= take;
          if (remaining_ == 0) state_ = state::chunk_data_cr;
          break;
        }
        case state::chunk_data_cr:
          if (c != '\r') return {i, stop::invalid};
          state_ = state::chunk_data_lf;
          ++i;
          break;
        case state::chunk_data_lf:
          if (c != '\n') return {i, stop::invalid};
          state_ = state::chunk_size_start;
          ++i;
          break;
      }
    }
    return {i, stop::end_of_input};
  }

  // After stop::header_section_end: the body's framing as the parser read the header section
  // (chunked, else `length` bytes, 0 for none).
  void begin_body(bool chunked, std::uint64_t length) {
    remaining_ = chunked ? 0 : length;
    state_ = chunked ? state::chunk_size_start : length > 0 ? state::body : state::between;
  }

 private:
  enum class state : unsigned char {
    between,           // before a request line
    between_lf,        // an empty line's CR seen: its LF must follow
    in_request_line,   // in the request line
    in_field_line,     // in a field line
    line_lf,           // a line's CR seen: its LF must follow
    line_start,        // at the start of a field line or of the section's empty line
    section_end_lf,    // the empty line's CR seen: its LF must follow
    awaiting_framing,  // past a header section, until begin_body()
    body,              // in a Content-Length body: `remaining_` bytes left
    chunk_size_start,  // at a chunk-size line: a hex digit must come
    chunk_size,        // in the chunk size (`remaining_` so far)
    chunk_size_space,  // white space after the chunk size
    chunk_extension,   // after a ";": up to the CR
    chunk_size_lf,     // the chunk-size line's CR seen: its LF must follow
    chunk_data,        // `remaining_` bytes of chunk data left
    chunk_data_cr,     // after chunk data: CR must come
    chunk_data_lf,     // ... then LF
  };

  static int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static bool is_control(char c) noexcept {
    const auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && byte != '\t') || byte == 0x7f;
  }

  state state_ = state::between;
  bool in_trailers_ = false;   // the header section being scanned is a chunked body's trailers
  std::uint64_t remaining_ = 0;  // body or chunk data bytes left; the chunk size being read
};

// Parser state of one connection: counts begun requests and collects the answers to the completed
// ones, in order.
struct request_parser {
  http_parser parser{};
  std::size_t begun = 0;  // requests whose first byte was parsed
  std::string answers;    // to the requests completed since the last write
  bool close_after = false;
  bool in_message = false;
  // The current request is CONNECT, an upgrade, or has a transfer coding other than chunked:
  // parsing stopped.
  bool refused = false;
  bool unsupported_version = false;  // the current request is not HTTP/1.x: parsing stopped
  strict_framing framing;
  // The current request's body framing, as on_headers_complete found it.
  bool body_chunked = false;
  std::uint64_t body_length = 0;
  // The current request's Transfer-Encoding field values, comma-joined (cut at
  // max_transfer_codings_size), for on_headers_complete. A field name arrives in pieces: how
  // much of "transfer-encoding" the current one has matched (-1: it is another name).
  static constexpr std::string_view transfer_encoding_name = "transfer-encoding";
  static constexpr std::size_t max_transfer_codings_size = 256;
  std::string transfer_codings;
  bool transfer_codings_cut = false;  // longer than that: 501
  int transfer_encoding_matched = 0;
  bool in_field_value = false;  // the last field callback was on_header_value
  // The current request's Host field lines, counted as each field ends (finish_field), and their
  // values (cut at max_host_size: a longer one is refused), for on_headers_complete.
  static constexpr std::string_view host_name = "host";
  static constexpr std::size_t max_host_size = 1024;
  int host_matched = 0;  // as transfer_encoding_matched, for "host"
  int host_count = 0;
  std::string host_value;
  bool host_value_cut = false;

  // Matches a piece of a field name against `name` (lower case), continuing from `matched`.
  static void match_name(int& matched, std::string_view name, std::string_view piece) {
    for (const char c : piece) {
      if (matched < 0) return;
      if (std::size_t(matched) < name.size() && (c | 0x20) == name[std::size_t(matched)]) {
        ++matched;
      } else {
        matched = -1;
      }
    }
  }
  // The current field (name and value) ended: count it if it was a Host.
  void finish_field() {
    if (host_matched == int(host_name.size())) ++host_count;
    host_matched = 0;
    transfer_encoding_matched = 0;
  }

  // RFC 3986 unreserved and sub-delims: the characters of a reg-name besides percent-encoding.
  static bool is_name_character(char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return std::string_view("-._~!$&'()*+,;=").find(c) != std::string_view::npos;
  }
  static bool is_hex_digit(char c) {
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
  }
  // True if `value` (OWS around it aside) is uri-host [":" port] (RFC 9112 3.2, RFC 3986 3.2.2):
  // a reg-name (which takes in IPv4 addresses; empty for a target without an authority) or an IP
  // literal in brackets, then optionally ":" and digits. An IP literal is checked for its
  // characters (hex digits, ":" and "." for IPv6; "v" HEXDIG "." and name characters or ":" for
  // IPvFuture), not for the full IPv6 grammar.
  static bool valid_host(std::string_view value) {
    const std::size_t first = value.find_first_not_of(' ');  // HTAB arrives as SP
    value = first == std::string_view::npos
                ? std::string_view()
                : value.substr(first, value.find_last_not_of(' ') + 1 - first);
    std::string_view port;
    if (value.starts_with('[')) {
      const std::size_t close = value.find(']');
      if (close == std::string_view::npos) return false;
      const std::string_view literal = value.substr(1, close - 1);
      const std::string_view after = value.substr(close + 1);
      if (!after.empty() && after.front() != ':') return false;
      if (!after.empty()) port = after.substr(1);
      if (literal.starts_with('v') || literal.starts_with('V')) {  // IPvFuture
        const std::size_t dot = literal.find('.');
        if (dot == std::string_view::npos || dot < 2 || dot + 1 == literal.size()) return false;
        const std::string_view version = literal.substr(1, dot - 1);
        if (!std::all_of(version.begin(), version.end(), is_hex_digit)) return false;
        if (!std::all_of(literal.begin() + std::ptrdiff_t(dot) + 1, literal.end(),
                         [](char c) { return is_name_character(c) || c == ':'; })) {
          return false;
        }
      } else {  // IPv6address
        if (literal.find(':') == std::string_view::npos) return false;
        if (!std::all_of(literal.begin(), literal.end(),
                         [](char c) { return is_hex_digit(c) || c == ':' || c == '.'; })) {
          return false;
        }
      }
    } else {
      const std::size_t colon = value.find(':');
      if (colon != std::string_view::npos) port = value.substr(colon + 1);
      const std::string_view name = value.substr(0, colon);
      for (std::size_t i = 0; i < name.size(); ++i) {
        if (name[i] == '%') {  // pct-encoded: "%" HEXDIG HEXDIG
          if (i + 2 >= name.size() || !is_hex_digit(name[i + 1]) || !is_hex_digit(name[i + 2])) {
            return false;
          }
          i += 2;
        } else if (!is_name_character(name[i])) {
          return false;
        }
      }
    }
    return std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  }

  // True if `codings` (a comma-separated list, as in Transfer-Encoding) is "chunked" alone, in any
  // case, white space and empty list elements aside. `chunked_count` says how often it appears.
  static bool only_chunked(std::string_view codings, int& chunked_count) {
    chunked_count = 0;
    bool others = false;
    while (!codings.empty()) {
      const std::size_t comma = std::min(codings.find(','), codings.size());
      std::string_view element = codings.substr(0, comma);
      codings.remove_prefix(std::min(comma + 1, codings.size()));
      const std::size_t first = element.find_first_not_of(" \t");
      if (first == std::string_view::npos) continue;  // an empty list element
      element = element.substr(first, element.find_last_not_of(" \t") + 1 - first);
      constexpr std::string_view chunked = "chunked";
      const bool is_chunked =
          element.size() == chunked.size() &&
          std::equal(element.begin(), element.end(), chunked.begin(),
                     [](char a, char b) { return (a | 0x20) == b; });  // ASCII letters only
      if (is_chunked) {
        ++chunked_count;
      } else {
        others = true;
      }
    }
    return !others;
  }

  request_parser() {
    http_parser_init(&parser, HTTP_REQUEST);
    parser.data = this;
  }
  static const http_parser_settings& settings() {
    static const http_parser_settings table = [] {
      http_parser_settings s{};
      s.on_message_begin = [](http_parser* p) {
        auto* self = static_cast<request_parser*>(p->data);
        ++self->begun;
        self->in_message = true;
        self->transfer_codings.clear();
        self->transfer_codings_cut = false;
        self->host_count = 0;
        self->host_value.clear();
        self->host_value_cut = false;
        self->finish_field();         // (clears the name matching)
        self->in_field_value = true;  // the first field name begins a new field
        return 0;
      };
      // http-parser sets `upgrade` before this callback for CONNECT and for "Connection:
      // upgrade" with an Upgrade header; it would then hand the bytes after the header (or
      // body) over as the new protocol's. Stopped here instead (a nonzero return other than 1
      // or 2 is an error: parsing ends at this request).
      // The Debian build of http-parser is not HTTP_PARSER_STRICT: it takes white space into a
      // header field name ("Host : x"), which RFC 9112 5.1 says a server MUST reject with 400.
      // A field name arrives in pieces, but white space in any piece is an error.
      // The name is also matched against "transfer-encoding" and "host", piece by piece.
      s.on_header_field = [](http_parser* p, const char* at, std::size_t length) {
        const std::string_view piece(at, length);
        if (piece.find_first_of(" \t") != std::string_view::npos) return -1;
        auto* self = static_cast<request_parser*>(p->data);
        if (self->in_field_value) {  // a new field: the one before it ended
          self->in_field_value = false;
          self->finish_field();
        }
        match_name(self->transfer_encoding_matched, transfer_encoding_name, piece);
        match_name(self->host_matched, host_name, piece);
        return 0;
      };
      // Collects the Transfer-Encoding values (several field lines make one list, RFC 9110 5.3)
      // and the Host value.
      s.on_header_value = [](http_parser* p, const char* at, std::size_t length) {
        auto* self = static_cast<request_parser*>(p->data);
        const bool new_value = !self->in_field_value;
        self->in_field_value = true;
        if (self->host_matched == int(host_name.size())) {
          if (self->host_value.size() + length > max_host_size) {
            self->host_value_cut = true;
          } else {
            self->host_value.append(at, length);
          }
          return 0;
        }
        if (self->transfer_encoding_matched != int(transfer_encoding_name.size())) return 0;
        std::string& codings = self->transfer_codings;
        if (new_value && !codings.empty()) codings.push_back(',');
        if (codings.size() + length > max_transfer_codings_size) {
          self->transfer_codings_cut = true;
          return 0;
        }
        codings.append(at, length);
        return 0;
      };
      s.on_headers_complete = [](http_parser* p) {
        // HTTP/9.9 parses too: only HTTP/1.x is spoken here (RFC 9110 15.6.6).
        if (p->http_major != 1) {
          static_cast<request_parser*>(p->data)->unsupported_version = true;
          return -1;
        }
        auto* self = static_cast<request_parser*>(p->data);
        self->finish_field();  // the last field line
        self->in_field_value = true;  // a trailer section's first name begins a new field
        // RFC 9112 3.2: 400 for an HTTP/1.1 request without Host, for any request with more than
        // one Host field line or with an invalid Host value.
        const bool host_valid = self->host_count == 1
                                    ? !self->host_value_cut && valid_host(self->host_value)
                                    : self->host_count == 0 && p->http_minor == 0;
        if (!host_valid) return -1;
        if (p->upgrade == 0 && p->uses_transfer_encoding) {
          // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing: 400.
          if (p->http_minor == 0) return -1;
          // The parser checks only that the final coding is chunked: it refuses the request after
          // this callback otherwise (400, as RFC 9112 6.3 says). Another coding before a final
          // chunked ("gzip, chunked") this server does not decode: 501 (6.1: SHOULD). Chunked
          // twice (6.1: MUST NOT): 400.
          if ((p->flags & F_CHUNKED) != 0) {
            int chunked_count = 0;
            if (self->transfer_codings_cut ||
                !only_chunked(self->transfer_codings, chunked_count)) {
              self->refused = true;
              return -1;
            }
            if (chunked_count > 1) return -1;
          }
        }
        if (p->upgrade == 0) {
          // For strict_framing: no Content-Length reads as all ones. (Content-Length with
          // Transfer-Encoding the parser refuses before this callback, a Transfer-Encoding whose
          // final coding is not chunked after it: no body follows either.)
          self->body_chunked = (p->flags & F_CHUNKED) != 0;
          self->body_length =
              p->content_length == std::numeric_limits<std::uint64_t>::max() ? 0 : p->content_length;
          return 0;
        }
        self->refused = true;
        return -1;
      };
      s.on_message_complete = [](http_parser* p) {
        auto* self = static_cast<request_parser*>(p->data);
        self->answers.append(p->method == HTTP_HEAD ? hello_head_response : hello_response);
        self->in_message = false;
        if (!http_should_keep_alive(p)) {
          self->close_after = true;
          return 1;  // stop here: whatever follows is not read (RFC 9112, 9.6)
        }
        return 0;
      };
      return s;
    }();
    return table;
  }
  // The parser sees the bytes strict_framing passed, up to the end of a header section at a time
  // (the body's framing comes from the parser), and none past a byte it rejects: the requests
  // before that byte are answered, the one holding it never completes.
  // strict_framing may rewrite bytes of `data` (HTAB to SP in field lines).
  parse_result feed(char* data, std::size_t size) {
    while (size > 0) {
      const strict_framing::scan_result scanned = framing.scan(data, size);
      // (never 0 bytes: that would tell http-parser the stream ended)
      if (scanned.length > 0) {
        const std::size_t parsed = http_parser_execute(&parser, &settings(), data, scanned.length);
        if (close_after) return parse_result::closing;
        if (refused) return parse_result::refused;
        if (unsupported_version) return parse_result::unsupported_version;
        if (HTTP_PARSER_ERRNO(&parser) != HPE_OK || parsed != scanned.length) {
          return parse_result::malformed;
        }
      }
      if (scanned.reason == strict_framing::stop::invalid) return parse_result::malformed;
      if (scanned.reason == strict_framing::stop::header_section_end) {
        framing.begin_body(body_chunked, body_length);
      }
      data += scanned.length;
      size -= scanned.length;
    }
    return parse_result::more;
  }
};

// Shuts the connection down once `deadline` passes without being pushed back. The deadline is
// written by the connection task, which may run on another executor: hence the atomic.
// The deadline moves later (an answer: now + idle_timeout) or earlier (a request begins: now +
// request_timeout, often well before the idle deadline the watchdog is sleeping to). Rather than
// be woken, the watchdog never sleeps longer than `request_timeout` at a time and re-reads the
// deadline when it wakes: a request begun at t has the deadline t + request_timeout, and the
// watchdog's sleep that spans t (begun at w <= t) ends by w + request_timeout <= t +
// request_timeout, so the deadline is seen in time (one request_timeout later at worst, if the
// store was not yet visible at that wake). Cost: an idle connection's watchdog wakes once per
// request_timeout, not once per idle_timeout.
template <class Stream>
spindle::task<void> watchdog(const Stream& stream,
                             const std::atomic<spindle::clock_time>& deadline,
                             spindle::clock_duration request_timeout) {
  for (;;) {
    // relaxed: the deadline is a lone value, nothing else is published with it
    const spindle::clock_time current = deadline.load(std::memory_order_relaxed);
    const spindle::clock_time now = spindle::now();
    if (now >= current) {
      // The pending read returns 0 (a pending write fails): the connection task ends. A failure
      // (a peer that reset the connection already) changes nothing.
      ::shutdown(stream.native_handle(), SHUT_RDWR);
      co_return;
    }
    co_await spindle::sleep_until(std::min(current, now + request_timeout));
  }
}

// Ends a connection: TLS first sends close_notify (a failure there changes nothing: the peer may
// be gone), then the socket is closed.
spindle::task<void> end_connection(spindle::net::tcp_stream& stream) { co_await stream.close(); }
spindle::task<void> end_connection(spindle::net::tls_stream& stream) {
  try {
    co_await stream.shutdown(spindle::io::deadline::after(1s));
  } catch (const std::exception&) {
  }
  co_await stream.close();
}

// One connection over a tcp_stream or a tls_stream (the same calls).
template <class Stream>
spindle::task<void> serve(Stream stream, timeouts limits) {
  request_parser requests;
  std::atomic<spindle::clock_time> deadline{spindle::now() + limits.idle_timeout};
  auto guard = spindle::spawn(watchdog(stream, deadline, limits.request_timeout));
  std::array<std::byte, 8192> buffer;
  std::string out;
  try {
    if constexpr (std::is_same_v<Stream, spindle::net::tcp_stream>) stream.set_no_delay(true);
    for (;;) {
      const std::size_t n = co_await stream.read(buffer);
      if (n == 0) break;
      const std::size_t begun_before = requests.begun;
      const parse_result result = requests.feed(reinterpret_cast<char*>(buffer.data()), n);
      // In order: the requests completed before a malformed one are answered first.
      const bool answered = !requests.answers.empty();
      out.swap(requests.answers);
      requests.answers.clear();
      if (result == parse_result::malformed) out.append(bad_request_response);
      if (result == parse_result::refused) out.append(not_implemented_response);
      if (result == parse_result::unsupported_version) out.append(version_not_supported_response);
      if (!out.empty()) co_await stream.write_all(out);
      if (result != parse_result::more) break;
      // A request in progress must be complete within request_timeout of the read that brought
      // its first byte (later bytes do not push that back); otherwise the idle limit runs from
      // the last answer. Bytes that begin no request (empty lines) change nothing.
      if (requests.in_message) {
        if (requests.begun != begun_before) {
          deadline.store(spindle::now() + limits.request_timeout, std::memory_order_relaxed);
        }
      } else if (answered) {
        deadline.store(spindle::now() + limits.idle_timeout, std::memory_order_relaxed);
      }
    }
  } catch (const std::system_error&) {
    // reset by the peer, broken pipe: the connection is over
  }
  guard.cancel();
  try {
    co_await std::move(guard);
  } catch (const spindle::task_cancelled&) {
  }
  co_await end_connection(stream);
}

// HTTPS: the handshake (within the request timeout), then the same service.
spindle::task<void> serve_tls(spindle::net::tcp_stream connection, spindle::net::tls_context context,
                              timeouts limits) {
  connection.set_no_delay(true);
  std::optional<spindle::net::tls_stream> stream;
  try {
    stream.emplace(co_await spindle::net::tls_stream::accept(
        context, std::move(connection), spindle::io::deadline::after(limits.request_timeout)));
  } catch (const std::exception&) {
    co_return;  // not TLS, a failed or too slow handshake: the socket was closed with its frame
  }
  co_await serve(std::move(*stream), limits);
}

spindle::task<void> accept_loop(spindle::net::tcp_listener& listener, timeouts limits,
                                std::optional<spindle::net::tls_context> tls) {
  for (;;) {
    spindle::net::tcp_stream connection = co_await listener.accept();
    if (tls) {
      spindle::spawn(serve_tls(std::move(connection), *tls, limits)).detach();
    } else {
      spindle::spawn(serve(std::move(connection), limits)).detach();
    }
  }
}

spindle::task<int> run_server(std::uint16_t port, timeouts limits,
                              std::optional<spindle::net::tls_context> tls) {
  spindle::io::signal_set stop_signals({SIGINT, SIGTERM});
  auto listener = spindle::net::tcp_listener::bind(spindle::net::endpoint::loopback_v4(port));
  std::fprintf(stderr, "http_hello listening on %s\n", listener.local_endpoint().to_string().c_str());
  auto acceptor = spindle::spawn(accept_loop(listener, limits, std::move(tls)));
  const int signal_number = co_await stop_signals.wait();
  std::fprintf(stderr, "http_hello: signal %d, stopping\n", signal_number);
  acceptor.cancel();
  try {
    co_await std::move(acceptor);
  } catch (const spindle::task_cancelled&) {
  }
  co_await listener.close();
  co_return 0;
}

// The largest limit accepted from the environment: a day. Larger values are a configuration
// mistake, and the deadlines (now() + limit, nanoseconds) must not overflow: 9223372036854775807
// ms once wrapped into a deadline in the past and the server answered nothing.
constexpr long long max_timeout_ms = 24LL * 60 * 60 * 1000;

// Sets `value` from the environment variable `name` (milliseconds) if it is set; false (after a
// message) if it is not a number of milliseconds from 1 to max_timeout_ms.
bool timeout_from_env(const char* name, spindle::clock_duration& value) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  char* end = nullptr;
  errno = 0;
  const long long ms = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || ms <= 0 || ms > max_timeout_ms) {
    std::fprintf(stderr, "http_hello: %s=%s is not a number of milliseconds from 1 to %lld (a day)\n",
                 name, text, max_timeout_ms);
    return false;
  }
  value = std::chrono::milliseconds(ms);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::atoi(argv[1]) : 18080;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  const bool any_port = argc > 1 && std::string_view(argv[1]) == "0";
  const bool with_tls = argc == 6 && std::string_view(argv[3]) == "--tls";
  if ((port <= 0 && !any_port) || port > 65535 || threads < 0 || (argc > 3 && !with_tls)) {
    std::fprintf(stderr, "usage: %s [port] [threads] [--tls cert.pem key.pem]\n", argv[0]);
    return 2;
  }
  std::optional<spindle::net::tls_context> tls;
  if (with_tls) {
    try {
      tls = spindle::net::tls_context::server();
      tls->use_certificate_chain_file(argv[4]);
      tls->use_private_key_file(argv[5]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "http_hello: %s\n", e.what());
      return 2;
    }
  }
  timeouts limits;
  if (!timeout_from_env("SPINDLE_HTTP_REQUEST_TIMEOUT_MS", limits.request_timeout) ||
      !timeout_from_env("SPINDLE_HTTP_IDLE_TIMEOUT_MS", limits.idle_timeout)) {
    return 2;
  }
  // Before any thread exists, so every worker inherits the mask and the signals reach the
  // signalfd instead of killing the process.
  spindle::io::block_signals({SIGINT, SIGTERM});
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  return rt.block_on(run_server(std::uint16_t(port), limits, std::move(tls)));
}
