// task_record: what a snapshot can learn about one live spawned task, kept in the task's slot of
// the task table (task_table.hpp), so a reader on another thread can read it while the task runs,
// suspends or completes (SPEC G1; docs/design/diagnostics.md, "Snapshot (G1)").
//
// Who takes part
//   - the spawning thread: fills the record (spawn_location, parent, name, creation time) before the
//     task is published (task_table::insert's release store of the slot's `task`);
//   - the thread running the task (one at a time; the schedule hand-off orders successive ones):
//     counts polls and busy time, sets the state and what the task waits on when it suspends,
//     renames it (set_task_name);
//   - the one waker that wins a wait (or the task itself, yielding): counts the wake, sets the
//     state `scheduled` and the wake time;
//   - readers (snapshots, on any thread): copy the fields and validate them against the slot
//     (task_table::read_record). They never touch the task itself, which may be freed.
// Every field is a relaxed atomic: each has one writer at a time (the task's owner, or its one
// waker once the task is suspended and registered), and a reader only needs each value whole, not
// a consistent set; the slot's serial (seqlock style) tells it whether the record still belongs
// to the task it started reading. The name is several words: it has its own sequence counter.
//
// Times come from the runtime's coarse clock (runtime_monitor.hpp: one relaxed load, at most one
// monitor tick, service_interval / 4, old) on workers, and from the steady clock elsewhere (an
// embedded executor's thread, plain threads that wake a task). A poll shorter than a tick reads
// as 0 or as one tick; because the ticks do not follow the polls, the sum over many polls is an
// unbiased estimate of the busy time (each poll's expected reading is its length).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "spindle/core/clock.hpp"

namespace spindle {

// Where a task was spawned: every spawn entry point takes one as a defaulted last argument, so
// it names the caller's line. Not std::source_location: clang before 15 cannot provide it with
// libstdc++ (no __builtin_source_location); the __builtin_FILE/LINE/FUNCTION default arguments
// below give the same answer on g++ and clang (the call site of the function whose default
// argument calls current()).
struct spawn_location {
  const char* file = "";
  const char* function = "";
  std::uint32_t line = 0;
  static constexpr spawn_location current(const char* file = __builtin_FILE(),
                                          const char* function = __builtin_FUNCTION(),
                                          std::uint32_t line = __builtin_LINE()) noexcept {
    return spawn_location{file, function, line};
  }
};

// What a task is doing, as a snapshot sees it.
enum class task_state : std::uint8_t {
  scheduled,   // queued to run (spawned, woken or yielded; not running yet)
  running,     // being polled on some thread
  suspended,   // waiting for something (see wait_descriptor)
  completing,  // its body finished; its tidy destructors run
  unrecorded,  // spawned while records were off (diagnostics_options::records): only its id is known
};
const char* to_string(task_state state) noexcept;

// What a suspended task waits on: set by each primitive as the task suspends.
enum class wait_kind : std::uint8_t {
  none,             // nothing described (a custom awaitable)
  yield,            // yield_now / the cooperative budget's yield (a self-wake follows)
  channel_receive,  // object: the channel; number: the waiter's queue position when it queued
  channel_send,     // object: the channel; number: queue position
  mutex,            // object: the mutex; number: queue position (1 = next to get it)
  semaphore,        // object: the semaphore; number: queue position
  event,            // object: the event
  oneshot,          // object: the oneshot
  wait_group,       // object: the wait group
  join,             // object: the joined task's id (index << 32 | serial)
  join_set,         // object: none; waits for any child of a join set
  named,            // waits until no task of a name is live
  slot,             // waits for a task_slot's queue
  sleep,            // number: the deadline (the host clock's nanoseconds since its epoch)
  io,               // object: the file descriptor; number: the core::io_opcode
  turnstile,        // an embedded turnstile's notification
  ask,              // object: the actor's id; waits for its reply
};
const char* to_string(wait_kind kind) noexcept;

struct wait_descriptor {
  wait_kind kind = wait_kind::none;
  std::uint64_t object = 0;
  std::uint64_t number = 0;
};

// Generational id of a spawned task: the slot it occupies and that slot's serial.
struct task_id {
  std::uint32_t index = ~0u;
  std::uint32_t serial = 0;
  friend bool operator==(const task_id&, const task_id&) = default;
};

// task_info::executor of a task spawned from outside the host's threads and not polled yet.
inline constexpr std::uint16_t no_executor = 0xFFFF;

// The largest task name a record keeps (longer names are cut at a character boundary).
inline constexpr std::size_t task_name_capacity = 47;

namespace detail {

// A small process-unique id for a primitive, taken on its first wait (a primitive that never
// makes anyone wait pays nothing but the four bytes). Ids are shared by every kind of primitive.
class lazy_object_id {
 public:
  std::uint32_t get() const noexcept {
    // relaxed: the id is a plain number; a race between two first waiters is settled by the CAS.
    std::uint32_t id = id_.load(std::memory_order_relaxed);
    if (id != 0) [[likely]] return id;
    return assign();
  }

