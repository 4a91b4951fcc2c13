// spindle-bench: the workloads of ../shared/BENCH.md, speaking the peers' protocol:
//
//   spindle-bench <workload> <param> <threads>   one measurement line (after a warm-up run of a
//                                                tenth of the work)
//   spindle-bench all [threads]                  every supported workload with its default
//                                                parameter, then a short summary
//   spindle-bench mixed <seconds> <workers> [scenario...]
//                                                issue 13's starvation scenarios: latency
//                                                figures, one line each (bench/workloads/
//                                                mixed.cpp has the format and the names;
//                                                default all). Not part of `all`: 10-30 s.
//   spindle-bench chameneos <meetings> <threads>  Savina's chameneos and big (bench/workloads/
//   spindle-bench big <pings> <threads>           savina.hpp: the definitions, the parameters;
//                                                bench/peers/run_savina.py: beside CAF, Go,
//                                                Erlang)
//
// Each line: `spindle <workload> <param> <threads> <seconds> result=<value>` where a wrong result
// is marked (WRONG), so ../shared/peers/run can put spindle beside the peers.
#include <fcntl.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <ranges>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "spindle/core/trace.hpp"
#include "spindle/diagnostics/trace_export.hpp"
#include "spindle/net/net.hpp"
#include "spindle/net/resolve.hpp"
#include "spindle/spindle.hpp"
#include "workloads/savina.hpp"

namespace spindle_bench {
// bench/workloads/mixed.cpp; `only`: the scenarios to run by name (empty: all, and coarse).
int run_mixed(long seconds, int workers, const std::vector<std::string>& only);
}  // namespace spindle_bench

namespace {

using bench_clock = std::chrono::steady_clock;

double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

struct measurement {
  double seconds;
  long result;
  long expected;
  int threads_used = 0;  // when the workload ignores the thread count asked for (0: as asked)
};

void emit(const char* workload, long param, int threads, const measurement& m) {
  if (m.threads_used != 0) threads = m.threads_used;
  std::printf("spindle %s %ld %d %.6f result=%ld%s\n", workload, param, threads, m.seconds,
              m.result, m.result == m.expected ? "" : "(WRONG)");
  std::fflush(stdout);
}

// --- skynet: a tree of tasks, 10 children per node -----------------------------------------
// `skynet` uses fork-join tasks, spindle's counterpart of oneTBB's task_group (which the peer
// uses): each node's ten children are a parallel_reduce over the child numbers, so a child is a
// latent continuation until a heartbeat promotes it. `skynet-tasks` spawns a coroutine task per
// node and co_awaits the ten join handles (the spawn/join path of the foundation issue).
// Runtime options of every workload: the defaults, with the task and actor records (G1) off when
// SPINDLE_BENCH_RECORDS=off (docs/design/diagnostics.md measures them this way).
bool bench_records() {
  const char* value = std::getenv("SPINDLE_BENCH_RECORDS");
  return value == nullptr || std::string_view(value) != "off";
}
spindle::runtime_options bench_options(int threads) {
  spindle::runtime_options options{.workers = std::uint32_t(threads)};
  options.diagnostics.records = bench_records();
  return options;
}
spindle::embed::embedded_options bench_embedded_options() {
  spindle::embed::embedded_options options;
  options.diagnostics.records = bench_records();
  return options;
}

long skynet_forked(long number, long size) {
  if (size == 1) return number;
  const long child_size = size / 10;
  return spindle::parallel_reduce(
      std::views::iota(0L, 10L), 0L,
      [=](long i) { return skynet_forked(number + i * child_size, child_size); },
      std::plus<long>{});
}

measurement run_skynet(long leaves, int threads) {
  spindle::runtime rt(bench_options(threads));
  spindle::run_on(rt, [leaves] { return skynet_forked(0, leaves / 10); });  // warm-up
  const auto start = bench_clock::now();
  const long result = spindle::run_on(rt, [leaves] { return skynet_forked(0, leaves); });
  return {seconds_since(start), result, leaves * (leaves - 1) / 2};
}

spindle::task<long> skynet_task(long number, long size) {
  if (size == 1) co_return number;
  const long child_size = size / 10;
  spindle::join_handle<long> children[10];
  for (long i = 0; i < 10; ++i) {
    children[i] = spindle::spawn(skynet_task(number + i * child_size, child_size));
  }
  long sum = 0;
  for (auto& child : children) sum += co_await child;
  co_return sum;
}

measurement run_skynet_tasks(long leaves, int threads) {
  spindle::runtime rt(bench_options(threads));
  rt.block_on(skynet_task(0, leaves / 10));  // warm-up: a tenth of the work
  const auto start = bench_clock::now();
  const long result = rt.block_on(skynet_task(0, leaves));
  return {seconds_since(start), result, leaves * (leaves - 1) / 2};
}

// skynet-embedded: the very same skynet_task coroutine on an embedded executor, driven by a
// host loop on this thread (always one thread): what running inside somebody else's event loop
// costs against skynet-tasks on a one-worker runtime.
class loop_host final : public spindle::embed::integration {
 public:
  spindle::clock_time now() const noexcept override {
    return spindle::steady_clock_source::instance().now();
  }
  void tick_at(spindle::clock_time) noexcept override {}  // skynet arms no timers
  void tick_soon() noexcept override {
    tick_wanted_.store(true, std::memory_order_release);  // release: pairs with the exchange
  }
  // The host loop: ticks while a tick is wanted.
  void run(spindle::embed::embedded_executor& executor) {
    while (tick_wanted_.exchange(false, std::memory_order_acquire)) executor.tick();
  }

