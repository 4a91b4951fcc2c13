// The runtime monitor: one thread per runtime that keeps time while the workers are busy (the
// role of Go's sysmon). Design and measurements: docs/design/time-slicing.md.
//
// Why a thread: no part of the runtime can be preempted (a non-goal), so time-based fairness
// needs someone who looks at the clock while a worker is inside a runnable that does not return.
// The workers themselves only read a word the monitor writes; they never call the clock on the
// hot path (measured in time-slicing.md: a relaxed load of the coarse clock costs ~0.3 ns, a vDSO
// clock_gettime ~20 ns, rdtsc ~7 ns per runnable on this machine).
//
// Who takes part
//   - the monitor thread: owns `views_` (per executor: the progress it last saw and since when,
//     the busy time it last sampled); the main writer of the runtime's coarse clock (a waking
//     executor and a long actor run also move it forward: runtime_core::advance_coarse_clock),
//     the single writer of every executor's `utilisation` and `in_long_runnable` flag;
//   - executors: publish `progress` (runnables completed), `awake_since_ns`, `busy_total_ns`
//     and `last_service_at_ns` (executor.hpp); read the coarse clock after each runnable
//     (service interval) and the long-runnable flags of others (stealing, rescue);
//   - layers above: hold fine-time claims (runtime_core::claim_fine_time; the actor system);
//   - anyone: reads the coarse clock (actor slices, the cooperative budget, fork-join).
//
// How often it ticks: finely (every service_interval / 4, at least 25 µs) while anything needs
// the coarse clock to that resolution, relaxed (at most a service interval apart) otherwise. A
// tick is a wake-up of this thread, which costs a context switch (10-20 µs in a VM): at 4,000 a
// second beside a busy I/O server it was ~10 % of the server's CPU time (io.md, "The monitor's
// tick"). Fine ticks while any of these holds at a tick:
//   - an awake executor is inside a runnable that began before the last tick (its progress did
//     not move): steps 3 and 4 time it, to a fine tick;
//   - an executor asked for a ping at a deadline (fork-join with latent work, step 4);
//   - a layer holds a fine-time claim (runtime_core::claim_fine_time: actors, whose run times
//     and slices are read on the coarse clock).
// (The watcher's thresholds are tens of milliseconds; its task sweep goes a step per tick, so
// a pass takes up to 4x longer in time while ticks are relaxed.)
// Otherwise every awake executor runs short runnables and services on its own (after `budget`
// runnables, or when the coarse clock says a service interval passed): the next tick is when
// the earliest of their next services falls due (its last service, or its wake-up if later,
// plus a service interval), at least a fine tick and at most a service interval from now. So
// the service bound holds as with fine ticks (a service interval plus a fine tick, plus one
// runnable). What a relaxed tick loosens: the coarse clock's age between services (up to a
// service interval), and for a runnable that becomes long between two relaxed ticks, the first
// look at it (at the next one, which then ticks finely): its long-runnable flag, the rescue of
// its due timers and the first ping of its fork-join come up to a service interval later.
//
// Each tick (the monitor sleeps between ticks):
//   1. coarse clock: runtime_core::coarse_now_ns() := monotonic now (relaxed store; readers
//      accept a value up to one tick old, so every time bound below holds within one tick);
//   2. utilisation (C8, load.md): for each executor, busy time (awake, not parked) over the
//      window since the last sample, folded into a time-weighted moving average; because busy
//      time includes the current unfinished stretch, a runnable that never returns reads as busy
//      from the first tick on;
//   3. long runnables: an awake executor whose progress has not moved for `long_runnable_after`
//      (default 2 ms) is inside one long runnable. The monitor sets its `in_long_runnable` flag
//      (thieves may then take even its newest queued item, and P2C avoids it) and, if it has due
//      timers or queued work, wakes a parked executor to rescue them (executor::rescue_others:
//      it fires the stuck executor's due timers, so what they wake runs on the rescuer, and
//      steals its queued work). The flag is cleared at the first tick that sees progress.
//      What cannot be rescued: runnables addressed to that executor (its inbox: actor wheel turns,
//      spawn_on) and completions of its io_uring ring (single issuer). They wait until it returns
//      to its loop, or reaches a service point (executor::service_point, e.g. fork-join
//      heartbeats, the cooperative budget's yields).
//   4. pings (executor.hpp, "pings"): an awake executor with a ping handler whose requested
//      ping deadline has passed, or that has no request and has been inside one runnable for
//      half a service interval (unless its handler declined), gets `runtime_options::ping_signal`
//      (pthread_kill under the executor's ping mutex); the monitor sleeps 20 µs (more with timer slack) unless the pinged workers took
//      their signals at once, then, if any offer board holds work, wakes a parked executor (a ping handler publishes work
//      but cannot wake anyone from signal context). A ping the worker has not taken yet (the
//      signal is pending: blocked, or the worker is off the CPU) is not sent again until it is
//      taken: a real-time ping signal is queued, not merged, and an extra copy would reach the
//      program's own handler as a signal that is not a ping.
//   5. CPU sharing (docs/design/parking.md, "Executors that share a CPU"): each awake executor
//      publishes the CPU it was last seen on; every awake executor whose CPU a lower-index awake
//      one also claims gets its `shares_cpu` hint, so that its next service compares (the
//      executor decides, with the kernel's word, whether to go on standby). And while an
//      executor is in a long runnable with injected work waiting, someone is woken for it
//      (executors on standby are otherwise not woken while one not on standby is awake).
//   6. CPU contention (parking.md, "A CPU shared with a thread that is not ours"): once per
//      contention window (8 service intervals), while some executor serves I/O, the monitor
//      reads each executor's time on a CPU and waiting for one (/proc schedstat). An executor
//      serving I/O that waited more than a quarter of its runnable time, while a sibling that
//      ran at least a millisecond waited less than an eighth of its own, is asked to stand by
//      for that sibling (executor::standby_request_; the executor decides at its next service).
// Idle: when no executor has been awake for 20 ms (utilisation has decayed) the monitor sleeps
// until one wakes (executor::park notifies it;
// a Dekker pair of seq_cst operations on `idle_` and the runtime's unparked count means no wake
// is lost) or 100 ms pass; after such a timeout with everyone still parked it ticks once and
// sleeps again (an idle runtime costs ten ticks a second). Before each such sleep, once every
// executor has been parked for runtime_options::frame_cache_idle_trim, it trims the shared
// frame depot down to the bound without this runtime's share (frame_allocator.hpp): an idle
// runtime caches no frames, whoever freed them into the depot (a foreign thread dropping join
// handles after the workers parked, say); the executors' private caches are theirs to trim.
//
// Watcher (diagnostics' warnings, G4; docs/design/diagnostics.md "Warnings"): when one is
// installed, each tick ends by handing it a raw sample of every executor (relaxed loads only)
// and then tick_done. The watcher keeps its own state and decides; the monitor only samples.
// Without one, this costs one acquire load per tick.
//
// Lifetime: started by runtime_core::start after the executors exist, stopped and joined in
// runtime_core::finish_shutdown before anything is drained (the monitor only reads executors
// and their timer services, which live as long as runtime_core).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace spindle::core {

