// Prometheus text exposition: the design is in include/spindle/diagnostics/prometheus.hpp.
#include "spindle/diagnostics/prometheus.hpp"

#include <charconv>
#include <cmath>
#include <unordered_map>
#include <vector>

namespace spindle::diagnostics {

namespace {

bool name_character(char c, bool first) noexcept {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
  return letter || (!first && c >= '0' && c <= '9');
}

// A label name: as a metric name, without ':'.
void append_label_name(std::string& out, std::string_view name) {
  if (name.empty()) {
    out += '_';
    return;
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    out += (name_character(c, i == 0) && c != ':') ? c : '_';
  }
}

constexpr double nanoseconds_per_second = 1e9;

}  // namespace

std::string_view metric_type_name(metric_type type) noexcept {
  switch (type) {
    case metric_type::counter: return "counter";
    case metric_type::gauge: return "gauge";
    case metric_type::histogram: return "histogram";
    case metric_type::summary: return "summary";
    case metric_type::untyped: break;
  }
  return "untyped";
}

void append_metric_name(std::string& out, std::string_view name) {
  if (name.empty()) {
    out += '_';
    return;
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    out += name_character(name[i], i == 0) ? name[i] : '_';
  }
}

void append_escaped_label_value(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
}

void append_escaped_help(std::string& out, std::string_view help) {
  for (char c : help) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
}

void append_sample_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
    return;
  }
  if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buffer[64];
  // Shortest form that reads back to the same double (Go's ParseFloat reads it).
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

