// Allocation of coroutine frames and other small per-task objects.
//
// Tasks are allocated and freed at very high rates (skynet: 1.1M tasks in tens of ms), often
// freed on a different thread than the one that allocated them. A thread-local cache per size
// class (64-byte steps up to 1 KiB) serves both sides without atomics; caches balance through a
// global depot of fixed-size batches (src/core/frame_allocator.cpp has the details). Larger
// requests go straight to malloc.
//
// Memory is given back (docs/design/tasks.md, "Frame cache: what is kept, and for how long"):
// - the depot holds at most its bound: the sum of the shares of the live runtimes and embedded
//   executors (runtime_options::frame_cache_bytes per executor). A batch freed into a full depot
//   goes back to malloc. With none alive the bound is zero: the depot is empty. A runtime whose
//   executors have all been parked for runtime_options::frame_cache_idle_trim trims the depot
//   to the bound without its share (its monitor does, runtime_monitor.hpp).
// - a thread's private cache holds at most two batches per size class; it is given back when
//   the thread exits, when an executor has been parked for frame_cache_idle_trim, and on the
//   thread that shuts a runtime down or destroys it.
//
// Every block carries a 16-byte header with its size class, so `deallocate` needs no size.
// Under AddressSanitizer or ThreadSanitizer the cache is bypassed (plain malloc/free) so the
// sanitizers see every allocation's real lifetime; the counters then stay zero.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spindle::core {

void* allocate_frame(std::size_t size);
void deallocate_frame(void* pointer) noexcept;

// The largest share one executor may add (runtime_options::frame_cache_bytes is refused above
// it, embedded_options::frame_cache_bytes clamped): sums of shares cannot overflow.
inline constexpr std::size_t max_frame_cache_bytes = std::size_t(1) << 40;

// A live runtime's (or embedded executor's) share of the depot's bound: added while it lives,
// removed when it stops. Removing trims the depot down to the bound that is left.
void add_frame_cache_share(std::size_t bytes) noexcept;
void remove_frame_cache_share(std::size_t bytes) noexcept;

// Gives the calling thread's private cache back to malloc.
void release_thread_frame_cache() noexcept;
// Gives whole batches of the depot back to malloc until it holds at most `keep_bytes`.
void trim_frame_depot(std::size_t keep_bytes) noexcept;
// Whether the calling thread's private cache holds anything. Cheap enough to ask before parking.
bool thread_frame_cache_holds_memory() noexcept;

// Counters for diagnostics and tests (bytes count whole blocks, headers included).
struct frame_cache_statistics {
  std::size_t depot_bytes = 0;        // in the depot now
  std::size_t depot_bound = 0;        // the depot's bound now
  std::size_t depot_peak_bytes = 0;   // the most the depot held since the last reset_peak
  std::size_t thread_bytes = 0;       // in the calling thread's private cache
  std::uint64_t batches_released = 0; // batches given to malloc: freed into a full depot, trimmed
};
frame_cache_statistics frame_cache_stats() noexcept;
// Starts depot_peak_bytes again from what the depot holds now.
void reset_frame_cache_peak() noexcept;

}  // namespace spindle::core
