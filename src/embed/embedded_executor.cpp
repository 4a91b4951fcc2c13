// The embedded executor: phases, wake-ups, shutdown. Design in
// include/spindle/embed/embedded_executor.hpp.
#include "spindle/embed/embedded_executor.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <span>

#include "spindle/core/errors.hpp"
#include "spindle/core/frame_allocator.hpp"
#include "spindle/diagnostics/server.hpp"
#include "spindle/task/live_view.hpp"
#include "spindle/diagnostics/prometheus.hpp"
#include "spindle/diagnostics/snapshot.hpp"

namespace spindle::embed {
namespace {

// The executor whose tick (or destructor) runs on this thread. Owner-only by construction: only
// this thread reads or writes it.
thread_local embedded_executor* ticking_here = nullptr;

// Appends a null-terminated chain (the action queue's, oldest first); returns its length.
std::uint64_t append_chain(core::intrusive_fifo<core::runnable, &core::runnable::next>& list,
                           core::runnable* oldest_first) noexcept {
  std::uint64_t count = 0;
  while (oldest_first != nullptr) {
    core::runnable* next = oldest_first->next;
    list.push_back(oldest_first);
    oldest_first = next;
    ++count;
  }
  return count;
}

}  // namespace

// --- construction, shutdown ----------------------------------------------------------------------

embedded_executor::embedded_executor(integration& host, embedded_options options)
    : ::spindle::detail::task_host(1),
      options_(options),
      catcher_(host),
      host_(catcher_),
      clock_(host),
      timers_(clock_) {
  if (options_.diagnostics.trace_events_per_executor >
      core::diagnostics_options::max_trace_events_per_executor) {
    throw usage_error("spindle: diagnostics.trace_events_per_executor must be at most 2^22");
  }
  options_.tasks_per_tick = std::max<std::uint32_t>(options_.tasks_per_tick, 1);
  options_.tasks_per_execute_phase = std::max<std::uint32_t>(options_.tasks_per_execute_phase, 1);
  options_.frame_cache_bytes = std::min(options_.frame_cache_bytes, core::max_frame_cache_bytes);
  task_host::warnings.configure(options_.diagnostics);
  advance_record_clock(core::monotonic_nanoseconds());
  record_clock = &record_clock_ns_;
  task_records = options_.diagnostics.records;
  tasks_section_ = ::spindle::detail::register_tasks_section(task_host::diagnostics_registry, tasks,
                                                            record_clock, clock_.last_reading());
  executors_section_ = task_host::diagnostics_registry.add_snapshot_section(
      "executors", [](spindle::diagnostics::json_writer& out) {
        // Its counters belong to the ticking thread (statistics()): only what it is.
        out.begin_array().begin_object();
        out.member("index", 0).member("kind", "embedded");
        out.end_object().end_array();
      });
  metrics_ = task_host::diagnostics_registry.add_metrics(
      [this](std::string& out) { write_metrics(out); });
  trace_ = std::make_shared<core::trace_recorder>(1, options_.diagnostics);
  trace_->set_thread_label("embedded executor");
  trace_->attach(nullptr, 0);
  task_host::diagnostics_registry.set_trace_source(trace_);
  core::add_frame_cache_share(options_.frame_cache_bytes);
  // The live view (task/live_view.hpp); it never throws: nothing below throws.
  live_view = ::spindle::detail::start_live_view(*this, nullptr, options_.diagnostics,
                                                 "embedded executor");
}

std::uint16_t embedded_executor::diagnostics_port() const noexcept {
  return live_view ? live_view->port() : 0;
}

std::size_t embedded_executor::snapshot(std::span<task_info> storage) const noexcept {
  std::size_t stored = 0;
  const std::size_t found =
      ::spindle::detail::for_each_task_record(tasks, record_clock, clock_.last_reading(), [&](const task_info& t) {
        if (stored < storage.size()) storage[stored++] = t;
      });
  return found;
}

std::string embedded_executor::snapshot_json() const {
  return spindle::diagnostics::snapshot_json(task_host::diagnostics_registry);
}

embedded_executor::~embedded_executor() {
  if (ticking_here == this) {
    std::fputs("spindle: an embedded executor destroyed from inside its own tick\n", stderr);
    std::terminate();
  }
  // The server reads the task table and the registry: it stops before anything is taken apart.
  stop_live_view();
  // Step 1. relaxed, both: the destructor's caller owns the executor; a concurrent waker that
  // misses the flag pushes onto the action queue, which step 2 closes (the close's acquire
  // exchange then takes its node).
  stopping_.store(true, std::memory_order_relaxed);
  // Then wait out the other threads between touching a task and waking it (the gate).
  outside_gate_.close_and_wait();
  draining_.store(true, std::memory_order_relaxed);
  // This thread owns the table's first shard and the timers while frames are destroyed.
  embedded_executor* outer = ticking_here;
  ticking_here = this;
  drain_for_shutdown();
  outside_gate_.finished();  // every task is destroyed: unknown-host entrants go on
  ticking_here = outer;
  // Step 5 (first half): the frames freed above are not kept beyond the bound that is left.
  core::remove_frame_cache_share(options_.frame_cache_bytes);
  core::release_thread_frame_cache();
}

void embedded_executor::drain_for_shutdown() noexcept {
  // Step 2: a push after this fails; its task is still in the table (step 4).
  core::runnable* closed = actions_.close();
  // Step 3: what is queued is dropped exactly once (a task: abandoned, so it leaves the table).
  oldest_.append(newest_);
  oldest_.append(requested_newest_);
  oldest_.append(requested_oldest_);
  append_chain(oldest_, closed);
  while (core::runnable* r = oldest_.pop_front()) r->drop();
  // Step 4: suspended forever. Wake-ups from the destroyed frames are ignored (step 1).
  abandon_all();
}

bool embedded_executor::stopping() const noexcept {
  // relaxed: spawn's check; a spawn racing with the destructor is the caller's bug.
  return stopping_.load(std::memory_order_relaxed);
}

// --- task_host -------------------------------------------------------------------------------------

void embedded_executor::schedule(core::runnable* r, core::schedule_hint hint) noexcept {
  // relaxed: set only by the destructor; a waker that misses it pushes and the close takes it.
  if (draining_.load(std::memory_order_relaxed)) return;  // shutdown destroys the task
  if (ticking_here == this) {
    // Runs in a later execute phase of this tick (or the next).
    if (hint == core::schedule_hint::yield) {
      requested_oldest_.push_back(r);
    } else {
      requested_newest_.push_back(r);
    }
    return;
  }
  if (!actions_.push(r)) return;  // closed: the destructor abandons the task
  host_.tick_soon();
}

std::int32_t embedded_executor::table_shard() const noexcept {
  return ticking_here == this ? 0 : -1;
}

core::timer_service* embedded_executor::timers_here() noexcept {
  return ticking_here == this ? &timers_ : nullptr;
}

embedded_executor* embedded_executor::current() noexcept { return ticking_here; }

spindle::detail::task_host::entry embedded_executor::enter() noexcept {
  if (ticking_here == this) return entry::own_thread;
  return outside_gate_.enter() ? entry::entered : entry::refused;
}

// --- the tick ------------------------------------------------------------------------------------

void embedded_executor::tick() {
  if (ticking_here != nullptr) {
    throw usage_error("spindle: embedded_executor::tick() called from inside a tick");
  }
  ticking_here = this;
  struct leave_tick {
    ~leave_tick() { ticking_here = nullptr; }
  } leave;
  core::trace_thread_scope traced(*trace_);  // this tick's events go to the executor's ring
  host_.begin_tick();
  ++statistics_.ticks;
  // The time budget is real time (the steady clock), read only when the host set one.
  const std::uint64_t deadline =
      options_.time_per_tick > clock_duration::zero()
          ? core::monotonic_nanoseconds() + std::uint64_t(options_.time_per_tick.count())
          : 0;
  service(service_kind::first);
  std::uint32_t budget = options_.tasks_per_tick;
  bool out_of_time = false;
  while (budget > 0 && !out_of_time && queued_work()) {
    budget -= execute(std::min(budget, options_.tasks_per_execute_phase), deadline, out_of_time);
    // The last phase of the tick is this service phase when the loop stops here. Timers only
    // in the tick's first and last service phase: reading the host's clock has a cost.
    const bool last = budget == 0 || out_of_time || !queued_work();
    service(last ? service_kind::last : service_kind::middle);
  }
  if (out_of_time) ++statistics_.ticks_out_of_time;
  // G4: a tick with a time budget is measured once more at its end (one clock read).
  if (deadline != 0) {
    look_at_tick(core::monotonic_nanoseconds() + std::uint64_t(options_.time_per_tick.count()) -
                 deadline);
  }
  if (queued_work()) host_.request_reentry();
  host_.tick_at(next_deadline());
  publish_statistics();
  host_.end_tick();
}

void embedded_executor::look_at_tick(std::uint64_t elapsed_ns) noexcept {
  const auto budget = std::uint64_t(options_.time_per_tick.count());
  // Nothing to do in the common case: within budget and no warning raised.
  if (!tick_watch_.raised && double(elapsed_ns) <= double(budget)) return;
  try {
    task_host::warnings.observe_tick(tick_watch_, elapsed_ns, budget, [this] {
      ::spindle::diagnostics::warning_subject subject;
      subject.what = ::spindle::diagnostics::warning_subject::kind::embedded_executor;
      subject.id = reinterpret_cast<std::uintptr_t>(this);
      subject.name = "embedded executor";
      return subject;
    });
  } catch (...) {
    // Out of memory formatting a warning: the tick goes on.
  }
}

void embedded_executor::publish_statistics() noexcept {
  // relaxed, all: single writer (the ticking thread); readers sample.
  constexpr auto relaxed = std::memory_order_relaxed;
  published_.ticks.store(statistics_.ticks, relaxed);
  published_.tasks_run.store(statistics_.tasks_run, relaxed);
  published_.foreign_wakes.store(statistics_.foreign_wakes, relaxed);
  published_.timers_fired.store(statistics_.timers_fired, relaxed);
  published_.ticks_out_of_time.store(statistics_.ticks_out_of_time, relaxed);
  published_.queued_tasks.store(
      newest_.size() + oldest_.size() + requested_newest_.size() + requested_oldest_.size(),
      relaxed);
}

void embedded_executor::write_metrics(std::string& out) const {
  using diagnostics::metric_type;
  diagnostics::prometheus_writer w(out);
  constexpr auto relaxed = std::memory_order_relaxed;  // samples (see published_statistics)
  auto one = [&](std::string_view name, metric_type type, std::string_view help,
                 std::uint64_t value) {
    w.family(name, type, help);
    w.sample(name, {}, value);
  };
  one("spindle_embedded_ticks_total", metric_type::counter, "Ticks the host ran.",
      published_.ticks.load(relaxed));
  one("spindle_embedded_polls_total", metric_type::counter, "Runnables run in ticks.",
      published_.tasks_run.load(relaxed));
  one("spindle_embedded_foreign_wakes_total", metric_type::counter,
      "Runnables queued from other threads or outside a tick.",
      published_.foreign_wakes.load(relaxed));
  one("spindle_embedded_timers_fired_total", metric_type::counter, "Timers fired.",
      published_.timers_fired.load(relaxed));
  one("spindle_embedded_ticks_out_of_time_total", metric_type::counter,
      "Ticks that stopped running tasks because time_per_tick had passed.",
      published_.ticks_out_of_time.load(relaxed));
  one("spindle_embedded_queued_tasks", metric_type::gauge,
      "Runnables queued at the end of the last tick.", published_.queued_tasks.load(relaxed));
  one("spindle_embedded_live_tasks", metric_type::gauge, "Tasks spawned and not completed.",
      tasks.live_count());
  one("spindle_embedded_timers_pending", metric_type::gauge, "Timers armed.", timers_.size());
}

void embedded_executor::service(service_kind kind) noexcept {
  observe(phase::service);
  ++statistics_.service_phases;
  // What the last execute phase woke, then what other threads woke (in arrival order). The
  // tick's first look is a seq_cst load, ordered after begin_tick's seq_cst store
  // (integration.hpp); later looks may use take_all's relaxed hint.
  take_requests();
  const bool look = kind != service_kind::first || !actions_.empty_seq_cst();
  if (core::runnable* chain = look ? actions_.take_all() : nullptr) {
    statistics_.foreign_wakes += append_chain(oldest_, chain);
  }
  if (kind != service_kind::middle) {
    // Fire callbacks wake tasks on this thread: they join the request lists, moved just below.
    statistics_.timers_fired += timers_.fire_due();
    take_requests();
  }
}

void embedded_executor::take_requests() noexcept {
  // Oldest request first onto the stack, so the newest ends on top.
  while (core::runnable* r = requested_newest_.pop_front()) newest_.push_front(r);
  oldest_.append(requested_oldest_);
}

std::uint32_t embedded_executor::execute(std::uint32_t limit, std::uint64_t deadline,
                                          bool& out_of_time) noexcept {
  observe(phase::execute);
  ++statistics_.execute_phases;
  advance_record_clock(core::monotonic_nanoseconds());  // one read per phase (records)
  std::uint32_t ran = 0;
  while (ran < limit) {
    // The oldest end first in each phase (fairness), then the newest end until it is empty.
    core::runnable* r = ran == 0 ? oldest_.pop_front() : nullptr;
    if (r == nullptr) r = newest_.pop_front();
    if (r == nullptr) r = oldest_.pop_front();
    if (r == nullptr) break;
    r->run();  // until it suspends or completes; `r` must not be touched afterwards
    ++ran;
    if (deadline != 0 || options_.precise_task_times) {
      const std::uint64_t now = core::monotonic_nanoseconds();
      advance_record_clock(now);
      if (deadline != 0 && now >= deadline) {
        out_of_time = true;
        break;
      }
    }
  }
  statistics_.tasks_run += ran;
  return ran;
}

// --- questions from the host -----------------------------------------------------------------------

clock_time embedded_executor::next_deadline() const noexcept {
  return timers_.next_deadline().value_or(clock_time::max());
}

bool embedded_executor::has_ready_work() const noexcept {
  if (queued_work() || !requested_newest_.empty() || !requested_oldest_.empty() ||
      !actions_.empty()) {
    return true;
  }
  return next_deadline() <= clock_.now();
}

embedded_statistics embedded_executor::statistics() const noexcept {
  embedded_statistics s = statistics_;
  s.live_tasks = tasks.live_count();
  s.queued_tasks =
      newest_.size() + oldest_.size() + requested_newest_.size() + requested_oldest_.size();
  // Asked from inside one of this executor's tasks: that one is running, not blocked.
  const bool asked_by_running_task =
      ticking_here == this && ::spindle::detail::spawned_task_base::current() != nullptr;
  const std::uint64_t not_blocked = s.queued_tasks + (asked_by_running_task ? 1 : 0);
  s.blocked_tasks = s.live_tasks > not_blocked ? s.live_tasks - not_blocked : 0;
  return s;
}

}  // namespace spindle::embed
