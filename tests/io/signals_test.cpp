// io::signal_set on both reactor backends: kill(getpid()) and sigqueue delivered to waiting tasks
// exactly once each, several signals in order, pending signals kept for the next wait, several
// waiters, raise() on the waiter's own worker, cancellation and with_timeout, argument checks.
//
// The signals used here (SIGUSR1, SIGUSR2, SIGRTMIN + 4) are blocked at static-initialisation
// time, before main and so before any thread exists: every thread of this test binary (the
// runtimes' workers included) inherits the mask, as a program calling block_signals() at the top
// of main would. Nothing else in spindle_io_tests uses these signals; each test starts and ends
// with none of them pending.
#include <spindle/spindle.hpp>
#include <spindle/io/io.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::core::io_backend;
using spindle::io::signal_set;
using namespace spindle::testing;

int rt_signal() { return SIGRTMIN + 4; }  // a queued (real-time) signal

const bool signals_blocked_before_main = [] {
  spindle::io::block_signals({SIGUSR1, SIGUSR2, rt_signal()});
  return true;
}();

// Consumes whatever instances of the test signals are pending for the process (or this thread).
void drain_pending() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigaddset(&set, rt_signal());
  const timespec zero{0, 0};
  while (::sigtimedwait(&set, nullptr, &zero) > 0) {
  }
}

void send(int signo) { ASSERT_EQ(::kill(::getpid(), signo), 0); }

void send_value(int signo, int value) {
  sigval v{};
  v.sival_int = value;
  ASSERT_EQ(::sigqueue(::getpid(), signo, v), 0);
}

using spindle::testing::runtime_on;

class IoSignals : public ::testing::TestWithParam<io_backend> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(signals_blocked_before_main);
    sigset_t current;
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &current), 0);
    ASSERT_EQ(sigismember(&current, SIGUSR1), 1);
    ASSERT_EQ(sigismember(&current, rt_signal()), 1);
    drain_pending();
    rt_ = make_runtime(2);
  }
  void TearDown() override {
    rt_.reset();
    drain_pending();
  }
  std::unique_ptr<spindle::runtime> make_runtime(std::uint32_t workers) {
    auto rt = runtime_on(GetParam(), workers);
    if (!rt) skipped_ = true;
    return rt;
  }
  bool skip() const { return skipped_; }

  std::unique_ptr<spindle::runtime> rt_;
  bool skipped_ = false;
};

#define SKIP_WITHOUT_BACKEND() \
  if (skip()) GTEST_SKIP() << "the epoll backend is not built yet"

spindle::task<int> wait_once(signal_set& set, std::atomic<int>& started) {
  started.fetch_add(1);
  co_return co_await set.wait();
}

// True if no signal of `set` comes within `d` (with_timeout expires).
spindle::task<bool> nothing_within(signal_set& set, spindle::clock_duration d) {
  try {
    co_await spindle::with_timeout(d, set.wait());
  } catch (const spindle::timeout_error&) {
    co_return true;
  }
  co_return false;
}

// --- delivery --------------------------------------------------------------------------------

TEST_P(IoSignals, KillIsDeliveredToAWaitingTaskExactlyOnce) {
  SKIP_WITHOUT_BACKEND();
  signal_set set{SIGUSR1};
  EXPECT_GE(set.native_handle(), 0);
  EXPECT_TRUE(set.contains(SIGUSR1));
  EXPECT_FALSE(set.contains(SIGUSR2));
  const int rounds = 20;
  for (int round = 0; round < rounds; ++round) {
    std::atomic<int> started{0};
    auto waiter = rt_->spawn(wait_once(set, started));
    ASSERT_TRUE(eventually([&] { return started.load() == 1; }));
    if (round % 2 == 0) std::this_thread::sleep_for(2ms);  // usually suspended in poll by now
    send(SIGUSR1);
    EXPECT_EQ(join_bounded(std::move(waiter)), SIGUSR1) << "round " << round;
  }
  // Exactly once: nothing more is pending.
  EXPECT_TRUE(rt_->block_on(nothing_within(set, 50ms)));
}

TEST_P(IoSignals, ASignalSentBeforeTheWaitIsKeptForIt) {
  SKIP_WITHOUT_BACKEND();
  signal_set set{SIGUSR2};
  send(SIGUSR2);
  std::atomic<int> started{0};
  EXPECT_EQ(join_bounded(rt_->spawn(wait_once(set, started))), SIGUSR2);
  EXPECT_TRUE(rt_->block_on(nothing_within(set, 20ms)));
}

