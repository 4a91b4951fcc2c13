// Tracing (SPEC G3; docs/design/diagnostics.md, "Tracing (G3)"): fixed-size binary events in
// per-executor ring buffers, a flight recorder that always holds the last N events of each
// executor, read from other threads while the executors write.
//
// Who takes part
//   - event points: one inline call each (trace_event below; trace_begin/trace_end for the two
//     ends of a slice, a poll or a park, whose end is recorded iff its begin was) in the
//     executor loop (park, unpark, steal), the task layer (spawn, poll start/end, wake, task end), fork-join
//     (promotion, theft, merge), actors (send, receive), the reactors (I/O submit, complete)
//     and the timer service (fire). While no runtime of the process traces, an event point
//     costs ONE relaxed load of `trace_active_recorders` and a not-taken branch; built with
//     -DSPINDLE_TRACING=OFF it costs nothing (the call compiles to nothing);
//   - the owner of a ring: an executor's worker thread records into its own ring (installed by
//     trace_attach_thread at the top of its loop). Owner-only: plain stores of the owner's head,
//     release stores of the payload words, no read-modify-write;
//   - threads that are not executors (a spawn or a wake from a plain thread, a dispatcher's
//     submit, an actor send from main, an embedded executor's host thread) record into ONE
//     process-wide ring, `foreign`, under a mutex (they are rare and never on an executor's hot
//     path). Each such thread gets a small number (its "thread" in the export). Every runtime's
//     export includes the foreign ring's events in its window;
//   - readers (trace_recorder::collect, any thread, any time): copy events without stopping
//     the writer; an event the writer overwrote while it was being copied is dropped, never
//     misread (see "Torn events").
//
// Event (32 bytes, four 64-bit words):
//   w0 = timestamp in ticks of the trace clock (see below);
//   w1 = kind (8 bits) | executor (16 bits: its index, or foreign_thread_flag | thread number)
//        | aux (32 bits, e.g. a queue depth, an opcode, an I/O result);
//   w2 = id (the task, actor, descriptor, ... the event is about);
//   w3 = ref (a second identity: the message, the delegated work, the I/O operation, the timer),
//        which the exporter uses to pair the two ends of a flow.
//
// Torn events. The ring keeps two counters besides the owner's own head: `begun` (positions
// whose writing has started: p+1 before the words of event p are stored) and `published`
// (p+1 after they are). A reader loads `published` (acquire), copies positions
// [published - capacity, published) with acquire loads, then loads `begun`: if any word it read
// belonged to a newer event (one that overwrote the slot), its acquire load synchronised with
// that word's release store, which the writer issued after advancing `begun`, so `begun` now
// shows it; positions q with q + capacity < begun may have been overwritten and are dropped.
// (Acquire/release rather than stand-alone fences: the atomics layer's TSan regime does not
// model fences; on x86 both are plain moves.)
//
// Leaf functions. An event point's cold call still costs a function that makes no other call on
// its hot path: the compiler keeps the values it needs after the call in callee-saved registers
// and saves them on every path (measured on actor_detail::push_message: 30 instructions
// untraced, 40 with its event point). Such a function tests trace_active() once and tail-calls
// a traced copy of itself (a template on `traced`), so its untraced path is the compiled-out one
// plus a load and a branch.
//
// Signals. A ping handler (executor.hpp, "Pings": fork-join promotes work from it) may record
// on the owner's thread while the owner is in the middle of recording: `writing` is set across
// a write, and an event from a handler that interrupted one is dropped.
//
// Clock. The invariant TSC where the CPU has one (rdtsc: ~9 ns against ~22 ns for
// clock_gettime(CLOCK_MONOTONIC) on the development machine, measured), else the monotonic
// clock in nanoseconds; readers convert ticks to monotonic nanoseconds with a calibration
// taken at process start and refreshed at every read.
//
// Capacity. `diagnostics_options::trace_events_per_executor` events per executor (rounded up to
// a power of two), oldest overwritten. Buffers are allocated when tracing is first switched on
// (an idle, untraced runtime holds none).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spindle/core/atomic.hpp"
#include "spindle/core/diagnostics_options.hpp"

