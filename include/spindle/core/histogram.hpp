// Log-bucketed histograms of durations, recorded on an executor's thread and read from any other
// (SPEC G2; docs/design/diagnostics.md, "Metrics (G2)").
//
// Who takes part
//   - one writer (an executor's thread): record(); a single-writer histogram, so every counter is
//     bumped with a relaxed load and store (no read-modify-write, as executor_stats);
//   - readers on any thread (the metrics exposition, a test): snapshot(), which copies the
//     counters with relaxed loads. A snapshot taken while the writer runs is not one instant:
//     each bucket is exact as of its own load, the total is the sum of the buckets it read (so
//     `count() == sum of buckets` always holds for the snapshot), and `sum_ns` may be a few
//     values ahead of or behind the buckets.
//
// Buckets (log-linear, after HdrHistogram): values 0..7 ns have a bucket each; above that, each
// power of two [2^e, 2^(e+1)) is cut into `sub_buckets` (8) equal parts, so a bucket's width is
// at most 1/8 of its lower bound: a quantile read from the buckets is within 12.5% of the true
// value (reported as the bucket's highest value, clamped to the largest value recorded). Values
// from 2^max_exponent ns (~18 minutes) on share the last bucket. 312 buckets, 2.5 KiB.
//
// Time. Durations are taken from the cheapest clock that is steady across CPUs: the time-stamp
// counter on x86-64 when the CPU says it is invariant (constant rate, not stopped in idle
// states), converted to nanoseconds with a factor calibrated once per process against the steady
// clock; std::chrono::steady_clock elsewhere. Measured in the design document (rdtsc ~7 ns,
// clock_gettime through the vDSO ~20 ns per read on the development machine).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace spindle::core {

// The clock histograms read: raw ticks (read()) and their conversion to nanoseconds.
class histogram_clock {
 public:
  // Ticks of the time-stamp counter where it is usable, else steady-clock nanoseconds.
  static std::uint64_t read() noexcept {
#if defined(__x86_64__)
    // acquire: pairs with calibrate()'s release; the factor to_nanoseconds reads is then the
    // TSC's (a plain load on x86).
    if (uses_tsc_.load(std::memory_order_acquire)) return __rdtsc();
#endif
    return steady_nanoseconds();
  }
  // Nanoseconds in `ticks` (a difference of two read()s; 0 for a negative difference, which a
  // time-stamp counter read on two CPUs can give).
  static std::uint64_t to_nanoseconds(std::int64_t ticks) noexcept {
    if (ticks <= 0) return 0;
    // relaxed: set once, before uses_tsc_ (release), by calibrate(); see read().
    const std::uint64_t factor = nanoseconds_per_tick_q24_.load(std::memory_order_relaxed);
    // 24 fraction bits, in 128 bits: no overflow for any difference.
    return std::uint64_t((static_cast<unsigned __int128>(ticks) * factor) >> 24);
  }
  // Decides the source and calibrates the time-stamp counter (about 2 ms, once per process;
  // later calls return at once). Call before the first read() whose result is converted: until
  // then read() uses the steady clock. Thread-safe.
  static void calibrate() noexcept;
  // Whether read() uses the time-stamp counter (after calibrate()).
  static bool uses_time_stamp_counter() noexcept {
    return uses_tsc_.load(std::memory_order_relaxed);  // relaxed: a report
  }
  static std::uint64_t steady_nanoseconds() noexcept {
    return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count());
  }

 private:
  static inline std::atomic<bool> uses_tsc_{false};
  static inline std::atomic<std::uint64_t> nanoseconds_per_tick_q24_{std::uint64_t(1) << 24};
};

// A copy of a histogram's counters, for a reader.
struct histogram_snapshot {
  static constexpr unsigned sub_bucket_bits = 3;
  static constexpr std::uint64_t sub_buckets = std::uint64_t(1) << sub_bucket_bits;
  static constexpr unsigned max_exponent = 40;
  static constexpr std::size_t bucket_count = (max_exponent - sub_bucket_bits + 2) * sub_buckets;

  std::array<std::uint64_t, bucket_count> buckets{};
  std::uint64_t sum_ns = 0;  // sum of the values recorded
  std::uint64_t max_ns = 0;  // largest value recorded

  // The bucket a value falls in.
  static constexpr std::size_t bucket_of(std::uint64_t value) noexcept {
    if (value < sub_buckets) return std::size_t(value);
    const unsigned exponent = unsigned(std::bit_width(value)) - 1;  // >= sub_bucket_bits
    if (exponent > max_exponent) return bucket_count - 1;
    const std::uint64_t sub = (value >> (exponent - sub_bucket_bits)) & (sub_buckets - 1);
    return std::size_t((exponent - sub_bucket_bits + 1) * sub_buckets + sub);
  }
  // The smallest value of bucket `index`, and one past its largest.
  static constexpr std::uint64_t lower_bound(std::size_t index) noexcept {
    if (index < sub_buckets) return index;
    const unsigned exponent = unsigned(index / sub_buckets) - 1 + sub_bucket_bits;
    const std::uint64_t sub = index % sub_buckets;
    return (sub_buckets + sub) << (exponent - sub_bucket_bits);
  }
  static constexpr std::uint64_t upper_bound(std::size_t index) noexcept {
    return index + 1 < bucket_count ? lower_bound(index + 1) : ~std::uint64_t(0);
  }

  std::uint64_t count() const noexcept {
    std::uint64_t total = 0;
    for (std::uint64_t b : buckets) total += b;
    return total;
  }
  // Values recorded that are below `bound` (exact when `bound` is a bucket boundary, such as a
  // power of two; otherwise the buckets that lie wholly below it).
  std::uint64_t count_below(std::uint64_t bound) const noexcept {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < bucket_count && upper_bound(i) <= bound; ++i) total += buckets[i];
    return total;
  }
  // The value at quantile q (0 < q <= 1): the highest value of the bucket holding the
  // ceil(q * count)-th smallest value, clamped to max_ns; 0 when nothing was recorded.
  std::uint64_t quantile(double q) const noexcept;
};

// One single-writer histogram of nanosecond durations.
class log_histogram {
 public:
  static constexpr std::size_t bucket_count = histogram_snapshot::bucket_count;

  // Writer thread only.
  void record(std::uint64_t nanoseconds) noexcept {
    // relaxed: single writer; readers sample (see the top of the file).
    auto bump = [](std::atomic<std::uint64_t>& counter, std::uint64_t by) {
      counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
    };
    bump(buckets_[histogram_snapshot::bucket_of(nanoseconds)], 1);
    bump(sum_ns_, nanoseconds);
    if (nanoseconds > max_ns_.load(std::memory_order_relaxed)) {
      max_ns_.store(nanoseconds, std::memory_order_relaxed);
    }
  }
  // Any thread.
  histogram_snapshot snapshot() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
  std::atomic<std::uint64_t> max_ns_{0};
};

}  // namespace spindle::core
