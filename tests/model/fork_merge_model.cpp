// Relacy model of fork-join promotion, theft and merge (include/spindle/fork/fork_state.hpp,
// src/fork/fork_state.cpp, include/spindle/fork/fork_join.hpp): an owner publishes the right
// continuations of its forks on its offer board, finishes its left branches, and then either
// withdraws each continuation (and runs it inline) or, when a thief took it, waits for the merge
// and reads the result the delegate left in the delegated work.
//
// What runs here and what is mirrored:
//   - the offer board is the real core::basic_offer_board (header-only), instantiated with a
//     Relacy atomics policy (2 slots): publish / withdraw / take are the library's code, with the
//     library's memory orders;
//   - delegated_work, withdraw, wait_for_merge, begin_delegate and finish_delegate use std::atomic
//     directly in the library (it is compiled into libspindle, which a model cannot link), so the
//     model MIRRORS them with rl::atomic, keeping the same memory orders:
//       promote (placement-new of the work): unmerged = 1 (construction; a relaxed store here),
//                owner_parker written, then board.publish (release store of the slot);
//       begin_delegate: thief.store(index, relaxed) (a hint);
//       finish_delegate: read owner_parker, then unmerged.store(0, release), then unpark (after
//                the store the delegate does not touch the work);
//       wait_for_merge: while (unmerged.load(acquire) != 0) { help: take from the own board and
//                run it as a delegate (at most one level deep here); else spin (rl::yield) };
//       after settling, the owner destroys the work and pops the frame (its storage is reused:
//                modelled as a plain write to owner_parker, and, with several rounds, as the next
//                fork publishing the same address again).
//   Parking, the thief hint's use by helping, exceptions and the heartbeat's timing are not
//   modelled (the owner's spin stands in for spin-then-park: the merge store is what the wait
//   loop depends on, the unpark only shortens a bounded park).
//
// Checked in every execution:
//   - exactly one of {owner withdraw, a take (by a thief or by the waiting owner)} obtains each
//     published item (B1), counted per item and round;
//   - whoever runs a delegated item sees the owner's payload (written into the frame before the
//     publication) and the owner_parker written by the promotion, without a data race;
//   - an owner whose withdraw failed reads, after the merge, the result written by exactly the
//     executor that took the item, without a data race (invariant M);
//   - the delegate does not touch the work after its merge store (the owner's post-merge write to
//     the work would race with it);
//   - the board is empty at the end.
// Scenarios: one item vs one thief; one item vs two thieves; two items (a second promotion) vs
// two thieves with the owner helping from its own board; two items vs one thief (a thief takes
// one, the owner withdraws the other); the same frame republished in a second round (the slot
// sees the same pointer again: ABA against a thief's relaxed peek).
// Negative controls (must FAIL with a data race, showing the model sees these bugs): merge store
// relaxed; owner's merge load relaxed; delegate reading owner_parker after its merge store;
// board publish with a relaxed slot store; board take with a relaxed CAS.
//
// Each negative control is a test suite whose expected result is rl::test_result_data_race, so
// rl::simulate returns true only when Relacy reports that race (as parking_handshake_model does
// with test_result_user_assert_failed); `--history` prints their counterexamples.
//
// Exit code 0 when every scenario gives its expected result.
// The standard headers and spindle's come first: Relacy's macros break <atomic> if it is included
// after <relacy/relacy.hpp>.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string_view>

#include "spindle/core/offer_board.hpp"
#include "spindle/core/runnable.hpp"

#include "model/relacy_bridge.hpp"