 private:
  std::atomic<bool> tick_wanted_{false};
};

long skynet_embedded_once(long leaves) {
  loop_host host;
  spindle::embed::embedded_executor executor(host, bench_embedded_options());
  auto root = executor.spawn(skynet_task(0, leaves));
  host.run(executor);
  return root.join();  // finished: the loop only stops once nothing asks for a tick
}

measurement run_skynet_embedded(long leaves, int) {
  skynet_embedded_once(leaves / 10);  // warm-up: a tenth of the work
  const auto start = bench_clock::now();
  const long result = skynet_embedded_once(leaves);
  return {seconds_since(start), result, leaves * (leaves - 1) / 2, 1};
}

// --- fib: fork_join at every call, no cutoff ------------------------------------------------
long fib(int n) {
  if (n < 2) return n;
  const auto [left, right] =
      spindle::fork_join([n] { return fib(n - 1); }, [n] { return fib(n - 2); });
  return left + right;
}

// fib-spawn: the same tree with a spawned task per call (what the foundation issue measured).
spindle::task<long> fib_spawned(int n) {
  if (n < 2) co_return n;
  auto left = spindle::spawn(fib_spawned(n - 1));
  const long right = co_await fib_spawned(n - 2);
  co_return right + co_await left;
}

long fib_reference(int n) {
  long a = 0, b = 1;
  for (int i = 0; i < n; ++i) {
    const long t = a + b;
    a = b;
    b = t;
  }
  return a;
}

measurement run_fib(long n, int threads) {
  spindle::runtime rt(bench_options(threads));
  spindle::run_on(rt, [n] { return fib(int(n) - 5); });
  const auto start = bench_clock::now();
  const long result = spindle::run_on(rt, [n] { return fib(int(n)); });
  return {seconds_since(start), result, fib_reference(int(n))};
}

measurement run_fib_spawned(long n, int threads) {
  spindle::runtime rt(bench_options(threads));
  rt.block_on(fib_spawned(int(n) - 5));
  const auto start = bench_clock::now();
  const long result = rt.block_on(fib_spawned(int(n)));
  return {seconds_since(start), result, fib_reference(int(n))};
}

// --- reduce: sum of squares of N 64-bit integers, with a serial baseline line ----------------
// The integers are i % 1000 (so the sum fits in 64 bits for any N this program can allocate).
__attribute__((noinline)) long serial_sum_of_squares(const std::vector<long>& values) {
  long sum = 0;
  for (const long v : values) sum += v * v;
  return sum;
}

measurement run_reduce(long count, int threads) {
  std::vector<long> values(static_cast<std::size_t>(count));
  long expected = 0;
  for (long i = 0; i < count; ++i) {
    values[std::size_t(i)] = i % 1000;
    expected += (i % 1000) * (i % 1000);
  }
  // The serial loop, timed the same way (one warm-up pass over the data first).
  serial_sum_of_squares(values);
  auto start = bench_clock::now();
  const long serial_result = serial_sum_of_squares(values);
  const double serial_seconds = seconds_since(start);
  std::printf("serial reduce %ld 1 %.6f result=%ld%s\n", count, serial_seconds, serial_result,
              serial_result == expected ? "" : "(WRONG)");

  spindle::runtime rt(bench_options(threads));
  auto parallel_sum = [&] {
    return spindle::parallel_reduce(
        values, 0L, [](long v) { return v * v; }, std::plus<long>{});
  };
  spindle::run_on(rt, parallel_sum);  // warm-up
  start = bench_clock::now();
  const long result = spindle::run_on(rt, parallel_sum);
  return {seconds_since(start), result, expected};
}

// SPINDLE_BENCH_STATISTICS=1: per-executor counters on stderr (warm-up run included).
void print_executor_statistics(spindle::runtime& rt) {
  auto& core = rt.core();
  for (std::uint32_t i = 0; i < core.executor_count(); ++i) {
    const auto& s = core.executor_at(i).stats();
    std::fprintf(stderr, "executor %u: runnables=%llu steals=%llu parks=%llu\n", i,
                 (unsigned long long)s.runnables_run.load(), (unsigned long long)s.steals.load(),
                 (unsigned long long)s.parks.load());
  }
}

// --- submit: a thread the runtime does not own submits N empty tasks, waits for all ----------
// `submit_one(done, n)` hands one job to the runtime that counts itself in `done`; a warm-up
// round of N/10 first, then the timed round.
template <class SubmitOne>
measurement time_foreign_submissions(long count, SubmitOne submit_one) {
  std::atomic<long> done{0};
  auto round = [&](long n) {
    done.store(0);
    const auto start = bench_clock::now();
    std::thread foreign([&] {
      for (long i = 0; i < n; ++i) submit_one(done, n);
      for (long v = done.load(); v != n; v = done.load()) done.wait(v);
    });
    foreign.join();
    return seconds_since(start);
  };
  round(count / 10);
  const double seconds = round(count);
  return {seconds, done.load(), count};
}

// The job: counts itself, and wakes the submitter when it is the last.
inline void count_job(std::atomic<long>& done, long n) {
  if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) done.notify_one();
}