#ifndef SPINDLE_TRACING
#define SPINDLE_TRACING 1
#endif

namespace spindle::core {

class executor;
class trace_recorder;

enum class trace_kind : std::uint8_t {
  none = 0,
  spawn,          // id: task; on the spawning thread. Flow: spawn -> the task's first poll
  poll_start,     // id: task; aux: the executor's local queue depth
  poll_end,       // ends the thread's innermost poll (id 0: `t` may be gone by then)
  task_end,       // id: task
  wake,           // id: task
  steal,          // id: the victim executor; aux: the thief's local queue depth after the theft
  park,           // aux: the local queue depth
  unpark,
  fork_promote,   // ref: the delegated work offered. Flow: promotion -> theft
  fork_theft,     // ref: the delegated work taken by another executor
  fork_merge,     // ref: the delegated work whose result was merged
  actor_send,     // id: the actor; ref: the envelope. Flow: send -> receive
  actor_receive,  // id: the actor; ref: the envelope
  io_submit,      // id: descriptor; ref: the operation; aux: opcode. Flow: submit -> complete
  io_complete,    // id: descriptor; ref: the operation; aux: the result
  timer_fire,     // ref: the timer entry
  count_
};
const char* trace_kind_name(trace_kind kind) noexcept;

// Marks the executor field of an event from a thread that is not an executor.
inline constexpr std::uint16_t foreign_thread_flag = 0x8000;

// Number of recorders (runtimes) with tracing on, in the whole process: the event points'
// one relaxed load.
extern std::atomic<std::uint32_t> trace_active_recorders;

// The out-of-line half of trace_event (trace.cpp): the ring of this thread, or the foreign one.
[[gnu::cold]] void trace_record(trace_kind kind, std::uint64_t id, std::uint64_t ref,
                              std::uint32_t aux) noexcept;

// Whether some runtime traces: the event points' test, for a function that splits itself into
// an untraced and a traced copy (see "Leaf functions"). False when compiled out.
inline bool trace_active() noexcept {
#if SPINDLE_TRACING
  // relaxed: a switch; an event point that sees it late records one event more or less.
  return trace_active_recorders.load(std::memory_order_relaxed) != 0;
#else
  return false;
#endif
}

// THE event point. One relaxed load while no runtime traces; nothing at all when compiled out.
inline void trace_event(trace_kind kind, std::uint64_t id, std::uint64_t ref = 0,
                        std::uint32_t aux = 0) noexcept {
#if SPINDLE_TRACING
  // relaxed: a switch; an event point that sees it late records one event more or less.
  if (trace_active_recorders.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    trace_record(kind, id, ref, aux);
  }
#else
  (void)kind, (void)id, (void)ref, (void)aux;
#endif
}

// Slices (a poll, a park): their end is recorded iff their begin was, whatever the switches do
// in between. A switch flipped inside a poll would otherwise leave a begin without its end (off)
// or an end without its begin (on), and the export would pair the wrong ends into slices that
// overlap their neighbours (issue 15). trace_begin is the begin's event point (one relaxed load
// while no runtime traces) and says whether it recorded; trace_end takes that answer, a local:
// no further load, and nothing at all when the begin was not recorded.
[[gnu::cold]] bool trace_record_begin(trace_kind kind, std::uint64_t id) noexcept;
[[gnu::cold]] void trace_record_end(trace_kind kind) noexcept;

[[nodiscard]] inline bool trace_begin(trace_kind kind, std::uint64_t id) noexcept {
#if SPINDLE_TRACING
  // relaxed: a switch, as in trace_event.
  if (trace_active_recorders.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    return trace_record_begin(kind, id);
  }
#else
  (void)kind, (void)id;
#endif
  return false;
}
// `begun`: what the matching trace_begin returned (on the same thread); `kind`: poll_end or
// unpark.
inline void trace_end(bool begun, trace_kind kind) noexcept {
#if SPINDLE_TRACING
  if (begun) [[unlikely]] trace_record_end(kind);
#else
  (void)begun, (void)kind;
#endif
}

// Identity of a pointer in an event (the message, the work, the operation).
inline std::uint64_t trace_ref(const void* p) noexcept {
  return std::uint64_t(reinterpret_cast<std::uintptr_t>(p));
}

// One event as read back (nanoseconds on the monotonic clock).
struct trace_record_view {
  std::uint64_t ns = 0;
  trace_kind kind = trace_kind::none;
  std::uint16_t executor = 0;
  std::uint32_t aux = 0;
  std::uint64_t id = 0;
  std::uint64_t ref = 0;
};

// What a reader copied: each ring's events in the order they were written (so time-ordered per
// thread), plus what the exporter needs to label them.
struct trace_capture {
  struct ring_events {
    std::uint16_t executor = 0;  // index, or foreign_thread_flag (then per-event numbers)
    std::vector<trace_record_view> events;
    std::uint64_t overwritten = 0;  // events lost to the ring's capacity before the window
    std::uint64_t torn = 0;         // events dropped because the writer overwrote them meanwhile
  };
  std::vector<ring_events> rings;
  std::uint64_t window_start_ns = 0;  // monotonic ns: events before it were left out
  std::uint64_t taken_at_ns = 0;      // monotonic ns when the copy was taken
  std::uint32_t executors = 0;        // executor rings that exist (0..executors-1)
  std::string thread_label = "executor";  // their threads' names: "<label> <index>"
  std::string reason;                 // why it was taken (a dump's reason; empty: on request)
};

// One ring: a writer (the owner executor, or whoever holds the foreign mutex) and readers.
class trace_ring {
 public:
  trace_ring() = default;
  trace_ring(const trace_ring&) = delete;
  trace_ring& operator=(const trace_ring&) = delete;
  ~trace_ring();

