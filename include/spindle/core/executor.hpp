// One executor: a worker thread, its queues, its timers, its parker and its statistics.
//
// What the executor owns (touched only by its own thread):
//   - the owner side of `local` (push/pop), the loop counters, `is_searching`, the random state.
// What it shares (the executor handle other threads use):
//   - `mailbox` (anyone posts messages and returns, the owner takes; executor_mailbox.hpp) and
//     `message_stats`; its message pool is owner-only;
//   - the thief side of `local` and its size; `inbox` (anyone pushes, the owner drains);
//   - `offers` (the owner publishes promoted fork-join work, anyone takes one item);
//   - `timers` (anyone arms/disarms; the owner fires);
//   - `parker`, which is the reactor (anyone unparks; I/O is owner-only); `stats` (owner
//     writes, anyone reads; inbox pushes are counted by the pushers);
//   - diagnostics (docs/design/diagnostics.md): `running` (the runnable it runs, owner-stored,
//     sampled by the monitor's stall watch, never dereferenced), its trace ring (owner writes,
//     readers copy and drop torn events, core/trace.hpp) and its histograms (owner records while
//     they are on, readers take snapshots, core/histogram.hpp).
//
// The loop (see docs/design/executor-loop.md), one iteration:
//   0. the mailbox (inter-executor messages, docs/design/messaging.md): one relaxed load when
//      empty; otherwise every message is delivered (and every returned one reclaimed) before
//      anything else runs;
//   1. a pinned runnable that yielded (an actor wheel's turn), if a service found it owed a turn
//      (it had waited a whole service interval: yielded before the previous service);
//   1b. a woken task that a service found waiting in the local queue for a whole service
//      interval (buried under newer work that keeps coming, such as a rolling set of children
//      each spawned as the last one ends): taken out of the queue, if at most 8 items lie
//      above it (look_at_waiting_woken, take_waiting_woken);
//   2. every `injector_check_interval` iterations, the fairness checks: the oldest local item if
//      it has been the oldest for `local_fairness_interval` iterations, else ONE item of the own
//      injector shard (one, so that remote work never buries woken tasks), else a pinned
//      runnable that yielded;
//   3. the inbox (runnables sent to this executor specifically);
//   3b. ONE item of the own injector shard, if a service interval passed since the last such
//      look (so remote work waits about a service interval at most, even behind long
//      iterations such as actor wheel slices);
//   4. the local queue, newest first;
//   5. the reactor when I/O is in flight; the injector: own shard, in a batch;
//   6. a pinned runnable that yielded (no task work left here: the wheel goes on);
//   7. rescue: due timers and queued work of executors stuck in a long runnable (the monitor,
//      runtime_monitor.hpp, flags them);
//   7b. its own offer board: fork-join work it re-offered when a loop piece ended its slice to
//      make way for the work above (fork_state.hpp, "Slices"); before other executors' work;
//   8. stealing (bounded number of concurrent searchers, random victims; first one item from
//      the victims' offer boards, then half of a local queue, all of it from an executor in a
//      long runnable; exponential backoff between rounds; when executors are bound to a
//      multi-domain machine, victims nearest first: same cache domain, then same NUMA node,
//      then the rest, topology.hpp);
//   9. park (parking protocol in runtime_core / docs/design/parking.md) until notified or the
//      next timer deadline.
// Standby (docs/design/parking.md, "Executors that share a CPU"): an executor serving I/O that
// finds itself on the CPU of a lower-index sibling whose thread is runnable there (at a wake-up,
// or at a service the monitor flagged) hands its queued work and injector shard to that sibling
// and stands by for a while: whatever its reactor, timers or tasks wake goes to the sibling's
// shard, it takes no injected work, does not rescue or steal, and notifiers wake other
// executors instead of it. It still runs what is addressed to it (inbox, mailbox, a pinned
// yielded runnable, its own offer board). Standby ends early when the sibling is found in a long
// runnable. Afterwards, if its thread waits for its CPU more than a quarter of the time, it
// stands by again (probation).
// Service (docs/design/time-slicing.md): after every `budget` runnables, and after any runnable
// that ends at least `service_interval` of busy time after the last service (read on the
// monitor's coarse clock: one relaxed load per runnable), the executor fires due timers, polls
// its reactor (submits queued I/O in one batch, runs completions), rescues stuck executors'
// timers, and owes a pinned yielded runnable that has waited since the previous service a turn
// (and the own injector shard one item). Code that runs long inside one runnable
// (fork-join) calls service_point() at its natural pauses for the same effect, and may end a
// piece of its work early when has_waiting_work() says the loop has something else to run. In
// a long runnable its service points also deliver its messages and let the layers hand away
// work only it could run (runtime_core::set_long_runnable_hook: actors homed here).
//
// Pings (runtime_monitor.hpp, step 4): a layer whose runnables can run long without reaching a
// point where it looks at the clock (fork-join leaves) installs a ping handler on its worker.
// The monitor pings an awake worker with a handler when the deadline the layer requested has
// passed, or, without a request, when the worker has been inside one runnable for half a
// service interval and its handler has not declined pings for that runnable. A ping is
// `runtime_options::ping_signal`; the process-wide handler of that signal calls the ping
// handler on the worker's own thread, in signal context. The
// handler interrupts the owner anywhere, so it may only touch what the layer keeps consistent
// for it (lock-free atomics; plain data ordered with std::atomic_signal_fence) and must not
// lock, allocate or call into the runtime: it may publish on its own offer board (atomic
// stores) and request the next ping; the monitor wakes an idle executor when a board holds
// work after a ping. Pings are never sent while the worker is parked, nor after it left its
// loop (`ping_mutex_` orders the monitor's signal against the worker's exit). A ping carries a
// mark (pthread_sigqueue, si_value = the executor), so the handler tells a ping from the
// program's own use of the signal even when it is a second copy: a ping not taken within
// `ping_presumed_lost_ns` is sent again (a signal the kernel or a sanitizer deferred and then
// dropped would otherwise stop pings to that worker for good; ThreadSanitizer was seen doing
// it), and a copy that finds no ping pending is dropped, not passed on.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "spindle/core/atomic.hpp"
#include "spindle/core/executor_mailbox.hpp"
#include "spindle/core/histogram.hpp"
#include "spindle/core/intrusive_list.hpp"
#include "spindle/core/local_queue.hpp"
#include "spindle/core/offer_board.hpp"
#include "spindle/core/parker.hpp"
#include "spindle/core/reactor.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/core/topology.hpp"

