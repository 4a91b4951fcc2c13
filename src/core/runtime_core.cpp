// Registry, placement, idle coordination and shutdown. The design (states, invariants, the
// parking handshake, the numbered shutdown steps) is in runtime_core.hpp.
#include "spindle/core/runtime_core.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <system_error>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/core/executor_metrics.hpp"
#include "spindle/core/frame_allocator.hpp"

namespace spindle::core {
namespace {

constexpr std::uint64_t one_searching = std::uint64_t(1) << 32;
constexpr std::uint64_t one_unparked = 1;
std::uint32_t searching_of(std::uint64_t state) { return std::uint32_t(state >> 32); }
std::uint32_t unparked_of(std::uint64_t state) { return std::uint32_t(state); }

// Checks and completes the options before anything is allocated from them.
runtime_options validated(runtime_options options) {
  if (options.max_executors == 0 || options.max_executors > 4096) {
    throw usage_error("spindle: max_executors must be in [1, 4096]");
  }
  if (options.workers == 0) {
    // 0 means one executor per hardware thread (capped by the registry's capacity).
    const unsigned hardware = std::thread::hardware_concurrency();
    options.workers = std::min<std::uint32_t>(hardware == 0 ? 1 : hardware, options.max_executors);
  }
  if (options.workers > options.max_executors) {
    throw usage_error("spindle: more workers requested than max_executors allows");
  }
  if (options.budget == 0) throw usage_error("spindle: budget must be at least 1");
  if (options.diagnostics.trace_events_per_executor >
      diagnostics_options::max_trace_events_per_executor) {
    throw usage_error("spindle: diagnostics.trace_events_per_executor must be at most 2^22");
  }
  if (options.service_interval < std::chrono::microseconds(100)) {
    throw usage_error("spindle: service_interval must be at least 100 microseconds");
  }
  if (options.long_runnable_after < options.service_interval) {
    throw usage_error("spindle: long_runnable_after must be at least the service interval");
  }
  if (options.ping_signal < 0 || options.ping_signal >= NSIG || options.ping_signal == SIGKILL ||
      options.ping_signal == SIGSTOP) {
    throw usage_error("spindle: ping_signal must be 0 or a signal a handler can catch");
  }
  // Signals a fault raises on the faulting thread: spindle's handler returns from one it did not
  // send, which re-runs the faulting instruction forever (a crash becomes a hang).
  for (const int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) {
    if (options.ping_signal == fault) {
      throw usage_error("spindle: ping_signal must not be a signal raised by faults");
    }
  }
  if (options.standby_first.count() < 0 || options.standby_longest < options.standby_first) {
    throw usage_error("spindle: standby_longest must be at least standby_first (>= 0)");
  }
  if (options.worker_stack_size == 0) {
    options.worker_stack_size = runtime_options::default_worker_stack_size;
  }
  if (options.worker_stack_size < runtime_options::min_worker_stack_size ||
      options.worker_stack_size > (std::size_t(64) << 30)) {
    throw usage_error("spindle: worker_stack_size must be 0 (default) or in [256 KiB, 64 GiB]");
  }
  // At most 1 TiB per executor: the depot's bound, a sum over every live runtime's executors,
  // cannot overflow (4096 executors each; a bound that large is no bound anyway).
  if (options.frame_cache_bytes > max_frame_cache_bytes) {
    throw usage_error("spindle: frame_cache_bytes must be at most 1 TiB per executor");
  }
  if (options.frame_cache_idle_trim.count() < 0) {
    throw usage_error("spindle: frame_cache_idle_trim must not be negative");
  }
  if (options.injector_check_interval == 0 || options.local_fairness_interval == 0) {
    throw usage_error("spindle: fairness intervals must be at least 1");
  }
  if (const char* forced = std::getenv("SPINDLE_AFFINITY"); forced != nullptr && *forced != 0) {
    const std::optional<affinity_policy> policy = parse_affinity_policy(forced);
    if (!policy) {
      throw usage_error(std::string("spindle: SPINDLE_AFFINITY='") + forced +
                        "' is not none, depth-first, breadth-first or random");
    }
    options.affinity = *policy;
  }
  return options;
}

}  // namespace

worker_thread::worker_thread(std::size_t stack_size, std::function<void()> body) {
  pthread_attr_t attributes;
  if (int error = pthread_attr_init(&attributes); error != 0) {
    throw std::system_error(error, std::generic_category(), "spindle: pthread_attr_init");
  }
  auto owned = std::make_unique<std::function<void()>>(std::move(body));
  int error = pthread_attr_setstacksize(&attributes, stack_size);
  if (error == 0) {
    error = pthread_create(
        &thread_, &attributes,
        [](void* argument) -> void* {
          using body_type = std::function<void()>;
          const std::unique_ptr<body_type> run(static_cast<body_type*>(argument));
          (*run)();  // worker bodies catch what they must: an escaping exception terminates
          return nullptr;
        },
        owned.get());
  }
  pthread_attr_destroy(&attributes);
  if (error != 0) {
    throw std::system_error(error, std::generic_category(), "spindle: starting a worker thread");
  }
  owned.release();  // the thread owns it now
  started_ = true;
}

worker_thread::worker_thread(worker_thread&& other) noexcept
    : thread_(other.thread_), started_(std::exchange(other.started_, false)) {}

worker_thread::~worker_thread() {
  if (started_) std::terminate();  // as std::thread: neither joined nor detached
}

void worker_thread::join() noexcept {
  if (!std::exchange(started_, false)) return;
  pthread_join(thread_, nullptr);
}

void worker_thread::detach() noexcept {
  if (!std::exchange(started_, false)) return;
  pthread_detach(thread_);
}

runtime_core::runtime_core(runtime_options options)
    : options_(validated(std::move(options))),
      trace_(std::make_shared<trace_recorder>(options_.max_executors, options_.diagnostics)),
      clock_(options_.clock != nullptr ? options_.clock : &steady_clock_source::instance()),
      topology_(options_.topology != nullptr ? options_.topology : &machine_topology::discover()),
      affinity_planner_(*topology_, options_.affinity),
      steals_nearest_first_(options_.affinity != affinity_policy::none &&
                            (topology_->cache_domain_count() > 1 ||
                             topology_->numa_node_count() > 1)),
      slots_(std::make_unique<std::atomic<executor*>[]>(options_.max_executors)),
      injector_(options_.max_executors),
      service_interval_ns_(std::uint64_t(options_.service_interval.count())),
      monitor_(std::make_unique<runtime_monitor>(*this)) {
  coarse_now_ns_.store(monotonic_nanoseconds(), std::memory_order_relaxed);  // relaxed: unshared
  for (std::uint32_t i = 0; i < options_.max_executors; ++i) {
    slots_[i].store(nullptr, std::memory_order_relaxed);  // relaxed: not yet shared
  }
  sleepers_.reserve(options_.max_executors);
  is_sleeping_.assign(options_.max_executors, 0);
  woken_as_searcher_.assign(options_.max_executors, 0);
  set_histograms(options_.diagnostics.histograms);
}

void runtime_core::set_histograms(bool on) noexcept {
  if (on) histogram_clock::calibrate();  // before any executor reads the clock for them
  histograms_on_.store(on, std::memory_order_relaxed);  // relaxed: see histograms_on()
}

runtime_core::~runtime_core() {
  // The last reference may be dropped by a worker of a detached shutdown; nothing to join then.
  shutdown();
  clock_->unsubscribe(this);
  trace_->set_enabled(false);  // a reader may keep the recorder: it stops counting as active
}

void runtime_core::start(std::shared_ptr<runtime_core> self) {
  self_ = self;
  clock_->subscribe(this, [this] { unpark_all(); });
  try {
    if (options_.ping_signal != 0) executor::install_ping_signal(options_.ping_signal);
    for (std::uint32_t i = 0; i < options_.workers; ++i) append_executor();
    monitor_->start();
  } catch (...) {
    // An executor (its reactor, its thread) or the monitor could not be made. The workers
    // already started hold this core alive and nobody else will stop them: shut down (joins
    // them; this thread is not one of them) before the caller sees the error.
    shutdown();
    throw;
  }
}

void runtime_core::claim_fine_time() noexcept {
  // relaxed: a count the monitor samples; it publishes nothing. The monitor object lives as long
  // as this core (stopped, not destroyed, at shutdown), so it may be woken at any time.
  fine_time_claims_.fetch_add(1, std::memory_order_relaxed);
  monitor_->wake_for_fine_time();
}

void runtime_core::executor_awake(std::uint64_t now_ns) noexcept {
  advance_coarse_clock(now_ns);
  monitor_->executor_awake();
}

std::uint32_t runtime_core::add_executor() { return append_executor(); }

std::uint32_t runtime_core::append_executor() {
  std::lock_guard lock(registry_mutex_);
  if (stopping()) throw runtime_stopped();
  const std::uint32_t index = live_.load(std::memory_order_relaxed);  // relaxed: we are the writer
  if (index >= options_.max_executors) {
    throw usage_error("spindle: executor registry is full (max_executors reached)");
  }
  const executor_placement placement = affinity_planner_.next();
  try {
    owned_executors_.push_back(std::make_unique<executor>(*this, index, *clock_, placement));
  } catch (...) {
    affinity_planner_.release(placement);  // no executor holds the unit it claimed
    throw;
  }
  // release: the executor is fully constructed before readers can load its pointer.
  slots_[index].store(owned_executors_.back().get(), std::memory_order_release);
  // seq_cst: counted as unparked before it becomes visible to notifiers' should-wake checks.
  idle_state_.fetch_add(one_unparked, std::memory_order_seq_cst);
  // release: pairs with executor_count()'s acquire; slot [index] is visible first.
  live_.store(index + 1, std::memory_order_release);
  start_thread(index);
  // After the thread started (start_thread may throw): finish_shutdown gives back what was added.
  add_frame_cache_share(options_.frame_cache_bytes);
  frame_cache_share_ += options_.frame_cache_bytes;
  return index;
}

void runtime_core::start_thread(std::uint32_t index) {
  std::shared_ptr<runtime_core> self = self_.lock();
  // relaxed: only compared against zero by worker_exited, after the thread ran.
  workers_running_.fetch_add(1, std::memory_order_relaxed);
  threads_.emplace_back(options_.worker_stack_size, [self, index] {
    executor& e = self->executor_at(index);
    e.bind_thread();
    if (self->options_.on_worker_start) self->options_.on_worker_start(index);
    e.run_loop();
    self->worker_exited();
  });
}

bool runtime_core::is_worker_thread() const noexcept {
  executor* e = executor::current();
  return e != nullptr && &e->core() == this;
}

std::uint32_t runtime_core::pick_two_choices(std::uint32_t& random_state) const noexcept {
  const std::uint32_t count = executor_count();
  if (count <= 1) return 0;
  auto next = [&random_state] {
    std::uint32_t x = random_state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return random_state = x;
  };
  const std::uint32_t first = next() % count;
  std::uint32_t second = next() % (count - 1);
  if (second >= first) ++second;
  return executor_at(first).load() <= executor_at(second).load() ? first : second;
}

std::optional<std::uint32_t> runtime_core::pick_two_choices_in(
    const executor_domain& domain, std::uint32_t& random_state) const noexcept {
  const std::uint32_t count = executor_count();
  std::uint32_t members = 0;
  for (std::uint32_t i = 0; i < count; ++i) members += domain.contains(executor_at(i).placement());
  if (members == 0) return std::nullopt;
  // The k-th member of the domain (placements are immutable, so two scans agree).
  auto member = [&](std::uint32_t k) {
    for (std::uint32_t i = 0; i < count; ++i) {
      if (domain.contains(executor_at(i).placement()) && k-- == 0) return i;
    }
    return std::uint32_t(0);
  };
  const std::uint32_t first_rank = next_xorshift(random_state) % members;
  const std::uint32_t first = member(first_rank);
  if (members == 1) return first;
  // Two distinct members, as pick_two_choices draws two distinct executors.
  std::uint32_t second_rank = next_xorshift(random_state) % (members - 1);
  if (second_rank >= first_rank) ++second_rank;
  const std::uint32_t second = member(second_rank);
  return executor_at(first).load() <= executor_at(second).load() ? first : second;
}

void runtime_core::schedule(runnable* r, schedule_hint hint) noexcept {
  if (draining_.load(std::memory_order_relaxed)) return;  // shutdown step 5 destroys it
  executor* e = executor::current();
  if (e != nullptr && &e->core() == this) {
    e->push_local(r, hint);
    return;
  }
  // P2C reads four cache lines of two busy executors; a thread submitting in a burst reuses
  // its choice for `placement_reuse` submissions (the loads it compared are that stale anyway).
  struct placement_cache {
    const runtime_core* core = nullptr;
    std::uint32_t target = 0;
    std::uint32_t uses_left = 0;
    std::uint32_t random_state = 0;
  };
  constexpr std::uint32_t placement_reuse = 16;
  thread_local placement_cache placement;
  if (placement.random_state == 0) {
    placement.random_state = std::uint32_t(reinterpret_cast<std::uintptr_t>(&placement) >> 4) | 1u;
  }
  if (placement.core != this || placement.uses_left == 0 || placement.target >= executor_count()) {
    placement.core = this;
    placement.target = pick_two_choices(placement.random_state);
    placement.uses_left = placement_reuse;
  }
  --placement.uses_left;
  const std::uint32_t target = placement.target;
  metrics::stamp_schedule(*this, r);
  injector_.push(target, r);
  // No fence: the push counted the item with a seq_cst read-modify-write, which already orders
  // the publication before our seq_cst load of the idle state (parking.md).
  wake_one_if_idle(target);
}

void runtime_core::schedule_on(std::uint32_t executor_index, runnable* r) noexcept {
  if (draining_.load(std::memory_order_relaxed)) return;
  executor& target = executor_at(executor_index);
  metrics::stamp_schedule(*this, r);
  // relaxed: a statistic; several threads may push (see executor_stats::inbox_pushes).
  target.owner_stats().inbox_pushes.fetch_add(1, std::memory_order_relaxed);
  target.inbox().push(r);
  // The inbox is not stealable: wake this executor specifically, whoever is searching.
  wake_if_parked(executor_index);
}

void runtime_core::wake_if_parked(std::uint32_t executor_index) noexcept {
  executor& target = executor_at(executor_index);
  // Its own thread: it is awake, and looks at its inbox and timers before it parks.
  if (executor::current() == &target) return;
  // seq_cst fence: pairs with the parker's (Dekker): either it registered as a sleeper before
  // and we take it out and wake it, or it looks after and sees what the caller published.
  fence_seq_cst();
  if (cancel_park(executor_index)) target.parker().unpark();
}

void runtime_core::notify_work_available(std::uint32_t preferred) noexcept {
  // seq_cst fence: pairs with the parker's fence after it registered as a sleeper (Dekker):
  // either it sees the work we published before this call, or we see it registered below.
  fence_seq_cst();
  wake_one_if_idle(preferred);
}

void runtime_core::notify_after_seq_cst_publish() noexcept { wake_one_if_idle(no_preference); }

void runtime_core::wake_one_if_idle(std::uint32_t preferred) noexcept {
  const std::uint32_t count = executor_count();
  // seq_cst: the load side of the handshake (after a fence or a seq_cst publishing RMW).
  std::uint64_t state = idle_state_.load(std::memory_order_seq_cst);
  if (searching_of(state) != 0 || unparked_of(state) >= count) return;
  std::uint32_t woken;
  {
    std::lock_guard lock(sleepers_mutex_);
    state = idle_state_.load(std::memory_order_relaxed);  // relaxed: the mutex orders updates
    if (searching_of(state) != 0 || sleepers_.empty()) return;
    auto chosen = sleepers_.end() - 1;
    if (preferred != no_preference && is_sleeping_[preferred]) {
      chosen = std::find(sleepers_.begin(), sleepers_.end(), preferred);
    }
    // An executor on standby shares a CPU with a sibling that takes its work (parking.md,
    // "Executors that share a CPU"): wake another sleeper instead. When every sleeper is on
    // standby, wake nobody: some executor is not on standby (a standby is entered only for a
    // sibling not on standby, under standby_mutex_, so the last one entered points at an
    // executor that is not), and that one is not registered as a sleeper: it will see the work
    // before it parks (the Dekker pair above). Not while an executor is in a long runnable (that
    // one may be it): then a standby executor is woken like any other, and ends its standby if
    // the sibling it stands by for is the one stuck (executor::watch_cpu); otherwise it passes
    // the search on.
    // relaxed: the monitor's hint; the monitor also wakes someone for work stranded meanwhile.
    if (standby_enabled() && long_runnables_.load(std::memory_order_relaxed) == 0) {
      const std::uint64_t now = coarse_now_ns();
      if (executor_at(*chosen).on_standby_at(now)) {
        auto available = std::find_if(sleepers_.begin(), sleepers_.end(), [&](std::uint32_t i) {
          return !executor_at(i).on_standby_at(now);
        });
        if (available == sleepers_.end()) return;
        chosen = available;
      }
    }
    woken = *chosen;
    *chosen = sleepers_.back();
    sleepers_.pop_back();
    is_sleeping_[woken] = 0;
    woken_as_searcher_[woken] = 1;
    // seq_cst: part of the Dekker handshake state.
    idle_state_.fetch_add(one_searching | one_unparked, std::memory_order_seq_cst);
  }
  executor_at(woken).parker().unpark();
}

void runtime_core::unpark_all() noexcept {
  std::vector<std::uint32_t> woken;
  {
    std::lock_guard lock(sleepers_mutex_);
    woken.swap(sleepers_);
    sleepers_.reserve(options_.max_executors);
    for (std::uint32_t index : woken) {
      is_sleeping_[index] = 0;
      woken_as_searcher_[index] = 0;
      idle_state_.fetch_add(one_unparked, std::memory_order_seq_cst);  // seq_cst: handshake
    }
  }
  for (std::uint32_t index : woken) executor_at(index).parker().unpark();
  // Executors between registering and waiting are not in the list any more but will consume a
  // pending notification; make sure they have one.
  const std::uint32_t count = executor_count();
  for (std::uint32_t i = 0; i < count; ++i) executor_at(i).parker().unpark();
}

bool runtime_core::transition_to_searching() noexcept {
  // relaxed: a heuristic bound on searchers; exceeding it by a racing few is harmless.
  const std::uint64_t state = idle_state_.load(std::memory_order_relaxed);
  if (2 * searching_of(state) >= executor_count()) return false;
  idle_state_.fetch_add(one_searching, std::memory_order_seq_cst);  // seq_cst: handshake state
  return true;
}

bool runtime_core::transition_from_searching() noexcept {
  // seq_cst: a notifier that reads searching == 0 must not miss work this searcher published.
  const std::uint64_t previous = idle_state_.fetch_sub(one_searching, std::memory_order_seq_cst);
  return searching_of(previous) == 1;
}

void runtime_core::transition_to_parked(std::uint32_t index, bool was_searching) noexcept {
  std::lock_guard lock(sleepers_mutex_);
  const std::uint64_t delta = one_unparked + (was_searching ? one_searching : 0);
  idle_state_.fetch_sub(delta, std::memory_order_seq_cst);  // seq_cst: handshake state
  sleepers_.push_back(index);
  is_sleeping_[index] = 1;
}

bool runtime_core::cancel_park(std::uint32_t index) noexcept {
  std::lock_guard lock(sleepers_mutex_);
  if (!is_sleeping_[index]) return false;
  auto it = std::find(sleepers_.begin(), sleepers_.end(), index);
  *it = sleepers_.back();
  sleepers_.pop_back();
  is_sleeping_[index] = 0;
  woken_as_searcher_[index] = 0;
  idle_state_.fetch_add(one_unparked, std::memory_order_seq_cst);  // seq_cst: handshake state
  return true;
}

bool runtime_core::leave_sleepers(std::uint32_t index) noexcept {
  std::lock_guard lock(sleepers_mutex_);
  if (is_sleeping_[index]) {
    // Nobody woke us (timeout, spurious wake-up, or we are leaving on our own): unregister.
    auto it = std::find(sleepers_.begin(), sleepers_.end(), index);
    *it = sleepers_.back();
    sleepers_.pop_back();
    is_sleeping_[index] = 0;
    idle_state_.fetch_add(one_unparked, std::memory_order_seq_cst);  // seq_cst: handshake state
    return false;
  }
  // Someone else unregistered us; only notify_work_available counts the woken as a searcher.
  const bool searcher = woken_as_searcher_[index] != 0;
  woken_as_searcher_[index] = 0;
  return searcher;
}

bool runtime_core::work_addressed_to(std::uint32_t self_index) const noexcept {
  executor& self = executor_at(self_index);
  return !self.mailbox().empty_for_parking_recheck() || !self.inbox().empty() ||
         !self.local().empty() || self.offers().maybe_occupied();
}

bool runtime_core::any_work_visible(std::uint32_t self_index) const noexcept {
  executor& self = executor_at(self_index);
  if (!self.mailbox().empty_for_parking_recheck() || !self.inbox().empty() ||
      !self.local().empty()) {
    return true;
  }
  if (injector_.any()) return true;
  const std::uint32_t count = executor_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    // Two or more: a lone item is its owner's next runnable (only the stuck check takes it).
    if (i != self_index && executor_at(i).local().size() >= 2) return true;
    if (i != self_index && executor_at(i).offers().maybe_occupied()) return true;
  }
  return false;
}