spindle::task<void> receive(signal_set& set, int count, std::vector<int>& got,
                            std::atomic<int>& received) {
  for (int i = 0; i < count; ++i) {
    got.push_back(co_await set.wait());
    received.fetch_add(1);
  }
}

TEST_P(IoSignals, SeveralSignalsArriveInTheOrderSent) {
  SKIP_WITHOUT_BACKEND();
  signal_set set{SIGUSR1, SIGUSR2, rt_signal()};
  const std::vector<int> sequence{SIGUSR1, SIGUSR2,      rt_signal(), SIGUSR2, SIGUSR1,
                                  SIGUSR1, rt_signal(), SIGUSR2,      SIGUSR1, rt_signal()};
  std::vector<int> got;
  std::atomic<int> received{0};
  auto h = rt_->spawn(receive(set, int(sequence.size()), got, received));
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    send(sequence[i]);
    ASSERT_TRUE(eventually([&] { return received.load() == int(i + 1); }, 10s)) << "signal " << i;
  }
  join_bounded(std::move(h));
  EXPECT_EQ(got, sequence);
}

spindle::task<std::vector<spindle::io::signal_info>> receive_info(signal_set& set, int count) {
  std::vector<spindle::io::signal_info> infos;
  for (int i = 0; i < count; ++i) infos.push_back(co_await set.wait_info());
  co_return infos;
}

TEST_P(IoSignals, QueuedSignalsAreEachDeliveredInOrder) {
  SKIP_WITHOUT_BACKEND();
  signal_set set{rt_signal(), SIGUSR1, SIGUSR2};
  // Real-time signals queue: every instance is reported, in the order sent.
  const int count = 10;
  for (int i = 1; i <= count; ++i) send_value(rt_signal(), i);
  const auto infos = join_bounded(rt_->spawn(receive_info(set, count)));
  ASSERT_EQ(infos.size(), std::size_t(count));
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(infos[i].signo, rt_signal());
    EXPECT_EQ(infos[i].value, i + 1);
    EXPECT_EQ(infos[i].code, SI_QUEUE);
    EXPECT_EQ(infos[i].pid, ::getpid());
    EXPECT_EQ(infos[i].uid, ::getuid());
  }
  // Different pending signals: the lowest number first (SIGUSR1 < SIGUSR2 < real-time ones).
  send_value(rt_signal(), 99);
  send(SIGUSR2);
  send(SIGUSR1);
  const auto mixed = join_bounded(rt_->spawn(receive_info(set, 3)));
  ASSERT_EQ(mixed.size(), 3u);
  EXPECT_EQ(mixed[0].signo, SIGUSR1);
  EXPECT_EQ(mixed[0].code, SI_USER);
  EXPECT_EQ(mixed[1].signo, SIGUSR2);
  EXPECT_EQ(mixed[2].signo, rt_signal());
  EXPECT_EQ(mixed[2].value, 99);
  EXPECT_TRUE(rt_->block_on(nothing_within(set, 20ms)));
}

