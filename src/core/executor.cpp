// The executor loop. Design and order of polling: include/spindle/core/executor.hpp and
// docs/design/executor-loop.md; parking: runtime_core.hpp and docs/design/parking.md.
#include "spindle/core/executor.hpp"

#include <chrono>
#include <cmath>

#include "spindle/core/runtime_core.hpp"

namespace spindle::core {
namespace {

thread_local executor* current_executor = nullptr;

// How long an executor parks at most while some other executor is awake: after that it checks
// whether an awake executor has been stuck in one runnable for the whole interval with a
// runnable waiting in its queue, and takes it (see steal_from_stuck_owners).
constexpr clock_duration stuck_check_interval = std::chrono::milliseconds(2);

// Shortest utilisation sampling window, and the time constant of the moving average (load.md).
constexpr std::uint64_t utilisation_window_ns = 1'000'000;
constexpr std::uint64_t utilisation_time_constant_ns = 4'000'000;

}  // namespace

executor::executor(runtime_core& core, std::uint32_t index, spindle::clock& clock,
                   executor_placement placement)
    : core_(core),
      index_(index),
      placement_(placement),
      timers_(clock),
      reactor_(make_reactor(core.options().io_backend, core.options().reactor)),
      random_state_(0x9e3779b9u * (index + 1) ^ std::uint32_t(reinterpret_cast<std::uintptr_t>(this))) {
  if (random_state_ == 0) random_state_ = 1;
}

executor* executor::current() noexcept { return current_executor; }

void executor::bind_thread() noexcept {
  if (placement_.os_index == executor_placement::unknown) return;
  // release: readers of bound_to_cpu() see the binding's outcome, not an earlier state.
  bound_to_cpu_.store(bind_current_thread_to_cpu(placement_.os_index), std::memory_order_release);
}

std::uint32_t executor::load() const noexcept {
  return local_.size() +
         std::uint32_t(core_.global_injector().size(index_)) + (inbox_.empty() ? 0u : 1u);
}

std::uint32_t executor::next_random() noexcept { return next_xorshift(random_state_); }

void executor::overflow(runnable** items, std::uint32_t count) noexcept {
  for (std::uint32_t i = 0; i + 1 < count; ++i) items[i]->next = items[i + 1];
  core_.global_injector().push_batch(index_, items[0], items[count - 1], count);
  // The batch was published under the shard mutex, not by a seq_cst RMW: fenced notify.
  core_.notify_work_available(index_);
}

void executor::push_local(runnable* r, schedule_hint hint) noexcept {
  auto sink = [this](runnable** items, std::uint32_t count) { overflow(items, count); };
  if (hint == schedule_hint::yield) {
    local_.push_oldest(r, sink);
    core_.notify_work_available();
    return;
  }
  // A lone item is what this executor runs next; thieves leave it alone (local_queue.hpp), so
  // waking an idle executor for it would be wasted. From two items on, there is work to share.
  // The push's CAS is seq_cst, which stands in for the handshake fence.
  const std::uint32_t queued = local_.push(r, sink);
  if (queued >= 2) {
    core_.notify_after_seq_cst_publish();
  } else {
    // A lone item is left to us, but if the running task never yields someone must notice:
    // make sure one parked executor watches for stuck owners (see steal_from_stuck_owners).
    core_.ensure_watcher();
  }
}

runnable* executor::take_from_inbox() noexcept {
  if (inbox_backlog_ == nullptr) inbox_backlog_ = inbox_.take_all();
  runnable* r = inbox_backlog_;
  if (r != nullptr) inbox_backlog_ = r->next;
  return r;
}

runnable* executor::take_from_injector(std::size_t shard) noexcept {
  injector& global = core_.global_injector();
  // Take at most what fits in half of our ring, so the batch never overflows straight back.
  const std::uint32_t room =
      queue_type::capacity / 2 - std::min<std::uint32_t>(local_.size(), queue_type::capacity / 2);
  std::size_t taken = 0;
  runnable* first = global.pop_batch(shard, std::max<std::uint32_t>(room, 1), taken);
  if (first == nullptr) return nullptr;
  auto sink = [this](runnable** items, std::uint32_t count) { overflow(items, count); };
  for (runnable* r = first->next; r != nullptr;) {
    runnable* next = r->next;
    local_.push(r, sink);
    r = next;
  }
  if (taken > 1) core_.notify_work_available();
  return first;
}

runnable* executor::next_runnable() noexcept {
  // Messages first (M1): one relaxed load while the mailbox is empty. Delivering may queue
  // runnables, which the steps below then find.
  if (!mailbox_.empty()) poll_mailbox();
  ++tick_;
  // A countdown rather than tick % interval: a division per runnable is measurable here.
  if (--until_injector_check_ == 0) {
    until_injector_check_ = core_.options().injector_check_interval;
    if (runnable* r = take_from_injector(index_)) return r;  // fairness to remote work
    if (runnable* r = take_starving_oldest()) return r;      // fairness to old local work
  }
  if (runnable* r = take_from_inbox()) return r;
  if (runnable* r = local_.pop()) return r;
  // Out of local work: submit what the last slices queued, route the completions (seed 000).
  if (reactor_->in_flight() != 0) {
    reactor_->poll();
    if (runnable* r = local_.pop()) return r;
  }
  if (runnable* r = take_from_injector(index_)) return r;
  return nullptr;
}

runnable* executor::take_starving_oldest() noexcept {
  const std::uint16_t oldest = local_.oldest_position();
  if (local_.empty() || oldest != oldest_position_seen_) {
    oldest_position_seen_ = oldest;  // a different item is the oldest now: restart its clock
    oldest_since_tick_ = tick_;
    return nullptr;
  }
  if (tick_ - oldest_since_tick_ < core_.options().local_fairness_interval) return nullptr;
  oldest_since_tick_ = tick_;
  return local_.pop_oldest();
}

runnable* executor::take_offer(std::uint32_t start) noexcept {
  const std::uint32_t count = core_.executor_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t victim = (start + i) % count;
    if (victim == index_) continue;
    if (runnable* r = core_.executor_at(victim).offers().take()) return r;
  }
  return nullptr;
}

