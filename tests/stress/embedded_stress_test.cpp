// Stress for the embedded executor (spindle/embed): tasks that run only inside a host's ticks,
// woken, spawned, fed and cancelled from foreign threads; turnstiles woken from many threads; the
// re-entry wrapper against a naive host; channels both ways between a runtime and an embedded
// executor; destruction with tasks in every state.
//
// Every item is accounted for exactly once and every task ends exactly once (completed or
// cancelled). A lost wake-up is a hang: the host loop below never looks at has_ready_work() to
// decide whether to tick (only at tick_soon() requests), so a wake-up that asks for no tick
// leaves a task stuck, and every wait is bounded by `hang_limit`, which turns the hang into a
// failure. Foreign threads poll an abort flag so that a failing test still joins them.
//
// Scale: about a million operations per test in release where that makes sense (0.2 to 3 s each
// on 2 cores); scaled() runs a fifth to a twentieth under ThreadSanitizer (the round-based tests,
// which start threads and executors per round, the smaller share; about 0.5 to 4 s each),
// SPINDLE_SYNC_SCALE overrides. Nothing sleeps for timing; nothing asserts timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "spindle/core/executor_mailbox.hpp"
#include "spindle/spindle.hpp"
#include "support/exactly_once.hpp"
#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;
using namespace std::chrono_literals;
using spindle::embed::embedded_executor;
using spindle::embed::embedded_options;
using steady = std::chrono::steady_clock;

// Turns a hang into a failure; far above anything a test needs, even under TSan.
constexpr auto hang_limit = std::chrono::seconds(60);
constexpr double tsan_factor = 0.05;

struct stopwatch {
  steady::time_point start = steady::now();
  double seconds() const { return std::chrono::duration<double>(steady::now() - start).count(); }
};

// --- the host ------------------------------------------------------------------------------------

// A host whose tick_soon() wakes the host thread: a request counter, and a condition variable
// for when the host thread sleeps (Dekker on `requests_` / `sleeping_`, all seq_cst: either the
// requester sees the host asleep and notifies under the mutex, or the host's re-check sees the
// request). Virtual time that never moves: a sleeping task sleeps until the executor goes.
class stress_host final : public spindle::embed::integration {
 public:
  spindle::clock_time now() const noexcept override { return virtual_start; }
  void tick_at(spindle::clock_time when) noexcept override { requested_at = when; }  // ticking thread
  void tick_soon() noexcept override {
    requests_.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard guard(mutex_);
      wakeup_.notify_one();
    }
  }

  // Host thread. Requests since the last take (resets the count).
  std::uint64_t take_requests() noexcept { return requests_.exchange(0, std::memory_order_acquire); }
  // Host thread. True once a request is pending; false if none came by `until`.
  bool wait_for_request(steady::time_point until) {
    for (int spin = 0; spin < 32; ++spin) {
      if (requests_.load(std::memory_order_acquire) != 0) return true;
      std::this_thread::yield();
    }
    std::unique_lock lock(mutex_);
    sleeping_.store(true, std::memory_order_seq_cst);
    bool got = true;
    while (requests_.load(std::memory_order_seq_cst) == 0) {
      if (wakeup_.wait_until(lock, until) == std::cv_status::timeout) {
        got = requests_.load(std::memory_order_seq_cst) != 0;
        break;
      }
    }
    sleeping_.store(false, std::memory_order_relaxed);
    return got;
  }

  spindle::clock_time requested_at = spindle::clock_time::max();

 private:
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<bool> sleeping_{false};
  std::mutex mutex_;
  std::condition_variable wakeup_;
};

// The host's loop: waits for a tick_soon() request, takes it, ticks, until `finished()`.
// finished() is re-checked every 20 ms even without a request (a task cancelled before it ran
// may finish outside any tick); it must depend only on tasks, so a missing request still hangs
// until `limit` and returns false.
template <class Finished>
bool drive(embedded_executor& executor, stress_host& host, Finished finished,
           std::chrono::steady_clock::duration limit = hang_limit) {
  const auto deadline = steady::now() + limit;
  while (!finished()) {
    if (steady::now() > deadline) return false;
    if (!host.wait_for_request(std::min(deadline, steady::now() + 20ms))) continue;
    host.take_requests();
    executor.tick();
  }
  return true;
}

template <class T>
bool all_finished(const std::vector<spindle::join_handle<T>>& handles) {
  return std::all_of(handles.begin(), handles.end(), [](const auto& h) { return h.is_finished(); });
}

// Foreign threads joined on scope exit; `abort` asks them to give up (a failing test).
class thread_group {
 public:
  thread_group() = default;
  thread_group(const thread_group&) = delete;
  thread_group& operator=(const thread_group&) = delete;
  ~thread_group() { join(); }
  template <class F>
  void add(F&& f) {
    threads_.emplace_back(std::forward<F>(f));
  }
  void join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }
  void abort_and_join() {
    abort.store(true, std::memory_order_relaxed);
    join();
  }
  bool aborted() const noexcept { return abort.load(std::memory_order_relaxed); }

  std::atomic<bool> abort{false};

 private:
  std::vector<std::thread> threads_;
};

// --- 1. channel from foreign threads ---------------------------------------------------------

spindle::task<void> consume_all(spindle::channel<std::uint64_t>& ch, std::vector<std::uint64_t>& got,
                                std::atomic<std::uint64_t>& consumed) {
  for (;;) {
    std::optional<std::uint64_t> item = co_await ch.receive();
    if (!item) break;
    got.push_back(*item);  // ticking thread only
    consumed.fetch_add(1, std::memory_order_release);
    if (got.size() % 32 == 0) co_await spindle::yield_now();
  }
}