namespace {

using relacy_bridge::to_rl;

// How the atomics policy distorts the board's orders (negative controls only).
enum class board_bug {
  none,
  relaxed_publish,  // release stores become relaxed (the board's publish)
  relaxed_take,     // acquiring CAS successes lose their acquire half (the board's take)
};

// board_bug as a relacy_bridge order filter.
template <board_bug Bug>
struct weaken_board : relacy_bridge::exact_orders {
  static constexpr std::memory_order store(std::memory_order mo) {
    return Bug == board_bug::relaxed_publish && mo == std::memory_order_release
               ? std::memory_order_relaxed
               : mo;
  }
  static constexpr std::memory_order cas_success(std::memory_order mo) {
    if (Bug != board_bug::relaxed_take) return mo;
    if (mo == std::memory_order_acquire) return std::memory_order_relaxed;
    if (mo == std::memory_order_acq_rel) return std::memory_order_release;
    return mo;
  }
};

template <board_bug Bug>
using relacy_atomics = relacy_bridge::relacy_atomics<weaken_board<Bug>>;

// Distortions of the mirrored merge protocol (negative controls only).
enum class merge_bug {
  none,
  relaxed_merge_store,  // finish_delegate: unmerged.store(0, relaxed)
  relaxed_merge_load,   // wait_for_merge: unmerged.load(relaxed)
  late_parker_read,     // finish_delegate reads owner_parker after its merge store
};

constexpr int max_items = 2;   // published per round (frame depth); the board has 2 slots
constexpr int max_rounds = 2;  // fork_join calls reusing the same stack frames
constexpr int max_threads = 3; // owner + up to two thieves
constexpr int parker_token = 7;

// Parameters of one scenario (a template argument so each scenario is its own test suite).
struct plan {
  int items;           // right continuations promoted per round (nested forks, 1 or 2)
  int rounds;          // 2: the same frames (same addresses) are published again
  int thieves;         // 1 or 2
  int thief_attempts;  // take attempts per thief (over the whole run)
  int left_steps;      // scheduling points in the owner's left branch (gives thieves a chance)
  bool owner_helps;    // wait_for_merge takes from the owner's own board while waiting
  board_bug board;
  merge_bug merge;
};

// The fork_join frame: what the right branch reads (captured by reference in fork_join).
struct frame {
  rl::var<int> payload;
};

// delegated_work + right_work, mirrored (see the header comment).
struct model_work : spindle::core::runnable {
  static void never(spindle::core::runnable*) noexcept { RL_ASSERT(false); }
  static constexpr spindle::core::runnable_vtable vtable{&model_work::never, &model_work::never};
  model_work() noexcept : runnable(&vtable) {}

