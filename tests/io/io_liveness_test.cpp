// Liveness of I/O while a fork-join computation keeps the executors busy (issue 13, item 3), on
// both backends: a pipe read that was waiting in an executor's reactor completes, and its task
// resumes, while a fine-grained parallel_for keeps both workers of the runtime busy.
//
// The computation runs until the read completed or a generous deadline passed
// (support/liveness_support.hpp): a starved read fails the test at that bound, never hangs it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "io/io_test_support.hpp"
#include "spindle/spindle.hpp"
#include "support/liveness_support.hpp"
#include "support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::core::io_backend;
using spindle::core::io_opcode;
using spindle::core::io_operation;
using namespace spindle::testing;

// Reads one byte of `fd`; records the result and whether `loop` was running when it resumed.
spindle::task<void> read_one_byte(int fd, std::atomic<bool>* waiting, const freezing_loop* loop,
                                  std::atomic<std::int32_t>* result,
                                  std::atomic<bool>* resumed_during_loop) {
  char byte = 0;
  io_operation op;
  op.opcode = io_opcode::read;
  op.fd = fd;
  op.buffer = &byte;
  op.length = 1;
  waiting->store(true);
  const std::int32_t r = co_await spindle::io::submit_and_wait(op);
  resumed_during_loop->store(loop->busy());
  result->store(r);
}

class IoLiveness : public ::testing::TestWithParam<io_backend> {};

// The read waits in a reactor (every executor parked, so it was submitted) before the loop
// starts; the byte is written once the loop runs. Today the completion is reaped only when the
// loop ends.
TEST_P(IoLiveness, PipeReadCompletesDuringAFineGrainedParallelFor) {
  fd_pair pipe;
  make_pipe(pipe);
  freezing_loop loop;
  std::atomic<bool> waiting{false}, resumed_during_loop{false};
  std::atomic<std::int32_t> result{-1};
  spindle::runtime rt({.workers = 2, .io_backend = GetParam()});
  set_on_exit end_loop(loop.probe_done);
  auto reader = rt.spawn(read_one_byte(pipe.read_end, &waiting, &loop, &result,
                                       &resumed_during_loop));
  ASSERT_TRUE(eventually([&] { return waiting.load() && rt.core().unparked_count() == 0; },
                         liveness_wait))
      << "the reader did not reach its wait";
  auto computation = rt.spawn([&loop] { loop.run(); });
  ASSERT_TRUE(eventually([&] { return loop.spread_over(2) || loop.finished.load(); },
                         liveness_wait));
  ASSERT_TRUE(loop.busy() && loop.spread_over(2)) << "the loop does not run on both workers";
  ASSERT_EQ(::write(pipe.write_end, "x", 1), 1);
  eventually([&] { return reader.is_finished() || !loop.busy(); }, liveness_wait + 2s);
  loop.probe_done.store(true);
  join_bounded(std::move(computation));
  join_bounded(std::move(reader));
  EXPECT_EQ(result.load(), 1);
  EXPECT_TRUE(resumed_during_loop.load())
      << "the pipe read resumed only after the parallel_for ran into its 3 s deadline";
}

INSTANTIATE_TEST_SUITE_P(Backends, IoLiveness,
                         ::testing::Values(io_backend::uring, io_backend::epoll),
                         spindle::testing::backend_name);

}  // namespace
