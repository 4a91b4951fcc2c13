// The io_uring backend with a submission queue that is "full" (reactor::set_sq_fault_hook: at
// each io_sq_point the hook makes io_uring_get_sqe return null, or the submitting system call
// return -EBUSY / -EAGAIN, on every Nth call of that point) and with a completion queue that
// overflows (make_reactor with reactor_options: a tiny CQ). Every operation must still complete
// exactly once with the exact data, or surface its real error; nothing may hang.
//
//   - SqFullDirect: the reactor alone, the test thread its owner, with a tiny ring (4 SQ, 8 CQ
//     entries) so the real "full" paths run too: reads armed then satisfied at once, writes,
//     cancellation, drain; every io_sq_point is hit and refused at least once.
//   - CqOverflow: 1000 pipe reads satisfied by one write and 1000 UDP receives whose datagrams
//     are already queued, on an 8-entry CQ, driven by poll() alone (no parking wait enters the
//     kernel for us): every completion arrives exactly once.
//   - SqFullRuntime: a runtime whose every executor has the hook: a TCP echo and UDP exchange
//     with every byte checked, a file written and read at random offsets against a reference,
//     cancellation (join_handle::cancel, with_timeout, shutdown with reads in flight) with no
//     data lost, and 2000 reads on one executor completing at once (more than its 512-entry CQ).
// With both DEFER_TASKRUN set-ups (the newest, and COOP_TASKRUN as older kernels get) where the
// reactor is built directly. Skipped when io_uring cannot be set up.
#include <spindle/spindle.hpp>
#include <spindle/io/io.hpp>
#include <spindle/io/io_wait.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "io/io_test_support.hpp"
#include "net/net_test_support.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::core::io_backend;
using spindle::core::io_opcode;
using spindle::core::io_operation;
using spindle::core::io_sq_point;
using spindle::core::io_sq_point_count;
using spindle::core::reactor_options;
using namespace spindle::testing;

// --- the hook --------------------------------------------------------------------------------

// Each owner thread counts the calls of each point on its own, so a retry loop on one point is
// let through within `period` calls whatever the other threads do.
thread_local std::array<std::uint64_t, io_sq_point_count> sequence{};
// relaxed: set by the test thread before the runtime's threads exist (or on the owner thread
// itself, for a reactor driven directly): thread creation orders it.
std::atomic<std::uint32_t> period{0};
// relaxed (both): statistics, read by the test thread after joining the tasks or the runtime.
std::array<std::atomic<std::uint64_t>, io_sq_point_count> calls{};
std::array<std::atomic<std::uint64_t>, io_sq_point_count> refusals{};

// The first call of each point on each thread, and every `period`th after it, is refused:
// -EBUSY and -EAGAIN alternately (an *_sqe point only needs non-zero).
int sq_full(io_sq_point point) noexcept {
  const auto i = std::size_t(point);
  const std::uint64_t n = sequence[i]++;
  calls[i].fetch_add(1, std::memory_order_relaxed);
  const std::uint32_t p = period.load(std::memory_order_relaxed);
  if (p == 0 || n % p != 0) return 0;
  refusals[i].fetch_add(1, std::memory_order_relaxed);
  return (n / p) % 2 == 0 ? -EBUSY : -EAGAIN;
}

// The calling thread's sequence only (the others' are their own, and new per runtime).
void reset_hook_state(std::uint32_t every) {
  sequence = {};
  // relaxed (all): see the declarations above.
  period.store(every, std::memory_order_relaxed);
  for (auto& c : calls) c.store(0, std::memory_order_relaxed);
  for (auto& r : refusals) r.store(0, std::memory_order_relaxed);
}

std::uint64_t calls_at(io_sq_point point) {
  return calls[std::size_t(point)].load(std::memory_order_relaxed);
}
std::uint64_t refusals_at(io_sq_point point) {
  return refusals[std::size_t(point)].load(std::memory_order_relaxed);
}

const char* name_of(io_sq_point point) {
  switch (point) {
    case io_sq_point::operation_sqe: return "operation_sqe";
    case io_sq_point::cancel_sqe: return "cancel_sqe";
    case io_sq_point::wake_sqe: return "wake_sqe";
    case io_sq_point::submit: return "submit";
    case io_sq_point::submit_and_get_events: return "submit_and_get_events";
    case io_sq_point::submit_and_wait: return "submit_and_wait";
    case io_sq_point::drain_wait: return "drain_wait";
    case io_sq_point::get_events: return "get_events";
  }
  return "?";
}

std::string hook_summary() {
  std::string out;
  for (std::size_t i = 0; i < io_sq_point_count; ++i) {
    const auto point = io_sq_point(i);
    out += std::string(name_of(point)) + "=" + std::to_string(refusals_at(point)) + "/" +
           std::to_string(calls_at(point)) + " ";
  }
  return out;
}

// The io_uring reactor with `options`, the calling thread its owner; null if io_uring cannot be
// set up here.
std::unique_ptr<spindle::core::reactor> uring_reactor(const reactor_options& options) {
  try {
    auto reactor = spindle::core::make_reactor(io_backend::uring, options);
    reactor->attach_owner();
    return reactor;
  } catch (const std::system_error&) {
    return nullptr;
  }
}

