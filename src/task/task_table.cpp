// Task table: see include/spindle/task/task_table.hpp for the design and invariants.
#include "spindle/task/task_table.hpp"

#include <algorithm>

#include "spindle/core/errors.hpp"
#include "spindle/task/spawned_task.hpp"

namespace spindle::detail {

task_table::task_table(std::uint32_t executors, std::uint32_t max_chunks)
    : executors_(executors),
      max_chunks_(max_chunks),
      shards_(std::make_unique<shard_state[]>(executors + 1)),
      chunks_(std::make_unique<std::atomic<chunk*>[]>(max_chunks)) {
  for (std::uint32_t i = 0; i < max_chunks_; ++i) chunks_[i].store(nullptr, std::memory_order_relaxed);
}

task_table::~task_table() {
  const std::uint32_t chunks = chunk_count_.load(std::memory_order_relaxed);
  for (std::uint32_t c = 0; c < chunks; ++c) delete chunks_[c].load(std::memory_order_relaxed);
}

void task_table::add_chunk(std::uint32_t shard) {
  std::lock_guard lock(chunk_mutex_);
  const std::uint32_t index = chunk_count_.load(std::memory_order_relaxed);  // relaxed: under lock
  if (index >= max_chunks_) throw std::bad_alloc();
  auto* ch = new chunk;
  ch->shard = shard;
  // Thread the new slots onto the shard's free list (the caller owns it).
  const std::uint32_t base = index * chunk_slots;
  for (std::uint32_t i = 0; i < chunk_slots; ++i) {
    ch->slots[i].next_free = i + 1 < chunk_slots ? base + i + 1 : shards_[shard].free_head;
  }
  // release: the chunk's contents are visible to whoever loads the pointer.
  chunks_[index].store(ch, std::memory_order_release);
  chunk_count_.store(index + 1, std::memory_order_release);
  shards_[shard].free_head = base;
}

std::uint32_t task_table::allocate_slot(std::uint32_t shard) {
  shard_state& s = shards_[shard];
  if (s.free_head == no_slot) {
    // acquire: pairs with the release CAS in erase, making the pushed links visible.
    s.free_head = s.returned.exchange(no_slot, std::memory_order_acquire);
    if (s.free_head == no_slot) add_chunk(shard);
  }
  const std::uint32_t index = s.free_head;
  s.free_head = slot_at(index).next_free;
  return index;
}

task_record* task_table::insert(spawned_task_base* t, std::int32_t executor_index, task_id& id,
                                const spawn_location& where, std::uint64_t parent,
                                std::uint64_t now_ns, bool record) {
  const bool foreign = executor_index < 0 || std::uint32_t(executor_index) >= executors_;
  const std::uint32_t shard = foreign ? executors_ : std::uint32_t(executor_index);
  std::uint32_t index;
  if (foreign) {
    std::lock_guard lock(shards_[shard].mutex);
    index = allocate_slot(shard);
  } else {
    index = allocate_slot(shard);
  }
  slot& s = slot_at(index);
  id = {index, s.serial.load(std::memory_order_relaxed)};  // relaxed: our slot, written by erase
  // release: a snapshot reader that sees one of the record's new values also sees the serial's
  // advance (or `task` cleared) by the erase that freed the slot ("Records").
  std::atomic_thread_fence(std::memory_order_release);
  if (record) {
    s.record.start(where, parent, foreign ? no_executor : std::uint16_t(shard), now_ns);
  } else {
    // relaxed: published by the release store of `task` below, as start() is.
    s.record.state.store(std::uint8_t(task_state::unrecorded), std::memory_order_relaxed);
  }
  // release: the task's id and table pointer are visible to whoever finds it here (header),
  // and the record's start to a reader that acquires `task`.
  s.task.store(t, std::memory_order_release);
  return record ? &s.record : nullptr;
}

bool task_table::read_record(std::uint32_t index, task_info& out, std::uint64_t now_ns) const noexcept {
  const slot& s = slot_at(index);
  // acquire: the record's start (written before `task`) is visible.
  const std::uint32_t serial = s.serial.load(std::memory_order_acquire);
  const spawned_task_base* task = s.task.load(std::memory_order_acquire);
  if (task == nullptr) return false;
  const task_record& r = s.record;
  // relaxed everywhere below: validated by the re-read after the fence.
  constexpr auto relaxed = std::memory_order_relaxed;
  out.id = {index, serial};
  // acquire: as for the state below.
  if (r.state.load(std::memory_order_acquire) == std::uint8_t(task_state::unrecorded)) {
    out = task_info{};
    out.id = {index, serial};
    out.state = task_state::unrecorded;
    // The re-read, as below: the slot may have been reused by a recorded task meanwhile.
    std::atomic_thread_fence(std::memory_order_acquire);
    return s.serial.load(std::memory_order_relaxed) == serial &&
           s.task.load(std::memory_order_relaxed) == task;
  }
  if (!r.read_name(out.name)) out.name[0] = '\0';  // renamed while read: shown unnamed
  out.file = r.file.load(relaxed);
  out.function = r.function.load(relaxed);
  out.line = r.line.load(relaxed);
  const std::uint64_t parent = r.parent.load(relaxed);
  out.has_parent = parent != no_parent;
  out.parent = {std::uint32_t(parent >> 32), std::uint32_t(parent)};
  out.executor = r.executor.load(relaxed);
  // The fields are read one by one while the owner writes them. A poll that ends between the
  // read of the state ("running", from its start) and the read of busy_ns (which then holds the
  // whole poll) would be counted twice, once more as the running stretch below: busy + scheduled
  // above the age by up to a poll, when the reader is descheduled in between. Such a change moves
  // the state or the poll count, so the record is read again when the re-read sees them moved (a
  // few times: a task that changes faster than we read is shown as last read).
  std::uint64_t created = 0, poll_started = 0, suspended = 0;
  for (int reads_left = 4;; --reads_left) {
    // acquire: pairs with the record's release of each state, so the stamps read below are at
    // least those the state was published with (task_record.hpp).
    out.state = task_state(r.state.load(std::memory_order_acquire));
    out.waker_registered =
        out.state == task_state::suspended && r.waker_registered.load(relaxed) != 0;
    if (out.state == task_state::suspended) {
      out.waiting_on = {spindle::wait_kind(r.wait_kind.load(relaxed)), r.wait_object.load(relaxed),
                        r.wait_number.load(relaxed)};
    } else {
      out.waiting_on = {};
    }
    out.polls = r.polls.load(relaxed);
    out.wakes = r.wakes.load(relaxed);
    out.self_wakes = r.self_wakes.load(relaxed);
    out.busy_ns = r.busy_ns.load(relaxed);
    // acquire: pairs with on_poll_start's release; the poll start read below is then the one
    // that ended the wait this count includes.
    out.scheduled_ns = r.scheduled_ns.load(std::memory_order_acquire);
    created = r.created_ns.load(relaxed);
    out.last_wake_ns = r.last_wake_ns.load(relaxed);
    poll_started = r.poll_started_ns.load(relaxed);
    suspended = r.suspended_ns.load(relaxed);
    // acquire: orders the loads above before the re-reads (seqlock reader).
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.serial.load(relaxed) != serial || s.task.load(relaxed) != task) return false;
    if (reads_left == 1 || (r.state.load(relaxed) == std::uint8_t(out.state) &&
                            r.polls.load(relaxed) == out.polls)) {
      break;
    }
  }
  // Derived times. The current poll (or wait for a poll) counts as busy (scheduled) time so far.
  // Every stamp comes from the host's record clock, as `now_ns` must; a stamp written after the
  // caller read the clock moves `now` up to it, so busy + scheduled (disjoint stretches between
  // stamps, all after `created`) never exceeds the age.
  now_ns = std::max({now_ns, created, out.last_wake_ns, poll_started, suspended});
  out.age_ns = now_ns > created ? now_ns - created : 0;
  if (out.state == task_state::running && now_ns > poll_started) out.busy_ns += now_ns - poll_started;
  // Fields are read one by one, so a reader may see "scheduled" with the stamps of the poll that
  // has just begun (whose start already counted the wait): a poll started since the last wake
  // means the wait is counted.
  if (out.state == task_state::scheduled && now_ns > out.last_wake_ns &&
      poll_started < out.last_wake_ns) {
    out.scheduled_ns += now_ns - out.last_wake_ns;
  }
  out.state_for_ns =
      out.state == task_state::suspended && now_ns > suspended ? now_ns - suspended : 0;
  const std::uint64_t accounted = out.busy_ns + out.scheduled_ns;
  out.idle_ns = out.age_ns > accounted ? out.age_ns - accounted : 0;
  return true;
}

