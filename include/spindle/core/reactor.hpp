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
#pragma once

#include <sys/socket.h>

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
  // Owner: cancels everything in flight and waits for every final completion.
  virtual void drain() noexcept = 0;

  // Test hook for fault injection (see io_fault_hook); null disables it.
  void set_fault_hook(io_fault_hook hook) noexcept { fault_hook_ = hook; }

 protected:
  io_fault_hook fault_hook_ = nullptr;
};

// The one place a backend is chosen: `requested`, unless it is automatic and the environment
// variable SPINDLE_IO_BACKEND says uring or epoll; automatic tries io_uring first and falls back
// to epoll when io_uring cannot be set up (ENOSYS, EPERM under seccomp, ENOMEM).
std::unique_ptr<reactor> make_reactor(io_backend requested);

}  // namespace spindle::core
