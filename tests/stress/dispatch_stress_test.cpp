// Stress for the dispatcher (spindle/dispatch/dispatcher.hpp): foreign threads submit while
// others cancel, close the dispatcher or destroy the runtime under them, in every mode.
//
// Every accepted submission is accounted for exactly once: its future ends either as its value
// (and its body ran to its end exactly once) or as task_cancelled (and its body never reached
// its end, and someone's cancel won for it, or a close(cancel_all) / runtime shutdown ended it);
// nothing hangs, and the number of bodies that ran to their end equals the number of values.
// In the sequential modes the bodies also run one at a time, each submitter's in its order.
//
// Scale: about a million submissions per test in release (1 to 15 s each on 2 cores); scaled()
// runs a twentieth under ThreadSanitizer (about 1 to 5 s each), SPINDLE_SYNC_SCALE overrides.
// Nothing sleeps: threads poll (yielding) or block; no timing is asserted. A hang becomes a
// failure: every wait is bounded by `hang_limit`, a dispatcher whose close() does not return is
// leaked (destroying it would hang as well), and a test stops at its first failing round.
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace spindle::testing;
using spindle::close_policy;
using spindle::dispatch_mode;
using steady = std::chrono::steady_clock;
using future_type = spindle::dispatch_future<std::uint64_t>;

// Turns a hang into a failure; far above anything a round needs, even under TSan.
constexpr auto hang_limit = std::chrono::seconds(60);
constexpr double tsan_factor = 0.05;
constexpr std::uint32_t submitters = 4;
constexpr std::uint64_t none = ~std::uint64_t(0);

const char* mode_name(dispatch_mode mode) { return spindle::to_string(mode); }

bool in_order(dispatch_mode mode) { return mode != dispatch_mode::parallel; }

struct stopwatch {
  steady::time_point start = steady::now();
  double seconds() const { return std::chrono::duration<double>(steady::now() - start).count(); }
};

// --- what the bodies record ------------------------------------------------------------------

// The value of item `id` (distinct per item, never 0).
std::uint64_t value_of(std::uint64_t id) { return (id * 0x9E3779B97F4A7C15ull) | 1u; }

// Per item: whether its body started, how often it ran to its end, and when (a ticket from one
// counter: in the sequential modes, bodies end in the order they ran). The futures' completion
// publishes these to the checking thread (relaxed is enough here).
struct census {
  explicit census(std::size_t items) : started(items), completed(items), ticket(items) {}
  std::vector<std::atomic<std::uint8_t>> started;
  std::vector<std::atomic<std::uint8_t>> completed;
  std::vector<std::atomic<std::uint64_t>> ticket;
  std::atomic<std::uint64_t> next_ticket{1};
  std::atomic<std::uint64_t> last_forever{none};  // the `forever` body that started last
  std::atomic<int> inside{0};                     // bodies between their start and their end (or destruction)
  std::atomic<int> most_inside{0};

  void start(std::uint64_t id) { started[id].store(1, std::memory_order_release); }
  void complete(std::uint64_t id) {
    completed[id].fetch_add(1, std::memory_order_relaxed);
    ticket[id].store(next_ticket.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
  }
};

// Counts a body as inside from its start to its end, or to its frame's destruction.
class occupancy {
 public:
  explicit occupancy(census& c) : census_(c) { raise_max(c.most_inside, c.inside.fetch_add(1) + 1); }
  ~occupancy() { census_.inside.fetch_sub(1); }
  occupancy(const occupancy&) = delete;
  occupancy& operator=(const occupancy&) = delete;

 private:
  census& census_;
};

// A task body: yields `yields` times first (each yield is where a cancel reaches it).
spindle::task<std::uint64_t> work(census& c, std::uint64_t id, int yields) {
  occupancy here(c);
  c.start(id);
  for (int k = 0; k < yields; ++k) co_await spindle::yield_now();
  c.complete(id);
  co_return value_of(id);
}

// A callable body: once started it always runs to its end.
struct work_function {
  census* c;
  std::uint64_t id;
  std::uint64_t operator()() const {
    occupancy here(*c);
    c->start(id);
    c->complete(id);
    return value_of(id);
  }
};

// A body that never ends by itself: it waits on an event nobody sets (ends only when
// cancelled, or when runtime shutdown destroys it).
spindle::task<std::uint64_t> forever(census& c, std::uint64_t id, spindle::event& never) {
  occupancy here(c);
  c.start(id);
  c.last_forever.store(id, std::memory_order_release);
  co_await never.wait();
  c.complete(id);
  co_return value_of(id);
}

// Item `id`'s body: a callable, or a task yielding 0, 1 or 3 times; with `never`, one item in
// 250 waits forever instead.
bool is_forever(std::uint64_t id) { return id % 250 == 249; }

future_type submit_item(spindle::dispatcher& d, census& c, std::uint64_t id,
                        spindle::event* never = nullptr) {
  if (never != nullptr && is_forever(id)) return d.submit(forever(c, id, *never));
  switch (id % 4) {
    case 0:
      return d.submit(work_function{&c, id});
    case 1:
      return d.submit(work(c, id, 0));
    case 2:
      return d.submit(work(c, id, 1));
    default:
      return d.submit(work(c, id, 3));
  }
}

// --- what the submitters keep ------------------------------------------------------------------

// Item i of submitter t is t * per_submitter + i. A submitter stores its item's future and cancel
// action, then publishes them with `accepted[t]` (release); other threads read the actions of
// published items only, and the futures once the submitters were joined (or, for is_ready(),
// once published).
struct ledger {
  ledger(std::uint32_t threads, std::uint64_t per)
      : per_submitter(per),
        futures(threads * per),
        cancels(threads * per),
        wins(threads * per),
        accepted(threads) {}

