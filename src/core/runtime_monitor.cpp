// The runtime monitor (design in include/spindle/core/runtime_monitor.hpp).
#include "spindle/core/runtime_monitor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "spindle/core/frame_allocator.hpp"
#include "spindle/core/runtime_core.hpp"

namespace spindle::core {
namespace {

// Shortest tick, whatever the service interval asks for: below this the monitor's own wake-ups
// start to cost a measurable share of a core.
constexpr std::uint64_t min_tick_ns = 25'000;
// How long the monitor sleeps at most while every executor is parked, and how long everyone
// must have been parked before it does (five time constants of the utilisation average).
constexpr auto idle_sleep = std::chrono::milliseconds(100);
constexpr std::uint64_t idle_after_ns = 20'000'000;
// Utilisation: shortest sampling window and the moving average's time constant (load.md).
constexpr std::uint64_t utilisation_window_ns = 1'000'000;
constexpr std::uint64_t utilisation_time_constant_ns = 4'000'000;
// How long the monitor waits at most for pinged workers to take their signal.
constexpr std::uint64_t ping_acknowledgement_wait_ns = 20'000;

}  // namespace

runtime_monitor::runtime_monitor(runtime_core& core) : core_(core) {}

runtime_monitor::~runtime_monitor() { stop(); }

void runtime_monitor::start() {
  thread_ = std::thread([this] { run(); });
}

void runtime_monitor::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void runtime_monitor::executor_awake() noexcept {
  // seq_cst: the executor's side of the Dekker pair with sleep_while_all_parked: its unparked
  // count was raised (seq_cst) before this load, so either the monitor's re-check sees it or we
  // see idle_ set here.
  if (!idle_.load(std::memory_order_seq_cst)) return;
  std::lock_guard lock(mutex_);
  wake_.notify_all();
}

void runtime_monitor::wake_for_fine_time() noexcept {
  std::lock_guard lock(mutex_);
  wake_.notify_all();
}

void runtime_monitor::run() noexcept {
  const auto interval = std::uint64_t(core_.options().service_interval.count());
  const std::uint64_t tick_ns = std::max(interval / 4, min_tick_ns);
  const std::uint64_t relaxed_tick_ns = std::max(interval, tick_ns);
  std::uint64_t next_tick = monotonic_nanoseconds();
  std::uint64_t all_parked_since = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (stop_requested_) return;
    }
    const std::uint64_t now = monotonic_nanoseconds();
    tick(now);
    // Everyone parked: keep ticking a little longer, so that utilisation decays to idle before
    // the monitor stops sampling, then sleep until an executor wakes.
    if (core_.unparked_count() != 0) {
      all_parked_since = 0;
    } else if (all_parked_since == 0) {
      all_parked_since = now;
    } else if (now - all_parked_since >= idle_after_ns) {
      trim_idle_frame_depot(now - all_parked_since);
      sleep_while_all_parked();
      // Woken by an executor: tick for a while again. Still everyone parked (the sleep timed
      // out): utilisation decayed long ago, so keep `all_parked_since` and go back to sleep
      // after this one tick instead of ticking through another idle_after_ns (an idle runtime
      // ticked ~600 times a second that way).
      if (core_.unparked_count() != 0) all_parked_since = 0;
      next_tick = monotonic_nanoseconds();
      continue;
    }
    // Fine ticks at fixed points in time (a late tick does not push back the ones after it);
    // relaxed ones when the next service falls due, at least a fine tick from now.
    if (const std::uint64_t due = relaxed_tick_at(now, relaxed_tick_ns); due != 0) {
      next_tick = std::max(due, now + tick_ns);
    } else {
      next_tick += tick_ns;
      if (next_tick <= now) next_tick = now + tick_ns;
    }
    std::unique_lock lock(mutex_);
    if (stop_requested_) return;
    wake_.wait_for(lock, std::chrono::nanoseconds(next_tick - now));
  }
}

