// The hierarchical timing wheel and the timer service; the design is described in
// include/spindle/core/timer_wheel.hpp and docs/design/timers.md.
#include "spindle/core/timer_wheel.hpp"
#include "spindle/core/trace.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <chrono>

namespace spindle::core {

namespace {

constexpr std::uint64_t nanoseconds_per_tick =
    std::chrono::duration_cast<clock_duration>(std::chrono::milliseconds(1)).count();

}  // namespace

timer_wheel::timer_wheel(clock_time origin) : origin_(origin) {}

timer_wheel::~timer_wheel() = default;

std::uint64_t timer_wheel::tick_of(clock_time time) const noexcept {
  if (time <= origin_) return 0;
  // Unsigned subtraction: exact even when the signed difference would overflow (an origin far
  // below zero and a deadline of clock_time::max()).
  const std::uint64_t since_origin = static_cast<std::uint64_t>(time.time_since_epoch().count()) -
                                     static_cast<std::uint64_t>(origin_.time_since_epoch().count());
  return since_origin / nanoseconds_per_tick;
}

void timer_wheel::insert(timer_entry& entry, clock_time deadline) noexcept {
  assert(!entry.linked_ && "timer_wheel::insert: the entry is already linked");
  entry.deadline_ = deadline;
  place(entry);
  ++size_;
}

bool timer_wheel::remove(timer_entry& entry) noexcept {
  if (!entry.linked_) return false;
  unlink(entry);
  --size_;
  return true;
}

std::optional<clock_time> timer_wheel::next_deadline() const noexcept {
  std::optional<clock_time> earliest;
  if (due_.head != nullptr) earliest = due_.earliest_deadline;
  if (const auto position = earliest_occupied_slot()) {
    // Below the top level, the earliest slot's entries all come before those of any other slot,
    // so its bound is the wheel's bound. On the top level, entries parked beyond the wheel's
    // reach sit in a slot that was the farthest when they were placed but need not be any more,
    // so every top-level slot counts (at most 64, and only when nothing is due for ~12 days).
    clock_time bound = slots_[position->level][position->slot].earliest_deadline;
    if (position->level == level_count - 1) {
      for (std::uint64_t occupied = occupied_[level_count - 1]; occupied != 0; occupied &= occupied - 1)
        bound = std::min(bound, slots_[level_count - 1][std::countr_zero(occupied)].earliest_deadline);
    }
    earliest = earliest ? std::min(*earliest, bound) : bound;
  }
  return earliest;
}

void timer_wheel::place(timer_entry& entry) noexcept {
  const std::uint64_t tick = tick_of(entry.deadline_);
  if (tick <= current_tick_) {
    // Already late entries go in front, so they are handed out before those due this tick.
    link(entry, 0, current_tick_ % slots_per_level, tick < current_tick_);
    return;
  }
  // Beyond the top level's reach: park it in the farthest top-level slot, which is reached before
  // the deadline and then places the entry again.
  constexpr std::uint64_t wheel_span_ticks = std::uint64_t{1} << (bits_per_level * level_count);
  const std::uint64_t placement_tick = std::min(tick, current_tick_ + wheel_span_ticks - 1);
  // `| (slots_per_level - 1)` puts entries that differ only in the lowest digit on level 0.
  const auto highest_differing_bit =
      static_cast<unsigned>(std::bit_width((current_tick_ ^ placement_tick) | (slots_per_level - 1))) - 1;
  const unsigned level = std::min(highest_differing_bit / bits_per_level, level_count - 1);
  const auto slot = static_cast<std::uint32_t>((placement_tick >> (bits_per_level * level)) % slots_per_level);
  link(entry, level, slot, false);
}

timer_wheel::slot_list& timer_wheel::list_of(const timer_entry& entry) noexcept {
  return entry.level_ == due_list_level ? due_ : slots_[entry.level_][entry.slot_];
}

void timer_wheel::link(timer_entry& entry, std::uint32_t level, std::uint32_t slot, bool at_front) noexcept {
  entry.level_ = level;
  entry.slot_ = slot;
  entry.linked_ = true;
  slot_list& list = list_of(entry);
  if (list.head == nullptr) {
    entry.previous_ = entry.next_ = nullptr;
    list.head = list.tail = &entry;
  } else if (at_front) {
    entry.previous_ = nullptr;
    entry.next_ = list.head;
    list.head->previous_ = &entry;
    list.head = &entry;
  } else {
    entry.previous_ = list.tail;
    entry.next_ = nullptr;
    list.tail->next_ = &entry;
    list.tail = &entry;
  }
  list.earliest_deadline = std::min(list.earliest_deadline, entry.deadline_);
  if (level != due_list_level) occupied_[level] |= std::uint64_t{1} << slot;
}

void timer_wheel::unlink(timer_entry& entry) noexcept {
  slot_list& list = list_of(entry);
  (entry.previous_ != nullptr ? entry.previous_->next_ : list.head) = entry.next_;
  (entry.next_ != nullptr ? entry.next_->previous_ : list.tail) = entry.previous_;
  entry.previous_ = entry.next_ = nullptr;
  entry.linked_ = false;
  if (list.head == nullptr) {
    // Only an empty list resets its bound; otherwise the old bound stays a valid lower bound.
    list.earliest_deadline = clock_time::max();
    if (entry.level_ != due_list_level) occupied_[entry.level_] &= ~(std::uint64_t{1} << entry.slot_);
  }
}

timer_entry* timer_wheel::pop_front(slot_list& list) noexcept {
  timer_entry* entry = list.head;
  unlink(*entry);
  --size_;
  return entry;
}

std::optional<timer_wheel::slot_position> timer_wheel::earliest_occupied_slot() const noexcept {
  for (unsigned level = 0; level < level_count; ++level) {
    const std::uint64_t occupied = occupied_[level];
    if (occupied == 0) continue;
    const unsigned shift = bits_per_level * level;
    const auto current_digit = static_cast<unsigned>((current_tick_ >> shift) % slots_per_level);
    // Level 0 holds entries of the current tick itself; on coarser levels the current digit's
    // slot (and any before it) holds only top-level entries one rotation ahead.
    const unsigned first_slot = level == 0 ? current_digit : (current_digit + 1) % slots_per_level;
    const unsigned slot =
        (first_slot + static_cast<unsigned>(std::countr_zero(std::rotr(occupied, static_cast<int>(first_slot))))) %
        slots_per_level;
    const std::uint64_t level_span = std::uint64_t{1} << (shift + bits_per_level);
    std::uint64_t start_tick = (current_tick_ & ~(level_span - 1)) + (std::uint64_t{slot} << shift);
    if (level > 0 && start_tick <= current_tick_) start_tick += level_span;
    return slot_position{level, slot, start_tick};
  }
  return std::nullopt;
}

void timer_wheel::cascade(const slot_position& position) noexcept {
  slot_list& list = slots_[position.level][position.slot];
  timer_entry* entry = list.head;
  list = slot_list{};
  occupied_[position.level] &= ~(std::uint64_t{1} << position.slot);
  while (entry != nullptr) {
    timer_entry* next = entry->next_;
    place(*entry);
    entry = next;
  }
}

void timer_wheel::move_due_to_due_list(slot_list& list, clock_time now) noexcept {
  clock_time earliest_remaining = clock_time::max();
  for (timer_entry* entry = list.head; entry != nullptr;) {
    timer_entry* next = entry->next_;
    if (entry->deadline_ <= now) {
      unlink(*entry);
      link(*entry, due_list_level, 0, false);
    } else {
      earliest_remaining = std::min(earliest_remaining, entry->deadline_);
    }
    entry = next;
  }
  list.earliest_deadline = earliest_remaining;  // exact again
}

timer_entry* timer_wheel::pop_expired(clock_time now) noexcept {
  if (due_.head != nullptr) return pop_front(due_);
  const std::uint64_t now_tick = tick_of(now);
  while (const auto position = earliest_occupied_slot()) {
    if (position->start_tick > std::max(now_tick, current_tick_)) break;  // nothing due yet
    slot_list& list = slots_[position->level][position->slot];
    if (position->level > 0) {
      // A coarse slot whose start has been reached: spread its entries over the finer levels.
      current_tick_ = position->start_tick;
      cascade(*position);
      continue;
    }
    if (position->start_tick < now_tick) {
      current_tick_ = position->start_tick;  // a whole tick before now: every entry is due
      return pop_front(list);
    }
    // Now's own tick: only the entries with deadline <= now are due.
    if (list.earliest_deadline > now) break;
    move_due_to_due_list(list, now);
    if (due_.head != nullptr) return pop_front(due_);
    break;  // the bound was stale; it is exact now
  }
  current_tick_ = std::max(current_tick_, now_tick);
  return nullptr;
}

// ---------------------------------------------------------------------------------------------

timer_service::timer_service(spindle::clock& source) : clock_(source), wheel_(source.now()) {}

void timer_service::arm(timer_entry& entry, clock_time deadline) {
  {
    std::lock_guard lock(mutex_);
    wheel_.remove(entry);
    wheel_.insert(entry, deadline);
  }
  if (arm_hook_ != nullptr) arm_hook_(arm_hook_context_);
}

bool timer_service::disarm(timer_entry& entry) noexcept {
  std::lock_guard lock(mutex_);
  return wheel_.remove(entry);
}

std::size_t timer_service::fire_due() noexcept {
  // The clock is read before the service mutex is taken, never under it: manual_clock calls its
  // subscribers under its own mutex, and a subscriber may arm a timer (clock mutex, then service
  // mutex); reading the clock under the service mutex would take them in the opposite order.
  const clock_time now = clock_.now();
  std::lock_guard lock(mutex_);
  firing_now_ = now;
  // Fired under the lock, so that disarm() returning false means the callback has completed.
  const std::size_t fired = wheel_.expire(now, [](timer_entry& entry) noexcept {
    trace_event(trace_kind::timer_fire, 0, trace_ref(&entry));
    entry.fire_(&entry);
  });
  // Periodic entries go back in after the expire (it must not see inserts), still under the
  // lock: no disarm() finds one missing between its two arms.
  while (timer_entry* entry = repeating_) {
    repeating_ = entry->next_;
    entry->next_ = nullptr;
    wheel_.insert(*entry, entry->deadline_);
  }
  return fired;
}

void timer_service::repeat(timer_entry& entry, clock_duration period) noexcept {
  // Under mutex_ (we are inside fire_due's expire). The next grid point after firing_now_:
  // deadline + k * period, k >= 1, saturating at the end of time.
  const clock_duration late = firing_now_ - entry.deadline_;
  const auto periods = late < clock_duration::zero() ? 1 : late / period + 1;
  clock_time next = clock_time::max();
  if (periods <= (clock_time::max() - entry.deadline_) / period) {
    next = entry.deadline_ + periods * period;
  }
  entry.deadline_ = next;
  entry.next_ = repeating_;
  repeating_ = &entry;
}

std::optional<clock_time> timer_service::next_deadline() const noexcept {
  std::lock_guard lock(mutex_);
  return wheel_.next_deadline();
}

std::size_t timer_service::size() const noexcept {
  std::lock_guard lock(mutex_);
  return wheel_.size();
}

}  // namespace spindle::core
