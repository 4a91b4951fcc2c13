// Relacy model of inter-executor messaging (include/spindle/core/executor_mailbox.hpp): the same
// basic_mailbox (intrusive MPSC stack + receiver_parking flag) and basic_message_pool templates
// the runtime uses, instantiated with Relacy's atomics, a model message type whose payload is
// rl::var (so a payload read that is not ordered after the sender's writes is a data race), and
// pools of one message per chunk (every message in flight beyond the first grows the pool, and
// returned messages are reused).
//
// Each "executor" thread runs the loop the runtime runs (executor.cpp / executor_mailbox.cpp):
// poll the mailbox first (deliver, then return the message to its sender's mailbox or, for a
// send to self, reclaim it at once; reclaim returns), send what it has to send, and park when it
// still expects deliveries and its mailbox is empty: announce_parking, register as a sleeper
// (under a mutex, like runtime_core::transition_to_parked), seq_cst fence, re-check, wait on a
// parker (mutex + condition variable + permit, like futex_parker). A sender whose post reports the
// receiver parking runs cancel_park + unpark (runtime_core.cpp). A lost wake-up leaves a thread
// waiting forever with a message in its mailbox: Relacy reports a deadlock.
//
// Checked: every message is delivered exactly once on its receiver, or (when executors leave
// early: the shutdown) discarded exactly once by the shutdown drain (close), and every pool
// message is reclaimed exactly once into its sender's pool; foreign (heap) messages are freed
// exactly once (Relacy's leak and double-free checks). A closing race: a foreign sender posting
// while the mailbox is closed discards its own message, exactly once.
// Negative control: the push's seq_cst CAS weakened to release must lose a wake-up (deadlock).
//
// Exit code 0 when every scenario gives its expected result.
// The standard headers and spindle's come first: Relacy's macros break <atomic> otherwise.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <ostream>

#include "spindle/core/executor_mailbox.hpp"

#include "model/relacy_bridge.hpp"

// Relacy replaces the global unsized operator delete (and new) so that what a test iteration
// allocates is tracked, but not the sized forms that C++14 code calls (the pool's vector and
// chunk arrays are freed through them): without these, memory from Relacy's allocator would go
// to free(). Replacements of the global functions, defined once, in this program only.
// (relacy.hpp defines `delete` as a macro: set aside while these are declared.)
#pragma push_macro("delete")
#undef delete
void operator delete(void* pointer, std::size_t) noexcept { ::operator delete(pointer); }
void operator delete[](void* pointer, std::size_t) noexcept { ::operator delete[](pointer); }
#pragma pop_macro("delete")