 private:
  std::uint32_t assign() const noexcept;
  mutable std::atomic<std::uint32_t> id_{0};
};

// Nanoseconds for records: the host's record clock (task_host::record_clock: the runtime's
// coarse clock, an embedded executor's tick clock), one relaxed load; the steady clock when the
// host has none. Readers use the steady clock (record times are never ahead of it).
inline std::uint64_t record_now_ns(const std::atomic<std::uint64_t>* clock) noexcept {
  // relaxed: a sample of the time.
  return clock != nullptr ? clock->load(std::memory_order_relaxed) : core::monotonic_nanoseconds();
}

inline std::uint64_t pack_task_id(std::uint32_t index, std::uint32_t serial) noexcept {
  return (std::uint64_t(index) << 32) | serial;
}
inline constexpr std::uint64_t no_parent = ~std::uint64_t(0);

struct task_record {
  template <class T>
  using field = std::atomic<T>;
  // Single-writer counters: load and store, no read-modify-write (see the header comment).
  template <class T>
  static void bump(field<T>& counter, T by = 1) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  // Layout: the fields every poll, suspension and wake writes come first, so that with the
  // slot's task and serial they fill one cache line (task_table::slot is line-aligned, 192 bytes:
  // three lines); a suspension also writes the second, a spawn all three.
  field<std::uint8_t> state{0};      // task_state
  field<std::uint8_t> wait_kind{0};  // spindle::wait_kind; read only while suspended
  // G4 "lost waker": whether the task's last suspension went through a primitive that keeps a
  // waker for it (a primitive's queue, a timer, an I/O operation, a joined task); false for an
  // awaitable that described nothing. Meaningful only while suspended (readers ignore it else).
  field<std::uint8_t> waker_registered{0};
  field<std::uint16_t> executor{0};  // the executor (or table shard) that last polled it
  field<std::uint64_t> polls{0};
  field<std::uint64_t> wakes{0};  // G4: wakes by others and by itself (self_wakes included)
  field<std::uint64_t> last_wake_ns{0};     // G4: when it was last woken (spawn counts as a wake)
  field<std::uint64_t> poll_started_ns{0};  // start of the current poll (while running)
  field<std::uint64_t> scheduled_ns{0};  // sum of waits between a wake and the poll it led to
  // Second line: the suspension's details and the rarer counters.
  field<std::uint64_t> busy_ns{0};        // sum of poll lengths
  field<std::uint64_t> self_wakes{0};     // G4: wakes while it ran (yield_now, budget yields)
  field<std::uint64_t> suspended_ns{0};   // when it last suspended
  field<std::uint64_t> wait_object{0};
  field<std::uint64_t> wait_number{0};
  field<std::uint64_t> created_ns{0};
  field<std::uint64_t> parent{no_parent};  // pack_task_id of the spawning task, or no_parent
  field<const char*> file{nullptr};        // spawn location
  // Third line: the rest of the spawn location and the name.
  field<const char*> function{nullptr};
  field<std::uint32_t> line{0};
  // The name: `name_sequence` is odd while the name changes (its writer is the task's owner).
  field<std::uint32_t> name_sequence{0};
  field<std::uint64_t> name_words[(task_name_capacity + 1) / 8]{};

