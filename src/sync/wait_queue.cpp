// The waiter protocol shared by the sync primitives: include/spindle/sync/wait_queue.hpp.
#include "spindle/sync/wait_queue.hpp"

#include <array>
#include <cstdint>

#include "spindle/core/atomic.hpp"

namespace spindle::detail {
namespace {

// One std::mutex per cache line; 256 stripes keep unrelated primitives mostly apart.
struct alignas(core::cache_line_size) lock_stripe {
  std::mutex lock;
};
constexpr std::size_t stripe_count = 256;
std::array<lock_stripe, stripe_count> stripes;

}  // namespace

std::mutex& sync_lock_for(const void* primitive) noexcept {
  // Fibonacci hashing of the address; the low bits are alignment and carry nothing.
  const auto address = reinterpret_cast<std::uintptr_t>(primitive);
  const std::uint64_t mixed = std::uint64_t(address >> 4) * 0x9E3779B97F4A7C15ull;
  return stripes[mixed >> 56].lock;  // top 8 bits: stripe_count == 256
}

// --- sync_waiter ------------------------------------------------------------------------------

bool sync_waiter::try_cancel() noexcept {
  std::lock_guard guard(*lock_);
  if (outcome_ != outcome::queued) return false;  // a waker (or a destructor) got here first
  queue_->remove(this);
  outcome_ = outcome::cancelled;
  return true;
}

sync_waiter::outcome sync_waiter::finish_wait() {
  if (suspended_) {
    suspended_ = false;
    task_->clear_wait();  // after a budget yield nothing was registered: clears a null wait
  }
  if (outcome_ == outcome::cancelled) throw task_cancelled();
  return outcome_;
}

sync_waiter::outcome sync_waiter::abandon_wait() noexcept {
  if (!suspended_) return outcome::none;
  suspended_ = false;
  std::lock_guard guard(*lock_);
  if (outcome_ == outcome::queued) {
    queue_->remove(this);
    outcome_ = outcome::cancelled;
  }
  return outcome_;
}

// --- wait_queue -------------------------------------------------------------------------------

void wait_queue::complete_all(sync_waiter::outcome result, wake_list& to_wake) noexcept {
  while (sync_waiter* w = pop_front()) to_wake.add(w, result);
}

// --- wake_list --------------------------------------------------------------------------------

void wake_list::add(sync_waiter* w, sync_waiter::outcome result) noexcept {
  w->outcome_ = result;
  // Under the primitive lock: the waiter and its task are alive (header, "Wakers outside").
  const task_host::entry entry = w->task_->host().enter();
  if (entry == task_host::entry::refused) return;  // the host is draining: not woken
  w->host_entered_ = entry == task_host::entry::entered;
  w->next_ = nullptr;
  if (tail_ != nullptr) {
    tail_->next_ = w;
  } else {
    head_ = w;
  }
  tail_ = w;
}

void wake_list::wake_all() noexcept {
  sync_waiter* w = head_;
  head_ = tail_ = nullptr;
  while (w != nullptr) {
    // Read everything needed first: once woken, the waiter's frame may resume and vanish.
    sync_waiter* next = w->next_;
    spawned_task_base* t = w->task_;
    task_host& host = t->host();
    const bool entered = w->host_entered_;
    t->wake();
    if (entered) host.leave();  // alive: its drain waits for this
    w = next;
  }
}

}  // namespace spindle::detail
