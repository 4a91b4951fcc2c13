// The warnings hub and the monitor's executor watch (design in
// include/spindle/diagnostics/warnings.hpp and docs/design/diagnostics.md, "Warnings (G4)").
#include "spindle/diagnostics/warnings.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "spindle/core/clock.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/core/runtime_monitor.hpp"

namespace spindle::diagnostics {

namespace {
// The hub whose delivery this thread is inside (null outside deliveries).
thread_local const warning_hub* delivering_hub = nullptr;
}  // namespace

namespace {

constexpr std::size_t recent_capacity = 64;
// How often the monitor's watch starts a sweep of the task views (the task lints): a pass over
// the task table, so not every tick. A pass that lasts longer (a huge table) is followed by the
// next at once.
constexpr std::uint64_t task_sweep_interval_ns = 100'000'000;
// A pass goes on at each monitor tick for this long (in chunks of task_sweep_chunk_slots slots,
// the clock read between chunks): at most 8% of the monitor's thread at its 250 us tick. About
// 50 ns a slot (measured behind the mixed benchmark's million queued tasks), so a pass over 10^6
// tasks is 50 ms of the monitor's time spread over ~2,500 ticks (~0.6 s).
constexpr std::uint64_t task_sweep_step_ns = 20'000;
constexpr std::uint32_t task_sweep_chunk_slots = 256;
// An embedded executor's warning is lowered after this many successive ticks within budget.
constexpr std::uint32_t ticks_within_budget_to_lower = 8;

std::string milliseconds_text(std::uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", double(ns) / 1e6);
  return text;
}

// A worker's time spent waiting for a CPU (runnable, not running), from
// /proc/self/task/<tid>/schedstat's second field; false where it cannot be read.
bool thread_cpu_wait_ns(int thread_id, std::uint64_t& waiting) noexcept {
  if (thread_id <= 0) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", thread_id);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[128];
  const ssize_t length = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (length <= 0) return false;
  text[length] = '\0';
  unsigned long long running = 0, wait = 0;
  if (std::sscanf(text, "%llu %llu", &running, &wait) != 2) return false;
  waiting = wait;
  return true;
}

// When the watch starts counting a worker's CPU wait for a candidate stall, and how often it
// reads it again while the candidate lasts.
constexpr std::uint64_t stall_arm_after_ns = 2'000'000;
constexpr std::uint64_t stall_reread_ns = 5'000'000;

std::string task_id_text(std::uint64_t id) {
  return std::to_string(id >> 32) + "." + std::to_string(id & 0xffffffffu);
}

}  // namespace

std::string_view kind_name(warning_kind kind) noexcept {
  switch (kind) {
    case warning_kind::stall: return "stall";
    case warning_kind::woken_not_polled: return "woken_not_polled";
    case warning_kind::lost_waker: return "lost_waker";
    case warning_kind::self_wakes: return "self_wakes";
    case warning_kind::mailbox_growth: return "mailbox_growth";
    case warning_kind::embedded_tick_over_budget: return "embedded_tick_over_budget";
  }
  return "unknown";
}

std::string_view subject_kind_name(warning_subject::kind kind) noexcept {
  switch (kind) {
    case warning_subject::kind::executor: return "executor";
    case warning_subject::kind::task: return "task";
    case warning_subject::kind::actor: return "actor";
    case warning_subject::kind::embedded_executor: return "embedded_executor";
    case warning_subject::kind::tasks: return "tasks";
  }
  return "unknown";
}

// --- the task lints' sweep -----------------------------------------------------------------------
//
// One pass over the task table in steps (warnings.hpp, evaluate_tasks). Owned by one thread: the
// monitor's (its watch's pass) or evaluate_tasks' caller. Between steps it holds only keys and
// counts, never a view (the views' strings belong to the visitor's step).
class warning_hub::task_sweep {
 public:
  explicit task_sweep(warning_hub& hub) : hub_(hub) {}

  bool in_pass() const noexcept { return in_pass_; }

  // Starts a pass: remembers the task warnings active now and how many more each kind may
  // have. False (no pass) while warnings are off.
  bool begin() {
    abandon();
    std::lock_guard lock(hub_.mutex_);
    options_ = hub_.options_;
    if (!options_.warnings) return false;
    for (std::size_t k = 0; k < warning_kind_count; ++k) room_[k] = task_warnings_per_kind;
    for (const auto& entry : hub_.current_) {
      if (entry.first.what != warning_subject::kind::task) continue;
      active_.insert(entry.first);
      std::size_t& room = room_[std::size_t(entry.first.kind)];
      if (room > 0) --room;
    }
    in_pass_ = true;
    return true;
  }

