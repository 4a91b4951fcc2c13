// The bridge every Relacy model shares: include it after the standard and spindle headers (it
// includes <relacy/relacy.hpp>, whose macros break <atomic> when included first).
//
//   relacy_atomics<>          the atomics policy spindle's lock-free templates take
//                             (core/atomic.hpp), forwarding to rl::atomic with the same orders;
//   relacy_atomics<Weaken>    the same with memory orders weakened by `Weaken` (a negative
//                             control: the model must then report the race it protects against);
//   run_model<Test>(...)      runs one model and prints a line; a negative control runs quietly.
// relacy.hpp also redefines std::memory_order_* as macros (for its std:: aliasing); they are
// undefined here so the models and spindle's headers use the real ones.
#pragma once

#include <atomic>
#include <cstdio>
#include <ostream>

#include <relacy/relacy.hpp>

#undef memory_order_relaxed
#undef memory_order_consume
#undef memory_order_acquire
#undef memory_order_release
#undef memory_order_acq_rel
#undef memory_order_seq_cst

namespace relacy_bridge {

constexpr rl::memory_order to_rl(std::memory_order mo) {
  switch (mo) {
    case std::memory_order_relaxed: return rl::mo_relaxed;
    case std::memory_order_consume: return rl::mo_consume;
    case std::memory_order_acquire: return rl::mo_acquire;
    case std::memory_order_release: return rl::mo_release;
    case std::memory_order_acq_rel: return rl::mo_acq_rel;
    case std::memory_order_seq_cst: return rl::mo_seq_cst;
  }
  return rl::mo_seq_cst;
}

// Leaves every order as the code under test wrote it. A model weakens some by deriving from it
// and hiding one hook: load, store, exchange (also the fetch_ operations), CAS success, CAS
// failure.
struct exact_orders {
  static constexpr std::memory_order load(std::memory_order mo) { return mo; }
  static constexpr std::memory_order store(std::memory_order mo) { return mo; }
  static constexpr std::memory_order exchange(std::memory_order mo) { return mo; }
  static constexpr std::memory_order cas_success(std::memory_order mo) { return mo; }
  static constexpr std::memory_order cas_failure(std::memory_order mo) { return mo; }
};

// The std::atomic surface spindle's structures use, forwarded to rl::atomic.
template <class T, class Weaken = exact_orders>
class relacy_atomic {
 public:
  relacy_atomic() = default;
  relacy_atomic(T value) : value_(value) {}  // NOLINT: brace-initialised like std::atomic
  // (not copyable: rl::atomic is not; `= delete` cannot be spelt here, relacy.hpp defines
  // `delete` as a macro)

  T load(std::memory_order mo = std::memory_order_seq_cst) const {
    return value_($).load(to_rl(Weaken::load(mo)));
  }
  void store(T v, std::memory_order mo = std::memory_order_seq_cst) {
    value_($).store(v, to_rl(Weaken::store(mo)));
  }
  T exchange(T v, std::memory_order mo = std::memory_order_seq_cst) {
    return value_($).exchange(v, to_rl(Weaken::exchange(mo)));
  }
  T fetch_add(T v, std::memory_order mo = std::memory_order_seq_cst) {
    return value_($).fetch_add(v, to_rl(Weaken::exchange(mo)));
  }
  T fetch_sub(T v, std::memory_order mo = std::memory_order_seq_cst) {
    return value_($).fetch_sub(v, to_rl(Weaken::exchange(mo)));
  }
  T fetch_or(T v, std::memory_order mo = std::memory_order_seq_cst) {
    return value_($).fetch_or(v, to_rl(Weaken::exchange(mo)));
  }
  bool compare_exchange_weak(T& expected, T desired, std::memory_order success,
                             std::memory_order failure) {
    return value_($).compare_exchange_weak(expected, desired, to_rl(Weaken::cas_success(success)),
                                           to_rl(Weaken::cas_failure(failure)));
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order success,
                               std::memory_order failure) {
    return value_($).compare_exchange_strong(expected, desired,
                                             to_rl(Weaken::cas_success(success)),
                                             to_rl(Weaken::cas_failure(failure)));
  }
  bool compare_exchange_weak(T& expected, T desired,
                             std::memory_order mo = std::memory_order_seq_cst) {
    return value_($).compare_exchange_weak(expected, desired, to_rl(Weaken::cas_success(mo)));
  }
  bool compare_exchange_strong(T& expected, T desired,
                               std::memory_order mo = std::memory_order_seq_cst) {
    return value_($).compare_exchange_strong(expected, desired, to_rl(Weaken::cas_success(mo)));
  }

 private:
  mutable rl::atomic<T> value_;
};

template <class Weaken = exact_orders>
struct relacy_atomics {
  template <class T>
  using atomic = relacy_atomic<T, Weaken>;
  static void fence_seq_cst() { rl::atomic_thread_fence(rl::mo_seq_cst, $); }
  static void relax() { rl::yield(1, $); }
};

// A model expected to fail (Test::params::expected_result is not success) would print its
// expected counterexample: its output goes to a stream without a buffer, which discards
// everything (a std::ostringstream would allocate through libstdc++ while Relacy replaces the
// global allocation functions: double free). Returns whether the result was the expected one.
inline void quiet_if_expected_failure(rl::test_params& params, bool expected_failure) {
  static std::ostream quiet(nullptr);
  if (expected_failure) {
    params.output_stream = &quiet;
    params.progress_stream = &quiet;
  }
}

template <class Test>
bool run_model(const char* name, rl::scheduler_type_e scheduler, rl::iteration_t iterations) {
  rl::test_params params;
  params.search_type = scheduler;
  params.iteration_count = iterations;
  params.output_history = false;
  quiet_if_expected_failure(params, Test::params::expected_result != rl::test_result_success);
  if (iterations != 0) {
    std::printf("%s (%s, %llu iterations)\n", name, rl::format(scheduler),
                static_cast<unsigned long long>(iterations));
  } else {
    std::printf("%s (%s)\n", name, rl::format(scheduler));
  }
  std::fflush(stdout);
  const bool ok = rl::simulate<Test>(params);
  if (!ok) std::printf("  FAILED: %s\n", name);
  return ok;
}

}  // namespace relacy_bridge
