// Savina's chameneos and big on the C++ Actor Framework (Debian 12's libcaf-dev, 0.17.6: a
// snapshot on the way to 0.18), event-based actors on CAF's default work-stealing scheduler with
// scheduler.max-threads = <threads>, as ../../../shared/peers/src/caf_bench.cpp runs pingpong
// and ring. The definitions, followed message for message, and the parameters:
// bench/workloads/savina.hpp.
//
//   caf_savina chameneos <meetings> <threads>    a mall and 100 creatures
//   caf_savina big <pings> <threads>             1,000 workers and a sink
//
// Output (../../../shared/BENCH.md's protocol):
//   caf-actor <workload> <param> <threads> <seconds> result=<r>[(WRONG)]
// Build: g++ -O2 -std=c++17 -pthread caf_savina.cpp -o caf_savina -lcaf_core
// (bench/peers/run_savina.py does).
#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace caf;

namespace {

constexpr int chameneos_creatures = 100;
constexpr int32_t big_workers = 1000;

using request_atom = atom_constant<atom("request")>;
using report_atom = atom_constant<atom("report")>;
using meet_atom = atom_constant<atom("meet")>;
using change_atom = atom_constant<atom("change")>;
using closed_atom = atom_constant<atom("closed")>;

// --- chameneos ----------------------------------------------------------------------------------
// Colours: 0 red, 1 yellow, 2 blue, 3 faded.
int32_t complement(int32_t mine, int32_t other) { return mine == other ? mine : 3 - mine - other; }

struct mall_state {
  int64_t meetings_left = 0;
  int creatures_open = chameneos_creatures;
  actor waiting;  // the request kept for the next one, or none
  int32_t waiting_colour = 0;
  int64_t meetings_held = 0;
  int64_t meetings_reported = 0;
};

behavior mall(stateful_actor<mall_state>* self, int64_t meetings, actor done) {
  self->state.meetings_left = meetings;
  return {
      [=](request_atom, int32_t colour, actor creature) {
        auto& s = self->state;
        if (s.meetings_left == 0) {
          self->send(creature, closed_atom::value);
        } else if (!s.waiting) {
          s.waiting = std::move(creature);
        } else {
          --s.meetings_left;
          ++s.meetings_held;
          self->send(s.waiting, meet_atom::value, colour, std::move(creature));
          s.waiting = nullptr;
        }
      },
      [=](report_atom, int64_t meetings_of_one) {
        auto& s = self->state;
        s.meetings_reported += meetings_of_one;
        if (--s.creatures_open == 0) {
          self->send(done, s.meetings_reported == 2 * s.meetings_held ? s.meetings_held
                                                                       : -s.meetings_reported);
          self->quit();
        }
      }};
}

struct creature_state {
  int32_t colour = 0;
  int64_t meetings = 0;
};

behavior creature(stateful_actor<creature_state>* self, actor the_mall, int32_t colour) {
  self->state.colour = colour;
  self->send(the_mall, request_atom::value, colour, actor_cast<actor>(self));
  return {
      [=](meet_atom, int32_t other_colour, actor other) {
        auto& s = self->state;
        s.colour = complement(s.colour, other_colour);
        ++s.meetings;
        self->send(other, change_atom::value, s.colour);
        self->send(the_mall, request_atom::value, s.colour, actor_cast<actor>(self));
      },
      [=](change_atom, int32_t new_colour) {
        auto& s = self->state;
        s.colour = new_colour;
        ++s.meetings;
        self->send(the_mall, request_atom::value, s.colour, actor_cast<actor>(self));
      },
      [=](closed_atom) {
        self->state.colour = 3;
        self->send(the_mall, report_atom::value, self->state.meetings);
        self->quit();
      }};
}

// --- big ----------------------------------------------------------------------------------------
constexpr int32_t kick_off = -1;

struct worker_state {
  uint32_t random = 0;  // Savina's PseudoRandom, seeded with the index
  int32_t pinged = kick_off;
  int64_t pings_sent = 0;
  int64_t pongs = 0;
  bool wrong_pong = false;
};

// `neighbours`: every worker, complete before the kick-offs are sent and alive until the sink
// has every report (run_once keeps it).
behavior big_worker(stateful_actor<worker_state>* self, int32_t index, int64_t pings_to_send,
                    const std::vector<actor>* neighbours, actor sink) {
  self->state.random = uint32_t(index);
  return {
      [=](ping_atom, int32_t sender) {
        self->send((*neighbours)[size_t(sender)], pong_atom::value, index);
      },
      [=](pong_atom, int32_t sender) {
        auto& s = self->state;
        if (sender != s.pinged) s.wrong_pong = true;
        if (sender != kick_off) ++s.pongs;
        if (s.pings_sent == pings_to_send) {
          self->send(sink, s.wrong_pong ? int64_t{-1} : s.pongs);
          return;
        }
        s.random = (s.random * 1309 + 13849) & 65535;
        s.pinged = int32_t(s.random % uint32_t(big_workers));
        ++s.pings_sent;
        self->send((*neighbours)[size_t(s.pinged)], ping_atom::value, index);
      }};
}

struct sink_state {
  int reports_left = big_workers;
  int64_t pongs = 0;
};

behavior big_sink(stateful_actor<sink_state>* self, actor done) {
  return {[=](int64_t reported) {
    self->state.pongs += reported;
    if (--self->state.reports_left == 0) {
      self->send(done, self->state.pongs);
      self->quit();
    }
  }};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double run_once(actor_system& sys, const std::string& workload, int64_t param, int64_t& result) {
  scoped_actor self{sys};
  std::vector<actor> workers;
  const auto start = std::chrono::steady_clock::now();
  if (workload == "chameneos") {
    actor the_mall = sys.spawn(mall, param, actor{self});
    for (int i = 0; i < chameneos_creatures; ++i) sys.spawn(creature, the_mall, int32_t(i % 3));
  } else {
    actor sink = sys.spawn(big_sink, actor{self});
    workers.reserve(size_t(big_workers));
    for (int32_t i = 0; i < big_workers; ++i) {
      const int64_t share = param / big_workers + (i < param % big_workers ? 1 : 0);
      workers.push_back(sys.spawn(big_worker, i, share, &workers, sink));
    }
    for (auto& worker : workers) self->send(worker, pong_atom::value, kick_off);
  }
  self->receive([&](int64_t value) { result = value; });
  const double seconds = seconds_since(start);
  for (auto& worker : workers) self->send_exit(worker, exit_reason::user_shutdown);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s chameneos|big <param> <threads>\n", argv[0]);
    return 2;
  }
  const std::string workload = argv[1];
  const int64_t param = std::strtoll(argv[2], nullptr, 10);
  const int threads = std::atoi(argv[3]);
  if ((workload != "chameneos" && workload != "big") || param <= 0 || threads <= 0) {
    std::fprintf(stderr, "usage: %s chameneos|big <param> <threads>\n", argv[0]);
    return 2;
  }
  actor_system_config cfg;
  cfg.set("scheduler.max-threads", static_cast<size_t>(threads));
  actor_system sys{cfg};
  if (sys.scheduler().num_workers() != size_t(threads))
    std::fprintf(stderr, "warning: CAF runs %zu workers\n", sys.scheduler().num_workers());
  int64_t result = 0;
  run_once(sys, workload, param / 10, result);  // warm-up
  const double seconds = run_once(sys, workload, param, result);
  std::printf("caf-actor %s %lld %d %.6f result=%lld%s\n", workload.c_str(), (long long)param,
              threads, seconds, (long long)result, result == param ? "" : "(WRONG)");
  return result == param ? 0 : 1;
}
