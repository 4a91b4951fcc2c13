// The task table: every live spawned task has a slot; ids are (slot index, serial).
//
// Why: shutdown must find tasks that are suspended forever (no queue holds them) to destroy
// them; diagnostics list live tasks; and ids must be generational, so an id kept after its task
// finished never names the newer task that reuses the slot (T2).
//
// Layout. Slots live in chunks of `chunk_slots`; chunk pointers sit in a fixed array, published
// once (release) and never moved, so a slot's address is stable for the runtime's life. Each
// chunk belongs to one shard: shard i < executors belongs to executor i; the last shard serves
// threads that are not workers and is guarded by a mutex.
//
// Allocation and release. A shard's owner pops free slots from its private free list with no
// atomics. A slot released on its owner's thread goes straight back to that list; released
// anywhere else it is pushed on the shard's `returned` stack (lock-free push by CAS; the owner
// takes the whole stack with one exchange when its private list runs dry, so there is no ABA).
// A slot's serial is incremented on release, so (index, serial) ids are never reused while the
// 32-bit serial does not wrap for one slot.
//
// Records (task_record.hpp). Each slot also holds its task's record, which outlives the task (slots
// live as long as the host), so a snapshot reads it on any thread while the task runs. A reader
// validates what it copied seqlock style: it reads the serial and `task` (acquire), the fields
// (relaxed), then, after an acquire fence, the serial and `task` again; a change means the task
// completed (and the slot may hold another task): the copy is dropped. The writer side: insert
// issues a release fence between the slot's previous release (the serial's advance in erase) and
// the new occupant's field stores, so a reader that sees any new field sees the serial moved.
//
// Concurrency contract: `task` and `serial` of an occupied slot are written by the allocating
// thread before the task is published to any queue (the queue's release orders them), and the
// task's own id (and table pointer) before `task` (release): the shutdown scan, which runs after
// every worker stopped and every outside spawner left the gate (core/runtime_core.hpp), finds
// only tasks that know where they are.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "spindle/core/atomic.hpp"
#include "spindle/task/task_record.hpp"

namespace spindle {

namespace detail {

class spawned_task_base;

class task_table {
 public:
  static constexpr std::uint32_t chunk_slots = 1024;
  static constexpr std::uint32_t no_slot = ~0u;

  // `executors`: number of executor shards (ids 0..executors-1); one more shard is added for
  // threads that are not workers.
  task_table(std::uint32_t executors, std::uint32_t max_chunks = 1u << 16);
  ~task_table();
  task_table(const task_table&) = delete;
  task_table& operator=(const task_table&) = delete;

  // Occupies a slot for `t` (shard: the calling executor, or the foreign shard). Writes its id to
  // `id` before `t` becomes visible in the slot: a scan that finds `t` finds it knowing its id.
  // Fills the slot's record (spawn location, parent, creation time) before publishing `t`, and
  // returns the record, which the task updates while it lives. With `record` false (records
  // off), only marks the record `unrecorded` and returns null.
  task_record* insert(spawned_task_base* t, std::int32_t executor_index, task_id& id,
                      const spawn_location& where, std::uint64_t parent, std::uint64_t now_ns,
                      bool record = true);
  // Frees the slot of id (its serial advances). `executor_index` is the caller's (or -1).
  void erase(task_id id, std::int32_t executor_index) noexcept;
  // True if `id` still names a live task.
  bool contains(task_id id) const noexcept;

  // Shutdown scan (all workers stopped): calls f(task) for every occupied slot.
  template <class F>
  void for_each_live(F&& f) {
    const std::uint32_t chunks = chunk_count_.load(std::memory_order_acquire);
    for (std::uint32_t c = 0; c < chunks; ++c) {
      chunk* ch = chunks_[c].load(std::memory_order_acquire);
      for (std::uint32_t i = 0; i < chunk_slots; ++i) {
        if (spawned_task_base* t = ch->slots[i].task.load(std::memory_order_acquire)) f(t);
      }
    }
  }
  // Diagnostics (any thread, while tasks run): the id of the live task whose runnable is `r`,
  // by a scan that only compares pointers (r itself is never dereferenced: it may be gone).
  // False if no slot holds it. The caller confirms that `r` stayed alive across the call.
  bool find_runnable(const void* r, task_id& id) const noexcept;
  // Snapshot readers (any thread, while the host runs): copies the record of the task in slot
  // `index` into `out` if the slot is occupied and stayed so throughout (see "Records").
  // `now_ns`: the record clock's now (task_record.hpp), for ages.
  bool read_record(std::uint32_t index, task_info& out, std::uint64_t now_ns) const noexcept;
  // Slots that may be occupied: [0, slot_capacity()).
  std::uint32_t slot_capacity() const noexcept {
    // acquire: the chunks below the count are published.
    return chunk_count_.load(std::memory_order_acquire) * chunk_slots;
  }
  // Occupied slots, by a scan: exact once workers stopped, a snapshot while they run.
  std::size_t live_count() const noexcept;

 private:
  // Line-aligned: a task's hot record fields share the slot's first line (task_record).
  struct alignas(core::cache_line_size) slot {
    // acquire/release on `task` only for the cross-thread reads documented above.
    std::atomic<spawned_task_base*> task{nullptr};
    std::atomic<std::uint32_t> serial{0};
    std::uint32_t next_free = no_slot;  // link in a free list / returned stack
    task_record record;  // see "Records"
  };
  static_assert(sizeof(slot) == 3 * core::cache_line_size, "task_record's layout: three lines");
  static_assert(offsetof(slot, record) + offsetof(task_record, busy_ns) == core::cache_line_size,
                "task_record's layout: the hot fields fill the slot's first line");
  struct chunk {
    slot slots[chunk_slots];
    std::uint32_t shard = 0;
  };
  struct alignas(core::cache_line_size) shard_state {
    std::uint32_t free_head = no_slot;  // owner only (foreign shard: under mutex)
    std::atomic<std::uint32_t> returned{no_slot};
    std::mutex mutex;  // used by the foreign shard only
  };

  slot& slot_at(std::uint32_t index) const noexcept {
    return chunks_[index / chunk_slots].load(std::memory_order_relaxed)->slots[index % chunk_slots];
  }
  std::uint32_t allocate_slot(std::uint32_t shard);
  void add_chunk(std::uint32_t shard);

  std::uint32_t executors_;
  std::uint32_t max_chunks_;
  std::unique_ptr<shard_state[]> shards_;
  std::unique_ptr<std::atomic<chunk*>[]> chunks_;
  std::atomic<std::uint32_t> chunk_count_{0};
  std::mutex chunk_mutex_;
};

}  // namespace detail
}  // namespace spindle