  rl::atomic<std::uint32_t> unmerged;  // 1 from publication until the delegate merged (M)
  rl::atomic<std::uint32_t> thief;     // begin_delegate's hint (relaxed)
  rl::var<int> owner_parker;           // written by the owner before publication
  rl::var<int> result;                 // written by whoever runs the right branch
  frame* owner_frame = nullptr;        // constant (set in before())
  int index = 0;                       // constant (set in before())
};

// Outcomes over all iterations of one run (for the report; they do not steer the model).
struct coverage {
  unsigned long long withdrawn = 0, stolen = 0, helped = 0, mixed = 0;
};
coverage seen;

constexpr int payload_of(int round, int item) { return 100 * (round + 1) + item; }
constexpr int inline_result(int payload) { return -payload; }
constexpr int delegate_result(int thread, int payload) { return 1000 * (thread + 1) + payload; }

template <const plan& P>
struct fork_test
    : rl::test_suite<fork_test<P>, 1 + P.thieves,
                     (P.board == board_bug::none && P.merge == merge_bug::none)
                         ? rl::test_result_success
                         : rl::test_result_data_race> {
  using board_type = spindle::core::basic_offer_board<relacy_atomics<P.board>, 2>;

  board_type board;
  frame frames[max_items];
  model_work works[max_items];
  rl::atomic<int> wakeups;  // the owner's parker (lives as long as the runtime)

  // Bookkeeping: Relacy runs its threads as fibers on one OS thread, so plain ints are safe.
  int obtained[max_rounds][max_items] = {};  // withdrawals + takes, per item and round
  int taker[max_rounds][max_items];
  bool withdrew[max_rounds][max_items] = {};
  int help_depth = 0;

  void before() {
    for (int i = 0; i < max_items; ++i) {
      works[i].owner_frame = &frames[i];
      works[i].index = i;
      works[i].thief($).store(~0u, rl::mo_relaxed);
      works[i].unmerged($).store(0, rl::mo_relaxed);
      for (int r = 0; r < max_rounds; ++r) taker[r][i] = -1;
    }
    wakeups($).store(0, rl::mo_relaxed);
  }

  // right_work::run: begin_delegate, the right branch, finish_delegate.
  void run_delegate(int thread, spindle::core::runnable* r) {
    RL_ASSERT(r != nullptr);
    auto* work = static_cast<model_work*>(r);
    RL_ASSERT(work == &works[0] || work == &works[1]);
    work->thief($).store(std::uint32_t(thread), rl::mo_relaxed);  // begin_delegate: a hint
    const int payload = work->owner_frame->payload($);  // race-checked: publish -> take
    const int round = payload / 100 - 1;
    RL_ASSERT(round >= 0 && round < P.rounds);
    RL_ASSERT(payload == payload_of(round, work->index));
    ++obtained[round][work->index];
    taker[round][work->index] = thread;
    work->result($) = delegate_result(thread, payload);
    // finish_delegate
    int parker = 0;
    if (P.merge != merge_bug::late_parker_read) parker = work->owner_parker($);
    work->unmerged($).store(0, P.merge == merge_bug::relaxed_merge_store ? rl::mo_relaxed
                                                                          : rl::mo_release);
    if (P.merge == merge_bug::late_parker_read) parker = work->owner_parker($);  // the bug
    RL_ASSERT(parker == parker_token);
    wakeups($).fetch_add(1, rl::mo_relaxed);  // owner->unpark(): the parker, not the work
  }

  void wait_for_merge(model_work& work) {
    const rl::memory_order mo =
        P.merge == merge_bug::relaxed_merge_load ? rl::mo_relaxed : rl::mo_acquire;
    while (work.unmerged($).load(mo) != 0) {
      if (P.owner_helps && help_depth == 0) {
        if (spindle::core::runnable* r = board.take()) {
          ++help_depth;
          run_delegate(0, r);
          --help_depth;
          continue;
        }
      }
      rl::yield(1, $);
    }
  }

  void owner() {
    std::uint32_t slots[max_items];
    for (int round = 0; round < P.rounds; ++round) {
      // The forks: frames pushed (outermost first), their captured state written.
      for (int i = 0; i < P.items; ++i) frames[i].payload($) = payload_of(round, i);
      // Heartbeat: promote from the bottom of the frame stack.
      for (int i = 0; i < P.items; ++i) {
        RL_ASSERT(board.has_room());
        model_work& work = works[i];
        work.unmerged($).store(1, rl::mo_relaxed);  // placement-new: unmerged{1}
        work.owner_parker($) = parker_token;
        slots[i] = board.publish(&work);
        RL_ASSERT(slots[i] != board_type::no_slot);
      }
      for (int s = 0; s < P.left_steps; ++s) rl::yield(1, $);  // the left branch runs
      // The left branches end, innermost first: each fork_join settles its right continuation.
      for (int i = P.items - 1; i >= 0; --i) {
        model_work& work = works[i];
        const int payload = frames[i].payload($);
        if (board.withdraw(slots[i], &work)) {
          ++obtained[round][i];
          withdrew[round][i] = true;
          // The right branch inline. (fork_join fills its own right_value; writing into the work
          // instead also checks that no thief writes there after losing the race.)
          work.result($) = inline_result(payload);
          RL_ASSERT(work.result($) == inline_result(payload));
        } else {
          wait_for_merge(work);
          const int result = work.result($);  // race-checked: the merge (M)
          RL_ASSERT(taker[round][i] >= 0);
          RL_ASSERT(result == delegate_result(taker[round][i], payload));
        }
        // ~right_work and the frame popped: its storage may be reused at once.
        work.owner_parker($) = 0;
      }
    }
  }

  void steal(int thread) {
    for (int a = 0; a < P.thief_attempts; ++a) {
      if (spindle::core::runnable* r = board.take()) run_delegate(thread, r);
    }
  }

  void thread(unsigned index) {
    if (index == 0) {
      owner();
    } else {
      steal(int(index));
    }
  }

  void after() {
    bool any_withdrawn = false, any_taken = false, owner_helped = false;
    for (int round = 0; round < P.rounds; ++round) {
      for (int i = 0; i < P.items; ++i) {
        RL_ASSERT(obtained[round][i] == 1);  // B1: exactly one withdraw or take
        RL_ASSERT(withdrew[round][i] == (taker[round][i] < 0));
        any_withdrawn |= withdrew[round][i];
        any_taken |= taker[round][i] > 0;
        owner_helped |= taker[round][i] == 0;
      }
    }
    RL_ASSERT(board.take() == nullptr);  // nothing left on the board
    RL_ASSERT(!board.maybe_occupied());
    seen.withdrawn += any_withdrawn;
    seen.stolen += any_taken;
    seen.helped += owner_helped;
    seen.mixed += any_withdrawn && (any_taken || owner_helped);
  }
};

// Scenarios.   items rounds thieves attempts left_steps helps board          merge
constexpr plan one_one{1, 1, 1, 2, 2, false, board_bug::none, merge_bug::none};
constexpr plan one_two{1, 1, 2, 2, 2, false, board_bug::none, merge_bug::none};
constexpr plan second_promotion{2, 1, 2, 2, 2, true, board_bug::none, merge_bug::none};
constexpr plan take_one_withdraw_other{2, 1, 1, 1, 2, false, board_bug::none, merge_bug::none};
constexpr plan frame_reuse{1, 2, 2, 2, 2, false, board_bug::none, merge_bug::none};
// Negative controls (expected: a data race).
constexpr plan bad_merge_store{1, 1, 1, 2, 2, false, board_bug::none, merge_bug::relaxed_merge_store};
constexpr plan bad_merge_load{1, 1, 1, 2, 2, false, board_bug::none, merge_bug::relaxed_merge_load};
constexpr plan bad_late_parker{1, 1, 1, 2, 2, false, board_bug::none, merge_bug::late_parker_read};
constexpr plan bad_publish{1, 1, 1, 2, 2, false, board_bug::relaxed_publish, merge_bug::none};
constexpr plan bad_take{1, 1, 1, 2, 2, false, board_bug::relaxed_take, merge_bug::none};

bool show_expected_failures = false;  // --history: print the negative controls' counterexamples

template <class Test>
bool run(const char* name, rl::scheduler_type_e scheduler, rl::iteration_t iterations,
         unsigned context_bound = 1) {
  rl::test_params params;
  params.search_type = scheduler;
  params.iteration_count = iterations;
  params.context_bound = context_bound;
  params.output_history = false;
  const bool negative = Test::params::expected_result != rl::test_result_success;
  // A scenario expected to pass keeps Relacy's output, so that a failure prints its history.
  relacy_bridge::quiet_if_expected_failure(params, negative && !show_expected_failures);
  seen = coverage{};
  if (scheduler == rl::fair_context_bound_scheduler_type) {
    std::printf("%s (%s, %u preemptions)\n", name, rl::format(scheduler), context_bound);
  } else {
    std::printf("%s (%s)\n", name, rl::format(scheduler));
  }
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  const bool ok = rl::simulate<Test>(params);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  if (negative) {
    std::printf("  %s at iteration %llu, %lld ms: %s\n", rl::test_result_str(params.test_result),
                static_cast<unsigned long long>(params.stop_iteration), static_cast<long long>(ms),
                ok ? "expected" : "NOT the expected data race");
  } else {
    std::printf("  %llu iterations, %lld ms; executions with a withdraw %llu, a theft %llu, "
                "owner helping %llu, withdraw + take %llu\n",
                static_cast<unsigned long long>(params.stop_iteration), static_cast<long long>(ms),
                seen.withdrawn, seen.stolen, seen.helped, seen.mixed);
    if (!ok) std::printf("  %s\n", rl::test_result_str(params.test_result));
  }
  if (!ok) std::printf("  FAILED: %s\n", name);
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  show_expected_failures = argc > 1 && std::string_view(argv[1]) == "--history";
  bool ok = true;
  constexpr rl::iteration_t random_iterations = 500000;
  const auto random = rl::random_scheduler_type;
  const auto bounded = rl::fair_context_bound_scheduler_type;
  // Each scenario: a systematic search (exhaustive for the smallest, context-bounded for the
  // others, with the largest bound that keeps the whole run within seconds) and a random run for
  // volume. (A full search of the two-item scenarios does not finish.)
  ok &= run<fork_test<one_one>>("one item, one thief", rl::fair_full_search_scheduler_type, 0);
  ok &= run<fork_test<one_one>>("one item, one thief", random, random_iterations);
  ok &= run<fork_test<one_two>>("one item, two thieves", bounded, 0, 3);
  ok &= run<fork_test<one_two>>("one item, two thieves", random, random_iterations);
  ok &= run<fork_test<second_promotion>>("second promotion: two items, two thieves, owner helps",
                                         bounded, 0, 2);
  ok &= run<fork_test<second_promotion>>("second promotion: two items, two thieves, owner helps",
                                         random, random_iterations);
  ok &= run<fork_test<take_one_withdraw_other>>("two items, one thief takes one, owner withdraws",
                                                bounded, 0, 5);
  ok &= run<fork_test<take_one_withdraw_other>>("two items, one thief takes one, owner withdraws",
                                                random, random_iterations);
  ok &= run<fork_test<frame_reuse>>("frame reused: same address republished, two thieves",
                                    bounded, 0, 3);
  ok &= run<fork_test<frame_reuse>>("frame reused: same address republished, two thieves", random,
                                    random_iterations);
  // Negative controls: each must be reported as a data race (run with --history to see where).
  ok &= run<fork_test<bad_merge_store>>("negative control: relaxed merge store", random,
                                        random_iterations);
  ok &= run<fork_test<bad_merge_load>>("negative control: relaxed merge load", random,
                                       random_iterations);
  ok &= run<fork_test<bad_late_parker>>("negative control: delegate reads the work after merging",
                                        random, random_iterations);
  ok &= run<fork_test<bad_publish>>("negative control: board publish without release", random,
                                    random_iterations);
  ok &= run<fork_test<bad_take>>("negative control: board take without acquire", random,
                                 random_iterations);
  std::printf(ok ? "fork merge model: all scenarios gave the expected result\n"
                 : "fork merge model: FAILED\n");
  return ok ? 0 : 1;
}