  std::uint64_t id(std::uint32_t t, std::uint64_t i) const { return t * per_submitter + i; }
  std::uint32_t submitter_of(std::uint64_t id) const {
    return static_cast<std::uint32_t>(id / per_submitter);
  }
  std::uint64_t index_of(std::uint64_t id) const { return id % per_submitter; }
  bool published(std::uint64_t id) const {
    return accepted[submitter_of(id)].load(std::memory_order_acquire) > index_of(id);
  }
  std::uint64_t total_accepted() const {
    std::uint64_t sum = 0;
    for (const auto& a : accepted) sum += a.load(std::memory_order_relaxed);
    return sum;
  }
  void publish(std::uint32_t t, std::uint64_t i, future_type future) {
    const std::uint64_t item = id(t, i);
    futures[item] = std::move(future);
    cancels[item] = futures[item].cancel_action();
    accepted[t].store(i + 1, std::memory_order_release);
  }
  // Cancels through a copy of the item's cancel action (any thread, once published).
  bool cancel(std::uint64_t item) {
    const spindle::dispatch_cancel action = cancels[item];
    if (!action()) return false;
    wins[item].fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  std::uint64_t per_submitter;
  std::vector<future_type> futures;
  std::vector<spindle::dispatch_cancel> cancels;
  std::vector<std::atomic<std::uint32_t>> wins;  // cancel calls that returned true
  std::vector<std::atomic<std::uint64_t>> accepted;
};

// --- checking ----------------------------------------------------------------------------------

// Problems found by a thread of the test (the first few are kept for the report).
struct problems {
  std::atomic<std::uint64_t> count{0};
  std::mutex lock;
  std::string first;

  template <class... Parts>
  void add(const Parts&... parts) {
    if (count.fetch_add(1) >= 10) return;
    std::ostringstream line;
    (line << ... << parts);
    std::lock_guard guard(lock);
    first += "  " + line.str() + "\n";
  }
  bool any() const { return count.load() != 0; }
};

#define EXPECT_NO_PROBLEMS(p) EXPECT_EQ((p).count.load(), 0u) << (p).first

enum class ending : std::uint8_t { value, cancelled, exception, hung };

// Waits (yielding) for `f` until `deadline` at most, then consumes it.
ending settle(future_type& f, steady::time_point deadline, std::uint64_t& value) {
  while (!f.is_ready()) {
    if (steady::now() >= deadline) return ending::hung;
    std::this_thread::yield();
  }
  try {
    value = f.get();
    return ending::value;
  } catch (const spindle::task_cancelled&) {
    return ending::cancelled;
  } catch (...) {
    return ending::exception;
  }
}

// Checks the items of each submitter in submission order: call next_submitter() before each.
class checker {
 public:
  checker(census& c, problems& p, bool ordered) : census_(c), problems_(p), ordered_(ordered) {}

  void next_submitter() { last_ticket_ = 0; }

  // Settles item `id` (waiting until `deadline`) and checks it: a value must be the right one
  // from a body that ran to its end exactly once; a cancelled ending must be allowed
  // (`may_be_cancelled`) and come from a body that never reached its end; `must_be_cancelled`
  // for bodies that cannot end by themselves.
  void item(std::uint64_t id, future_type& f, bool may_be_cancelled, steady::time_point deadline,
            bool must_be_cancelled = false) {
    std::uint64_t value = 0;
    const ending e = settle(f, deadline, value);
    const unsigned completions = census_.completed[id].load(std::memory_order_relaxed);
    switch (e) {
      case ending::hung:
        ++hung;
        problems_.add("item ", id,
                      ": its future never completed (body started: ", int(census_.started[id].load()),
                      ", ran to its end: ", completions, ")");
        return;
      case ending::exception:
        problems_.add("item ", id, ": ended with an exception");
        return;
      case ending::cancelled:
        ++cancelled;
        if (!may_be_cancelled) problems_.add("item ", id, ": cancelled, but nobody cancelled it");
        if (completions != 0) problems_.add("item ", id, ": cancelled after its body ran to its end");
        return;
      case ending::value:
        ++values;
        if (must_be_cancelled) problems_.add("item ", id, ": a body that cannot end ended with a value");
        if (value != value_of(id)) problems_.add("item ", id, ": wrong value ", value);
        if (completions != 1)
          problems_.add("item ", id, ": value, but its body ran to its end ", completions, " times");
        if (ordered_) {
          const std::uint64_t ticket = census_.ticket[id].load(std::memory_order_relaxed);
          if (ticket <= last_ticket_) problems_.add("item ", id, ": ran out of its submitter's order");
          last_ticket_ = ticket;
        }
        return;
    }
  }

  // After all items: bodies run to their end == values; one at a time in the sequential modes.
  void finish(std::size_t items) {
    std::uint64_t completions = 0;
    for (std::size_t i = 0; i < items; ++i)
      completions += census_.completed[i].load(std::memory_order_relaxed);
    if (hung == 0 && completions != values) {
      problems_.add(completions, " bodies ran to their end but ", values, " futures hold a value");
    }
    if (ordered_ && census_.most_inside.load() > 1) {
      problems_.add(census_.most_inside.load(), " bodies ran at once in a sequential mode");
    }
  }

  std::uint64_t values = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t hung = 0;