namespace spindle::core {

class runtime_core;
class executor;

namespace detail {
// The executor whose worker loop runs on this thread (executor::current). constinit: the ping
// signal handler reads it, which must not run a TLS initialiser; and other translation units
// read it with one TLS load instead of a call to a TLS wrapper.
extern thread_local constinit executor* current_executor;
}  // namespace detail

// Counters a reader may sample at any time; each has a single writer (the executor).
struct executor_stats {
  std::atomic<std::uint64_t> runnables_run{0};
  std::atomic<std::uint64_t> steals{0};           // successful thefts (batches)
  std::atomic<std::uint64_t> parks{0};
  std::atomic<std::uint64_t> budget_exhaustions{0};
  std::atomic<std::uint64_t> timers_fired{0};
  std::atomic<std::uint64_t> services{0};           // services (timers, I/O, rescue)
  std::atomic<std::uint64_t> rescues{0};            // stuck executors' timers/work taken over
  std::atomic<std::uint64_t> pings{0};              // pings delivered to the ping handler
  std::atomic<std::uint64_t> standbys{0};           // times it went on standby (CPU shared)
  std::atomic<std::uint64_t> contention_standbys{0};  // of which asked by the monitor (CPU waits)
  // Idle trims: times it gave its private frame cache back after a park of
  // frame_cache_idle_trim (frame_allocator.hpp).
  std::atomic<std::uint64_t> frame_cache_trims{0};
  // Written by the runtime monitor (runtime_monitor.hpp), not by the executor:
  std::atomic<std::uint64_t> busy_nanoseconds{0};  // time spent not parked, as last sampled
  // Utilisation over the last sampling window, in parts per 65536 (see load.md):
  // busy time / wall time, smoothed with an exponential moving average; includes the current
  // unfinished runnable, so an executor stuck in one runnable reads as busy.
  std::atomic<std::uint32_t> utilisation{0};
  // --- G2 metrics (executor_metrics.hpp; docs/design/diagnostics.md, "Metrics (G2)") ---------
  // Owner-written like the rest, except where noted.
  std::atomic<std::uint64_t> local_schedules{0};      // push_local: spawns, wakes, yields here
  std::atomic<std::uint64_t> overflows{0};            // local ring overflowed into the injector
  std::atomic<std::uint64_t> taken_from_injector{0};  // runnables taken from any injector shard
  std::atomic<std::uint64_t> taken_from_inbox{0};     // runnables taken from the inbox
  // Pushed onto the inbox (schedule_on, any thread: fetch_add, a path not hot enough to count).
  std::atomic<std::uint64_t> inbox_pushes{0};
  std::atomic<std::uint64_t> forced_yields{0};  // tasks here whose cooperative budget ran out
  // Fork-join: continuations this executor promoted (fetch_add: promotion also runs in the ping
  // handler, which may interrupt the owner between a load and a store) and delegated work it
  // took from another executor's board and ran (a theft).
  std::atomic<std::uint64_t> fork_promotions{0};
  std::atomic<std::uint64_t> fork_thefts{0};
};

// Poll-time and wake-to-poll histograms of one executor (recorded while
// runtime_core::histograms_on(); executor_metrics.hpp).
struct executor_histograms {
  log_histogram poll_time;
  log_histogram wake_to_poll;
};

// Runnables addressed to one executor (spawn_on, I/O cancel requests): the generic MPSC stack of
// executor_mailbox.hpp (CAS push, exchange-all take reversed to FIFO; only the owner takes).
using executor_inbox = intrusive_mpsc_stack<runnable>;

class executor {
 public:
  using queue_type = local_queue<runnable, 256>;

