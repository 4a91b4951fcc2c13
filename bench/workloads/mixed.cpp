// spindle-bench mixed: does one part of the runtime starve another? (issue #13)
//
//   spindle-bench mixed <seconds> <workers>        e.g. spindle-bench mixed 1 2
//
// Each scenario runs on a fresh runtime: the probes are started, then the scenario's load, then
// the probes measure for <seconds> (the "probe phase"; 1 is the reference). After it the load
// keeps running until every event the probes started has happened, or until the cap (2 s after
// the probe phase) whichever comes first; then the load is stopped and the runtime destroyed.
// Everything terminates in bounded time, whatever the runtime starves: no wait is unbounded
// (plain threads poll with timeouts, loads stop on a flag they read between pieces of work).
//
// Output: ../shared/BENCH.md's protocol, one line per figure:
//
//   spindle mixed-<scenario>-<probe>-<stat> <seconds> <workers> <value> samples=<n> capped=<c>
//   e.g. `spindle mixed-forkjoin-timer-p99 1 2 0.000812 samples=950 capped=0`
//
//   <stat>     p50, p99 or max over every event of the probe phase (nearest rank), including
//              a ticker's sleep begun before the load started and not over by then;
//   <seconds>  the probe phase asked for (the protocol's <param>);
//   <workers>  the runtime's worker count: the one asked for, or 1 for the 1-worker scenarios
//              (flood runs at both when more than one is asked for);
//   <value>    the figure, in seconds;
//   samples    events measured; capped: how many of them had still not happened when the wait
//              was given up (the load stopped at the cap). A capped event counts as the time it
//              had waited by then, a lower bound: a figure over capped samples is "at least".
// Lines starting with '#' are comments (what the load did, missing probes). There is no warm-up
// run (the protocol's tenth of the work): the probes measure latency, and a scenario's first
// events are part of what a user meets.
// Coarse fork-join prints ratios instead (the <value> column holds the ratio):
//   spindle mixed-coarse-<items>x<ms>ms-<fresh|after-fine>-ratio <seconds> <workers> <ratio>
//           parallel=<s> serial=<s>
// where ratio = parallel time / serial time (target <= 0.6 on 2 workers).
//
// Probes (each records every event, then reports p50/p99/max):
//   timer  tasks loop `co_await sleep_until(deadline)`, the deadline 1 ms ahead (sleep_for(1ms)
//          with the deadline kept): lateness = wake-up time - deadline. One ticker task, or 100
//          in the flood scenarios (over all of them).
//   ping   a plain thread sends a message to a light actor every 1 ms; its handler stores the
//          clock in the message's slot (the reply): send -> reply. How soon the plain thread
//          reads the reply is not counted (it is not the runtime's).
//   io     a plain thread writes one byte into a non-blocking pipe every 1 ms; a task reads the
//          pipe with io::submit_and_wait (read opcode): write -> read completion. On the
//          scenario's I/O backend (io_uring unless the name says -epoll; SPINDLE_IO_BACKEND
//          overrides the default one).
//   spawn  a plain thread rt.spawn()s a function task every 1 ms: spawn -> first run.
//   ask    (busy-actor only) every 5 ms a plain thread spawns a task that `ask`s an idle actor
//          for a number: spawn -> reply received in the task (what `rt.block_on(ref.ask(...))`
//          waits, minus the plain thread's wake-up).
// The plain-thread actions are staggered a third of a millisecond apart.
//
// Scenarios (<workers> workers unless noted):
//   alone, alone-epoll     the probes alone: the floor.
//   forkjoin, forkjoin-epoll  a task runs one parallel_for over 64M elements of ~1 us spin
//                          each (it skips the rest once told to stop): a fine-grained
//                          fork-join computation for the whole run.
//   flood                  a plain thread rt.spawn()s 1M empty tasks (the `submit` path), waits
//                          until they ran, and again, while 100 ticker tasks sleep 1 ms in a
//                          loop; at <workers> and at 1 worker.
//   hungry-actors          100 actors, each handling a message by spinning 10 us and then
//                          sending itself another (no manual charge).
//   busy-actor (1 worker)  one actor that sends itself a message after 1 us of spin; the ask
//                          probe beside it.
//   together               forkjoin + flood + hungry-actors at once.
//   coarse                 parallel_for over 2 items of 50 ms and over 8 items of 20 ms (spin),
//                          run_on a fresh runtime, and again right after a fine-grained
//                          parallel_reduce ran on the same runtime; time / serial time.
// All spin is on the steady clock, so an item takes its nominal time even when the shared
// machine preempts it: a ratio shows whether items overlapped, not how fast the core is.
//
// Duration: about 10 s when nothing starves, up to about 30 s (every scenario drains to its
// cap), so `spindle-bench all` does not run it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"