 private:
  census& census_;
  problems& problems_;
  bool ordered_;
  std::uint64_t last_ticket_ = 0;
};

// A job on a helper thread, started at once; wait() bounds how long it may take.
class bounded_job {
 public:
  explicit bounded_job(std::function<void()> job) {
    std::packaged_task<void()> task(std::move(job));
    done_ = task.get_future();
    thread_ = std::thread(std::move(task));
  }
  bounded_job(const bounded_job&) = delete;
  bounded_job& operator=(const bounded_job&) = delete;
  ~bounded_job() {
    if (thread_.joinable()) wait();
  }
  // Blocks for at most hang_limit. False if the job did not return: its thread is then left
  // blocked (detached), with whatever the job refers to.
  bool wait() {
    if (done_.wait_for(hang_limit) != std::future_status::ready) {
      thread_.detach();
      return false;
    }
    thread_.join();
    done_.get();
    return true;
  }

 private:
  std::future<void> done_;
  std::thread thread_;
};

bool returns_in_time(std::function<void()> job) { return bounded_job(std::move(job)).wait(); }

// Closes `d` (with `policy`, else its own) from a helper thread. If close() does not return, the
// dispatcher is leaked: the helper still waits in it, and destroying it would wait forever too.
bool close_in_time(std::unique_ptr<spindle::dispatcher>& d, std::optional<close_policy> policy,
                   const char* what) {
  spindle::dispatcher* raw = d.get();
  if (returns_in_time([raw, policy] { policy ? raw->close(*policy) : raw->close(); })) return true;
  ADD_FAILURE() << what << ": close() did not return within " << hang_limit.count() << " s, "
                << raw->pending() << " submissions still pending (dispatcher leaked)";
  (void)d.release();
  return false;
}

// Destroys `d` from a helper thread (leaked if the destructor does not return).
bool destroy_in_time(std::unique_ptr<spindle::dispatcher>& d, const char* what) {
  spindle::dispatcher* raw = d.release();
  const std::uint64_t pending = raw->pending();
  if (returns_in_time([raw] { delete raw; })) return true;
  ADD_FAILURE() << what << ": the dispatcher's destructor did not return within " << hang_limit.count()
                << " s (" << pending << " pending before)";
  return false;
}

// Cancels random recently published items (through copies of their cancel actions) until
// `done()`: about one cancel call per `one_in` items accepted, aimed at the newest 4 or
// the newest 256 of a submitter (queued, starting, running or finished). With `c`, it also cancels
// each `forever` body once it started (else one would block a sequential dispatcher for good).
template <class Done>
void random_canceller(ledger& l, std::uint32_t threads, Done done, std::uint64_t seed, std::uint64_t one_in,
                      census* c = nullptr) {
  std::mt19937_64 rng(seed);
  std::uint64_t calls = 0;
  std::uint64_t forever_handled = none;
  while (!done()) {
    if (c != nullptr) {
      const std::uint64_t f = c->last_forever.load(std::memory_order_acquire);
      if (f != none && f != forever_handled && l.published(f)) {
        l.cancel(f);
        forever_handled = f;
      }
    }
    const auto t = static_cast<std::uint32_t>(rng() % threads);
    const std::uint64_t n = l.accepted[t].load(std::memory_order_acquire);
    if (n == 0 || calls * one_in >= l.total_accepted()) {
      std::this_thread::yield();
      continue;
    }
    const std::uint64_t window = rng() % 2 == 0 ? 4 : 256;
    const std::uint64_t i = n - 1 - rng() % std::min(n, window);
    l.cancel(l.id(t, i));
    ++calls;
  }
}

// --- 1. submitting races cancelling --------------------------------------------------------------
// Four foreign threads submit while a fifth cancels random recent futures through copies of their
// cancel actions. A cancelled item never ran its body to its end; every item whose future is
// cancelled had a winning cancel, and at most one cancel call won per item. Closed (await_all)
// after each round: every future is complete then.

void enqueue_races_cancel(dispatch_mode mode) {
  const std::uint64_t per_submitter = 5000;
  const std::uint64_t rounds =
      std::max<std::uint64_t>(1, scaled(1'000'000, tsan_factor) / (submitters * per_submitter));
  spindle::runtime rt({.workers = 2});
  problems p;
  std::uint64_t values = 0, cancelled = 0, round = 0;
  stopwatch watch;
  for (; round < rounds && !::testing::Test::HasFailure() && !p.any(); ++round) {
    const std::uint64_t items = submitters * per_submitter;
    census c(items);
    ledger l(submitters, per_submitter);
    auto d = std::make_unique<spindle::dispatcher>(rt, spindle::dispatcher_options{.mode = mode});
    std::atomic<std::uint32_t> finished{0};
    std::vector<std::thread> threads;
    for (std::uint32_t t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < per_submitter; ++i) l.publish(t, i, submit_item(*d, c, l.id(t, i)));
        finished.fetch_add(1, std::memory_order_release);
      });
    }
    threads.emplace_back([&] {
      random_canceller(
          l, submitters, [&] { return finished.load(std::memory_order_acquire) == submitters; }, round, 3);
    });
    for (auto& t : threads) t.join();
    if (!close_in_time(d, close_policy::await_all, "after the round")) break;
    EXPECT_EQ(d->pending(), 0u);
    checker check(c, p, in_order(mode));
    const auto now = steady::now();  // complete already: close(await_all) returned
    for (std::uint32_t t = 0; t < submitters; ++t) {
      check.next_submitter();
      for (std::uint64_t i = 0; i < per_submitter; ++i) {
        const std::uint64_t id = l.id(t, i);
        const std::uint32_t wins = l.wins[id].load();
        if (wins > 1) p.add("item ", id, ": ", wins, " cancel calls returned true");
        check.item(id, l.futures[id], wins != 0, now);
      }
    }
    check.finish(items);
    values += check.values;
    cancelled += check.cancelled;
    destroy_in_time(d, "after the round");
  }
  EXPECT_NO_PROBLEMS(p);
  EXPECT_GT(values, 0u);
  EXPECT_GT(cancelled, 0u);
  std::printf("enqueue/cancel [%s]: %llu rounds, %llu values, %llu cancelled in %.2f s\n", mode_name(mode),
              (unsigned long long)round, (unsigned long long)values, (unsigned long long)cancelled,
              watch.seconds());
}