  // Allocates the buffer if there is none (any thread, under the recorder's mutex).
  void allocate(std::uint32_t capacity);
  bool allocated() const noexcept {
    return buffer_.load(std::memory_order_acquire) != nullptr;  // acquire: the allocation
  }

  // The writer: records one event stamped now (the thread that owns the ring right now).
  // False if it did not (no buffer yet, or a signal handler interrupted a write: "Signals").
  bool write(trace_kind kind, std::uint16_t executor, std::uint32_t aux, std::uint64_t id,
             std::uint64_t ref) noexcept;
  // Any thread: appends this ring's events stamped at or after `since_ticks` to `out`.
  void read(std::uint64_t since_ticks, trace_capture::ring_events& out,
            std::vector<std::uint64_t>& ticks) const;

  // Owner-side state the recorder fills in.
  trace_recorder* owner = nullptr;
  executor* executor_of = nullptr;  // for queue depths; null for the foreign ring
  std::uint16_t executor_index = 0;

 private:
  // Slots: 4 words each. Published once (release) by allocate; freed by the destructor.
  std::atomic<std::atomic<std::uint64_t>*> buffer_{nullptr};
  std::uint64_t mask_ = 0;                 // capacity - 1; written before buffer_ is published
  std::uint64_t head_ = 0;                 // writer-only: the next position
  std::atomic<bool> writing_{false};       // writer's thread only (signal re-entry guard)
  alignas(cache_line_size) std::atomic<std::uint64_t> begun_{0};
  std::atomic<std::uint64_t> published_{0};
};

// A runtime's tracing: a ring per executor, the on/off switch, the flight-recorder dumps.
class trace_recorder {
 public:
  trace_recorder(std::uint32_t max_executors, const diagnostics_options& options);
  ~trace_recorder();
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;

  // Switches recording on or off (any thread). On allocates the rings of the executors that
  // exist (and of those that start later).
  void set_enabled(bool on);
  bool enabled() const noexcept {
    return enabled_.load(std::memory_order_relaxed);  // relaxed: a switch
  }
  std::uint32_t ring_capacity() const noexcept { return capacity_; }

