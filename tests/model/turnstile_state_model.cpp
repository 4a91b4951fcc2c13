// Relacy model of a turnstile's block (spindle/embed/turnstile_state.hpp, the very template, over
// Relacy's atomics) with the code around it that turnstile.hpp / src/embed/turnstile.cpp run:
//
//   the task     - loop: begin_poll; poll (reads what the wakers published); ready: finish, done.
//                  Not ready: take the task lock (S3: a mutex here); a cancellation already
//                  requested ends the task (cancelled); else try_block: false (a wake() came
//                  during the poll): unlock, poll again; true: publish the registration (the
//                  cancellable wait), unlock, suspend until woken; on resumption clear the
//                  registration under the lock and end as cancelled if the canceller won.
//                  The registration it writes before try_block (block_.task_ in the real code) is
//                  a plain variable that the winning waker reads.
//   wakers       - publish their data, then call wake() (one or two times); the one whose wake()
//                  returns true wakes the task ("schedules" it: a release increment the task
//                  acquires, as the executor's queues do).
//   a canceller  - (some scenarios) under the task lock: marks cancellation requested, and if
//                  the task is registered, try_cancel(); true: records "cancelled" and wakes it.
//
// Checks: exactly one party (a waker or the canceller) moves the block out of each block (the
// wins equal the blocks); no lost wake-up (the task never stays suspended once every other
// party is done, and it ends having seen every waker's data unless it was cancelled); the number
// of polls is at most wake() calls + 1; the poll's reads of the wakers' data are race-free (plain
// rl::var data: Relacy reports a data race for a read not ordered after the write).
//
// Scenarios
//   one waker, plain data    - the waker writes a plain variable (after the task's first poll,
//                              which reads it too: the handshake keeps that first read ordered
//                              before the write) and wakes twice; every later poll reads it, and
//                              only the turnstile orders that read after the write.
//   one waker + canceller    - the same, racing a canceller.
//   two wakers, flags        - each waker sets its relaxed flag and wakes (once or twice); the
//                              task polls with relaxed loads: only the turnstile's orders make
//                              the final poll see both flags (else the task blocks for good).
//   two wakers + canceller   - the same, racing a canceller.
//   negative controls (each must be reported):
//     begin_poll's exchange relaxed instead of acquire          -> data race (plain data)
//     the release CASes (wake's polling->notified) relaxed       -> data race (plain data)
//     begin_poll's exchange relaxed, flags                       -> lost wake-up (assertion)
//     wake's blocked->polling CAS release instead of acq_rel     -> data race (the waker's read
//                                                                   of the registration)
//
// Exit code 0 when every scenario gives its expected result.
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "spindle/embed/turnstile_state.hpp"

#include "model/relacy_bridge.hpp"

