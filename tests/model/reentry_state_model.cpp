// Relacy model of the re-entry word of reentering_integration (spindle/embed/reentry_state.hpp,
// the very template, over Relacy's atomics) between a ticking thread and threads that publish
// work and then ask for a tick (integration.hpp has the argument this checks).
//
// The host has one "tick wanted" flag, set by every request passed on to it, cleared during a
// tick after the tick's last look at its queues and before end_tick (which passes a held
// request on): the latest a host may clear it. (A host driving an embedded_executor clears it
// before calling tick(), integration.hpp's host contract, which is stricter.) The ticking
// thread runs two ticks, each ticking
// whether or not the flag asked for it (a host also ticks for timers or its own frames):
//   begin_tick; look at the work queue (count what is there); host clears its flag; end_tick
//   (true: the host's flag is set again).
// Each foreign thread publishes one piece of work and then calls request() (true: the host's
// flag is set at once). The check (no lost re-entry), once every thread ended: if some work was
// published that no tick's look saw, the host's flag is set (the host will tick again). Also
// counted: requests passed on (at once or by end_tick) never exceed the requests made, and every
// request is passed on or collapsed into a held one.
//
// Scenarios
//   abstract queue - the work queue is a counter: publish = seq_cst fetch_add, look = seq_cst
//       load (the argument's assumption: the look is ordered after begin_tick's store).
//   release publish - publish = plain var + release store, look = acquire load (reading the
//       plain var when the look saw it; a data race would show a broken publication). Reported
//       as found (see the result printed), not asserted either way.
//   action queue, as the executor reads it - the queue is spindle::core::intrusive_mpsc_stack
//       (the executor's action queue, same template): publish = push (seq_cst CAS), look =
//       empty_seq_cst() then take_all(), as embedded_executor::service does in a tick's first
//       service phase: passes.
//   negative control: the look by take_all() alone (its relaxed emptiness hint, then an
//       acquire exchange), as the executor did before this model found the bug (below): must
//       lose a re-entry.
//   negative controls - request()'s seq_cst load weakened to acquire, and begin_tick's seq_cst
//       store weakened to release: each must lose a re-entry (the model can see one). The other
//       two operations (request's CAS, end_tick's exchange: read-modify-writes, which read the
//       latest value whatever their order) are weakened too and reported, not asserted.
//
// The bug this model found, now fixed (src/embed/embedded_executor.cpp, tick(): begin_tick, then
// the first service phase called actions_.take_all(); intrusive_mpsc_stack::take_all: a relaxed
// load of the head (the emptiness hint), then an acquire exchange). integration.hpp's
// argument ("begin_tick's seq_cst store [is ordered] before the tick's first look at its
// queues", also in docs/design/embedded.md) needs that first look to be seq_cst, or a seq_cst
// fence between the two: a relaxed (or acquire) load after a seq_cst store may still read the
// queue as it was before the store (store-load reordering: C++ puts only seq_cst operations and
// fences in the single total order; ARMv8 lets a plain LDR pass an earlier STLR, POWER any load
// pass a store without hwsync). Relacy's counterexample: a foreign push + request() whose
// seq_cst load still reads "no tick" passes the request on at once; the tick that starts next
// (ticking for another reason: a timer, the host's frame) misses the node, the naive host
// clears its flag at the end of that tick, and the node is stranded. Hosts that synchronise
// with their own flag before ticking (read it, then tick) are not affected: the flag orders the
// push before the tick. Not observable on x86 (a locked instruction is a full barrier).
// The fix, which the executor now has and the model checks: start the tick's first look with a
// seq_cst load of the head (intrusive_mpsc_stack::empty_seq_cst()).
//
// Exit code 0 when every scenario run gives its expected result.
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "spindle/core/executor_mailbox.hpp"
#include "spindle/embed/reentry_state.hpp"

#include "model/relacy_bridge.hpp"