// --- descriptors and operations --------------------------------------------------------------

struct fd_owner {
  int fd = -1;
  ~fd_owner() {
    if (fd >= 0) ::close(fd);
  }
};


// Drains `reactor` when it goes out of scope: declared after the operations and buffers of a
// section, it makes sure a failed assertion never leaves the kernel an operation whose memory is
// gone.
struct drain_on_exit {
  spindle::core::reactor& reactor;
  ~drain_on_exit() { reactor.drain(); }
};

bool all_called(const std::vector<recorded>& records) {
  return std::all_of(records.begin(), records.end(), [](const recorded& r) { return r.calls > 0; });
}

// Drives `reactor` with poll() alone (never a parking wait) until `done()`; false after 20 s.
template <class Done>
bool drive_by_polling(spindle::core::reactor& reactor, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    reactor.poll();
  }
  return true;
}

// Drives `reactor` with waits of at most 10 ms until `done()`; false after 20 s.
template <class Done>
bool drive_until(spindle::core::reactor& reactor, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    reactor.wait(10ms);
  }
  return true;
}

// Every record 0..count-1 exactly once in `values`.
bool is_permutation_of_indices(const std::vector<std::uint32_t>& values) {
  std::vector<bool> seen(values.size());
  for (const std::uint32_t v : values) {
    if (v >= seen.size() || seen[v]) return false;
    seen[v] = true;
  }
  return true;
}

// `count` reads of one 4-byte record each on `p`, submitted and armed (the pipe is empty), then
// satisfied by one write of records 0..count-1; driven by poll() alone when `by_polling`.
void reads_satisfied_at_once(spindle::core::reactor& reactor, int count, bool by_polling) {
  fd_pair p{nonblocking_pipe};
  ASSERT_GE(p.read_end, 0);
  std::vector<recorded> records(static_cast<std::size_t>(count));
  std::vector<std::uint32_t> values(static_cast<std::size_t>(count), 0xffffffffu);
  std::vector<io_operation> ops(static_cast<std::size_t>(count));
  drain_on_exit guard{reactor};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ops[i] = recorded_op(io_opcode::read, p.read_end, records[i], &values[i], 4);
    reactor.submit(&ops[i]);
  }
  reactor.poll();
  reactor.wait(1ms);  // parks in the kernel (arms the wake-up read): nothing can complete yet
  EXPECT_EQ(std::count_if(records.begin(), records.end(), [](auto& r) { return r.calls > 0; }), 0);
  std::vector<std::uint32_t> sent(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = std::uint32_t(i);
  const auto bytes = ssize_t(sent.size() * sizeof(std::uint32_t));
  ASSERT_EQ(::write(p.write_end, sent.data(), std::size_t(bytes)), bytes);
  const bool done = by_polling ? drive_by_polling(reactor, [&] { return all_called(records); })
                               : drive_until(reactor, [&] { return all_called(records); });
  ASSERT_TRUE(done) << "completions lost: "
                    << std::count_if(records.begin(), records.end(),
                                     [](auto& r) { return r.calls == 0; })
                    << " of " << count << " never arrived";
  for (int round = 0; round < 3; ++round) reactor.wait(1ms);  // a duplicate would show now
  for (std::size_t i = 0; i < records.size(); ++i) {
    ASSERT_EQ(records[i].calls, 1) << i;
    ASSERT_EQ(records[i].result, 4) << i;
  }
  EXPECT_TRUE(is_permutation_of_indices(values));
  EXPECT_EQ(read_available(p.read_end), "");
  EXPECT_EQ(reactor.in_flight(), 0u);
}

// --- the reactor alone, with the hook --------------------------------------------------------

struct direct_case {
  std::uint32_t period;
  bool defer_taskrun;
};
void PrintTo(const direct_case& c, std::ostream* out) {
  *out << "every " << c.period << (c.defer_taskrun ? ", defer_taskrun" : ", coop_taskrun");
}

// Fixtures over `Param` with one io_uring reactor the test thread owns, the hook installed (it
// counts every point and refuses every `period`-th call; 0 only counts) until TearDown.
template <class Param>
class hooked_reactor_test : public ::testing::TestWithParam<Param> {
 protected:
  // Null reactor_ when io_uring cannot be set up here (the caller skips).
  void open(std::uint32_t period, const reactor_options& options) {
    reset_hook_state(period);
    reactor_ = uring_reactor(options);
    if (reactor_) reactor_->set_sq_fault_hook(&sq_full);
  }
  void TearDown() override {
    reactor_.reset();
    reset_hook_state(0);
  }
  std::unique_ptr<spindle::core::reactor> reactor_;
};

class SqFullDirect : public hooked_reactor_test<direct_case> {
 protected:
  void SetUp() override {
    open(GetParam().period, {.uring_sq_entries = 4,
                             .uring_cq_entries = 8,
                             .uring_defer_taskrun = GetParam().defer_taskrun});
    if (!reactor_) GTEST_SKIP() << "io_uring cannot be set up here";
  }
};