void task_table::erase(task_id id, std::int32_t executor_index) noexcept {
  slot& s = slot_at(id.index);
  s.task.store(nullptr, std::memory_order_relaxed);  // relaxed: published by the push below
  s.serial.store(id.serial + 1, std::memory_order_relaxed);
  chunk* ch = chunks_[id.index / chunk_slots].load(std::memory_order_relaxed);
  const std::uint32_t shard = ch->shard;
  if (shard < executors_ && executor_index == std::int32_t(shard)) {
    s.next_free = shards_[shard].free_head;  // the owner's private list
    shards_[shard].free_head = id.index;
    return;
  }
  std::atomic<std::uint32_t>& returned = shards_[shard].returned;
  std::uint32_t head = returned.load(std::memory_order_relaxed);  // relaxed: CAS expectation
  do {
    s.next_free = head;
    // release: the link and the cleared slot are visible to the owner's acquire exchange.
  } while (!returned.compare_exchange_weak(head, id.index, std::memory_order_release,
                                           std::memory_order_relaxed));
}

bool task_table::contains(task_id id) const noexcept {
  if (id.index == no_slot || id.index / chunk_slots >= chunk_count_.load(std::memory_order_acquire)) {
    return false;
  }
  const slot& s = slot_at(id.index);
  // relaxed: a snapshot answer; the slot may change right after.
  return s.serial.load(std::memory_order_relaxed) == id.serial &&
         s.task.load(std::memory_order_relaxed) != nullptr;
}

