// Allocation of coroutine frames and other small per-task objects.
//
// Tasks are allocated and freed at very high rates (skynet: 1.1M tasks in tens of ms), often
// freed on a different thread than the one that allocated them. A thread-local cache per size
// class (64-byte steps up to 1 KiB) serves both sides without atomics; caches balance through a
// global depot of fixed-size batches (src/core/frame_allocator.cpp has the details). Larger
// requests go straight to malloc.
//
// Every block carries a 16-byte header with its size class, so `deallocate` needs no size.
// Under AddressSanitizer or ThreadSanitizer the cache is bypassed (plain malloc/free) so the
// sanitizers see every allocation's real lifetime.
#pragma once

#include <cstddef>

namespace spindle::core {

void* allocate_frame(std::size_t size);
void deallocate_frame(void* pointer) noexcept;

}  // namespace spindle::core