std::uint64_t runtime_monitor::relaxed_tick_at(std::uint64_t now,
                                                std::uint64_t relaxed_tick_ns) noexcept {
  if (core_.fine_time_claimed()) return 0;
  const std::uint64_t interval = core_.service_interval_ns();
  std::uint64_t due = now + relaxed_tick_ns;
  const std::uint32_t count = core_.executor_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    const executor& e = core_.executor_at(i);
    // relaxed: samples of the executors' published words (executor.hpp); a stale one makes
    // one tick early or one relaxed tick late, which the bounds in the header allow for.
    // A ping requested for a deadline (fork-join with latent work, executor.hpp "Pings").
    if (e.ping_deadline_ns_.load(std::memory_order_relaxed) != 0) return 0;
    const std::uint64_t awake_since = e.awake_since_ns_.load(std::memory_order_relaxed);
    if (awake_since == 0) continue;  // parked: nothing falls due
    // Added (runtime_core::add_executor) since this tick read the count: it has no view yet
    // (views_ holds one per executor the tick saw). Tick finely; the next tick looks at it.
    if (i >= views_.size()) return 0;
    // Inside a runnable that began before this tick's look (its progress did not move since the
    // last tick): it may be a long one, and the steps that watch for those need fine ticks.
    if (views_[i].progress_since_ns != now &&
        e.running_.load(std::memory_order_relaxed) != nullptr) {
      return 0;
    }
    // Its next service falls due a service interval of busy time after the last one.
    const std::uint64_t last = std::max(e.last_service_at_ns_.load(std::memory_order_relaxed),
                                        awake_since);
    due = std::min(due, last + interval);
  }
  return due;
}

void runtime_monitor::sleep_while_all_parked() noexcept {
  std::unique_lock lock(mutex_);
  // seq_cst: the monitor's side of the Dekker pair with executor_awake (see there).
  idle_.store(true, std::memory_order_seq_cst);
  if (!stop_requested_ && core_.unparked_count_seq_cst() == 0) {
    wake_.wait_for(lock, idle_sleep);
  }
  idle_.store(false, std::memory_order_relaxed);  // relaxed: only a hint for executor_awake
}

void runtime_monitor::trim_idle_frame_depot(std::uint64_t idle_ns) noexcept {
  const std::int64_t trim_after = core_.options().frame_cache_idle_trim.count();
  if (trim_after <= 0 || idle_ns < std::uint64_t(trim_after)) return;
  // The low-water mark: what the other live runtimes (and embedded executors) may keep.
  const frame_cache_statistics cache = frame_cache_stats();
  const std::size_t share = std::size_t(core_.executor_count()) * core_.options().frame_cache_bytes;
  const std::size_t keep = cache.depot_bound > share ? cache.depot_bound - share : 0;
  if (cache.depot_bytes <= keep) return;
  trim_frame_depot(keep);
  frame_depot_trims_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
}

void runtime_monitor::tick(std::uint64_t now) noexcept {
  // Forward only: a waking executor may have advanced it past this tick's `now` meanwhile.
  core_.advance_coarse_clock(now);
  ticks_.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
  const std::uint32_t count = core_.executor_count();
  if (views_.size() < count) views_.resize(count, executor_view{0, now, 0, now});
  for (std::uint32_t i = 0; i < count; ++i) {
    sample_utilisation(i, now);
    watch_progress(i, now);
  }
  send_pings(count, now);
  // acquire: pairs with set_watcher's release (the watcher is fully built).
  if (monitor_watcher* watcher = watcher_.load(std::memory_order_acquire)) {
    for (std::uint32_t i = 0; i < count; ++i) watcher->watch_executor(sample_executor(i), now);
    watcher->tick_done(now);
  }
  if (core_.standby_enabled()) {
    watch_cpu_sharing(count);
    watch_cpu_contention(count, now);
    // Injected work nobody takes: executors on standby are not woken for it while the executor
    // they stand by for is awake, and that one may be inside a long runnable. Wake someone
    // (standby does not count while an executor is in a long runnable,
    // runtime_core::wake_one_if_idle).
    // relaxed: a hint.
    if (core_.long_runnables_.load(std::memory_order_relaxed) != 0 && core_.injector_.any()) {
      core_.notify_work_available();
    }
  }
}

void runtime_monitor::send_pings(std::uint32_t count, std::uint64_t now) noexcept {
  const int signal_number = core_.options().ping_signal;
  bool pinged = false;
  if (signal_number != 0) {
    for (std::uint32_t i = 0; i < count; ++i) {
      pinged |= core_.executor_at(i).ping_if_due(now, now - views_[i].progress_since_ns,
                                                 signal_number);
    }
  }
  if (pinged) {
    // A ping handler may publish on its offer board but cannot wake anyone (signal context):
    // give the signals a moment to land (a running thread takes one within microseconds), so
    // the wake-up below sees what they published instead of waiting a tick. Sleeping, not
    // spinning: a pinged worker the kernel has descheduled takes its signal only when it runs
    // again, and a spinning monitor would take the CPU it waits for.
    bool all_taken = true;
    for (std::uint32_t i = 0; i < count && all_taken; ++i) {
      all_taken = core_.executor_at(i).ping_taken();
    }
    if (!all_taken) std::this_thread::sleep_for(std::chrono::nanoseconds(ping_acknowledgement_wait_ns));
  }
  // Work on an offer board while an executor is parked: published in signal context (above, or
  // by a handler that ran late), or by a notifier whose wake-up found someone searching who then
  // parked. Wake one; notify_work_available does nothing while someone searches or none parks.
  for (std::uint32_t i = 0; i < count; ++i) {
    if (core_.executor_at(i).offers().maybe_occupied()) {
      core_.notify_work_available();
      break;
    }
  }
}

