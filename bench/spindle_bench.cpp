// spindle-bench: the workloads of ../shared/BENCH.md, speaking the peers' protocol:
//
//   spindle-bench <workload> <param> <threads>   one measurement line (after a warm-up run of a
//                                                tenth of the work)
//   spindle-bench all [threads]                  every supported workload with its default
//                                                parameter, then a short summary
//
// Each line: `spindle <workload> <param> <threads> <seconds> result=<value>` where a wrong result
// is marked (WRONG), so ../shared/peers/run can put spindle beside the peers.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <ranges>
#include <string>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"

namespace {

using bench_clock = std::chrono::steady_clock;

double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

struct measurement {
  double seconds;
  long result;
  long expected;
};

void emit(const char* workload, long param, int threads, const measurement& m) {
  std::printf("spindle %s %ld %d %.6f result=%ld%s\n", workload, param, threads, m.seconds,
              m.result, m.result == m.expected ? "" : "(WRONG)");
  std::fflush(stdout);
}

// --- skynet: a tree of tasks, 10 children per node -----------------------------------------
// `skynet` uses fork-join tasks, spindle's counterpart of oneTBB's task_group (which the peer
// uses): each node's ten children are a parallel_reduce over the child numbers, so a child is a
// latent continuation until a heartbeat promotes it. `skynet-tasks` spawns a coroutine task per
// node and co_awaits the ten join handles (the spawn/join path of the foundation issue).
long skynet_forked(long number, long size) {
  if (size == 1) return number;
  const long child_size = size / 10;
  return spindle::parallel_reduce(
      std::views::iota(0L, 10L), 0L,
      [=](long i) { return skynet_forked(number + i * child_size, child_size); },
      std::plus<long>{});
}

measurement run_skynet(long leaves, int threads) {
  spindle::runtime rt({.workers = std::uint32_t(threads)});
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
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  rt.block_on(skynet_task(0, leaves / 10));  // warm-up: a tenth of the work
  const auto start = bench_clock::now();
  const long result = rt.block_on(skynet_task(0, leaves));
  return {seconds_since(start), result, leaves * (leaves - 1) / 2};
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
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  spindle::run_on(rt, [n] { return fib(int(n) - 5); });
  const auto start = bench_clock::now();
  const long result = spindle::run_on(rt, [n] { return fib(int(n)); });
  return {seconds_since(start), result, fib_reference(int(n))};
}

measurement run_fib_spawned(long n, int threads) {
  spindle::runtime rt({.workers = std::uint32_t(threads)});
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

  spindle::runtime rt({.workers = std::uint32_t(threads)});
  auto parallel_sum = [&] {
    return spindle::parallel_reduce(
        values, 0L, [](long v) { return v * v; }, std::plus<long>{});
  };
  spindle::run_on(rt, parallel_sum);  // warm-up
  start = bench_clock::now();
  const long result = spindle::run_on(rt, parallel_sum);
  return {seconds_since(start), result, expected};
}

// --- submit: a thread the runtime does not own submits N empty tasks, waits for all ----------
measurement run_submit(long count, int threads) {
  spindle::runtime rt({.workers = std::uint32_t(threads)});
  std::atomic<long> done{0};
  auto round = [&](long n) {
    done.store(0);
    const auto start = bench_clock::now();
    std::thread foreign([&] {
      for (long i = 0; i < n; ++i) {
        rt.spawn([&done, n] {
          if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) done.notify_one();
        }).detach();
      }
      for (long v = done.load(); v != n; v = done.load()) done.wait(v);
    });
    foreign.join();
    return seconds_since(start);
  };
  round(count / 10);
  const double seconds = round(count);
  return {seconds, done.load(), count};
}

using workload_function = measurement (*)(long, int);

struct workload {
  workload_function run;
  long default_param;
};

const std::map<std::string, workload>& workloads() {
  static const std::map<std::string, workload> table = {
      {"fib", {&run_fib, 35}},
      {"fib-spawn", {&run_fib_spawned, 30}},
      {"reduce", {&run_reduce, 100000000}},
      {"skynet", {&run_skynet, 1000000}},
      {"skynet-tasks", {&run_skynet_tasks, 1000000}},
      {"submit", {&run_submit, 1000000}},
  };
  return table;
}

[[noreturn]] void usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s <workload> <param> <threads>\n"
               "       %s all [threads]\n"
               "workloads:",
               program, program);
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
  return m.result == m.expected ? 0 : 1;
}