namespace {

constexpr int max_executors = 3;
constexpr int foreign = -1;  // executor_message::foreign_sender
constexpr int ids_per_sender = 8;
constexpr int max_ids = (max_executors + 1) * ids_per_sender;

struct model_message {
  model_message* next = nullptr;  // the stack's link (written by the stack code)
  rl::var<int> delivering;        // 1: posted for delivery (deliver != nullptr); 0: a return
  rl::var<int> id;                // the payload
  rl::var<int> sender;            // executor index, or `foreign`
  rl::var<int> receiver;          // whom it is addressed to
};

// Same memory orders as the code, or the push's CAS weakened from seq_cst to release.
struct release_push : relacy_bridge::exact_orders {
  static constexpr std::memory_order cas_success(std::memory_order mo) {
    return mo == std::memory_order_seq_cst ? std::memory_order_release : mo;
  }
};

// One executor's parker: a permit, as futex_parker's `notified` state (a notification sent
// before the wait is not lost).
struct model_parker {
  rl::mutex mutex;
  rl::condition_variable wakeup;
  rl::var<bool> permit;
  void wait() {
    mutex.lock($);
    while (!permit($)) wakeup.wait(mutex, $);
    permit($) = false;
    mutex.unlock($);
  }
  void unpark() {
    mutex.lock($);
    permit($) = true;
    mutex.unlock($);
    wakeup.notify_one($);
  }
};

struct plan {
  int executors;                    // executor threads (2 or 3)
  int sends[max_executors][max_executors];  // [from][to], self included
  int foreign_sends[max_executors];  // from one extra, foreign thread (all zero: no such thread)
  bool leave_early;                 // executors stop once they sent everything: the shutdown
                                    // drain discards what they did not deliver
};

constexpr bool has_foreign(const plan& p) {
  for (int to = 0; to < max_executors; ++to) {
    if (p.foreign_sends[to] != 0) return true;
  }
  return false;
}

template <const plan& P, class Atomics, rl::test_result_e Expected = rl::test_result_success>
struct messaging_test
    : rl::test_suite<messaging_test<P, Atomics, Expected>, P.executors + (has_foreign(P) ? 1 : 0),
                     Expected> {
  using mailbox = spindle::core::basic_mailbox<model_message, Atomics>;
  using pool = spindle::core::basic_message_pool<model_message, 1>;

  mailbox mailboxes[max_executors];
  pool pools[max_executors];
  model_parker parkers[max_executors];
  rl::mutex sleepers_mutex;
  bool is_sleeping[max_executors] = {};  // guarded by sleepers_mutex

  // Ledger: Relacy runs the threads as fibers on one OS thread, so plain counters are safe.
  int sent_ids[max_ids] = {};  // 1 once sent
  int pooled[max_ids] = {};    // 1 for pool messages
  int delivered[max_ids] = {};
  int discarded[max_ids] = {};
  int reclaimed[max_ids] = {};
  int freed[max_ids] = {};
  int delivered_to[max_executors] = {};
  int expected_to[max_executors] = {};

  void before() {
    for (int to = 0; to < P.executors; ++to) {
      expected_to[to] = P.foreign_sends[to];
      for (int from = 0; from < P.executors; ++from) expected_to[to] += P.sends[from][to];
      parkers[to].permit($) = false;
    }
  }

  // runtime_core::cancel_park + parker().unpark(), as executor::send_message does on
  // post_result::queued_receiver_parking.
  void wake(int target) {
    sleepers_mutex.lock($);
    const bool was_sleeping = is_sleeping[target];
    is_sleeping[target] = false;
    sleepers_mutex.unlock($);
    if (was_sleeping) parkers[target].unpark();
  }

  void post(int target, model_message* m) {
    switch (mailboxes[target].post(m)) {
      case mailbox::post_result::queued:
        break;
      case mailbox::post_result::queued_receiver_parking:
        wake(target);
        break;
      case mailbox::post_result::closed:
        RL_ASSERT(false);  // mailboxes close only after every executor left
        break;
    }
  }

  void send(int self, int target, int id) {
    bool grew = false;
    model_message* m = pools[self].acquire(grew);
    m->delivering($) = 1;
    m->id($) = id;
    m->sender($) = self;
    m->receiver($) = target;
    sent_ids[id] = 1;
    pooled[id] = 1;
    post(target, m);
  }

  void reclaim(int owner, model_message* m, int id) {
    ++reclaimed[id];
    pools[owner].release(m);
  }

  // executor::poll_mailbox + finish_delivery.
  void poll(int self) {
    model_message* m = mailboxes[self].take_all();
    while (m != nullptr) {
      model_message* next = m->next;
      const int id = m->id($);
      const int sender = m->sender($);
      if (m->delivering($) == 0) {
        RL_ASSERT(sender == self);  // only our own messages come back
        reclaim(self, m, id);
      } else {
        RL_ASSERT(m->receiver($) == self);
        ++delivered[id];
        ++delivered_to[self];
        if (sender == foreign) {
          ++freed[id];
          delete m;
        } else if (sender == self) {
          reclaim(self, m, id);
        } else {
          m->delivering($) = 0;
          const bool posted = mailboxes[sender].post_return(m);
          RL_ASSERT(posted);
        }
      }
      m = next;
    }
  }

  // executor::park (steps 1-4) as far as the mailbox is concerned.
  void park(int self) {
    mailboxes[self].announce_parking();
    sleepers_mutex.lock($);
    is_sleeping[self] = true;
    sleepers_mutex.unlock($);
    Atomics::fence_seq_cst();
    if (mailboxes[self].empty_for_parking_recheck()) parkers[self].wait();
    sleepers_mutex.lock($);
    is_sleeping[self] = false;
    sleepers_mutex.unlock($);
    mailboxes[self].announce_awake();
  }

  void executor_thread(int self) {
    int next_target = 0;
    int sent_to[max_executors] = {};
    int sent = 0;
    for (;;) {
      if (!mailboxes[self].empty()) poll(self);  // messages first
      // Next send, round-robin over the targets that still get some.
      bool sent_one = false;
      for (int tries = 0; tries < P.executors && !sent_one; ++tries) {
        const int to = next_target;
        next_target = (next_target + 1) % P.executors;
        if (sent_to[to] < P.sends[self][to]) {
          send(self, to, self * ids_per_sender + sent++);
          ++sent_to[to];
          sent_one = true;
        }
      }
      if (sent_one) continue;
      if (P.leave_early || delivered_to[self] == expected_to[self]) return;
      park(self);
    }
  }

  void foreign_thread() {
    int sent = 0;
    for (int to = 0; to < P.executors; ++to) {
      for (int k = 0; k < P.foreign_sends[to]; ++k) {
        model_message* m = new model_message;
        const int id = max_executors * ids_per_sender + sent++;
        m->delivering($) = 1;
        m->id($) = id;
        m->sender($) = foreign;
        m->receiver($) = to;
        sent_ids[id] = 1;
        post(to, m);
      }
    }
  }

  void thread(unsigned index) {
    if (int(index) < P.executors) {
      executor_thread(int(index));
    } else {
      foreign_thread();
    }
  }

  // Shutdown step 5a (runtime_core::drain_mailboxes / executor::discard_mailbox).
  void after() {
    for (int self = 0; self < P.executors; ++self) {
      model_message* m = mailboxes[self].close();
      while (m != nullptr) {
        model_message* next = m->next;
        const int id = m->id($);
        const int sender = m->sender($);
        if (m->delivering($) == 0) {
          reclaim(self, m, id);
        } else {
          ++discarded[id];
          if (sender == foreign) {
            ++freed[id];
            delete m;
          } else {
            reclaim(sender, m, id);
          }
        }
        m = next;
      }
    }
    for (int id = 0; id < max_ids; ++id) {
      if (sent_ids[id] == 0) {
        RL_ASSERT(delivered[id] + discarded[id] + reclaimed[id] + freed[id] == 0);
        continue;
      }
      RL_ASSERT(delivered[id] + discarded[id] == 1);
      if (!P.leave_early) RL_ASSERT(discarded[id] == 0);
      RL_ASSERT(reclaimed[id] == pooled[id]);
      RL_ASSERT(freed[id] == 1 - pooled[id]);
    }
  }
};

// A foreign thread posts while the receiver polls once and then, as the shutdown would after it
// left its loop, closes the mailbox: a post that finds it closed discards its own message.
struct close_race : rl::test_suite<close_race, 2> {
  using mailbox = spindle::core::basic_mailbox<model_message, relacy_bridge::relacy_atomics<>>;
  mailbox box;
  int delivered[2] = {};
  int discarded[2] = {};

