// Relacy model of the parking handshake (runtime_core.hpp, "Idle coordination"): a notifier
// publishes work and then looks at the idle state; a parking executor registers itself as parked
// (a seq_cst read-modify-write on the idle state) and then re-checks the work sources. Dekker:
// they must not miss each other, i.e. either the notifier sees the executor parked (and wakes
// it) or the executor's re-check sees the work.
//
// Scenarios (the memory orders are those of the code paths named):
//   push path      - executor::push_local -> local_queue::push (seq_cst CAS on the positions
//                    word) -> notify_after_seq_cst_publish (seq_cst load of the idle state, no
//                    fence); parker: transition_to_parked (seq_cst RMW), fence_seq_cst,
//                    local_queue::size() (seq_cst load).
//   fence path     - runtime_core::schedule from outside: injector push (mutex, relaxed size
//                    store) -> notify_work_available (fence_seq_cst, seq_cst load); parker:
//                    RMW, fence, injector size (relaxed load).
//   inbox path     - schedule_on: inbox CAS (release), fence_seq_cst, then the sleeper check;
//                    parker: RMW, fence, inbox head (relaxed load).
//   TSan substitute - fence_seq_cst as a seq_cst RMW on a shared dummy (SPINDLE_TSAN builds).
//   negative control - the fence path without the notifier's fence: must FAIL (shows the model
//                    can see a lost wake-up; the fence is what prevents it).
//
// Exit code 0 when every scenario gives its expected result.
#include <cstdint>

#include "model/relacy_bridge.hpp"

namespace {

constexpr std::uint64_t one_unparked = 1;
constexpr std::uint64_t executors = 2;  // the notifier's executor (awake) and the parker

enum class path { push, fence, inbox, tsan_fence, no_fence };

template <path P, rl::test_result_e Expected = rl::test_result_success>
struct handshake : rl::test_suite<handshake<P, Expected>, 2, Expected> {
  rl::atomic<std::uint64_t> work;        // queue word / injector size / inbox head
  rl::atomic<std::uint64_t> idle_state;  // unparked count (searching bits omitted)
  rl::atomic<unsigned> dummy;            // the TSan fence substitute
  bool notifier_saw_parked = false;
  bool parker_saw_work = false;

  void before() {
    work($).store(0, rl::mo_relaxed);
    idle_state($).store(executors * one_unparked, rl::mo_relaxed);
    dummy($).store(0, rl::mo_relaxed);
  }

  void fence() {
    if (P == path::tsan_fence) {
      dummy($).fetch_add(0, rl::mo_seq_cst);
    } else {
      rl::atomic_thread_fence(rl::mo_seq_cst, $);
    }
  }

  void notifier() {
    switch (P) {
      case path::push: {
        std::uint64_t expected = 0;
        work($).compare_exchange_strong(expected, 1, rl::mo_seq_cst, rl::mo_acquire);
        break;
      }
      case path::fence:
      case path::tsan_fence:
        work($).store(1, rl::mo_relaxed);  // under the shard mutex; relaxed size store
        fence();
        break;
      case path::inbox: {
        std::uint64_t head = work($).load(rl::mo_relaxed);
        while (!work($).compare_exchange_weak(head, head + 1, rl::mo_release, rl::mo_relaxed)) {
        }
        fence();
        break;
      }
      case path::no_fence:
        work($).store(1, rl::mo_release);
        break;
    }
    const std::uint64_t state = idle_state($).load(rl::mo_seq_cst);
    notifier_saw_parked = state < executors * one_unparked;
  }

  void parker() {
    idle_state($).fetch_sub(one_unparked, rl::mo_seq_cst);  // transition_to_parked
    fence();                                                // executor::park step 2
    const rl::memory_order recheck = P == path::push ? rl::mo_seq_cst : rl::mo_relaxed;
    parker_saw_work = work($).load(recheck) != 0;
  }

  void thread(unsigned index) {
    if (index == 0) {
      notifier();
    } else {
      parker();
    }
  }

  void after() { RL_ASSERT(notifier_saw_parked || parker_saw_work); }
};


template <class Test>
bool run_both(const char* name) {
  // The full search is exhaustive for two threads this small; the random run adds volume.
  return relacy_bridge::run_model<Test>(name, rl::fair_full_search_scheduler_type, 0) &&
         relacy_bridge::run_model<Test>(name, rl::random_scheduler_type, 200000);
}

}  // namespace

int main() {
  bool ok = true;
  ok &= run_both<handshake<path::push>>("push path: seq_cst CAS publish, no fence");
  ok &= run_both<handshake<path::fence>>("fence path: injector publish + fence");
  ok &= run_both<handshake<path::inbox>>("inbox path: release CAS + fence");
  ok &= run_both<handshake<path::tsan_fence>>("TSan fence substitute (seq_cst RMW on a dummy)");
  ok &= run_both<handshake<path::no_fence, rl::test_result_user_assert_failed>>(
      "negative control: publish without fence must lose a wake-up");
  std::printf(ok ? "parking handshake model: all scenarios gave the expected result\n"
                 : "parking handshake model: FAILED\n");
  return ok ? 0 : 1;
}