  // Visits up to `slots` slots from where the last step stopped and raises what it found; true
  // once the pass is over (its end lowered what no longer holds).
  bool step(const task_visitor& visitor, std::uint32_t slots, std::uint64_t now_ns) {
    if (!in_pass_) return true;
    findings_.clear();
    const std::uint64_t woken_ns = std::uint64_t(options_.woken_threshold.count());
    const std::uint64_t lost_ns = std::uint64_t(options_.lost_waker_after.count());
    next_slot_ = visitor(next_slot_, slots, [&](const task_view& t) {
      // self_wakes: above `enable` of its wakes to raise, below `disable` to lower.
      if (t.wakes >= options_.self_wake_minimum && t.wakes != 0) {
        const double share = double(t.self_wakes) / double(t.wakes);
        const bool active_before = was_active(warning_kind::self_wakes, t.id);
        if (active_before ? share >= options_.self_wake_disable
                          : share > options_.self_wake_enable) {
          found(warning_kind::self_wakes, t, 0, now_ns, [&] {
            char text[160];
            std::snprintf(text, sizeof text,
                          "%" PRIu64 " of its %" PRIu64 " wakes (%.0f%%) were its own (yields): "
                          "it may be polling in a loop instead of waiting",
                          t.self_wakes, t.wakes, share * 100.0);
            return std::string(text);
          });
        }
      }
      // lost_waker: suspended with no registration anyone will wake, for a while.
      if (t.current == task_view::state::suspended && !t.waker_registered &&
          t.state_for_ns >= lost_ns) {
        found(warning_kind::lost_waker, t, t.state_for_ns, now_ns, [&] {
          return "suspended " + milliseconds_text(t.state_for_ns) +
                 " with no live waker and not scheduled: nothing will resume it";
        });
      }
      // woken_not_polled: woken (scheduled) and not polled for the threshold.
      if (t.current == task_view::state::scheduled && t.state_for_ns >= woken_ns) {
        found(warning_kind::woken_not_polled, t, t.state_for_ns, now_ns, [&] {
          return "woken " + milliseconds_text(t.state_for_ns) + " ago and not polled since " +
                 "(threshold " + milliseconds_text(woken_ns) + ")";
        });
      }
    });
    for (finding& f : findings_) hub_.raise(f.kind, f.subject, std::move(f.message), f.since_ns);
    findings_.clear();
    if (next_slot_ != task_sweep_done) return false;
    finish(now_ns);
    return true;
  }

  // Drops a pass part-way (out of memory): the next pass starts afresh.
  void abandon() noexcept {
    in_pass_ = false;
    next_slot_ = 0;
    active_.clear();
    holding_.clear();
    findings_.clear();
    for (std::size_t k = 0; k < warning_kind_count; ++k) {
      past_cap_[k] = 0;
      past_cap_longest_ns_[k] = 0;
    }
  }

 private:
  struct finding {
    warning_kind kind;
    warning_subject subject;
    std::string message;
    std::uint64_t since_ns;
  };
  // The kinds the sweep raises and lowers (the others' task subjects belong to other
  // detectors: a stall names a task too).
  static constexpr warning_kind swept_kinds[] = {warning_kind::self_wakes,
                                                 warning_kind::lost_waker,
                                                 warning_kind::woken_not_polled};

  bool was_active(warning_kind kind, std::uint64_t id) const {
    return active_.count(key{kind, warning_subject::kind::task, id}) != 0;
  }

  // The condition holds for task t: a warning of its own if it has one or there is room, else
  // a count for the pass's summary. `message` is called only for a warning of its own.
  template <typename Message>
  void found(warning_kind kind, const task_view& t, std::uint64_t held_for_ns,
             std::uint64_t now_ns, Message&& message) {
    const key k{kind, warning_subject::kind::task, t.id};
    if (!was_active(kind, t.id)) {
      std::size_t& room = room_[std::size_t(kind)];
      if (room == 0) {
        ++past_cap_[std::size_t(kind)];
        past_cap_longest_ns_[std::size_t(kind)] =
            std::max(past_cap_longest_ns_[std::size_t(kind)], held_for_ns);
        return;
      }
      --room;
    }
    holding_.insert(k);
    warning_subject s;
    s.what = warning_subject::kind::task;
    s.id = t.id;
    s.name = std::string(t.name);
    if (!t.location.empty()) {
      s.location = std::string(t.location);
    } else if (t.file != nullptr) {
      s.location = std::string(t.file) + ":" + std::to_string(t.line);
    }
    s.executor = t.executor;
    findings_.push_back({kind, std::move(s), message(), now_ns - std::min(now_ns, held_for_ns)});
  }