namespace spindle_bench {

int run_mixed(long seconds, int workers, const std::vector<std::string>& only);

namespace {

using namespace std::chrono_literals;
using bench_clock = std::chrono::steady_clock;

constexpr auto drain_cap = 2s;         // longest wait for outstanding events after the probes
constexpr auto start_cap = 1s;         // longest wait for the probe tasks to start
constexpr auto probe_period = 1ms;     // timer, ping, io, spawn
constexpr auto ask_period = 5ms;       // ask (busy-actor)
constexpr int flood_tickers = 100;
constexpr long flood_batch = 1'000'000;
constexpr int hungry_actor_count = 100;
constexpr std::size_t forkjoin_elements = 64u << 20;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             bench_clock::now().time_since_epoch())
      .count();
}

// Busy work for `duration` of the steady clock (so it ends on time even when preempted).
void spin_for(std::chrono::nanoseconds duration) noexcept {
  const auto end = bench_clock::now() + duration;
  while (bench_clock::now() < end) {
  }
}

// One event a probe waits for: when it started (or was due) and when it happened.
// Every field is relaxed: during the run only the drain's poll reads them (a count, a hint);
// the figures are read after the runtime was destroyed and the plain threads joined, which
// orders every write before them.
struct sample {
  std::atomic<std::int64_t> start_ns{0};
  std::atomic<std::int64_t> end_ns{0};  // 0: has not happened
};

// Samples of one probe, claimed in order from a fixed array (never reallocated: tasks and
// actors hold pointers into it). A claim beyond the capacity is refused and counted.
class sample_log {
 public:
  explicit sample_log(std::size_t capacity) : samples_(capacity) {}

  sample* claim(std::int64_t start) noexcept {
    const std::size_t index = claimed_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a
    if (index >= samples_.size()) {  // slot index only; nothing else is published through it
      overflowed_.fetch_add(1, std::memory_order_relaxed);  // relaxed: read at the end
      return nullptr;
    }
    samples_[index].start_ns.store(start, std::memory_order_relaxed);  // relaxed: see sample
    return &samples_[index];
  }
  // The index-th sample (the pipe reader completes them in write order), or null.
  sample* at(std::size_t index) noexcept {
    return index < samples_.size() ? &samples_[index] : nullptr;
  }
  void complete(sample* s, std::int64_t end) noexcept {
    s->end_ns.store(std::max<std::int64_t>(end, 1), std::memory_order_relaxed);  // see sample
    completed_.fetch_add(1, std::memory_order_relaxed);  // relaxed: the drain's poll only
  }
  // Every claimed sample has happened (a hint while the runtime runs).
  bool all_done() const noexcept {
    // relaxed: a polled hint; the figures are read after the threads are joined.
    const std::size_t claimed =
        std::min(claimed_.load(std::memory_order_relaxed), samples_.size());
    return completed_.load(std::memory_order_relaxed) >= claimed;
  }

  struct figures {
    std::size_t samples = 0, capped = 0;
    double p50 = 0, p99 = 0, max = 0;  // seconds
  };
  // Over the samples not over before `from` (a ticker's sleep begun before the load and still
  // pending when it started counts); one not happened by `gave_up` counts as (gave_up - start)
  // and as capped. Call after the runtime is gone.
  figures summarise(std::int64_t from, std::int64_t gave_up) const {
    std::vector<std::int64_t> values;
    figures f;
    const std::size_t claimed =
        std::min(claimed_.load(std::memory_order_relaxed), samples_.size());  // see sample
    for (std::size_t i = 0; i < claimed; ++i) {
      const std::int64_t start = samples_[i].start_ns.load(std::memory_order_relaxed);
      std::int64_t end = samples_[i].end_ns.load(std::memory_order_relaxed);
      if (end != 0 && end < from) continue;  // over before the probe phase began
      if (end == 0 || end > gave_up) {
        // Not happened while we waited (or only while the load was being stopped).
        end = std::max(gave_up, start);
        ++f.capped;
      }
      values.push_back(std::max<std::int64_t>(end - start, 0));
    }
    f.samples = values.size();
    if (values.empty()) return f;
    std::sort(values.begin(), values.end());
    auto rank = [&](double q) {
      std::size_t r = std::size_t(q * double(values.size()) + 0.999999);  // nearest rank
      r = std::clamp<std::size_t>(r, 1, values.size());
      return double(values[r - 1]) / 1e9;
    };
    f.p50 = rank(0.50);
    f.p99 = rank(0.99);
    f.max = double(values.back()) / 1e9;
    return f;
  }
  std::size_t overflowed() const noexcept {
    return overflowed_.load(std::memory_order_relaxed);  // relaxed: read at the end
  }