  // Spawning thread, before publication.
  void start(const spawn_location& where, std::uint64_t parent_id, std::uint16_t shard,
             std::uint64_t now) noexcept {
    state.store(std::uint8_t(task_state::scheduled), std::memory_order_relaxed);
    waker_registered.store(0, std::memory_order_relaxed);
    executor.store(shard, std::memory_order_relaxed);
    line.store(where.line, std::memory_order_relaxed);
    file.store(where.file, std::memory_order_relaxed);
    function.store(where.function, std::memory_order_relaxed);
    parent.store(parent_id, std::memory_order_relaxed);
    polls.store(0, std::memory_order_relaxed);
    wakes.store(0, std::memory_order_relaxed);
    self_wakes.store(0, std::memory_order_relaxed);
    busy_ns.store(0, std::memory_order_relaxed);
    scheduled_ns.store(0, std::memory_order_relaxed);
    created_ns.store(now, std::memory_order_relaxed);
    last_wake_ns.store(now, std::memory_order_relaxed);
    name_words[0].store(0, std::memory_order_relaxed);  // no name (an empty first word)
  }
  // The running task (or its spawner before publication): sets the name.
  void set_name(std::string_view name) noexcept;
  // Reader: copies the name (NUL-terminated) into `out`; false if it changed while read.
  bool read_name(char (&out)[task_name_capacity + 1]) const noexcept;