  void finish(std::uint64_t now_ns) {
    // Lower what no longer holds (the condition cleared, or the task is gone).
    for (const key& k : active_) {
      if (holding_.count(k) != 0) continue;
      if (std::find(std::begin(swept_kinds), std::end(swept_kinds), k.kind) ==
          std::end(swept_kinds)) {
        continue;
      }
      warning_subject s;
      s.what = k.what;
      s.id = k.id;
      hub_.lower(k.kind, s, now_ns);
    }
    // One warning for the tasks past the cap, per kind.
    for (const warning_kind kind : swept_kinds) {
      warning_subject s;
      s.what = warning_subject::kind::tasks;
      const std::uint64_t count = past_cap_[std::size_t(kind)];
      if (count == 0) {
        hub_.lower(kind, s, now_ns);
        continue;
      }
      const std::uint64_t longest = past_cap_longest_ns_[std::size_t(kind)];
      std::string text = std::to_string(count) + " more tasks than the " +
                         std::to_string(task_warnings_per_kind) + " reported one by one ";
      switch (kind) {
        case warning_kind::woken_not_polled:
          text += "were woken and not polled for " +
                  milliseconds_text(std::uint64_t(options_.woken_threshold.count())) +
                  " or more (the longest " + milliseconds_text(longest) + ")";
          break;
        case warning_kind::lost_waker:
          text += "are suspended with no live waker (the longest for " +
                  milliseconds_text(longest) + ")";
          break;
        default:
          text += "woke themselves (yields) for most of their wakes";
          break;
      }
      hub_.raise(kind, s, std::move(text), now_ns - std::min(now_ns, longest));
    }
    abandon();
  }

  warning_hub& hub_;
  bool in_pass_ = false;
  std::uint32_t next_slot_ = 0;
  core::diagnostics_options options_;  // as the pass began
  std::set<key> active_;   // task warnings active as the pass began (at most the cap per kind)
  std::set<key> holding_;  // of those and of this pass's raises, the ones found holding
  std::vector<finding> findings_;  // one step's, raised at its end (out of the visitor)
  std::size_t room_[warning_kind_count] = {};  // new task warnings this pass may raise, per kind
  std::uint64_t past_cap_[warning_kind_count] = {};  // tasks found holding past the cap
  std::uint64_t past_cap_longest_ns_[warning_kind_count] = {};
};

// --- the monitor's executor watch ----------------------------------------------------------------
//
// Per executor, from the monitor's raw samples (runtime_monitor.hpp, "Watcher"):
//   stall: the key (progress, running) unchanged with `running` non-null since `since_ns`. At
//     the first tick past stall_threshold the runnable is described (the task layer's
//     describer, which only compares the pointer with its table's slots); the warning is raised
//     at the next tick if the key is still the same (so the description is of the runnable
//     still running, not of a newer one at the same address), and lowered at the first tick
//     with another key (the runnable returned).
//   woken_not_polled: work that nobody has taken for woken_threshold:
//     - its own injector shard (FIFO): items there and the shard's `taken` count unchanged
//       since `injector_since_ns`: the front item has waited at least that long;
//     - its local queue and inbox while it makes no progress: with progress unchanged the owner
//       has popped nothing, so the oldest local item is the same until its position moves
//       (a thief took it); inbox items only the owner takes.
//     Raised once either wait passes the threshold, lowered when both waits restarted (the
//     waiting work was taken). Local-queue items of an executor that does progress are bounded
//     by its fairness checks and not watched here (that needs a per-task wake time: the task
//     lints' woken_not_polled over G1's records).
class warning_hub::executor_watch final : public core::monitor_watcher {
 public:
  explicit executor_watch(warning_hub& hub) : hub_(hub) {}

  void watch_executor(const core::executor_sample& sample, std::uint64_t now) noexcept override {
    if (sample.index >= 4096) return;
    if (states_.size() <= sample.index) states_.resize(sample.index + 1);
    state& st = states_[sample.index];
    stall_threshold_ns_ = stall_ns_.load(std::memory_order_relaxed);  // relaxed: see refresh
    woken_threshold_ns_ = woken_ns_.load(std::memory_order_relaxed);
    try {
      watch_stall(st, sample, now);
      watch_woken(st, sample, now);
    } catch (...) {
      // Out of memory while formatting a warning: drop it (the runtime goes on).
    }
  }

  // A step of the task lints' pass, or the start of one every task_sweep_interval_ns. The step
  // lasts task_sweep_step_ns at most (plus one chunk), whatever the table holds.
  void tick_done(std::uint64_t now) noexcept override {
    try {
      if (!sweep_.in_pass()) {
        if (now - last_sweep_ns_ < task_sweep_interval_ns) return;
        last_sweep_ns_ = now;
        {
          std::lock_guard lock(hub_.mutex_);
          visitor_ = hub_.tasks_;  // kept for the pass (the task host set it once, for its life)
        }
        if (!visitor_ || !sweep_.begin()) return;
      }
      const std::uint64_t step_end = core::monotonic_nanoseconds() + task_sweep_step_ns;
      while (!sweep_.step(visitor_, task_sweep_chunk_slots, now)) {
        if (core::monotonic_nanoseconds() >= step_end) return;
      }
    } catch (...) {
      sweep_.abandon();  // out of memory while reporting: start afresh at the next interval
    }
  }

