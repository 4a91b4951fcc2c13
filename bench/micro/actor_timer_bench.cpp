// Micro-benchmarks of the actors' timers and typed calls (docs/design/actors.md, "Timers to
// actors", "Typed calls"):
//   BM_ActorTimer_ArmCancel      send_after(ref, 1h, msg) then cancel(), from a plain thread:
//                                the record, the registry lock twice, the service lock twice
//   BM_ActorTimer_ArmCancelHot   the same, with 10,000 other timers armed on the actor
//   BM_Actor_AskRoundTrip        co_await ref.ask<int>(...) from a task, per round trip
//   BM_Actor_CallRoundTrip       co_await ref.call(request) (no task frame of its own)
//   BM_Actor_CallTimeoutRoundTrip  co_await ref.call(request, {.timeout = 1s}) (a scope + timer)
// One worker: the actor and the calling task share the executor (no stealing noise).
#include <benchmark/benchmark.h>

#include <chrono>
#include <variant>
#include <vector>

#include "spindle/spindle.hpp"

namespace {

using namespace std::chrono_literals;

constexpr int round_trips_per_run = 10000;

struct bench_ping {};
struct bench_get {
  using reply = int;
};
struct bench_ask {
  spindle::reply_to<int> reply;
};
using bench_message = std::variant<bench_ping, spindle::call_message<bench_get>, bench_ask>;

struct bench_actor {
  using message_type = bench_message;
  int count = 0;
  void receive(message_type& m) {
    if (std::holds_alternative<bench_ping>(m)) {
      ++count;
    } else if (auto* c = std::get_if<spindle::call_message<bench_get>>(&m)) {
      c->reply(count);
    } else {
      std::get<bench_ask>(m).reply(count);
    }
  }
};

void BM_ActorTimer_ArmCancel(benchmark::State& state) {
  spindle::runtime rt({.workers = 1});
  auto ref = spindle::spawn_actor<bench_actor>(rt);
  for (auto _ : state) {
    auto timer = spindle::send_after(ref, 1h, bench_ping{});
    benchmark::DoNotOptimize(timer.cancel());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ActorTimer_ArmCancelHot(benchmark::State& state) {
  spindle::runtime rt({.workers = 1});
  auto ref = spindle::spawn_actor<bench_actor>(rt);
  std::vector<spindle::actor_timer> others;
  for (int i = 0; i < 10000; ++i) others.push_back(spindle::send_after(ref, 2h, bench_ping{}));
  for (auto _ : state) {
    auto timer = spindle::send_after(ref, 1h, bench_ping{});
    benchmark::DoNotOptimize(timer.cancel());
  }
  state.SetItemsProcessed(state.iterations());
}

spindle::task<void> asks(spindle::actor_ref<bench_message> ref, int n) {
  for (int i = 0; i < n; ++i) {
    benchmark::DoNotOptimize(
        co_await ref.ask<int>([](spindle::reply_to<int> r) { return bench_ask{std::move(r)}; }));
  }
}
spindle::task<void> calls(spindle::actor_ref<bench_message> ref, int n) {
  bench_get question;
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(co_await ref.call(question));
}
spindle::task<void> calls_with_timeout(spindle::actor_ref<bench_message> ref, int n) {
  bench_get question;
  for (int i = 0; i < n; ++i) {
    benchmark::DoNotOptimize(co_await ref.call(question, {.timeout = 1s}));
  }
}

template <class Body>
void run_round_trips(benchmark::State& state, Body body) {
  spindle::runtime rt({.workers = 1});
  auto ref = spindle::spawn_actor<bench_actor>(rt);
  for (auto _ : state) rt.spawn(body(ref, round_trips_per_run)).join();
  state.SetItemsProcessed(state.iterations() * round_trips_per_run);
}

void BM_Actor_AskRoundTrip(benchmark::State& state) { run_round_trips(state, asks); }
void BM_Actor_CallRoundTrip(benchmark::State& state) { run_round_trips(state, calls); }
void BM_Actor_CallTimeoutRoundTrip(benchmark::State& state) {
  run_round_trips(state, calls_with_timeout);
}

BENCHMARK(BM_ActorTimer_ArmCancel)->UseRealTime();
BENCHMARK(BM_ActorTimer_ArmCancelHot)->UseRealTime();
BENCHMARK(BM_Actor_AskRoundTrip)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Actor_CallRoundTrip)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Actor_CallTimeoutRoundTrip)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