TEST_P(SqFullDirect, EveryPointRetriesToTheExactData) {
  spindle::core::reactor& reactor = *reactor_;

  // 1. Reads armed, then satisfied at once (a 4-entry SQ fills at every 4th submit; an 8-entry
  //    CQ overflows), driven by poll() and then by wait().
  reads_satisfied_at_once(reactor, 200, /*by_polling=*/true);
  reads_satisfied_at_once(reactor, 200, /*by_polling=*/false);

  // 2. Writes: every record arrives once, whole.
  {
    fd_pair p{nonblocking_pipe};
    ASSERT_GE(p.read_end, 0);
    constexpr int count = 100;
    std::vector<recorded> records(count);
    std::vector<std::array<char, 16>> data(count);  // 8 bytes written: "w000042\0"
    std::vector<io_operation> ops(count);
    drain_on_exit guard{reactor};
    for (int i = 0; i < count; ++i) {
      std::snprintf(data[i].data(), data[i].size(), "w%06d", i);
      ops[i] = recorded_op(io_opcode::write, p.write_end, records[i], data[i].data(), 8);
      reactor.submit(&ops[i]);
    }
    ASSERT_TRUE(drive_until(reactor, [&] { return all_called(records); }));
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(records[i].calls, 1) << i;
      EXPECT_EQ(records[i].result, 8) << i;
    }
    const std::string got = read_available(p.read_end);
    ASSERT_EQ(got.size(), std::size_t(count) * 8);
    std::vector<std::uint32_t> seen;
    for (std::size_t at = 0; at < got.size(); at += 8) {
      ASSERT_EQ(got[at], 'w');
      ASSERT_EQ(got[at + 7], '\0');
      seen.push_back(std::uint32_t(std::atoi(got.c_str() + at + 1)));
    }
    EXPECT_TRUE(is_permutation_of_indices(seen));
  }

  // 3. Cancellation: every read ends with -ECANCELED, exactly once, its buffer untouched; what
  //    is written afterwards is all still there.
  {
    fd_pair p{nonblocking_pipe};
    ASSERT_GE(p.read_end, 0);
    constexpr int count = 50;
    std::vector<recorded> records(count);
    std::vector<std::array<char, 4>> buffers(count);
    std::vector<io_operation> ops(count);
    drain_on_exit guard{reactor};
    for (int i = 0; i < count; ++i) {
      buffers[i].fill('#');
      ops[i] = recorded_op(io_opcode::read, p.read_end, records[i], buffers[i].data(), 4);
      reactor.submit(&ops[i]);
    }
    reactor.poll();
    reactor.wait(1ms);
    for (int i = 0; i < count; ++i) reactor.cancel(reinterpret_cast<std::uintptr_t>(&ops[i]));
    ASSERT_TRUE(drive_until(reactor, [&] { return all_called(records); }));
    for (int i = 0; i < 3; ++i) reactor.wait(1ms);
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(records[i].calls, 1) << i;
      EXPECT_EQ(records[i].result, -ECANCELED) << i;
      EXPECT_EQ(std::string(buffers[i].data(), 4), "####") << i;
    }
    ASSERT_EQ(::write(p.write_end, "late", 4), 4);
    EXPECT_EQ(read_available(p.read_end), "late");
  }

  // 4. drain() with reads in flight, some submitted, some only queued.
  {
    fd_pair p{nonblocking_pipe};
    ASSERT_GE(p.read_end, 0);
    constexpr int count = 50;
    std::vector<recorded> records(count);
    std::vector<char> buffers(count, '#');
    std::vector<io_operation> ops(count);
    drain_on_exit guard{reactor};
    for (int i = 0; i < count; ++i) {
      ops[i] = recorded_op(io_opcode::read, p.read_end, records[i], &buffers[i], 1);
      reactor.submit(&ops[i]);
      if (i == count / 2) reactor.poll();
    }
    reactor.wait(1ms);
    reactor.drain();
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(records[i].calls, 1) << i;
      EXPECT_EQ(records[i].result, -ECANCELED) << i;
      EXPECT_EQ(buffers[i], '#') << i;
    }
    EXPECT_EQ(reactor.in_flight(), 0u);
  }

  // Every point was reached and refused at least once (submit_and_get_events exists only with
  // DEFER_TASKRUN; get_events runs when the CQ overflowed, which an 8-entry CQ does above).
  for (std::size_t i = 0; i < io_sq_point_count; ++i) {
    const auto point = io_sq_point(i);
    if (point == io_sq_point::submit_and_get_events && !GetParam().defer_taskrun) continue;
    EXPECT_GT(refusals_at(point), 0u) << name_of(point) << "; " << hook_summary();
  }
  RecordProperty("hook", hook_summary());
}

// --- two paths where a refused submission reaps mid-call ---------------------------------------