TEST(DispatchEnqueueCancel, Parallel) { enqueue_races_cancel(dispatch_mode::parallel); }
TEST(DispatchEnqueueCancel, Sequential) { enqueue_races_cancel(dispatch_mode::sequential); }
TEST(DispatchEnqueueCancel, SequentialUncancelable) {
  enqueue_races_cancel(dispatch_mode::sequential_uncancelable);
}

// --- 2. cancelling races completion --------------------------------------------------------------
// Every item gets one of three roles: cancelled by its submitter right after submit (through the
// future: it may be queued, being started, or already done), cancelled by a second thread as soon
// as its body started (racing the body's end: most bodies end at once or after a yield), or left
// alone. No hang; each future one ending; the left-alone ones always end with their value.

enum class role { cancel_at_once, cancel_when_started, leave };
role role_of(std::uint64_t id) { return static_cast<role>((id / 4) % 3); }  // bodies vary with id % 4

// Cancels each published `cancel_when_started` item once its body started, until all were.
void canceller_when_started(ledger& l, census& c, const std::atomic<std::uint32_t>& finished, problems& p) {
  std::vector<std::uint64_t> cursor(submitters, 0);
  auto deadline = steady::now() + hang_limit;
  for (;;) {
    bool progress = false;
    bool left = false;
    for (std::uint32_t t = 0; t < submitters; ++t) {
      const std::uint64_t n = l.accepted[t].load(std::memory_order_acquire);
      for (; cursor[t] < n; ++cursor[t]) {
        const std::uint64_t id = l.id(t, cursor[t]);
        if (role_of(id) != role::cancel_when_started) continue;
        if (c.started[id].load(std::memory_order_acquire) == 0) break;  // not yet: come back
        l.cancel(id);
        progress = true;
      }
      if (cursor[t] < l.per_submitter) left = true;
    }
    if (!left) return;
    if (progress || finished.load(std::memory_order_acquire) < submitters) {
      deadline = steady::now() + hang_limit;
    } else if (steady::now() > deadline) {
      p.add("a submission to be cancelled once started never started");
      return;
    }
    std::this_thread::yield();
  }
}

void cancel_races_completion(dispatch_mode mode) {
  const std::uint64_t per_submitter = 6000;
  const std::uint64_t rounds =
      std::max<std::uint64_t>(1, scaled(1'000'000, tsan_factor) / (submitters * per_submitter));
  spindle::runtime rt({.workers = 2});
  problems p;
  std::uint64_t values = 0, cancelled = 0, round = 0;
  stopwatch watch;
  for (; round < rounds && !::testing::Test::HasFailure() && !p.any(); ++round) {
    const std::uint64_t items = submitters * per_submitter;
    census c(items);
    ledger l(submitters, per_submitter);
    auto d = std::make_unique<spindle::dispatcher>(rt, spindle::dispatcher_options{.mode = mode});
    std::atomic<std::uint32_t> finished{0};
    std::vector<std::thread> threads;
    for (std::uint32_t t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < per_submitter; ++i) {
          const std::uint64_t id = l.id(t, i);
          future_type f = submit_item(*d, c, id);
          if (role_of(id) == role::cancel_at_once && f.cancel())
            l.wins[id].fetch_add(1, std::memory_order_relaxed);
          l.publish(t, i, std::move(f));
        }
        finished.fetch_add(1, std::memory_order_release);
      });
    }
    threads.emplace_back([&] { canceller_when_started(l, c, finished, p); });
    for (auto& t : threads) t.join();
    if (!close_in_time(d, close_policy::await_all, "after the round")) break;
    EXPECT_EQ(d->pending(), 0u);
    checker check(c, p, in_order(mode));
    const auto now = steady::now();
    for (std::uint32_t t = 0; t < submitters; ++t) {
      check.next_submitter();
      for (std::uint64_t i = 0; i < per_submitter; ++i) {
        const std::uint64_t id = l.id(t, i);
        const std::uint32_t wins = l.wins[id].load();
        if (wins > 1) p.add("item ", id, ": ", wins, " cancel calls returned true");
        check.item(id, l.futures[id], wins != 0 && role_of(id) != role::leave, now);
      }
    }
    check.finish(items);
    values += check.values;
    cancelled += check.cancelled;
    destroy_in_time(d, "after the round");
  }
  EXPECT_NO_PROBLEMS(p);
  EXPECT_GT(values, 0u);
  std::printf("cancel/completion [%s]: %llu rounds, %llu values, %llu cancelled in %.2f s\n", mode_name(mode),
              (unsigned long long)round, (unsigned long long)values, (unsigned long long)cancelled,
              watch.seconds());
}

