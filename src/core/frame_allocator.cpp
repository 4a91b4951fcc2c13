// Frame allocator: thread-local caches per size class, balanced through a global depot.
//
// Participants: every thread that allocates or frees frames (workers, foreign threads), and the
// runtimes and embedded executors that set the depot's bound while they live.
// Per thread: for each size class a private free list (no atomics). Frees go to the freeing
// thread's list; when a list grows past `cache_limit` blocks, `batch_size` of them move to the
// class's depot (a mutex-protected stack of batches). An allocation that finds its list empty
// takes a whole batch from the depot before falling back to malloc. So a producer thread that
// only allocates (a foreign thread submitting tasks) and consumers that only free (workers) meet
// in the depot once per `batch_size` blocks instead of in malloc's arenas for every block.
//
// Bound (issue 14, item 10; docs/design/tasks.md, "Frame cache"). Invariant: `depot_bytes`, the
// bytes of the batches in all depots plus those reserved by a give under way, is at most
// `depot_bound` (the sum of the live shares), except while the bound is being lowered: a give
// that reserved under the old bound may land after the trim that followed, and the next trim
// or take sees it. A give reserves its batch's bytes first (compare-exchange against the bound)
// and only then pushes; a batch that does not fit goes back to malloc. So memory a burst left
// behind is either reused or returned, never kept beyond the bound.
//
// Block header: 16 bytes before the block hold its size class (keeps 16-byte alignment).
// Under AddressSanitizer or ThreadSanitizer everything goes straight to malloc/free so the
// sanitizers see each allocation's real lifetime.
#include "spindle/core/frame_allocator.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPINDLE_PLAIN_MALLOC 1
#endif

