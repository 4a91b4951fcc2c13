// Heartbeats, promotion, withdrawal and merging: the out-of-line half of the fork-join design in
// include/spindle/fork/fork_state.hpp (docs/design/fork-join.md has the measurements).
#include "spindle/fork/fork_state.hpp"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "spindle/core/executor_metrics.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/diagnostics/json_writer.hpp"
#include "spindle/diagnostics/registry.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/snapshot.hpp"

namespace spindle {
namespace fork_detail {
namespace {

// Counters are bumped on rare events only (a promotion per heartbeat at most twice).
struct global_counters {
  std::atomic<std::uint64_t> promoted{0}, withdrawn{0}, delegated{0}, helped{0}, heartbeats{0};
};
global_counters counters;

void bump(std::atomic<std::uint64_t>& counter) noexcept {
  counter.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics only
}

// Clock checks aim at this fraction of a quantum; the countdown interval doubles or halves to
// keep the spacing within a factor of two of it.
constexpr std::uint64_t checks_per_quantum = 4;
constexpr std::int64_t max_interval = std::int64_t(1) << 20;
constexpr std::uint64_t max_shrink = 16;
// Spacing of clock checks when the quantum is zero (tests): every tick is a heartbeat.
constexpr std::uint64_t min_check_ns = 1'000;

// How long a waiting owner spins before parking, and how long it parks at most before it looks
// for published work again.
constexpr std::uint32_t spin_rounds_before_park = 64;
constexpr clock_duration park_timeout = std::chrono::microseconds(50);

// Diagnostics (SPEC G1): the snapshot's "fork_join" section of a runtime lists, per worker
// that forked, the fork_join calls in flight there (its frame stack's depth: computations
// in flight, nested ones counted each) and whether it runs a piece of another worker's
// computation, with the process-wide counters. The states of a runtime's workers are listed
// here, under `lock`, from attach_thread until their thread exits, keyed by their runtime's
// core. The section itself belongs to the runtime (task layer, detail::fork_section_writer):
// a worker's thread may outlive its runtime (one destroyed from inside its own worker is
// detached), so nothing here may hold a registration in the runtime's registry, and an entry
// keeps each executor's index rather than a pointer to it.
struct fork_directory {
  struct listed_state {
    fork_thread_state* state;
    std::uint32_t executor_index;
  };
  struct per_runtime {
    const core::runtime_core* core;
    std::vector<listed_state> states;
  };
  std::mutex lock;
  std::vector<std::unique_ptr<per_runtime>> runtimes;  // under lock
};
fork_directory& directory() {
  static fork_directory* instance = new fork_directory();  // never destroyed: threads outlive statics
  return *instance;
}
void write_fork_section(const core::runtime_core& core, diagnostics::json_writer& out);
void enlist_state(fork_thread_state& state);
void delist_state(fork_thread_state& state) noexcept;

// Owns the state of each worker thread that forked (freed when the thread exits).
struct owned_state {
  fork_thread_state state;
  latent_frame* frames[frame_capacity];
  alignas(work_slot_alignment) unsigned char work_slots[frame_capacity * work_slot_size];
  bool listed = false;
  ~owned_state() {
    if (listed) delist_state(state);
  }
};
thread_local std::unique_ptr<owned_state> thread_owned_state;

// A thread that is not a worker runs every fork serially (capacity 0). Not cached in
// current_state: a thread is not a worker yet while on_worker_start runs.
fork_thread_state serial_state;

std::uint32_t next_random(fork_thread_state* state) noexcept {
  return core::next_xorshift(state->random_state);  // owner-only
}

// The least utilised of two random other executors (load.md), or no preference.
std::uint32_t pick_idle_executor(fork_thread_state* state) noexcept {
  core::runtime_core& core = state->executor->core();
  const std::uint32_t count = core.executor_count();
  const std::uint32_t self = state->executor->index();
  if (count < 2) return core::runtime_core::no_preference;
  auto other = [&] {
    const std::uint32_t pick = next_random(state) % (count - 1);
    return pick >= self ? pick + 1 : pick;
  };
  const std::uint32_t a = other(), b = other();
  // relaxed: utilisation is a sample (single writer).
  const auto load = [&](std::uint32_t i) {
    return core.executor_at(i).stats().utilisation.load(std::memory_order_relaxed);
  };
  return load(a) <= load(b) ? a : b;
}

// A computation's token as an offer board tag.
core::offer_board::tag_type board_tag(const void* computation) noexcept {
  return reinterpret_cast<core::offer_board::tag_type>(computation);
}

struct promotion {
  std::uint32_t published = 0;
  bool latent_left = false;  // a latent frame is still registered (a later ping may offer it)
};

// Promotes eligible frames of [frames, top) onto the board (the heartbeat's scan). Called by the
// owner with pings masked, or by the ping handler: plain stores and atomic operations only.
promotion promote_frames(fork_thread_state* state, latent_frame** top) noexcept {
  promotion result;
  core::executor& self = *state->executor;
  core::runtime_core& core = self.core();
  const std::uint32_t executors = core.executor_count();
  if (executors < 2) return result;  // nobody could take it
  const std::uint64_t epoch = state->epoch.load(std::memory_order_relaxed);  // relaxed: "Pings"
  for (latent_frame** slot = state->frames; slot != top; ++slot) {
    latent_frame* frame = *slot;
    // relaxed: only this thread writes it (see "Pings").
    if (frame->published.load(std::memory_order_relaxed) != nullptr) continue;
    // Eligible: pushed before the previous heartbeat (latent for a whole quantum).
    if (frame->epoch + 2 > epoch) {
      result.latent_left = true;
      continue;
    }
    // A second one only when some executor is parked and could take it (seed: two per theft).
    if (result.published == 2 || (result.published == 1 && core.unparked_count() >= executors) ||
        !self.offers().has_room()) {
      result.latent_left = true;
      break;
    }
    delegated_work* work = frame->promote(frame, work_slot(state, slot));
    if (work == nullptr) continue;
    work->owner_parker = &self.parker();
    work->computation = computation_token(state);
    // has_room: cannot fail (only we fill slots).
    work->slot = self.offers().publish(work, board_tag(work->computation));
    // release (signal fence): the work's fields before `published` (read by the owner).
    std::atomic_signal_fence(std::memory_order_release);
    frame->published.store(work, std::memory_order_relaxed);  // relaxed: see "Pings"
    core::trace_event(core::trace_kind::fork_promote, self.index(), core::trace_ref(work));
    bump(counters.promoted);
    core::metrics::record_fork_promotion(self);
    ++result.published;
  }
  return result;
}

// Starts a heartbeat if one is due: the next one a quantum later, the epoch moves on.
bool heartbeat_due(fork_thread_state* state, std::uint64_t now) noexcept {
  // relaxed: shared with this thread's ping handler only (see "Pings").
  if (now < state->next_heartbeat_ns.load(std::memory_order_relaxed)) return false;
  state->next_heartbeat_ns.store(now + state->quantum_ns, std::memory_order_relaxed);
  state->epoch.store(state->epoch.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  bump(counters.heartbeats);
  return true;
}

// The ping handler (signal context, on the owner's thread; see "Pings" in fork_state.hpp).
void on_ping(void* context) noexcept {
  auto* state = static_cast<fork_thread_state*>(context);
  // relaxed: same thread; the owner's signal fences order it around its changes.
  if (state->masked.load(std::memory_order_relaxed)) return;  // the monitor pings again
  latent_frame** top = state->top.load(std::memory_order_relaxed);
  // acquire (signal fence): the frames below `top` were written before it (push_frame).
  std::atomic_signal_fence(std::memory_order_acquire);
  core::executor& self = *state->executor;
  if (top == state->frames) {
    // Between computations (or in a runnable that has not forked yet): nothing to offer, so no
    // more pings without a request. If the runnable forks later, its first fork must check the
    // clock (which requests the next ping): the countdown a fine-grained computation left may
    // be far too long for a leaf that never forks, and would otherwise leave the frame latent
    // for the rest of the runnable (relaxed: see count_down).
    state->countdown.store(1, std::memory_order_relaxed);
    self.request_ping(0);
    self.decline_pings();
    return;
  }
  // clock_gettime is async-signal-safe (POSIX); here the vDSO, no system call.
  const std::uint64_t now = core::monotonic_nanoseconds();
  heartbeat_due(state, now);
  // No clock check for two quanta: the countdown is too long for these ticks. Check at the next
  // fork or block (relaxed: see count_down).
  state->countdown.store(1, std::memory_order_relaxed);
  // Nothing latent left: no more pings until that check, which requests one again.
  if (promote_frames(state, top).latent_left) {
    self.request_ping(now + state->ping_delay_ns);
  } else {
    self.request_ping(0);
    self.decline_pings();
  }
}

}  // namespace

thread_local constinit fork_thread_state* current_state = nullptr;

fork_thread_state* attach_thread() noexcept {
  core::executor* executor = core::executor::current();
  if (executor == nullptr) return &serial_state;
  thread_owned_state = std::make_unique<owned_state>();
  fork_thread_state& state = thread_owned_state->state;
  state.frames = thread_owned_state->frames;
  state.work_slots = thread_owned_state->work_slots;
  state.top.store(state.frames, std::memory_order_relaxed);  // relaxed: no handler yet
  state.limit = state.frames + frame_capacity;
  state.executor = executor;
  state.quantum_ns = std::uint64_t(executor->core().options().fork_quantum.count());
  state.ping_delay_ns = 2 * state.quantum_ns;
  state.countdown.store(1, std::memory_order_relaxed);  // relaxed: no handler yet
  state.interval = 1;
  state.last_check_ns = 0;
  state.next_heartbeat_ns.store(core::monotonic_nanoseconds() + state.quantum_ns,
                                std::memory_order_relaxed);
  state.random_state = 0x9e3779b9u * (executor->index() + 1);
  current_state = &state;
  try {
    enlist_state(state);
    thread_owned_state->listed = true;
  } catch (...) {
    // Out of memory: the worker forks as before, unlisted in snapshots.
  }
  // Last: from here on a ping may run on_ping with this state.
  executor->set_ping_handler(&on_ping, &state);
  return &state;
}

void begin_loop_computation(fork_thread_state* state) noexcept {
  // Check the clock before the first element runs (the block claimed first is one element) and
  // let the interval grow from 1 again (doubling per check, about 20 checks up to the largest).
  state->countdown.store(1, std::memory_order_relaxed);  // relaxed: see count_down
  state->interval = 1;
  state->last_check_ns = 0;
}

void on_countdown(fork_thread_state* state) noexcept {
  if (state->frames == nullptr) {  // serial: nothing to promote, just keep counting
    state->countdown.store(std::int64_t(1) << 62, std::memory_order_relaxed);
    return;
  }
  const std::uint64_t now = core::monotonic_nanoseconds();
  std::uint64_t target = state->quantum_ns / checks_per_quantum;
  if (target < min_check_ns) target = min_check_ns;
  if (state->quantum_ns == 0) {
    state->interval = 1;  // tests: every tick is a heartbeat
  } else if (state->last_check_ns != 0) {
    const std::uint64_t elapsed = now - state->last_check_ns;
    if (elapsed < target / 2 && state->interval < max_interval) {
      state->interval *= 2;
    } else if (elapsed > target * 2 && state->interval > 1) {
      // Late: shrink in proportion (a coarse computation after a fine one, or a ping), by at most
      // max_shrink per check: a thread the kernel descheduled also comes late, and its ticks did
      // not get slower (2^20 comes down to 1 in five checks).
      std::uint64_t factor = elapsed / target;
      if (factor > max_shrink) factor = max_shrink;
      const std::int64_t shrunk = state->interval / std::int64_t(factor);
      state->interval = shrunk > 0 ? shrunk : 1;
    }
  }
  state->last_check_ns = now;
  core::executor& self = *state->executor;
  mask_pings(state);
  state->countdown.store(state->interval, std::memory_order_relaxed);  // relaxed: count_down
  const bool beat = heartbeat_due(state, now);
  latent_frame** top = state->top.load(std::memory_order_relaxed);  // relaxed: our own store
  const std::uint32_t promoted = beat ? promote_frames(state, top).published : 0;
  // A leaf that runs past two quanta from here without another check is pinged (when there is
  // another executor to take what a ping would offer).
  const bool pings_useful = top != state->frames && self.core().executor_count() > 1;
  self.request_ping(pings_useful ? now + state->ping_delay_ns : 0);
  unmask_pings(state);
  if (!beat) return;
  core::runtime_core& core = self.core();
  for (std::uint32_t i = 0; i < promoted; ++i) {
    // The board's release store is not a seq_cst RMW: fenced notify (parking.md).
    core.notify_work_available(pick_idle_executor(state));
  }
  // The heartbeat is a natural service point: fire due timers, deliver I/O completions, make
  // what they woke available to idle executors (at most once per service interval). Safe here:
  // the owner is between two forks or loop blocks of its own code and holds nothing of the
  // runtime's; timer callbacks (sleep, with_timeout) and completion callbacks (io_wait) only
  // mark a task woken and schedule it (push onto this executor's local queue, notify), they
  // never run a task or user code inline (timer_wheel.hpp, reactor.hpp; reactor_uring.cpp's and
  // reactor_epoll.cpp's reap loops only call io_operation::on_complete).
  self.service_point();
  // A loop piece run by a delegate ends its slice when the loop has other work waiting.
  if (state->slice_allowed && !state->slice_over &&
      now - state->slice_start_ns >= core.service_interval_ns() && self.has_waiting_work()) {
    state->slice_over = true;
  }
}

bool begin_slice(fork_thread_state* state) noexcept {
  state->slice_over = false;
  // From the executor's loop only: nested in a wait (help_depth > 0) or under frames of another
  // computation, ending early would not return to the loop. relaxed: our own store.
  state->slice_allowed = state->frames != nullptr && state->help_depth == 0 &&
                         state->top.load(std::memory_order_relaxed) == state->frames;
  if (state->slice_allowed) {
    state->slice_start_ns = core::monotonic_nanoseconds();
    // The piece ends when work waits here: hand-overs to this executor are served soon.
    state->executor->set_ends_runnable_when_work_waits(true);
  }
  return state->slice_allowed;
}

bool republish(fork_thread_state* state, delegated_work* work) noexcept {
  core::executor& self = *state->executor;
  mask_pings(state);  // publish is owner-only: a ping must not publish in between
  const std::uint32_t slot = self.offers().publish(work, board_tag(work->computation));
  unmask_pings(state);
  // (work->slot keeps the owner's old slot: only the owner's withdraw reads it, and the owner
  // tried that before this piece was ever taken; writing it here would race with that read.)
  if (slot == core::offer_board::no_slot) return false;
  // Our loop takes it back after the work waiting there; an idle executor may take it first.
  self.core().notify_work_available(pick_idle_executor(state));
  return true;
}

bool withdraw(fork_thread_state* state, delegated_work* work) noexcept {
  if (state->executor->offers().withdraw(work->slot, work)) {
    bump(counters.withdrawn);
    return true;
  }
  return false;
}

namespace {

// A piece of the awaited work's computation, and of no other (see "Computations" in
// fork_state.hpp): the thief's board first (leapfrogging: it publishes the awaited piece's own
// subtrees), then ours, then everyone's.
core::runnable* find_published_work(fork_thread_state* state, delegated_work* awaited) noexcept {
  core::executor& self = *state->executor;
  core::runtime_core& core = self.core();
  const void* const computation = awaited->computation;  // ours: in our own frame
  const core::offer_board::tag_type tag = board_tag(computation);
  // relaxed: a hint of where to look; the board's CAS synchronises.
  const std::uint32_t thief = awaited->thief.load(std::memory_order_relaxed);
  const std::uint32_t count = core.executor_count();
  core::runnable* found = nullptr;
  if (thief < count) found = core.executor_at(thief).offers().take_tagged(tag);
  if (found == nullptr) found = self.offers().take_tagged(tag);
  if (found == nullptr) {
    const std::uint32_t start = next_random(state) % count;
    for (std::uint32_t i = 0; i < count && found == nullptr; ++i) {
      const std::uint32_t victim = (start + i) % count;
      if (victim == thief || victim == self.index()) continue;
      found = core.executor_at(victim).offers().take_tagged(tag);
    }
  }
  if (found == nullptr) return nullptr;
  // Ours now (B1), so its fields are safe to read. Its tag matched, but under ABA
  // (offer_board.hpp, "Tags": its slot emptied and refilled with the same pointer between our
  // reads) it may belong to another computation: never run that here; offer it again from our
  // own board, where its owner (who waits for it, helping with its computation) or an idle
  // executor takes it.
  auto* piece = static_cast<delegated_work*>(found);
  if (piece->computation == computation) return piece;
  if (republish(state, piece)) return nullptr;
  // Our board is full as well (eight of our own pieces on it, all untaken): running it is the
  // only way left to make progress. Needs both an ABA inside a few instructions and a full
  // board.
  return piece;
}

}  // namespace

void wait_for_merge(fork_thread_state* state, delegated_work* work) noexcept {
  std::uint32_t idle_rounds = 0;
  // acquire: pairs with finish_delegate's release; the result is readable after (M).
  while (work->unmerged.load(std::memory_order_acquire) != 0) {
    if (state->help_depth < max_help_depth) {
      if (core::runnable* r = find_published_work(state, work)) {
        bump(counters.helped);
        ++state->help_depth;
        r->run();
        --state->help_depth;
        idle_rounds = 0;
        continue;
      }
    }
    // Waiting is a natural service point too (see on_countdown).
    state->executor->service_point();
    if (++idle_rounds < spin_rounds_before_park) {
      for (int i = 0; i < 64; ++i) core::cpu_relax();
      continue;
    }
    // The delegate unparks us after its merge; the timeout makes us look for work again.
    state->executor->parker().wait(park_timeout);
  }
}

void begin_delegate(delegated_work* work) noexcept {
  fork_thread_state* state = thread_state();
  const std::uint32_t thief = state->executor != nullptr ? state->executor->index() : no_thief;
  core::trace_event(core::trace_kind::fork_theft, thief, core::trace_ref(work));
  // relaxed: a hint for the owner's helping (see find_published_work). A piece that ended a
  // slice and runs again was delegated once: counted at its first run only.
  if (work->thief.exchange(thief, std::memory_order_relaxed) == no_thief) {
    bump(counters.delegated);
    core::metrics::record_fork_theft(state->executor);
  }
}

void finish_delegate(delegated_work* work) noexcept {
  // Read before the release: after it the owner may pop the frame that holds `work`.
  core::park_driver* owner = work->owner_parker;
  core::trace_event(core::trace_kind::fork_merge, 0, core::trace_ref(work));
  // release: publishes the result and error written before (M).
  work->unmerged.store(0, std::memory_order_release);
  owner->unpark();
}

void drop_delegated(core::runnable*) noexcept {
  // Delegated work sits only on offer boards, which shutdown does not drain: the owner is still
  // running and withdraws or waits for it. Reaching this is a bug.
  std::abort();
}

}  // namespace fork_detail

namespace fork_detail {
namespace {

// Lock order: the registry's lock, then the directory's (the runtime's section writer runs
// under the first and takes the second).
void enlist_state(fork_thread_state& state) {
  fork_directory& d = directory();
  const core::runtime_core* core = &state.executor->core();
  const fork_directory::listed_state listed{&state, state.executor->index()};
  // release: the writer is called only after it is seen (the runtime reads it with acquire).
  ::spindle::detail::fork_section_writer.store(&write_fork_section, std::memory_order_release);
  std::lock_guard guard(d.lock);
  for (auto& entry : d.runtimes) {
    if (entry->core == core) {
      entry->states.push_back(listed);
      return;
    }
  }
  auto entry = std::make_unique<fork_directory::per_runtime>();
  entry->core = core;
  entry->states.push_back(listed);
  d.runtimes.push_back(std::move(entry));
}

void delist_state(fork_thread_state& state) noexcept {
  fork_directory& d = directory();
  std::lock_guard guard(d.lock);
  for (auto it = d.runtimes.begin(); it != d.runtimes.end(); ++it) {
    std::vector<fork_directory::listed_state>& states = (*it)->states;
    if (std::erase_if(states, [&](const auto& l) { return l.state == &state; }) == 0) continue;
    if (states.empty()) d.runtimes.erase(it);
    break;
  }
}

void write_fork_section(const core::runtime_core& core, diagnostics::json_writer& out) {
  const fork_counters counters = fork_statistics();
  out.begin_object();
  out.key("executors").begin_array();
  {
    fork_directory& d = directory();
    std::lock_guard guard(d.lock);
    const fork_directory::per_runtime* entry = nullptr;
    for (const auto& e : d.runtimes) {
      if (e->core == &core) entry = e.get();
    }
    // A listed state lives until its thread delists it (under this lock).
    static const std::vector<fork_directory::listed_state> none;
    for (const fork_directory::listed_state& listed : entry != nullptr ? entry->states : none) {
      const fork_thread_state* state = listed.state;
      // relaxed: a sample; `frames` and `executor` were set before the state was listed.
      latent_frame** top = state->top.load(std::memory_order_relaxed);
      const std::uint64_t in_flight = top != nullptr ? std::uint64_t(top - state->frames) : 0;
      out.begin_object();
      out.member("executor", listed.executor_index);
      out.member("fork_joins_in_flight", in_flight);
      out.member("running_stolen_piece",
                 state->computation.load(std::memory_order_relaxed) != nullptr);
      out.end_object();
    }
  }
  out.end_array();
  out.member("promoted", counters.promoted);
  out.member("withdrawn", counters.withdrawn);
  out.member("delegated", counters.delegated);
  out.member("helped", counters.helped);
  out.member("heartbeats", counters.heartbeats);
  out.end_object();
}

}  // namespace
}  // namespace fork_detail

fork_counters fork_statistics() noexcept {
  using fork_detail::counters;
  fork_counters result;
  // relaxed: statistics.
  result.promoted = counters.promoted.load(std::memory_order_relaxed);
  result.withdrawn = counters.withdrawn.load(std::memory_order_relaxed);
  result.delegated = counters.delegated.load(std::memory_order_relaxed);
  result.helped = counters.helped.load(std::memory_order_relaxed);
  result.heartbeats = counters.heartbeats.load(std::memory_order_relaxed);
  return result;
}

}  // namespace spindle