TEST(DispatchCancelCompletion, Parallel) { cancel_races_completion(dispatch_mode::parallel); }
TEST(DispatchCancelCompletion, Sequential) { cancel_races_completion(dispatch_mode::sequential); }
TEST(DispatchCancelCompletion, SequentialUncancelable) {
  cancel_races_completion(dispatch_mode::sequential_uncancelable);
}

// --- 3. submitting races closing -----------------------------------------------------------------
// Four foreign threads submit until refused while the main thread closes at a random point. Every
// submit either throws dispatcher_closed (and so does every later one) or returns a future that
// completes: await_all with its value, cancel_all with its value or cancelled. When close()
// returns every accepted future is ready (also one whose submit returned only after that), and
// pending() is 0 once the submitters stopped.

void submit_races_close(dispatch_mode mode, close_policy policy) {
  // close() begins once a random number of submissions (below `close_before`) were accepted;
  // each submitter may submit up to `cap` (a bound on memory only), so all are still
  // submitting then. Rounds until about a million were accepted.
  const std::uint64_t close_before = 4000;
  const std::uint64_t cap = 4 * close_before;
  const std::uint64_t target = scaled(1'000'000, tsan_factor);
  spindle::runtime rt({.workers = 2});
  problems p;
  std::mt19937_64 rng(42);
  std::uint64_t values = 0, cancelled = 0, refused = 0, round = 0;
  stopwatch watch;
  for (; values + cancelled < target && !::testing::Test::HasFailure() && !p.any(); ++round) {
    const std::uint64_t items = submitters * cap;
    census c(items);
    ledger l(submitters, cap);
    auto d = std::make_unique<spindle::dispatcher>(
        rt, spindle::dispatcher_options{.mode = mode, .on_close = policy});
    const std::uint64_t close_after = rng() % close_before;
    std::atomic<bool> close_returned{false};
    std::atomic<std::uint32_t> finished{0};
    std::atomic<std::uint64_t> refusals{0};
    std::vector<std::thread> threads;
    for (std::uint32_t t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < cap; ++i) {
          future_type f;
          try {
            f = submit_item(*d, c, l.id(t, i));
          } catch (const spindle::dispatcher_closed&) {
            refusals.fetch_add(1);
            try {
              (void)d->submit(work_function{&c, l.id(t, i)});
              p.add("submitter ", t, ": a submit was accepted after one was refused");
            } catch (const spindle::dispatcher_closed&) {
            }
            break;
          }
          // acquire: close() had returned, so this accepted submission completed before.
          if (close_returned.load(std::memory_order_acquire) && !f.is_ready()) {
            p.add("item ", l.id(t, i), ": accepted, close() returned, future not ready");
          }
          l.publish(t, i, std::move(f));
        }
        finished.fetch_add(1, std::memory_order_release);
      });
    }
    spin_until([&] { return l.total_accepted() >= close_after || finished.load() == submitters; });
    if (!close_in_time(d, std::nullopt, "racing the submitters")) {
      for (auto& t : threads) t.join();
      break;
    }
    close_returned.store(true, std::memory_order_release);
    for (std::uint32_t t = 0; t < submitters; ++t) {  // those published so far: all ready now
      const std::uint64_t n = l.accepted[t].load(std::memory_order_acquire);
      for (std::uint64_t i = 0; i < n; ++i) {
        if (!l.futures[l.id(t, i)].is_ready())
          p.add("item ", l.id(t, i), ": close() returned, future not ready");
      }
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(d->pending(), 0u);
    EXPECT_THROW((void)d->submit(work_function{&c, 0}), spindle::dispatcher_closed);
    checker check(c, p, in_order(mode));
    const auto now = steady::now();
    for (std::uint32_t t = 0; t < submitters; ++t) {
      check.next_submitter();
      const std::uint64_t n = l.accepted[t].load();
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t id = l.id(t, i);
        check.item(id, l.futures[id], policy == close_policy::cancel_all, now);
      }
    }
    check.finish(items);
    values += check.values;
    cancelled += check.cancelled;
    refused += refusals.load();
    destroy_in_time(d, "after the round");
  }
  EXPECT_NO_PROBLEMS(p);
  EXPECT_GT(values, 0u);
  EXPECT_GT(refused, 0u);
  std::printf("submit/close [%s, %s]: %llu rounds, %llu values, %llu cancelled, %llu refused in %.2f s\n",
              mode_name(mode), policy == close_policy::await_all ? "await_all" : "cancel_all",
              (unsigned long long)round, (unsigned long long)values, (unsigned long long)cancelled,
              (unsigned long long)refused, watch.seconds());
}

TEST(DispatchSubmitClose, ParallelAwaitAll) {
  submit_races_close(dispatch_mode::parallel, close_policy::await_all);
}
TEST(DispatchSubmitClose, ParallelCancelAll) {
  submit_races_close(dispatch_mode::parallel, close_policy::cancel_all);
}
TEST(DispatchSubmitClose, SequentialAwaitAll) {
  submit_races_close(dispatch_mode::sequential, close_policy::await_all);
}
TEST(DispatchSubmitClose, SequentialCancelAll) {
  submit_races_close(dispatch_mode::sequential, close_policy::cancel_all);
}
TEST(DispatchSubmitClose, SequentialUncancelableAwaitAll) {
  submit_races_close(dispatch_mode::sequential_uncancelable, close_policy::await_all);
}
TEST(DispatchSubmitClose, SequentialUncancelableCancelAll) {
  submit_races_close(dispatch_mode::sequential_uncancelable, close_policy::cancel_all);
}