measurement run_submit(long count, int threads) {
  spindle::runtime rt(bench_options(threads));
  const measurement m = time_foreign_submissions(count, [&rt](std::atomic<long>& done, long n) {
    rt.spawn([&done, n] { count_job(done, n); }).detach();
  });
  if (std::getenv("SPINDLE_BENCH_STATISTICS") != nullptr) print_executor_statistics(rt);
  return m;
}

// --- dispatch: the same, through a dispatcher (futures, cancellation, a scope to close) ------
// Each submission's future is dropped at once, as `submit` drops its join handles.
measurement run_dispatch_mode(long count, int threads, spindle::dispatch_mode mode) {
  spindle::runtime rt(bench_options(threads));
  spindle::dispatcher dispatcher(rt, {.mode = mode});
  return time_foreign_submissions(count, [&dispatcher](std::atomic<long>& done, long n) {
    (void)dispatcher.submit([&done, n] { count_job(done, n); });
  });
}
measurement run_dispatch(long count, int threads) {
  return run_dispatch_mode(count, threads, spindle::dispatch_mode::parallel);
}
measurement run_dispatch_sequential(long count, int threads) {
  return run_dispatch_mode(count, threads, spindle::dispatch_mode::sequential);
}

// --- actors: pingpong, ring, skynet-actors ---------------------------------------------------
// The actors are spawned from a task on one worker (spawn_actor_here), as an actor program's
// root would; placement and migration then decide where they run.

// Runs `setup` in a task on a worker, then blocks until it reports a result through `done`.
template <class Setup>
long run_actor_program(spindle::runtime& rt, Setup setup) {
  std::promise<long> done;
  std::future<long> result = done.get_future();
  rt.block_on([&]() -> spindle::task<void> {
    setup(done);
    co_return;
  }());
  return result.get();
}

// pingpong: two actors exchange N messages back and forth (N round trips).
struct ping_actor {
  using message_type = long;
  long trips;
  std::promise<long>* done;
  spindle::actor_ref<std::variant<spindle::actor_ref<long>, long>> partner;
  void receive(long value, spindle::actor_context<long>& context) {
    if (value == trips) {
      done->set_value(value);
      context.stop();
      partner.stop();
      return;
    }
    partner.send(value + 1);
  }
};
struct pong_actor {
  using message_type = std::variant<spindle::actor_ref<long>, long>;
  spindle::actor_ref<long> partner;
  void receive(message_type& message) {
    if (auto* ref = std::get_if<spindle::actor_ref<long>>(&message)) {
      partner = std::move(*ref);
    } else {
      partner.send(std::get<long>(message));
    }
  }
};

// One pingpong run of N round trips between a ping_actor and a pong behaviour `Pong`.
template <class Pong>
measurement run_pingpong_with(long trips, int threads) {
  spindle::runtime rt(bench_options(threads));
  auto once = [&](long n) {
    return run_actor_program(rt, [n](std::promise<long>& done) {
      auto pong = spindle::spawn_actor_here<Pong>({});
      auto ping = spindle::spawn_actor_here<ping_actor>({}, n, &done, pong);
      pong.send(ping);
      ping.send(0);
    });
  };
  once(trips / 10);
  const auto start = bench_clock::now();
  const long result = once(trips);
  return {seconds_since(start), result, trips};
}

measurement run_pingpong(long trips, int threads) {
  return run_pingpong_with<pong_actor>(trips, threads);
}

// pingpong-await: pingpong whose pong handler is a coroutine (actor_await.hpp), answering
// without suspending: what a handler that may await costs (a task per message, a wake back),
// beside what it awaits.
struct awaiting_pong_actor {
  using message_type = std::variant<spindle::actor_ref<long>, long>;
  spindle::actor_ref<long> partner;
  spindle::task<void> receive(message_type& message) {
    if (auto* ref = std::get_if<spindle::actor_ref<long>>(&message)) {
      partner = std::move(*ref);
      co_return;
    }
    partner.send(std::get<long>(message));
  }
};

measurement run_pingpong_await(long trips, int threads) {
  return run_pingpong_with<awaiting_pong_actor>(trips, threads);
}

// ring: 1,000 actors in a ring pass one token N hops.
struct ring_actor {
  using message_type = long;
  const std::vector<spindle::actor_ref<long>>* ring;
  std::size_t next;
  std::promise<long>* done;
  void receive(long hops) {
    if (hops == 0) {
      done->set_value(0);
      return;
    }
    (*ring)[next].send(hops - 1);
  }
};