namespace spindle::core {
namespace {

constexpr std::size_t header_size = 16;
constexpr std::size_t class_step = 64;
constexpr std::size_t class_count = 16;  // blocks up to 1024 bytes including the header
constexpr std::uint32_t batch_size = 64;
constexpr std::uint32_t cache_limit = 2 * batch_size;
constexpr std::uint32_t large_class = 0xffffffffu;

constexpr std::size_t block_bytes(std::size_t size_class) { return (size_class + 1) * class_step; }
constexpr std::size_t batch_bytes(std::size_t size_class) {
  return batch_size * block_bytes(size_class);
}

struct free_block {
  free_block* next;
};

// A batch is a linked list of exactly batch_size blocks; the first block's second word links
// batches in the depot.
struct depot {
  std::mutex mutex;
  free_block* batches = nullptr;  // guarded by mutex; linked through batch_link()
};

free_block*& batch_link(free_block* first) {
  return *reinterpret_cast<free_block**>(reinterpret_cast<char*>(first) + sizeof(free_block*));
}

depot depots[class_count];

// The depot's accounting. All relaxed: these are counts, not hand-offs; the blocks themselves
// change hands under a depot's mutex.
struct depot_totals {
  std::atomic<std::size_t> bytes{0};     // see the invariant at the top
  std::atomic<std::size_t> bound{0};     // sum of the live shares
  std::atomic<std::size_t> peak{0};      // the most `bytes` reached since the last reset
  std::atomic<std::uint64_t> released{0};
};
depot_totals totals;

void* raw_allocate(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void free_block_list(free_block* b) noexcept {
  while (b != nullptr) {
    free_block* next = b->next;
    std::free(reinterpret_cast<char*>(b) - header_size);
    b = next;
  }
}

// Reserves `bytes` in the depot if they fit under the bound.
bool reserve_in_depot(std::size_t bytes) noexcept {
  // relaxed (all three): accounting, see depot_totals.
  const std::size_t bound = totals.bound.load(std::memory_order_relaxed);
  std::size_t held = totals.bytes.load(std::memory_order_relaxed);
  do {
    if (held + bytes > bound) return false;
  } while (!totals.bytes.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  std::size_t peak = totals.peak.load(std::memory_order_relaxed);
  while (held + bytes > peak &&
         !totals.peak.compare_exchange_weak(peak, held + bytes, std::memory_order_relaxed)) {
  }
  return true;
}

// Gives whole batches back to malloc until the depot holds at most `keep` bytes (or is empty),
// largest blocks first.
void trim_depot(std::size_t keep) noexcept {
  for (std::size_t c = class_count; c-- > 0;) {
    depot& d = depots[c];
    // relaxed: accounting (a give racing with us is covered by the invariant's exception).
    while (totals.bytes.load(std::memory_order_relaxed) > keep) {
      free_block* first;
      {
        std::lock_guard lock(d.mutex);
        first = d.batches;
        if (first == nullptr) break;
        d.batches = batch_link(first);
      }
      totals.bytes.fetch_sub(batch_bytes(c), std::memory_order_relaxed);  // relaxed: accounting
      free_block_list(first);
      totals.released.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
    }
  }
}

struct thread_cache {
  free_block* lists[class_count] = {};
  std::uint32_t counts[class_count] = {};
  bool alive = true;

  ~thread_cache() {
    release_all();
    alive = false;
  }

  // Gives every block of the private lists back to malloc.
  void release_all() noexcept {
    for (std::size_t c = 0; c < class_count; ++c) {
      free_block_list(lists[c]);
      lists[c] = nullptr;
      counts[c] = 0;
    }
  }

  std::size_t bytes() const noexcept {
    std::size_t total = 0;
    for (std::size_t c = 0; c < class_count; ++c) total += counts[c] * block_bytes(c);
    return total;
  }

  // Moves batch_size blocks from the list to the depot, or to malloc if the depot is full.
  void give_batch(std::size_t size_class) noexcept {
    free_block* first = lists[size_class];
    free_block* last = first;
    for (std::uint32_t i = 1; i < batch_size; ++i) last = last->next;
    lists[size_class] = last->next;
    counts[size_class] -= batch_size;
    last->next = nullptr;
    if (!reserve_in_depot(batch_bytes(size_class))) {
      free_block_list(first);
      totals.released.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
      return;
    }
    depot& d = depots[size_class];
    std::lock_guard lock(d.mutex);
    batch_link(first) = d.batches;
    d.batches = first;
  }

  // Refills an empty list with a batch from the depot; false if the depot is empty.
  bool take_batch(std::size_t size_class) noexcept {
    depot& d = depots[size_class];
    {
      std::lock_guard lock(d.mutex);
      free_block* first = d.batches;
      if (first == nullptr) return false;
      d.batches = batch_link(first);
      lists[size_class] = first;
      counts[size_class] = batch_size;
    }
    // relaxed: accounting.
    totals.bytes.fetch_sub(batch_bytes(size_class), std::memory_order_relaxed);
    return true;
  }
};

thread_local thread_cache cache;

}  // namespace

void* allocate_frame(std::size_t size) {
#if defined(SPINDLE_PLAIN_MALLOC)
  return raw_allocate(size);
#else
  const std::size_t total = size + header_size;
  const std::size_t size_class = (total + class_step - 1) / class_step - 1;
  if (size_class >= class_count) {
    char* base = static_cast<char*>(raw_allocate(total));
    *reinterpret_cast<std::uint32_t*>(base) = large_class;
    return base + header_size;
  }
  thread_cache& c = cache;
  if (c.lists[size_class] != nullptr || c.take_batch(size_class)) {
    free_block* b = c.lists[size_class];
    c.lists[size_class] = b->next;
    --c.counts[size_class];
    return b;
  }
  char* base = static_cast<char*>(raw_allocate(block_bytes(size_class)));
  *reinterpret_cast<std::uint32_t*>(base) = std::uint32_t(size_class);
  return base + header_size;
#endif
}

void deallocate_frame(void* pointer) noexcept {
#if defined(SPINDLE_PLAIN_MALLOC)
  std::free(pointer);
#else
  if (pointer == nullptr) return;
  char* base = static_cast<char*>(pointer) - header_size;
  const std::uint32_t size_class = *reinterpret_cast<std::uint32_t*>(base);
  thread_cache& c = cache;
  if (size_class == large_class || !c.alive) {
    std::free(base);
    return;
  }
  auto* b = static_cast<free_block*>(pointer);
  b->next = c.lists[size_class];
  c.lists[size_class] = b;
  if (++c.counts[size_class] > cache_limit) c.give_batch(size_class);
#endif
}

void add_frame_cache_share(std::size_t bytes) noexcept {
  totals.bound.fetch_add(bytes, std::memory_order_relaxed);  // relaxed: accounting
}

void remove_frame_cache_share(std::size_t bytes) noexcept {
  // relaxed: accounting; the trim below brings the depot under what is left.
  const std::size_t left = totals.bound.fetch_sub(bytes, std::memory_order_relaxed) - bytes;
  trim_depot(left);
}

void release_thread_frame_cache() noexcept {
#if !defined(SPINDLE_PLAIN_MALLOC)
  thread_cache& c = cache;
  if (c.alive) c.release_all();
#endif
}

void trim_frame_depot(std::size_t keep_bytes) noexcept { trim_depot(keep_bytes); }

bool thread_frame_cache_holds_memory() noexcept {
#if !defined(SPINDLE_PLAIN_MALLOC)
  const thread_cache& c = cache;
  if (!c.alive) return false;
  for (std::size_t size_class = 0; size_class < class_count; ++size_class) {
    if (c.counts[size_class] != 0) return true;
  }
#endif
  return false;
}

frame_cache_statistics frame_cache_stats() noexcept {
  frame_cache_statistics s;
  // relaxed (all): a snapshot of counters.
  s.depot_bytes = totals.bytes.load(std::memory_order_relaxed);
  s.depot_bound = totals.bound.load(std::memory_order_relaxed);
  s.depot_peak_bytes = totals.peak.load(std::memory_order_relaxed);
  s.batches_released = totals.released.load(std::memory_order_relaxed);
#if !defined(SPINDLE_PLAIN_MALLOC)
  const thread_cache& c = cache;
  if (c.alive) s.thread_bytes = c.bytes();
#endif
  return s;
}

void reset_frame_cache_peak() noexcept {
  // relaxed: counters.
  totals.peak.store(totals.bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace spindle::core