// --- 4. sequential: cancelling the running submission (latch/drain/refill) -----------------------
// Submitters interleave victims (bodies that never end by themselves: they announce themselves,
// then wait on an event nobody sets or, a few, yield forever) with followers (ordinary bodies;
// one in four cancels itself through its own cancel action as its body ends, so that cancel
// reaches the dispatcher while the runner moves on to the next submission). A canceller thread
// cancels each victim as soon as it runs, twice (the second call must return false). Every victim
// ends cancelled, without running to its end; every follower ends with its value, in its
// submitter's order, one at a time: no cancel meant for one submission reaches another. A lost
// cancel leaves the runner stuck on a victim: a hang.

struct victim_board {
  std::mutex lock;
  std::condition_variable started;
  std::condition_variable progress;
  std::atomic<std::uint64_t> running{none};  // the victim that started last (stored under lock)
  std::uint64_t cancelled = 0;               // victims cancelled so far (guarded by lock)
  std::atomic<std::uint64_t> submitted{0};   // victims submitted so far
  std::atomic<std::uint64_t> ended{0};       // victims whose frames are gone

  void announce(std::uint64_t id) {
    {
      std::lock_guard guard(lock);
      running.store(id, std::memory_order_release);
    }
    started.notify_one();
  }
  // Blocks until a victim other than `handled` started; none after hang_limit.
  std::uint64_t next_after(std::uint64_t handled) {
    std::unique_lock guard(lock);
    if (!started.wait_for(guard, hang_limit, [&] { return running.load() != handled; })) return none;
    return running.load();
  }
  void note_cancelled() {
    {
      std::lock_guard guard(lock);
      ++cancelled;
    }
    progress.notify_all();
  }
  // Before submitting a victim: blocks while `ahead` victims wait to be cancelled, which keeps
  // the queue short (each cancel of the running one drains and refills all of it). False after
  // hang_limit.
  bool admit_victim(std::uint64_t ahead) {
    const std::uint64_t k = submitted.fetch_add(1);
    std::unique_lock guard(lock);
    return progress.wait_for(guard, hang_limit, [&] { return cancelled + ahead > k; });
  }
};

// Counts a victim as ended when its frame goes, however it ends.
struct victim_exit {
  victim_board* board;
  ~victim_exit() { board->ended.fetch_add(1, std::memory_order_release); }
};

spindle::task<std::uint64_t> victim(victim_board& board, census& c, std::uint64_t id, spindle::event& never,
                                    bool yielding) {
  victim_exit exit{&board};
  occupancy here(c);
  c.start(id);
  board.announce(id);
  if (yielding) {
    for (;;) co_await spindle::yield_now();
  }
  co_await never.wait();
  c.complete(id);  // never reached
  co_return value_of(id);
}

// A follower that cancels itself (through its published cancel action) once its body has ended:
// it still ends with its value, and the cancel must not reach the submission after it.
spindle::task<std::uint64_t> self_cancelling(census& c, ledger& l, std::uint64_t id, int yields) {
  occupancy here(c);
  c.start(id);
  for (int k = 0; k < yields; ++k) co_await spindle::yield_now();
  c.complete(id);
  if (l.published(id)) l.cancel(id);
  co_return value_of(id);
}

bool is_victim(std::uint64_t id) { return ((id * 0x9E3779B97F4A7C15ull) >> 40) % 20 == 0; }
// Most victims wait on the event; a few yield forever (the runner is then never suspended).
bool yields_forever(std::uint64_t id) { return ((id * 0x9E3779B97F4A7C15ull) >> 20) % 32 == 0; }
bool cancels_itself(std::uint64_t id) { return (id / 4) % 4 == 0; }

// Cancels each victim once it runs, twice; returns when all `victims` were, or when none starts
// within hang_limit (a problem).
void cancel_each_victim(ledger& l, victim_board& board, std::uint64_t victims, problems& p) {
  std::uint64_t handled = none;
  for (std::uint64_t count = 0; count < victims; ++count) {
    const std::uint64_t v = board.next_after(handled);
    if (v == none) {
      p.add("stuck: ", count, " of ", victims, " victims cancelled, ", board.ended.load(),
            " ended; the last one handled is ", handled);
      return;
    }
    if (!eventually([&] { return l.published(v); }, hang_limit)) {  // its submit may not have returned
      p.add("victim ", v, ": its submit never returned");
      return;
    }
    if (!l.cancel(v)) p.add("victim ", v, ": cancel of the running victim returned false");
    if (l.cancel(v)) p.add("victim ", v, ": a second cancel returned true");
    board.note_cancelled();
    handled = v;
  }
}

