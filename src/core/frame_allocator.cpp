#include "spindle/core/frame_allocator.hpp"

#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPINDLE_PLAIN_MALLOC 1
#endif

namespace spindle::core {
namespace {

constexpr std::size_t header_size = 16;  // keeps blocks 16-byte aligned
constexpr std::size_t class_step = 64;
constexpr std::size_t class_count = 16;  // up to 1024 bytes including the header
constexpr std::size_t cache_limit = 512;
constexpr std::uint32_t large_class = 0xffffffffu;

struct free_block {
  free_block* next;
};

struct thread_cache {
  free_block* lists[class_count] = {};
  std::uint32_t counts[class_count] = {};

  ~thread_cache() {
    for (std::size_t c = 0; c < class_count; ++c) {
      while (free_block* b = lists[c]) {
        lists[c] = b->next;
        std::free(reinterpret_cast<char*>(b) - header_size);
      }
    }
  }
};

thread_local thread_cache cache;

void* raw_allocate(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

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
  if (free_block* b = cache.lists[size_class]) {
    cache.lists[size_class] = b->next;
    --cache.counts[size_class];
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
  if (size_class == large_class || cache.counts[size_class] >= cache_limit) {
    std::free(base);
    return;
  }
  auto* b = static_cast<free_block*>(pointer);
  b->next = cache.lists[size_class];
  cache.lists[size_class] = b;
  ++cache.counts[size_class];
#endif
}

}  // namespace spindle::core
