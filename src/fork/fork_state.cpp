// Heartbeats, promotion, withdrawal and merging: the out-of-line half of the fork-join design in
// include/spindle/fork/fork_state.hpp (docs/design/fork-join.md has the measurements).
#include "spindle/fork/fork_state.hpp"

#include <chrono>
#include <cstdlib>
#include <memory>

#include "spindle/core/runtime_core.hpp"

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
// Spacing of clock checks when the quantum is zero (tests): every tick is a heartbeat.
constexpr std::uint64_t min_check_ns = 1'000;

// How long a waiting owner spins before parking, and how long it parks at most before it looks
// for published work again.
constexpr std::uint32_t spin_rounds_before_park = 64;
constexpr clock_duration park_timeout = std::chrono::microseconds(50);

// Owns the state of each worker thread that forked (freed when the thread exits).
struct owned_state {
  fork_thread_state state;
  latent_frame* frames[frame_capacity];
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

void heartbeat(fork_thread_state* state, std::uint64_t now) noexcept {
  state->next_heartbeat_ns = now + state->quantum_ns;
  ++state->epoch;
  bump(counters.heartbeats);
  core::executor& self = *state->executor;
  core::runtime_core& core = self.core();
  const std::uint32_t executors = core.executor_count();
  if (executors < 2) return;  // nobody could take it
  std::uint32_t promoted = 0;
  for (latent_frame** slot = state->frames; slot != state->top; ++slot) {
    latent_frame* frame = *slot;
    // Eligible: still latent and pushed before the previous heartbeat (a whole quantum ago).
    if (frame->published != nullptr || frame->epoch + 2 > state->epoch) continue;
    if (!self.offers().has_room()) break;
    delegated_work* work = frame->promote(frame);
    if (work == nullptr) continue;
    work->owner_parker = &self.parker();
    work->slot = self.offers().publish(work);  // has_room: cannot fail (only we fill slots)
    frame->published = work;
    bump(counters.promoted);
    // The board's release store is not a seq_cst RMW: fenced notify (parking.md).
    core.notify_work_available(pick_idle_executor(state));
    // A second one only when some executor is parked and could take it (seed: two per theft).
    if (++promoted == 2 || core.unparked_count() >= executors) break;
  }
}

}  // namespace

thread_local constinit fork_thread_state* current_state = nullptr;

fork_thread_state* attach_thread() noexcept {
  core::executor* executor = core::executor::current();
  if (executor == nullptr) return &serial_state;
  thread_owned_state = std::make_unique<owned_state>();
  fork_thread_state& state = thread_owned_state->state;
  state.frames = state.top = thread_owned_state->frames;
  state.limit = state.frames + frame_capacity;
  state.executor = executor;
  state.quantum_ns = std::uint64_t(executor->core().options().fork_quantum.count());
  state.countdown = state.interval = 1;
  state.last_check_ns = core::monotonic_nanoseconds();
  state.next_heartbeat_ns = state.last_check_ns + state.quantum_ns;
  state.random_state = 0x9e3779b9u * (executor->index() + 1);
  current_state = &state;
  return &state;
}

void on_countdown(fork_thread_state* state) noexcept {
  if (state->frames == nullptr) {  // serial: nothing to promote, just keep counting
    state->countdown = std::int64_t(1) << 62;
    return;
  }
  const std::uint64_t now = core::monotonic_nanoseconds();
  const std::uint64_t elapsed = now - state->last_check_ns;
  state->last_check_ns = now;
  std::uint64_t target = state->quantum_ns / checks_per_quantum;
  if (target < min_check_ns) target = min_check_ns;
  if (state->quantum_ns == 0) {
    state->interval = 1;  // tests: every tick is a heartbeat
  } else if (elapsed < target / 2 && state->interval < max_interval) {
    state->interval *= 2;
  } else if (elapsed > target * 2 && state->interval > 1) {
    state->interval /= 2;
  }
  state->countdown = state->interval;
  if (now >= state->next_heartbeat_ns) heartbeat(state, now);
}

bool withdraw(fork_thread_state* state, delegated_work* work) noexcept {
  if (state->executor->offers().withdraw(work->slot, work)) {
    bump(counters.withdrawn);
    return true;
  }
  return false;
}

namespace {

core::runnable* find_published_work(fork_thread_state* state, delegated_work* awaited) noexcept {
  core::executor& self = *state->executor;
  core::runtime_core& core = self.core();
  // relaxed: a hint of where to look; the board's CAS synchronises.
  const std::uint32_t thief = awaited->thief.load(std::memory_order_relaxed);
  const std::uint32_t count = core.executor_count();
  if (thief < count) {
    if (core::runnable* r = core.executor_at(thief).offers().take()) return r;
  }
  if (core::runnable* r = self.offers().take()) return r;
  const std::uint32_t start = next_random(state) % count;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t victim = (start + i) % count;
    if (victim == thief || victim == self.index()) continue;
    if (core::runnable* r = core.executor_at(victim).offers().take()) return r;
  }
  return nullptr;
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
    if (++idle_rounds < spin_rounds_before_park) {
      for (int i = 0; i < 64; ++i) core::cpu_relax();
      continue;
    }
    // The delegate unparks us after its merge; the timeout makes us look for work again.
    state->executor->parker().wait(park_timeout);
  }
}

void begin_delegate(delegated_work* work) noexcept {
  bump(counters.delegated);
  fork_thread_state* state = thread_state();
  if (state->executor != nullptr) {
    // relaxed: a hint for the owner's helping (see find_published_work).
    work->thief.store(state->executor->index(), std::memory_order_relaxed);
  }
}

void finish_delegate(delegated_work* work) noexcept {
  // Read before the release: after it the owner may pop the frame that holds `work`.
  core::park_driver* owner = work->owner_parker;
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