  // Copies the events of the last `last` (all of them for a zero or huge duration).
  trace_capture collect(std::chrono::nanoseconds last) const;

  // Flight recorder: keeps a copy of the last `last` of events as a dump (why: `reason`), the
  // newest `kept_dumps` of them. Any thread (a warning's, a user's); not on an executor's hot
  // path: it copies every ring. Then calls the dump listener, if one is set.
  void request_dump(std::string reason, std::chrono::nanoseconds last);
  std::vector<trace_capture> dumps() const;
  static constexpr std::size_t kept_dumps = 4;
  // Called (on the dumping thread) after each dump; set by the diagnostics layer.
  using dump_listener = void (*)(void* context, const trace_capture& dump);
  void set_dump_listener(dump_listener listener, void* context);

  // Worker thread, at the top of its loop: this thread records into executor `index`'s ring.
  // `owner` (null for an embedded executor) gives the queue depths.
  void attach(executor* owner, std::uint32_t index);
  // What the export calls the rings' threads ("executor" unless set; before any reader).
  void set_thread_label(std::string label) { thread_label_ = std::move(label); }
  trace_ring& ring(std::uint32_t index) noexcept { return rings_[index]; }
  std::uint32_t attached_executors() const noexcept {
    return attached_.load(std::memory_order_acquire);  // acquire: pairs with attach's release
  }

 private:
  const std::uint32_t max_executors_;
  const std::uint32_t capacity_;
  std::unique_ptr<trace_ring[]> rings_;
  std::atomic<bool> enabled_{false};
  std::atomic<std::uint32_t> attached_{0};  // 1 + highest index attached
  mutable std::mutex mutex_;                // allocation, switching, dumps
  std::vector<trace_capture> dumps_;        // guarded by mutex_
  std::string thread_label_ = "executor";   // set before readers exist
  dump_listener listener_ = nullptr;        // guarded by mutex_
  void* listener_context_ = nullptr;
};

// The calling worker thread records into `recorder`'s ring for `owner` (executor loop, once).
void trace_attach_thread(trace_recorder& recorder, executor& owner, std::uint32_t index) noexcept;
// The calling thread no longer records into a ring of its own (end of the executor loop).
void trace_detach_thread() noexcept;

// A thread that records into ring 0 of `recorder` for a while: an embedded executor's tick (the
// host's thread is no executor). One relaxed load while no runtime traces; restores the
// thread's previous ring at the end of the scope.
trace_ring* trace_exchange_thread_ring(trace_ring* ring) noexcept;
class trace_thread_scope {
 public:
  explicit trace_thread_scope(trace_recorder& recorder) noexcept {
#if SPINDLE_TRACING
    // relaxed: a switch, as in trace_event; a tick that starts untraced stays so.
    if (trace_active_recorders.load(std::memory_order_relaxed) != 0) [[unlikely]] {
      previous_ = trace_exchange_thread_ring(&recorder.ring(0));
      swapped_ = true;
    }
#else
    (void)recorder;
#endif
  }
  ~trace_thread_scope() {
    if (swapped_) trace_exchange_thread_ring(previous_);
  }
  trace_thread_scope(const trace_thread_scope&) = delete;
  trace_thread_scope& operator=(const trace_thread_scope&) = delete;

 private:
  trace_ring* previous_ = nullptr;
  bool swapped_ = false;
};

// Monotonic nanoseconds of a tick count of the trace clock (any thread).
std::uint64_t trace_ticks_to_ns(std::uint64_t ticks) noexcept;
// Whether the trace clock is the TSC (else: monotonic nanoseconds).
bool trace_clock_is_tsc() noexcept;

// Flight recorder, for the warnings (G4): dumps the last `last` of the CALLING thread's
// runtime (on an executor thread), or of every runtime that traces (elsewhere).
void trace_dump_request(const char* reason,
                        std::chrono::nanoseconds last = std::chrono::milliseconds(100)) noexcept;

}  // namespace spindle::core