namespace {


// --- an atomics policy whose every order can be weakened ----------------------------------------
// (relacy_bridge's relacy_atomic weakens stores and CAS successes only; reentry_state's load and
// exchange are the interesting ones here.)

using exact = relacy_bridge::exact_orders;

constexpr std::memory_order no_seq_cst_load(std::memory_order mo) {
  return mo == std::memory_order_seq_cst ? std::memory_order_acquire : mo;
}
constexpr std::memory_order no_seq_cst_store(std::memory_order mo) {
  return mo == std::memory_order_seq_cst ? std::memory_order_release : mo;
}
constexpr std::memory_order no_seq_cst_rmw(std::memory_order mo) {
  return mo == std::memory_order_seq_cst ? std::memory_order_acq_rel : mo;
}

// request(): its load (the only load of the word).
struct acquire_request_load : exact {
  static constexpr std::memory_order load(std::memory_order mo) { return no_seq_cst_load(mo); }
};
// request(): its load relaxed.
struct relaxed_request_load : exact {
  static constexpr std::memory_order load(std::memory_order) { return std::memory_order_relaxed; }
};
// begin_tick(): its store (the only store of the word).
struct release_begin_tick : exact {
  static constexpr std::memory_order store(std::memory_order mo) { return no_seq_cst_store(mo); }
};
// request(): its CAS, success and failure orders.
struct acq_rel_request_cas : exact {
  static constexpr std::memory_order cas_success(std::memory_order mo) { return no_seq_cst_rmw(mo); }
  static constexpr std::memory_order cas_failure(std::memory_order) { return std::memory_order_relaxed; }
};
// end_tick(): its exchange (the only exchange).
struct acq_rel_end_tick : exact {
  static constexpr std::memory_order exchange(std::memory_order mo) { return no_seq_cst_rmw(mo); }
};


// --- the work queue -------------------------------------------------------------------------

enum class queue_kind {
  counter,          // seq_cst fetch_add / seq_cst load
  release_publish,  // plain payload + release store / acquire load
  take_all,         // intrusive_mpsc_stack: push / take_all alone (the look before the fix)
  seq_cst_look,     // intrusive_mpsc_stack: push / empty_seq_cst() then take_all (the executor)
};

struct work_node {
  work_node* next = nullptr;  // the stack's link
};

constexpr int max_foreign = 2;

template <queue_kind Q, int Foreign, class Weaken = exact,
          rl::test_result_e Expected = rl::test_result_success>
struct reentry_race : rl::test_suite<reentry_race<Q, Foreign, Weaken, Expected>, 1 + Foreign, Expected> {
  static constexpr int ticks = 2;

  spindle::embed::detail::reentry_state<relacy_bridge::relacy_atomics<Weaken>> state;
  // counter / release_publish
  rl::atomic<int> published;
  rl::var<int> payload[max_foreign];
  // take_all / seq_cst_look (default atomics: only the word is weakened)
  spindle::core::intrusive_mpsc_stack<work_node, relacy_bridge::relacy_atomics<>> stack;
  work_node nodes[max_foreign];

  rl::atomic<int> host_wanted;   // the naive host's "tick wanted" flag
  rl::atomic<int> passed_on;     // requests the wrapper passed on to the host
  rl::atomic<int> held;          // request() calls answered "held"
  int seen = 0;                  // work the ticks' looks found (ticking thread)
  int held_passed = 0;           // end_tick() calls that passed a held request (ticking thread)

  void before() {
    published($).store(0, rl::mo_relaxed);
    for (int i = 0; i < max_foreign; ++i) payload[i]($) = 0;
    host_wanted($).store(0, rl::mo_relaxed);
    passed_on($).store(0, rl::mo_relaxed);
    held($).store(0, rl::mo_relaxed);
    seen = 0;
    held_passed = 0;
  }

  void publish(int index) {
    switch (Q) {
      case queue_kind::counter:
        published($).fetch_add(1, rl::mo_seq_cst);
        break;
      case queue_kind::release_publish:
        payload[index]($) = 1;
        published($).fetch_add(1, rl::mo_release);
        break;
      case queue_kind::take_all:
      case queue_kind::seq_cst_look:
        RL_ASSERT(stack.push(&nodes[index]));
        break;
    }
  }

  // The tick's look at its queue: how much new work it takes.
  int look() {
    switch (Q) {
      case queue_kind::counter: {
        const int now = published($).load(rl::mo_seq_cst);
        const int fresh = now - seen;
        return fresh;
      }
      case queue_kind::release_publish: {
        const int now = published($).load(rl::mo_acquire);
        // The payloads of what the look saw (in publication order unknown: read those set; a
        // read not ordered after its write is a data race). Here with Foreign <= 2: read the
        // ones the count covers only when it covers every publisher.
        if (now == Foreign) {
          for (int i = 0; i < Foreign; ++i) RL_ASSERT(payload[i]($) == 1);
        }
        return now - seen;
      }
      case queue_kind::take_all:
      case queue_kind::seq_cst_look: {
        if (Q == queue_kind::seq_cst_look && stack.empty_seq_cst()) return 0;
        int taken = 0;
        for (work_node* n = stack.take_all(); n != nullptr; n = n->next) ++taken;
        return taken;
      }
    }
    return 0;
  }

  void thread(unsigned index) {
    if (index == 0) {  // the ticking thread (the host's loop)
      for (int t = 0; t < ticks; ++t) {
        state.begin_tick();
        seen += look();
        host_wanted($).store(0, rl::mo_seq_cst);  // naive: cleared when the tick ends
        if (state.end_tick()) {
          ++held_passed;
          passed_on($).fetch_add(1, rl::mo_relaxed);
          host_wanted($).store(1, rl::mo_seq_cst);
        }
      }
    } else {  // a foreign waker
      publish(static_cast<int>(index) - 1);
      if (state.request()) {
        passed_on($).fetch_add(1, rl::mo_relaxed);
        host_wanted($).store(1, rl::mo_seq_cst);
      } else {
        held($).fetch_add(1, rl::mo_relaxed);
      }
    }
  }

