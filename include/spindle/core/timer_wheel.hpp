// Timers: a hierarchical timing wheel per executor, and the locked service around it.
//
// Participants
//   - timer_entry: intrusive, lives in whoever waits (an awaiter in a coroutine frame); the wheel
//     never allocates. Its previous_/next_ link it into one slot list, level_/slot_ name that list.
//   - timer_wheel: the data structure, single-threaded.
//   - timer_service: one per executor, a mutex around a wheel plus the injected spindle::clock.
//
// Levels, slots, resolution
//   Time is counted in ticks of 1 ms since the origin given at construction (deadlines before the
//   origin count as tick 0). There are 6 levels of 64 slots; a slot of level L spans 64^L ticks,
//   so level 0 has 1 ms slots over 64 ms, level 1 64 ms slots over ~4 s, level 2 ~4 s slots over
//   ~4.5 min, level 3 ~4.5 min over ~4.8 h, level 4 ~4.8 h over ~12.7 days, level 5 ~12.7 days
//   over ~2.2 years (64^6 ms). The wheel remembers current_tick_, the tick up to which it has
//   expired. An entry due at tick T goes to the level of the highest base-64 digit in which T
//   differs from current_tick_ (level 0 if only the lowest digit differs), in the slot named by
//   T's digit at that level. So every entry on level L lies before the end of current_tick_'s
//   level-L rotation (the next multiple of 64^(L+1) ticks), and the earliest entries are always
//   on the lowest non-empty level.
//   Deadlines beyond the top level's reach are placed as if due 64^6 - 1 ticks ahead (the top
//   slot one rotation away); when that slot comes round they are simply placed again, once per
//   ~2.2 years of wheel time. Deadlines at or before current_tick_ go to the current level-0 slot.
//
// Cascading
//   expire(now) repeatedly takes the earliest non-empty slot: a level-0 slot wholly before now's
//   tick is due entry by entry; the level-0 slot of now's tick itself is due only in part, so its
//   entries are compared with now exactly (deadline <= now) and the due ones moved to a due list
//   first. A slot of level L > 0 whose start has been reached is emptied and its entries placed
//   again relative to the new current tick: they fall to lower levels, so each entry is moved at
//   most 5 times on its way down. Hence an entry fires exactly at the first expire(now) with
//   now >= deadline, never before, and one expire hands out entries in non-decreasing tick order
//   (except entries whose deadline had already passed when inserted: they come first, in any
//   order among themselves; equal ticks come in any order).
//
// Costs
//   insert, remove: O(1). next_deadline: O(levels), a countr_zero on one 64-bit occupancy mask
//   per level until the first non-empty one (when only the top level holds entries, one look at
//   each of its occupied slots, at most 64, because parked far-future entries break slot order
//   there). expire: O(levels) per call plus O(1) amortised per expired entry and per cascade move
//   (at most one move per level per entry); comparing the entries of now's own tick slot costs
//   O(that slot) and happens only once that slot's earliest deadline is due.
//   Each slot keeps a lower bound of its entries' deadlines: exact until its earliest entry is
//   removed, then stale but still a lower bound until the slot is emptied, cascaded or compared. next_deadline() returns the bound of the earliest slot, so it
//   is exact in the absence of removals and never later than the true earliest deadline; a stale
//   bound costs the caller one early expire, which cascades that slot and makes it exact again.
//
// Locking rule: a timer_service is owned by one executor, which alone calls fire_due(); any
// thread may arm or disarm. An arm from another thread calls the owner's hook (set_arm_hook)
// after inserting, so that an owner parked with a timeout computed before the insert wakes and
// computes it again (an actor's send_after from a plain thread, a supervisor's alarm armed from
// another executor: without it they fired at the owner's next wake-up, seconds late or never).
// All three take the service mutex, and fire callbacks run under it, so
// once disarm() returns the entry is neither in the wheel nor being fired: the entry's memory
// (usually inside a suspended coroutine frame) may then be freed.
//
// Periodic entries (the actors' send_interval, actor/actor_timers.hpp): a fire callback may ask
// for its own entry to be armed again, repeat(entry, period), instead of arming it (which would
// take the mutex it runs under, and insert into a wheel in the middle of an expire). fire_due
// inserts such entries after its expire loop, before it lets the mutex go: a disarm() never sees
// a periodic entry between two arms, so it either removes it or waits for the fire to complete.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>

#include "spindle/core/clock.hpp"

namespace spindle::core {

class timer_wheel;

// An intrusive timer: lives inside whoever waits (an awaiter in a coroutine frame).
class timer_entry {
 public:
  // Runs on the owning executor's thread, under the service lock: it must be short and must not
  // arm or disarm timers of the same service (typically it wakes a task).
  using fire_function = void (*)(timer_entry*) noexcept;
  explicit timer_entry(fire_function fire) noexcept : fire_(fire) {}
  timer_entry(const timer_entry&) = delete;
  timer_entry& operator=(const timer_entry&) = delete;

  clock_time deadline() const noexcept { return deadline_; }
  bool linked() const noexcept { return linked_; }  // only meaningful under the service lock

