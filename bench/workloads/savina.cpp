// Savina's chameneos and big on spindle actors (the definitions: savina.hpp).
//
// Design. Each round is a task on the runtime (block_on from the bench's main thread): it spawns
// the actors on its worker (spawn_actor_here, as an actor program's root would; placement and
// migration then spread them), and awaits the result on a oneshot that the last actor to learn
// it (the mall, the sink) sends. The actors' handlers are plain (no awaiting), one message at a
// time each, so their state needs no synchronisation; what they share is read-only:
//   - big's neighbour list, a vector of the workers' references owned by the round's coroutine
//     frame. It is filled before the first message (the kick-offs) is sent, so every read of it
//     happens after the writes (a message's push and pop order them), and it is alive for every
//     read: a worker reads it only while handling a ping or a pong, and none is in flight once
//     the sink has all 1,000 reports (a worker reports after its last pong, and every ping it
//     answered was answered before its sender's report). The round destroys it after that.
// Shutdown: a chameneos creature halts after its report, the mall after the last report. big's
// workers stay to answer pings until the sink has every report; the round then stops them and
// the sink halts itself. Nothing of a round is left running when it returns (the actors still
// halting drop their references; none sends again).
#include "workloads/savina.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "spindle/spindle.hpp"

namespace spindle_bench {
namespace {

// Where the round spawns actor number `i` (the mall or sink is -1): by default on the round's
// worker, free to migrate (spawn_actor_here's placement). SPINDLE_BENCH_SAVINA_PLACEMENT=spread
// (an analysis knob, docs/design/benchmarks.md): pinned, round-robin over the executors, the
// mall or sink on executor 0 (a static, balanced placement without migration).
spindle::spawn_options placement(int i) {
  static const bool spread = [] {
    const char* value = std::getenv("SPINDLE_BENCH_SAVINA_PLACEMENT");
    return value != nullptr && std::string_view(value) == "spread";
  }();
  spindle::spawn_options options;
  if (spread) {
    const std::uint32_t executors = spindle::current_actor_system()->core().executor_count();
    options.executor = std::uint32_t(i < 0 ? 0 : i) % executors;
    options.pinned = true;
  }
  return options;
}

// --- chameneos ---------------------------------------------------------------------------------

enum class colour : std::uint8_t { red, yellow, blue, faded };

// Savina's complement rule: the same colour stays, two different ones give the third.
colour complement(colour mine, colour other) {
  if (mine == other) return mine;
  return colour(3 - int(mine) - int(other));
}

struct creature_message;
using creature_ref = spindle::actor_ref<creature_message>;

// To a creature: the mall forwarding another creature's request (a meeting), that creature's
// new colour after a meeting it joined, or the mall closed.
struct creature_message {
  enum class kind : std::uint8_t { meet, change, closed };
  kind what;
  colour other_colour;  // meet: the other's colour; change: this creature's new colour
  creature_ref other;   // meet: whom to tell the new colour
};

// To the mall: a creature's request for a meeting, or a closed creature's meeting count.
struct mall_message {
  enum class kind : std::uint8_t { request, report };
  kind what;
  colour creature_colour;  // request
  creature_ref creature;   // request: whom to pair (or to tell it is closed)
  long meetings = 0;       // report
};

struct mall_actor {
  using message_type = mall_message;
  long meetings_left;
  int creatures_open;  // creatures that have not reported yet
  spindle::oneshot_sender<long> result;
  creature_ref waiting{};  // the request kept for the next one, or none
  long meetings_held = 0;
  long meetings_reported = 0;

  void receive(mall_message& message, spindle::actor_context<mall_message>& context) {
    if (message.what == mall_message::kind::report) {
      meetings_reported += message.meetings;
      if (--creatures_open == 0) {
        result.send(meetings_reported == 2 * meetings_held ? meetings_held : -meetings_reported);
        context.stop();
      }
      return;
    }
    if (meetings_left == 0) {
      message.creature.send(creature_message{creature_message::kind::closed, colour::faded, {}});
      return;
    }
    if (!waiting) {
      waiting = std::move(message.creature);
      return;
    }
    --meetings_left;
    ++meetings_held;
    const creature_ref waiting_creature = std::exchange(waiting, creature_ref{});
    waiting_creature.send(creature_message{creature_message::kind::meet, message.creature_colour,
                                           std::move(message.creature)});
  }
};

struct creature_actor {
  using message_type = creature_message;
  spindle::actor_ref<mall_message> mall;
  colour current;
  long meetings = 0;