measurement run_ring(long hops, int threads) {
  constexpr std::size_t ring_size = 1000;
  spindle::runtime rt(bench_options(threads));
  std::vector<spindle::actor_ref<long>> ring;
  auto once = [&](long n) {
    ring.clear();
    const long result = run_actor_program(rt, [&ring, n](std::promise<long>& done) {
      for (std::size_t i = 0; i < ring_size; ++i) {
        ring.push_back(spindle::spawn_actor_here<ring_actor>({}, &ring, (i + 1) % ring_size, &done));
      }
      ring[0].send(n);
    });
    for (auto& actor : ring) actor.stop();
    return result;
  };
  once(hops / 10);
  const auto start = bench_clock::now();
  const long result = once(hops);
  return {seconds_since(start), result, 0};
}

// skynet-actors: one actor per node of the skynet tree (10 children per node, N leaves); each
// leaf sends its number to its parent, each node the sum of its children's.
struct skynet_actor {
  using message_type = long;
  long number;
  long size;
  spindle::actor_ref<long> parent;
  std::promise<long>* done;  // the root's
  long sum = 0;
  int pending = 10;
  void report(long value, spindle::actor_context<long>& context) {
    if (parent) {
      parent.send(value);
    } else {
      done->set_value(value);
    }
    context.stop();
  }
  void on_start(spindle::actor_context<long>& context) {
    if (size == 1) {
      report(number, context);
      return;
    }
    const long child_size = size / 10;
    for (long i = 0; i < 10; ++i) {
      spindle::spawn_actor_here<skynet_actor>({}, number + i * child_size, child_size,
                                              context.self(), nullptr);
    }
  }
  void receive(long value, spindle::actor_context<long>& context) {
    sum += value;
    if (--pending == 0) report(sum, context);
  }
};

measurement run_skynet_actors(long leaves, int threads) {
  spindle::runtime rt(bench_options(threads));
  auto once = [&](long n) {
    return run_actor_program(rt, [n](std::promise<long>& done) {
      spindle::spawn_actor_here<skynet_actor>({}, 0L, n, spindle::actor_ref<long>{}, &done);
    });
  };
  once(leaves / 10);
  const auto start = bench_clock::now();
  const long result = once(leaves);
  return {seconds_since(start), result, leaves * (leaves - 1) / 2};
}

// SPINDLE_BENCH_STATISTICS=1: per-executor actor wheel counters on stderr (warm-up included).
void print_actor_statistics(spindle::runtime& rt) {
  spindle::actor_system& system = spindle::actors_of(rt);
  for (std::uint32_t i = 0; i < rt.core().executor_count(); ++i) {
    const spindle::actor_scheduler* wheel = system.find_scheduler(i);
    if (wheel == nullptr) continue;
    const auto& s = wheel->stats();
    std::fprintf(stderr,
                 "actors on executor %u: runs=%llu messages=%llu migrations in=%llu out=%llu "
                 "segments=%llu\n",
                 i, (unsigned long long)s.actor_runs.load(), (unsigned long long)s.messages_handled.load(),
                 (unsigned long long)s.migrations_in.load(), (unsigned long long)s.migrations_out.load(),
                 (unsigned long long)s.segments_turned.load());
  }
}

// chameneos, big: Savina's (bench/workloads/savina.cpp).
template <long (*Round)(spindle::runtime&, long)>
measurement run_savina(long param, int threads) {
  spindle::runtime rt(bench_options(threads));
  Round(rt, param / 10);  // warm-up
  const auto start = bench_clock::now();
  const long result = Round(rt, param);
  const measurement m{seconds_since(start), result, param};
  if (std::getenv("SPINDLE_BENCH_STATISTICS") != nullptr) {
    print_executor_statistics(rt);
    print_actor_statistics(rt);
  }
  return m;
}
measurement run_chameneos(long meetings, int threads) {
  return run_savina<&spindle_bench::chameneos_round>(meetings, threads);
}
measurement run_big(long pings, int threads) {
  return run_savina<&spindle_bench::big_round>(pings, threads);
}

// idle-actors: N actors with no state, spawned and left idle; reports the resident memory they
// add (target: at most 256 bytes per idle actor). The time is that of spawning them all from a
// task on one worker.
struct idle_actor {
  using message_type = int;
  void receive(int) {}
};

long resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  if (std::FILE* file = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(file, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(file);
  }
  return pages_resident * 4096;
}

measurement run_idle_actors(long count, int threads) {
  spindle::runtime rt(bench_options(threads));
  std::vector<spindle::actor_ref<int>> refs;
  refs.reserve(std::size_t(count));
  rt.block_on([]() -> spindle::task<void> { co_return; }());  // workers and caches warm
  const long before = resident_bytes() + long(refs.capacity() * sizeof(refs[0]));
  const auto start = bench_clock::now();
  rt.block_on([&refs, count]() -> spindle::task<void> {
    for (long i = 0; i < count; ++i) refs.push_back(spindle::spawn_actor_here<idle_actor>({}));
    co_return;
  }());
  const double seconds = seconds_since(start);
  const long added = resident_bytes() - before;
  std::printf("# idle-actors: %ld actors add %.1f MB resident, %ld bytes per actor\n", count,
              double(added) / 1e6, added / count);
  return {seconds, count, count};
}