// Runs `rescue` on its own thread if it is still alive after 20 s: it turns what would be a hang
// into a failure (a test asserts !fired()). Not a timing assertion: the bound is generous.
class watchdog {
 public:
  template <class Rescue>
  explicit watchdog(Rescue rescue)
      : thread_([this, rescue] {
          std::unique_lock lock(mutex_);
          if (!done_changed_.wait_for(lock, 20s, [this] { return done_; })) {
            fired_ = true;
            rescue();
          }
        }) {}
  ~watchdog() { stop(); }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  // Stops it (joins); true if it had fired.
  bool stop() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_changed_.notify_one();
    if (thread_.joinable()) thread_.join();
    return fired_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// The reactor (defer_taskrun or not), the hook refusing every other call of each point; the
// traces below follow the per-point sequence from a fresh state.
class SqFullEdges : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { reset_hook_state(2); }
  void TearDown() override { reset_hook_state(0); }
  std::unique_ptr<spindle::core::reactor> make(unsigned sq, unsigned cq) {
    auto reactor = uring_reactor(
        {.uring_sq_entries = sq, .uring_cq_entries = cq, .uring_defer_taskrun = GetParam()});
    if (reactor) reactor->set_sq_fault_hook(&sq_full);
    return reactor;
  }
};

// wait() submits what is queued and arms the wake-up read; a refused submission there reaps and
// delivers a completion, whose task is then runnable on this very executor: wait() must return
// instead of blocking in the kernel (here with no timeout, and the only other operation a read
// that nothing satisfies: blocking would be for ever).
TEST_P(SqFullEdges, WaitNeverBlocksAfterDeliveringACompletion) {
  auto reactor = make(4, 8);
  if (!reactor) GTEST_SKIP() << "io_uring cannot be set up here";
  fd_pair idle{nonblocking_pipe}, busy{nonblocking_pipe};
  ASSERT_GE(idle.read_end, 0);
  ASSERT_GE(busy.read_end, 0);
  recorded reader, writer;
  char buffer[4] = {'#', '#', '#', '#'};
  char data[] = "data";
  io_operation read_op = recorded_op(io_opcode::read, idle.read_end, reader, buffer, 4);
  io_operation write_op = recorded_op(io_opcode::write, busy.write_end, writer, data, 4);
  reactor->submit(&read_op);   // waits for ever
  reactor->submit(&write_op);  // completes as soon as the kernel sees it
  watchdog guard([&] { reactor->unpark(); });
  // Trace: the queued write is submitted (after one refusal) and completes; arming the wake-up
  // read is refused, and so is the submission that follows, which reaps: the write's callback
  // runs inside this wait().
  reactor->wait(std::nullopt);
  EXPECT_FALSE(guard.stop()) << "wait() blocked after delivering a completion; " << hook_summary();
  EXPECT_EQ(writer.calls, 1);
  EXPECT_EQ(writer.result, 4);
  EXPECT_EQ(reader.calls, 0);
  reactor->drain();
  EXPECT_EQ(reader.calls, 1);
  EXPECT_EQ(reader.result, -ECANCELED);
  EXPECT_EQ(std::string(buffer, 4), "####");
  EXPECT_EQ(read_available(busy.read_end), "data");
}

// drain() cancels every operation in flight, walking the list; a refused cancel submission reaps,
// which removes completed operations from that list (their links cleared), the one just
// cancelled or the next among them. Every read must still be cancelled: none may be skipped.
TEST_P(SqFullEdges, DrainCancelsEveryOperationWhileItsCancelsReap) {
  auto reactor = make(4, 64);  // room in the CQ: every completed write waits there, unreaped
  if (!reactor) GTEST_SKIP() << "io_uring cannot be set up here";
  constexpr int count = 20;
  fd_pair idle{nonblocking_pipe}, busy{nonblocking_pipe};
  ASSERT_GE(idle.read_end, 0);
  ASSERT_GE(busy.read_end, 0);
  std::vector<recorded> readers(count), writers(count);
  std::vector<char> buffers(count, '#');
  std::vector<std::array<char, 16>> data(count);  // 4 bytes written: "042\0"
  std::vector<io_operation> reads(count), writes(count);
  reset_hook_state(0);  // no refusal while submitting: no reaping, every completion waits
  for (int i = 0; i < count; ++i) {
    reads[i] = recorded_op(io_opcode::read, idle.read_end, readers[i], &buffers[i], 1);
    reactor->submit(&reads[i]);
  }
  for (int i = 0; i < count; ++i) {
    std::snprintf(data[i].data(), data[i].size(), "%03d", i);
    writes[i] = recorded_op(io_opcode::write, busy.write_end, writers[i], data[i].data(), 4);
    reactor->submit(&writes[i]);  // the 4-entry SQ fills: most are submitted (and complete) here
  }
  // Trace from a fresh state: the list runs from the newest operation (the last writes, still
  // queued) to the oldest (the reads). Cancelling the first is refused, so is the submission,
  // which reaps the 16 completed writes, then submits the last 4 (they complete at once);
  // cancelling the second reaps those 4, the operation being cancelled among them.
  reset_hook_state(2);
  // If a read were skipped, the drain would wait for it for ever: give it data after 20 s.
  watchdog guard([&] {
    const std::string rescue(count, 'r');
    [[maybe_unused]] const ssize_t n = ::write(idle.write_end, rescue.data(), rescue.size());
  });
  reactor->drain();
  EXPECT_FALSE(guard.stop()) << "drain() skipped operations; " << hook_summary();
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(readers[i].calls, 1) << i;
    EXPECT_EQ(readers[i].result, -ECANCELED) << i;
    EXPECT_EQ(buffers[i], '#') << i;
    EXPECT_EQ(writers[i].calls, 1) << i;
    EXPECT_EQ(writers[i].result, 4) << i;  // too late to cancel: it completed
  }
  EXPECT_EQ(reactor->in_flight(), 0u);
  EXPECT_EQ(read_available(busy.read_end).size(), std::size_t(count) * 4);
}

