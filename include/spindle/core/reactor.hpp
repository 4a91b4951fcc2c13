// The reactor: one per executor, the executor's way to talk to the kernel about I/O, and the
// place it parks (it is the executor's park_driver). Two backends behind this one interface:
// io_uring (liburing) and epoll, chosen in make_reactor (docs/design/io.md).
//
// Who takes part:
//   - the owner: the executor's thread. Only it submits, polls, waits and cancels; completion
//     callbacks run on it.
//   - anyone: unpark() (wakes the owner from wait), as for every park_driver.
// An operation (`io_operation`) lives in the memory of whoever submitted it (a coroutine frame)
// and belongs to the reactor from submit() until its completion callback runs, exactly once,
// with the kernel's final result (invariant R1). Cancelling does not end that ownership: it asks
// the kernel to finish the operation early (the callback then sees -ECANCELED, or the real result
// if it won the race); buffers stay untouchable until the callback (I3).
//
// The executor loop calls poll() between runnables when its local queue runs dry and at every
// budget end (seed 000's time-slice procedure: reap completions, route each to its task, submit
// what the slice queued in one batch), and wait(timeout) when it parks.
//
// The owner thread calls attach_owner() once before anything else (io_uring rings are created
// disabled and owned by a single issuer: the worker thread, not the thread that built the
// executor), and drain() when it leaves its loop at shutdown: every operation in flight is
// cancelled and its final completion reaped (callbacks run, waking tasks that shutdown then
// drops), so no buffer is ever written after its owner was destroyed.
//
// Test hooks (owner thread; null, the default, costs one predictable branch where consulted):
// set_fault_hook rewrites results before delivery (EAGAIN, ECANCELED, ENOBUFS, short transfers);
// set_sq_fault_hook makes the io_uring backend behave as if its submission queue were full at a
// chosen io_sq_point. make_reactor's reactor_options size the ring (a tiny completion queue to
// force overflow) and pick the older set-up without IORING_SETUP_DEFER_TASKRUN.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "spindle/core/parker.hpp"

namespace spindle::core {

enum class io_backend : std::uint8_t {
  automatic,  // io_uring if it can be set up, else epoll (SPINDLE_IO_BACKEND=uring|epoll forces)
  uring,
  epoll,
};
const char* to_string(io_backend backend) noexcept;

enum class io_opcode : std::uint8_t {
  read,      // read(fd, buffer, length) at `offset` (-1: current position / stream)
  write,     // write(fd, buffer, length) at `offset`
  recv,      // recv(fd, buffer, length, flags)
  send,      // send(fd, buffer, length, flags | MSG_NOSIGNAL)
  recvmsg,   // recvmsg(fd, message, flags)
  sendmsg,   // sendmsg(fd, message, flags | MSG_NOSIGNAL)
  accept,    // accept4(fd, address, address_length, SOCK_CLOEXEC | SOCK_NONBLOCK)
  connect,   // connect(fd, address, address_length value)
  fsync,     // fsync(fd) (flags: IORING_FSYNC_DATASYNC for fdatasync)
  poll,      // wait until fd is readable (flags = POLLIN) or writable (POLLOUT); result: revents
  close,     // close(fd)
  statx,     // statx(fd as dirfd, path, flags, length as mask, buffer as struct statx*)
  writev,    // pwritev(fd, buffer as const iovec*, length as the iovec count) at `offset`
};

struct io_operation {
  using completion = void (*)(io_operation*) noexcept;

  io_opcode opcode = io_opcode::read;
  int fd = -1;
  void* buffer = nullptr;
  std::uint32_t length = 0;
  std::int32_t flags = 0;
  std::int64_t offset = -1;
  sockaddr* address = nullptr;              // accept (out), connect (in)
  socklen_t* address_length = nullptr;      // accept: in/out
  socklen_t connect_length = 0;             // connect: length of *address
  struct msghdr* message = nullptr;         // recvmsg / sendmsg
  const char* path = nullptr;               // statx
  // Result as the kernel reports it: >= 0 on success, -errno on failure.
  std::int32_t result = 0;
  // Runs on the owner's thread with the final result. The operation is the submitter's again.
  completion on_complete = nullptr;
  void* context = nullptr;  // for the submitter's callback (e.g. its awaiter)