// SPINDLE_BENCH_STATISTICS=1: the fork-join counters on stderr (warm-up run included).
void print_fork_statistics() {
  const spindle::fork_counters c = spindle::fork_statistics();
  std::fprintf(stderr,
               "fork statistics: heartbeats=%llu promoted=%llu withdrawn=%llu delegated=%llu "
               "helped=%llu\n",
               (unsigned long long)c.heartbeats, (unsigned long long)c.promoted,
               (unsigned long long)c.withdrawn, (unsigned long long)c.delegated,
               (unsigned long long)c.helped);
}

// --- snapshot: the diagnostics snapshot of a loaded runtime (SPEC G1) -------------------------
// N tasks suspended on channels and N idle actors, while every worker runs a churn of short
// tasks (spawn, yield, complete); the time is one snapshot_json() (executors, tasks, actors,
// ...) averaged over several, taken from a plain thread. Also on stderr: the structured
// runtime::snapshot() (tasks and executors only), the document's size, and the churn's rate
// with and without snapshots being taken back to back.
struct snapshot_actor {
  using message_type = int;
  void receive(int) {}
};

spindle::task<long> wait_on(spindle::channel<int>& ch) {
  co_return (co_await ch.receive()).value_or(0);
}

spindle::task<long> tiny_task(long i) {
  if ((i & 1) != 0) co_await spindle::yield_now();
  co_return i;
}

spindle::task<void> churn(std::atomic<bool>& stop, std::atomic<long>& done) {
  long i = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    auto a = spindle::spawn(tiny_task(i++));
    auto b = spindle::spawn(tiny_task(i++));
    co_await std::move(a);
    co_await std::move(b);
    done.fetch_add(2, std::memory_order_relaxed);
  }
}

measurement run_snapshot(long live, int threads) {
  spindle::runtime rt(bench_options(threads));
  constexpr long per_channel = 1000;
  std::vector<std::unique_ptr<spindle::channel<int>>> channels;
  std::vector<spindle::join_handle<long>> waiting;
  waiting.reserve(std::size_t(live));
  for (long i = 0; i < live; ++i) {
    if (i % per_channel == 0) channels.push_back(std::make_unique<spindle::channel<int>>(1));
    waiting.push_back(rt.spawn(wait_on(*channels.back())));
  }
  std::vector<spindle::actor_ref<int>> actors;
  actors.reserve(std::size_t(live));
  for (long i = 0; i < live; ++i) actors.push_back(spindle::spawn_actor<snapshot_actor>(rt));
  std::atomic<bool> stop{false};
  std::atomic<long> churned{0};
  std::vector<spindle::join_handle<void>> churners;
  for (int i = 0; i < threads; ++i) {
    churners.push_back(rt.spawn_on(std::uint32_t(i), churn(stop, churned)));
  }
  while (rt.live_tasks() < std::size_t(live)) std::this_thread::yield();
  // The churn's rate without snapshots, then while snapshots are taken back to back.
  auto churn_rate = [&](auto during) {
    const long before = churned.load();
    const auto start = bench_clock::now();
    during();
    return double(churned.load() - before) / seconds_since(start);
  };
  const double quiet_rate = churn_rate([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  std::string json = rt.snapshot_json();  // warm-up
  constexpr int rounds = 10;
  double json_seconds = 0;
  const double loaded_rate = churn_rate([&] {
    const auto start = bench_clock::now();
    for (int r = 0; r < rounds; ++r) json = rt.snapshot_json();
    json_seconds = seconds_since(start) / rounds;
  });
  const auto structured_start = bench_clock::now();
  long tasks_seen = 0;
  for (int r = 0; r < rounds; ++r) tasks_seen = long(rt.snapshot().tasks.size());
  const double structured_seconds = seconds_since(structured_start) / rounds;
  const std::size_t actors_listed = spindle::actors_of(rt).snapshot().size();
  std::fprintf(stderr,
               "snapshot: %ld live tasks, %zu actors, %d workers churning: snapshot_json %.2f ms "
               "(%.1f MB), runtime::snapshot() %.2f ms; churn %.0f tasks/s quiet, %.0f tasks/s "
               "during back-to-back snapshots\n",
               tasks_seen, actors_listed, threads, json_seconds * 1e3, double(json.size()) / 1e6,
               structured_seconds * 1e3, quiet_rate, loaded_rate);
  stop.store(true);
  for (auto& c : churners) c.join();
  for (auto& ch : channels) ch->close();
  for (auto& w : waiting) w.join();
  for (auto& a : actors) a.stop();
  const bool complete = tasks_seen >= live && actors_listed >= std::size_t(live);
  return {json_seconds, complete ? live : tasks_seen, live};
}

// --- trace-events: what one event point costs (SPEC G3) ---------------------------------------
// A task on a one-worker runtime calls core::trace_event N times in a loop, first with tracing
// off (the point's relaxed load and branch), then on (the ring write); the time is the traced
// loop. Also on stderr: ns per event both ways (docs/design/diagnostics.md, "Switching and
// cost"). Built with -DSPINDLE_TRACING=OFF both loops are empty.
[[gnu::noinline]] void trace_events(long first, long count) {
  for (long i = first; i < first + count; ++i) {
    spindle::core::trace_event(spindle::core::trace_kind::wake, std::uint64_t(i));
  }
}

spindle::task<double> trace_loop(long events) {
  // In chunks of 2^19 with a yield between them, which keeps the polls short of the stall
  // warning (G4).
  constexpr long chunk = 1L << 19;
  const auto start = bench_clock::now();
  for (long first = 0; first < events; first += chunk) {
    trace_events(first, std::min(chunk, events - first));
    co_await spindle::yield_now();
  }
  co_return seconds_since(start);
}

measurement run_trace_events(long events, int) {
  spindle::runtime rt(bench_options(1));
  rt.block_on(trace_loop(events / 10));  // warm-up
  const double off = rt.block_on(trace_loop(events));
  spindle::diagnostics::set_tracing(rt.diagnostics_registry(), true);
  rt.block_on(trace_loop(events / 10));  // warm-up: the ring's pages
  const double on = rt.block_on(trace_loop(events));
  spindle::diagnostics::set_tracing(rt.diagnostics_registry(), false);
  std::fprintf(stderr, "trace-events: %ld events, tracing off %.2f ns an event point, on %.2f ns\n",
               events, off * 1e9 / double(events), on * 1e9 / double(events));
  return {on, events, events, 1};
}

// --- burst: small writes over TCP loopback, one sendmsg per burst or one send per message ----
// A writer task sends N messages of burst_message_size bytes in bursts of burst_length, each
// burst either as burst_length write_all calls (`burst`) or as one write_all over a buffer_list
// (`burst-vectored`: one sendmsg); a reader task on the other end counts the bytes. Prints
// mb_per_s= (payload megabytes per second). docs/design/io.md, "Vectored writes".
constexpr std::size_t burst_message_size = 32;
constexpr std::size_t burst_length = 32;

spindle::task<long> burst_reader(spindle::net::tcp_stream stream) {
  std::vector<std::byte> buffer(64 * 1024);
  long total = 0;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) break;
    total += long(n);
  }
  co_return total;
}

