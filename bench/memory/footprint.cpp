// spindle-footprint: how much memory stays resident once a burst of work is over (issue 14,
// item 10). Each scenario runs in its own process (RSS is per process):
//
//   spindle-footprint tasks [count] [workers]      count tasks spawned from this thread, all
//                                                  alive at once, joined; runtime destroyed
//   spindle-footprint messages [count] [workers]   count messages queued to one actor (held
//                                                  until the last is sent), drained; runtime
//                                                  destroyed
//   spindle-footprint actors [count] [workers]     count actors spawned (all alive at once),
//                                                  then stopped; runtime destroyed
//
// Prints, for the scenario: RSS before the runtime, at the peak of the burst, after destruction,
// and after malloc_trim(0), in MB; then the frame cache's counters after destruction. The
// defaults are the figures (10^6 tasks, 10^7 messages, 10^6 actors, 2 workers).
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "spindle/spindle.hpp"

namespace {

double status_mb(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::size_t length = std::strlen(field);
  while (std::getline(status, line)) {
    if (line.compare(0, length, field) == 0 && line.size() > length && line[length] == ':') {
      return std::strtod(line.c_str() + length + 1, nullptr) / 1024.0;  // kB -> MB
    }
  }
  return -1;
}

void run_tasks(long count, std::uint32_t workers) {
  spindle::runtime rt({.workers = workers});
  std::vector<spindle::join_handle<long>> handles;
  handles.reserve(std::size_t(count));
  for (long i = 0; i < count; ++i) handles.push_back(rt.spawn([i] { return i; }));
  long sum = 0;
  for (auto& handle : handles) sum += handle.join();
  if (sum != count * (count - 1) / 2) std::printf("WRONG sum %ld\n", sum);
  std::vector<spindle::join_handle<long>>().swap(handles);
}

void run_messages(long count, std::uint32_t workers) {
  spindle::runtime rt({.workers = workers});
  std::atomic<bool> all_sent{false};
  std::atomic<long> handled{0};
  auto sink = spindle::spawn_actor<long>(rt, [&](long& value) {
    // The first message holds the actor until every message is queued.
    if (value == 0) {
      while (!all_sent.load(std::memory_order_acquire)) all_sent.wait(false);
    }
    if (handled.fetch_add(1, std::memory_order_release) + 1 == count) handled.notify_all();
  });
  for (long i = 0; i < count; ++i) sink.send(long(i));
  all_sent.store(true, std::memory_order_release);
  all_sent.notify_all();
  for (long seen = handled.load(); seen != count; seen = handled.load()) handled.wait(seen);
}

void run_actors(long count, std::uint32_t workers) {
  spindle::runtime rt({.workers = workers});
  std::atomic<long> stopped{0};
  struct stopper {
    using message_type = int;
    std::atomic<long>* stopped;
    long count;
    void receive(int, spindle::actor_context<int>&) {}
    void on_stop(const spindle::exit_reason&) {
      if (stopped->fetch_add(1, std::memory_order_release) + 1 == count) stopped->notify_all();
    }
  };
  // All alive at once, then all stopped.
  std::vector<spindle::actor_ref<int>> refs;
  refs.reserve(std::size_t(count));
  for (long i = 0; i < count; ++i) refs.push_back(spindle::spawn_actor<stopper>(rt, &stopped, count));
  for (auto& ref : refs) ref.stop();
  std::vector<spindle::actor_ref<int>>().swap(refs);
  for (long seen = stopped.load(); seen != count; seen = stopped.load()) stopped.wait(seen);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "tasks";
  const long default_count = scenario == "messages" ? 10'000'000 : 1'000'000;
  const long count = argc > 2 ? std::atol(argv[2]) : default_count;
  const auto workers = std::uint32_t(argc > 3 ? std::atol(argv[3]) : 2);
  const double before = status_mb("VmRSS");
  if (scenario == "tasks") {
    run_tasks(count, workers);
  } else if (scenario == "messages") {
    run_messages(count, workers);
  } else if (scenario == "actors") {
    run_actors(count, workers);
  } else {
    std::fprintf(stderr, "usage: spindle-footprint tasks|messages|actors [count] [workers]\n");
    return 2;
  }
  const double peak = status_mb("VmHWM");
  const double after = status_mb("VmRSS");
  malloc_trim(0);
  const double trimmed = status_mb("VmRSS");
  std::printf("footprint %s %ld %u rss_before_mb=%.1f peak_mb=%.1f after_mb=%.1f "
              "after_trim_mb=%.1f\n",
              scenario.c_str(), count, workers, before, peak, after, trimmed);
  return 0;
}