std::size_t task_table::live_count() const noexcept {
  std::size_t total = 0;
  const std::uint32_t chunks = chunk_count_.load(std::memory_order_acquire);  // acquire: chunks
  for (std::uint32_t c = 0; c < chunks; ++c) {
    const chunk* ch = chunks_[c].load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < chunk_slots; ++i) {
      // relaxed: a snapshot count.
      if (ch->slots[i].task.load(std::memory_order_relaxed) != nullptr) ++total;
    }
  }
  return total;
}

}  // namespace spindle::detail

namespace spindle::detail {

bool task_table::find_runnable(const void* r, task_id& id) const noexcept {
  const std::uint32_t chunks = chunk_count_.load(std::memory_order_acquire);  // acquire: chunks
  for (std::uint32_t c = 0; c < chunks; ++c) {
    chunk* ch = chunks_[c].load(std::memory_order_acquire);  // acquire: published once, built
    if (ch == nullptr) continue;
    for (std::uint32_t i = 0; i < chunk_slots; ++i) {
      // relaxed: only the pointer value is compared; nothing is read through it.
      const spawned_task_base* t = ch->slots[i].task.load(std::memory_order_relaxed);
      if (t == nullptr || static_cast<const void*>(static_cast<const core::runnable*>(t)) != r) {
        continue;
      }
      // relaxed: the caller validates that the runnable was the same one throughout.
      id = task_id{c * chunk_slots + i, ch->slots[i].serial.load(std::memory_order_relaxed)};
      return true;
    }
  }
  return false;
}

}  // namespace spindle::detail