spindle::task<void> burst_writer(spindle::net::tcp_stream stream, long messages, bool vectored) {
  std::vector<std::byte> payload(burst_message_size * burst_length, std::byte{'x'});
  std::vector<std::span<const std::byte>> pieces;
  for (std::size_t i = 0; i < burst_length; ++i) {
    pieces.emplace_back(payload.data() + i * burst_message_size, burst_message_size);
  }
  for (long sent = 0; sent < messages; sent += long(burst_length)) {
    const std::size_t count = std::size_t(std::min<long>(long(burst_length), messages - sent));
    if (vectored) {
      co_await stream.write_all(spindle::net::buffer_list(pieces.data(), count));
    } else {
      for (std::size_t i = 0; i < count; ++i) co_await stream.write_all(pieces[i]);
    }
  }
  stream.shutdown(SHUT_WR);
}

spindle::task<long> burst_round(long messages, bool vectored) {
  auto listener = spindle::net::tcp_listener::bind(spindle::net::endpoint::loopback_v4(0));
  auto accepting = spindle::spawn(listener.accept());
  spindle::net::tcp_stream client = co_await spindle::net::tcp_stream::connect(listener.local_endpoint());
  spindle::net::tcp_stream server = co_await std::move(accepting);
  client.set_no_delay(true);
  auto reading = spindle::spawn(burst_reader(std::move(server)));
  co_await burst_writer(std::move(client), messages, vectored);
  co_return co_await std::move(reading);
}

measurement run_burst_with(long messages, int threads, bool vectored) {
  spindle::runtime rt(bench_options(threads));
  rt.block_on(burst_round(messages / 10, vectored));  // warm-up
  const auto start = bench_clock::now();
  const long bytes = rt.block_on(burst_round(messages, vectored));
  const double seconds = seconds_since(start);
  std::fprintf(stderr, "burst%s: %ld messages of %zu bytes, %.1f MB/s\n", vectored ? "-vectored" : "",
               messages, burst_message_size, double(bytes) / seconds / 1e6);
  return {seconds, bytes, messages * long(burst_message_size)};
}
measurement run_burst(long messages, int threads) { return run_burst_with(messages, threads, false); }
measurement run_burst_vectored(long messages, int threads) {
  return run_burst_with(messages, threads, true);
}

// --- file-writes: small positioned writes to a file, one pwritev per burst or one pwrite each --
// One task writes N records of burst_message_size bytes, one after the other, to a new file in
// the temporary directory, in bursts of burst_length: as burst_length write_all_at calls
// (`file-writes`) or as one write_all_at over a buffer_list (`file-writes-vectored`: one pwritev,
// IORING_OP_WRITEV on io_uring). Prints mb_per_s= (payload megabytes per second). No fsync: the
// figure is the cost of the calls, not of the disk. docs/design/io.md, "Vectored file writes".
spindle::task<long> file_write_round(std::string path, long records, bool vectored) {
  auto f = co_await spindle::io::file::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::byte> payload(burst_message_size * burst_length, std::byte{'x'});
  std::vector<std::span<const std::byte>> pieces;
  for (std::size_t i = 0; i < burst_length; ++i) {
    pieces.emplace_back(payload.data() + i * burst_message_size, burst_message_size);
  }
  std::uint64_t offset = 0;
  for (long written = 0; written < records; written += long(burst_length)) {
    const std::size_t count = std::size_t(std::min<long>(long(burst_length), records - written));
    if (vectored) {
      co_await f.write_all_at(spindle::io::buffer_list(pieces.data(), count), offset);
    } else {
      for (std::size_t i = 0; i < count; ++i) {
        co_await f.write_all_at(pieces[i], offset + i * burst_message_size);
      }
    }
    offset += count * burst_message_size;
  }
  const long size = long(f.size());
  co_await f.close();
  co_return size;
}