  void after() {
    int total = Foreign;
    int left = total - seen;
    if (Q == queue_kind::take_all || Q == queue_kind::seq_cst_look) {
      int still = 0;
      for (work_node* n = stack.take_all(); n != nullptr; n = n->next) ++still;
      RL_ASSERT(still == left);  // the stack lost or duplicated nothing
    }
    RL_ASSERT(left >= 0);
    // No lost re-entry: work no tick saw means the host still wants a tick.
    if (left > 0) RL_ASSERT(host_wanted($).load(rl::mo_relaxed) == 1);
    // Every request is passed on at once or held; a held one is passed on by an end_tick (the
    // held requests of one tick collapse into one).
    const int passed = passed_on($).load(rl::mo_relaxed);
    const int held_count = held($).load(rl::mo_relaxed);
    RL_ASSERT(passed <= Foreign);
    RL_ASSERT(passed + held_count >= Foreign);
    if (held_count > 0) RL_ASSERT(held_passed >= 1);
    RL_ASSERT(held_passed <= held_count);
  }
};

// Runs a scenario whose result is asserted: with the random scheduler (volume) and the
// context-bound one (systematic over few preemptions).
template <class Test>
bool run_asserted(const char* name, rl::iteration_t random_iterations = 200000) {
  bool ok = relacy_bridge::run_model<Test>(name, rl::random_scheduler_type, random_iterations);
  // A negative control is found by the random scheduler (stale loads need it); a passing one
  // is also searched systematically.
  if (Test::params::expected_result == rl::test_result_success) {
    ok &= relacy_bridge::run_model<Test>(name, rl::fair_context_bound_scheduler_type, 0);
  }
  return ok;
}

// Runs a scenario (a test expecting a failed assertion, so that Relacy stays quiet) and prints
// what Relacy found, asserting nothing: for the weakenings that may not matter, and findings.
template <class Test>
void run_reported(const char* name, rl::iteration_t iterations = 200000) {
  rl::test_params params;
  params.search_type = rl::random_scheduler_type;
  params.iteration_count = iterations;
  params.output_history = false;
  relacy_bridge::quiet_if_expected_failure(params, true);
  std::printf("%s (random, %llu iterations)\n", name, static_cast<unsigned long long>(iterations));
  std::fflush(stdout);
  rl::simulate<Test>(params);
  std::printf("  -> %s\n", params.test_result == rl::test_result_success
                               ? "nothing found"
                               : rl::test_result_str(params.test_result));
}

}  // namespace

int main() {
  constexpr auto fail = rl::test_result_user_assert_failed;
  bool ok = true;

  ok &= run_asserted<reentry_race<queue_kind::counter, 1>>("abstract queue, one waker");
  ok &= run_asserted<reentry_race<queue_kind::counter, 2>>("abstract queue, two wakers");
  ok &= run_asserted<reentry_race<queue_kind::seq_cst_look, 1>>(
      "action queue, looked at as the executor does (seq_cst load first), one waker");
  ok &= run_asserted<reentry_race<queue_kind::seq_cst_look, 2>>(
      "action queue, looked at as the executor does (seq_cst load first), two wakers");

  // Negative controls: the model must see a lost re-entry.
  ok &= run_asserted<reentry_race<queue_kind::counter, 1, acquire_request_load, fail>>(
      "negative control: request() load acquire instead of seq_cst (expect a lost re-entry)");
  ok &= run_asserted<reentry_race<queue_kind::counter, 1, release_begin_tick, fail>>(
      "negative control: begin_tick store release instead of seq_cst (expect a lost re-entry)");
  ok &= run_asserted<reentry_race<queue_kind::take_all, 1, exact, fail>>(
      "negative control: the first look by take_all()'s relaxed hint alone (expect a lost "
      "re-entry)");

  // Reported, not asserted.
  std::printf("reported (not asserted):\n");
  run_reported<reentry_race<queue_kind::counter, 2, relaxed_request_load, fail>>(
      "  request() load relaxed, two wakers (expect a lost re-entry)");
  run_reported<reentry_race<queue_kind::counter, 2, acq_rel_request_cas, fail>>(
      "  request() CAS acq_rel/relaxed, two wakers (an RMW: expected harmless)");
  run_reported<reentry_race<queue_kind::counter, 2, acq_rel_end_tick, fail>>(
      "  end_tick() exchange acq_rel, two wakers (an RMW: expected harmless)");
  run_reported<reentry_race<queue_kind::release_publish, 1, exact, fail>>(
      "  work published with a release store only, looked at with acquire, one waker");

  std::printf(ok ? "reentry_state model: all scenarios gave the expected result\n"
                 : "reentry_state model: FAILED\n");
  return ok ? 0 : 1;
}