class runtime_core;
struct runnable;

// What the monitor saw of one executor at one tick (relaxed samples, possibly torn across
// fields: a watcher confirms a condition over several ticks before acting on it).
struct executor_sample {
  std::uint32_t index = 0;
  bool parked = false;
  std::uint64_t progress = 0;            // loop iteration of the runnable last completed
  const runnable* running = nullptr;     // being run now (null between runnables); a key only,
                                         // never to be dereferenced: it may be freed already
  std::uint32_t local_queued = 0;        // local queue size
  std::uint16_t local_oldest_position = 0;  // changes exactly when its oldest item leaves
  bool inbox_holds_work = false;         // runnables addressed to it (only it can take them)
  std::uint64_t injector_queued = 0;     // its own injector shard (FIFO)
  std::uint64_t injector_taken = 0;      // items ever taken from that shard (monotonic)
  int thread_id = 0;                     // the worker's kernel thread id (0: not started)
};

class monitor_watcher {
 public:
  // Monitor thread, at the end of each tick: once per executor, then tick_done. Must not block
  // (the monitor keeps the runtime's time) and must not call back into the monitor.
  virtual void watch_executor(const executor_sample& sample, std::uint64_t now) noexcept = 0;
  virtual void tick_done(std::uint64_t now) noexcept = 0;