INSTANTIATE_TEST_SUITE_P(SetUps, SqFullEdges, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "defer_taskrun" : "coop_taskrun");
                         });

INSTANTIATE_TEST_SUITE_P(Periods, SqFullDirect,
                         ::testing::Values(direct_case{2, true}, direct_case{3, true},
                                           direct_case{2, false}, direct_case{3, false}),
                         [](const ::testing::TestParamInfo<direct_case>& info) {
                           return "every" + std::to_string(info.param.period) +
                                  (info.param.defer_taskrun ? "_defer_taskrun" : "_coop_taskrun");
                         });

// --- completion queue overflow ---------------------------------------------------------------

class CqOverflow : public hooked_reactor_test<bool> {
 protected:
  void SetUp() override {
    // Period 0: the hook only counts (get_events shows that poll() flushed).
    open(0, {.uring_sq_entries = 8, .uring_cq_entries = 8, .uring_defer_taskrun = GetParam()});
    if (!reactor_) GTEST_SKIP() << "io_uring cannot be set up here";
  }
};

TEST_P(CqOverflow, AThousandPipeReadsCompleteExactlyOnceByPollingAlone) {
  reads_satisfied_at_once(*reactor_, 1000, /*by_polling=*/true);
  // The CQ (8 entries) overflowed and poll() moved the rest over (io_uring_get_events).
  EXPECT_GT(calls_at(io_sq_point::get_events), 0u) << hook_summary();
}

TEST_P(CqOverflow, AThousandUdpReceivesCompleteExactlyOnceByPollingAlone) {
  constexpr int count = 1000;
  const fd_owner rx_socket{::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  const fd_owner tx_socket{::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
  const int rx = rx_socket.fd, tx = tx_socket.fd;
  ASSERT_GE(rx, 0);
  ASSERT_GE(tx, 0);
  const int room = 2 << 20;  // the datagrams wait in the socket: make sure none is dropped
  ::setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &room, sizeof room);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(rx, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(rx, reinterpret_cast<sockaddr*>(&address), &length), 0);
  for (std::uint32_t i = 0; i < count; ++i) {
    ASSERT_EQ(::sendto(tx, &i, sizeof i, 0, reinterpret_cast<sockaddr*>(&address), length),
              ssize_t(sizeof i));
  }
  // Every receive completes as soon as it is submitted, far more than the CQ holds.
  std::vector<recorded> records(count);
  std::vector<std::uint32_t> values(count, 0xffffffffu);
  std::vector<io_operation> ops(count);
  drain_on_exit guard{*reactor_};
  for (int i = 0; i < count; ++i) {
    ops[i] = recorded_op(io_opcode::recv, rx, records[i], &values[i], sizeof values[i]);
    reactor_->submit(&ops[i]);
  }
  ASSERT_TRUE(drive_by_polling(*reactor_, [&] { return all_called(records); }))
      << std::count_if(records.begin(), records.end(), [](auto& r) { return r.calls == 0; })
      << " receives never completed";
  for (int round = 0; round < 3; ++round) reactor_->wait(1ms);
  for (int i = 0; i < count; ++i) {
    ASSERT_EQ(records[i].calls, 1) << i;
    ASSERT_EQ(records[i].result, 4) << i;
  }
  EXPECT_TRUE(is_permutation_of_indices(values));
  EXPECT_GT(calls_at(io_sq_point::get_events), 0u) << hook_summary();
}

INSTANTIATE_TEST_SUITE_P(SetUps, CqOverflow, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "defer_taskrun" : "coop_taskrun");
                         });

// poll() between runnables costs no system call while nothing happened: with a read in flight
// that nothing satisfies, a thousand polls enter the kernel at no io_sq_point (the hook counts
// every entry). Then data arrives and poll() alone delivers it.
class IdlePoll : public hooked_reactor_test<bool> {
 protected:
  void SetUp() override {
    open(0, {.uring_defer_taskrun = GetParam()});
    if (!reactor_) GTEST_SKIP() << "io_uring cannot be set up here";
  }
  static std::uint64_t kernel_entries() {
    std::uint64_t total = 0;
    for (const io_sq_point point : {io_sq_point::submit, io_sq_point::submit_and_get_events,
                                    io_sq_point::submit_and_wait, io_sq_point::drain_wait,
                                    io_sq_point::get_events}) {
      total += calls_at(point);
    }
    return total;
  }
};