TEST(DispatchSequentialCancelRunning, QueuedOnesRunInOrderAndNoCancelHitsAnother) {
  const std::uint64_t per_submitter = 20'000;
  const std::uint64_t rounds =
      std::max<std::uint64_t>(1, scaled(1'000'000, tsan_factor) / (submitters * per_submitter));
  spindle::runtime rt({.workers = 2});
  problems p;
  std::uint64_t values = 0, cancelled = 0, victims_total = 0, round = 0;
  stopwatch watch;
  for (; round < rounds && !::testing::Test::HasFailure() && !p.any(); ++round) {
    const std::uint64_t items = submitters * per_submitter;
    census c(items);
    ledger l(submitters, per_submitter);
    victim_board board;
    spindle::event never;
    std::uint64_t victims = 0;
    for (std::uint64_t id = 0; id < items; ++id) victims += is_victim(id) ? 1 : 0;
    auto d = std::make_unique<spindle::dispatcher>(
        rt, spindle::dispatcher_options{.mode = dispatch_mode::sequential});
    std::vector<std::thread> threads;
    for (std::uint32_t t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < per_submitter; ++i) {
          const std::uint64_t id = l.id(t, i);
          if (is_victim(id)) {
            if (!board.admit_victim(16)) {
              p.add("submitter ", t, ": victims are no longer cancelled (", board.ended.load(), " ended)");
              break;
            }
            l.publish(t, i, d->submit(victim(board, c, id, never, yields_forever(id))));
          } else if (cancels_itself(id)) {
            l.publish(t, i, d->submit(self_cancelling(c, l, id, static_cast<int>(id % 3))));
          } else {
            l.publish(t, i, submit_item(*d, c, id));
          }
        }
      });
    }
    threads.emplace_back([&] { cancel_each_victim(l, board, victims, p); });
    for (auto& t : threads) t.join();
    if (!close_in_time(d, close_policy::await_all, "after the round")) break;
    checker check(c, p, true);
    const auto now = steady::now();
    for (std::uint32_t t = 0; t < submitters; ++t) {
      check.next_submitter();
      const std::uint64_t n = l.accepted[t].load();
      if (n != per_submitter) p.add("submitter ", t, " stopped after ", n, " submissions");
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t id = l.id(t, i);
        check.item(id, l.futures[id], is_victim(id), now, is_victim(id));
      }
    }
    check.finish(items);
    values += check.values;
    cancelled += check.cancelled;
    victims_total += victims;
    destroy_in_time(d, "after the round");
  }
  EXPECT_NO_PROBLEMS(p);
  std::printf(
      "sequential cancel running: %llu rounds, %llu victims cancelled (of %llu), %llu followers ran "
      "in %.2f s\n",
      (unsigned long long)round, (unsigned long long)cancelled, (unsigned long long)victims_total,
      (unsigned long long)values, watch.seconds());
}