  // Thresholds, refreshed from the hub's options once per tick set (monitor thread only).
  // Any thread (configure): relaxed, thresholds the next tick reads.
  void refresh(const core::diagnostics_options& options) {
    stall_ns_.store(std::uint64_t(options.stall_threshold.count()), std::memory_order_relaxed);
    woken_ns_.store(std::uint64_t(options.woken_threshold.count()), std::memory_order_relaxed);
  }

 private:
  struct state {
    // stall
    std::uint64_t progress = ~std::uint64_t(0);
    const core::runnable* running = nullptr;
    std::uint64_t since_ns = 0;
    bool described = false;
    bool stall_raised = false;
    // The worker's CPU wait (schedstat) when the candidate was armed, and at the last read:
    // time the kernel kept the worker off a CPU is not the runnable's stall.
    bool armed = false;
    bool wait_known = false;
    std::uint64_t armed_wait_ns = 0;
    std::uint64_t waited_ns = 0;   // CPU wait since arming, as last read
    std::uint64_t read_at_ns = 0;
    std::uint64_t armed_at_ns = 0;
    std::uint64_t credited_ns = 0;  // of the time before arming (see watch_stall)
    warning_subject stall_subject;
    // woken_not_polled
    std::uint64_t woken_progress = ~std::uint64_t(0);
    std::uint16_t oldest_position = 0;
    std::uint64_t local_since_ns = 0;  // 0: nothing waiting
    std::uint64_t injector_taken = ~std::uint64_t(0);
    std::uint64_t injector_since_ns = 0;
    bool woken_raised = false;
  };

  warning_subject executor_subject(std::uint32_t index) const {
    warning_subject s;
    s.what = warning_subject::kind::executor;
    s.id = index;
    s.name = "executor " + std::to_string(index);
    s.executor = std::int32_t(index);
    return s;
  }

  void watch_stall(state& st, const core::executor_sample& sample, std::uint64_t now) {
    const bool same = !sample.parked && sample.running != nullptr &&
                      sample.progress == st.progress && sample.running == st.running;
    if (!same) {
      if (st.stall_raised) {
        hub_.lower(warning_kind::stall, st.stall_subject, now);
        st.stall_raised = false;
      }
      st.progress = sample.progress;
      st.running = sample.parked ? nullptr : sample.running;
      st.since_ns = now;
      st.described = false;
      st.armed = false;
      return;
    }
    if (st.stall_raised || !hub_.enabled()) return;
    const std::uint64_t elapsed = now - st.since_ns;
    if (!st.armed) {
      if (elapsed < std::min(stall_arm_after_ns, stall_threshold_ns_ / 2)) return;
      st.armed = true;
      // Time before arming counts only up to stall_arm_after_ns: a monitor that was itself
      // kept off a CPU arms late and cannot tell what the worker did meanwhile.
      st.credited_ns = std::min(elapsed, stall_arm_after_ns);
      st.armed_at_ns = now;
      st.wait_known = thread_cpu_wait_ns(sample.thread_id, st.armed_wait_ns);
      st.waited_ns = 0;
      st.read_at_ns = now;
      return;
    }
    const std::uint64_t observed = st.credited_ns + (now - st.armed_at_ns);
    if (observed < stall_threshold_ns_) return;
    // Past the threshold in wall time: subtract what the kernel kept the worker waiting for a
    // CPU (an oversubscribed machine preempts; that is not the runnable's doing). Re-read at
    // most every stall_reread_ns while the candidate lasts.
    if (st.wait_known && (now - st.read_at_ns >= stall_reread_ns || st.waited_ns == 0)) {
      std::uint64_t waiting = 0;
      if (thread_cpu_wait_ns(sample.thread_id, waiting) && waiting >= st.armed_wait_ns) {
        st.waited_ns = waiting - st.armed_wait_ns;
      }
      st.read_at_ns = now;
    }
    if (observed - std::min(observed, st.waited_ns) < stall_threshold_ns_) return;
    if (!st.described) {
      // First tick past the threshold: describe now, raise at the next tick if still the same.
      st.stall_subject = executor_subject(sample.index);
      {
        std::lock_guard lock(hub_.describers_mutex_);
        for (const auto& [id, describer] : hub_.describers_) {
          warning_subject subject;
          if (describer && describer(sample.running, subject)) {
            subject.executor = std::int32_t(sample.index);
            st.stall_subject = std::move(subject);
            break;
          }
        }
      }
      st.described = true;
      return;
    }
    st.stall_raised = true;
    std::string message;
    const std::string preempted =
        st.waited_ns != 0 ? " (" + milliseconds_text(st.waited_ns) +
                                " of it waiting for a CPU, not counted)"
                          : std::string();
    if (st.stall_subject.what == warning_subject::kind::task) {
      message = "task ran " + milliseconds_text(now - st.since_ns) + preempted + " on executor " +
                std::to_string(sample.index) + " without returning to its executor (threshold " +
                milliseconds_text(stall_threshold_ns_) + ")";
    } else if (st.stall_subject.what == warning_subject::kind::actor) {
      // The subject (formatted before the message) names the actor; the wheel's slice that
      // runs it is what has not returned.
      message = "actor ran " + milliseconds_text(now - st.since_ns) + preempted +
                " on executor " + std::to_string(sample.index) +
                " in one run (its wheel's slice) without returning to its executor (threshold " +
                milliseconds_text(stall_threshold_ns_) + ")";
    } else {
      message = "a runnable that is neither a task nor an actor's run (a fork-join piece) ran " +
                milliseconds_text(now - st.since_ns) + preempted + " without returning to executor " +
                std::to_string(sample.index) + " (threshold " + milliseconds_text(stall_threshold_ns_) + ")";
    }
    hub_.raise(warning_kind::stall, st.stall_subject, std::move(message), st.since_ns);
  }