namespace {


// --- an atomics policy whose every order can be weakened ----------------------------------------
// (relacy_bridge's relacy_atomic weakens stores and CAS successes only; begin_poll's exchange is
// one of the orders under test here.)

using exact = relacy_bridge::exact_orders;
// begin_poll (the only exchange): acquire -> relaxed.
struct relaxed_begin_poll : exact {
  static constexpr std::memory_order exchange(std::memory_order) { return std::memory_order_relaxed; }
};
// The release CASes (wake's polling/notified -> notified, and try_block's) -> relaxed.
struct relaxed_notify : exact {
  static constexpr std::memory_order cas_success(std::memory_order mo) {
    return mo == std::memory_order_release ? std::memory_order_relaxed : mo;
  }
};
// The acq_rel CASes (wake's and try_cancel's blocked -> polling) -> release.
struct release_unblock : exact {
  static constexpr std::memory_order cas_success(std::memory_order mo) {
    return mo == std::memory_order_acq_rel ? std::memory_order_release : mo;
  }
};


// --- the scenario -----------------------------------------------------------------------------

struct plan {
  int wakers;        // 1 or 2
  int wakes[2];      // wake() calls of each waker
  bool canceller;
  bool plain_data;   // one waker: a plain variable (with the first-poll handshake); else flags
};

constexpr plan one_waker_plain{1, {2, 0}, false, true};
constexpr plan one_waker_plain_cancel{1, {2, 0}, true, true};
constexpr plan two_wakers_flags{2, {1, 2}, false, false};
constexpr plan two_wakers_flags_cancel{2, {1, 1}, true, false};
constexpr plan one_waker_plain_once{1, {1, 0}, false, true};

template <const plan& P, class Weaken = exact, rl::test_result_e Expected = rl::test_result_success>
struct turnstile_race
    : rl::test_suite<turnstile_race<P, Weaken, Expected>, 1 + P.wakers + (P.canceller ? 1 : 0),
                     Expected> {
  static constexpr int parties = P.wakers + (P.canceller ? 1 : 0);

  spindle::embed::detail::turnstile_state<relacy_bridge::relacy_atomics<Weaken>> state;

  // What the wakers publish.
  rl::var<int> data;             // plain_data: the one waker's
  rl::atomic<int> flag[2];       // flags: each waker's (relaxed)
  rl::atomic<int> first_poll_done;

  // The task's side of the real code.
  rl::mutex task_lock;           // S3's lock bit
  rl::var<int> registration;     // block_.task_ / the published wait (task lock for `registered`)
  rl::var<bool> registered;      // wait_ != null (task lock)
  rl::var<bool> cancel_requested;  // task lock
  rl::var<bool> cancel_won;      // block_.cancelled_: written by the canceller under the lock

  rl::atomic<int> wakeups;       // the task's wake-ups ("scheduled": release, the task acquires)
  rl::atomic<int> wins;          // wake()/try_cancel() calls that returned true
  rl::atomic<int> wake_calls;    // wake() calls made
  rl::atomic<int> quiet;         // parties that finished

  // The task's record (its own thread; read in after()).
  int polls = 0;
  int blocks = 0;
  bool done = false;
  bool cancelled = false;
  bool stuck = false;

  void before() {
    data($) = 0;
    flag[0]($).store(0, rl::mo_relaxed);
    flag[1]($).store(0, rl::mo_relaxed);
    first_poll_done($).store(0, rl::mo_relaxed);
    registration($) = 0;
    registered($) = false;
    cancel_requested($) = false;
    cancel_won($) = false;
    wakeups($).store(0, rl::mo_relaxed);
    wins($).store(0, rl::mo_relaxed);
    wake_calls($).store(0, rl::mo_relaxed);
    quiet($).store(0, rl::mo_relaxed);
  }

  bool poll() {
    ++polls;
    if (P.plain_data) {
      const bool ready = data($) == 1;  // a plain read: must be ordered after the write
      if (polls == 1) first_poll_done($).store(1, rl::mo_release);
      return ready;
    }
    bool ready = true;
    for (int w = 0; w < P.wakers; ++w) ready &= flag[w]($).load(rl::mo_relaxed) == 1;
    return ready;
  }

  // Suspended: until woken, or until every other party is done (then the wake-up is lost).
  bool wait_woken() {
    for (;;) {
      if (wakeups($).load(rl::mo_acquire) >= blocks) return true;
      if (quiet($).load(rl::mo_acquire) == parties) {
        return wakeups($).load(rl::mo_acquire) >= blocks;
      }
      rl::yield(1, $);
    }
  }

  void task() {
    for (;;) {
      state.begin_poll();
      if (poll()) {
        done = true;
        break;
      }
      task_lock.lock($);
      if (cancel_requested($)) {  // begin_registration failed: throws task_cancelled
        task_lock.unlock($);
        cancelled = true;
        break;
      }
      registration($) = 1;  // block_.task_ = t, before try_block (release)
      if (!state.try_block()) {
        task_lock.unlock($);
        continue;  // notified during the poll: poll again
      }
      ++blocks;
      registered($) = true;  // end_registration(&block_)
      task_lock.unlock($);
      if (!wait_woken()) {
        stuck = true;
        break;
      }
      task_lock.lock($);  // clear_wait
      registered($) = false;
      const bool won = cancel_won($);
      task_lock.unlock($);
      if (won) {
        cancelled = true;
        break;
      }
    }
    state.finish();
  }

  void wake_task() {
    wins($).fetch_add(1, rl::mo_relaxed);
    wakeups($).fetch_add(1, rl::mo_release);  // schedule: the queue's release push
  }

  void waker(int w) {
    if (P.plain_data) {
      while (first_poll_done($).load(rl::mo_acquire) == 0) rl::yield(1, $);
      data($) = 1;
    } else {
      flag[w]($).store(1, rl::mo_relaxed);
    }
    for (int k = 0; k < P.wakes[w]; ++k) {
      wake_calls($).fetch_add(1, rl::mo_relaxed);
      if (state.wake()) {
        RL_ASSERT(registration($) == 1);  // task_->wake(): the task pointer is readable
        wake_task();
      }
    }
    quiet($).fetch_add(1, rl::mo_release);
  }

  void canceller() {
    bool won = false;
    task_lock.lock($);
    cancel_requested($) = true;
    if (registered($) && state.try_cancel()) {
      cancel_won($) = true;
      won = true;
    }
    task_lock.unlock($);
    if (won) wake_task();
    quiet($).fetch_add(1, rl::mo_release);
  }

  void thread(unsigned index) {
    if (index == 0) {
      task();
    } else if (static_cast<int>(index) <= P.wakers) {
      waker(static_cast<int>(index) - 1);
    } else {
      canceller();
    }
  }

  void after() {
    RL_ASSERT(!stuck);                           // no lost wake-up
    RL_ASSERT(done != cancelled);                // ended exactly one way
    if (!P.canceller) RL_ASSERT(done);           // saw every waker's data
    RL_ASSERT(wins($).load(rl::mo_relaxed) == blocks);  // exactly one party per block
    RL_ASSERT(polls <= wake_calls($).load(rl::mo_relaxed) + 1);
  }
};

template <class Test>
bool run_both(const char* name, rl::iteration_t random_iterations = 200000) {
  return relacy_bridge::run_model<Test>(name, rl::random_scheduler_type, random_iterations) &&
         relacy_bridge::run_model<Test>(name, rl::fair_context_bound_scheduler_type, 0);
}

}  // namespace