measurement run_file_writes_with(long records, int threads, bool vectored) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("spindle-bench-file-" + std::to_string(::getpid()) + ".bin"))
                               .string();
  spindle::runtime rt(bench_options(threads));
  rt.block_on(file_write_round(path, records / 10, vectored));  // warm-up
  const auto start = bench_clock::now();
  const long bytes = rt.block_on(file_write_round(path, records, vectored));
  const double seconds = seconds_since(start);
  std::filesystem::remove(path);
  std::fprintf(stderr, "file-writes%s: %ld records of %zu bytes, %.1f MB/s\n",
               vectored ? "-vectored" : "", records, burst_message_size,
               double(bytes) / seconds / 1e6);
  return {seconds, bytes, records * long(burst_message_size)};
}
measurement run_file_writes(long records, int threads) {
  return run_file_writes_with(records, threads, false);
}
measurement run_file_writes_vectored(long records, int threads) {
  return run_file_writes_with(records, threads, true);
}

// --- resolve: net::resolve of a numeric host and of "localhost" (/etc/hosts) -----------------
// `resolve-numeric N` / `resolve-localhost N`: one task resolves N times, one lookup after the
// other (per-call latency: p50 and p99 on stderr, beside the same getaddrinfo called directly
// on a plain thread); `resolve-concurrent N`: N lookups of "localhost" from resolve_concurrency
// tasks at once (throughput: lookups/s on stderr). result= counts the lookups that found a
// loopback address with the port asked for. docs/design/io.md, "Name resolution".
constexpr int resolve_concurrency = 64;

bool resolve_found(const std::vector<spindle::net::endpoint>& found, std::uint16_t port) {
  return !found.empty() && found.front().port() == port;
}

spindle::task<long> resolve_sequence(std::string host, long count, std::vector<double>* latencies) {
  long found = 0;
  const spindle::net::resolve_options options;  // a named local, not in the co_await (g++ 12)
  for (long i = 0; i < count; ++i) {
    const auto start = bench_clock::now();
    const std::vector<spindle::net::endpoint> addresses =
        co_await spindle::net::resolve(host, std::uint16_t(i), options);
    if (latencies != nullptr) latencies->push_back(seconds_since(start));
    found += resolve_found(addresses, std::uint16_t(i)) ? 1 : 0;
  }
  co_return found;
}

spindle::task<long> resolve_fan_out(long count) {
  std::vector<spindle::join_handle<long>> lookups;
  for (int t = 0; t < resolve_concurrency; ++t) {
    const long share = count / resolve_concurrency + (t < count % resolve_concurrency ? 1 : 0);
    lookups.push_back(spindle::spawn(resolve_sequence("localhost", share, nullptr)));
  }
  long found = 0;
  for (auto& lookup : lookups) found += co_await std::move(lookup);
  co_return found;
}

double resolve_percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, std::size_t(fraction * double(values.size())))];
}

// The same lookup with getaddrinfo on this thread, per call (the cost of the system resolver
// alone).
double resolve_direct_seconds(const char* host, long count) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  const auto start = bench_clock::now();
  for (long i = 0; i < count; ++i) {
    addrinfo* list = nullptr;
    if (::getaddrinfo(host, "80", &hints, &list) == 0) ::freeaddrinfo(list);
  }
  return seconds_since(start) / double(count);
}

measurement run_resolve_sequence(const char* host, const char* name, long count, int threads) {
  spindle::runtime rt(bench_options(threads));
  rt.block_on(resolve_sequence(host, count / 10, nullptr));  // warm-up
  std::vector<double> latencies;
  latencies.reserve(std::size_t(count));
  const auto start = bench_clock::now();
  const long found = rt.block_on(resolve_sequence(host, count, &latencies));
  const double seconds = seconds_since(start);
  std::fprintf(stderr, "%s: per call p50 %.2f us, p99 %.2f us; getaddrinfo on a plain thread %.2f us\n",
               name, resolve_percentile(latencies, 0.5) * 1e6,
               resolve_percentile(latencies, 0.99) * 1e6,
               resolve_direct_seconds(host, std::max(1L, count / 10)) * 1e6);
  return {seconds, found, count};
}
measurement run_resolve_numeric(long count, int threads) {
  return run_resolve_sequence("127.0.0.1", "resolve-numeric", count, threads);
}
measurement run_resolve_localhost(long count, int threads) {
  return run_resolve_sequence("localhost", "resolve-localhost", count, threads);
}
measurement run_resolve_concurrent(long count, int threads) {
  spindle::runtime rt(bench_options(threads));
  rt.block_on(resolve_fan_out(count / 10));  // warm-up (starts the resolver's helpers)
  const auto start = bench_clock::now();
  const long found = rt.block_on(resolve_fan_out(count));
  const double seconds = seconds_since(start);
  std::fprintf(stderr, "resolve-concurrent: %ld lookups from %d tasks, %.0f lookups/s\n", count,
               resolve_concurrency, double(count) / seconds);
  return {seconds, found, count};
}

