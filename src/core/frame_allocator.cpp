// Frame allocator: thread-local caches per size class, balanced through a global depot.
//
// Participants: every thread that allocates or frees frames (workers, foreign threads).
// Per thread: for each size class a private free list (no atomics). Frees go to the freeing
// thread's list; when a list grows past `cache_limit` blocks, `batch_size` of them move to the
// class's depot (a mutex-protected stack of batches). An allocation that finds its list empty
// takes a whole batch from the depot before falling back to malloc. So a producer thread that
// only allocates (a foreign thread submitting tasks) and consumers that only free (workers) meet
// in the depot once per `batch_size` blocks instead of in malloc's arenas for every block.
//
// Block header: 16 bytes before the block hold its size class (keeps 16-byte alignment).
// Under AddressSanitizer or ThreadSanitizer everything goes straight to malloc/free so the
// sanitizers see each allocation's real lifetime.
#include "spindle/core/frame_allocator.hpp"

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

void* raw_allocate(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

struct thread_cache {
  free_block* lists[class_count] = {};
  std::uint32_t counts[class_count] = {};
  bool alive = true;

  ~thread_cache() {
    alive = false;
    for (std::size_t c = 0; c < class_count; ++c) {
      while (free_block* b = lists[c]) {
        lists[c] = b->next;
        std::free(reinterpret_cast<char*>(b) - header_size);
      }
    }
  }

  // Moves batch_size blocks from the list to the depot.
  void give_batch(std::size_t size_class) noexcept {
    free_block* first = lists[size_class];
    free_block* last = first;
    for (std::uint32_t i = 1; i < batch_size; ++i) last = last->next;
    lists[size_class] = last->next;
    counts[size_class] -= batch_size;
    last->next = nullptr;
    depot& d = depots[size_class];
    std::lock_guard lock(d.mutex);
    batch_link(first) = d.batches;
    d.batches = first;
  }

  // Refills an empty list with a batch from the depot; false if the depot is empty.
  bool take_batch(std::size_t size_class) noexcept {
    depot& d = depots[size_class];
    std::lock_guard lock(d.mutex);
    free_block* first = d.batches;
    if (first == nullptr) return false;
    d.batches = batch_link(first);
    lists[size_class] = first;
    counts[size_class] = batch_size;
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
  char* base = static_cast<char*>(raw_allocate((size_class + 1) * class_step));
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

}  // namespace spindle::core
