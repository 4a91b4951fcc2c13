#include "spindle/diagnostics/json_writer.hpp"

#include <cassert>
#include <charconv>
#include <cmath>

namespace spindle::diagnostics {

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

json_writer& json_writer::begin_object() {
  before_value();
  out_.push_back('{');
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_object() {
  assert(!first_.empty() && !after_key_);
  first_.pop_back();
  out_.push_back('}');
  return *this;
}

json_writer& json_writer::begin_array() {
  before_value();
  out_.push_back('[');
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_array() {
  assert(!first_.empty() && !after_key_);
  first_.pop_back();
  out_.push_back(']');
  return *this;
}

json_writer& json_writer::key(std::string_view name) {
  assert(!first_.empty() && !after_key_);
  if (!first_.back()) out_.push_back(',');
  first_.back() = false;
  append_quoted(out_, name);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

json_writer& json_writer::value(std::string_view text) {
  before_value();
  append_quoted(out_, text);
  return *this;
}

json_writer& json_writer::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  return *this;
}

json_writer& json_writer::value(std::int64_t n) {
  before_value();
  char buffer[24];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, n);
  out_.append(buffer, end);
  return *this;
}

json_writer& json_writer::value(std::uint64_t n) {
  before_value();
  char buffer[24];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, n);
  out_.append(buffer, end);
  return *this;
}

json_writer& json_writer::value(double d) {
  if (!std::isfinite(d)) return null();
  before_value();
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, d);
  out_.append(buffer, end);
  return *this;
}

json_writer& json_writer::null() {
  before_value();
  out_ += "null";
  return *this;
}

json_writer& json_writer::raw(std::string_view json) {
  before_value();
  out_.append(json);
  return *this;
}

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  std::size_t length;
  std::uint32_t lowest;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, lowest = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, lowest = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, lowest = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  std::uint32_t code = lead & (0x7f >> length);
  for (std::size_t k = 1; k < length; ++k) {
    const auto c = static_cast<unsigned char>(text[i + k]);
    if ((c & 0xc0) != 0x80) return 0;
    code = (code << 6) | (c & 0x3f);
  }
  if (code < lowest || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

}  // namespace

void json_writer::append_quoted(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (std::size_t i = 0; i < text.size(); ++i) {
    // The common case first: a run of printable ASCII that needs no escape, appended at once
    // (a snapshot writes some 10^6 strings; one push_back per byte dominated its cost).
    std::size_t run = i;
    while (run < text.size()) {
      const auto b = static_cast<unsigned char>(text[run]);
      if (b < 0x20 || b >= 0x7f || b == '"' || b == '\\') break;
      ++run;
    }
    if (run != i) {
      out.append(text.data() + i, run - i);
      i = run;
      if (i == text.size()) break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        } else if (c < 0x80) {
          out.push_back(static_cast<char>(c));
        } else if (const std::size_t length = utf8_sequence_length(text, i)) {
          out.append(text.substr(i, length));
          i += length - 1;
        } else {
          out.push_back('?');
        }
    }
  }
  out.push_back('"');
}

}  // namespace spindle::diagnostics