void append_sample_value(std::string& out, std::uint64_t value) {
  char buffer[24];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

prometheus_writer& prometheus_writer::family(std::string_view name, metric_type type,
                                             std::string_view help) {
  out_ += "# HELP ";
  append_metric_name(out_, name);
  out_ += ' ';
  append_escaped_help(out_, help);
  out_ += "\n# TYPE ";
  append_metric_name(out_, name);
  out_ += ' ';
  out_ += metric_type_name(type);
  out_ += '\n';
  return *this;
}

void prometheus_writer::write_name_and_labels(std::string_view name,
                                              std::span<const metric_label> labels,
                                              std::string_view extra_name,
                                              std::string_view extra_value) {
  append_metric_name(out_, name);
  if (labels.empty() && extra_name.empty()) return;
  out_ += '{';
  bool first = true;
  auto one = [&](std::string_view label_name, std::string_view value) {
    if (!first) out_ += ',';
    first = false;
    append_label_name(out_, label_name);
    out_ += "=\"";
    append_escaped_label_value(out_, value);
    out_ += '"';
  };
  for (const metric_label& label : labels) one(label.name, label.value);
  if (!extra_name.empty()) one(extra_name, extra_value);
  out_ += '}';
}

prometheus_writer& prometheus_writer::sample(std::string_view name,
                                             std::span<const metric_label> labels, double value) {
  write_name_and_labels(name, labels);
  out_ += ' ';
  append_sample_value(out_, value);
  out_ += '\n';
  return *this;
}

prometheus_writer& prometheus_writer::sample(std::string_view name,
                                             std::span<const metric_label> labels,
                                             std::uint64_t value) {
  write_name_and_labels(name, labels);
  out_ += ' ';
  append_sample_value(out_, value);
  out_ += '\n';
  return *this;
}

prometheus_writer& prometheus_writer::histogram_seconds(std::string_view name,
                                                        std::span<const metric_label> labels,
                                                        const core::histogram_snapshot& snapshot) {
  const std::string bucket_name = std::string(name) + "_bucket";
  // One pass over the fine buckets, emitting the cumulative count at each power of two.
  std::uint64_t cumulative = 0;
  std::size_t index = 0;
  std::string bound_text;
  for (unsigned power = lowest_power_of_two; power <= highest_power_of_two; ++power) {
    const std::uint64_t bound = std::uint64_t(1) << power;
    while (index < core::histogram_snapshot::bucket_count &&
           core::histogram_snapshot::upper_bound(index) <= bound) {
      cumulative += snapshot.buckets[index++];
    }
    bound_text.clear();
    append_sample_value(bound_text, double(bound) / nanoseconds_per_second);
    write_name_and_labels(bucket_name, labels, "le", bound_text);
    out_ += ' ';
    append_sample_value(out_, cumulative);
    out_ += '\n';
  }
  while (index < core::histogram_snapshot::bucket_count) cumulative += snapshot.buckets[index++];
  write_name_and_labels(bucket_name, labels, "le", "+Inf");
  out_ += ' ';
  append_sample_value(out_, cumulative);
  out_ += '\n';
  sample(std::string(name) + "_sum", labels, double(snapshot.sum_ns) / nanoseconds_per_second);
  sample(std::string(name) + "_count", labels, cumulative);
  return *this;
}

prometheus_writer& prometheus_writer::summary_seconds(std::string_view name,
                                                      std::span<const metric_label> labels,
                                                      const core::histogram_snapshot& snapshot) {
  static constexpr std::pair<double, std::string_view> quantiles[] = {
      {0.5, "0.5"}, {0.9, "0.9"}, {0.99, "0.99"}, {0.999, "0.999"}};
  for (const auto& [q, text] : quantiles) {
    write_name_and_labels(name, labels, "quantile", text);
    out_ += ' ';
    append_sample_value(out_, double(snapshot.quantile(q)) / nanoseconds_per_second);
    out_ += '\n';
  }
  sample(std::string(name) + "_sum", labels, double(snapshot.sum_ns) / nanoseconds_per_second);
  sample(std::string(name) + "_count", labels, snapshot.count());
  return *this;
}

std::string regroup_families(std::string_view exposition) {
  struct family_lines {
    std::string name;
    std::string help_line;  // whole line, with its '\n'; empty if none
    std::string type_line;
    std::string type;
    std::string samples;
  };
  std::vector<family_lines> families;
  std::unordered_map<std::string, std::size_t> by_name;
  auto family_of = [&](std::string_view name) -> family_lines& {
    auto [it, inserted] = by_name.try_emplace(std::string(name), families.size());
    if (inserted) families.push_back(family_lines{std::string(name), {}, {}, {}, {}});
    return families[it->second];
  };
  auto find_family = [&](std::string_view sample_name) -> family_lines& {
    if (auto it = by_name.find(std::string(sample_name)); it != by_name.end()) {
      return families[it->second];
    }
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (sample_name.size() > suffix.size() && sample_name.ends_with(suffix)) {
        const std::string_view base = sample_name.substr(0, sample_name.size() - suffix.size());
        auto it = by_name.find(std::string(base));
        if (it == by_name.end()) continue;
        family_lines& f = families[it->second];
        if (f.type == "histogram" || (f.type == "summary" && suffix != "_bucket")) return f;
      }
    }
    return family_of(sample_name);
  };

  std::size_t position = 0;
  while (position < exposition.size()) {
    std::size_t end = exposition.find('\n', position);
    if (end == std::string_view::npos) end = exposition.size();
    const std::string_view line = exposition.substr(position, end - position);
    position = end + 1;
    if (line.empty()) continue;
    if (line.front() == '#') {
      // "# HELP name text" / "# TYPE name type"; other comments are dropped.
      const bool help = line.starts_with("# HELP ");
      const bool type = line.starts_with("# TYPE ");
      if (!help && !type) continue;
      const std::string_view rest = line.substr(7);
      const std::size_t space = rest.find(' ');
      const std::string_view name = rest.substr(0, space);
      family_lines& f = family_of(name);
      std::string& kept = help ? f.help_line : f.type_line;
      if (!kept.empty()) continue;
      kept.assign(line);
      kept += '\n';
      if (type && space != std::string_view::npos) f.type.assign(rest.substr(space + 1));
      continue;
    }
    const std::size_t name_end = line.find_first_of("{ ");
    family_lines& f = find_family(line.substr(0, name_end));
    f.samples.append(line);
    f.samples += '\n';
  }
  std::string result;
  result.reserve(exposition.size());
  for (const family_lines& f : families) {
    if (f.samples.empty()) continue;
    result += f.help_line;
    result += f.type_line;
    result += f.samples;
  }
  return result;
}

}  // namespace spindle::diagnostics