  executor(runtime_core& core, std::uint32_t index, spindle::clock& clock,
           executor_placement placement = {});
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  std::uint32_t index() const noexcept { return index_; }
  runtime_core& core() const noexcept { return core_; }
  // Where the affinity policy put this executor (topology.hpp); immutable, readable by anyone.
  const executor_placement& placement() const noexcept { return placement_; }
  // Whether the worker thread is bound to placement().os_index (false until it starts, or if
  // the kernel refused).
  bool bound_to_cpu() const noexcept {
    return bound_to_cpu_.load(std::memory_order_acquire);  // acquire: pairs with bind_thread
  }

  // Shared handle: what other threads may use.
  queue_type& local() noexcept { return local_; }
  executor_inbox& inbox() noexcept { return inbox_; }
  offer_board& offers() noexcept { return offers_; }
  timer_service& timers() noexcept { return timers_; }
  park_driver& parker() noexcept { return *reactor_; }
  // The executor's reactor (I/O and parking). Owner-only except for unpark (reactor.hpp).
  reactor& io() noexcept { return *reactor_; }
  const executor_stats& stats() const noexcept { return stats_; }
  // Owner thread (and the layers running on it: tasks, fork-join): the counters it writes
  // (executor_metrics.hpp's record functions).
  executor_stats& owner_stats() noexcept { return stats_; }
  // Anyone reads (snapshot()); the owner records (executor_metrics.hpp).
  const executor_histograms& histograms() const noexcept { return histograms_; }
  executor_histograms& owner_histograms() noexcept { return histograms_; }
  // Load as P2C placement compares it (load.md): queued work (local queue + own injector shard +
  // inbox backlog) weighted 4 per item, plus utilisation in quarters (0..4), plus 64 while the
  // executor is in a long runnable (new work there would wait for it) or on standby (a sibling
  // on its CPU takes its work).
  std::uint32_t load() const noexcept;
  // Set by the runtime monitor while this executor has been inside one runnable for longer than
  // runtime_options::long_runnable_after (relaxed: a hint for thieves and placement).
  bool in_long_runnable() const noexcept {
    return in_long_runnable_.load(std::memory_order_relaxed);
  }
  // Whether the runnable running now ends within a service interval once work waits for this
  // executor (a fork-join delegate's loop piece, which checks has_waiting_work at its service
  // points): such an executor is not stuck for good even in a long runnable, and hand-overs to
  // it are served soon. The owner sets and clears it around such a runnable; anyone reads
  // (relaxed: a hint for where to hand work, never used to publish anything).
  bool ends_runnable_when_work_waits() const noexcept {
    return ends_runnable_when_work_waits_.load(std::memory_order_relaxed);
  }
  void set_ends_runnable_when_work_waits(bool ends) noexcept {
    ends_runnable_when_work_waits_.store(ends, std::memory_order_relaxed);  // relaxed: a hint
  }
  // The CPU the worker thread was last seen on (at its last wake-up or service; -1 before the
  // first, or where the system cannot tell). Relaxed: a hint, stale by up to a service.
  std::int32_t last_cpu() const noexcept { return last_cpu_.load(std::memory_order_relaxed); }
  // The worker thread's total time on a CPU and waiting for one, in nanoseconds (its /proc
  // schedstat; false before its loop starts or where it cannot be read). Any thread (the
  // monitor, tests); a system call.
  bool thread_cpu_times(std::uint64_t& running, std::uint64_t& waiting) const noexcept;
  // Whether this executor is on standby at coarse time `now` (parking.md, "Executors that share
  // a CPU"): it runs only work addressed to it and hands the rest to a sibling. Relaxed: a hint
  // for notifiers and placement; the owner's own state is on_standby_.
  bool on_standby_at(std::uint64_t now) const noexcept {
    return standby_until_ns_.load(std::memory_order_relaxed) > now;
  }
  // Busy time (not parked) up to `now`, including the current awake stretch (monitor).
  std::uint64_t busy_nanoseconds_until(std::uint64_t now) const noexcept;
  // Due timers or queued work that another executor could take over (monitor, rescuers).
  bool has_rescuable_work() const noexcept;

