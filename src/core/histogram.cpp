// Log-bucketed histograms: the design is in include/spindle/core/histogram.hpp.
#include "spindle/core/histogram.hpp"

#include <cmath>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace spindle::core {

namespace {

#if defined(__x86_64__)
// CPUID leaf 0x80000007, EDX bit 8: the time-stamp counter runs at a constant rate in every
// P-, C- and T-state (the "invariant TSC" of the Intel and AMD manuals).
bool has_invariant_tsc() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000007u) return false;
  if (!__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx)) return false;
  return (edx & (1u << 8)) != 0;
}
#endif

}  // namespace

void histogram_clock::calibrate() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__x86_64__)
    if (!has_invariant_tsc()) return;
    // Two readings of both clocks about 2 ms apart. A reading pairs the steady clock with the
    // midpoint of the TSC reads around it, the narrowest of a few tries (a preemption between
    // the reads widens one), which bounds the pairing error by the length of one steady-clock
    // read (~20 ns): 1e-5 of the interval.
    auto pair = [](std::uint64_t& ticks, std::uint64_t& nanoseconds) {
      std::uint64_t narrowest = ~std::uint64_t(0);
      for (int attempt = 0; attempt < 8; ++attempt) {
        const std::uint64_t before = __rdtsc();
        const std::uint64_t now = steady_nanoseconds();
        const std::uint64_t after = __rdtsc();
        if (after - before < narrowest) {
          narrowest = after - before;
          ticks = before + (after - before) / 2;
          nanoseconds = now;
        }
      }
    };
    std::uint64_t ticks0 = 0, ns0 = 0, ticks1 = 0, ns1 = 0;
    pair(ticks0, ns0);
    while (steady_nanoseconds() - ns0 < 2'000'000) {
    }
    pair(ticks1, ns1);
    if (ticks1 <= ticks0) return;  // a counter that does not move: keep the steady clock
    const double per_tick = double(ns1 - ns0) / double(ticks1 - ticks0);
    const auto factor = std::uint64_t(std::llround(per_tick * double(std::uint64_t(1) << 24)));
    if (factor == 0) return;
    // The factor first, then the switch (release: a reader whose acquire load of the switch sees
    // it converts with this factor). Callers calibrate before they switch histograms on, so no
    // executor holds a steady-clock reading when the source changes.
    nanoseconds_per_tick_q24_.store(factor, std::memory_order_relaxed);
    uses_tsc_.store(true, std::memory_order_release);
#endif
  });
}

std::uint64_t histogram_snapshot::quantile(double q) const noexcept {
  const std::uint64_t total = count();
  if (total == 0) return 0;
  if (q > 1.0) q = 1.0;
  auto rank = std::uint64_t(std::ceil(q * double(total)));
  if (rank == 0) rank = 1;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < bucket_count; ++i) {
    seen += buckets[i];
    if (seen >= rank) {
      const std::uint64_t highest = upper_bound(i) - 1;
      return highest < max_ns ? highest : max_ns;
    }
  }
  return max_ns;
}

histogram_snapshot log_histogram::snapshot() const noexcept {
  histogram_snapshot result;
  // relaxed, all: samples of single-writer counters (see the header).
  for (std::size_t i = 0; i < bucket_count; ++i) {
    result.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  }
  result.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  result.max_ns = max_ns_.load(std::memory_order_relaxed);
  return result;
}

}  // namespace spindle::core