  void watch_woken(state& st, const core::executor_sample& sample, std::uint64_t now) {
    // The injector shard: FIFO, so an unchanged `taken` count means the same front item.
    if (sample.injector_queued == 0 || sample.injector_taken != st.injector_taken) {
      st.injector_taken = sample.injector_taken;
      st.injector_since_ns = sample.injector_queued != 0 ? now : 0;
    }
    // Local queue and inbox, only while the executor makes no progress (see above).
    const bool waiting = sample.local_queued != 0 || sample.inbox_holds_work;
    const bool same_wait =
        st.local_since_ns != 0 && sample.progress == st.woken_progress &&
        ((sample.local_queued != 0 && sample.local_oldest_position == st.oldest_position) ||
         sample.inbox_holds_work);
    if (!same_wait) {
      st.woken_progress = sample.progress;
      st.oldest_position = sample.local_oldest_position;
      st.local_since_ns = waiting ? now : 0;
    }
    std::uint64_t local_wait = st.local_since_ns != 0 ? now - st.local_since_ns : 0;
    // Inside a stall candidate: the time the kernel kept the worker off a CPU is not counted
    // (as for the stall itself; an oversubscribed machine is not the runtime's doing).
    if (st.armed && sample.progress == st.progress) local_wait -= std::min(local_wait, st.waited_ns);
    const std::uint64_t injector_wait =
        st.injector_since_ns != 0 ? now - st.injector_since_ns : 0;
    const std::uint64_t wait = std::max(local_wait, injector_wait);
    if (wait < woken_threshold_ns_) {
      if (st.woken_raised) {
        hub_.lower(warning_kind::woken_not_polled, executor_subject(sample.index), now);
        st.woken_raised = false;
      }
      return;
    }
    if (st.woken_raised || !hub_.enabled()) return;
    st.woken_raised = true;
    std::string message;
    if (local_wait >= injector_wait) {
      message = std::to_string(sample.local_queued) + " runnable(s) queued on executor " +
                std::to_string(sample.index) + (sample.inbox_holds_work ? " (and its inbox)" : "") +
                " waited " + milliseconds_text(local_wait) +
                " without being run: the executor made no progress and nobody took them "
                "(threshold " + milliseconds_text(woken_threshold_ns_) + ")";
    } else {
      message = "the oldest of " + std::to_string(sample.injector_queued) +
                " runnable(s) in executor " + std::to_string(sample.index) +
                "'s injector shard waited " + milliseconds_text(injector_wait) +
                " without being taken (threshold " + milliseconds_text(woken_threshold_ns_) + ")";
    }
    hub_.raise(warning_kind::woken_not_polled, executor_subject(sample.index), std::move(message),
               now - wait);
  }