 private:
  std::vector<sample> samples_;
  std::atomic<std::size_t> claimed_{0};
  std::atomic<std::size_t> completed_{0};
  std::atomic<std::size_t> overflowed_{0};
};

// --- the probes' runtime side ----------------------------------------------------------------

// What the probe tasks share with the scenario; outlives the runtime.
struct probe_shared {
  std::atomic<bool> probing{true};  // false: tickers and the reader leave after this event
  std::atomic<int> started{0};      // probe tasks that have begun running
};

spindle::task<void> ticker(probe_shared* shared, sample_log* log) {
  // relaxed (both): a count and a stop hint; the figures travel as described in `sample`.
  shared->started.fetch_add(1, std::memory_order_relaxed);
  while (shared->probing.load(std::memory_order_relaxed)) {
    const auto deadline = bench_clock::now() + probe_period;
    const std::int64_t deadline_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    sample* s = log->claim(deadline_ns);
    co_await spindle::sleep_until(std::chrono::time_point_cast<spindle::clock_duration>(deadline));
    if (s != nullptr) log->complete(s, now_ns());
  }
}

// Reads the pipe until end of file; byte k answers the k-th write.
spindle::task<void> pipe_reader(int fd, probe_shared* shared, sample_log* log) {
  shared->started.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count
  char buffer[256];
  std::size_t next = 0;
  for (;;) {
    spindle::core::io_operation operation;
    operation.opcode = spindle::core::io_opcode::read;
    operation.fd = fd;
    operation.buffer = buffer;
    operation.length = sizeof buffer;
    operation.offset = -1;
    const std::int32_t n = co_await spindle::io::submit_and_wait(operation);
    if (n == -EAGAIN || n == -EINTR) continue;
    if (n <= 0) co_return;  // end of file: the writer closed its end
    const std::int64_t now = now_ns();
    for (std::int32_t i = 0; i < n; ++i) {
      if (sample* s = log->at(next++)) log->complete(s, now);
    }
  }
}

// The pinged actor: the message is the sample to answer.
// (Constructors rather than aggregates: clang 14 has no parenthesised aggregate initialisation,
// which spawn_actor<B>(rt, args...) would need.)
struct ping_target {
  using message_type = sample*;
  explicit ping_target(sample_log* answers) noexcept : log(answers) {}
  sample_log* log;
  void receive(sample* s) { log->complete(s, now_ns()); }
};

// The asked actor (busy-actor): answers every question with 1 at once.
struct answerer {
  using message_type = spindle::reply_to<int>;
  void receive(spindle::reply_to<int>& reply) { reply.send(1); }
};

spindle::task<void> ask_once(spindle::actor_ref<spindle::reply_to<int>> target, sample_log* log,
                             sample* s) {
  try {
    auto question = target.ask<int>([](spindle::reply_to<int> reply) { return reply; });
    (void)co_await std::move(question);
    log->complete(s, now_ns());
  } catch (...) {
    // The actor halted (the scenario is ending): the sample stays unanswered, i.e. capped.
  }
}

// --- loads ----------------------------------------------------------------------------------

// What the loads share with the scenario; outlives the runtime. Loads stop on `stop`, which
// they read between pieces of work (relaxed: a stop hint, nothing is published through it).
struct load_shared {
  std::atomic<bool> stop{false};
  std::atomic<long> flood_tasks_run{0};   // relaxed counters (read at the end, or polled)
  std::atomic<long> flood_batches{0};
  std::atomic<long> actor_messages{0};
};

void fine_forkjoin(load_shared* load) {
  spindle::parallel_for(std::size_t(0), forkjoin_elements, [load](std::size_t) {
    if (load->stop.load(std::memory_order_relaxed)) return;  // relaxed: stop hint
    spin_for(1us);
  });
}

