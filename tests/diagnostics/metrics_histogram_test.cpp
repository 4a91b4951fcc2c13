// G2 metrics, the pieces: log-bucketed histograms (core/histogram.hpp), their percentile math,
// the histogram clock, and the Prometheus writer (diagnostics/prometheus.hpp).
#include "spindle/core/histogram.hpp"
#include "spindle/diagnostics/prometheus.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace spindle::diagnostics {
namespace {

using core::histogram_snapshot;
using core::log_histogram;

TEST(MetricsHistogram, BucketsAreContiguousAndAtMostAnEighthWide) {
  // Every value 0..2^20 falls in the bucket whose bounds contain it, buckets follow each other
  // without gaps, and a bucket is at most 1/8 of its lower bound wide (above the exact ones).
  std::size_t previous = 0;
  for (std::uint64_t v = 0; v < (1u << 20); ++v) {
    const std::size_t b = histogram_snapshot::bucket_of(v);
    ASSERT_LE(histogram_snapshot::lower_bound(b), v);
    ASSERT_LT(v, histogram_snapshot::upper_bound(b));
    ASSERT_TRUE(b == previous || b == previous + 1) << v;
    previous = b;
  }
  for (std::size_t b = 8; b + 1 < histogram_snapshot::bucket_count; ++b) {
    const std::uint64_t width =
        histogram_snapshot::upper_bound(b) - histogram_snapshot::lower_bound(b);
    EXPECT_LE(width * 8, histogram_snapshot::lower_bound(b)) << b;
  }
  // Powers of two are bucket boundaries (the Prometheus buckets rely on it).
  for (unsigned p = 3; p <= histogram_snapshot::max_exponent; ++p) {
    const std::uint64_t v = std::uint64_t(1) << p;
    EXPECT_EQ(histogram_snapshot::lower_bound(histogram_snapshot::bucket_of(v)), v);
  }
  // Huge values share the last bucket.
  EXPECT_EQ(histogram_snapshot::bucket_of(~std::uint64_t(0)), histogram_snapshot::bucket_count - 1);
}

TEST(MetricsHistogram, QuantilesMatchTheExactOnesWithinABucket) {
  // Log-normal-ish durations (a long tail): each quantile read from the buckets is at least the
  // exact one and within 12.5% above it.
  std::mt19937_64 random(42);
  std::lognormal_distribution<double> durations(8.0, 1.5);  // median ~3 us, tail to ms
  log_histogram h;
  std::vector<std::uint64_t> values;
  for (int i = 0; i < 100000; ++i) {
    const auto v = std::uint64_t(durations(random));
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  const histogram_snapshot s = h.snapshot();
  EXPECT_EQ(s.count(), values.size());
  EXPECT_EQ(s.max_ns, values.back());
  std::uint64_t sum = 0;
  for (std::uint64_t v : values) sum += v;
  EXPECT_EQ(s.sum_ns, sum);
  for (double q : {0.5, 0.9, 0.99, 0.999, 1.0}) {
    const std::uint64_t exact = values[std::size_t(std::ceil(q * double(values.size()))) - 1];
    const std::uint64_t estimate = s.quantile(q);
    EXPECT_GE(estimate, exact) << q;
    EXPECT_LE(double(estimate), double(exact) * 1.125 + 1) << q;
  }
  EXPECT_EQ(s.quantile(1.0), values.back());  // clamped to the largest value recorded
}

TEST(MetricsHistogram, SmallAndEmptyHistograms) {
  log_histogram h;
  EXPECT_EQ(h.snapshot().quantile(0.99), 0u);  // nothing recorded
  for (std::uint64_t v : {1, 2, 3, 4, 5, 6, 7}) h.record(v);  // exact buckets
  const histogram_snapshot s = h.snapshot();
  EXPECT_EQ(s.quantile(0.5), 4u);
  EXPECT_EQ(s.quantile(1.0 / 7.0), 1u);
  EXPECT_EQ(s.quantile(0.999), 7u);
  EXPECT_EQ(s.count_below(4), 3u);  // 1, 2, 3
}

TEST(MetricsHistogram, TheClockMeasuresRealTime) {
  using core::histogram_clock;
  histogram_clock::calibrate();
  // Steady-clock reads around each tick read: the measured interval lies between the inner and
  // the outer one, whatever preemption happens between the reads (calibration error is ~1e-3
  // at most; 2% slack).
  const std::uint64_t outer_start = histogram_clock::steady_nanoseconds();
  const std::uint64_t start_ticks = histogram_clock::read();
  const std::uint64_t inner_start = histogram_clock::steady_nanoseconds();
  while (histogram_clock::steady_nanoseconds() - inner_start < 5'000'000) {
  }
  const std::uint64_t inner_end = histogram_clock::steady_nanoseconds();
  const std::uint64_t end_ticks = histogram_clock::read();
  const std::uint64_t outer_end = histogram_clock::steady_nanoseconds();
  const std::uint64_t measured =
      histogram_clock::to_nanoseconds(std::int64_t(end_ticks - start_ticks));
  EXPECT_GE(double(measured), 0.98 * double(inner_end - inner_start));
  EXPECT_LE(double(measured), 1.02 * double(outer_end - outer_start));
  EXPECT_EQ(histogram_clock::to_nanoseconds(-5), 0u);  // TSC skew between CPUs reads as 0
}

TEST(MetricsPrometheus, EscapesLabelValuesAndHelp) {
  std::string out;
  prometheus_writer w(out);
  w.family("demo_total", metric_type::counter, "A \\ help\nwith a line feed");
  w.sample("demo_total", {{"name", "a\"b\\c\nd"}, {"bad-label", "x"}}, std::uint64_t(7));
  w.sample("demo_total", {}, 0.25);
  EXPECT_EQ(out,
            "# HELP demo_total A \\\\ help\\nwith a line feed\n"
            "# TYPE demo_total counter\n"
            "demo_total{name=\"a\\\"b\\\\c\\nd\",bad_label=\"x\"} 7\n"
            "demo_total 0.25\n");
  std::string values;
  append_sample_value(values, std::numeric_limits<double>::infinity());
  values += ' ';
  append_sample_value(values, -std::numeric_limits<double>::infinity());
  values += ' ';
  append_sample_value(values, std::nan(""));
  values += ' ';
  append_sample_value(values, 1e-7);
  EXPECT_EQ(values, "+Inf -Inf NaN 1e-07");
  std::string name;
  append_metric_name(name, "9bad name:ok");
  EXPECT_EQ(name, "_bad_name:ok");
}

TEST(MetricsPrometheus, HistogramBucketsAreCumulativeAndEndWithTheCount) {
  log_histogram h;
  h.record(100);        // below the first bound (128 ns)
  h.record(1000);       // below 1024 ns
  h.record(1024);       // exactly 1024: counted from the 2048 ns bucket on
  h.record(5'000'000);  // 5 ms
  h.record(std::uint64_t(1) << 40);  // beyond the last bound: only in +Inf
  std::string out;
  prometheus_writer w(out);
  const metric_label label{"executor", "0"};
  w.histogram_seconds("x_seconds", std::span<const metric_label>(&label, 1), h.snapshot());
  auto bucket = [&](const std::string& le) {
    const std::string key = "x_seconds_bucket{executor=\"0\",le=\"" + le + "\"} ";
    const std::size_t at = out.find(key);
    EXPECT_NE(at, std::string::npos) << key;
    return std::stoull(out.substr(at + key.size()));
  };
  EXPECT_EQ(bucket("1.28e-07"), 1u);
  EXPECT_EQ(bucket("1.024e-06"), 2u);
  EXPECT_EQ(bucket("2.048e-06"), 3u);
  EXPECT_EQ(bucket("0.004194304"), 3u);
  EXPECT_EQ(bucket("0.008388608"), 4u);
  EXPECT_EQ(bucket("17.179869184"), 4u);
  EXPECT_EQ(bucket("+Inf"), 5u);
  EXPECT_NE(out.find("x_seconds_count{executor=\"0\"} 5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_sum{executor=\"0\"} 1099.5"), std::string::npos) << out;
}

TEST(MetricsPrometheus, RegroupingKeepsEachFamilyTogether) {
  // Two contributors writing the same families (two dispatchers, say).
  std::string raw;
  for (const char* who : {"a", "b"}) {
    prometheus_writer w(raw);
    w.family("q_total", metric_type::counter, "Q.");
    w.sample("q_total", {{"who", who}}, std::uint64_t(1));
    w.family("h_seconds", metric_type::histogram, "H.");
    log_histogram h;
    h.record(200);
    w.histogram_seconds("h_seconds", {}, h.snapshot());
  }
  const std::string text = regroup_families(raw);
  // One HELP and TYPE per family, then its samples.
  EXPECT_EQ(text.find("# TYPE q_total counter"), text.rfind("# TYPE q_total counter"));
  const std::size_t q_start = text.find("# HELP q_total");
  const std::size_t h_start = text.find("# HELP h_seconds");
  ASSERT_NE(q_start, std::string::npos);
  ASSERT_NE(h_start, std::string::npos);
  EXPECT_LT(q_start, h_start);
  EXPECT_LT(text.find("q_total{who=\"b\"} 1"), h_start);
  EXPECT_GT(text.find("h_seconds_count"), h_start);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'),
            std::count(raw.begin(), raw.end(), '\n') - 4);  // two HELP and two TYPE repeats
}

}  // namespace
}  // namespace spindle::diagnostics