// The same protocol racing close(await_all): the victim is cancelled before close(), while it
// begins, or once submits are refused (the worker may then have closed the runner's queue).
// close() must still run every follower queued behind the victim, in order.
TEST(DispatchSequentialCancelRunning, RacesCloseAwaitAllFollowersStillRun) {
  const std::uint64_t rounds = scaled(1'500, tsan_factor * 2);
  constexpr std::uint64_t followers = 8;
  spindle::runtime rt({.workers = 2});
  problems p;
  std::uint64_t lost_rounds = 0, round = 0;
  stopwatch watch;
  for (; round < rounds && !::testing::Test::HasFailure(); ++round) {
    census c(followers + 1);
    victim_board board;
    spindle::event never;
    auto d = std::make_unique<spindle::dispatcher>(
        rt,
        spindle::dispatcher_options{.mode = dispatch_mode::sequential, .on_close = close_policy::await_all});
    const std::uint64_t victim_id = followers;
    future_type v = d->submit(victim(board, c, victim_id, never, round % 8 == 0));
    std::vector<future_type> behind;
    for (std::uint64_t id = 0; id < followers; ++id) behind.push_back(submit_item(*d, c, id));
    if (!eventually([&] { return board.running.load() == victim_id; }, hang_limit)) {
      ADD_FAILURE() << "round " << round << ": the victim never started";
      break;
    }
    const int when = static_cast<int>(round % 3);  // 0: before close, 1: as it begins, 2: once refusing
    if (when == 0 && !v.cancel()) p.add("round ", round, ": cancel of the running victim returned false");
    spindle::dispatcher* raw = d.get();
    bounded_job closing([raw] { raw->close(); });
    if (when == 2) {
      for (;;) {  // until refused; those accepted meanwhile just run
        try {
          (void)d->submit([] { return 0; });
        } catch (const spindle::dispatcher_closed&) {
          break;
        }
      }
    }
    if (when != 0 && !v.cancel()) p.add("round ", round, ": cancel of the running victim returned false");
    if (!closing.wait()) {
      ADD_FAILURE() << "round " << round << ": close() did not return; pending " << raw->pending();
      (void)d.release();  // the helper still waits in close()
      break;
    }
    checker check(c, p, true);
    const auto now = steady::now();
    check.item(victim_id, v, true, now, true);
    std::uint64_t lost = 0;
    for (std::uint64_t id = 0; id < followers; ++id) {
      check.item(id, behind[id], false, now);
      lost += c.completed[id].load() == 0 ? 1 : 0;
    }
    if (lost != 0 && lost_rounds++ == 0) {
      static const char* const moments[] = {"before close", "as close begins", "once refusing"};
      p.add("round ", round, " (cancel ", moments[when], "): ", lost, " of ", followers,
            " followers queued behind the cancelled victim never ran");
    }
    destroy_in_time(d, "after the round");
  }
  EXPECT_NO_PROBLEMS(p) << lost_rounds << " of " << round << " rounds lost followers";
  std::printf("sequential cancel running vs close: %llu rounds, %llu lost followers in %.2f s\n",
              (unsigned long long)round, (unsigned long long)lost_rounds, watch.seconds());
}

// --- 5. the runtime destroyed under the dispatcher ----------------------------------------------
// Three foreign threads submit (one body in 250 waits forever) while a fourth cancels random
// recent ones and each forever-waiting one once it runs; the main thread destroys the runtime at
// a random point. Submissions queued, running or being cancelled all complete (value or
// cancelled), each once; those accepted before the runtime's destructor returned are complete
// when it has, and no body is left suspended; later submits throw dispatcher_closed; the
// dispatcher's destruction then returns. (The event the forever bodies wait on outlives the
// runtime and goes before the last cancel actions: a body frame left registered on it is a
// use-after-free that TSan reports.)

void runtime_destroyed_in_flight(dispatch_mode mode) {
  constexpr std::uint32_t threads_submitting = 3;
  const std::uint64_t cap = 8000;  // per submitter and round
  const std::uint64_t rounds =
      std::max<std::uint64_t>(1, scaled(1'000'000, tsan_factor) / (threads_submitting * cap / 2));
  problems p;
  std::mt19937_64 rng(7);
  std::uint64_t values = 0, cancelled = 0, round = 0;
  stopwatch watch;
  for (; round < rounds && !::testing::Test::HasFailure() && !p.any(); ++round) {
    const std::uint64_t items = threads_submitting * cap;
    census c(items);
    ledger l(threads_submitting, cap);
    spindle::event never;  // outlives the runtime: the forever bodies wait on it
    auto rt = std::make_unique<spindle::runtime>(spindle::runtime_options{.workers = 2});
    auto d = std::make_unique<spindle::dispatcher>(*rt, spindle::dispatcher_options{.mode = mode});
    const std::uint64_t destroy_after = rng() % items;
    std::atomic<bool> runtime_gone{false};
    std::atomic<bool> stop_cancelling{false};
    std::atomic<std::uint32_t> finished{0};
    std::vector<std::thread> threads;
    for (std::uint32_t t = 0; t < threads_submitting; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < cap; ++i) {
          const bool gone_before = runtime_gone.load(std::memory_order_acquire);
          future_type f;
          try {
            f = submit_item(*d, c, l.id(t, i), &never);
          } catch (const spindle::dispatcher_closed&) {
            break;
          } catch (const std::exception& e) {
            p.add("submitter ", t, ": submit threw ", e.what());
            break;
          }
          if (gone_before) p.add("item ", l.id(t, i), ": accepted after the runtime was destroyed");
          if (runtime_gone.load(std::memory_order_acquire) && !f.is_ready()) {
            p.add("item ", l.id(t, i), ": accepted, the runtime destroyed, future not ready");
          }
          l.publish(t, i, std::move(f));
        }
        finished.fetch_add(1, std::memory_order_release);
      });
    }
    threads.emplace_back([&] {  // until the runtime is gone: forever bodies may run until then
      random_canceller(
          l, threads_submitting, [&] { return stop_cancelling.load(std::memory_order_acquire); }, round, 4,
          &c);
    });
    spin_until([&] { return l.total_accepted() >= destroy_after || finished.load() == threads_submitting; });
    if (!returns_in_time([raw = rt.release()] { delete raw; })) {
      ADD_FAILURE() << "round " << round << ": the runtime's destructor did not return (leaked)";
      stop_cancelling.store(true);
      for (auto& t : threads) t.join();
      (void)d.release();
      break;
    }
    runtime_gone.store(true, std::memory_order_release);
    stop_cancelling.store(true, std::memory_order_release);
    for (std::uint32_t t = 0; t < threads_submitting; ++t) {  // those published so far: complete
      const std::uint64_t n = l.accepted[t].load(std::memory_order_acquire);
      for (std::uint64_t i = 0; i < n; ++i) {
        if (!l.futures[l.id(t, i)].is_ready()) {
          p.add("item ", l.id(t, i), ": the runtime was destroyed, future not ready");
        }
      }
    }
    for (auto& t : threads) t.join();
    // Shutdown destroyed every suspended task: no body may be left suspended either (its frame
    // would still be registered with what it waited on, e.g. `never`, for a task that is gone),
    // although the futures and cancel actions still hold the submissions.
    if (const int left = c.inside.load(); left != 0) {
      p.add(left, " started bodies still exist (suspended) after the runtime was destroyed");
    }
    EXPECT_THROW((void)d->submit(work_function{&c, 0}), spindle::dispatcher_closed);
    checker check(c, p, in_order(mode));
    const auto now = steady::now();
    for (std::uint32_t t = 0; t < threads_submitting; ++t) {
      check.next_submitter();
      const std::uint64_t n = l.accepted[t].load();
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t id = l.id(t, i);
        const std::uint32_t wins = l.wins[id].load();
        if (wins > 1) p.add("item ", id, ": ", wins, " cancel calls returned true");
        check.item(id, l.futures[id], true, now, is_forever(id));
      }
    }
    check.finish(items);
    EXPECT_EQ(d->pending(), 0u);
    values += check.values;
    cancelled += check.cancelled;
    destroy_in_time(d, "after the runtime");
  }
  EXPECT_NO_PROBLEMS(p);
  EXPECT_GT(cancelled, 0u);
  std::printf("runtime destroyed [%s]: %llu rounds, %llu values, %llu cancelled in %.2f s\n", mode_name(mode),
              (unsigned long long)round, (unsigned long long)values, (unsigned long long)cancelled,
              watch.seconds());
}

TEST(DispatchRuntimeShutdown, Parallel) { runtime_destroyed_in_flight(dispatch_mode::parallel); }
TEST(DispatchRuntimeShutdown, Sequential) { runtime_destroyed_in_flight(dispatch_mode::sequential); }
TEST(DispatchRuntimeShutdown, SequentialUncancelable) {
  runtime_destroyed_in_flight(dispatch_mode::sequential_uncancelable);
}

}  // namespace