runnable* executor::steal_round() noexcept {
  const std::uint32_t count = core_.executor_count();
  const std::uint32_t start = next_random() % count;
  // Offers first: a promoted fork-join continuation waited a whole quantum to be offered and is
  // the largest piece of work around (fork-join.md).
  if (runnable* r = take_offer(start)) return r;
  // Nearest victims first (same cache domain, then same NUMA node, then the rest) when
  // executors are bound to a machine with more than one domain; one pass otherwise.
  const std::uint32_t farthest = core_.steals_nearest_first() ? 2 : 0;
  for (std::uint32_t distance = 0; distance <= farthest; ++distance) {
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::uint32_t victim = (start + i) % count;
      if (victim == index_) continue;
      executor& other = core_.executor_at(victim);
      if (farthest != 0 && placement_.distance_to(other.placement()) != distance) continue;
      if (runnable* r = other.local().steal_into(local_)) {
        // relaxed: single writer (this thread); readers sample.
        stats_.steals.store(stats_.steals.load(std::memory_order_relaxed) + 1,
                            std::memory_order_relaxed);
        return r;
      }
    }
  }
  const std::size_t shards = count;
  for (std::size_t i = 0; i < shards; ++i) {
    if (runnable* r = take_from_injector((start + i) % shards)) return r;
  }
  return nullptr;
}

runnable* executor::search() noexcept {
  // Alone, there is no one to steal from (next_runnable looked at our injector shard).
  if (core_.executor_count() == 1) return nullptr;
  if (!is_searching_) {
    if (!core_.transition_to_searching()) return nullptr;
    is_searching_ = true;
  }
  // Exponential backoff between rounds (seed 003 TODO): a failed round means the other
  // executors' queues are empty right now; spinning harder only steals cache lines from them.
  // Waiting between rounds is worth it only while another executor is awake to produce work,
  // and ends as soon as our own ring has completions for us: we deliver them and run what they
  // woke (run_one ends the search).
  for (std::uint32_t round = 0; round < 4; ++round) {
    if (runnable* r = steal_round()) return r;
    // A message arrived: the loop polls its mailbox before searching on.
    if (core_.stopping() || !mailbox_.empty()) return nullptr;
    if (round == 3 || core_.unparked_count() <= 1) break;
    for (std::uint32_t spin = 0; spin < (32u << round); ++spin) {
      if ((spin & 15) == 0 && reactor_->completions_pending()) {
        reactor_->poll();
        return local_.pop();  // null if the completions woke nothing here: the loop parks
      }
      cpu_relax();
    }
  }
  return nullptr;
}