  void request(spindle::actor_context<creature_message>& context) {
    mall.send(mall_message{mall_message::kind::request, current, context.self()});
  }
  void on_start(spindle::actor_context<creature_message>& context) { request(context); }
  void receive(creature_message& message, spindle::actor_context<creature_message>& context) {
    switch (message.what) {
      case creature_message::kind::meet:
        current = complement(current, message.other_colour);
        ++meetings;
        message.other.send(creature_message{creature_message::kind::change, current, {}});
        request(context);
        break;
      case creature_message::kind::change:
        current = message.other_colour;
        ++meetings;
        request(context);
        break;
      case creature_message::kind::closed:
        current = colour::faded;
        mall.send(mall_message{mall_message::kind::report, current, {}, meetings});
        context.stop();
        break;
    }
  }
};

spindle::task<long> chameneos_program(long meetings) {
  auto [to_result, result] = spindle::oneshot<long>();
  const auto mall = spindle::spawn_actor_here<mall_actor>(
      placement(-1), meetings, chameneos_creatures, std::move(to_result));
  for (int i = 0; i < chameneos_creatures; ++i) {
    spindle::spawn_actor_here<creature_actor>(placement(i), mall, colour(i % 3));
  }
  co_return co_await std::move(result);
}

// --- big ---------------------------------------------------------------------------------------

struct big_message {
  enum class kind : std::uint8_t { ping, pong };
  kind what;
  std::int32_t sender;  // the worker's index; -1 for the kick-off pong
};
using big_ref = spindle::actor_ref<big_message>;

constexpr std::int32_t kick_off = -1;

struct big_worker {
  using message_type = big_message;
  std::int32_t index;
  long pings_to_send;
  const std::vector<big_ref>* neighbours;  // alive and complete: see the design above
  spindle::actor_ref<long> sink;
  std::uint32_t random = std::uint32_t(index);  // Savina's PseudoRandom, seeded with the index
  std::int32_t pinged = kick_off;               // whose pong is awaited
  long pings_sent = 0;
  long pongs = 0;
  bool wrong_pong = false;

  void receive(big_message message) {
    if (message.what == big_message::kind::ping) {
      (*neighbours)[std::size_t(message.sender)].send(big_message{big_message::kind::pong, index});
      return;
    }
    if (message.sender != pinged) wrong_pong = true;
    if (message.sender != kick_off) ++pongs;
    if (pings_sent == pings_to_send) {
      sink.send(wrong_pong ? -1 : pongs);
      return;
    }
    random = (random * 1309 + 13849) & 65535;
    pinged = std::int32_t(random % big_workers);
    ++pings_sent;
    (*neighbours)[std::size_t(pinged)].send(big_message{big_message::kind::ping, index});
  }
};

struct big_sink {
  using message_type = long;
  int reports_left;
  spindle::oneshot_sender<long> result;
  long pongs = 0;
  void receive(long reported, spindle::actor_context<long>& context) {
    pongs += reported;
    if (--reports_left == 0) {
      result.send(pongs);
      context.stop();
    }
  }
};

spindle::task<long> big_program(long pings) {
  auto [to_result, result] = spindle::oneshot<long>();
  const auto sink =
      spindle::spawn_actor_here<big_sink>(placement(-1), big_workers, std::move(to_result));
  std::vector<big_ref> workers;
  workers.reserve(big_workers);
  for (std::int32_t i = 0; i < big_workers; ++i) {
    const long share = pings / big_workers + (i < pings % big_workers ? 1 : 0);
    workers.push_back(
        spindle::spawn_actor_here<big_worker>(placement(i), i, share, &workers, sink));
  }
  for (const big_ref& worker : workers) {
    worker.send(big_message{big_message::kind::pong, kick_off});
  }
  const long pongs = co_await std::move(result);
  for (const big_ref& worker : workers) worker.stop();
  co_return pongs;
}

}  // namespace

long chameneos_round(spindle::runtime& rt, long meetings) {
  return rt.block_on(chameneos_program(meetings));
}

long big_round(spindle::runtime& rt, long pings) { return rt.block_on(big_program(pings)); }

}  // namespace spindle_bench