TEST_P(IoSignals, SeveralWaitersEachGetOneSignal) {
  SKIP_WITHOUT_BACKEND();
  signal_set set{rt_signal()};
  const int waiters = 6;
  std::atomic<int> started{0};
  std::vector<spindle::join_handle<spindle::io::signal_info>> handles;
  for (int i = 0; i < waiters; ++i) {
    handles.push_back(rt_->spawn([](signal_set& s, std::atomic<int>& st)
                                     -> spindle::task<spindle::io::signal_info> {
      st.fetch_add(1);
      co_return co_await s.wait_info();
    }(set, started)));
  }
  ASSERT_TRUE(eventually([&] { return started.load() == waiters; }));
  std::this_thread::sleep_for(5ms);  // most of them suspended in poll (not required)
  for (int i = 1; i <= waiters; ++i) send_value(rt_signal(), i);
  std::vector<int> values;
  for (auto& h : handles) values.push_back(join_bounded(std::move(h)).value);
  std::sort(values.begin(), values.end());
  EXPECT_EQ(values, (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(rt_->block_on(nothing_within(set, 20ms)));

  // Standard signals one at a time to a crowd of waiters: each goes to exactly one of them.
  signal_set usr{SIGUSR1};
  std::atomic<int> started_usr{0};
  std::vector<spindle::join_handle<int>> crowd;
  for (int i = 0; i < waiters; ++i) crowd.push_back(rt_->spawn(wait_once(usr, started_usr)));
  ASSERT_TRUE(eventually([&] { return started_usr.load() == waiters; }));
  for (int i = 0; i < waiters; ++i) {
    send(SIGUSR1);
    ASSERT_TRUE(eventually(
        [&] {
          return std::count_if(crowd.begin(), crowd.end(),
                               [](const auto& h) { return h.is_finished(); }) == i + 1;
        },
        10s))
        << "signal " << i;
  }
  for (auto& h : crowd) EXPECT_EQ(h.join(), SIGUSR1);
}

spindle::task<void> raise_later(std::atomic<int>& started, int signo) {
  while (started.load() == 0) co_await spindle::yield_now();
  co_await spindle::sleep_for(2ms);
  ::raise(signo);
}

TEST_P(IoSignals, RaiseReachesAWaiterOnTheSameWorker) {
  SKIP_WITHOUT_BACKEND();
  // raise() is thread-directed: with one worker, the raising task and the waiter share it.
  rt_ = make_runtime(1);
  signal_set set{SIGUSR2};
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> started{0};
    auto waiter = rt_->spawn(wait_once(set, started));
    rt_->spawn(raise_later(started, SIGUSR2)).join();
    EXPECT_EQ(join_bounded(std::move(waiter)), SIGUSR2);
  }
  rt_->block_on([]() -> spindle::task<void> {
    ::raise(SIGUSR1);  // pending on this worker thread
    co_return;
  }());
  signal_set usr1{SIGUSR1};
  std::atomic<int> started{0};
  EXPECT_EQ(join_bounded(rt_->spawn(wait_once(usr1, started))), SIGUSR1);
}

// --- cancellation and timeouts ---------------------------------------------------------------

TEST_P(IoSignals, CancellingAWaitingTaskLosesNoSignal) {
  SKIP_WITHOUT_BACKEND();
  signal_set set{SIGUSR1};
  for (int round = 0; round < 10; ++round) {
    std::atomic<int> started{0};
    auto waiter = rt_->spawn(wait_once(set, started));
    ASSERT_TRUE(eventually([&] { return started.load() == 1; }));
    if (round % 2 == 0) std::this_thread::sleep_for(2ms);
    waiter.cancel();
    EXPECT_TRUE(joined_cancelled(waiter));
  }
  // The cancelled waits consumed nothing: the next signal reaches the next waiter.
  send(SIGUSR1);
  std::atomic<int> started{0};
  EXPECT_EQ(join_bounded(rt_->spawn(wait_once(set, started))), SIGUSR1);
}

TEST_P(IoSignals, WithTimeoutExpiresWhenNoSignalComes) {
  SKIP_WITHOUT_BACKEND();
  signal_set set{SIGUSR2};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(rt_->block_on(nothing_within(set, 30ms)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  // A signal within the timeout is returned by it.
  std::atomic<bool> waiting{false};
  auto h = rt_->spawn([](signal_set& s, std::atomic<bool>& w) -> spindle::task<int> {
    w.store(true);
    co_return co_await spindle::with_timeout(10s, s.wait());
  }(set, waiting));
  ASSERT_TRUE(eventually([&] { return waiting.load(); }));
  send(SIGUSR2);
  EXPECT_EQ(join_bounded(std::move(h)), SIGUSR2);
}

// --- construction ----------------------------------------------------------------------------

TEST_P(IoSignals, ConstructionChecksAndMoves) {
  SKIP_WITHOUT_BACKEND();
  for (int bad : {SIGKILL, SIGSTOP, 0, -1, 100000}) {
    try {
      signal_set s{SIGUSR1, bad};
      ADD_FAILURE() << "accepted signal " << bad;
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EINVAL) << bad;
    }
  }
  EXPECT_THROW(spindle::io::block_signals({0}), std::system_error);

  signal_set a{SIGUSR1};
  const int fd = a.native_handle();
  signal_set b = std::move(a);
  EXPECT_EQ(a.native_handle(), -1);
  EXPECT_EQ(b.native_handle(), fd);
  EXPECT_TRUE(b.contains(SIGUSR1));
  send(SIGUSR1);
  std::atomic<int> started{0};
  EXPECT_EQ(join_bounded(rt_->spawn(wait_once(b, started))), SIGUSR1);
  {
    signal_set c{SIGUSR2};
    c = std::move(b);
    EXPECT_EQ(c.native_handle(), fd);
  }
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // the destructor closed the signalfd
}

INSTANTIATE_TEST_SUITE_P(Backends, IoSignals,
                         ::testing::Values(io_backend::uring, io_backend::epoll),
                         spindle::testing::backend_name);

}  // namespace