using workload_function = measurement (*)(long, int);

struct workload {
  workload_function run;
  long default_param;
};

const std::map<std::string, workload>& workloads() {
  static const std::map<std::string, workload> table = {
      {"fib", {&run_fib, 35}},
      {"pingpong", {&run_pingpong, 1000000}},
      {"pingpong-await", {&run_pingpong_await, 1000000}},
      {"ring", {&run_ring, 1000000}},
      {"skynet-actors", {&run_skynet_actors, 1000000}},
      {"chameneos", {&run_chameneos, 200000}},
      {"big", {&run_big, 1000000}},
      {"fib-spawn", {&run_fib_spawned, 30}},
      {"idle-actors", {&run_idle_actors, 1000000}},
      {"reduce", {&run_reduce, 100000000}},
      {"skynet", {&run_skynet, 1000000}},
      {"skynet-tasks", {&run_skynet_tasks, 1000000}},
      {"skynet-embedded", {&run_skynet_embedded, 1000000}},
      {"submit", {&run_submit, 1000000}},
      {"dispatch", {&run_dispatch, 1000000}},
      {"dispatch-sequential", {&run_dispatch_sequential, 1000000}},
      {"snapshot", {&run_snapshot, 100000}},
      {"trace-events", {&run_trace_events, 10000000}},
      {"burst", {&run_burst, 1000000}},
      {"burst-vectored", {&run_burst_vectored, 1000000}},
      {"file-writes", {&run_file_writes, 1000000}},
      {"file-writes-vectored", {&run_file_writes_vectored, 1000000}},
      {"resolve-numeric", {&run_resolve_numeric, 1000000}},
      {"resolve-localhost", {&run_resolve_localhost, 10000}},
      {"resolve-concurrent", {&run_resolve_concurrent, 20000}},
  };
  return table;
}

[[noreturn]] void usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s <workload> <param> <threads>\n"
               "       %s all [threads]\n"
               "       %s mixed <seconds> <workers> [scenario...]\n"
               "workloads:",
               program, program, program);
  for (const auto& [name, w] : workloads()) std::fprintf(stderr, " %s", name.c_str());
  std::fprintf(stderr, "\n");
  std::exit(2);
}

long parse_positive(const char* text, const char* what, const char* program) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value <= 0) {
    std::fprintf(stderr, "%s: %s must be a positive integer, got '%s'\n", program, what, text);
    usage(program);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage(argv[0]);
  const std::string name = argv[1];
  if (name == "mixed") {  // its own lines and figures; kept out of `all` (10-30 s)
    if (argc < 4) usage(argv[0]);
    const long seconds = parse_positive(argv[2], "seconds", argv[0]);
    const long workers = parse_positive(argv[3], "workers", argv[0]);
    if (seconds > 60 || workers > 4096) {
      std::fprintf(stderr, "%s: mixed takes at most 60 seconds and 4096 workers\n", argv[0]);
      return 2;
    }
    return spindle_bench::run_mixed(seconds, int(workers),
                                    std::vector<std::string>(argv + 4, argv + argc));
  }
  if (name == "all") {
    const int threads = argc > 2 ? int(parse_positive(argv[2], "threads", argv[0]))
                                 : int(std::max(1u, std::thread::hardware_concurrency()));
    bool all_correct = true;
    std::vector<std::string> summary;
    for (const auto& [workload_name, w] : workloads()) {
      const measurement m = w.run(w.default_param, threads);
      emit(workload_name.c_str(), w.default_param, threads, m);
      all_correct = all_correct && m.result == m.expected;
      char line[160];
      std::snprintf(line, sizeof line, "  %-8s %10ld  %2d threads  %9.4f s  %s", workload_name.c_str(),
                    w.default_param, threads, m.seconds, m.result == m.expected ? "ok" : "WRONG");
      summary.emplace_back(line);
    }
    std::printf("\nsummary (spindle %s):\n", spindle::version_string());
    for (const auto& line : summary) std::printf("%s\n", line.c_str());
    std::printf("compare with peers: python3 ../shared/peers/run bench -t %d --cand "
                "'build/release/bench/spindle-bench {w} {p} {t}'\n",
                threads);
    return all_correct ? 0 : 1;
  }
  auto it = workloads().find(name);
  if (it == workloads().end() || argc < 4) usage(argv[0]);
  const long param = parse_positive(argv[2], "param", argv[0]);
  const int threads = int(parse_positive(argv[3], "threads", argv[0]));
  if (threads > 4096) {
    std::fprintf(stderr, "%s: threads must be at most 4096\n", argv[0]);
    return 2;
  }
  const measurement m = it->second.run(param, threads);
  emit(name.c_str(), param, threads, m);
  if (std::getenv("SPINDLE_BENCH_STATISTICS") != nullptr) print_fork_statistics();
  return m.result == m.expected ? 0 : 1;
}