TEST_P(IdlePoll, PollingWithNothingNewEntersNoSystemCall) {
  fd_pair p;
  make_pipe(p);
  recorded r;
  char buffer[1] = {0};
  io_operation op = recorded_op(io_opcode::read, p.read_end, r, buffer, 1);
  drain_on_exit drain{*reactor_};
  reactor_->submit(&op);
  reactor_->poll();  // submits the read, which now waits for data
  const std::uint64_t entries_after_submit = kernel_entries();
  EXPECT_GT(entries_after_submit, 0u) << hook_summary();
  for (int i = 0; i < 1000; ++i) reactor_->poll();
  EXPECT_EQ(kernel_entries(), entries_after_submit) << hook_summary();
  EXPECT_EQ(r.calls, 0);
  EXPECT_FALSE(reactor_->completions_pending());
  ASSERT_EQ(::write(p.write_end, "!", 1), 1);
  EXPECT_TRUE(reactor_->completions_pending());  // the flag, or (older set-up) the CQE itself
  ASSERT_TRUE(drive_by_polling(*reactor_, [&] { return r.calls == 1; }));
  EXPECT_EQ(r.result, 1);
  EXPECT_EQ(buffer[0], '!');
}

INSTANTIATE_TEST_SUITE_P(SetUps, IdlePoll, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "defer_taskrun" : "coop_taskrun");
                         });

// --- through a runtime: every executor's reactor has the hook --------------------------------

spindle::task<void> install(spindle::core::io_sq_fault_hook hook) {
  spindle::io::current_reactor().set_sq_fault_hook(hook);
  co_return;
}

class SqFullRuntime : public ::testing::TestWithParam<std::uint32_t> {
 protected:
  void SetUp() override {
    reset_hook_state(GetParam());
    if (!uring_reactor({})) GTEST_SKIP() << "io_uring cannot be set up here";
  }
  void TearDown() override { reset_hook_state(0); }

  // A uring runtime whose reactors all have the hook (installed on each owner thread). It stays
  // installed through shutdown, so drain() runs with it too.
  static std::unique_ptr<spindle::runtime> hooked_runtime(
      std::uint32_t workers, const reactor_options& rings = {}) {
    auto rt = std::make_unique<spindle::runtime>(spindle::runtime_options{
        .workers = workers, .io_backend = io_backend::uring, .reactor = rings});
    for (std::uint32_t i = 0; i < rt->executor_count(); ++i) {
      join_bounded(rt->spawn_on(i, install(&sq_full)), 10s);
    }
    return rt;
  }
};

TEST_P(SqFullRuntime, TcpEchoAndUdpArriveByteForByte) {
  using namespace net_test;
  using spindle::net::endpoint;
  const int connections = scaled(100, 50, 20);
  {
    auto rt = hooked_runtime(2);
    auto listener = spindle::net::tcp_listener::bind(endpoint::loopback_v4(0), 1024);
    auto served = rt->spawn(echo_server(listener, connections));
    EXPECT_EQ(join_bounded(rt->spawn(run_echo_clients(listener.local_endpoint(), connections)),
                           120s),
              connections);
    std::size_t expected = 0;
    for (int i = 0; i < connections; ++i) expected += echo_size(std::uint32_t(i));
    EXPECT_EQ(join_bounded(std::move(served), 60s), expected);

    auto a = spindle::net::udp_socket::bind(endpoint::loopback_v4(0));
    auto b = spindle::net::udp_socket::bind(endpoint::loopback_v4(0));
    auto exchange = [](spindle::net::udp_socket& from, spindle::net::udp_socket& to,
                       int count) -> spindle::task<int> {
      int exact = 0;
      std::vector<std::byte> buffer(2000);
      for (int i = 0; i < count; ++i) {
        const auto datagram = pattern(std::uint32_t(i), std::size_t(1 + i * 13 % 1500));
        co_await from.send_to(datagram, to.local_endpoint());
        const auto got = co_await to.receive_from(buffer);
        if (got.size == datagram.size() && got.sender == from.local_endpoint() &&
            first_mismatch(std::span(buffer).first(got.size), std::uint32_t(i)) == got.size) {
          ++exact;
        }
      }
      co_return exact;
    };
    EXPECT_EQ(join_bounded(rt->spawn(exchange(a, b, 200)), 60s), 200);
  }
  EXPECT_GT(refusals_at(io_sq_point::operation_sqe), 0u) << hook_summary();
  EXPECT_GT(refusals_at(io_sq_point::submit), 0u) << hook_summary();
  RecordProperty("hook", hook_summary());
}

