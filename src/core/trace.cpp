// Tracing: rings, the foreign ring, the clock, dumps (design: include/spindle/core/trace.hpp).
#include "spindle/core/trace.hpp"

#include <algorithm>
#include <thread>

#include "spindle/core/clock.hpp"
#include "spindle/core/executor.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace spindle::core {

std::atomic<std::uint32_t> trace_active_recorders{0};

namespace {

// --- the clock ----------------------------------------------------------------------------------

bool detect_invariant_tsc() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (unsigned(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  return (d & (1u << 8)) != 0;  // "Invariant TSC": constant rate, runs in every C-state
#else
  return false;
#endif
}

const bool tsc_clock = detect_invariant_tsc();

inline std::uint64_t trace_ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (tsc_clock) return __rdtsc();
#endif
  return monotonic_nanoseconds();
}

// Process-wide anchor for converting ticks to nanoseconds: a (ticks, ns) pair taken at start;
// each conversion pairs it with a fresh one (ticks/ns rate measured over the process' life).
struct clock_anchor {
  std::uint64_t ticks;
  std::uint64_t ns;
};
const clock_anchor anchor = {trace_ticks(), monotonic_nanoseconds()};

struct conversion {
  double ns_per_tick = 1.0;
};
conversion current_conversion() noexcept {
  if (!tsc_clock) return {};
  // The rate needs some distance from the anchor: 5 ms give it to a few parts per million.
  for (;;) {
    const std::uint64_t ticks = trace_ticks();
    const std::uint64_t ns = monotonic_nanoseconds();
    if (ns - anchor.ns >= 5'000'000 && ticks > anchor.ticks) {
      return {double(ns - anchor.ns) / double(ticks - anchor.ticks)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
std::uint64_t convert(const conversion& c, std::uint64_t ticks) noexcept {
  if (!tsc_clock) return ticks;
  const double delta = double(std::int64_t(ticks - anchor.ticks)) * c.ns_per_tick;
  return anchor.ns + std::uint64_t(std::int64_t(delta));
}
std::uint64_t ns_to_ticks(const conversion& c, std::uint64_t ns) noexcept {
  if (!tsc_clock) return ns;
  const double delta = double(std::int64_t(ns - anchor.ns)) / c.ns_per_tick;
  return anchor.ticks + std::uint64_t(std::int64_t(delta));
}

// --- where this thread records -------------------------------------------------------------------

thread_local constinit trace_ring* thread_ring = nullptr;
thread_local constinit std::uint16_t foreign_thread_number = 0;  // 0: not assigned yet
std::atomic<std::uint16_t> next_foreign_thread_number{1};

constexpr std::uint32_t foreign_capacity = 1u << 13;

struct foreign_sink {
  std::mutex mutex;  // serialises writers; readers do not take it
  trace_ring ring;
};
// Never destroyed (as the list below): a detached worker of a runtime destroyed from inside
// itself may still trace, or destroy its recorder, after static destructors ran.
foreign_sink& foreign() {
  static foreign_sink* sink = new foreign_sink();
  return *sink;
}

// Every recorder of the process (trace_dump_request from a thread that is no executor).
struct recorder_list {
  std::mutex mutex;
  std::vector<trace_recorder*> all;  // guarded by mutex
};
recorder_list& recorder_registry() {
  static recorder_list* list = new recorder_list();
  return *list;
}

std::uint32_t round_up_to_power_of_two(std::uint32_t n) noexcept {
  std::uint32_t capacity = 64;
  while (capacity < n && capacity < (1u << 30)) capacity <<= 1;
  return capacity;
}

}  // namespace

std::uint64_t trace_ticks_to_ns(std::uint64_t ticks) noexcept {
  return convert(current_conversion(), ticks);
}
bool trace_clock_is_tsc() noexcept { return tsc_clock; }

const char* trace_kind_name(trace_kind kind) noexcept {
  switch (kind) {
    case trace_kind::none: return "none";
    case trace_kind::spawn: return "spawn";
    case trace_kind::poll_start: return "poll start";
    case trace_kind::poll_end: return "poll end";
    case trace_kind::task_end: return "task end";
    case trace_kind::wake: return "wake";
    case trace_kind::steal: return "steal";
    case trace_kind::park: return "park";
    case trace_kind::unpark: return "unpark";
    case trace_kind::fork_promote: return "fork promotion";
    case trace_kind::fork_theft: return "fork theft";
    case trace_kind::fork_merge: return "fork merge";
    case trace_kind::actor_send: return "message send";
    case trace_kind::actor_receive: return "message receive";
    case trace_kind::io_submit: return "io submit";
    case trace_kind::io_complete: return "io complete";
    case trace_kind::timer_fire: return "timer fire";
    case trace_kind::count_: break;
  }
  return "unknown";
}

// --- trace_ring ---------------------------------------------------------------------------------

trace_ring::~trace_ring() { delete[] buffer_.load(std::memory_order_relaxed); }

void trace_ring::allocate(std::uint32_t capacity) {
  if (buffer_.load(std::memory_order_relaxed) != nullptr) return;  // relaxed: under the mutex
  auto* words = new std::atomic<std::uint64_t>[std::size_t(capacity) * 4];
  for (std::size_t i = 0; i < std::size_t(capacity) * 4; ++i) {
    words[i].store(0, std::memory_order_relaxed);  // relaxed: published below
  }
  mask_ = capacity - 1;
  // release: the zeroed words and mask_ before the writer or a reader sees the buffer.
  buffer_.store(words, std::memory_order_release);
}

bool trace_ring::write(trace_kind kind, std::uint16_t executor, std::uint32_t aux,
                       std::uint64_t id, std::uint64_t ref) noexcept {
  // acquire: pairs with allocate's release (mask_ and the zeroed words).
  std::atomic<std::uint64_t>* words = buffer_.load(std::memory_order_acquire);
  if (words == nullptr) return false;
  // relaxed: same thread only (a signal handler that interrupted a write); see "Signals".
  if (writing_.load(std::memory_order_relaxed)) return false;
  writing_.store(true, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the flag before the writes, for handlers
  const std::uint64_t position = head_;
  // relaxed: ordered before the payload by the payload's release stores ("Torn events").
  begun_.store(position + 1, std::memory_order_relaxed);
  std::atomic<std::uint64_t>* slot = words + (position & mask_) * 4;
  // release (each word): a reader that reads it also sees `begun` past this position.
  slot[0].store(trace_ticks(), std::memory_order_release);
  slot[1].store(std::uint64_t(kind) | (std::uint64_t(executor) << 8) | (std::uint64_t(aux) << 32),
                std::memory_order_release);
  slot[2].store(id, std::memory_order_release);
  slot[3].store(ref, std::memory_order_release);
  // release: the event's words before a reader that sees the position includes it.
  published_.store(position + 1, std::memory_order_release);
  head_ = position + 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  writing_.store(false, std::memory_order_relaxed);  // relaxed: see above
  return true;
}

void trace_ring::read(std::uint64_t since_ticks, trace_capture::ring_events& out,
                      std::vector<std::uint64_t>& ticks) const {
  // acquire: pairs with allocate's release.
  std::atomic<std::uint64_t>* words = buffer_.load(std::memory_order_acquire);
  if (words == nullptr) return;
  const std::uint64_t capacity = mask_ + 1;
  // acquire: the words of every published event are visible.
  const std::uint64_t published = published_.load(std::memory_order_acquire);
  const std::uint64_t first = published > capacity ? published - capacity : 0;
  out.overwritten += first;
  struct raw {
    std::uint64_t w[4];
  };
  std::vector<raw> copied(published - first);
  for (std::uint64_t q = first; q < published; ++q) {
    const std::atomic<std::uint64_t>* slot = words + (q & mask_) * 4;
    // acquire (each word): if it is a newer event's, `begun` below shows that event.
    for (int w = 0; w < 4; ++w) copied[q - first].w[w] = slot[w].load(std::memory_order_acquire);
  }
  // relaxed: ordered after the acquire loads above ("Torn events").
  const std::uint64_t begun = begun_.load(std::memory_order_relaxed);
  for (std::uint64_t q = first; q < published; ++q) {
    if (q + capacity < begun) {
      ++out.torn;
      continue;
    }
    const raw& r = copied[q - first];
    if (std::int64_t(r.w[0] - since_ticks) < 0) continue;
    trace_record_view v;
    v.kind = trace_kind(r.w[1] & 0xff);
    v.executor = std::uint16_t((r.w[1] >> 8) & 0xffff);
    v.aux = std::uint32_t(r.w[1] >> 32);
    v.id = r.w[2];
    v.ref = r.w[3];
    out.events.push_back(v);
    ticks.push_back(r.w[0]);
  }
}

// --- recording ----------------------------------------------------------------------------------

namespace {
bool write_foreign(trace_kind kind, std::uint64_t id, std::uint64_t ref, std::uint32_t aux) noexcept;
}  // namespace

void trace_record(trace_kind kind, std::uint64_t id, std::uint64_t ref, std::uint32_t aux) noexcept {
  if (trace_ring* ring = thread_ring) {
    if (!ring->owner->enabled()) return;
    if (kind == trace_kind::poll_start || kind == trace_kind::park) {
      // The owner's view of its own queue (none for an embedded executor's ring).
      aux = ring->executor_of != nullptr ? ring->executor_of->local().size() : 0;
    }
    ring->write(kind, ring->executor_index, aux, id, ref);
    return;
  }
  write_foreign(kind, id, ref, aux);
}

namespace {
bool write_foreign(trace_kind kind, std::uint64_t id, std::uint64_t ref,
                   std::uint32_t aux) noexcept {
  // A thread that is not an executor: the foreign ring, under its mutex.
  if (foreign_thread_number == 0) {
    // relaxed: only uniqueness matters.
    foreign_thread_number = std::uint16_t(
        (next_foreign_thread_number.fetch_add(1, std::memory_order_relaxed) & 0x7fff) | 1);
  }
  foreign_sink& sink = foreign();
  std::lock_guard lock(sink.mutex);
  return sink.ring.write(kind, std::uint16_t(foreign_thread_flag | foreign_thread_number), aux,
                         id, ref);
}
}  // namespace

bool trace_record_begin(trace_kind kind, std::uint64_t id) noexcept {
  if (trace_ring* ring = thread_ring) {
    if (!ring->owner->enabled()) return false;
    // The owner's view of its own queue (none for an embedded executor's ring).
    const std::uint32_t aux = ring->executor_of != nullptr ? ring->executor_of->local().size() : 0;
    // Not written (no buffer yet): then no end either.
    return ring->write(kind, ring->executor_index, aux, id, 0);
  }
  return write_foreign(kind, id, 0, 0);  // it records whenever any runtime traces
}

void trace_record_end(trace_kind kind) noexcept {
  // The begin was recorded on this thread, into the ring this thread still records into (a
  // worker's for its whole loop, an embedded tick's for the tick), which therefore has its
  // buffer: record the end even if the switch went off meanwhile.
  if (trace_ring* ring = thread_ring) {
    ring->write(kind, ring->executor_index, 0, 0, 0);
    return;
  }
  write_foreign(kind, 0, 0, 0);
}

void trace_attach_thread(trace_recorder& recorder, executor& owner, std::uint32_t index) noexcept {
  try {
    recorder.attach(&owner, index);
  } catch (...) {
    return;  // no buffer: this executor records nothing
  }
  thread_ring = &recorder.ring(index);
}

void trace_detach_thread() noexcept { thread_ring = nullptr; }

trace_ring* trace_exchange_thread_ring(trace_ring* ring) noexcept {
  trace_ring* previous = thread_ring;
  thread_ring = ring;
  return previous;
}

// --- trace_recorder -----------------------------------------------------------------------------

trace_recorder::trace_recorder(std::uint32_t max_executors, const diagnostics_options& options)
    : max_executors_(max_executors),
      capacity_(round_up_to_power_of_two(options.trace_events_per_executor)),
      rings_(std::make_unique<trace_ring[]>(max_executors)) {
  for (std::uint32_t i = 0; i < max_executors_; ++i) {
    rings_[i].owner = this;
    rings_[i].executor_index = std::uint16_t(i);
  }
  {
    recorder_list& list = recorder_registry();
    std::lock_guard lock(list.mutex);
    list.all.push_back(this);
  }
  if (options.tracing) set_enabled(true);
}

trace_recorder::~trace_recorder() {
  set_enabled(false);
  recorder_list& list = recorder_registry();
  std::lock_guard lock(list.mutex);
  list.all.erase(std::find(list.all.begin(), list.all.end(), this));
}

void trace_recorder::attach(executor* owner, std::uint32_t index) {
  std::lock_guard lock(mutex_);
  rings_[index].executor_of = owner;
  if (enabled_.load(std::memory_order_relaxed)) rings_[index].allocate(capacity_);
  const std::uint32_t attached = attached_.load(std::memory_order_relaxed);
  // release: the ring's fields before a reader that sees the count reads them.
  if (index + 1 > attached) attached_.store(index + 1, std::memory_order_release);
}

void trace_recorder::set_enabled(bool on) {
  std::lock_guard lock(mutex_);
  // relaxed: switched under mutex_; the event points read it as a hint.
  if (enabled_.load(std::memory_order_relaxed) == on) return;
  if (on) {
    const std::uint32_t attached = attached_.load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < attached; ++i) rings_[i].allocate(capacity_);
    {
      std::lock_guard foreign_lock(foreign().mutex);
      foreign().ring.allocate(foreign_capacity);
    }
    enabled_.store(true, std::memory_order_relaxed);
    // relaxed: a switch the event points sample; the buffers are published by their own
    // release stores (trace_ring::allocate).
    trace_active_recorders.fetch_add(1, std::memory_order_relaxed);
  } else {
    enabled_.store(false, std::memory_order_relaxed);
    trace_active_recorders.fetch_sub(1, std::memory_order_relaxed);  // relaxed: as above
  }
}

trace_capture trace_recorder::collect(std::chrono::nanoseconds last) const {
  const conversion c = current_conversion();
  trace_capture capture;
  capture.taken_at_ns = monotonic_nanoseconds();
  const std::uint64_t span = last.count() > 0 ? std::uint64_t(last.count()) : 0;
  capture.window_start_ns =
      span == 0 || span >= capture.taken_at_ns ? 0 : capture.taken_at_ns - span;
  const std::uint64_t since_ticks =
      capture.window_start_ns == 0 ? 0 : ns_to_ticks(c, capture.window_start_ns);
  capture.executors = attached_executors();
  capture.thread_label = thread_label_;
  std::vector<std::uint64_t> ticks;
  auto take = [&](const trace_ring& ring, std::uint16_t executor) {
    trace_capture::ring_events out;
    out.executor = executor;
    ticks.clear();
    ring.read(since_ticks, out, ticks);
    for (std::size_t i = 0; i < out.events.size(); ++i) out.events[i].ns = convert(c, ticks[i]);
    capture.rings.push_back(std::move(out));
  };
  for (std::uint32_t i = 0; i < capture.executors; ++i) take(rings_[i], std::uint16_t(i));
  take(foreign().ring, foreign_thread_flag);
  // The writers went on while the rings were read: the copy ends at its newest event, so a
  // slice still open (ended at taken_at by the export) ends after everything copied, never
  // inside a slice that closed after the stamp above.
  for (const auto& ring : capture.rings) {
    for (const trace_record_view& e : ring.events) {
      capture.taken_at_ns = std::max(capture.taken_at_ns, e.ns);
    }
  }
  return capture;
}

void trace_recorder::request_dump(std::string reason, std::chrono::nanoseconds last) {
  trace_capture dump = collect(last);
  dump.reason = std::move(reason);
  std::lock_guard lock(mutex_);
  if (dumps_.size() == kept_dumps) dumps_.erase(dumps_.begin());
  dumps_.push_back(std::move(dump));
  if (listener_ != nullptr) listener_(listener_context_, dumps_.back());
}

std::vector<trace_capture> trace_recorder::dumps() const {
  std::lock_guard lock(mutex_);
  return dumps_;
}

void trace_recorder::set_dump_listener(dump_listener listener, void* context) {
  std::lock_guard lock(mutex_);
  listener_ = listener;
  listener_context_ = context;
}

void trace_dump_request(const char* reason, std::chrono::nanoseconds last) noexcept {
  try {
    if (trace_ring* ring = thread_ring) {
      if (ring->owner->enabled()) ring->owner->request_dump(reason, last);
      return;
    }
    recorder_list& list = recorder_registry();
    std::lock_guard lock(list.mutex);
    for (trace_recorder* recorder : list.all) {
      if (recorder->enabled()) recorder->request_dump(reason, last);
    }
  } catch (...) {
    // Out of memory while copying: no dump this time.
  }
}

}  // namespace spindle::core