struct hungry_actor {
  using message_type = int;
  hungry_actor(load_shared* shared, std::chrono::nanoseconds per_message) noexcept
      : load(shared), work(per_message) {}
  load_shared* load;
  std::chrono::nanoseconds work;
  void receive(int, spindle::actor_context<int>& context) {
    spin_for(work);
    load->actor_messages.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count
    if (!load->stop.load(std::memory_order_relaxed)) context.self().send(0);  // relaxed: hint
  }
};

// Floods the runtime from this (plain) thread: batches of 1M empty tasks, each batch waited
// for (by polling, so a stop is seen within 100 us), until told to stop.
void flood(spindle::runtime& rt, load_shared* load) {
  std::atomic<long>& run = load->flood_tasks_run;
  long submitted = 0;
  while (!load->stop.load(std::memory_order_relaxed)) {  // relaxed: stop hint
    for (long i = 0; i < flood_batch && !load->stop.load(std::memory_order_relaxed); ++i) {
      rt.spawn([&run] { run.fetch_add(1, std::memory_order_relaxed); }).detach();  // a count
      ++submitted;
    }
    load->flood_batches.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count
    while (!load->stop.load(std::memory_order_relaxed) &&
           run.load(std::memory_order_relaxed) < submitted) {  // relaxed: polled count
      std::this_thread::sleep_for(100us);
    }
  }
}

// --- scenarios -------------------------------------------------------------------------------

struct scenario {
  std::string name;
  std::uint32_t workers;
  spindle::core::io_backend backend = spindle::core::io_backend::automatic;
  bool forkjoin = false;
  bool flood = false;
  bool hungry_actors = false;
  bool busy_actor = false;
};

void print_figures(const std::string& scenario_name, const char* probe, long seconds,
                   std::uint32_t workers, const sample_log& log, std::int64_t from,
                   std::int64_t gave_up) {
  const sample_log::figures f = log.summarise(from, gave_up);
  if (f.samples == 0) {
    std::printf("# mixed-%s-%s: no samples\n", scenario_name.c_str(), probe);
    return;
  }
  const std::pair<const char*, double> stats[] = {{"p50", f.p50}, {"p99", f.p99}, {"max", f.max}};
  for (const auto& [stat, value] : stats) {
    std::printf("spindle mixed-%s-%s-%s %ld %u %.6f samples=%zu capped=%zu\n",
                scenario_name.c_str(), probe, stat, seconds, workers, value, f.samples, f.capped);
  }
  if (log.overflowed() != 0) {
    std::printf("# mixed-%s-%s: %zu events not recorded (log full)\n", scenario_name.c_str(),
                probe, log.overflowed());
  }
}

