// The executor loop. Design and order of polling: include/spindle/core/executor.hpp and
// docs/design/executor-loop.md; parking: runtime_core.hpp and docs/design/parking.md.
#include "spindle/core/executor.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "spindle/core/errors.hpp"
#include "spindle/core/executor_metrics.hpp"
#include "spindle/core/frame_allocator.hpp"
#include "spindle/core/runtime_core.hpp"

namespace spindle::core {

// Declared in executor.hpp (executor::current).
thread_local constinit executor* detail::current_executor = nullptr;

namespace {

// The ping signal's dispositions before spindle installed its handler, per signal number
// (written under ping_install_mutex before the handler is installed, read-only afterwards).
std::mutex ping_install_mutex;
struct previous_disposition {
  bool installed = false;
  struct sigaction action {};
};
previous_disposition previous_dispositions[NSIG];

}  // namespace

void executor::install_ping_signal(int signal_number) {
  if (signal_number <= 0 || signal_number >= NSIG) {
    throw usage_error("spindle: ping_signal is not a signal number");
  }
  std::lock_guard lock(ping_install_mutex);
  previous_disposition& previous = previous_dispositions[signal_number];
  if (previous.installed) return;
  struct sigaction action {};
  action.sa_sigaction = &executor::on_ping_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a system call the ping interrupts is restarted where the kernel allows it (reads,
  // writes, futex waits); the ones it never restarts (epoll_wait, nanosleep, poll, io_uring_enter
  // with a timeout) return EINTR, which spindle's own waits treat as a spurious wake-up.
  // SA_ONSTACK: runs on an alternate stack if the thread has one (Go-style hosts require it).
  action.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  if (sigaction(signal_number, &action, &previous.action) != 0) {
    throw usage_error("spindle: ping_signal refused by sigaction");
  }
  previous.installed = true;
}

void executor::on_ping_signal(int signal_number, siginfo_t* info, void* context) noexcept {
  const int saved_errno = errno;  // the interrupted code may be between a call and its errno
  executor* self = detail::current_executor;
  // A ping is marked with its executor (ping_if_due); anything else is the program's.
  const bool marked = info != nullptr && info->si_code == SI_QUEUE && self != nullptr &&
                      info->si_value.sival_ptr == static_cast<void*>(self);
  if (marked) {
    // relaxed exchange: a lock-free RMW, signal-safe; it tells whether the monitor still waits
    // for this ping (false: a second copy of one it presumed lost, the first taken: nothing to
    // do) and tells the monitor the ping was taken.
    if (!self->ping_pending_.exchange(false, std::memory_order_relaxed)) {
      errno = saved_errno;
      return;
    }
    if (ping_handler handler = self->ping_handler_.load(std::memory_order_relaxed)) {
      std::atomic_signal_fence(std::memory_order_acquire);  // the context after the handler
      handler(self->ping_context_);
      // relaxed: single writer (this thread); a statistic.
      self->stats_.pings.store(self->stats_.pings.load(std::memory_order_relaxed) + 1,
                               std::memory_order_relaxed);
    }
  } else if (signal_number > 0 && signal_number < NSIG) {
    // Not a ping: the disposition the program had before (a function), if any; SIG_DFL and
    // SIG_IGN are ignored (the default of SIGURG, the default signal, is to ignore it).
    const struct sigaction& previous = previous_dispositions[signal_number].action;
    if ((previous.sa_flags & SA_SIGINFO) != 0) {
      if (previous.sa_sigaction != nullptr) previous.sa_sigaction(signal_number, info, context);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
               previous.sa_handler != nullptr) {
      previous.sa_handler(signal_number);
    }
  }
  errno = saved_errno;
}

bool executor::ping_if_due(std::uint64_t now, std::uint64_t inside_ns, int signal_number) noexcept {
  // relaxed: samples; a ping sent just after the owner withdrew its request or returned from
  // its runnable finds the handler with nothing to do (or, once the worker parked, a spurious
  // wake-up its wait tolerates).
  if (ping_handler_.load(std::memory_order_relaxed) == nullptr) return false;
  const std::uint64_t deadline = ping_deadline_ns_.load(std::memory_order_relaxed);
  if (deadline != 0) {
    if (now < deadline) return false;
  } else if (inside_ns < core_.service_interval_ns() / 2 ||
             ping_declined_at_.load(std::memory_order_relaxed) ==
                 progress_.load(std::memory_order_relaxed)) {
    return false;
  }
  if (awake_since_ns_.load(std::memory_order_relaxed) == 0) return false;  // parked
  // The last ping has not been taken yet: its signal is still pending on the worker (blocked,
  // or the worker is off the CPU), and sending again would not hurry it; unless it has been
  // pending so long that it is presumed lost (see "Pings"; a second copy that arrives after the
  // first was taken is dropped by the handler). relaxed: the flag is this executor's; see
  // on_ping_signal.
  if (ping_pending_.load(std::memory_order_relaxed) && now - ping_sent_ns_ < ping_presumed_lost_ns) {
    return false;
  }
  std::lock_guard lock(ping_mutex_);
  if (!pingable_) return false;  // not started, or left its loop: the thread may be gone
  ping_pending_.store(true, std::memory_order_relaxed);  // relaxed: see on_ping_signal
  ping_sent_ns_ = now;
  sigval mark{};
  mark.sival_ptr = this;
  if (pthread_sigqueue(thread_, signal_number, mark) == 0) return true;
  ping_pending_.store(false, std::memory_order_relaxed);  // not sent: nothing will take it
  return false;
}

executor::executor(runtime_core& core, std::uint32_t index, spindle::clock& clock,
                   executor_placement placement)
    : core_(core),
      index_(index),
      placement_(placement),
      timers_(clock),
      reactor_(make_reactor(core.options().io_backend, core.options().reactor)),
      random_state_(0x9e3779b9u * (index + 1) ^ std::uint32_t(reinterpret_cast<std::uintptr_t>(this))) {
  if (random_state_ == 0) random_state_ = 1;
  timers_.set_arm_hook(&executor::timer_armed, this);
}

void executor::timer_armed(void* self) noexcept {
  // The entry is in the wheel (the service mutex was released after the insert): a parked
  // owner computed its timeout before it; from another thread, wake it to compute it again.
  auto* armed_on = static_cast<executor*>(self);
  armed_on->core_.wake_if_parked(armed_on->index_);
}


void executor::bind_thread() noexcept {
  if (placement_.os_index == executor_placement::unknown) return;
  // release: readers of bound_to_cpu() see the binding's outcome, not an earlier state.
  bound_to_cpu_.store(bind_current_thread_to_cpu(placement_.os_index), std::memory_order_release);
}

std::uint32_t executor::load() const noexcept {
  const std::uint32_t queued =
      local_.size() + std::uint32_t(core_.global_injector().size(index_)) + (inbox_.empty() ? 0u : 1u);
  // relaxed: samples (single writers: the monitor, the queues' owners).
  const std::uint32_t quarters = (stats_.utilisation.load(std::memory_order_relaxed) + 8192) >> 14;
  // New work goes elsewhere while we are on standby: a sibling on our CPU takes our work anyway.
  const bool standby = on_standby_at(core_.coarse_now_ns());
  return 4 * queued + quarters + (in_long_runnable() || standby ? 64u : 0u);
}

std::uint64_t executor::busy_nanoseconds_until(std::uint64_t now) const noexcept {
  // relaxed: samples of single-writer counters (runtime_monitor.cpp clamps the race).
  const std::uint64_t since = awake_since_ns_.load(std::memory_order_relaxed);
  const std::uint64_t total = busy_total_ns_.load(std::memory_order_relaxed);
  return total + (since != 0 && now > since ? now - since : 0);
}

bool executor::has_rescuable_work() const noexcept {
  if (!local_.empty() || core_.global_injector().size(index_) != 0) return true;
  if (auto deadline = timers_.next_deadline()) return *deadline <= timers_.clock().now();
  return false;
}

std::uint32_t executor::next_random() noexcept { return next_xorshift(random_state_); }

void executor::overflow(runnable** items, std::uint32_t count) noexcept {
  metrics::bump(stats_.overflows);
  for (std::uint32_t i = 0; i + 1 < count; ++i) items[i]->next = items[i + 1];
  core_.global_injector().push_batch(index_, items[0], items[count - 1], count);
  // The batch was published under the shard mutex, not by a seq_cst RMW: fenced notify.
  core_.notify_work_available(index_);
}

void executor::push_local(runnable* r, schedule_hint hint) noexcept {
  metrics::bump(stats_.local_schedules);
  metrics::stamp_schedule(core_, r);
  // On standby, what we wake or spawn runs on the sibling that shares our CPU (parking.md),
  // unless that sibling is now stuck in a long runnable: then the standby ends here.
  if (on_standby_) [[unlikely]] {
    if (!core_.executor_at(standby_sibling_).in_long_runnable()) {
      hand_to_sibling(r);
      return;
    }
    end_standby(core_.coarse_now_ns());
  }
  auto sink = [this](runnable** items, std::uint32_t count) { overflow(items, count); };
  if (hint == schedule_hint::yield) {
    local_.push_oldest(r, sink);
    core_.notify_work_available();
    return;
  }
  // A lone item is what this executor runs next; thieves leave it alone (local_queue.hpp), so
  // waking an idle executor for it would be wasted. From two items on, there is work to share.
  // The push's CAS is seq_cst, which stands in for the handshake fence.
  // A lone item left to us is rescued by the monitor if the running task never returns
  // (runtime_monitor.hpp, step 3).
  const std::uint32_t queued = local_.push(r, sink);
  if (hint == schedule_hint::wake && waiting_woken_ == nullptr) {
    waiting_woken_ = r;  // its wait counts (look_at_waiting_woken)
    waiting_woken_position_ = local_.newest_position();
    waiting_woken_since_ns_ = core_.coarse_now_ns();
  }
  if (queued >= 2) core_.notify_after_seq_cst_publish();
}

void executor::yield_pinned(runnable* r) noexcept {
  pinned_yielded_.push_back(r);
  pinned_yielded_since_service_ = true;
}

runnable* executor::take_from_inbox() noexcept {
  if (inbox_backlog_ == nullptr) inbox_backlog_ = inbox_.take_all();
  runnable* r = inbox_backlog_;
  if (r != nullptr) {
    inbox_backlog_ = r->next;
    metrics::bump(stats_.taken_from_inbox);
  }
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
  metrics::bump(stats_.taken_from_injector, taken);
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
  // A service passed since the pinned yielded runnable (an actor wheel) last ran: its turn, so
  // it gets at least one per service interval however much other work there is.
  if (pinned_turn_owed_) {
    pinned_turn_owed_ = false;
    if (runnable* r = pinned_yielded_.pop_front()) return r;
  }
  // A woken task waited a whole service interval under newer work: its turn (newest first
  // would bury it for as long as new work keeps coming; see look_at_waiting_woken).
  if (woken_turn_owed_) {
    woken_turn_owed_ = false;
    if (runnable* r = take_waiting_woken()) return r;
  }
  // A countdown rather than tick % interval: a division per runnable is measurable here.
  if (--until_injector_check_ == 0) {
    until_injector_check_ = core_.options().injector_check_interval;
    if (runnable* r = take_starving_oldest()) return r;  // fairness to old local work
    // Fairness to remote work: ONE item, run now. A batch would go onto the newest end of the
    // local queue, above tasks that were just woken (time-slicing.md, "woken tasks").
    std::size_t taken = 0;
    if (!on_standby_) {
      if (runnable* r = core_.global_injector().pop_batch(index_, 1, taken)) {
        metrics::bump(stats_.taken_from_injector);
        return r;
      }
    }
    if (runnable* r = pinned_yielded_.pop_front()) return r;  // fairness to the wheel
  }
  if (runnable* r = take_from_inbox()) return r;
  // A service interval passed: ONE item of the own injector shard (one: remote work never
  // buries woken tasks), so remote work gets a turn per service interval whatever runs here.
  // After the inbox, which holds work queued for this executor earlier (an actor's first turn).
  if (injector_turn_owed_) {
    injector_turn_owed_ = false;
    std::size_t taken = 0;
    if (runnable* r = core_.global_injector().pop_batch(index_, 1, taken)) {
      metrics::bump(stats_.taken_from_injector);
      return r;
    }
  }
  if (runnable* r = local_.pop()) return r;
  // Out of local work: submit what the last slices queued, route the completions (seed 000).
  if (reactor_->in_flight() != 0) {
    reactor_->poll();
    if (runnable* r = local_.pop()) return r;
  }
  // On standby the injector is the sibling's to take (our shard was handed over, and P2C
  // avoids us meanwhile): we run only what is addressed to us.
  if (!on_standby_) {
    if (runnable* r = take_from_injector(index_)) return r;
  }
  // Only then the pinned yielded runnable (the wheel): it and the tasks take turns, the tasks a
  // batch at a time, the wheel at least once per service interval and fairness check.
  if (runnable* r = pinned_yielded_.pop_front()) return r;
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
      // From an executor inside a long runnable, everything: its newest item would otherwise
      // wait for the runnable to return (executor-loop.md, "stuck owners").
      if (runnable* r = other.local().steal_into(local_, other.in_long_runnable())) {
        trace_event(trace_kind::steal, victim);
        metrics::bump(stats_.steals);
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
    // The last searcher to find work wakes another: where there was some, there may be more.
    pass_search_on();
  }
  // relaxed: single writer; a sample for the monitor's stall watch (nothing is published by it).
  running_.store(r, std::memory_order_relaxed);
  if (r == waiting_woken_) waiting_woken_ = nullptr;  // its wait is over (look_at_waiting_woken)
  metrics::run_measured(*this, r);  // r->run(), timed while histograms are on
  running_.store(nullptr, std::memory_order_relaxed);  // relaxed: as above
  metrics::bump(stats_.runnables_run);
  progress_.store(tick_, std::memory_order_relaxed);
  // Service after `budget` runnables, or once a service interval of busy time has passed (one
  // relaxed load of the coarse clock: cheaper than any clock read, time-slicing.md).
  if (++budget_used_ >= core_.options().budget) {
    if (!local_.empty()) {
      stats_.budget_exhaustions.store(
          stats_.budget_exhaustions.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    service();
  } else if (core_.coarse_now_ns() - last_service_ns_ >= core_.service_interval_ns()) {
    service();
  }
}

// "Woken tasks are never buried" (time-slicing.md): a woken task goes on the newest end and
// normally runs next, but newer work pushed before that (a join's waiter, the next child of a
// rolling set) buries it for as long as such work keeps coming. Popping the oldest item per
// interval of time whatever it is would cost locality where nothing waits (skynet: the buried
// items are unstarted spawns, executor-loop.md), so only a woken runnable's wait counts: the
// first woken runnable queued here is remembered (push_local) until it runs here (run_one) or
// leaves the queue from its oldest end (stolen, moved to the overflow: holds_position false).
// Once it has waited a service interval, the next iteration takes it (take_waiting_woken).
void executor::look_at_waiting_woken() noexcept {
  if (waiting_woken_ == nullptr) return;
  if (!local_.holds_position(waiting_woken_position_)) {
    waiting_woken_ = nullptr;  // taken from the oldest end: whoever took it runs it
    return;
  }
  if (last_service_ns_ - waiting_woken_since_ns_ >= core_.service_interval_ns()) {
    woken_turn_owed_ = true;
  }
}

// The waiting woken runnable, taken out of the local queue; null if it is no longer there or
// more than `most_lifted` items lie above it. Decided now, not at the service that owed the turn:
// the queue may have changed since (a task that ran a fork-join, whose heartbeat was that
// service, then yielded to the oldest end). Never an item below it: the oldest end is where
// yields go, and taking the oldest item instead (a first version) popped a task that yields
// again and again while the woken one waited (executor-loop.md). If it is the oldest item, it
// is popped from there; otherwise the items above it are lifted off the newest end (owner pops,
// as in any iteration), it is taken, and they are pushed back in their order, at the positions
// they had. A wrong guess (the address reused by another runnable queued here) runs that one:
// any queued item may run next.
runnable* executor::take_waiting_woken() noexcept {
  if (waiting_woken_ == nullptr || !local_.holds_position(waiting_woken_position_)) return nullptr;
  if (local_.oldest_position() == waiting_woken_position_) return local_.pop_oldest();
  constexpr std::uint32_t most_lifted = 8;
  runnable* lifted[most_lifted];
  std::uint32_t count = 0;
  runnable* found = nullptr;
  auto sink = [this](runnable** items, std::uint32_t n) { overflow(items, n); };
  while (runnable* r = local_.pop()) {
    if (r == waiting_woken_) {
      found = r;
      break;
    }
    if (count == most_lifted) {
      local_.push(r, sink);  // too deep: leave it to newest-first pops and thieves
      break;
    }
    lifted[count++] = r;
  }
  while (count != 0) local_.push(lifted[--count], sink);
  return found;
}

void executor::note_service() noexcept {
  last_service_ns_ = core_.coarse_now_ns();
  // relaxed: a sample for the monitor's tick scheduling; it publishes nothing.
  last_service_at_ns_.store(last_service_ns_, std::memory_order_relaxed);
}

void executor::service() noexcept {
  budget_used_ = 0;
  note_service();
  // relaxed: a hint from the monitor; comparing costs a look at the lower-index siblings.
  watch_cpu(on_standby_ || shares_cpu_.load(std::memory_order_relaxed));
  // relaxed: the monitor's hint, checked again by take_standby_request.
  if (standby_request_.load(std::memory_order_relaxed) != 0) take_standby_request();
  if (on_probation_) watch_probation();
  // Owed a turn only if it has waited a whole service interval: one that yielded since the last
  // service (typically the wheel slice that just ended and brought this service on) waits for
  // the local queue, the fairness check, or the next service; else a wheel whose slices last a
  // service interval would run slice after slice and tasks only at fairness checks.
  if (!pinned_yielded_.empty() && !pinned_yielded_since_service_) pinned_turn_owed_ = true;
  pinned_yielded_since_service_ = false;
  // Remote work is owed one item too: it waits about a service interval at most, even when
  // every iteration is a long one (an actor wheel's slices last a service interval, and the
  // wheel runs before the injector when the local queue is dry).
  // Once per service interval of time, not per service: with a small `budget` every runnable
  // ends in a service, and an item owed each time would put a foreign flood ahead of the tasks
  // timers just woke (ServiceInterval.SleepingTasksKeepTickingDuringAForeignFlood).
  if (last_service_ns_ - injector_turn_at_ns_ >= core_.service_interval_ns()) {
    injector_turn_owed_ = true;
    injector_turn_at_ns_ = last_service_ns_;
  }
  look_at_waiting_woken();
  stats_.services.store(stats_.services.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
  fire_timers();
  if (reactor_->in_flight() != 0) reactor_->poll();
  // relaxed: a hint maintained by the monitor; a missed rescue is retried at the next service.
  // (Not on standby: what we took would go straight to our sibling.)
  if (!on_standby_ && core_.long_runnables_.load(std::memory_order_relaxed) != 0) {
    if (runnable* r = rescue_others()) push_local(r, schedule_hint::wake);
  }
}

void executor::service_point() noexcept {
  if (core_.coarse_now_ns() - last_service_ns_ < core_.service_interval_ns()) return;
  note_service();
  look_at_waiting_woken();
  stats_.services.store(stats_.services.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
  fire_timers();
  if (reactor_->in_flight() != 0) reactor_->poll();
  // In a long runnable, messages would wait for all of it (actor wakes from other threads,
  // handovers); deliveries only queue work, they run no user code (executor_mailbox.hpp). Then
  // the layers hand away what only this executor would run (the hook, runtime_core.hpp).
  // (A runnable that ends when work waits returns to the loop soon: it hands nothing away.)
  if (in_long_runnable()) {
    if (!mailbox_.empty()) poll_mailbox();
    // acquire: pairs with set_long_runnable_hook's release (the context is written first).
    auto hook = core_.long_runnable_hook_.load(std::memory_order_acquire);
    if (hook != nullptr && !ends_runnable_when_work_waits()) {
      hook(core_.long_runnable_context_.load(std::memory_order_relaxed), index_);
    }
  }
  // What that woke sits in our local queue while we keep running: let an idle executor take it
  // (with the monitor's long-runnable flag set, thieves take even a lone item).
  if (!local_.empty()) core_.notify_work_available();
}

bool executor::has_waiting_work() const noexcept {
  if (!mailbox_.empty() || !inbox_.empty() || inbox_backlog_ != nullptr || !local_.empty() ||
      !pinned_yielded_.empty() || core_.global_injector().size(index_) != 0) {
    return true;
  }
  // relaxed: a hint maintained by the monitor, as in service().
  if (core_.long_runnables_.load(std::memory_order_relaxed) == 0) return false;
  const std::uint32_t count = core_.executor_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    if (i == index_) continue;
    const executor& other = core_.executor_at(i);
    if (other.in_long_runnable() && other.has_rescuable_work()) return true;
  }
  return false;
}

void executor::fire_timers() noexcept {
  if (timers_.size() == 0) return;
  if (const std::size_t fired = timers_.fire_due()) {
    stats_.timers_fired.store(stats_.timers_fired.load(std::memory_order_relaxed) + fired,
                              std::memory_order_relaxed);
  }
}

runnable* executor::rescue_others() noexcept {
  const std::uint32_t count = core_.executor_count();
  runnable* found = nullptr;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (i == index_) continue;
    executor& other = core_.executor_at(i);
    if (!other.in_long_runnable()) continue;
    // Its due timers fire here (the timer service is locked, any thread may fire it): whatever
    // they wake is scheduled from this thread, onto this executor's local queue.
    if (other.timers_.size() != 0) {
      if (const std::size_t fired = other.timers_.fire_due()) {
        stats_.rescues.store(stats_.rescues.load(std::memory_order_relaxed) + fired,
                             std::memory_order_relaxed);
      }
    }
    if (found == nullptr) {
      found = other.local().steal_into(local_, /*include_newest=*/true);
      // Remote work placed on its injector shard before the monitor flagged it (P2C avoids it
      // from then on): our own fairness checks look only at our own shard.
      if (found == nullptr) {
        std::size_t taken = 0;
        found = core_.global_injector().pop_batch(i, 1, taken);
      }
      if (found != nullptr) {
        stats_.rescues.store(stats_.rescues.load(std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
      }
    }
  }
  return found;
}

void executor::watch_cpu(bool compare) noexcept {
  const int cpu = sched_getcpu();  // vDSO: a few nanoseconds, once per service or wake-up
  const bool serving_io = reactor_->in_flight() != 0;
  // relaxed: hints (see the members' comments); stored only when they change, so the line the
  // monitor and siblings read is not taken away from them at every service.
  if (last_cpu_.load(std::memory_order_relaxed) != cpu) {
    last_cpu_.store(cpu, std::memory_order_relaxed);
  }
  if (serves_io_.load(std::memory_order_relaxed) != serving_io) {
    serves_io_.store(serving_io, std::memory_order_relaxed);
  }
  if (!compare || cpu < 0 || !core_.standby_enabled()) return;
  const std::uint64_t now = core_.coarse_now_ns();
  // A lower-index sibling, awake and last seen on this CPU, is not running while we are: it
  // waits for this CPU. Two of us on one CPU only take turns, and each turn leaves the other's
  // ready work and I/O completions waiting for a scheduler time slice. Its published CPU and
  // awake flag are hints (stale by up to a service; "awake" includes blocked inside a runnable,
  // e.g. fork-join waiting for a thief): the kernel confirms that its thread is runnable on this
  // CPU. That costs a system call, so we ask at most once per service interval.
  // A sibling inside a long runnable is no one to stand by for: its queued work needs us.
  // Only where I/O is served (by us or by the sibling): what makes sharing a CPU costly is that
  // only a reactor's owner can deliver its completions. Executors with CPU work alone lose
  // nothing but context switches by taking turns, and the kernel's balancer moves one of them
  // as soon as another CPU has room, while one on standby would give that CPU share away.
  if (now >= next_sibling_look_ns_) {
    for (std::uint32_t i = 0; i < index_; ++i) {
      executor& sibling = core_.executor_at(i);
      // relaxed: hints, confirmed below.
      if (sibling.last_cpu_.load(std::memory_order_relaxed) != cpu ||
          sibling.awake_since_ns_.load(std::memory_order_relaxed) == 0 ||
          !(serving_io || sibling.serves_io_.load(std::memory_order_relaxed)) ||
          sibling.on_standby_at(now) || sibling.in_long_runnable()) {
        continue;
      }
      next_sibling_look_ns_ = now + core_.service_interval_ns();
      if (sibling.thread_runnable_on(cpu) && enter_standby(i, now)) return;
    }
  }
  if (!on_standby_) return;
  // Standby ends when its time is up, or at once when the sibling that takes our work is stuck
  // in a long runnable (what we handed it would wait for that runnable) or went on standby
  // itself (it hands our work on; better we serve again and let the rules choose anew).
  const executor& sibling = core_.executor_at(standby_sibling_);
  if (now >= standby_until_ns_.load(std::memory_order_relaxed) || sibling.in_long_runnable() ||
      sibling.on_standby_at(now)) {
    end_standby(now);
    // Back in service, on whatever CPU the kernel gives us: see whether it is one of our own.
    on_probation_ = true;
    probation_started_ns_ = 0;
    return;
  }
  // Work placed in our injector shard meanwhile (a foreign thread's P2C choice made before our
  // standby, reused for a burst): the sibling's too.
  hand_queued_work_to_sibling();
}

void executor::end_standby(std::uint64_t now) noexcept {
  on_standby_ = false;
  standby_ended_ns_ = now;
  standby_until_ns_.store(0, std::memory_order_relaxed);  // relaxed: a hint (see the member)
}

namespace {

// Reads the start of a /proc file into `text` (NUL-terminated); false where it cannot be read.
// Opened and closed here rather than kept open: an executor holds no descriptor of its own.
template <std::size_t size>
bool read_proc_file(const char* path, char (&text)[size]) noexcept {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t length = ::read(fd, text, size - 1);
  ::close(fd);
  if (length <= 0) return false;
  text[length] = '\0';
  return true;
}

// A thread's time on a CPU and time waiting for one, in nanoseconds, from its schedstat file
// (/proc/thread-self/schedstat or /proc/self/task/TID/schedstat; false where it cannot be read).
bool read_thread_cpu_times(const char* schedstat_path, std::uint64_t& running,
                           std::uint64_t& waiting) noexcept {
  char text[128];
  if (!read_proc_file(schedstat_path, text)) return false;
  unsigned long long run = 0, wait = 0;
  if (std::sscanf(text, "%llu %llu", &run, &wait) != 2) return false;
  running = run;
  waiting = wait;
  return true;
}

}  // namespace

void executor::watch_probation() noexcept {
  // A CPU we share with a thread that is not ours (the co-location test cannot see it) makes us
  // wait for it about half the time we are runnable; a CPU of our own, hardly at all.
  constexpr std::uint64_t evidence_ns = 500'000;  // of runnable time before judging
  const std::uint64_t now = monotonic_nanoseconds();
  std::uint64_t running = 0, waiting = 0;
  if (!read_thread_cpu_times("/proc/thread-self/schedstat", running, waiting)) {
    on_probation_ = false;
    return;
  }
  if (probation_started_ns_ == 0) {
    probation_started_ns_ = now;
    probation_running_ns_ = running;
    probation_waiting_ns_ = waiting;
    return;
  }
  const std::uint64_t ran = running - probation_running_ns_;
  const std::uint64_t waited = waiting - probation_waiting_ns_;
  if (ran + waited < evidence_ns) {
    // Not enough yet; give up after a few service intervals (we were mostly parked: harmless).
    if (now - probation_started_ns_ > 4 * core_.service_interval_ns()) on_probation_ = false;
    return;
  }
  on_probation_ = false;
  // Waited more than a quarter of the runnable time: back on standby, under the rules of
  // watch_cpu: only where I/O is served (on a busy machine every thread waits; CPU work would
  // give its share away), and not for a sibling stuck in a long runnable.
  const executor& sibling = core_.executor_at(standby_sibling_);
  // relaxed: a hint (see the member).
  const bool serving_io =
      reactor_->in_flight() != 0 || sibling.serves_io_.load(std::memory_order_relaxed);
  if (4 * waited > ran + waited && serving_io && !sibling.in_long_runnable()) {
    (void)enter_standby(standby_sibling_, core_.coarse_now_ns());
  }
}

bool executor::thread_cpu_times(std::uint64_t& running, std::uint64_t& waiting) const noexcept {
  // relaxed: the id is a plain value; reading 0 (loop not started) means "cannot tell".
  const int thread_id = thread_id_.load(std::memory_order_relaxed);
  if (thread_id <= 0) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", thread_id);
  return read_thread_cpu_times(path, running, waiting);
}

void executor::take_standby_request() noexcept {
  // relaxed: a hint (see the member); taken once.
  const std::uint32_t request = standby_request_.exchange(0, std::memory_order_relaxed);
  if (request == 0 || request - 1 == index_ || request - 1 >= core_.executor_count()) return;
  const std::uint32_t sibling = request - 1;
  const std::uint64_t now = core_.coarse_now_ns();
  // The rules of watch_cpu, as things are now rather than when the monitor looked: only while
  // we serve I/O, not for a sibling stuck in a long runnable, and not when we stand by already
  // (for a sibling on our own CPU: that standby stays). enter_standby refuses a sibling on
  // standby.
  if (on_standby_ || reactor_->in_flight() == 0 || !core_.standby_enabled() ||
      core_.executor_at(sibling).in_long_runnable()) {
    return;
  }
  if (enter_standby(sibling, now)) {
    // relaxed: single writer, a sample.
    stats_.contention_standbys.store(
        stats_.contention_standbys.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

bool executor::thread_runnable_on(int cpu) const noexcept {
  // relaxed: the id is a plain value; reading 0 (loop not started) means "cannot tell".
  const int thread_id = thread_id_.load(std::memory_order_relaxed);
  if (thread_id <= 0) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", thread_id);
  // "pid (comm) state ppid ..." (proc(5)): the state is the first field after the last ')' (field
  // 3), the CPU the thread last ran on ("processor", field 39) 36 fields further.
  char text[1024];
  if (!read_proc_file(path, text)) return false;
  const char* field = std::strrchr(text, ')');
  if (field == nullptr || field[1] != ' ') return false;
  const char state = field[2];
  if (state != 'R') return false;
  field += 2;
  for (int skipped = 0; skipped < 36; ++skipped) {
    field = std::strchr(field, ' ');
    if (field == nullptr) return false;
    ++field;
  }
  return std::atoi(field) == cpu;
}

bool executor::enter_standby(std::uint32_t sibling, std::uint64_t now) noexcept {
  const auto first = std::uint64_t(core_.options().standby_first.count());
  const auto longest = std::uint64_t(core_.options().standby_longest.count());
  {
    std::lock_guard lock(core_.standby_mutex_);
    // A sibling on standby hands its work on: standing by for it could close a cycle. Every
    // standby is entered under this mutex after this check, so two executors never stand by
    // for each other (a standby left pointing at a sibling that went on standby later ends at
    // its next service, watch_cpu). relaxed: the sibling's store was made under this mutex.
    if (core_.executor_at(sibling).standby_until_ns_.load(std::memory_order_relaxed) > now) {
      return false;
    }
    if (!on_standby_) {
      // Back to the first length after a long enough spell without standby; 4x per repeat.
      if (standby_length_ns_ == 0 || now - standby_ended_ns_ >= longest) {
        standby_length_ns_ = first;
      } else {
        standby_length_ns_ = std::min(standby_length_ns_ * 4, longest);
      }
      on_standby_ = true;
      stats_.standbys.store(stats_.standbys.load(std::memory_order_relaxed) + 1,
                            std::memory_order_relaxed);  // relaxed: single writer, a sample
    }
    standby_sibling_ = sibling;
    // relaxed: a hint for notifiers and placement (see the member's comment); siblings deciding
    // to stand by read it under the mutex.
    standby_until_ns_.store(now + standby_length_ns_, std::memory_order_relaxed);
  }
  hand_queued_work_to_sibling();
  return true;
}

void executor::hand_queued_work_to_sibling() noexcept {
  // Our queued work and our injector shard go to the sibling in one batch each.
  runnable* first_item = nullptr;
  runnable* last_item = nullptr;
  std::size_t count = 0;
  while (runnable* r = local_.pop()) {
    r->next = nullptr;
    if (last_item == nullptr) {
      first_item = r;
    } else {
      last_item->next = r;
    }
    last_item = r;
    ++count;
  }
  injector& global = core_.global_injector();
  if (count != 0) global.push_batch(standby_sibling_, first_item, last_item, count);
  std::size_t taken = 0;
  if (global.size(index_) != 0) {
    if (runnable* shard = global.pop_batch(index_, ~std::size_t(0), taken)) {
      runnable* tail = shard;
      while (tail->next != nullptr) tail = tail->next;
      global.push_batch(standby_sibling_, shard, tail, taken);
    }
  }
  // No fence: push_batch counted the items with a seq_cst RMW (as runtime_core::schedule).
  if (count != 0 || taken != 0) core_.wake_one_if_idle(standby_sibling_);
}

void executor::hand_to_sibling(runnable* r) noexcept {
  core_.global_injector().push(standby_sibling_, r);
  // No fence: the push counted the item with a seq_cst RMW (as runtime_core::schedule).
  core_.wake_one_if_idle(standby_sibling_);
}

void executor::pass_search_on() noexcept {
  is_searching_ = false;
  if (core_.transition_from_searching()) core_.notify_work_available();
}

void executor::park() noexcept {
  // On standby we never search: a search still held here (woken to search, then back on
  // standby) goes on now. Parked with it, we would drop it silently below, while notifiers that
  // saw a searcher woke nobody for their work and our re-check does not look at theirs.
  if (on_standby_ && is_searching_) pass_search_on();
  const bool was_searching = is_searching_;
  is_searching_ = false;
  // 1. PARKING: registered as a sleeper, counted as parked; senders of messages see the flag.
  mailbox_.announce_parking();
  core_.transition_to_parked(index_, was_searching);
  // 2. Re-check every work source after the fence (pairs with notify_work_available's fence; the
  // mailbox's re-check is a seq_cst load against the sender's seq_cst post, executor_mailbox.hpp).
  fence_seq_cst();
  // On standby, only work addressed to us: the rest is for executors not on standby, which are
  // woken for it instead of us (runtime_core::wake_one_if_idle; parking.md).
  if (core_.stopping() || (on_standby_ ? core_.work_addressed_to(index_)
                                       : core_.any_work_visible(index_))) {
    is_searching_ = core_.leave_sleepers(index_);
    mailbox_.announce_awake();
    return;
  }
  // 3. PARKED: wait for a notification or the next timer deadline. Executors stuck in a long
  // runnable are watched by the monitor, which wakes us when they hold work we can take.
  std::optional<clock_duration> timeout;
  spindle::clock& clock = timers_.clock();
  if (clock.is_real_time()) {
    if (auto deadline = timers_.next_deadline()) timeout = *deadline - clock.now();
  }
  if (on_standby_) {
    // Wake up when the standby ends, whoever needs us then (a backstop: work handed to a
    // sibling that then blocked is also rescued through the monitor, has_rescuable_work).
    const std::uint64_t until = standby_until_ns_.load(std::memory_order_relaxed);
    const std::uint64_t now = core_.coarse_now_ns();
    const clock_duration left(std::int64_t(until > now ? until - now : 0));
    if (!timeout || left < *timeout) timeout = left;
  }
  // Idle trimming (frame_allocator.hpp): while this thread's private frame cache holds
  // something, park at most frame_cache_idle_trim; parked that long, give it back below. Only
  // this thread fills it, so once it is empty the park is unbounded again: an idle executor
  // wakes for this at most once per idle spell. (The shared depot is the monitor's to trim,
  // when the whole runtime is idle: runtime_monitor.hpp.)
  const std::chrono::nanoseconds idle_trim = core_.options().frame_cache_idle_trim;
  const bool may_trim = idle_trim.count() > 0 && thread_frame_cache_holds_memory();
  if (may_trim && (!timeout || *timeout > idle_trim)) timeout = idle_trim;
  stats_.parks.store(stats_.parks.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const std::uint64_t parked_at = monotonic_nanoseconds();
  // relaxed: single writer; the monitor samples (runtime_monitor.cpp clamps the race between
  // the two stores).
  busy_total_ns_.store(busy_total_ns_.load(std::memory_order_relaxed) +
                           (parked_at - awake_since_owner_ns_),
                       std::memory_order_relaxed);
  awake_since_ns_.store(0, std::memory_order_relaxed);
  const bool traced = trace_begin(trace_kind::park, index_);  // unpark iff park (trace.hpp)
  reactor_->wait(timeout);
  trace_end(traced, trace_kind::unpark);
  awake_since_owner_ns_ = monotonic_nanoseconds();
  if (may_trim && awake_since_owner_ns_ - parked_at >= std::uint64_t(idle_trim.count())) {
    // Idle for the whole trim period: this thread's private cache goes back to malloc.
    release_thread_frame_cache();
    // relaxed: single writer; a counter for observers.
    stats_.frame_cache_trims.store(stats_.frame_cache_trims.load(std::memory_order_relaxed) + 1,
                                   std::memory_order_relaxed);
  }
  awake_since_ns_.store(awake_since_owner_ns_, std::memory_order_relaxed);  // relaxed: sample
  // 4. Woken: by a notifier (it unregistered us, maybe as a searcher) or by time.
  is_searching_ = core_.leave_sleepers(index_);
  mailbox_.announce_awake();
  core_.executor_awake(awake_since_owner_ns_);
  // The kernel put us on an idle CPU if it had one; if it put us beside a sibling that waits for
  // this CPU, it had none (parking.md, "Executors that share a CPU").
  watch_cpu(true);
  // relaxed: the monitor's hint, checked again by take_standby_request.
  if (standby_request_.load(std::memory_order_relaxed) != 0) take_standby_request();
  if (on_probation_) watch_probation();
  if (on_standby_ && is_searching_) {
    // Woken to search, but we stand by (after every decision that may put us there, probation
    // included): pass the search on (wake_one_if_idle picks a sleeper not on standby, or nobody
    // when an executor not on standby is awake and will find the work itself).
    pass_search_on();
  }
  fire_timers();
}

void executor::run_loop() noexcept {
  detail::current_executor = this;
  trace_attach_thread(core_.trace(), *this, index_);
  reactor_->attach_owner();
  if (const int signal_number = core_.options().ping_signal; signal_number != 0) {
    // The worker inherited its creator's signal mask; the ping signal is ours to take.
    sigset_t ping;
    sigemptyset(&ping);
    sigaddset(&ping, signal_number);
    pthread_sigmask(SIG_UNBLOCK, &ping, nullptr);
    std::lock_guard lock(ping_mutex_);
    thread_ = pthread_self();
    pingable_ = true;
  }
  awake_since_owner_ns_ = monotonic_nanoseconds();
  awake_since_ns_.store(awake_since_owner_ns_, std::memory_order_relaxed);  // relaxed: sample
  note_service();
  current_slice_clock = slice_clock{&core_.coarse_now_ns_, core_.service_interval_ns()};
  // Siblings read our thread's state when they might be sharing our CPU (watch_cpu).
  thread_id_.store(int(::gettid()), std::memory_order_relaxed);  // relaxed: see the member
  watch_cpu(false);
  while (!core_.stopping()) {
    runnable* r = next_runnable();
    // relaxed: a hint maintained by the monitor. On standby we neither rescue nor steal (the
    // sibling on our CPU does; our standby ends at once if that sibling is the one stuck).
    if (r == nullptr && !on_standby_ &&
        core_.long_runnables_.load(std::memory_order_relaxed) != 0) {
      r = rescue_others();
    }
    // 7b: fork-join work this executor re-offered when it ended a piece early
    // (has_waiting_work): after the work it made way for, before other executors' work.
    if (r == nullptr) r = offers_.take();
    if (r == nullptr && !on_standby_) r = search();
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
  // What the reactor's drain wakes stays here (dropped with the queues, shutdown step 5).
  if (on_standby_) end_standby(core_.coarse_now_ns());
  {
    // No ping after this: the monitor holds the mutex across pthread_kill.
    std::lock_guard lock(ping_mutex_);
    pingable_ = false;
  }
  request_ping(0);
  reactor_->drain();  // shutdown step 4 (runtime_core.hpp), on the reactor's owner thread
  detail::current_executor = nullptr;
  trace_detach_thread();
  current_slice_clock = slice_clock{};
}

}  // namespace spindle::core