void runtime_monitor::watch_cpu_sharing(std::uint32_t count) noexcept {
  // Lowest to highest index: the first awake executor seen on a CPU claims it, every later one
  // on the same CPU is told to compare at its next service (executor::watch_cpu decides).
  constexpr std::uint32_t unclaimed = ~std::uint32_t(0);
  for (std::uint32_t i = 0; i < count; ++i) {
    executor& e = core_.executor_at(i);
    // relaxed: hints (executor.hpp).
    const std::int32_t cpu = e.last_cpu_.load(std::memory_order_relaxed);
    bool shares = false;
    if (cpu >= 0 && e.awake_since_ns_.load(std::memory_order_relaxed) != 0) {
      if (std::size_t(cpu) >= cpu_claimed_by_.size()) {
        cpu_claimed_by_.resize(std::size_t(cpu) + 1, unclaimed);
      }
      std::uint32_t& claim = cpu_claimed_by_[std::size_t(cpu)];
      if (claim == unclaimed) {
        claim = i;
        claimed_cpus_.push_back(cpu);
      } else {
        shares = true;
      }
    }
    if (e.shares_cpu_.load(std::memory_order_relaxed) != shares) {
      e.shares_cpu_.store(shares, std::memory_order_relaxed);  // relaxed: a hint
    }
  }
  for (const std::int32_t cpu : claimed_cpus_) cpu_claimed_by_[std::size_t(cpu)] = unclaimed;
  claimed_cpus_.clear();
}

void runtime_monitor::watch_cpu_contention(std::uint32_t count, std::uint64_t now) noexcept {
  // Step 6. The co-location rule (watch_cpu_sharing, executor::watch_cpu) sees two of our own
  // threads on one CPU; it cannot see a CPU we share with a thread that is not ours (a load
  // generator, a compiler). The kernel's accounting can: a thread on a shared CPU waits for it
  // about half its runnable time, one on a CPU of its own hardly at all. Only a reactor's owner
  // delivers its completions, so the connections of an executor that waits wait with it while
  // a sibling on a free CPU could serve them; that executor stands by for the sibling.
  // Both must show it: the sibling must have run (evidence that its CPU is free, not merely
  // that it was parked) and waited under an eighth; on a machine busy everywhere nobody waits
  // that little, and nobody stands by (their CPU share is all they have).
  constexpr std::uint64_t windows_in_service_intervals = 8;
  constexpr std::uint64_t evidence_ns = 1'000'000;  // of runnable time in a window
  const std::uint64_t window_ns = windows_in_service_intervals * core_.service_interval_ns();
  if (now - contention_window_start_ns_ < window_ns) return;
  contention_window_start_ns_ = now;
  bool any_io = false;
  for (std::uint32_t i = 0; i < count; ++i) {
    // relaxed: hints (executor.hpp).
    any_io |= core_.executor_at(i).serves_io_.load(std::memory_order_relaxed);
  }
  const std::uint64_t coarse_now = core_.coarse_now_ns();
  constexpr std::uint32_t none = ~std::uint32_t(0);
  std::uint32_t waits_most = none;  // serves I/O and waited over a quarter: the most
  double most = 0.25;
  for (std::uint32_t i = 0; i < count; ++i) {
    executor_view& view = views_[i];
    executor& e = core_.executor_at(i);
    view.share_waited = -1;
    std::uint64_t running = 0, waiting = 0;
    // Without I/O there is nothing to decide: read nothing (no system calls for CPU work).
    if (!any_io || !e.thread_cpu_times(running, waiting)) {
      view.cpu_times_valid = false;
      continue;
    }
    const bool had_window = view.cpu_times_valid;
    const std::uint64_t ran = running - view.cpu_running_ns;
    const std::uint64_t waited = waiting - view.cpu_waiting_ns;
    view.cpu_running_ns = running;
    view.cpu_waiting_ns = waiting;
    view.cpu_times_valid = true;
    if (!had_window || ran + waited < evidence_ns || e.on_standby_at(coarse_now) ||
        e.in_long_runnable()) {
      continue;
    }
    view.share_waited = double(waited) / double(ran + waited);
    // relaxed: a hint (executor.hpp).
    if (view.share_waited > most && e.serves_io_.load(std::memory_order_relaxed)) {
      most = view.share_waited;
      waits_most = i;
    }
  }
  if (waits_most == none) return;
  // The sibling that waited least, under an eighth, last seen on another CPU: two executors on
  // one CPU are the co-location rule's case (it knows which of the two should stand by).
  // relaxed: hints (executor.hpp).
  const std::int32_t busy_cpu =
      core_.executor_at(waits_most).last_cpu_.load(std::memory_order_relaxed);
  std::uint32_t waits_least = none;
  double least = 0.125;
  for (std::uint32_t i = 0; i < count; ++i) {
    const double share = views_[i].share_waited;
    if (i == waits_most || share < 0 || share >= least ||
        core_.executor_at(i).last_cpu_.load(std::memory_order_relaxed) == busy_cpu) {
      continue;
    }
    least = share;
    waits_least = i;
  }
  if (waits_least != none) {
    // relaxed: a hint the executor checks again (executor::take_standby_request).
    core_.executor_at(waits_most).standby_request_.store(waits_least + 1,
                                                         std::memory_order_relaxed);
  }
}