  // Reactor bookkeeping (owner thread only).
  io_operation* previous_in_flight = nullptr;
  io_operation* next_in_flight = nullptr;
  io_operation* next_waiting = nullptr;  // epoll: queued for an attempt / waiting for readiness
};

// Optional test hook: may rewrite an operation's result just before its completion callback
// (fault injection: EAGAIN, ECANCELED, ENOBUFS, short transfers). Called on the owner thread.
using io_fault_hook = void (*)(io_operation* operation) noexcept;

// The places where the io_uring backend takes a submission queue entry or hands the queue to the
// kernel: where a test can make it behave as if the queue were full (io_sq_fault_hook).
enum class io_sq_point : std::uint8_t {
  operation_sqe,          // submit(): io_uring_get_sqe for an operation
  cancel_sqe,             // cancel(), drain(): io_uring_get_sqe for a cancel request
  wake_sqe,               // wait(): io_uring_get_sqe for the read on the wake-up eventfd
  submit,                 // io_uring_submit: a full SQ, poll() without DEFER_TASKRUN, wait()
  submit_and_get_events,  // poll() with DEFER_TASKRUN
  submit_and_wait,        // wait(): parking in the kernel
  drain_wait,             // drain(): waiting for the final completions
  get_events,             // poll(): moving overflowed completions onto the CQ ring
};
constexpr std::size_t io_sq_point_count = 8;
static_assert(std::size_t(io_sq_point::get_events) + 1 == io_sq_point_count);

// Optional test hook (io_uring only: epoll has no submission queue), called at each io_sq_point
// on the owner thread. 0: go ahead. Anything else: at an *_sqe point, io_uring_get_sqe is taken
// to have returned null (the SQ is full); at the others the value (-EAGAIN or -EBUSY) is taken
// as the system call's result, which is not made. The backend retries (submits what is queued,
// reaps, tries again), so the hook must let every point through eventually: count per point
// (a single counter shared by all points can answer "full" to the same point forever).
using io_sq_fault_hook = int (*)(io_sq_point point) noexcept;

// How make_reactor builds a reactor; the defaults are what the runtime uses.
struct reactor_options {
  // io_uring submission queue entries (the kernel rounds up to a power of two) and completion
  // queue entries (0: twice the SQ, the kernel's default; else at least the SQ's, e.g. a tiny CQ
  // to force overflow in tests).
  unsigned uring_sq_entries = 256;
  unsigned uring_cq_entries = 0;
  // false: skip IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN | R_DISABLED and start from the set-up
  // older kernels get (COOP_TASKRUN), so tests cover both paths of poll().
  bool uring_defer_taskrun = true;
};

class reactor : public park_driver {
 public:
  virtual io_backend backend() const noexcept = 0;
  // Owner, once, on its own thread, before any other owner call.
  virtual void attach_owner() noexcept {}

  // Owner. Queues `operation`; it reaches the kernel at the next poll()/wait() (uring: one
  // io_uring_enter for the whole batch) or is attempted there (epoll). Never fails, never drops:
  // a full submission queue is submitted and retried.
  virtual void submit(io_operation* operation) noexcept = 0;
  // Owner. Asks the kernel to finish the operation identified by `operation_id` (its address as
  // an integer) early. Harmless if it already completed: nothing is dereferenced.
  virtual void cancel(std::uintptr_t operation_id) noexcept = 0;
  // Owner. Submits what is queued and runs the callbacks of completed operations; never blocks.
  virtual void poll() noexcept = 0;
  // Owner. Operations submitted and not yet completed.
  virtual std::size_t in_flight() const noexcept = 0;
  // Owner, no system call: true if poll() has completions to deliver right now, as far as the
  // backend can tell without asking the kernel (io_uring: a CQE on the ring, deferred task work
  // flagged in the SQ ring's flags, overflowed CQEs). A hint for an executor deciding whether to
  // keep spinning; false from a backend that cannot tell (epoll).
  virtual bool completions_pending() const noexcept { return false; }
  // Owner: cancels everything in flight and waits for every final completion.
  virtual void drain() noexcept = 0;

  // G2 metrics: operations submitted and completed (final completions) since construction.
  // The owner writes (count_submitted/count_completed, single writer), anyone reads; in flight
  // as a reader sees it: completed first, then submitted, subtracted (never negative).
  std::uint64_t operations_submitted() const noexcept {
    return operations_submitted_.load(std::memory_order_relaxed);  // relaxed: a sample
  }
  std::uint64_t operations_completed() const noexcept {
    return operations_completed_.load(std::memory_order_relaxed);  // relaxed: a sample
  }

  // Test hook for fault injection (see io_fault_hook); null disables it.
  void set_fault_hook(io_fault_hook hook) noexcept { fault_hook_ = hook; }
  // Test hook making the submission queue look full (see io_sq_fault_hook); null disables it.
  // Owner thread. Ignored by the epoll backend.
  void set_sq_fault_hook(io_sq_fault_hook hook) noexcept { sq_fault_hook_ = hook; }
  // Whether a test hook is installed: callers that could complete an operation without the
  // reactor (io::file's cached reads) then go through it, where the faults are injected.
  bool has_test_hooks() const noexcept {
    return fault_hook_ != nullptr || sq_fault_hook_ != nullptr;
  }

 protected:
  io_fault_hook fault_hook_ = nullptr;
  io_sq_fault_hook sq_fault_hook_ = nullptr;
  // Backends: next to in_flight_ insert/remove (relaxed: single writer; readers sample).
  void count_submitted() noexcept {
    operations_submitted_.store(operations_submitted_.load(std::memory_order_relaxed) + 1,
                                std::memory_order_relaxed);
  }
  void count_completed() noexcept {
    operations_completed_.store(operations_completed_.load(std::memory_order_relaxed) + 1,
                                std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint64_t> operations_submitted_{0};
  std::atomic<std::uint64_t> operations_completed_{0};
};

// The one place a backend is chosen: `requested`, unless it is automatic and the environment
// variable SPINDLE_IO_BACKEND says uring or epoll; automatic tries io_uring first and falls back
// to epoll when io_uring cannot be set up (ENOSYS, EPERM under seccomp, ENOMEM). Without
// `options`, the defaults (what the runtime's executors use).
std::unique_ptr<reactor> make_reactor(io_backend requested);
std::unique_ptr<reactor> make_reactor(io_backend requested, const reactor_options& options);

}  // namespace spindle::core
