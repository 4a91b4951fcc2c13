// The atomics layer: every lock-free structure in spindle reaches atomics through here.
//
// Why a layer: the same queue code must run under three regimes.
//   1. Release builds: plain std::atomic, stand-alone fences where the algorithm needs them.
//   2. ThreadSanitizer builds (SPINDLE_TSAN): TSan does not model std::atomic_thread_fence, so
//      every place that would use a stand-alone seq_cst fence uses a seq_cst read-modify-write on
//      a dummy atomic instead (the "fence-free path"); TSan understands RMWs.
//   3. Relacy models (tests/model): the lock-free structures are templates over an `atomics`
//      policy, so a model instantiates them with Relacy's atomics and a tiny capacity.
//
// The policy type is the `std_atomics` struct below; a model supplies its own with the same
// members (`template <class T> using atomic`, `fence_seq_cst()`, `relax()`).
#pragma once

#include <atomic>
#include <cstddef>
#include <new>

namespace spindle::core {

// Size used to keep independently written hot fields on separate cache lines. Fixed at 64
// rather than std::hardware_destructive_interference_size so the ABI does not change with
// compiler flags (g++ warns about exactly that).
inline constexpr std::size_t cache_line_size = 64;

// Spin-wait hint for busy loops (PAUSE on x86, YIELD on Arm).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Full sequentially consistent fence, with the TSan-compatible substitute described above.
inline void fence_seq_cst() noexcept {
#if defined(SPINDLE_TSAN)
  // An RMW on a shared dummy: seq_cst RMWs are totally ordered with every other seq_cst
  // operation, which is the property our Dekker-style handshakes need (see parking.md).
  static std::atomic<unsigned> dummy{0};
  dummy.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// The default policy: the real std::atomic.
struct std_atomics {
  template <class T>
  using atomic = std::atomic<T>;
  static void fence_seq_cst() noexcept { core::fence_seq_cst(); }
  static void relax() noexcept { cpu_relax(); }
};

}  // namespace spindle::core
