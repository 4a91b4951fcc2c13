// Two actor workloads of the Savina suite (Imam and Sarkar, "Savina - An Actor Benchmark Suite",
// AGERE! 2014), on spindle actors: `spindle-bench chameneos N T` and `spindle-bench big N T`.
// The peers (CAF, Go, Erlang) of the same definitions are in bench/peers/ (caf_savina.cpp,
// go/savina.go, erl/savina_bench.erl); bench/peers/run_savina.py builds them and runs all four
// side by side. The definitions, which every implementation follows message for message:
//
// chameneos N (Savina's "chameneos", after the Shootout's chameneos-redux)
//   A mall (the broker) and chameneos_creatures = 100 creatures, coloured red, yellow, blue in
//   turn (creature i: colour i % 3). Each creature asks the mall for a meeting, sending its
//   colour and itself. The mall keeps the first request waiting; the next one makes a meeting:
//   the mall forwards the second request to the waiting creature and counts one meeting. The
//   waiting creature takes the complement of its colour and the other's (the same colour stays,
//   two different ones give the third), counts the meeting, sends its new colour to the other
//   (which takes it and counts the meeting too), and both ask again. After N meetings the mall
//   answers every request with "closed"; a closed creature reports its meeting count to the mall
//   and halts. When all have reported the mall checks that their counts add up to 2N.
//   Messages: 4 per meeting (2 requests, the forward, the colour change), all through one mall:
//   it measures a contended hot spot as much as messaging.
//   result = the meetings the mall counted (N) when the creatures' counts add up to twice that;
//   otherwise minus their sum (a WRONG result).
//
// big N (Savina's "big": many-to-many messaging)
//   big_workers = 1,000 actors, all neighbours of all. Worker i sends N / 1000 pings (the first
//   N % 1000 workers one more), one at a time: a ping goes to a neighbour drawn at random among
//   all 1,000 (itself included) with Savina's generator (a 16-bit LCG: x = (x * 1309 + 13849) &
//   65535, seeded with the worker's index; target = x % 1000), and the next ping goes out when
//   that neighbour's pong comes back (the worker checks that the pong is from the neighbour it
//   pinged). A worker answers every ping with a pong, whenever it comes. A worker that has had
//   the pong of its last ping reports the pongs it received to a sink; the sink adds up the
//   1,000 reports. Every worker starts on a kick-off pong (from nobody: index -1, not counted).
//   Messages: 2N (N pings, N pongs) plus the 1,000 kick-offs and reports.
//   result = the sink's sum, N pongs (a worker that got a pong from a neighbour it had not
//   pinged reports -1).
//
// Timing (both, every implementation): the warm-up round is a tenth of N; the timed round starts
// before the actors are spawned and ends when the result is back, so it includes spawning the
// actors (101 or 1,001 of them: a few hundred microseconds at most). Default parameters, for a
// 2-core machine: chameneos 200,000 (Savina's default meeting count; on 1-2 workers spindle
// 0.03-0.1 s, Go and Erlang 0.1-0.5 s, CAF 0.5-1 s) and big 1,000,000 pings (spindle
// 0.1-0.3 s, Go 0.4-0.7 s, CAF and Erlang 1-2.5 s); figures in docs/design/benchmarks.md.
#pragma once

namespace spindle {
class runtime;
}

namespace spindle_bench {

inline constexpr int chameneos_creatures = 100;
inline constexpr int big_workers = 1000;

// One round each, on `rt`: spawns the actors from a task on a worker, waits for the result
// (blocking this thread, which must not be one of rt's workers), and leaves no actor behind.
long chameneos_round(spindle::runtime& rt, long meetings);
long big_round(spindle::runtime& rt, long pings);

}  // namespace spindle_bench