  // The executor running on this thread, or null on threads that are not workers.
  static executor* current() noexcept { return detail::current_executor; }

  // Sends a message to executor `target` (any executor of this runtime, including this one).
  // On a worker thread of this runtime the message comes from the CURRENT executor's pool and
  // returns to it after delivery; from any other thread it is heap-allocated (sender =
  // foreign_sender) and the receiver frees it after delivery. Never blocks, never fails
  // (the pool grows in chunks). Wakes `target` if it is parked. Precondition: target <
  // core.executor_count(), deliver != nullptr. After the shutdown closed the mailboxes (step 5a)
  // the message is discarded at once on the calling thread: deliver(message, nullptr).
  static void send_message(runtime_core& core, std::uint32_t target,
                           void (*deliver)(executor_message&, executor*) noexcept,
                           void* a = nullptr, void* b = nullptr, void* c = nullptr,
                           std::uint32_t kind = 0);
  // A snapshot of this executor's messaging counters (executor_mailbox.hpp).
  executor_mailbox_stats message_stats() const noexcept { return message_stats_; }
  executor_mailbox& mailbox() noexcept { return mailbox_; }

  // Owner thread: pushes from the running task (spawn/wake -> newest end, yield -> oldest end).
  void push_local(runnable* r, schedule_hint hint) noexcept;
  // Owner thread: a runnable that must run on this executor (an actor wheel's turn) gives up the
  // CPU; it runs again when the local queue is dry, at the next fairness check, or at the first
  // service after it has waited a whole service interval, whichever comes first (a peer of the
  // local queue, not ahead of it).
  void yield_pinned(runnable* r) noexcept;
  // Owner thread, from inside a runnable that runs long (fork-join heartbeats): if a service
  // interval has passed since the last service, fires due timers, polls the reactor and makes
  // what that woke available to idle executors; while in a long runnable it also delivers its
  // executor messages and calls the runtime's long-runnable hook (runtime_core.hpp: actors
  // homed here move to other executors). Must not be called from reactor callbacks or from
  // inside a message delivery.
  void service_point() noexcept;
  // Owner thread: whether the loop has something to run besides the runnable running now: a
  // message, its inbox, its local queue, a pinned yielded runnable, its injector shard, or work
  // it could rescue from an executor stuck in a long runnable. Code that can end a piece of
  // work early and re-offer the rest (fork-join loop pieces) asks this at its service points.
  bool has_waiting_work() const noexcept;