  warning_hub& hub_;
  std::vector<state> states_;  // monitor thread only
  std::uint64_t stall_threshold_ns_ = 0;  // this tick's thresholds (monitor thread only)
  std::uint64_t woken_threshold_ns_ = 0;
  std::uint64_t last_sweep_ns_ = 0;  // when the last pass began
  task_visitor visitor_;             // the pass's (monitor thread only)
  task_sweep sweep_{hub_};           // the pass in progress, if any (monitor thread only)
  std::atomic<std::uint64_t> stall_ns_{25'000'000};
  std::atomic<std::uint64_t> woken_ns_{100'000'000};
};

// --- the hub -------------------------------------------------------------------------------------

warning_hub::warning_hub(registry& owner) {
  snapshot_registration_ =
      owner.add_snapshot_section("warnings", [this](json_writer& out) { write_snapshot(out); });
  metrics_registration_ = owner.add_metrics([this](std::string& out) { write_metrics(out); });
  configure(core::diagnostics_options{});
}

warning_hub::~warning_hub() = default;

void warning_hub::configure(const core::diagnostics_options& options) {
  std::lock_guard lock(mutex_);
  options_ = options;
  // relaxed: thresholds for the detectors' quick checks (see the members).
  mailbox_enable_.store(options.mailbox_enable, std::memory_order_relaxed);
  enabled_.store(options.warnings, std::memory_order_relaxed);
  if (watch_) watch_->refresh(options);
  for (bucket& b : buckets_) {
    b.tokens = double(options.warnings_per_second);
    b.refilled_ns = 0;
  }
}

core::diagnostics_options warning_hub::options() const {
  std::lock_guard lock(mutex_);
  return options_;
}

void warning_hub::set_warning_hook(hook h) {
  auto shared = h ? std::make_shared<const hook>(std::move(h)) : nullptr;
  {
    std::lock_guard lock(mutex_);
    hook_ = std::move(shared);
  }
  // A hook (or listener) replacing the hook from inside a delivery: that delivery is this
  // thread's own, and waiting for it would wait for ever (it holds delivery_mutex_). The new
  // hook is in place; the old one returns on its own.
  if (delivering_hub == this) return;
  // Wait out a delivery in progress: it took the old hook under delivery_mutex_, so once we
  // hold it the old hook is no longer called (its owner may go away after we return).
  std::lock_guard wait_for_delivery(delivery_mutex_);
}

std::uint64_t warning_hub::add_on_warning(hook listener) {
  auto shared = std::make_shared<const hook>(std::move(listener));
  std::lock_guard lock(mutex_);
  listeners_.emplace_back(next_listener_, std::move(shared));
  return next_listener_++;
}

void warning_hub::remove_on_warning(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  std::erase_if(listeners_, [id](const auto& entry) { return entry.first == id; });
}

bool warning_hub::take_token(warning_kind kind, std::uint64_t now_ns) {
  bucket& b = buckets_[std::size_t(kind)];
  const double capacity = double(options_.warnings_per_second);
  if (b.refilled_ns != 0 && now_ns > b.refilled_ns) {
    b.tokens = std::min(capacity, b.tokens + capacity * double(now_ns - b.refilled_ns) / 1e9);
  }
  b.refilled_ns = now_ns;
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

void warning_hub::raise(warning_kind kind, const warning_subject& subject, std::string message,
                        std::uint64_t now_ns) {
  const std::uint64_t delivered_at = core::monotonic_nanoseconds();
  warning copy;
  {
    std::lock_guard lock(mutex_);
    const key k{kind, subject.what, subject.id};
    auto found = current_.find(k);
    if (found != current_.end()) {
      found->second.last_seen_ns = std::max(found->second.last_seen_ns, delivered_at);
      found->second.message = std::move(message);
      return;  // raised once until lowered
    }
    warning w;
    w.kind = kind;
    w.subject = subject;
    w.message = std::move(message);
    w.first_seen_ns = std::min(now_ns, delivered_at);
    w.last_seen_ns = delivered_at;
    // Raised before (and lowered since): keep counting the episodes of one subject.
    for (const warning& old : recent_) {
      if (old.kind == kind && old.subject.what == subject.what && old.subject.id == subject.id) {
        w.raised_count = old.raised_count + 1;
      }
    }
    ++raised_[std::size_t(kind)];
    if (options_.strict_warnings) failures_.push_back(w);
    const bool deliver_it = take_token(kind, delivered_at);
    if (!deliver_it) ++suppressed_[std::size_t(kind)];
    current_.emplace(k, w);
    if (!deliver_it) return;
    copy = std::move(w);
  }
  deliver(copy);
}

void warning_hub::lower(warning_kind kind, const warning_subject& subject, std::uint64_t now_ns) {
  std::lock_guard lock(mutex_);
  auto found = current_.find(key{kind, subject.what, subject.id});
  if (found == current_.end()) return;
  warning w = std::move(found->second);
  current_.erase(found);
  w.active = false;
  w.last_seen_ns = std::max(w.last_seen_ns, now_ns);
  recent_.push_back(std::move(w));
  while (recent_.size() > recent_capacity) recent_.pop_front();
}

bool warning_hub::is_active(warning_kind kind, const warning_subject& subject) const {
  std::lock_guard lock(mutex_);
  return current_.count(key{kind, subject.what, subject.id}) != 0;
}

void warning_hub::deliver(const warning& w) {
  // One delivery at a time; the hook is read while holding delivery_mutex_ (set_warning_hook
  // relies on that to know when an old hook is no longer called).
  std::lock_guard one_at_a_time(delivery_mutex_);
  // Marks this thread as inside this hub's delivery (set_warning_hook from a hook).
  struct delivering_scope {
    const warning_hub* previous;
    explicit delivering_scope(const warning_hub* hub) : previous(delivering_hub) {
      delivering_hub = hub;
    }
    ~delivering_scope() { delivering_hub = previous; }
  } scope(this);
  std::shared_ptr<const hook> h;
  std::vector<std::shared_ptr<const hook>> listeners;
  {
    std::lock_guard lock(mutex_);
    h = hook_;
    for (const auto& entry : listeners_) listeners.push_back(entry.second);
  }
  try {
    if (h) {
      (*h)(w);
    } else {
      const std::string line = format(w) + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
    for (const auto& listener : listeners) (*listener)(w);
  } catch (...) {
    // A hook that throws loses its warning; the detector (the monitor, an executor) goes on.
  }
}

std::string warning_hub::format(const warning& w) {
  std::string line = "spindle warning [";
  line += kind_name(w.kind);
  line += "] ";
  line += subject_kind_name(w.subject.what);
  if (w.subject.what != warning_subject::kind::tasks) {  // many tasks: no id
    line += ' ';
    line += w.subject.what == warning_subject::kind::task ? task_id_text(w.subject.id)
                                                          : std::to_string(w.subject.id);
  }
  if (!w.subject.name.empty()) line += " \"" + w.subject.name + "\"";
  if (!w.subject.location.empty()) line += " at " + w.subject.location;
  line += ": ";
  line += w.message;
  return line;
}

std::vector<warning> warning_hub::current() const {
  std::lock_guard lock(mutex_);
  std::vector<warning> out;
  for (const auto& entry : current_) out.push_back(entry.second);
  std::sort(out.begin(), out.end(),
            [](const warning& a, const warning& b) { return a.first_seen_ns < b.first_seen_ns; });
  return out;
}

std::vector<warning> warning_hub::recent() const {
  std::lock_guard lock(mutex_);
  return {recent_.begin(), recent_.end()};
}

std::uint64_t warning_hub::raised(warning_kind kind) const {
  std::lock_guard lock(mutex_);
  return raised_[std::size_t(kind)];
}

std::uint64_t warning_hub::suppressed(warning_kind kind) const {
  std::lock_guard lock(mutex_);
  return suppressed_[std::size_t(kind)];
}

std::uint64_t warning_hub::raised_total() const {
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (std::uint64_t n : raised_) total += n;
  return total;
}

std::vector<warning> warning_hub::failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}

void warning_hub::clear_failures() {
  std::lock_guard lock(mutex_);
  failures_.clear();
}

namespace {

void write_warning(json_writer& out, const warning& w, std::uint64_t now) {
  out.begin_object();
  out.member("kind", kind_name(w.kind));
  out.key("subject").begin_object();
  out.member("kind", subject_kind_name(w.subject.what));
  if (w.subject.what == warning_subject::kind::task) {
    out.member("id", task_id_text(w.subject.id));
  } else {
    out.member("id", w.subject.id);
  }
  out.member("name", w.subject.name);
  out.member("location", w.subject.location);
  if (w.subject.executor >= 0) {
    out.member("executor", std::int64_t(w.subject.executor));
  } else {
    out.key("executor").null();
  }
  out.end_object();
  out.member("message", w.message);
  out.member("active", w.active);
  out.member("raised_count", w.raised_count);
  out.member("first_seen_ns", w.first_seen_ns);
  out.member("last_seen_ns", w.last_seen_ns);
  out.member("age_ms", double(now > w.first_seen_ns ? now - w.first_seen_ns : 0) / 1e6);
  out.end_object();
}

}  // namespace

void warning_hub::write_snapshot(json_writer& out) const {
  const std::uint64_t now = core::monotonic_nanoseconds();
  std::lock_guard lock(mutex_);
  out.begin_object();
  out.key("current").begin_array();
  for (const auto& entry : current_) write_warning(out, entry.second, now);
  out.end_array();
  out.key("recent").begin_array();
  for (const warning& w : recent_) write_warning(out, w, now);
  out.end_array();
  out.key("totals").begin_object();
  for (std::size_t i = 0; i < warning_kind_count; ++i) {
    out.key(kind_name(warning_kind(i))).begin_object();
    out.member("raised", raised_[i]);
    out.member("suppressed", suppressed_[i]);
    out.end_object();
  }
  out.end_object();
  out.member("strict", options_.strict_warnings);
  out.member("failures", std::uint64_t(failures_.size()));
  out.end_object();
}

void warning_hub::write_metrics(std::string& out) const {
  std::lock_guard lock(mutex_);
  out += "# HELP spindle_warnings_total Warnings raised, per kind (docs/design/diagnostics.md).\n";
  out += "# TYPE spindle_warnings_total counter\n";
  for (std::size_t i = 0; i < warning_kind_count; ++i) {
    out += "spindle_warnings_total{kind=\"";
    out += kind_name(warning_kind(i));
    out += "\"} " + std::to_string(raised_[i]) + "\n";
  }
  out += "# HELP spindle_warnings_suppressed_total Warnings raised but not delivered to the hook "
         "(rate limit), per kind.\n";
  out += "# TYPE spindle_warnings_suppressed_total counter\n";
  for (std::size_t i = 0; i < warning_kind_count; ++i) {
    out += "spindle_warnings_suppressed_total{kind=\"";
    out += kind_name(warning_kind(i));
    out += "\"} " + std::to_string(suppressed_[i]) + "\n";
  }
  out += "# HELP spindle_warnings_active Warnings raised and not lowered yet, per kind.\n";
  out += "# TYPE spindle_warnings_active gauge\n";
  std::uint64_t active[warning_kind_count] = {};
  for (const auto& entry : current_) ++active[std::size_t(entry.first.kind)];
  for (std::size_t i = 0; i < warning_kind_count; ++i) {
    out += "spindle_warnings_active{kind=\"";
    out += kind_name(warning_kind(i));
    out += "\"} " + std::to_string(active[i]) + "\n";
  }
}

std::uint64_t warning_hub::add_runnable_describer(runnable_describer describer) {
  std::lock_guard lock(describers_mutex_);
  const std::uint64_t id = next_describer_++;
  describers_.emplace_back(id, std::move(describer));
  return id;
}

void warning_hub::remove_runnable_describer(std::uint64_t id) {
  std::lock_guard lock(describers_mutex_);  // waits for a call in progress
  std::erase_if(describers_, [id](const auto& entry) { return entry.first == id; });
}

void warning_hub::set_task_visitor(task_visitor visitor) {
  std::lock_guard lock(mutex_);
  tasks_ = std::move(visitor);
}

void warning_hub::watch_runtime(core::runtime_core& core) {
  {
    std::lock_guard lock(mutex_);
    if (!watch_) {
      watch_ = std::make_unique<executor_watch>(*this);
      watch_->refresh(options_);
    }
  }
  core.set_monitor_watcher(watch_.get());
}

void warning_hub::evaluate_tasks(const task_visitor& visitor, std::uint64_t now_ns) {
  task_sweep sweep(*this);
  if (!sweep.begin()) return;
  while (!sweep.step(visitor, task_sweep_done, now_ns)) {
  }
}

void warning_hub::observe_mailbox(mailbox_watch& state, std::uint64_t length,
                                  const std::function<warning_subject()>& subject) {
  std::uint64_t enable = 0, disable = 0;
  {
    std::lock_guard lock(mutex_);
    if (!options_.warnings) return;
    enable = options_.mailbox_enable;
    disable = options_.mailbox_disable;
  }
  const std::uint64_t now = core::monotonic_nanoseconds();
  if (state.raised && length < disable) {
    state.raised = false;
    state.looks_above = 0;
    lower(warning_kind::mailbox_growth, subject(), now);
    return;
  }
  if (!state.raised) {
    if (length < enable) {
      state.looks_above = 0;
      return;
    }
    // One look at or above `enable` raises, as OTP's long_message_queue: the actor takes its
    // whole mailbox at each look, so a single burst is seen once (two looks in a row missed it,
    // WarningsActors.ASingleBurstIntoABusyActorIsReported). The hysteresis is the lower
    // `disable` threshold: no flicker around `enable`.
    state.raised = true;
    state.looks_above = 0;
  }
  // Raised now, or still raised: raise() delivers the first and refreshes the message after.
  raise(warning_kind::mailbox_growth, subject(),
        "mailbox backlog of " + std::to_string(length) + " messages (raised at " +
            std::to_string(enable) + ", lowered below " + std::to_string(disable) +
            "): the actor does not keep up with its senders",
        now);
}

void warning_hub::observe_tick(tick_watch& state, std::uint64_t elapsed_ns, std::uint64_t budget_ns,
                               const std::function<warning_subject()>& subject) {
  if (budget_ns == 0) return;
  double factor = 0;
  {
    std::lock_guard lock(mutex_);
    if (!options_.warnings) return;
    factor = options_.tick_over_budget_factor;
  }
  const std::uint64_t now = core::monotonic_nanoseconds();
  if (double(elapsed_ns) > factor * double(budget_ns)) {
    state.within_budget = 0;
    if (state.raised) return;
    state.raised = true;
    char text[160];
    std::snprintf(text, sizeof text,
                  "a tick took %.2f ms, %.1fx its time budget of %.2f ms (warned above %.1fx): "
                  "one of its tasks ran long without suspending",
                  double(elapsed_ns) / 1e6, double(elapsed_ns) / double(budget_ns),
                  double(budget_ns) / 1e6, factor);
    raise(warning_kind::embedded_tick_over_budget, subject(), text, now - elapsed_ns);
    return;
  }
  if (!state.raised) return;
  // Lowered only below the lower threshold (the budget itself), for a while.
  if (elapsed_ns <= budget_ns && ++state.within_budget >= ticks_within_budget_to_lower) {
    state.raised = false;
    state.within_budget = 0;
    lower(warning_kind::embedded_tick_over_budget, subject(), now);
  } else if (elapsed_ns > budget_ns) {
    state.within_budget = 0;
  }
}

}  // namespace spindle::diagnostics
