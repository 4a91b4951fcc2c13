// One executor: a worker thread, its queues, its timers, its parker and its statistics.
//
// What the executor owns (touched only by its own thread):
//   - the owner side of `local` (push/pop), the loop counters, `is_searching`, the random state.
// What it shares (the executor handle other threads use):
//   - the thief side of `local` and its size; `inbox` (anyone pushes, the owner drains);
//   - `offers` (the owner publishes promoted fork-join work, anyone takes one item);
//   - `timers` (anyone arms/disarms; the owner fires);
//   - `parker`, which is the reactor (anyone unparks; I/O is owner-only); `stats` (owner
//     writes, anyone reads).
//
// The loop (see docs/design/executor-loop.md), one iteration:
//   1. every `injector_check_interval` iterations, the own injector shard first (so remote work
//      cannot starve behind a busy local queue);
//   2. the inbox (runnables sent to this executor specifically);
//   3. the local queue, newest first (at the step-1 checks, the oldest instead if it has been
//      the oldest for `local_fairness_interval` iterations);
//   4. the injector: own shard, then the others;
//   5. stealing (bounded number of concurrent searchers, random victims; first one item from
//      the victims' offer boards, then half of a local queue; exponential backoff between
//      rounds);
//   6. park (parking protocol in runtime_core / docs/design/parking.md); while another
//      executor is awake, at most for the stuck-owner check interval (executor-loop.md).
// After every `budget` runnables, and whenever the local queue runs dry, the executor polls its
// reactor (submits queued I/O in one batch, runs completions); after every `budget` runnables it
// also fires due timers, even if work is still queued.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "spindle/core/atomic.hpp"
#include "spindle/core/local_queue.hpp"
#include "spindle/core/offer_board.hpp"
#include "spindle/core/parker.hpp"
#include "spindle/core/reactor.hpp"
#include "spindle/core/runnable.hpp"
#include "spindle/core/timer_wheel.hpp"

namespace spindle::core {

class runtime_core;

// Counters a reader may sample at any time; each has a single writer (the executor).
struct executor_stats {
  std::atomic<std::uint64_t> runnables_run{0};
  std::atomic<std::uint64_t> steals{0};           // successful thefts (batches)
  std::atomic<std::uint64_t> parks{0};
  std::atomic<std::uint64_t> budget_exhaustions{0};
  std::atomic<std::uint64_t> timers_fired{0};
  std::atomic<std::uint64_t> busy_nanoseconds{0};  // time spent not parked
  // Utilisation over the last sampling window, in parts per 65536 (see load.md):
  // busy time / wall time, smoothed with an exponential moving average.
  std::atomic<std::uint32_t> utilisation{0};
};

// A lock-free multi-producer, single-consumer stack of runnables addressed to one executor.
// Producers push with a CAS on the head; the owner takes everything with one exchange and
// reverses it to restore FIFO order.
class executor_inbox {
 public:
  void push(runnable* item) noexcept {
    // relaxed: the value is only a CAS expectation.
    runnable* head = head_.load(std::memory_order_relaxed);
    do {
      item->next = head;
      // release: publishes the runnable (and its link) to the owner's acquire exchange.
    } while (!head_.compare_exchange_weak(head, item, std::memory_order_release,
                                          std::memory_order_relaxed));
  }
  // Owner. Everything pushed so far, oldest first.
  runnable* take_all() noexcept {
    if (head_.load(std::memory_order_relaxed) == nullptr) return nullptr;  // relaxed: hint
    // acquire: pairs with push's release.
    runnable* newest = head_.exchange(nullptr, std::memory_order_acquire);
    runnable* oldest_first = nullptr;
    while (newest != nullptr) {
      runnable* next = newest->next;
      newest->next = oldest_first;
      oldest_first = newest;
      newest = next;
    }
    return oldest_first;
  }
  bool empty() const noexcept { return head_.load(std::memory_order_relaxed) == nullptr; }

 private:
  std::atomic<runnable*> head_{nullptr};
};

class executor {
 public:
  using queue_type = local_queue<runnable, 256>;

  executor(runtime_core& core, std::uint32_t index, spindle::clock& clock);
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  std::uint32_t index() const noexcept { return index_; }
  runtime_core& core() const noexcept { return core_; }

  // Shared handle: what other threads may use.
  queue_type& local() noexcept { return local_; }
  executor_inbox& inbox() noexcept { return inbox_; }
  offer_board& offers() noexcept { return offers_; }
  timer_service& timers() noexcept { return timers_; }
  park_driver& parker() noexcept { return *reactor_; }
  // The executor's reactor (I/O and parking). Owner-only except for unpark (reactor.hpp).
  reactor& io() noexcept { return *reactor_; }
  const executor_stats& stats() const noexcept { return stats_; }
  // Queued work as seen by P2C placement: local queue + own injector shard + inbox backlog.
  std::uint32_t load() const noexcept;

  // The executor running on this thread, or null on threads that are not workers.
  static executor* current() noexcept;

  // Owner thread: pushes from the running task (spawn/wake -> newest end, yield -> oldest end).
  void push_local(runnable* r, schedule_hint hint) noexcept;

  // Entry point of the worker thread.
  void run_loop() noexcept;

 private:
  friend class runtime_core;
  runnable* next_runnable() noexcept;
  runnable* take_from_injector(std::size_t shard) noexcept;
  runnable* take_from_inbox() noexcept;
  runnable* take_starving_oldest() noexcept;
  runnable* search() noexcept;
  runnable* steal_round() noexcept;
  runnable* take_offer(std::uint32_t start) noexcept;
  void park() noexcept;
  void run_one(runnable* r) noexcept;
  void end_of_budget() noexcept;
  void fire_timers() noexcept;
  void observe_progress() noexcept;
  runnable* steal_from_stuck_owners() noexcept;
  void update_utilisation(std::uint64_t now_ns) noexcept;
  std::uint32_t next_random() noexcept;
  void overflow(runnable** items, std::uint32_t count) noexcept;

  runtime_core& core_;
  const std::uint32_t index_;
  queue_type local_;
  executor_inbox inbox_;
  offer_board offers_;
  timer_service timers_;
  std::unique_ptr<reactor> reactor_;
  executor_stats stats_;
  // Number of the runnable last completed, for the stuck check (single writer, sampled).
  alignas(cache_line_size) std::atomic<std::uint64_t> progress_{0};

  // Owner-only state.
  runnable* inbox_backlog_ = nullptr;  // taken from the inbox, not yet run (FIFO via next)
  std::vector<std::uint64_t> observed_progress_;  // other executors' progress at last park
  std::uint64_t tick_ = 0;
  std::uint32_t until_injector_check_ = 1;  // iterations left before the fairness checks
  std::uint16_t oldest_position_seen_ = 0;  // local queue position of the oldest item last seen
  std::uint64_t oldest_since_tick_ = 0;     // tick at which that item was first seen oldest
  std::uint32_t budget_used_ = 0;
  std::uint32_t random_state_;
  bool is_searching_ = false;
  std::uint64_t window_start_ns_ = 0;
  std::uint64_t window_busy_ns_ = 0;
  std::uint64_t busy_since_ns_ = 0;
};

}  // namespace spindle::core