// `producers` foreign threads try_send (spinning while full) to consumer tasks on one embedded
// executor, in rounds: each sends its share of the round, then waits until the consumers took
// every item of the round. So every round ends with the consumers blocked on an empty channel
// and no thread sending: a wake-up whose tick request was lost (the last send's, or the first of
// the next round) leaves the round unfinished, a hang. Every 4th round is a solo round (one
// producer sends one item: a single wake-up in flight, nothing else to ask for a tick); the
// others send 1 to 96 items per producer. The last producer closes the channel.
void channel_from_foreign_threads(std::uint32_t producers, embedded_options options,
                                  std::uint64_t total_wanted) {
  const stopwatch clock;
  stress_host host;
  spindle::channel<std::uint64_t> ch(32);
  constexpr std::uint32_t consumers = 4;
  std::vector<std::vector<std::uint64_t>> got(consumers);
  // The plan: items per producer per round, and the cumulative total after each round.
  std::vector<std::vector<std::uint32_t>> share;  // [round][producer]
  std::vector<std::uint64_t> done_after;          // [round]
  std::vector<std::uint64_t> per_producer(producers, 0);
  std::uint64_t total = 0;
  while (total < total_wanted) {
    const std::uint64_t r = share.size();
    std::vector<std::uint32_t> counts(producers, 0);
    if (r % 4 == 0) {
      counts[(r / 4) % producers] = 1;
    } else {
      for (auto& c : counts) c = static_cast<std::uint32_t>(1 + (r * 37) % 96);
    }
    for (std::uint32_t p = 0; p < producers; ++p) {
      per_producer[p] += counts[p];
      total += counts[p];
    }
    share.push_back(std::move(counts));
    done_after.push_back(total);
  }
  std::vector<std::uint64_t> first_id(producers + 1, 0);  // producer p's ids: [first_id[p], first_id[p + 1])
  for (std::uint32_t p = 0; p < producers; ++p) first_id[p + 1] = first_id[p] + per_producer[p];
  const std::uint64_t rounds = share.size();
  std::atomic<std::uint64_t> consumed{0};
  {
    embedded_executor executor(host, options);
    std::vector<spindle::join_handle<void>> handles;
    for (std::uint32_t c = 0; c < consumers; ++c) {
      handles.push_back(executor.spawn(consume_all(ch, got[c], consumed)));
    }
    std::atomic<std::uint32_t> producing{producers};
    thread_group threads;
    for (std::uint32_t p = 0; p < producers; ++p) {
      threads.add([&, p] {
        std::uint64_t next = first_id[p];
        for (std::uint64_t r = 0; r < rounds; ++r) {
          for (std::uint32_t i = 0; i < share[r][p]; ++i) {
            std::uint64_t item = next++;
            while (!ch.try_send(std::move(item))) {
              if (threads.aborted()) return;
              std::this_thread::yield();
            }
          }
          // The round's end: every producer's items taken.
          while (consumed.load(std::memory_order_acquire) < done_after[r]) {
            if (threads.aborted()) return;
            std::this_thread::yield();
          }
        }
        if (producing.fetch_sub(1) == 1) ch.close();
      });
    }
    const bool ok = drive(executor, host, [&] { return all_finished(handles); });
    if (!ok) threads.abort_and_join();
    threads.join();
    ASSERT_TRUE(ok) << "consumers stuck (lost wake-up): consumed " << consumed.load() << " of "
                    << total << ", " << executor.statistics().blocked_tasks
                    << " blocked, has_ready_work=" << executor.has_ready_work();
    for (auto& h : handles) h.join();
    const auto stats = executor.statistics();
    EXPECT_EQ(stats.live_tasks, 0u);
    std::printf("  %llu items in %llu rounds, %u producers: %.2f s, %llu ticks, %llu foreign wakes\n",
                static_cast<unsigned long long>(total), static_cast<unsigned long long>(rounds),
                producers, clock.seconds(), static_cast<unsigned long long>(stats.ticks),
                static_cast<unsigned long long>(stats.foreign_wakes));
  }
  expect_each_exactly_once(got, total);
  // Per consumer, each producer's items arrive in send order (a FIFO channel).
  for (const auto& items : got) {
    std::vector<std::uint64_t> last(producers, 0);
    std::vector<bool> any(producers, false);
    for (std::uint64_t item : items) {
      const auto p = static_cast<std::size_t>(
          std::upper_bound(first_id.begin(), first_id.end(), item) - first_id.begin() - 1);
      if (any[p]) {
        ASSERT_LT(last[p], item) << "producer " << p << " reordered";
      }
      any[p] = true;
      last[p] = item;
    }
  }
}

TEST(EmbeddedStress, ChannelFromForeignThreads) {
  channel_from_foreign_threads(3, {}, scaled(1'200'000, 4 * tsan_factor));
}