  // The thread about to poll the task.
  void on_poll_start(std::uint16_t executor_index, std::uint64_t now) noexcept {
    executor.store(executor_index, std::memory_order_relaxed);
    bump(polls);
    const std::uint64_t woken = last_wake_ns.load(std::memory_order_relaxed);
    poll_started_ns.store(now, std::memory_order_relaxed);
    // release: a reader that sees the wait counted (acquire) sees this poll's start too, and so
    // does not count the wait again (task_table::read_record).
    if (now > woken) {
      scheduled_ns.store(scheduled_ns.load(std::memory_order_relaxed) + (now - woken),
                         std::memory_order_release);
    }
    // release: a reader that sees "running" (acquire) sees this poll's count and start, not the
    // previous suspension's time (which would count the whole wait as busy).
    state.store(std::uint8_t(task_state::running), std::memory_order_release);
  }
  // The running task, about to suspend (before it registers anywhere: after that a waker owns
  // the record's wake fields). Ends the poll's busy stretch; a stretch resumes at once if the
  // await completes without suspending (on_continue).
  void on_suspend(const wait_descriptor& what, std::uint64_t now) noexcept {
    const std::uint64_t started = poll_started_ns.load(std::memory_order_relaxed);
    if (now > started) bump(busy_ns, now - started);
    poll_started_ns.store(now, std::memory_order_relaxed);
    suspended_ns.store(now, std::memory_order_relaxed);
    wait_kind.store(std::uint8_t(what.kind), std::memory_order_relaxed);
    wait_object.store(what.object, std::memory_order_relaxed);
    wait_number.store(what.number, std::memory_order_relaxed);
    // G4: a primitive that describes the wait keeps a waker for the task (its queue, a timer,
    // an I/O operation, a joined task); `none` is an awaitable that said nothing.
    waker_registered.store(what.kind != spindle::wait_kind::none &&
                               what.kind != spindle::wait_kind::yield,
                           std::memory_order_relaxed);
    // release: a reader that sees "suspended" sees the wait and its start (as on_poll_start).
    state.store(std::uint8_t(task_state::suspended), std::memory_order_release);
  }
  // The await after on_suspend completed without suspending: the task runs on.
  void on_continue() noexcept {
    state.store(std::uint8_t(task_state::running), std::memory_order_relaxed);
  }
  // The waker that won the wait, or the task itself (self == true: yield).
  void on_wake(bool self, std::uint64_t now) noexcept {
    bump(wakes);
    if (self) bump(self_wakes);
    last_wake_ns.store(now, std::memory_order_relaxed);
    // release: a reader that sees "scheduled" sees this wake's time (as on_poll_start).
    state.store(std::uint8_t(task_state::scheduled), std::memory_order_release);
  }
  // The completing thread, before the slot is freed.
  void on_complete(std::uint64_t now) noexcept {
    const std::uint64_t started = poll_started_ns.load(std::memory_order_relaxed);
    const std::uint8_t was = state.load(std::memory_order_relaxed);
    // Completed in a poll (not abandoned while queued or suspended): the poll's last stretch.
    if (now > started && (was == std::uint8_t(task_state::running) ||
                          was == std::uint8_t(task_state::completing))) {
      bump(busy_ns, now - started);
    }
    poll_started_ns.store(now, std::memory_order_relaxed);
    state.store(std::uint8_t(task_state::completing), std::memory_order_relaxed);
  }
};

}  // namespace detail

// One task as a snapshot saw it. Plain data (no allocation: the embedded executor's snapshot
// fills caller-provided storage).
struct task_info {
  task_id id;
  char name[task_name_capacity + 1] = {};  // empty: unnamed
  const char* file = nullptr;              // spawn location (static strings)
  const char* function = nullptr;
  std::uint32_t line = 0;
  bool has_parent = false;
  task_id parent;  // the task that spawned it, if has_parent
  // The executor that last polled it; before its first poll, the one whose thread spawned it,
  // or no_executor when spawned from another thread.
  std::uint16_t executor = no_executor;
  task_state state = task_state::scheduled;
  wait_descriptor waiting_on;  // meaningful while suspended (kind none otherwise)
  // G4: suspended with a registration someone will wake (false: suspended on an awaitable that
  // published none, or not suspended).
  bool waker_registered = false;
  std::uint64_t polls = 0;
  std::uint64_t wakes = 0;       // G4: every wake, self-wakes included
  std::uint64_t self_wakes = 0;  // G4: wakes while it ran (yields)
  std::uint64_t busy_ns = 0;       // time being polled
  std::uint64_t scheduled_ns = 0;  // time woken but not yet polled
  std::uint64_t idle_ns = 0;       // the rest of its life: age - busy - scheduled
  std::uint64_t age_ns = 0;        // since it was spawned
  std::uint64_t last_wake_ns = 0;  // G4: record clock (steady ns) of its last wake or spawn
  std::uint64_t state_for_ns = 0;  // how long it has been suspended (suspended only)
  // A sleep (waiting_on.kind sleep, whose number is the deadline on the host's clock): the
  // deadline less the host clock's reading taken by the snapshot (<= 0: due). 0 otherwise.
  std::int64_t sleep_left_ns = 0;
};

// "channel#5 receive", "mutex#2 (queued 3rd)", "join task 9.1", "sleep, 12.500 ms left", "read
// fd 7": what the task waits on, for people. Writes at most `capacity` bytes including the NUL.
std::size_t describe_wait(const task_info& task, char* out, std::size_t capacity) noexcept;
// The same from a descriptor alone, which has no reading of the host's clock to measure a sleep's
// deadline against: a sleep is just "sleep" (its absolute deadline, a clock reading, means
// nothing to a person; the task_info form says how long it has left).
std::size_t describe_wait(const wait_descriptor& what, char* out, std::size_t capacity) noexcept;

}  // namespace spindle