  // Pings (see above). A handler runs in signal context on the owner thread.
  using ping_handler = void (*)(void* context) noexcept;
  // Owner thread: installs the handler of this worker (null removes it).
  void set_ping_handler(ping_handler handler, void* context) noexcept {
    ping_context_ = context;
    std::atomic_signal_fence(std::memory_order_release);  // context before the handler
    ping_handler_.store(handler, std::memory_order_relaxed);  // relaxed: read on this thread
  }
  // Owner thread, also from the ping handler: ping this worker once the monotonic clock has
  // passed `deadline_ns` (monotonic_nanoseconds()); 0 withdraws the request (the rule for
  // runnables without one applies again). The monitor looks at each tick, so a ping comes up to
  // one tick (service_interval / 4) after the deadline.
  void request_ping(std::uint64_t deadline_ns) noexcept {
    // relaxed: a request the monitor samples each tick; nothing else is published with it.
    ping_deadline_ns_.store(deadline_ns, std::memory_order_relaxed);
  }
  // From the ping handler: no ping without a request until the runnable running now returns.
  void decline_pings() noexcept {
    // relaxed: samples for the monitor; progress_ is this thread's own.
    ping_declined_at_.store(progress_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // Process-wide entry of the ping signal (installed by runtime_core::start): calls the handler
  // of the executor running on this thread if the monitor pinged it, else the signal's previous
  // disposition if that was a function.
  static void on_ping_signal(int signal_number, siginfo_t* info, void* context) noexcept;
  // Installs on_ping_signal for `signal_number` once per process (later calls with the same
  // number do nothing); throws usage_error if sigaction refuses the number.
  static void install_ping_signal(int signal_number);

  // Entry point of the worker thread.
  void run_loop() noexcept;

 private:
  friend class runtime_core;
  friend class runtime_monitor;
  // timer_service's arm hook: an arm from another thread wakes this executor if parked.
  static void timer_armed(void* self) noexcept;
  // Worker thread, before its loop: binds to the placement's CPU when there is one.
  void bind_thread() noexcept;
  // Monitor: sends the ping signal if a ping is due (see "Pings"; `inside_ns`: how long the
  // monitor has seen the worker inside its current runnable); true if sent.
  bool ping_if_due(std::uint64_t now, std::uint64_t inside_ns, int signal_number) noexcept;
  // A ping not taken for this long is sent again (see "Pings"): far longer than a worker the
  // kernel descheduled waits for a CPU, so a pending ping is resent only when it was dropped.
  static constexpr std::uint64_t ping_presumed_lost_ns = 50'000'000;
  // Monitor: whether the worker has taken the last ping (its handler ran).
  bool ping_taken() const noexcept { return !ping_pending_.load(std::memory_order_relaxed); }
  runnable* next_runnable() noexcept;
  void poll_mailbox() noexcept;
  void finish_delivery(executor_message* message) noexcept;
  void reclaim(executor_message* message) noexcept;
  void discard_mailbox() noexcept;
  runnable* take_from_injector(std::size_t shard) noexcept;
  runnable* take_from_inbox() noexcept;
  void look_at_waiting_woken() noexcept;  // at a service: is a waiting woken runnable owed a turn?
  runnable* take_waiting_woken() noexcept;  // next_runnable step 1b
  runnable* take_starving_oldest() noexcept;
  runnable* search() noexcept;
  runnable* steal_round() noexcept;
  runnable* take_offer(std::uint32_t start) noexcept;
  void park() noexcept;
  // Stops searching and, as the last searcher, wakes another (runtime_core's searcher count).
  void pass_search_on() noexcept;
  void run_one(runnable* r) noexcept;
  void service() noexcept;
  // A service begins now (coarse clock): the owner's copy and the monitor's.
  void note_service() noexcept;
  void fire_timers() noexcept;
  runnable* rescue_others() noexcept;
  // CPU sharing (parking.md): publishes the current CPU; `compare` also looks for an awake
  // lower-index sibling last seen on it, and enters, extends or ends standby accordingly.
  void watch_cpu(bool compare) noexcept;
  // False where `sibling` is on standby itself (checked and entered under the core's
  // standby_mutex_, so that no two executors ever stand by for each other).
  bool enter_standby(std::uint32_t sibling, std::uint64_t now) noexcept;
  void end_standby(std::uint64_t now) noexcept;
  // On standby: our local queue and our injector shard go to the sibling's shard.
  void hand_queued_work_to_sibling() noexcept;
  // After a standby: if our thread waits for its CPU much of the time (a CPU shared with a
  // thread that is not ours), back on standby. Reads /proc/thread-self/schedstat.
  void watch_probation() noexcept;
  // Whether the kernel says this executor's thread is runnable (running or waiting for a CPU)
  // and last ran on `cpu` (its /proc stat; false when it cannot tell). Any thread; a system call.
  bool thread_runnable_on(int cpu) const noexcept;
  // Takes the monitor's standby request, if any, and stands by where the rules still allow it.
  void take_standby_request() noexcept;
  // On standby: `r` goes to the sibling's injector shard instead of our local queue.
  void hand_to_sibling(runnable* r) noexcept;
  std::uint32_t next_random() noexcept;
  void overflow(runnable** items, std::uint32_t count) noexcept;

  runtime_core& core_;
  const std::uint32_t index_;
  const executor_placement placement_;
  std::atomic<bool> bound_to_cpu_{false};
  queue_type local_;
  executor_inbox inbox_;
  offer_board offers_;
  timer_service timers_;
  std::unique_ptr<reactor> reactor_;
  executor_stats stats_;
  executor_histograms histograms_;
  executor_mailbox_stats message_stats_;
  // Senders write this line (push) and read it (the parking flag): its own cache line.
  alignas(cache_line_size) executor_mailbox mailbox_;
  // Published for the runtime monitor (single writer: this executor; sampled):
  // the loop iteration of the runnable last completed, when the current awake stretch began
  // (0 while parked), and busy time before it.
  alignas(cache_line_size) std::atomic<std::uint64_t> progress_{0};
  // The runnable being run now (null between runnables): set before each run and cleared after
  // it, so the monitor can tell which runnable a stall is in (diagnostics' warnings, G4). The
  // monitor uses it as an opaque key and never dereferences it (it may be freed by then).
  std::atomic<const runnable*> running_{nullptr};
  std::atomic<std::uint64_t> awake_since_ns_{0};
  std::atomic<std::uint64_t> busy_total_ns_{0};
  // The coarse time of the last service (a copy of last_service_ns_): the monitor ticks when
  // the next one falls due (runtime_monitor.hpp, "How often it ticks").
  std::atomic<std::uint64_t> last_service_at_ns_{0};
  // Written by the monitor (see in_long_runnable()).
  std::atomic<bool> in_long_runnable_{false};
  std::atomic<bool> ends_runnable_when_work_waits_{false};  // owner writes (see its getter)
  // Pings (see above). The deadline: owner writes, monitor reads. `ping_pending_`: the monitor
  // sets it before each signal, the signal handler on the owner thread clears it (so the
  // handler knows the signal was a ping, and the monitor when it was taken).
  std::atomic<std::uint64_t> ping_deadline_ns_{0};
  std::atomic<std::uint64_t> ping_declined_at_{~std::uint64_t(0)};  // progress_ when declined
  std::atomic<bool> ping_pending_{false};
  std::uint64_t ping_sent_ns_ = 0;  // monitor-only: when the pending ping was sent
  // Owner-only (the handler runs on the owner thread).
  std::atomic<ping_handler> ping_handler_{nullptr};
  void* ping_context_ = nullptr;
  // The worker thread while it runs its loop (guarded by ping_mutex_, which the monitor holds
  // across pthread_kill and the worker takes to clear `pingable_` before it exits).
  std::mutex ping_mutex_;
  pthread_t thread_{};
  bool pingable_ = false;
  // CPU sharing (parking.md, "Executors that share a CPU"). last_cpu_: owner writes (wake-ups,
  // services), anyone reads. shares_cpu_: the monitor writes, at its tick, while another awake
  // executor was last seen on the same CPU; the owner reads it at services to decide whether to
  // compare. standby_until_ns_: owner writes (coarse clock; 0 when not on standby), notifiers
  // and placement read; a sibling deciding to stand by reads it under runtime_core::
  // standby_mutex_, under which every standby is entered. All relaxed: hints, never used to
  // publish anything (the mutex orders the standby decisions).
  std::atomic<std::int32_t> last_cpu_{-1};
  std::atomic<bool> shares_cpu_{false};
  std::atomic<std::uint64_t> standby_until_ns_{0};
  // Whether this executor's reactor had operations in flight at its last service or wake-up
  // (owner writes, siblings read; relaxed: a hint). Standby is for executors serving I/O.
  std::atomic<bool> serves_io_{false};
  // The worker thread's kernel id, for its /proc stat (thread_runnable_on); 0 until its loop
  // starts. Relaxed: a sibling that reads 0 simply does not stand by.
  std::atomic<int> thread_id_{0};
  // A standby the monitor asks for: sibling + 1, 0 for none (parking.md, "A CPU shared with a
  // thread that is not ours"). The monitor writes; the owner takes it at its next service or
  // wake-up and checks the rules again (take_standby_request). Relaxed: a hint; a request lost
  // to a race is asked again a contention window later.
  std::atomic<std::uint32_t> standby_request_{0};

  // Owner-only state.
  executor_message_pool message_pool_;
  runnable* inbox_backlog_ = nullptr;  // taken from the inbox, not yet run (FIFO via next)
  intrusive_fifo<runnable, &runnable::next> pinned_yielded_;  // yield_pinned, FIFO
  bool pinned_turn_owed_ = false;  // a pinned yielded runnable waited a whole service interval
  bool pinned_yielded_since_service_ = false;  // yield_pinned was called since the last service
  bool injector_turn_owed_ = false;  // a service interval passed since the injector's last owed look
  std::uint64_t injector_turn_at_ns_ = 0;  // coarse clock when it was last owed one
  std::uint64_t last_service_ns_ = 0;  // coarse clock at the last service (note_service)
  std::uint64_t tick_ = 0;
  std::uint32_t until_injector_check_ = 1;  // iterations left before the fairness checks
  std::uint16_t oldest_position_seen_ = 0;  // local queue position of the oldest item last seen
  std::uint64_t oldest_since_tick_ = 0;     // tick at which that item was first seen oldest
  // A woken runnable queued here and not run yet (the first of them; compared, never
  // dereferenced: it may have been stolen and freed), its queue position and since when. A
  // service that finds it waiting for a service interval owes it a turn (next_runnable step 1b,
  // take_waiting_woken), until it runs or leaves the queue. See look_at_waiting_woken.
  runnable* waiting_woken_ = nullptr;
  std::uint16_t waiting_woken_position_ = 0;
  std::uint64_t waiting_woken_since_ns_ = 0;
  bool woken_turn_owed_ = false;
  std::uint32_t budget_used_ = 0;
  std::uint32_t random_state_;
  bool is_searching_ = false;
  std::uint64_t awake_since_owner_ns_ = 0;  // owner's copy of awake_since_ns_
  bool on_standby_ = false;               // the owner's view of standby_until_ns_
  std::uint32_t standby_sibling_ = 0;     // who takes our work while on standby
  std::uint64_t standby_length_ns_ = 0;   // of the last standby (grows 4x per repeat)
  std::uint64_t standby_ended_ns_ = 0;    // coarse time the last standby ended
  std::uint64_t next_sibling_look_ns_ = 0;  // after a sibling on our CPU was not runnable
  bool on_probation_ = false;               // a standby ended; watch_probation decides
  std::uint64_t probation_started_ns_ = 0;  // 0: not started yet (the next look starts it)
  std::uint64_t probation_running_ns_ = 0;  // the thread's CPU times when it started
  std::uint64_t probation_waiting_ns_ = 0;
};

}  // namespace spindle::core