// Polls `done` every millisecond until it holds or `deadline` passes; whether it held.
template <class Done>
bool wait_until(Done done, bench_clock::time_point deadline) {
  while (!done()) {
    if (bench_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

void run_scenario(const scenario& s, long seconds) {
  const int tickers = s.flood ? flood_tickers : 1;
  const std::size_t per_probe = std::size_t(seconds) * 1000 * 3 / 2 + 4096;
  // State the runtime's tasks and actors point into: declared first, destroyed last.
  probe_shared shared;
  load_shared load;
  sample_log timer_log(per_probe * std::size_t(tickers));
  sample_log ping_log(per_probe), io_log(per_probe), spawn_log(per_probe), ask_log(per_probe);
  int pipe_ends[2];
  if (::pipe2(pipe_ends, O_NONBLOCK | O_CLOEXEC) != 0) {
    std::perror("spindle-bench mixed: pipe2");
    std::exit(1);
  }
  std::int64_t phase_start = 0, gave_up = 0;
  double drain_seconds = 0;
  bool drained = false, fork_still_running = false, io_failed = false;
  {
    spindle::runtime rt({.workers = s.workers, .io_backend = s.backend});
    // The probes' runtime side first.
    std::vector<spindle::join_handle<void>> probe_tasks;
    for (int i = 0; i < tickers; ++i) probe_tasks.push_back(rt.spawn(ticker(&shared, &timer_log)));
    probe_tasks.push_back(rt.spawn(pipe_reader(pipe_ends[0], &shared, &io_log)));
    auto pinged = spindle::spawn_actor<ping_target>(rt, &ping_log);
    spindle::actor_ref<spindle::reply_to<int>> asked;
    if (s.busy_actor) asked = spindle::spawn_actor<answerer>(rt);
    wait_until([&] { return shared.started.load(std::memory_order_relaxed) == tickers + 1; },
               bench_clock::now() + start_cap);  // relaxed: a polled count

    // The load.
    std::optional<spindle::join_handle<void>> fork_task;
    std::thread flood_thread;
    std::vector<spindle::actor_ref<int>> load_actors;
    if (s.forkjoin) fork_task = rt.spawn([&load] { fine_forkjoin(&load); });
    if (s.flood) flood_thread = std::thread([&rt, &load] { flood(rt, &load); });
    if (s.hungry_actors) {
      for (int i = 0; i < hungry_actor_count; ++i) {
        load_actors.push_back(spindle::spawn_actor<hungry_actor>(
            rt, &load, std::chrono::nanoseconds(10us)));
      }
    }
    if (s.busy_actor) {
      load_actors.push_back(
          spindle::spawn_actor<hungry_actor>(rt, &load, std::chrono::nanoseconds(1us)));
    }
    for (auto& actor : load_actors) actor.send(0);

    // The probe phase: this thread is the probes' plain thread.
    phase_start = now_ns();
    const auto start = bench_clock::now();
    const auto phase_end = start + std::chrono::seconds(seconds);
    struct action {
      bench_clock::duration offset, period;
      std::function<void()> run;
      bench_clock::time_point next;
    };
    std::vector<action> actions;
    const int write_end = pipe_ends[1];
    actions.push_back({0us, probe_period, [&] {
                         if (io_failed) return;
                         sample* slot = io_log.claim(now_ns());
                         if (slot == nullptr) return;
                         if (::write(write_end, "x", 1) != 1) io_failed = true;
                       }, {}});
    actions.push_back({333us, probe_period, [&] {
                         if (sample* slot = ping_log.claim(now_ns())) pinged.send(slot);
                       }, {}});
    actions.push_back({667us, probe_period, [&] {
                         if (sample* slot = spawn_log.claim(now_ns())) {
                           rt.spawn([slot, &spawn_log] { spawn_log.complete(slot, now_ns()); })
                               .detach();
                         }
                       }, {}});
    if (s.busy_actor) {
      actions.push_back({167us, ask_period, [&] {
                           if (sample* slot = ask_log.claim(now_ns())) {
                             rt.spawn(ask_once(asked, &ask_log, slot)).detach();
                           }
                         }, {}});
    }
    for (auto& a : actions) a.next = start + a.offset;
    for (;;) {
      auto earliest = std::min_element(actions.begin(), actions.end(),
                                       [](const action& a, const action& b) { return a.next < b.next; });
      if (earliest->next >= phase_end) break;
      std::this_thread::sleep_until(earliest->next);
      earliest->run();
      earliest->next += earliest->period;
    }
    std::this_thread::sleep_until(phase_end);

    // The drain: the load keeps running until every event happened, or the cap.
    shared.probing.store(false, std::memory_order_relaxed);  // relaxed: a stop hint
    const auto drain_start = bench_clock::now();
    drained = wait_until(
        [&] {
          return timer_log.all_done() && ping_log.all_done() && io_log.all_done() &&
                 spawn_log.all_done() && ask_log.all_done();
        },
        drain_start + drain_cap);
    gave_up = now_ns();
    drain_seconds = std::chrono::duration<double>(bench_clock::now() - drain_start).count();
    if (fork_task) fork_still_running = !fork_task->is_finished();

    // Stop everything, each wait bounded; the runtime's shutdown drops what is left.
    load.stop.store(true, std::memory_order_relaxed);  // relaxed: a stop hint
    if (flood_thread.joinable()) flood_thread.join();
    ::close(write_end);  // the reader sees end of file
    pipe_ends[1] = -1;
    const auto stop_deadline = bench_clock::now() + start_cap;
    if (fork_task) {
      wait_until([&] { return fork_task->is_finished(); }, stop_deadline);
      fork_task->detach();
    }
    wait_until(
        [&] {
          return std::all_of(probe_tasks.begin(), probe_tasks.end(),
                             [](const auto& t) { return t.is_finished(); });
        },
        stop_deadline);
    for (auto& t : probe_tasks) t.detach();
    for (auto& actor : load_actors) actor.stop();
    pinged.stop();
    if (asked) asked.stop();
  }  // the runtime is destroyed here: every worker has left, every figure is final
  ::close(pipe_ends[0]);

  std::printf("# mixed-%s (%u worker%s, %s I/O): probes %ld s, drain %.2f s%s; load:",
              s.name.c_str(), s.workers, s.workers == 1 ? "" : "s",
              s.backend == spindle::core::io_backend::epoll ? "epoll" : "default", seconds,
              drain_seconds, drained ? "" : " (capped)");
  if (s.forkjoin) {
    std::printf(" fork-join %s at the end;", fork_still_running ? "still running" : "FINISHED EARLY");
  }
  if (s.flood) {
    std::printf(" %ld flood tasks run (%ld batches);", load.flood_tasks_run.load(),
                load.flood_batches.load());
  }
  if (s.hungry_actors || s.busy_actor) std::printf(" %ld actor messages", load.actor_messages.load());
  if (!s.forkjoin && !s.flood && !s.hungry_actors && !s.busy_actor) std::printf(" none");
  std::printf("\n");
  if (io_failed) std::printf("# mixed-%s-io: a pipe write failed; the io probe stopped\n", s.name.c_str());
  print_figures(s.name, "timer", seconds, s.workers, timer_log, phase_start, gave_up);
  print_figures(s.name, "ping", seconds, s.workers, ping_log, phase_start, gave_up);
  print_figures(s.name, "io", seconds, s.workers, io_log, phase_start, gave_up);
  print_figures(s.name, "spawn", seconds, s.workers, spawn_log, phase_start, gave_up);
  if (s.busy_actor) print_figures(s.name, "ask", seconds, s.workers, ask_log, phase_start, gave_up);
  std::fflush(stdout);
}

// --- coarse fork-join ------------------------------------------------------------------------

double time_parallel_items(spindle::runtime& rt, int items, std::chrono::milliseconds each) {
  const auto start = bench_clock::now();
  spindle::run_on(rt, [items, each] {
    spindle::parallel_for(0, items, [each](int) { spin_for(each); });
  });
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

void run_coarse(long seconds, std::uint32_t workers) {
  struct shape {
    int items;
    std::chrono::milliseconds each;
  };
  for (const shape sh : {shape{2, 50ms}, shape{8, 20ms}}) {
    // The serial time, measured the same way on this thread.
    auto start = bench_clock::now();
    for (int i = 0; i < sh.items; ++i) spin_for(sh.each);
    const double serial = std::chrono::duration<double>(bench_clock::now() - start).count();
    for (const bool after_fine : {false, true}) {
      spindle::runtime rt({.workers = workers});
      rt.block_on([]() -> spindle::task<void> { co_return; }());  // the workers are up
      if (after_fine) {
        // A fine-grained computation first: a few nanoseconds per element, 8M elements.
        std::vector<std::uint32_t> values(8u << 20, 1u);
        spindle::run_on(rt, [&values] {
          spindle::parallel_for(values, [](std::uint32_t& v) { v = v * 2654435761u + 1u; });
        });
        if (values[0] == 1u) std::printf("# mixed-coarse: the fine-grained loop did not run\n");
      }
      const double parallel = time_parallel_items(rt, sh.items, sh.each);
      std::printf("spindle mixed-coarse-%dx%ldms-%s-ratio %ld %u %.3f parallel=%.4f serial=%.4f\n",
                  sh.items, long(sh.each.count()), after_fine ? "after-fine" : "fresh", seconds,
                  workers, parallel / serial, parallel, serial);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int run_mixed(long seconds, int workers, const std::vector<std::string>& only) {
  using spindle::core::io_backend;
  const auto w = std::uint32_t(workers);
  std::printf("# mixed: %ld s of probing per scenario, then at most %lld s for what is "
              "outstanding; figures in seconds\n",
              seconds, (long long)std::chrono::seconds(drain_cap).count());
  std::vector<scenario> scenarios = {
      {.name = "alone", .workers = w},
      {.name = "alone-epoll", .workers = w, .backend = io_backend::epoll},
      {.name = "forkjoin", .workers = w, .forkjoin = true},
      {.name = "forkjoin-epoll", .workers = w, .backend = io_backend::epoll, .forkjoin = true},
      {.name = "flood", .workers = w, .flood = true},
  };
  if (w != 1) scenarios.push_back({.name = "flood", .workers = 1, .flood = true});
  scenarios.push_back({.name = "hungry-actors", .workers = w, .hungry_actors = true});
  scenarios.push_back({.name = "busy-actor", .workers = 1, .busy_actor = true});
  scenarios.push_back(
      {.name = "together", .workers = w, .forkjoin = true, .flood = true, .hungry_actors = true});
  const auto chosen = [&only](const std::string& name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  for (const scenario& s : scenarios) {
    if (chosen(s.name)) run_scenario(s, seconds);
  }
  if (chosen("coarse")) run_coarse(seconds, w);
  return 0;
}

}  // namespace spindle_bench