TEST(EmbeddedStress, ChannelFromForeignThreadsSmallTickBudget) {
  // Ticks that run at most 2 tasks, one per execute phase, for 4 consumers that also yield:
  // many ticks end with work queued and must ask for re-entry.
  channel_from_foreign_threads(2, {.tasks_per_tick = 2, .tasks_per_execute_phase = 1},
                               scaled(400'000, 4 * tsan_factor));
}

// --- 2. events, semaphores, cancellation from foreign threads ---------------------------------

spindle::task<void> acquire_rounds(spindle::semaphore& s, std::uint64_t rounds,
                                   std::atomic<std::uint64_t>& acquired) {
  for (std::uint64_t r = 0; r < rounds; ++r) {
    co_await s.acquire();
    acquired.fetch_add(1, std::memory_order_release);
  }
}

TEST(EmbeddedStress, SemaphoreReleasedByForeignThreads) {
  // Two foreign threads take turns releasing one permit at a time to 8 tasks, and release the
  // next only once the previous one was acquired: every wake-up is the only one in flight, so a
  // lost one hangs.
  const stopwatch clock;
  stress_host host;
  spindle::semaphore permits(0);
  constexpr std::uint32_t tasks = 8;
  constexpr std::uint32_t releasers = 2;
  const std::uint64_t rounds = scaled(20'000, 4 * tsan_factor);
  const std::uint64_t total = tasks * rounds;
  std::atomic<std::uint64_t> acquired{0};
  embedded_executor executor(host);
  std::vector<spindle::join_handle<void>> handles;
  for (std::uint32_t t = 0; t < tasks; ++t) handles.push_back(executor.spawn(acquire_rounds(permits, rounds, acquired)));
  thread_group threads;
  for (std::uint32_t r = 0; r < releasers; ++r) {
    threads.add([&, r] {
      // Releases permit k for every k with k % releasers == r, once permit k - 1 was acquired.
      for (std::uint64_t k = r; k < total; k += releasers) {
        while (acquired.load(std::memory_order_acquire) < k) {
          if (threads.aborted()) return;
          std::this_thread::yield();
        }
        permits.release();
      }
    });
  }
  const bool ok = drive(executor, host, [&] { return all_finished(handles); });
  if (!ok) threads.abort_and_join();
  threads.join();
  ASSERT_TRUE(ok) << "tasks stuck (lost wake-up): acquired " << acquired.load() << " of " << total;
  for (auto& h : handles) h.join();
  EXPECT_EQ(acquired.load(), total);
  EXPECT_EQ(permits.available(), 0u);
  EXPECT_EQ(permits.waiting(), 0u);
  std::printf("  %llu acquisitions: %.2f s, %llu foreign wakes\n",
              static_cast<unsigned long long>(total), clock.seconds(),
              static_cast<unsigned long long>(executor.statistics().foreign_wakes));
}

// Waits on events[g % 2] for every generation g; counts its wake-ups.
spindle::task<void> event_generations(spindle::event* events, std::uint64_t generations,
                                      std::atomic<std::uint64_t>& woken) {
  for (std::uint64_t g = 0; g < generations; ++g) {
    co_await events[g % 2].wait();
    woken.fetch_add(1, std::memory_order_release);
  }
}

TEST(EmbeddedStress, EventsSetAndResetByForeignThreads) {
  // Per group: `waiters` tasks and two events used alternately. The group's foreign driver waits
  // until every task is queued on events[g % 2] (suspended), then set()s it and reset()s it at
  // once: each queued task must still wake (a reset does not take back a set's wake-ups), and
  // the next generation's event was reset a generation ago, so nobody runs ahead.
  const stopwatch clock;
  stress_host host;
  constexpr std::uint32_t groups = 2;
  constexpr std::uint32_t waiters = 4;
  const std::uint64_t generations = scaled(40'000, 4 * tsan_factor);
  spindle::event events[groups][2];
  std::atomic<std::uint64_t> woken[groups] = {};
  embedded_executor executor(host);
  std::vector<spindle::join_handle<void>> handles;
  for (std::uint32_t g = 0; g < groups; ++g) {
    for (std::uint32_t w = 0; w < waiters; ++w) {
      handles.push_back(executor.spawn(event_generations(events[g], generations, woken[g])));
    }
  }
  thread_group threads;
  for (std::uint32_t g = 0; g < groups; ++g) {
    threads.add([&, g] {
      for (std::uint64_t gen = 0; gen < generations; ++gen) {
        spindle::event& e = events[g][gen % 2];
        while (e.waiting() != waiters) {
          if (threads.aborted()) return;
          std::this_thread::yield();
        }
        ASSERT_EQ(woken[g].load(std::memory_order_acquire), gen * waiters);
        e.set();
        e.reset();
      }
    });
  }
  const bool ok = drive(executor, host, [&] { return all_finished(handles); });
  if (!ok) threads.abort_and_join();
  threads.join();
  ASSERT_TRUE(ok) << "tasks stuck (lost wake-up): woken " << woken[0].load() << " / "
                  << woken[1].load() << " of " << generations * waiters << " each";
  for (auto& h : handles) h.join();
  for (std::uint32_t g = 0; g < groups; ++g) EXPECT_EQ(woken[g].load(), generations * waiters);
  std::printf("  %llu event wake-ups: %.2f s\n",
              static_cast<unsigned long long>(groups * waiters * generations), clock.seconds());
}

spindle::task<void> take_permit(spindle::semaphore& s, std::uint8_t& done, frame_counter) {
  co_await s.acquire();
  done = 1;
}
spindle::task<void> await_event(spindle::event& e, std::uint8_t& done, frame_counter) {
  co_await e.wait();
  done = 1;
}
// `got`: the item + 1 (0: none).
spindle::task<void> take_item(spindle::channel<std::uint64_t>& ch, std::uint64_t& got,
                              std::uint8_t& done, frame_counter) {
  std::optional<std::uint64_t> item = co_await ch.receive();
  got = item ? *item + 1 : 0;
  done = 1;
}

TEST(EmbeddedStress, ForeignCancelsRaceForeignWakes) {
  // Rounds: tasks blocked (or about to block, or not yet run) on a semaphore, an event or a
  // channel; one foreign thread wakes them all (permits, set, items) while another cancels a
  // random third. Each task ends once, completed (with what it waited for) or cancelled (only if
  // it was picked); what cancelled tasks did not take is still there.
  const stopwatch clock;
  const std::uint64_t rounds = scaled(10'000, 0.3 * tsan_factor);
  constexpr std::uint32_t n = 24;
  std::uint64_t completed_total = 0;
  std::uint64_t cancelled_total = 0;
  for (std::uint64_t round = 0; round < rounds; ++round) {
    std::minstd_rand rng(static_cast<std::uint32_t>(round) + 7);
    stress_host host;
    spindle::semaphore permits(0);
    spindle::event ready;
    spindle::channel<std::uint64_t> items(n);
    std::atomic<int> frames{0};
    std::vector<std::uint8_t> done(n, 0);
    std::vector<std::uint64_t> got(n, 0);
    std::vector<std::uint8_t> picked(n, 0);
    std::uint32_t n_sem = 0;
    std::uint32_t n_ch = 0;
    embedded_executor executor(host);
    std::vector<spindle::join_handle<void>> handles;
    for (std::uint32_t i = 0; i < n; ++i) {
      switch (i % 3) {
        case 0:
          handles.push_back(executor.spawn(take_permit(permits, done[i], frame_counter(frames))));
          ++n_sem;
          break;
        case 1:
          handles.push_back(executor.spawn(await_event(ready, done[i], frame_counter(frames))));
          break;
        default:
          handles.push_back(executor.spawn(take_item(items, got[i], done[i], frame_counter(frames))));
          ++n_ch;
          break;
      }
      picked[i] = rng() % 3 == 0;
    }
    // Some rounds let every task block first; others race them from their first run.
    for (std::uint32_t t = round % 3; t > 0; --t) executor.tick();
    thread_group threads;
    threads.add([&, seed = rng()] {  // the canceller
      std::minstd_rand local(seed);
      for (std::uint32_t i = 0; i < n; ++i) {
        if (picked[i]) handles[i].cancel();
        if (local() % 3 == 0) std::this_thread::yield();
      }
    });
    threads.add([&, seed = rng()] {  // the waker
      std::minstd_rand local(seed);
      for (std::uint32_t spin = local() % 4000; spin > 0; --spin) spindle::core::cpu_relax();
      std::uint32_t sem_left = n_sem;
      std::uint32_t ch_left = n_ch;
      bool set = false;
      while (sem_left + ch_left > 0 || !set) {
        switch (local() % 3) {
          case 0:
            if (sem_left > 0) {
              permits.release();
              --sem_left;
            }
            break;
          case 1:
            if (ch_left > 0) {
              std::uint64_t item = ch_left - 1;
              EXPECT_TRUE(items.try_send(std::move(item)));
              --ch_left;
            }
            break;
          default:
            if (!set && local() % 4 == 0) {
              ready.set();
              set = true;
            }
            break;
        }
        if (local() % 4 == 0) std::this_thread::yield();
      }
    });
    const bool ok = drive(executor, host, [&] { return all_finished(handles); });
    threads.join();
    ASSERT_TRUE(ok) << "round " << round << ": tasks stuck (lost wake-up)";
    std::uint32_t sem_completed = 0;
    std::vector<std::uint8_t> item_seen(n_ch, 0);
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto status = handles[i].status();
      ASSERT_TRUE(status == spindle::task_status::completed || status == spindle::task_status::cancelled)
          << "round " << round << " task " << i;
      if (status == spindle::task_status::cancelled) {
        ASSERT_TRUE(picked[i]) << "round " << round << ": task " << i << " cancelled, never picked";
        ASSERT_EQ(done[i], 0);
        ++cancelled_total;
      } else {
        ASSERT_EQ(done[i], 1);
        ++completed_total;
        if (i % 3 == 0) ++sem_completed;
        if (i % 3 == 2) {
          ASSERT_GT(got[i], 0u) << "a receiver completed without an item (channel never closed)";
          ASSERT_EQ(item_seen[got[i] - 1]++, 0) << "item delivered twice";
        }
      }
    }
    // What the cancelled tasks did not take is still there.
    EXPECT_EQ(permits.available(), n_sem - sem_completed) << "round " << round;
    while (std::optional<std::uint64_t> left = items.try_receive()) {
      ASSERT_EQ(item_seen[*left]++, 0) << "item both delivered and left";
    }
    for (std::uint32_t k = 0; k < n_ch; ++k) ASSERT_EQ(item_seen[k], 1) << "item " << k << " lost";
    handles.clear();
    EXPECT_EQ(frames.load(), static_cast<int>(n)) << "round " << round;
    EXPECT_EQ(executor.statistics().live_tasks, 0u);
  }
  std::printf("  %llu rounds: %llu completed, %llu cancelled: %.2f s\n",
              static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(completed_total),
              static_cast<unsigned long long>(cancelled_total), clock.seconds());
  EXPECT_GT(cancelled_total, 0u);
}

// --- 3. turnstiles ------------------------------------------------------------------------------

// One turnstile's shared state: the counter its poll watches and its waker.
struct turnstile_slot {
  std::atomic<std::uint64_t> value{0};
  std::uint64_t target = 0;
  std::uint32_t poll_spin = 0;                  // a slow poll: wake() calls land during it
  std::atomic<bool> in_poll{false};             // a poll read the value and is still running
  std::atomic<std::uint64_t> polls{0};
  std::atomic<std::uint64_t> wakes{0};          // wake() calls on its waker
  std::optional<spindle::embed::waker> waker;  // written by the first poll, before `published`
  std::atomic<bool> published{false};
};

struct counting_poll {
  turnstile_slot* slot;
  std::optional<std::uint64_t> operator()(const spindle::embed::waker& w) const {
    slot->polls.fetch_add(1, std::memory_order_relaxed);
    if (!slot->published.load(std::memory_order_relaxed)) {
      slot->waker.emplace(w);
      slot->published.store(true, std::memory_order_release);
    }
    // relaxed: only the turnstile orders a waker's increments (before its wake()) before the
    // next poll; a poll after the last wake() must see the final value.
    const std::uint64_t v = slot->value.load(std::memory_order_relaxed);
    if (slot->poll_spin > 0) {
      slot->in_poll.store(true, std::memory_order_relaxed);
      for (std::uint32_t i = 0; i < slot->poll_spin; ++i) spindle::core::cpu_relax();
      slot->in_poll.store(false, std::memory_order_relaxed);
    }
    if (v >= slot->target) return v;
    return std::nullopt;
  }
};

spindle::task<std::uint64_t> turnstile_task(turnstile_slot& slot) {
  co_return co_await spindle::embed::turnstile(counting_poll{&slot});
}

// Rounds of `per_round` turnstiles, each awaited by its own task (spawned by `spawn`, run by
// `run` until all handles finish), woken by `wakers` foreign threads: each increments every
// slot's counter (relaxed) and calls wake() after each increment once the waker is published,
// and once more after its last increment. Even rounds are storms (40 increments per waker, 1-3
// wake() calls after each); odd rounds are sparse (the wakers first wait for the waker to be
// published, then 3 increments each, one wake() after each and no extra one; slow polls, and
// each waker waits a little for a poll to be running before it increments and wakes: the
// wake-ups that matter, the last ones, land during a poll that read the value before them, the
// case a wake() must turn into "poll again"). Every 4th round another
// thread cancels one task. Checks: a task not cancelled returns the final value (no lost
// wake-up), polls <= wakes + 1 per turnstile, wake() after completion is harmless.
template <class Spawn, class Run>
void turnstile_rounds(const char* where, std::uint64_t rounds, Spawn spawn, Run run) {
  const stopwatch clock;
  constexpr std::uint32_t per_round = 4;
  constexpr std::uint32_t wakers = 3;
  std::uint64_t polls_total = 0;
  std::uint64_t wakes_total = 0;
  std::uint64_t cancelled = 0;
  for (std::uint64_t round = 0; round < rounds; ++round) {
    const bool storm = round % 2 == 0;
    const std::uint64_t increments = storm ? 40 : 3;
    std::vector<std::unique_ptr<turnstile_slot>> slots;
    std::vector<spindle::join_handle<std::uint64_t>> handles;
    for (std::uint32_t i = 0; i < per_round; ++i) {
      slots.push_back(std::make_unique<turnstile_slot>());
      slots.back()->target = wakers * increments;
      slots.back()->poll_spin = storm ? 0 : 200 + static_cast<std::uint32_t>((round * 7 + i * 13) % 200);
    }
    for (std::uint32_t i = 0; i < per_round; ++i) handles.push_back(spawn(turnstile_task(*slots[i])));
    thread_group threads;
    for (std::uint32_t w = 0; w < wakers; ++w) {
      threads.add([&, storm, increments, seed = static_cast<std::uint32_t>(round * 31 + w)] {
        std::minstd_rand rng(seed);
        auto wake = [&](turnstile_slot& s, std::uint32_t times) {
          for (std::uint32_t k = 0; k < times; ++k) {
            s.wakes.fetch_add(1, std::memory_order_relaxed);
            s.waker->wake();
          }
        };
        // Sparse rounds: wait (a bounded while) for a poll of `s` to be running.
        auto during_poll = [&](turnstile_slot& s) {
          if (storm) return;
          for (int spin = 0; spin < 1000 && !s.in_poll.load(std::memory_order_relaxed); ++spin) {
            if (spin % 64 == 63) std::this_thread::yield();
            spindle::core::cpu_relax();
          }
        };
        if (!storm) {
          // Sparse rounds: every increment is followed by a wake(), so no "last word" below
          // (which would rescue a lost one): wait for the wakers first.
          for (std::size_t i = 0; i < slots.size(); ++i) {
            while (!slots[i]->published.load(std::memory_order_acquire)) {
              if (handles[i].is_finished() || threads.aborted()) break;
              std::this_thread::yield();
            }
          }
        }
        for (std::uint64_t k = 0; k < increments; ++k) {
          for (auto& s : slots) {
            during_poll(*s);
            s->value.fetch_add(1, std::memory_order_relaxed);
            if (s->published.load(std::memory_order_acquire)) wake(*s, storm ? 1 + rng() % 3 : 1);
          }
          if (rng() % (storm ? 8 : 2) == 0) std::this_thread::yield();
        }
        // Storms, the last word: once the waker is there (or the task ended without publishing
        // it: cancelled before its first poll), one more wake-up after the final increment.
        for (std::size_t i = 0; storm && i < slots.size(); ++i) {
          turnstile_slot& s = *slots[i];
          while (!s.published.load(std::memory_order_acquire)) {
            if (handles[i].is_finished() || threads.aborted()) break;
            std::this_thread::yield();
          }
          if (s.published.load(std::memory_order_acquire)) wake(s, 1);
        }
      });
    }
    if (round % 4 == 3) {
      threads.add([&, seed = static_cast<std::uint32_t>(round)] {
        std::minstd_rand rng(seed);
        for (std::uint32_t spin = rng() % 2000; spin > 0; --spin) spindle::core::cpu_relax();
        handles[rng() % per_round].cancel();
      });
    }
    const bool ok = run(handles);
    if (!ok) threads.abort_and_join();
    threads.join();
    ASSERT_TRUE(ok) << where << " round " << round << ": a turnstile task is stuck (lost wake-up)";
    for (std::uint32_t i = 0; i < per_round; ++i) {
      turnstile_slot& s = *slots[i];
      const std::uint64_t polls = s.polls.load();
      const std::uint64_t wakes = s.wakes.load();
      ASSERT_LE(polls, wakes + 1) << where << " round " << round << " turnstile " << i;
      if (handles[i].status() == spindle::task_status::cancelled) {
        ++cancelled;
      } else {
        ASSERT_EQ(handles[i].join(), s.target) << where << " round " << round;
      }
      polls_total += polls;
      wakes_total += wakes;
      // Harmless after completion (and after cancellation): the block is done.
      if (s.waker) s.waker->wake();
    }
  }
  std::printf("  %s: %llu turnstiles, %llu polls for %llu wakes, %llu cancelled: %.2f s\n", where,
              static_cast<unsigned long long>(rounds * per_round),
              static_cast<unsigned long long>(polls_total), static_cast<unsigned long long>(wakes_total),
              static_cast<unsigned long long>(cancelled), clock.seconds());
}

TEST(EmbeddedStress, TurnstileWokenFromForeignThreads) {
  stress_host host;
  embedded_executor executor(host);
  turnstile_rounds(
      "embedded", scaled(2000, 3 * tsan_factor),
      [&](spindle::task<std::uint64_t> body) { return executor.spawn(std::move(body)); },
      [&](const std::vector<spindle::join_handle<std::uint64_t>>& handles) {
        return drive(executor, host, [&] { return all_finished(handles); });
      });
}

TEST(EmbeddedStress, TurnstileWokenFromForeignThreadsOnRuntime) {
  spindle::runtime rt({.workers = 2});
  turnstile_rounds(
      "runtime", scaled(800, 2 * tsan_factor),
      [&](spindle::task<std::uint64_t> body) { return rt.spawn(std::move(body)); },
      [&](const std::vector<spindle::join_handle<std::uint64_t>>& handles) {
        return eventually([&] { return all_finished(handles); }, hang_limit);
      });
}

// --- 4. the re-entry wrapper against a naive host ---------------------------------------------

// The naive host: one "tick wanted" flag, set by tick_soon() and cleared when a tick ends, whatever
// arrived during the tick. A mutex and a condition variable; producers_done wakes the host
// without asking for a tick.
class naive_host final : public spindle::embed::integration {
 public:
  spindle::clock_time now() const noexcept override { return virtual_start; }
  void tick_at(spindle::clock_time) noexcept override {}
  void tick_soon() noexcept override {
    std::lock_guard guard(mutex_);
    wanted_ = true;
    wakeup_.notify_one();
  }
  void clear() {
    std::lock_guard guard(mutex_);
    wanted_ = false;
  }
  bool wanted() {
    std::lock_guard guard(mutex_);
    return wanted_;
  }
  void producers_finished() {
    std::lock_guard guard(mutex_);
    producers_done_ = true;
    wakeup_.notify_one();
  }
  enum class wait_result { tick, idle, timeout };
  // Waits for a tick request; `idle`: none, and the producers are done.
  wait_result wait(steady::time_point until) {
    std::unique_lock lock(mutex_);
    if (!wakeup_.wait_until(lock, until, [this] { return wanted_ || producers_done_; })) {
      return wait_result::timeout;
    }
    return wanted_ ? wait_result::tick : wait_result::idle;
  }

 private:
  std::mutex mutex_;
  std::condition_variable wakeup_;
  bool wanted_ = false;
  bool producers_done_ = false;
};

struct work_node {
  work_node* next = nullptr;
  std::uint32_t id = 0;
};

TEST(EmbeddedStress, ReentryWrapperKeepsANaiveHostTicking) {
  // reentering_integration on its own (as a host would use it): the "tick" is the host's,
  // around the executor's own action queue type (spindle::core::intrusive_mpsc_stack, pushed
  // from foreign threads, taken as the executor's service phase takes it). The naive host clears
  // its flag when the tick ends, just before end_tick(), which passes on a request held during
  // the tick. Foreign threads push work and call tick_soon() concurrently. Check: the host never
  // goes idle (flag clear after the producers finished) with work queued; every item is taken
  // exactly once.
  {
    // Sensitivity, deterministic: a request arriving during a tick, after the tick's look.
    naive_host bare;
    spindle::embed::reentering_integration wrapper(bare);
    spindle::core::intrusive_mpsc_stack<work_node> queue;
    work_node node;
    wrapper.begin_tick();
    EXPECT_EQ(queue.take_all(), nullptr);
    ASSERT_TRUE(queue.push(&node));
    bare.tick_soon();  // unwrapped: the naive host loses it
    wrapper.tick_soon();  // wrapped: held
    bare.clear();
    wrapper.end_tick();
    EXPECT_TRUE(bare.wanted()) << "the wrapper did not pass the held request on";
    EXPECT_EQ(queue.take_all(), &node);
  }
  // Rounds: each ends when the producers finished and the host went idle (its check), so every
  // round's last requests are a chance to lose one. The host's tick spins a little per item (a
  // tick takes time, so requests arrive during it, after its look).
  const stopwatch clock;
  constexpr std::uint32_t producers = 3;
  const std::uint64_t rounds = scaled(100, 4 * tsan_factor);
  constexpr std::uint64_t per_producer = 1000;
  constexpr std::uint64_t per_round = producers * per_producer;
  std::vector<work_node> nodes(per_round);
  for (std::uint64_t i = 0; i < per_round; ++i) nodes[i].id = static_cast<std::uint32_t>(i);
  std::uint64_t ticks = 0;
  std::uint64_t taken_total = 0;
  for (std::uint64_t round = 0; round < rounds; ++round) {
    std::vector<std::uint8_t> taken(per_round, 0);
    std::uint64_t taken_count = 0;
    naive_host host;
    spindle::embed::reentering_integration wrapper(host);
    spindle::core::intrusive_mpsc_stack<work_node> queue;
    thread_group threads;
    for (std::uint32_t p = 0; p < producers; ++p) {
      threads.add([&, p, seed = static_cast<std::uint32_t>(round * 7 + p)] {
        std::minstd_rand rng(seed);
        for (std::uint64_t i = 0; i < per_producer; ++i) {
          EXPECT_TRUE(queue.push(&nodes[p * per_producer + i]));
          wrapper.tick_soon();
          if (rng() % 16 == 0) std::this_thread::yield();
        }
      });
    }
    std::thread finisher([&] {
      threads.join();
      host.producers_finished();
    });
    const auto deadline = steady::now() + hang_limit;
    bool lost = false;
    bool timed_out = false;
    for (;;) {
      const auto r = host.wait(deadline);
      if (r == naive_host::wait_result::timeout) {
        timed_out = true;
        break;
      }
      if (r == naive_host::wait_result::idle) {
        // Flag clear after every producer finished: nothing may be left.
        lost = !queue.empty();
        break;
      }
      wrapper.begin_tick();
      ++ticks;
      for (work_node* n = queue.take_all(); n != nullptr;) {
        work_node* next = n->next;
        ++taken[n->id];
        ++taken_count;
        for (int spin = 0; spin < 20; ++spin) spindle::core::cpu_relax();
        n = next;
      }
      host.clear();  // naive: the tick ends
      wrapper.end_tick();
    }
    finisher.join();
    ASSERT_FALSE(timed_out) << "round " << round << ": the host never became idle";
    ASSERT_FALSE(lost) << "round " << round
                       << ": the naive host went idle with work queued: a lost re-entry";
    EXPECT_EQ(taken_count, per_round);
    for (std::uint64_t i = 0; i < per_round; ++i) ASSERT_EQ(taken[i], 1) << "item " << i;
    taken_total += taken_count;
  }
  std::printf("  %llu items in %llu rounds, %llu ticks: %.2f s\n",
              static_cast<unsigned long long>(taken_total), static_cast<unsigned long long>(rounds),
              static_cast<unsigned long long>(ticks), clock.seconds());
}

spindle::task<void> count_run(std::atomic<std::uint32_t>& runs) {
  runs.fetch_add(1, std::memory_order_relaxed);
  co_return;
}
spindle::task<void> acquire_n(spindle::semaphore& s, std::uint64_t n, std::atomic<std::uint64_t>& acquired) {
  for (std::uint64_t i = 0; i < n; ++i) {
    co_await s.acquire();
    acquired.fetch_add(1, std::memory_order_relaxed);
  }
}

TEST(EmbeddedStress, SpawnsAndWakesFromForeignThreadsNeverLeaveWorkUnrun) {
  // The executor (which wraps its host in reentering_integration itself) with small tick
  // budgets (most ticks ask for re-entry) and a host that takes its requests before each tick.
  // Foreign threads spawn tasks and release permits that embedded tasks wait for. The host
  // stops only once the producers finished, no request is pending and has_ready_work() is false;
  // no request pending while has_ready_work() is true is a lost re-entry. Every spawned task
  // ran exactly once, every permit was taken.
  const stopwatch clock;
  stress_host host;
  embedded_executor executor(host, {.tasks_per_tick = 6, .tasks_per_execute_phase = 2});
  constexpr std::uint32_t spawners = 2;
  constexpr std::uint32_t acquirers = 4;
  const std::uint64_t spawns_each = scaled(200'000, 4 * tsan_factor);
  const std::uint64_t permits_each = scaled(100'000, 4 * tsan_factor);  // per acquirer task
  std::vector<std::atomic<std::uint32_t>> runs(spawners * spawns_each);
  std::vector<std::vector<spindle::join_handle<void>>> spawned(spawners);
  spindle::semaphore permits(0);
  std::atomic<std::uint64_t> acquired{0};
  std::vector<spindle::join_handle<void>> waiting;
  for (std::uint32_t a = 0; a < acquirers; ++a) waiting.push_back(executor.spawn(acquire_n(permits, permits_each, acquired)));
  std::atomic<std::uint32_t> producing{spawners + 1};
  thread_group threads;
  for (std::uint32_t s = 0; s < spawners; ++s) {
    threads.add([&, s] {
      spawned[s].reserve(spawns_each);
      for (std::uint64_t i = 0; i < spawns_each; ++i) {
        spawned[s].push_back(executor.spawn(count_run(runs[s * spawns_each + i])));
        if (i % 256 == 0) std::this_thread::yield();
      }
      producing.fetch_sub(1, std::memory_order_release);
    });
  }
  threads.add([&] {
    const std::uint64_t total = acquirers * permits_each;
    for (std::uint64_t released = 0; released < total;) {
      while (released >= acquired.load(std::memory_order_relaxed) + 2 * acquirers) {
        if (threads.aborted()) return;
        std::this_thread::yield();
      }
      permits.release();
      ++released;
    }
    producing.fetch_sub(1, std::memory_order_release);
  });
  const auto deadline = steady::now() + hang_limit;
  bool lost = false;
  bool timed_out = false;
  std::uint64_t ticks = 0;
  for (;;) {
    if (producing.load(std::memory_order_acquire) == 0) {
      if (host.take_requests() > 0) {
        executor.tick();
        ++ticks;
        continue;
      }
      lost = executor.has_ready_work();
      break;
    }
    if (steady::now() > deadline) {
      timed_out = true;
      break;
    }
    if (!host.wait_for_request(std::min(deadline, steady::now() + 20ms))) continue;
    host.take_requests();
    executor.tick();
    ++ticks;
  }
  if (lost || timed_out) threads.abort_and_join();
  threads.join();
  ASSERT_FALSE(timed_out) << "stuck: acquired " << acquired.load();
  ASSERT_FALSE(lost) << "no tick requested while work was ready: a lost re-entry";
  EXPECT_TRUE(all_finished(waiting));
  EXPECT_EQ(acquired.load(), acquirers * permits_each);
  for (std::uint32_t s = 0; s < spawners; ++s) {
    for (auto& h : spawned[s]) {
      ASSERT_TRUE(h.is_finished());
      h.join();
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1u) << "task " << i;
  EXPECT_EQ(executor.statistics().live_tasks, 0u);
  std::printf("  %llu spawns + %llu permits, %llu ticks: %.2f s\n",
              static_cast<unsigned long long>(spawners * spawns_each),
              static_cast<unsigned long long>(acquirers * permits_each),
              static_cast<unsigned long long>(ticks), clock.seconds());
}

spindle::task<void> nothing() { co_return; }

// The host contract (integration.hpp): a host consumes its "tick wanted" state before it calls
// tick(), never after tick() returns, because the re-entry a tick asks for (work left over after
// tasks_per_tick, a request made during the tick) reaches the host while tick() still runs.
// A tick that runs 1 of 2 queued tasks asks for re-entry; the loop runs the second.
TEST(EmbeddedStress, AHostThatClearsItsFlagBeforeTickingRunsEverything) {
  naive_host host;
  embedded_executor executor(host, {.tasks_per_tick = 1, .tasks_per_execute_phase = 1});
  auto first = executor.spawn(nothing());
  auto second = executor.spawn(nothing());
  for (int guard = 0; host.wanted() && guard < 100; ++guard) {
    host.clear();  // consumed before the tick
    executor.tick();
  }
  EXPECT_TRUE(first.is_finished());
  EXPECT_TRUE(second.is_finished());
  EXPECT_FALSE(executor.has_ready_work());
}

// --- 5. runtime <-> embedded ----------------------------------------------------------------------

spindle::task<void> send_range(spindle::channel<std::uint64_t>& ch, std::uint64_t first,
                               std::uint64_t count, std::atomic<std::uint32_t>& writers) {
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t item = first + i;
    if (i % 3 == 0 && ch.try_send(std::move(item))) continue;
    co_await ch.send(first + i);
  }
  if (writers.fetch_sub(1) == 1) ch.close();
}

// Receives from `in` and forwards to `out`; the last writer of `out` closes it.
spindle::task<void> relay(spindle::channel<std::uint64_t>& in, spindle::channel<std::uint64_t>& out,
                          std::atomic<std::uint32_t>& writers, std::uint64_t& relayed) {
  for (;;) {
    std::optional<std::uint64_t> item = co_await in.receive();
    if (!item) break;
    co_await out.send(*item);
    ++relayed;
  }
  if (writers.fetch_sub(1) == 1) out.close();
}

spindle::task<void> collect(spindle::channel<std::uint64_t>& ch, std::vector<std::uint64_t>& got) {
  for (;;) {
    std::optional<std::uint64_t> item = co_await ch.receive();
    if (!item) break;
    got.push_back(*item);
  }
}

TEST(EmbeddedStress, RuntimeAndEmbeddedTasksExchangeThroughChannels) {
  // runtime producers -> to_embedded -> embedded relays -> to_runtime -> runtime collectors, and
  // embedded producers -> to_runtime directly. Both directions wake across hosts: runtime
  // workers wake embedded tasks (action queue + tick_soon), the ticking thread wakes runtime
  // tasks. Every item exactly once.
  const stopwatch clock;
  stress_host host;
  spindle::channel<std::uint64_t> to_embedded(16);
  spindle::channel<std::uint64_t> to_runtime(16);
  constexpr std::uint32_t runtime_producers = 2;
  constexpr std::uint32_t relays = 2;
  constexpr std::uint32_t embedded_producers = 2;
  constexpr std::uint32_t collectors = 2;
  const std::uint64_t per_producer = scaled(60'000, 4 * tsan_factor);
  const std::uint64_t total = (runtime_producers + embedded_producers) * per_producer;
  std::vector<std::vector<std::uint64_t>> got(collectors);
  std::vector<std::uint64_t> relayed(relays, 0);
  std::atomic<std::uint32_t> to_embedded_writers{runtime_producers};
  std::atomic<std::uint32_t> to_runtime_writers{relays + embedded_producers};
  spindle::runtime rt({.workers = 2});
  {
    embedded_executor executor(host);
    std::vector<spindle::join_handle<void>> embedded;
    std::vector<spindle::join_handle<void>> on_runtime;
    for (std::uint32_t c = 0; c < collectors; ++c) on_runtime.push_back(rt.spawn(collect(to_runtime, got[c])));
    for (std::uint32_t r = 0; r < relays; ++r) {
      embedded.push_back(executor.spawn(relay(to_embedded, to_runtime, to_runtime_writers, relayed[r])));
    }
    for (std::uint32_t p = 0; p < embedded_producers; ++p) {
      embedded.push_back(executor.spawn(
          send_range(to_runtime, (runtime_producers + p) * per_producer, per_producer, to_runtime_writers)));
    }
    for (std::uint32_t p = 0; p < runtime_producers; ++p) {
      on_runtime.push_back(rt.spawn(send_range(to_embedded, p * per_producer, per_producer, to_embedded_writers)));
    }
    const bool ok = drive(executor, host, [&] { return all_finished(embedded); });
    ASSERT_TRUE(ok) << "embedded tasks stuck (lost wake-up)";
    for (auto& h : embedded) h.join();
    for (auto& h : on_runtime) join_bounded(std::move(h), hang_limit);
    EXPECT_EQ(executor.statistics().live_tasks, 0u);
  }
  std::uint64_t relayed_total = 0;
  for (std::uint64_t r : relayed) relayed_total += r;
  EXPECT_EQ(relayed_total, runtime_producers * per_producer);
  expect_each_exactly_once(got, total);
  std::printf("  %llu items: %.2f s\n", static_cast<unsigned long long>(total), clock.seconds());
}

// --- 6. destruction with tasks in every state --------------------------------------------------

struct never_ready_poll {
  std::optional<spindle::embed::waker>* out;
  std::optional<int> operator()(const spindle::embed::waker& w) const {
    if (!*out) out->emplace(w);
    return std::nullopt;
  }
};

spindle::task<void> blocked_on_event(spindle::event& e, std::uint8_t& done, frame_counter) {
  co_await e.wait();
  done = 1;
}
spindle::task<void> blocked_on_semaphore(spindle::semaphore& s, std::uint8_t& done, frame_counter) {
  co_await s.acquire();
  done = 1;
}
spindle::task<void> blocked_on_channel(spindle::channel<std::uint64_t>& ch, std::uint8_t& done,
                                       frame_counter) {
  std::optional<std::uint64_t> item = co_await ch.receive();
  (void)item;
  done = 1;
}
spindle::task<void> sleeping(std::uint8_t& done, frame_counter) {
  co_await spindle::sleep_for(1h);  // host time never moves
  done = 1;
}
spindle::task<void> yielding_forever(frame_counter) {
  for (;;) co_await spindle::yield_now();
}
spindle::task<void> blocked_on_turnstile(std::optional<spindle::embed::waker>& waker,
                                         std::uint8_t& done, frame_counter) {
  co_await spindle::embed::turnstile(never_ready_poll{&waker});
  done = 1;
}
spindle::task<void> event_waiter(spindle::event& e) { co_await e.wait(); }
spindle::task<void> joining(spindle::event& e, std::uint8_t& done, frame_counter) {
  auto child = spindle::spawn(event_waiter(e));
  co_await std::move(child);
  done = 1;
}
spindle::task<void> completes(std::uint8_t& done, frame_counter) {
  done = 1;
  co_return;
}

TEST(EmbeddedStress, DestructionEndsEveryTaskInEveryState) {
  // Rounds: tasks of random kinds (blocked on an event, a semaphore, a channel, a turnstile, a
  // join; sleeping; yielding forever; completing at once), 0-2 ticks, then maybe a foreign
  // thread wakes some of them (set, permits, items, turnstile wakes) and stops, maybe more
  // ticks, maybe the event and the channel are destroyed first (their waiters woken as
  // cancelled), then the executor. Every handle is finished, completed exactly when the body
  // reached its end, else cancelled; every frame destroyed once; the turnstile wakers kept by
  // the test are harmless afterwards.
  const stopwatch clock;
  const std::uint64_t rounds = scaled(20'000, 0.2 * tsan_factor);
  constexpr std::uint32_t n = 16;
  std::uint64_t completed_total = 0;
  std::uint64_t cancelled_total = 0;
  for (std::uint64_t round = 0; round < rounds; ++round) {
    std::minstd_rand rng(static_cast<std::uint32_t>(round) * 2654435761u + 1);
    stress_host host;
    std::atomic<int> frames{0};
    std::vector<std::uint8_t> done(n, 0);
    std::vector<std::uint8_t> kind(n, 0);
    std::vector<std::optional<spindle::embed::waker>> wakers(n);
    spindle::semaphore permits(0);  // outlives the executor (a permit handed to a destroyed frame returns)
    auto ready = std::make_unique<spindle::event>();
    auto items = std::make_unique<spindle::channel<std::uint64_t>>(n);
    auto executor = std::make_unique<embedded_executor>(host);
    std::vector<spindle::join_handle<void>> handles;
    for (std::uint32_t i = 0; i < n; ++i) {
      kind[i] = static_cast<std::uint8_t>(rng() % 8);
      frame_counter fc(frames);
      switch (kind[i]) {
        case 0: handles.push_back(executor->spawn(blocked_on_event(*ready, done[i], std::move(fc)))); break;
        case 1: handles.push_back(executor->spawn(blocked_on_semaphore(permits, done[i], std::move(fc)))); break;
        case 2: handles.push_back(executor->spawn(blocked_on_channel(*items, done[i], std::move(fc)))); break;
        case 3: handles.push_back(executor->spawn(sleeping(done[i], std::move(fc)))); break;
        case 4: handles.push_back(executor->spawn(yielding_forever(std::move(fc)))); break;
        case 5: handles.push_back(executor->spawn(blocked_on_turnstile(wakers[i], done[i], std::move(fc)))); break;
        case 6: handles.push_back(executor->spawn(joining(*ready, done[i], std::move(fc)))); break;
        default: handles.push_back(executor->spawn(completes(done[i], std::move(fc)))); break;
      }
    }
    for (std::uint32_t t = rng() % 3; t > 0; --t) executor->tick();
    if (rng() % 2 == 0) {
      // A foreign thread wakes some, then stops using the primitives.
      const std::uint32_t seed = rng();
      std::thread foreign([&, seed] {
        std::minstd_rand local(seed);
        if (local() % 2 == 0) ready->set();
        permits.release(local() % 3);
        for (std::uint32_t k = local() % 3; k > 0; --k) {
          std::uint64_t item = k;
          (void)items->try_send(std::move(item));
        }
        // The turnstile wakers the tasks published (read after the ticks that wrote them:
        // the thread's start orders them).
        for (auto& w : wakers) {
          if (w && local() % 2 == 0) w->wake();
        }
      });
      foreign.join();
    }
    for (std::uint32_t t = rng() % 2; t > 0; --t) executor->tick();
    const auto stats = executor->statistics();
    std::uint64_t unfinished = 0;
    for (const auto& h : handles) unfinished += h.is_finished() ? 0 : 1;
    ASSERT_GE(stats.live_tasks, unfinished) << "round " << round;
    if (rng() % 3 == 0) {  // primitives first: their waiters are woken as cancelled (queued)
      ready.reset();
      items.reset();
    }
    executor.reset();
    for (std::uint32_t i = 0; i < n; ++i) {
      ASSERT_TRUE(handles[i].is_finished()) << "round " << round << " task " << i;
      const auto status = handles[i].status();
      if (done[i] != 0) {
        ASSERT_EQ(status, spindle::task_status::completed) << "round " << round << " kind " << int(kind[i]);
        ++completed_total;
      } else {
        ASSERT_EQ(status, spindle::task_status::cancelled) << "round " << round << " kind " << int(kind[i]);
        ++cancelled_total;
      }
      // Harmless after the turnstile ended (its frame was destroyed).
      if (wakers[i]) wakers[i]->wake();
    }
    handles.clear();
    ASSERT_EQ(frames.load(), static_cast<int>(n)) << "round " << round;
  }
  std::printf("  %llu rounds: %llu completed, %llu cancelled at destruction: %.2f s\n",
              static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(completed_total),
              static_cast<unsigned long long>(cancelled_total), clock.seconds());
  EXPECT_GT(cancelled_total, 0u);
  EXPECT_GT(completed_total, 0u);
}

}  // namespace
