// Relacy model of core::local_queue (capacity 4): an owner pushing and popping at both ends while
// one or two thieves steal (half, or with include_newest). Every item must be obtained exactly
// once (by a pop, a steal, or the overflow sink), and its payload, written by the owner before the
// push, must be visible without a data race to whoever obtains it.
//
// Exit code 0 when every scenario passes.
// The standard headers and the queue come first: Relacy's macros break <atomic> if it is
// included after <relacy/relacy.hpp>.
#include <atomic>
#include <cstdint>
#include <cstdio>

#include <new>

#include "spindle/core/local_queue.hpp"

namespace {

// Relacy allocates the test-suite object with plain malloc (16-byte alignment), but local_queue
// is alignas(64): embedding a queue directly would construct it misaligned. This slot places the
// object at an aligned offset inside a raw buffer. Defined before <relacy/relacy.hpp>, which
// turns `new` and `delete` into macros.
template <class T>
class aligned_slot {
 public:
  aligned_slot() { ::new (static_cast<void*>(address())) T(); }
  ~aligned_slot() { get().~T(); }
  aligned_slot(const aligned_slot&) = delete;
  aligned_slot& operator=(const aligned_slot&) = delete;
  T& get() { return *std::launder(reinterpret_cast<T*>(address())); }

 private:
  unsigned char* address() {
    const auto raw = reinterpret_cast<std::uintptr_t>(storage_);
    return storage_ + ((alignof(T) - raw % alignof(T)) % alignof(T));
  }
  unsigned char storage_[sizeof(T) + alignof(T)];
};

}  // namespace

#include "model/relacy_bridge.hpp"

namespace {

using relacy_atomics = relacy_bridge::relacy_atomics<>;

struct item {
  rl::var<int> payload;
  int index = 0;
};

constexpr int max_items = 8;
using queue = spindle::core::local_queue<item, 4, relacy_atomics>;

// Shared bookkeeping: Relacy runs its threads as fibers on one OS thread, so plain counters are
// safe; each thread writes only its own row, `after()` adds them up.
struct ledger {
  int obtained[3][max_items] = {};
  void take(int thread, item* it) {
    RL_ASSERT(it != nullptr);
    const int seen = it->payload($);  // data-race checked: written by the owner before the push
    RL_ASSERT(seen == 100 + it->index);
    ++obtained[thread][it->index];
  }
};

// Parameters of one scenario (a template argument so each scenario is its own test suite).
struct plan {
  int items;            // pushed by the owner (capacity is 4: > 4 overflows)
  int oldest_every;     // every n-th push goes to the oldest end (0: never)
  int owner_pops;       // pops the owner interleaves (alternating newest / oldest ends)
  int thief_attempts;   // steal attempts per thief
  bool include_newest;  // the thieves' mode (stuck-owner theft)
  int thieves;          // 1 or 2
};

template <const plan& P>
struct queue_test : rl::test_suite<queue_test<P>, 1 + P.thieves> {
  aligned_slot<queue> owner_slot;
  aligned_slot<queue> thief_slots[2];
  queue& owner_queue = owner_slot.get();
  queue& thief(int t) { return thief_slots[t].get(); }
  item items[max_items];
  ledger book;
  item* overflowed[max_items + 4] = {};
  int overflow_count = 0;

  void before() {
    for (int i = 0; i < P.items; ++i) items[i].index = i;
  }

  void owner() {
    auto sink = [this](item** batch, std::uint32_t count) {
      for (std::uint32_t i = 0; i < count; ++i) overflowed[overflow_count++] = batch[i];
    };
    int pops_left = P.owner_pops;
    for (int i = 0; i < P.items; ++i) {
      items[i].payload($) = 100 + i;
      if (P.oldest_every != 0 && i % P.oldest_every == P.oldest_every - 1) {
        owner_queue.push_oldest(&items[i], sink);
      } else {
        owner_queue.push(&items[i], sink);
      }
      if (pops_left > 0 && i % 2 == 1) {
        --pops_left;
        item* it = (pops_left % 2 == 0) ? owner_queue.pop() : owner_queue.pop_oldest();
        if (it != nullptr) book.take(0, it);
      }
    }
    while (pops_left-- > 0) {
      item* it = (pops_left % 2 == 0) ? owner_queue.pop_oldest() : owner_queue.pop();
      if (it != nullptr) book.take(0, it);
    }
  }

  void steal(int t) {
    queue& mine = thief(t - 1);
    for (int a = 0; a < P.thief_attempts; ++a) {
      if (item* it = owner_queue.steal_into(mine, P.include_newest)) book.take(t, it);
    }
    while (item* it = mine.pop()) book.take(t, it);
  }

  void thread(unsigned index) {
    if (index == 0) {
      owner();
    } else {
      steal(int(index));
    }
  }

  void after() {
    // Whatever is still queued belongs to the owner (all threads have finished).
    while (item* it = owner_queue.pop()) book.take(0, it);
    for (int i = 0; i < overflow_count; ++i) book.take(0, overflowed[i]);
    for (int i = 0; i < P.items; ++i) {
      const int total = book.obtained[0][i] + book.obtained[1][i] + book.obtained[2][i];
      RL_ASSERT(total == 1);
    }
    RL_ASSERT(owner_queue.empty());
    RL_ASSERT(thief(0).empty());
    RL_ASSERT(thief(1).empty());
  }
};

// Scenarios.
constexpr plan push_pop_steal{3, 0, 2, 2, false, 1};
constexpr plan push_pop_steal_newest{3, 0, 2, 2, true, 1};
constexpr plan both_ends{5, 3, 3, 2, false, 1};
constexpr plan both_ends_newest{5, 2, 3, 2, true, 1};
constexpr plan overflow_while_stealing{7, 0, 1, 2, false, 1};
constexpr plan overflow_while_stealing_newest{7, 4, 1, 2, true, 1};
constexpr plan lone_item_newest{1, 0, 1, 1, true, 1};
constexpr plan two_thieves{4, 0, 1, 1, false, 2};
constexpr plan two_thieves_newest{5, 3, 2, 1, true, 2};


}  // namespace

int main() {
  bool ok = true;
  constexpr rl::iteration_t random_iterations = 300000;
  ok &= relacy_bridge::run_model<queue_test<push_pop_steal>>(
      "push/pop vs steal", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<push_pop_steal_newest>>(
      "push/pop vs steal (include_newest)", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<both_ends>>(
      "both ends vs steal", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<both_ends_newest>>(
      "both ends vs steal (include_newest)", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<overflow_while_stealing>>(
      "overflow vs steal", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<overflow_while_stealing_newest>>(
      "overflow vs steal (include_newest)", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<lone_item_newest>>(
      "lone item: pop vs stuck-owner steal", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<two_thieves>>(
      "two thieves", rl::random_scheduler_type, random_iterations);
  ok &= relacy_bridge::run_model<queue_test<two_thieves_newest>>(
      "two thieves (include_newest)", rl::random_scheduler_type, random_iterations);
  // Exhaustive (context-bounded) search of the smallest scenarios.
  ok &= relacy_bridge::run_model<queue_test<lone_item_newest>>(
      "lone item: pop vs stuck-owner steal", rl::fair_context_bound_scheduler_type, 0);
  ok &= relacy_bridge::run_model<queue_test<push_pop_steal_newest>>(
      "push/pop vs steal (include_newest)", rl::fair_context_bound_scheduler_type, 0);
  std::printf(ok ? "local_queue model: all scenarios passed\n" : "local_queue model: FAILED\n");
  return ok ? 0 : 1;
}