  void discard(model_message* m) {
    ++discarded[m->id($)];
    delete m;
  }

  void thread(unsigned index) {
    if (index == 0) {
      for (int id = 0; id < 2; ++id) {
        model_message* m = new model_message;
        m->delivering($) = 1;
        m->id($) = id;
        if (box.post(m) == mailbox::post_result::closed) discard(m);
      }
    } else {
      for (model_message* m = box.take_all(); m != nullptr;) {
        model_message* next = m->next;
        ++delivered[m->id($)];
        delete m;
        m = next;
      }
      for (model_message* m = box.close(); m != nullptr;) {
        model_message* next = m->next;
        discard(m);
        m = next;
      }
    }
  }

  void after() {
    for (int id = 0; id < 2; ++id) RL_ASSERT(delivered[id] + discarded[id] == 1);
  }
};

// Scenarios (sends[from][to]; foreign_sends[to]).
constexpr plan exchange{2, {{0, 1, 0}, {1, 0, 0}, {0, 0, 0}}, {0, 0, 0}, false};
constexpr plan exchange_and_self{2, {{1, 2, 0}, {1, 1, 0}, {0, 0, 0}}, {0, 0, 0}, false};
constexpr plan foreign_to_parked{1, {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, {2, 0, 0}, false};
constexpr plan two_with_foreign{2, {{0, 1, 0}, {1, 0, 0}, {0, 0, 0}}, {1, 1, 0}, false};
constexpr plan three_ring{3, {{0, 1, 0}, {0, 0, 1}, {1, 0, 0}}, {0, 0, 0}, false};
constexpr plan three_all{3, {{1, 1, 1}, {1, 0, 1}, {1, 1, 0}}, {0, 0, 0}, false};
constexpr plan leave_early{2, {{1, 2, 0}, {1, 1, 0}, {0, 0, 0}}, {1, 1, 0}, true};
constexpr plan foreign_only_one_executor{1, {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, {1, 0, 0}, false};

using exact = relacy_bridge::relacy_atomics<>;
using weakened = relacy_bridge::relacy_atomics<release_push>;


}  // namespace

int main() {
  bool ok = true;
  constexpr rl::iteration_t random_iterations = 200000;
  const auto random = rl::random_scheduler_type;
  ok &= relacy_bridge::run_model<messaging_test<exchange, exact>>("two executors exchange one message each", random,
                                             random_iterations);
  ok &= relacy_bridge::run_model<messaging_test<exchange_and_self, exact>>("exchange + sends to self, pool reuse",
                                                      random, random_iterations);
  ok &= relacy_bridge::run_model<messaging_test<foreign_to_parked, exact>>("foreign thread wakes a parked executor",
                                                      random, random_iterations);
  ok &= relacy_bridge::run_model<messaging_test<two_with_foreign, exact>>("two executors and a foreign thread", random,
                                                     random_iterations);
  ok &= relacy_bridge::run_model<messaging_test<three_ring, exact>>("three executors in a ring", random,
                                               random_iterations);
  ok &= relacy_bridge::run_model<messaging_test<three_all, exact>>("three executors, all to all", random,
                                              random_iterations);
  ok &= relacy_bridge::run_model<messaging_test<leave_early, exact>>("shutdown drain: executors leave early", random,
                                                random_iterations);
  ok &= relacy_bridge::run_model<close_race>("post racing the shutdown's close", random, random_iterations);
  // Exhaustive (context-bounded) search of the smallest scenarios.
  const auto bounded = rl::fair_context_bound_scheduler_type;
  ok &= relacy_bridge::run_model<messaging_test<foreign_only_one_executor, exact>>("foreign -> parked executor", bounded, 0);
  ok &= relacy_bridge::run_model<messaging_test<exchange, exact>>("two executors exchange one message each", bounded, 0);
  ok &= relacy_bridge::run_model<close_race>("post racing the shutdown's close", bounded, 0);
  // Negative control: with a release push the sender's flag load may read "not parking" while
  // the receiver's re-check reads "empty": a lost wake-up, which Relacy reports as a deadlock.
  ok &= relacy_bridge::run_model<messaging_test<foreign_only_one_executor, weakened, rl::test_result_deadlock>>(
      "negative control: release push loses a wake-up", random, random_iterations);
  std::printf(ok ? "executor mailbox model: all scenarios gave the expected result\n"
                 : "executor mailbox model: FAILED\n");
  return ok ? 0 : 1;
}
