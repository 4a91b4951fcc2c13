// json_writer: a streaming JSON writer into a std::string, the one every diagnostics export
// uses (the snapshot, the Chrome trace, the server's API).
//
// Usage: begin_object / key / value ... end_object; commas are placed by the writer. Strings are
// escaped per RFC 8259 (control characters as \u00XX; bytes >= 0x80 are passed through, so
// valid UTF-8 stays valid; invalid UTF-8 in names is replaced by '?', so the output always
// parses). Numbers: integers exactly; doubles with up to 17 significant digits, and
// non-finite values written as null (JSON has no NaN). The writer checks nesting only with
// assertions: it is fed by spindle's own code, never by user input directly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::diagnostics {

class json_writer {
 public:
  explicit json_writer(std::string& out) : out_(out) {}

  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  // The name of the next member (inside an object).
  json_writer& key(std::string_view name);

  json_writer& value(std::string_view text);
  json_writer& value(const char* text) { return text ? value(std::string_view(text)) : null(); }
  json_writer& value(bool b);
  json_writer& value(std::int64_t n);
  json_writer& value(std::uint64_t n);
  json_writer& value(int n) { return value(static_cast<std::int64_t>(n)); }
  json_writer& value(unsigned n) { return value(static_cast<std::uint64_t>(n)); }
  json_writer& value(long long n) { return value(static_cast<std::int64_t>(n)); }
  json_writer& value(unsigned long long n) { return value(static_cast<std::uint64_t>(n)); }
  json_writer& value(double d);
  json_writer& null();
  // Already-serialised JSON, inserted as one value (e.g. a section another writer produced).
  json_writer& raw(std::string_view json);

  // key(name).value(v) in one call.
  template <class T>
  json_writer& member(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  // Appends `text` to `out` escaped as a JSON string, quotes included.
  static void append_quoted(std::string& out, std::string_view text);

 private:
  void before_value();

  std::string& out_;
  // One entry per open object/array: true until its first element is written.
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace spindle::diagnostics
