// The gate to outside threads: per-thread slots and the asymmetric fence. The design is in
// include/spindle/core/outside_gate.hpp.
#include "spindle/core/outside_gate.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <thread>
#include <utility>

namespace spindle::core {
namespace {

char several_gates_marker = 0;  // its address is `several_gates` (thread_slot)

// --- the asymmetric fence ------------------------------------------------------------------------

#if !defined(SPINDLE_TSAN)
// Registers the process for private expedited membarrier, once (a magic static: every caller sees
// the registration finished before it reads true). False where the kernel lacks it or refuses it.
bool membarrier_ready() noexcept {
  static const bool ready = [] {
    const long supported = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }();
  return ready;
}
#endif

// --- the registry of slots -----------------------------------------------------------------------

// A thread's depth inside gates (nested entries count: a wake list may enter several hosts before
// it wakes them) and which gate it is inside: the one it entered first at depth 0, or
// `several_gates` once it entered a second, different one (or a gate it cannot name, for
// enter_unknown_host). A closer waits only for threads inside its own gate or inside several:
// user code may run inside a span (a callable's move constructor, an integration's tick_soon())
// and may block on a lock the thread closing an unrelated gate holds. Written by its thread only;
// read by closers. A line of its own, so that a thread's entries never bounce a line another
// thread writes.
struct alignas(cache_line_size) thread_slot {
  std::atomic<std::uint32_t> depth{0};
  std::atomic<const void*> gate{nullptr};
  thread_slot* next = nullptr;      // registry list, under registry_mutex
  thread_slot* previous = nullptr;
};

// Stands for "more than one gate, or one this thread cannot name".
const void* const several_gates = &several_gates_marker;

std::mutex& registry_mutex() {
  // Never destroyed: threads (detached workers among them) may exit after static destruction.
  static std::mutex* const mutex = new std::mutex;
  return *mutex;
}
thread_slot* registry_head = nullptr;  // guarded by registry_mutex()

void register_slot(thread_slot* slot) {
  std::lock_guard guard(registry_mutex());
  slot->next = registry_head;
  if (registry_head != nullptr) registry_head->previous = slot;
  registry_head = slot;
}

void unregister_slot(thread_slot* slot) noexcept {
  std::lock_guard guard(registry_mutex());
  if (slot->previous != nullptr) {
    slot->previous->next = slot->next;
  } else {
    registry_head = slot->next;
  }
  if (slot->next != nullptr) slot->next->previous = slot->previous;
}

// The slot lives as long as its thread: registered on the first entry, unregistered at exit
// (a thread is never inside a gate when it exits: spans are a few instructions of one call).
struct slot_owner {
  thread_slot slot;
  slot_owner() { register_slot(&slot); }
  ~slot_owner() {
    unregister_slot(&slot);
    my_slot_cleared();
  }
  static void my_slot_cleared() noexcept;
};

// Closers between close_and_wait() and finished(), process-wide (unknown-host entrants, header).
std::atomic<std::uint32_t> closers_in_flight{0};
// How many gates this thread is closing (a shutdown called from inside another's drain nests).
thread_local std::uint32_t closing_here = 0;

// A trivial thread-local pointer (no guard on the hot path); the owner is built on first use.
thread_local thread_slot* my_slot = nullptr;

void slot_owner::my_slot_cleared() noexcept { my_slot = nullptr; }

thread_slot& this_thread_slot() {
  if (my_slot == nullptr) [[unlikely]] {
    static thread_local slot_owner owner;
    my_slot = &owner.slot;
  }
  return *my_slot;
}

// Raises this thread's depth, recording `gate` (see thread_slot). relaxed, both: only this thread
// writes them; the caller's light fence orders them before its read of the closing state.
void raise_depth(thread_slot& slot, const void* gate) noexcept {
  const std::uint32_t depth = slot.depth.load(std::memory_order_relaxed);
  if (depth == 0) {
    slot.gate.store(gate, std::memory_order_relaxed);
  } else if (slot.gate.load(std::memory_order_relaxed) != gate) {
    slot.gate.store(several_gates, std::memory_order_relaxed);
  }
  slot.depth.store(depth + 1, std::memory_order_relaxed);
}

}  // namespace

void asymmetric_fence_light() noexcept {
#if defined(SPINDLE_TSAN)
  fence_seq_cst();
#else
  if (membarrier_ready()) {
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the heavy half makes it a full fence
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
#endif
}

void asymmetric_fence_heavy() noexcept {
#if defined(SPINDLE_TSAN)
  fence_seq_cst();
#else
  if (membarrier_ready()) {
    // Every running thread of the process executes a full barrier before this returns; one that
    // is not running passed one when it was descheduled.
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
  }
  // Not registered (then the light half is a full fence too), or the call failed: a full fence
  // here completes the symmetric handshake only if the light half was one, so a failure after a
  // successful registration is not expected (the kernel documents none but EINVAL/EPERM, which
  // registration rules out).
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

bool outside_gate::enter() noexcept {
  raise_depth(this_thread_slot(), this);
  asymmetric_fence_light();
  // relaxed: ordered after the depth store by the fence pair (header).
  if (closed_.load(std::memory_order_relaxed)) {
    leave();
    return false;
  }
  return true;
}

void outside_gate::leave() noexcept { leave_unknown_host(); }

void outside_gate::enter_unknown_host() noexcept {
  thread_slot& slot = this_thread_slot();
  for (;;) {
    raise_depth(slot, several_gates);
    // A closing thread goes on at once (header: it must not wait for another closer).
    if (closing_here != 0) return;
    asymmetric_fence_light();
    // relaxed: ordered after the depth store by the fence pair, as `closed_` in enter().
    if (closers_in_flight.load(std::memory_order_relaxed) == 0) return;
    // A shutdown is draining somewhere: step out, so it never waits for us, until it finished.
    leave_unknown_host();
    // acquire: a finished closer's drain happens before we touch anything it could have owned.
    while (closers_in_flight.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }
}

void outside_gate::leave_unknown_host() noexcept {
  thread_slot& slot = *my_slot;  // entered: registered already
  // release: what this thread did inside (a push, a wake) happens before the closer's acquire
  // read of the depth; after this store the closer may free the host.
  slot.depth.store(slot.depth.load(std::memory_order_relaxed) - 1, std::memory_order_release);
}

void outside_gate::close_and_wait() noexcept {
  // relaxed, both: ordered before the depth reads by the fence pair (header).
  closers_in_flight.fetch_add(1, std::memory_order_relaxed);
  counted_ = true;
  ++closing_here;
  closed_.store(true, std::memory_order_relaxed);
  asymmetric_fence_heavy();
  // Under the registry mutex no slot goes away while we read it; entrants do not take it (they
  // registered before their first entry), so waiting here holds nobody up.
  // The closing thread's own slot is skipped: a shutdown is never called from inside a span of the
  // same host, and a span of another host on this thread cannot end while this thread waits here.
  std::lock_guard guard(registry_mutex());
  for (thread_slot* slot = registry_head; slot != nullptr; slot = slot->next) {
    if (slot == my_slot) continue;
    // acquire: pairs with leave()'s release. A thread inside another gate only is not waited
    // for (thread_slot); one that left and entered another meanwhile shows that gate.
    for (;;) {
      if (slot->depth.load(std::memory_order_acquire) == 0) break;
      // relaxed: written before the depth it goes with (both before the entrant's fence); a stale
      // value only names a gate the thread has since left, or one it is in: never a wrong exit.
      const void* inside = slot->gate.load(std::memory_order_relaxed);
      if (inside != this && inside != several_gates) break;
      std::this_thread::yield();
    }
  }
}

void outside_gate::finished() noexcept {
  if (!std::exchange(counted_, false)) return;
  --closing_here;
  // release: the drain (every task destroyed) happens before an unknown-host entrant admitted
  // after reading the count.
  closers_in_flight.fetch_sub(1, std::memory_order_release);
}

}  // namespace spindle::core