void runtime_core::shutdown() noexcept {
  const bool from_worker = is_worker_thread();
  std::vector<worker_thread> to_join;
  bool first = false;
  {
    std::lock_guard lock(registry_mutex_);
    if (!stopping()) {
      first = true;
      // Set before stopping_ so no worker can exit thinking the shutdown will be joined.
      // relaxed: ordered by stopping_'s release below.
      if (from_worker) detached_.store(true, std::memory_order_relaxed);
      to_join.swap(threads_);
      // release: workers that see stopping_ also see detached_.
      stopping_.store(true, std::memory_order_release);
    }
  }
  if (!first) {
    // Someone else runs the shutdown. A plain thread waits until it is complete (shutdown() is
    // documented to return only then); a worker cannot wait for itself.
    if (!from_worker) {
      // acquire: everything the finishing thread did is visible after the wait.
      while (!finished_.load(std::memory_order_acquire)) finished_.wait(false, std::memory_order_acquire);
    }
    return;
  }
  unpark_all();
  if (detached_.load(std::memory_order_relaxed)) {
    for (worker_thread& t : to_join) t.detach();
    return;  // the last worker out finishes the shutdown
  }
  for (worker_thread& t : to_join) {
    if (t.joinable()) t.join();
  }
  finish_shutdown();
}