int main() {
  bool ok = true;
  ok &= run_both<turnstile_race<one_waker_plain_once>>("one waker (plain data, one wake)");
  ok &= run_both<turnstile_race<one_waker_plain>>("one waker (plain data, two wakes)");
  ok &= run_both<turnstile_race<one_waker_plain_cancel>>("one waker (plain data) + canceller");
  ok &= run_both<turnstile_race<two_wakers_flags>>("two wakers (relaxed flags)");
  ok &= run_both<turnstile_race<two_wakers_flags_cancel>>("two wakers (relaxed flags) + canceller");

  // Negative controls: must be reported (run_model returns true on the expected failure).
  constexpr auto race = rl::test_result_data_race;
  constexpr auto assert_failed = rl::test_result_user_assert_failed;
  constexpr rl::iteration_t negative_iterations = 200000;
  ok &= relacy_bridge::run_model<turnstile_race<one_waker_plain, relaxed_begin_poll, race>>(
      "negative control: begin_poll relaxed (expect a data race on the poll's read)",
      rl::random_scheduler_type, negative_iterations);
  ok &= relacy_bridge::run_model<turnstile_race<one_waker_plain, relaxed_notify, race>>(
      "negative control: wake's notify CAS relaxed (expect a data race on the poll's read)",
      rl::random_scheduler_type, negative_iterations);
  ok &= relacy_bridge::run_model<turnstile_race<two_wakers_flags, relaxed_begin_poll, assert_failed>>(
      "negative control: begin_poll relaxed, flags (expect a lost wake-up)",
      rl::random_scheduler_type, negative_iterations);
  ok &= relacy_bridge::run_model<turnstile_race<one_waker_plain, release_unblock, race>>(
      "negative control: wake's unblock CAS release only (expect a data race on the registration)",
      rl::random_scheduler_type, negative_iterations);

  std::printf(ok ? "turnstile_state model: all scenarios gave the expected result\n"
                 : "turnstile_state model: FAILED\n");
  return ok ? 0 : 1;
}