void executor::run_one(runnable* r) noexcept {
  if (is_searching_) {
    is_searching_ = false;
    // The last searcher to find work wakes another: where there was some, there may be more.
    if (core_.transition_from_searching()) core_.notify_work_available();
  }
  r->run();
  // relaxed: single writer; the counters are samples for diagnostics and the stuck check.
  stats_.runnables_run.store(stats_.runnables_run.load(std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
  progress_.store(tick_, std::memory_order_relaxed);
  if (++budget_used_ >= core_.options().budget) end_of_budget();
}

void executor::end_of_budget() noexcept {
  budget_used_ = 0;
  if (!local_.empty()) {
    stats_.budget_exhaustions.store(stats_.budget_exhaustions.load(std::memory_order_relaxed) + 1,
                                    std::memory_order_relaxed);
  }
  fire_timers();
  if (reactor_->in_flight() != 0) reactor_->poll();
  update_utilisation(monotonic_nanoseconds());
}

void executor::fire_timers() noexcept {
  if (timers_.size() == 0) return;
  if (const std::size_t fired = timers_.fire_due()) {
    stats_.timers_fired.store(stats_.timers_fired.load(std::memory_order_relaxed) + fired,
                              std::memory_order_relaxed);
  }
}

void executor::update_utilisation(std::uint64_t now_ns) noexcept {
  const std::uint64_t window = now_ns - window_start_ns_;
  if (window < utilisation_window_ns) return;
  std::uint64_t busy = window_busy_ns_;
  if (busy_since_ns_ != 0) busy += now_ns - busy_since_ns_;
  if (busy_since_ns_ != 0) busy_since_ns_ = now_ns;
  const double sample = std::min(1.0, double(busy) / double(window));
  // Time-weighted EWMA: a window of length w moves the average by 1 - exp(-w / tau), so a long
  // stretch of busy (or idle) time counts for its length, however few samples it produced.
  const double weight = 1.0 - std::exp(-double(window) / double(utilisation_time_constant_ns));
  const double old = stats_.utilisation.load(std::memory_order_relaxed) / 65536.0;
  const double updated = old + (sample - old) * weight;
  // relaxed: single writer, sampled by readers (P2C, diagnostics).
  stats_.utilisation.store(std::uint32_t(updated * 65536.0 + 0.5), std::memory_order_relaxed);
  stats_.busy_nanoseconds.store(stats_.busy_nanoseconds.load(std::memory_order_relaxed) + busy,
                                std::memory_order_relaxed);
  window_start_ns_ = now_ns;
  window_busy_ns_ = 0;
}

void executor::observe_progress() noexcept {
  const std::uint32_t count = core_.executor_count();
  observed_progress_.resize(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    // relaxed: a progress sample; the queue's CAS carries the synchronisation.
    observed_progress_[i] = core_.executor_at(i).progress_.load(std::memory_order_relaxed);
  }
}

runnable* executor::steal_from_stuck_owners() noexcept {
  const std::uint32_t count = std::min<std::uint32_t>(core_.executor_count(),
                                                      std::uint32_t(observed_progress_.size()));
  for (std::uint32_t i = 0; i < count; ++i) {
    if (i == index_) continue;
    executor& other = core_.executor_at(i);
    // Same runnable still running since our baseline, a whole interval ago: stuck.
    if (other.progress_.load(std::memory_order_relaxed) == observed_progress_[i]) {
      if (runnable* r = other.local().steal_into(local_, /*include_newest=*/true)) return r;
    }
  }
  return nullptr;
}

void executor::park() noexcept {
  const bool was_searching = is_searching_;
  is_searching_ = false;
  // 1. PARKING: registered as a sleeper, counted as parked; senders of messages see the flag.
  mailbox_.announce_parking();
  core_.transition_to_parked(index_, was_searching);
  // 2. Re-check every work source after the fence (pairs with notify_work_available's fence; the
  // mailbox's re-check is a seq_cst load against the sender's seq_cst post, executor_mailbox.hpp).
  fence_seq_cst();
  if (core_.stopping() || core_.any_work_visible(index_)) {
    is_searching_ = core_.leave_sleepers(index_);
    mailbox_.announce_awake();
    return;
  }
  // 3. PARKED: wait for a notification, the next timer deadline, or the stuck check.
  std::optional<clock_duration> timeout;
  spindle::clock& clock = timers_.clock();
  if (clock.is_real_time()) {
    if (auto deadline = timers_.next_deadline()) timeout = *deadline - clock.now();
  }
  const bool others_awake = core_.unparked_count() > 0;
  if (others_awake) {
    observe_progress();
    if (!timeout || *timeout > stuck_check_interval) timeout = stuck_check_interval;
  }
  stats_.parks.store(stats_.parks.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const std::uint64_t parked_at = monotonic_nanoseconds();
  if (busy_since_ns_ != 0) window_busy_ns_ += parked_at - busy_since_ns_;
  busy_since_ns_ = 0;
  if (others_awake) core_.watchers_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a hint
  reactor_->wait(timeout);
  if (others_awake) core_.watchers_.fetch_sub(1, std::memory_order_relaxed);
  busy_since_ns_ = monotonic_nanoseconds();
  // 4. Woken: by a notifier (it unregistered us, maybe as a searcher) or by time.
  is_searching_ = core_.leave_sleepers(index_);
  mailbox_.announce_awake();
  fire_timers();
  update_utilisation(busy_since_ns_);
  const auto waited = clock_duration(busy_since_ns_ - parked_at);
  if (others_awake && waited >= stuck_check_interval) {
    if (runnable* r = steal_from_stuck_owners()) {
      local_.push(r, [this](runnable** items, std::uint32_t n) { overflow(items, n); });
    }
  }
}

void executor::run_loop() noexcept {
  current_executor = this;
  reactor_->attach_owner();
  busy_since_ns_ = window_start_ns_ = monotonic_nanoseconds();
  while (!core_.stopping()) {
    runnable* r = next_runnable();
    if (r == nullptr) r = search();
    if (r != nullptr) {
      run_one(r);
      continue;
    }
    if (!mailbox_.empty()) continue;  // a message arrived while searching: deliver it first
    fire_timers();
    park();
  }
  if (is_searching_) {
    is_searching_ = false;
    core_.transition_from_searching();
  }
  reactor_->drain();  // shutdown step 4 (runtime_core.hpp), on the reactor's owner thread
  current_executor = nullptr;
}

}  // namespace spindle::core