void runtime_core::worker_exited() noexcept {
  // acq_rel: the last worker out must see every other worker's final writes before draining.
  if (workers_running_.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
      detached_.load(std::memory_order_relaxed)) {
    finish_shutdown();
  }
}

void runtime_core::finish_shutdown() noexcept {
  // The monitor only reads executors; stop it before anything is drained.
  monitor_->stop();
  // Step 4 happened on each worker as it left its loop (executor::run_loop drains its reactor).
  // Step 5.
  // Close the gate first: an outside spawn still inside pushes before the drain below, which
  // then drops its task (core/outside_gate.hpp has the argument).
  outside_gate_.close_and_wait();
  draining_.store(true, std::memory_order_relaxed);  // relaxed: no worker runs any more
  drain_mailboxes();
  drain_queues();
  // Run the hook once and drop it (it may hold the layer above alive; see task/runtime.cpp).
  if (std::function<void()> hook = std::exchange(on_stopped_, {})) hook();
  outside_gate_.finished();  // every task is destroyed (step 6): unknown-host entrants go on
  // The frames the drain and the hook freed are cached no longer than the runtime lives: give
  // the depot's share back (the depot is trimmed to the bound other runtimes still hold) and
  // this thread's private cache (the workers' went with their threads).
  std::size_t share = 0;
  {
    std::lock_guard lock(registry_mutex_);
    share = std::exchange(frame_cache_share_, 0);
  }
  remove_frame_cache_share(share);
  release_thread_frame_cache();
  // release: pairs with the acquire of waiting shutdown() callers.
  finished_.store(true, std::memory_order_release);
  finished_.notify_all();
}

void runtime_core::drain_mailboxes() noexcept {
  // Step 5a: close every mailbox and discard what it holds (executor_mailbox.cpp). A message sent
  // to a closed mailbox is discarded by its sender, so each is discarded exactly once.
  const std::uint32_t count = executor_count();
  for (std::uint32_t i = 0; i < count; ++i) executor_at(i).discard_mailbox();
}

void runtime_core::drain_queues() noexcept {
  const std::uint32_t count = executor_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    executor& e = executor_at(i);
    while (runnable* r = e.take_from_inbox()) r->drop();
    while (runnable* r = e.local().pop()) r->drop();
    while (runnable* r = e.pinned_yielded_.pop_front()) r->drop();
  }
  for (std::size_t shard = 0; shard < injector_.shard_count(); ++shard) {
    std::size_t taken = 0;
    while (runnable* r = injector_.pop_batch(shard, 1024, taken)) {
      while (r != nullptr) {
        runnable* next = r->next;
        r->drop();
        r = next;
      }
    }
  }
}

}  // namespace spindle::core
