// Prometheus text exposition, format version 0.0.4 (SPEC G2; docs/design/diagnostics.md,
// "Metrics (G2)"): what a registry's metrics writers (registry.hpp) append, and what
// `GET /metrics` serves (Content-Type: text/plain; version=0.0.4).
//
// A metrics writer appends, per metric family, one `# HELP` line, one `# TYPE` line and its
// samples, `name{label="value",...} number`, each on its own line. prometheus_writer writes
// those lines: names are made valid (characters outside [a-zA-Z0-9_:] become '_'), label values
// and help text are escaped as the format says (label values: backslash, double quote and line
// feed; help: backslash and line feed), numbers are written exactly (integers) or in the
// shortest form that reads back to the same double, +Inf/-Inf/NaN as the format spells them.
//
// Naming (promtool's lint, which a test runs on real output): counters end in `_total`; units
// are base units spelled out (`_seconds`, `_bytes`); histograms get `_bucket{le=...}`, `_sum`,
// `_count`; no other family uses those suffixes or the labels `le` and `quantile`.
//
// Several contributors may write samples of the same family (two dispatchers, say): a family's
// lines must stay together in the exposition, so metrics_text (metrics.hpp) regroups what the
// writers appended by family before serving it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "spindle/core/histogram.hpp"

namespace spindle::diagnostics {

enum class metric_type { counter, gauge, histogram, summary, untyped };

struct metric_label {
  std::string_view name;
  std::string_view value;
};

class prometheus_writer {
 public:
  explicit prometheus_writer(std::string& out) noexcept : out_(out) {}

  // Starts a family: its # HELP and # TYPE lines. The samples written next belong to it.
  prometheus_writer& family(std::string_view name, metric_type type, std::string_view help);

  // One sample `name{labels} value`; for a counter or a gauge, `name` is the family's name.
  prometheus_writer& sample(std::string_view name, std::span<const metric_label> labels,
                            double value);
  prometheus_writer& sample(std::string_view name, std::span<const metric_label> labels,
                            std::uint64_t value);
  prometheus_writer& sample(std::string_view name, std::initializer_list<metric_label> labels,
                            double value) {
    return sample(name, std::span<const metric_label>(labels.begin(), labels.size()), value);
  }
  prometheus_writer& sample(std::string_view name, std::initializer_list<metric_label> labels,
                            std::uint64_t value) {
    return sample(name, std::span<const metric_label>(labels.begin(), labels.size()), value);
  }

  // A histogram's samples (after family(name, histogram, ...)) from a log-bucketed snapshot of
  // nanosecond durations, in seconds: cumulative `name_bucket{...,le="..."}` at the powers of two
  // from 2^lowest_power_of_two ns to 2^highest_power_of_two ns (exact: they are bucket
  // boundaries of the snapshot; a bucket counts the values below its bound, which for integer
  // nanoseconds is the values at most one nanosecond below it), then le="+Inf", `name_sum` and
  // `name_count` (the +Inf bucket's count).
  static constexpr unsigned lowest_power_of_two = 7;    // 128 ns
  static constexpr unsigned highest_power_of_two = 34;  // ~17 s
  prometheus_writer& histogram_seconds(std::string_view name, std::span<const metric_label> labels,
                                       const core::histogram_snapshot& snapshot);
  // A summary's samples (after family(name, summary, ...)), in seconds: `name{...,quantile="q"}`
  // for p50, p90, p99 and p999 (histogram_snapshot::quantile), `name_sum`, `name_count`.
  prometheus_writer& summary_seconds(std::string_view name, std::span<const metric_label> labels,
                                     const core::histogram_snapshot& snapshot);

  std::string& out() noexcept { return out_; }

 private:
  void write_name_and_labels(std::string_view name, std::span<const metric_label> labels,
                             std::string_view extra_name = {}, std::string_view extra_value = {});
  std::string& out_;
};

// The pieces, for writers that build lines themselves.
void append_metric_name(std::string& out, std::string_view name);
void append_escaped_label_value(std::string& out, std::string_view value);
void append_escaped_help(std::string& out, std::string_view help);
void append_sample_value(std::string& out, double value);
void append_sample_value(std::string& out, std::uint64_t value);
std::string_view metric_type_name(metric_type type) noexcept;

// Reorders an exposition so that each family's lines are together, in the order families first
// appear: samples are attributed to the family of the same name (a histogram's or a summary's
// also by the _bucket, _sum and _count suffixes); a family's first HELP and TYPE lines are kept,
// later repeats dropped; samples of a name no HELP or TYPE announced form an untyped family.
std::string regroup_families(std::string_view exposition);

}  // namespace spindle::diagnostics