 protected:
  ~monitor_watcher() = default;
};

class runtime_monitor {
 public:
  explicit runtime_monitor(runtime_core& core);
  ~runtime_monitor();
  runtime_monitor(const runtime_monitor&) = delete;
  runtime_monitor& operator=(const runtime_monitor&) = delete;

  void start();
  // Installs the watcher (see "Watcher"); any thread, any time. It must outlive the monitor's
  // thread (runtime_core::finish_shutdown stops it) or be replaced by null while the monitor is
  // stopped.
  void set_watcher(monitor_watcher* watcher) noexcept {
    watcher_.store(watcher, std::memory_order_release);  // release: the watcher is built
  }
  // Stops and joins the thread. Idempotent; must not be called from the monitor thread.
  void stop() noexcept;
  // An executor stopped parking: if the monitor sleeps because everyone was parked, wake it.
  void executor_awake() noexcept;
  // A fine-time claim was made (runtime_core::claim_fine_time): tick now, and finely from then.
  void wake_for_fine_time() noexcept;
  // Ticks so far (tests use it to wait for the monitor to have looked at something).
  std::uint64_t ticks() const noexcept { return ticks_.load(std::memory_order_relaxed); }
  // Idle trims of the frame depot that gave something back (see "Idle" above).
  std::uint64_t frame_depot_trims() const noexcept {
    return frame_depot_trims_.load(std::memory_order_relaxed);  // relaxed: a statistic
  }

 private:
  struct executor_view {
    std::uint64_t progress = 0;          // progress counter last seen
    std::uint64_t progress_since_ns = 0; // when it was first seen at that value
    std::uint64_t busy_ns = 0;           // busy time sampled at the start of the window
    std::uint64_t window_start_ns = 0;
    // CPU contention (step 6): the thread's schedstat times at the window's start.
    std::uint64_t cpu_running_ns = 0;
    std::uint64_t cpu_waiting_ns = 0;
    bool cpu_times_valid = false;        // false: the next window only starts counting
    double share_waited = -1;            // of the last window's runnable time; -1: no evidence
  };

  void run() noexcept;
  void tick(std::uint64_t now) noexcept;
  void sample_utilisation(std::uint32_t index, std::uint64_t now) noexcept;
  void watch_progress(std::uint32_t index, std::uint64_t now) noexcept;
  void send_pings(std::uint32_t count, std::uint64_t now) noexcept;
  // When the next relaxed tick is due (see "How often it ticks"), or 0 if fine ticks are needed.
  std::uint64_t relaxed_tick_at(std::uint64_t now, std::uint64_t relaxed_tick_ns) noexcept;
  void sleep_while_all_parked() noexcept;
  // Everyone has been parked for `idle_ns`: trims the frame depot (see "Idle" above).
  void trim_idle_frame_depot(std::uint64_t idle_ns) noexcept;
  void watch_cpu_sharing(std::uint32_t count) noexcept;
  void watch_cpu_contention(std::uint32_t count, std::uint64_t now) noexcept;
  executor_sample sample_executor(std::uint32_t index) const noexcept;

  runtime_core& core_;
  std::thread thread_;
  std::vector<executor_view> views_;  // monitor thread only
  // CPU sharing (step 4): per CPU id, the awake executor that claimed it this tick, and the
  // CPUs claimed (to reset them). Monitor thread only.
  std::vector<std::uint32_t> cpu_claimed_by_;
  std::vector<std::int32_t> claimed_cpus_;
  std::uint64_t contention_window_start_ns_ = 0;  // step 6; monitor thread only
  std::atomic<std::uint64_t> ticks_{0};
  std::atomic<std::uint64_t> frame_depot_trims_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<monitor_watcher*> watcher_{nullptr};
  std::atomic<bool> idle_{false};      // the monitor sleeps because every executor is parked
  bool stop_requested_ = false;        // guarded by mutex_
};

}  // namespace spindle::core