 private:
  friend class timer_wheel;
  friend class timer_service;
  fire_function fire_;
  clock_time deadline_{};
  timer_entry* previous_ = nullptr;
  timer_entry* next_ = nullptr;
  std::uint32_t level_ = 0;
  std::uint32_t slot_ = 0;
  bool linked_ = false;
};

// Not thread-safe; timer_service adds the lock.
class timer_wheel {
 public:
  explicit timer_wheel(clock_time origin);
  // Leaves entries still linked untouched (they may already be gone): callers remove or expire
  // every entry before they destroy the wheel.
  ~timer_wheel();
  timer_wheel(const timer_wheel&) = delete;
  timer_wheel& operator=(const timer_wheel&) = delete;

  // Adds an entry that is not linked; deadline may be in the past (it fires at the next expire).
  void insert(timer_entry& entry, clock_time deadline) noexcept;
  // Unlinks an entry if linked; returns whether it was.
  bool remove(timer_entry& entry) noexcept;
  // Unlinks every entry with deadline <= now and calls on_expired(entry) for each, in deadline
  // order as far as the resolution allows. Returns the number expired.
  // Each entry is unlinked before on_expired sees it, so on_expired may free it; on_expired must
  // not insert or remove entries of this wheel. `now` must not decrease from call to call.
  // If on_expired throws, the entries not yet handed out stay linked and due.
  template <class OnExpired>
  std::size_t expire(clock_time now, OnExpired&& on_expired);
  // Earliest deadline of any linked entry (exact or a lower bound no earlier than the wheel's
  // resolution allows; never later than the true earliest deadline).
  std::optional<clock_time> next_deadline() const noexcept;
  std::size_t size() const noexcept { return size_; }

 private:
  static constexpr unsigned bits_per_level = 6;
  static constexpr unsigned slots_per_level = 1u << bits_per_level;  // 64: one occupancy word
  static constexpr unsigned level_count = 6;
  // level_ of entries on the due list rather than in a slot.
  static constexpr std::uint32_t due_list_level = level_count;

  struct slot_list {
    timer_entry* head = nullptr;
    timer_entry* tail = nullptr;
    // No entry of the list is due earlier (see "Costs" above).
    clock_time earliest_deadline = clock_time::max();
  };
  struct slot_position {
    unsigned level;
    unsigned slot;
    std::uint64_t start_tick;
  };

  std::uint64_t tick_of(clock_time time) const noexcept;
  void place(timer_entry& entry) noexcept;
  void link(timer_entry& entry, std::uint32_t level, std::uint32_t slot, bool at_front) noexcept;
  void unlink(timer_entry& entry) noexcept;
  slot_list& list_of(const timer_entry& entry) noexcept;
  std::optional<slot_position> earliest_occupied_slot() const noexcept;
  void cascade(const slot_position& position) noexcept;
  void move_due_to_due_list(slot_list& list, clock_time now) noexcept;
  timer_entry* pop_front(slot_list& list) noexcept;
  timer_entry* pop_expired(clock_time now) noexcept;

  clock_time origin_;
  std::uint64_t current_tick_ = 0;  // every tick before it has been expired
  std::size_t size_ = 0;
  std::array<std::uint64_t, level_count> occupied_{};  // bit s: slot s of that level non-empty
  // Entries found due by an expire that have not been handed out yet (empty between calls unless
  // on_expired threw).
  slot_list due_;
  std::array<std::array<slot_list, slots_per_level>, level_count> slots_{};
};

template <class OnExpired>
std::size_t timer_wheel::expire(clock_time now, OnExpired&& on_expired) {
  std::size_t count = 0;
  while (timer_entry* e = pop_expired(now)) {
    ++count;
    on_expired(*e);
  }
  return count;
}

class timer_service {
 public:
  explicit timer_service(spindle::clock& source);
  spindle::clock& clock() const noexcept { return clock_; }

  // Any thread. Arms (or re-arms) the entry to fire at `deadline`; then, if a hook is set, calls
  // it (outside the mutex): the owner decides whether the calling thread is its own.
  void arm(timer_entry& entry, clock_time deadline);
  // Before any arm: `hook(context)` runs after every arm (the owning executor's wake-up).
  void set_arm_hook(void (*hook)(void* context) noexcept, void* context) noexcept {
    arm_hook_ = hook;
    arm_hook_context_ = context;
  }
  // Any thread. True if the entry was armed and now will not fire; false if it was not armed
  // (never armed, or already fired: its fire callback has completed).
  bool disarm(timer_entry& entry) noexcept;
  // Owner executor. Fires every entry due at clock().now(); returns how many fired.
  std::size_t fire_due() noexcept;
  // From a fire callback of this service only, for the entry being fired: arms it again, once
  // the callback has returned and before the mutex is released, at deadline + k * period for the
  // smallest k >= 1 that lies after the `now` this fire_due read (missed periods are skipped, the
  // phase is kept: no drift). period must be positive.
  void repeat(timer_entry& entry, clock_duration period) noexcept;
  std::optional<clock_time> next_deadline() const noexcept;
  std::size_t size() const noexcept;

 private:
  spindle::clock& clock_;
  mutable std::mutex mutex_;
  timer_wheel wheel_;
  // Under mutex_, during fire_due only: the time it fires for, and the entries repeat() asked to
  // arm again (linked through next_: they are in no slot list then).
  clock_time firing_now_{};
  timer_entry* repeating_ = nullptr;
  void (*arm_hook_)(void* context) noexcept = nullptr;  // set before use, then read-only
  void* arm_hook_context_ = nullptr;
};

}  // namespace spindle::core