spindle::task<void> file_against_reference(std::string path, std::uint64_t seed) {
  using spindle::io::file;
  constexpr std::size_t chunk = 4096, chunks = 128;
  std::mt19937_64 rng(seed);
  std::vector<std::byte> reference(chunk * chunks);
  for (auto& b : reference) b = std::byte(rng() & 0xff);
  file f = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  // Every chunk written by its own task, all at once, in a shuffled order.
  std::vector<std::size_t> order(chunks);
  for (std::size_t i = 0; i < chunks; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<spindle::join_handle<void>> writers;
  for (const std::size_t i : order) {
    writers.push_back(spindle::spawn(f.write_all_at(
        std::span<const std::byte>(reference).subspan(i * chunk, chunk), i * chunk)));
  }
  for (auto& w : writers) co_await std::move(w);
  co_await f.sync();
  EXPECT_EQ(f.size(), reference.size());
  // Random ranges, read by concurrent tasks, each against the reference.
  constexpr int readers = 64;
  std::vector<std::vector<std::byte>> buffers(readers);
  std::vector<std::size_t> offsets(readers);
  std::vector<spindle::join_handle<void>> reads;
  for (int r = 0; r < readers; ++r) {
    const std::size_t offset = rng() % reference.size();
    const std::size_t size = 1 + rng() % std::min<std::size_t>(20000, reference.size() - offset);
    offsets[r] = offset;
    buffers[r].resize(size);
    reads.push_back(spindle::spawn(f.read_exact_at(buffers[r], offset)));
  }
  for (auto& read : reads) co_await std::move(read);
  for (int r = 0; r < readers; ++r) {
    EXPECT_TRUE(std::equal(buffers[r].begin(), buffers[r].end(),
                           reference.begin() + std::ptrdiff_t(offsets[r])))
        << "range at " << offsets[r] << ", " << buffers[r].size() << " bytes";
  }
  // And the whole file in one read.
  std::vector<std::byte> whole(reference.size());
  co_await f.read_exact_at(whole, 0);
  EXPECT_TRUE(whole == reference);
  co_await f.close();
}

TEST_P(SqFullRuntime, FileReadsAndWritesMatchTheReference) {
  std::string dir = (std::filesystem::temp_directory_path() / "spindle-sqfull-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr) << std::strerror(errno);
  {
    auto rt = hooked_runtime(2);
    for (std::uint64_t round = 0; round < 3; ++round) {
      join_bounded(rt->spawn(file_against_reference(dir + "/data" + std::to_string(round), round)),
                   120s);
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  EXPECT_GT(refusals_at(io_sq_point::operation_sqe), 0u) << hook_summary();
  RecordProperty("hook", hook_summary());
}

// A read of up to 4 bytes of `fd` into `buffer` (raw: the result, or -errno), counting itself in
// `started` just before the await (seq_cst, the default: a test's counter, polled by its waiter).
spindle::task<std::int32_t> read_four(int fd, char* buffer, std::atomic<int>* started) {
  io_operation op;
  op.opcode = io_opcode::read;
  op.fd = fd;
  op.buffer = buffer;
  op.length = 4;
  started->fetch_add(1);
  co_return co_await spindle::io::submit_and_wait(op);
}

// A read that never gets data, cut by with_timeout `rounds` times; then a read that gets it.
spindle::task<std::string> timeouts_then_data(int read_fd, int write_fd, int rounds) {
  char buffer[8] = {'#', '#', '#', '#', '#', '#', '#', '#'};
  std::atomic<int> started{0};  // default order: see read_four
  int timed_out = 0;
  for (int i = 0; i < rounds; ++i) {
    try {
      co_await spindle::with_timeout(1ms, read_four(read_fd, buffer, &started));
    } catch (const spindle::timeout_error&) {
      ++timed_out;
    }
  }
  EXPECT_EQ(timed_out, rounds);
  EXPECT_EQ(std::string(buffer, 8), "########");
  EXPECT_EQ(::write(write_fd, "data", 4), 4);
  const std::int32_t n = co_await read_four(read_fd, buffer, &started);
  co_return n == 4 ? std::string(buffer, 4) : "error " + std::to_string(n);
}

// `count` non-blocking pipes, each with a 4-byte read buffer filled with '#' (a read that never
// happened leaves it so).
struct pipe_readers {
  std::vector<std::unique_ptr<fd_pair>> pipes;
  std::vector<std::array<char, 4>> buffers;
  explicit pipe_readers(int count) : buffers(std::size_t(count)) {
    for (int i = 0; i < count; ++i) pipes.push_back(std::make_unique<fd_pair>(nonblocking_pipe));
    for (auto& b : buffers) b.fill('#');
  }
  bool opened() const {
    return std::all_of(pipes.begin(), pipes.end(), [](const auto& p) { return p->read_end >= 0; });
  }
};

TEST_P(SqFullRuntime, CancellationLosesNoData) {
  constexpr int count = 64;
  pipe_readers fixture(count);
  ASSERT_TRUE(fixture.opened());
  auto& pipes = fixture.pipes;
  auto& buffers = fixture.buffers;
  {
    auto rt = hooked_runtime(2);
    // 1. join_handle::cancel while half the pipes were just given data: each read either got
    //    the data whole, or was cancelled and the data is still in its pipe.
    std::atomic<int> started{0};  // default order: see read_four
    std::vector<spindle::join_handle<std::int32_t>> readers;
    for (int i = 0; i < count; ++i) {
      readers.push_back(rt->spawn(read_four(pipes[i]->read_end, buffers[i].data(), &started)));
    }
    ASSERT_TRUE(eventually([&] { return started.load() == count; }));
    for (int i = 0; i < count; i += 2) ASSERT_EQ(::write(pipes[i]->write_end, "abcd", 4), 4);
    for (auto& r : readers) r.cancel();
    int cancelled = 0, completed = 0;
    for (int i = 0; i < count; ++i) {
      bool was_cancelled = false;
      std::int32_t result = 0;
      try {
        result = join_bounded(std::move(readers[i]), 30s);
      } catch (const spindle::task_cancelled&) {
        was_cancelled = true;
      }
      const std::string buffer(buffers[i].data(), 4);
      const std::string left = read_available(pipes[i]->read_end);
      if (was_cancelled) {
        ++cancelled;
        EXPECT_EQ(buffer, "####") << i;
        EXPECT_EQ(left, i % 2 == 0 ? "abcd" : "") << i;
      } else {
        ++completed;
        EXPECT_EQ(i % 2, 0) << i << ": a read with no data completed with " << result;
        EXPECT_EQ(result, 4) << i;
        EXPECT_EQ(buffer, "abcd") << i;
        EXPECT_EQ(left, "") << i;
      }
    }
    EXPECT_EQ(cancelled + completed, count);
    EXPECT_GE(cancelled, count / 2);

    // 2. with_timeout: timers cancel reads, over and over; then the data arrives exact.
    fd_pair p{nonblocking_pipe};
    EXPECT_EQ(join_bounded(rt->spawn(timeouts_then_data(p.read_end, p.write_end, 30)), 60s),
              "data");
  }
  EXPECT_GT(refusals_at(io_sq_point::cancel_sqe), 0u) << hook_summary();
  RecordProperty("hook", hook_summary());
}

TEST_P(SqFullRuntime, ShutdownWithReadsInFlightDrainsEveryOne) {
  constexpr int count = 64;
  pipe_readers fixture(count);
  ASSERT_TRUE(fixture.opened());
  auto& pipes = fixture.pipes;
  auto& buffers = fixture.buffers;
  std::vector<spindle::join_handle<std::int32_t>> readers;
  {
    auto rt = hooked_runtime(2);
    std::atomic<int> started{0};  // default order: see read_four
    for (int i = 0; i < count; ++i) {
      readers.push_back(rt->spawn(read_four(pipes[i]->read_end, buffers[i].data(), &started)));
    }
    ASSERT_TRUE(eventually([&] { return started.load() == count; }));
  }  // drain() cancels every read, with the hook refusing its cancels and waits
  for (int i = 0; i < count; ++i) {
    try {
      EXPECT_EQ(readers[i].join(), -ECANCELED) << i;
    } catch (const spindle::task_cancelled&) {
    }
    ASSERT_EQ(::write(pipes[i]->write_end, "late", 4), 4);
    EXPECT_EQ(read_available(pipes[i]->read_end), "late") << i;
    EXPECT_EQ(std::string(buffers[i].data(), 4), "####") << i;
  }
  EXPECT_GT(refusals_at(io_sq_point::drain_wait) + refusals_at(io_sq_point::cancel_sqe), 0u)
      << hook_summary();
  RecordProperty("hook", hook_summary());
}

// 2000 reads on one executor completing at once: more than its ring's 512 CQ entries.
spindle::task<std::uint64_t> many_readers(int read_fd, int write_fd, int count) {
  std::atomic<int> started{0};  // default order: see read_four
  std::vector<std::uint32_t> values(static_cast<std::size_t>(count), 0xffffffffu);
  std::vector<spindle::join_handle<std::int32_t>> children;
  for (int i = 0; i < count; ++i) {
    children.push_back(spindle::spawn(
        read_four(read_fd, reinterpret_cast<char*>(&values[std::size_t(i)]), &started)));
  }
  co_await until([&] { return started.load() == count; });
  std::vector<std::uint32_t> records(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < records.size(); ++i) records[i] = std::uint32_t(i);
  const auto bytes = ssize_t(records.size() * sizeof(std::uint32_t));
  EXPECT_EQ(::write(write_fd, records.data(), std::size_t(bytes)), bytes);
  std::uint64_t exact = 0;
  for (auto& child : children) exact += (co_await std::move(child)) == 4 ? 1 : 0;
  EXPECT_TRUE(is_permutation_of_indices(values));
  co_return exact;
}

TEST_P(SqFullRuntime, TwoThousandReadsOnOneExecutorCompleteExactlyOnce) {
  fd_pair p{nonblocking_pipe};
  ASSERT_GE(p.read_end, 0);
  ASSERT_GE(::fcntl(p.write_end, F_SETPIPE_SZ, 1 << 16), 0);
  {
    auto rt = hooked_runtime(1);
    EXPECT_EQ(join_bounded(rt->spawn(many_readers(p.read_end, p.write_end, 2000)), 120s), 2000u);
  }
  EXPECT_EQ(read_available(p.read_end), "");
  RecordProperty("hook", hook_summary());
}

// The same through runtime_options::reactor: every executor's ring has an 8-entry SQ and CQ, so
// 2000 completions overflow the CQ ring many times over while the runtime runs them.
TEST_P(SqFullRuntime, TinyRingsFromRuntimeOptionsLoseNothing) {
  fd_pair p{nonblocking_pipe};
  ASSERT_GE(p.read_end, 0);
  ASSERT_GE(::fcntl(p.write_end, F_SETPIPE_SZ, 1 << 16), 0);
  {
    auto rt = hooked_runtime(2, {.uring_sq_entries = 8, .uring_cq_entries = 8});
    EXPECT_EQ(join_bounded(rt->spawn_on(0, many_readers(p.read_end, p.write_end, 2000)), 120s),
              2000u);
  }
  EXPECT_EQ(read_available(p.read_end), "");
}

INSTANTIATE_TEST_SUITE_P(Periods, SqFullRuntime, ::testing::Values(2u, 3u, 7u),
                         [](const ::testing::TestParamInfo<std::uint32_t>& info) {
                           return "every" + std::to_string(info.param);
                         });

}  // namespace
