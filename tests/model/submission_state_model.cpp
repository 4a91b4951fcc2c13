// Relacy model of a dispatcher submission's state word (spindle/dispatch/submission_state.hpp,
// the very template, over Relacy's atomics).
//
// Scenarios
//   parallel start vs cancel vs completion - the worker moves queued -> starting, "spawns" the
//       task (writes its handle, then makes it runnable) and publishes running; a canceller
//       cancels; the task, once runnable, completes. Checks: at most one party completes it;
//       the task is cancelled at most once, and exactly once when a cancel reached it before
//       it completed (U2); a canceller that cancels the task reads the handle the worker wrote
//       (a plain variable: Relacy reports a data race if the order does not cover it); a
//       submission cancelled while queued is never spawned.
//   sequential run vs cancel - the runner moves queued -> running and completes; a canceller
//       either completes it in the queue (then it never runs) or asks for the running one.
//   waiter vs completer - a waiter that announces itself and then finds the word incomplete is
//       always notified (no lost wake-up).
//   negative control - publish_running without its release: the canceller's read of the
//       handle must be reported as a data race.
//
// Exit code 0 when every scenario gives its expected result.
#include <cstdint>

#include "spindle/dispatch/submission_state.hpp"

#include "model/relacy_bridge.hpp"

namespace {

using spindle::detail::submission_outcome;

// publish_running's CAS (acq_rel) weakened to acquire only.
struct unpublished_handle : relacy_bridge::exact_orders {
  static constexpr std::memory_order cas_success(std::memory_order mo) {
    return mo == std::memory_order_acq_rel ? std::memory_order_acquire : mo;
  }
};

template <class Weaken = relacy_bridge::exact_orders,
          rl::test_result_e Expected = rl::test_result_success>
struct parallel_race : rl::test_suite<parallel_race<Weaken, Expected>, 3, Expected> {
  using state_type = spindle::detail::submission_state<relacy_bridge::relacy_atomics<Weaken>>;
  using cancel_result = typename state_type::cancel_result;
  state_type state;
  rl::var<int> handle;             // running_task_: written by the worker, read by a canceller
  rl::atomic<int> runnable;        // the spawned task may run
  rl::atomic<int> completions;     // parties whose try_complete / queued cancel won
  rl::atomic<int> task_cancels;    // cancels of the spawned task
  bool spawned = false;
  bool worker_found_complete = false;
  cancel_result cancel_outcome = cancel_result::already_final;
  bool task_completed_first = false;

  void before() {
    handle($) = 0;
    runnable($).store(0, rl::mo_relaxed);
    completions($).store(0, rl::mo_relaxed);
    task_cancels($).store(0, rl::mo_relaxed);
  }

  void thread(unsigned index) {
    bool notify = false;
    if (index == 0) {  // the shard's worker
      if (!state.try_begin_start()) return;
      spawned = true;
      handle($) = 1;
      runnable($).store(1, rl::mo_release);
      if (state.publish_running()) {
        task_cancels($).fetch_add(1, rl::mo_relaxed);
      } else {
        worker_found_complete = state.is_complete();
      }
    } else if (index == 1) {  // a canceller
      cancel_outcome = state.try_cancel(notify);
      if (cancel_outcome == cancel_result::completed_in_queue) completions($).fetch_add(1, rl::mo_relaxed);
      if (cancel_outcome == cancel_result::cancel_running) {
        RL_ASSERT(handle($) == 1);  // U2: the handle is there, and ordered before
        task_cancels($).fetch_add(1, rl::mo_relaxed);
      }
    } else {  // the spawned task, once runnable
      if (runnable($).load(rl::mo_acquire) == 0) return;
      if (state.try_complete(submission_outcome::value, notify)) {
        completions($).fetch_add(1, rl::mo_relaxed);
        task_completed_first = true;
      }
    }
  }

  void after() {
    RL_ASSERT(completions($).load(rl::mo_relaxed) <= 1);
    RL_ASSERT(task_cancels($).load(rl::mo_relaxed) <= 1);
    if (cancel_outcome == cancel_result::completed_in_queue) RL_ASSERT(!spawned);
    const bool reached_task =
        cancel_outcome == cancel_result::cancel_running || cancel_outcome == cancel_result::left_to_starter;
    if (reached_task) {
      // Exactly one cancel of the task, unless the task completed before the worker published.
      RL_ASSERT(task_cancels($).load(rl::mo_relaxed) == 1 || worker_found_complete);
    }
  }
};

struct sequential_race : rl::test_suite<sequential_race, 2> {
  using state_type = spindle::detail::submission_state<relacy_bridge::relacy_atomics<>>;
  using cancel_result = state_type::cancel_result;
  state_type state;
  rl::atomic<int> completions;
  bool ran = false;
  cancel_result cancel_outcome = cancel_result::already_final;

  void before() { completions($).store(0, rl::mo_relaxed); }

  void thread(unsigned index) {
    bool notify = false;
    if (index == 0) {  // the runner
      if (!state.try_run()) return;
      ran = true;
      if (state.try_complete(submission_outcome::value, notify)) completions($).fetch_add(1, rl::mo_relaxed);
    } else {
      cancel_outcome = state.try_cancel(notify);
      if (cancel_outcome == cancel_result::completed_in_queue) completions($).fetch_add(1, rl::mo_relaxed);
    }
  }

  void after() {
    RL_ASSERT(completions($).load(rl::mo_relaxed) == 1);  // the runner's or the queued cancel's
    if (cancel_outcome == cancel_result::completed_in_queue) RL_ASSERT(!ran);
    RL_ASSERT(cancel_outcome != cancel_result::left_to_starter);  // sequential never starts
    RL_ASSERT(state.is_complete());
  }
};

struct waiter_race : rl::test_suite<waiter_race, 2> {
  spindle::detail::submission_state<relacy_bridge::relacy_atomics<>> state;
  bool waiter_sleeps = false;
  bool completer_notifies = false;

  void thread(unsigned index) {
    if (index == 0) {
      const std::uint32_t seen = state.announce_waiter();
      waiter_sleeps = (seen & decltype(state)::phase_mask) != decltype(state)::complete;
    } else {
      bool notify = false;
      RL_ASSERT(state.try_complete(submission_outcome::value, notify));
      completer_notifies = notify;
    }
  }

  void after() { RL_ASSERT(!waiter_sleeps || completer_notifies); }
};

}  // namespace

int main() {
  bool ok = true;
  constexpr rl::iteration_t random_iterations = 200000;
  ok &= relacy_bridge::run_model<parallel_race<>>("parallel: start vs cancel vs completion",
                                                  rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<parallel_race<>>("parallel: start vs cancel vs completion",
                                                  rl::fair_context_bound_scheduler_type, 0);
  ok &= relacy_bridge::run_model<sequential_race>("sequential: run vs cancel", rl::fair_context_bound_scheduler_type, 0);
  ok &= relacy_bridge::run_model<waiter_race>("waiter vs completer", rl::fair_context_bound_scheduler_type, 0);
  // Negative control: must report the race (run_model returns true when the result is the
  // expected failure).
  ok &= relacy_bridge::run_model<parallel_race<unpublished_handle, rl::test_result_data_race>>(
      "negative control: publish without release (expect a data race)", rl::random_scheduler_type,
      random_iterations);
  std::printf(ok ? "submission_state model: all scenarios passed\n" : "submission_state model: FAILED\n");
  return ok ? 0 : 1;
}