void runtime_monitor::sample_utilisation(std::uint32_t index, std::uint64_t now) noexcept {
  executor& e = core_.executor_at(index);
  executor_view& view = views_[index];
  const std::uint64_t window = now - view.window_start_ns;
  if (window < utilisation_window_ns) return;
  const std::uint64_t busy = e.busy_nanoseconds_until(now);
  // The executor publishes its total and its awake-since stamp separately; a sample taken
  // between the two stores can be off by one stretch: clamp.
  const std::uint64_t busy_in_window = busy > view.busy_ns ? busy - view.busy_ns : 0;
  view.busy_ns = busy;
  view.window_start_ns = now;
  const double sample = std::min(1.0, double(busy_in_window) / double(window));
  // Time-weighted EWMA: a window of length w moves the average by 1 - exp(-w / tau).
  const double weight = 1.0 - std::exp(-double(window) / double(utilisation_time_constant_ns));
  std::atomic<std::uint32_t>& published = e.stats_.utilisation;
  const double old = published.load(std::memory_order_relaxed) / 65536.0;
  const double updated = old + (sample - old) * weight;
  // relaxed: single writer (this thread), sampled by readers (P2C, migration, diagnostics).
  published.store(std::uint32_t(updated * 65536.0 + 0.5), std::memory_order_relaxed);
  e.stats_.busy_nanoseconds.store(busy, std::memory_order_relaxed);
}

executor_sample runtime_monitor::sample_executor(std::uint32_t index) const noexcept {
  const executor& e = core_.executor_at(index);
  executor_sample sample;
  sample.index = index;
  // relaxed: samples of single-writer words (the watcher confirms over several ticks).
  sample.parked = e.awake_since_ns_.load(std::memory_order_relaxed) == 0;
  sample.progress = e.progress_.load(std::memory_order_relaxed);
  sample.running = e.running_.load(std::memory_order_relaxed);
  sample.local_queued = e.local_.size();
  sample.local_oldest_position = e.local_.oldest_position();
  sample.inbox_holds_work = !e.inbox_.empty();
  sample.injector_queued = core_.injector_.size(index);
  sample.injector_taken = core_.injector_.taken(index);
  sample.thread_id = e.thread_id_.load(std::memory_order_relaxed);
  return sample;
}

void runtime_monitor::watch_progress(std::uint32_t index, std::uint64_t now) noexcept {
  executor& e = core_.executor_at(index);
  executor_view& view = views_[index];
  const std::uint64_t progress = e.progress_.load(std::memory_order_relaxed);  // relaxed: sample
  const bool parked = e.awake_since_ns_.load(std::memory_order_relaxed) == 0;
  if (progress != view.progress || parked) {
    view.progress = progress;
    view.progress_since_ns = now;
    if (e.in_long_runnable_.load(std::memory_order_relaxed)) {
      e.in_long_runnable_.store(false, std::memory_order_relaxed);  // relaxed: a hint
      core_.long_runnables_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a hint
    }
    return;
  }
  const auto threshold = std::uint64_t(core_.options().long_runnable_after.count());
  if (now - view.progress_since_ns < threshold) return;
  if (!e.in_long_runnable_.load(std::memory_order_relaxed)) {
    // relaxed: a hint for thieves and P2C; stealing itself is synchronised by the queue's CAS.
    e.in_long_runnable_.store(true, std::memory_order_relaxed);
    core_.long_runnables_.fetch_add(1, std::memory_order_relaxed);
  }
  // Something it holds could run elsewhere: due timers or queued work. Wake a parked executor
  // to rescue it (busy ones rescue at their next service, executor::service).
  if (e.has_rescuable_work()) core_.notify_work_available();
}

}  // namespace spindle::core
