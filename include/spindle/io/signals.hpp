// POSIX signals as awaitable events: a signalfd read through the reactor.
//
//   int main() {
//     spindle::io::block_signals({SIGINT, SIGTERM, SIGHUP});   // first, before any thread
//     spindle::runtime rt;
//     rt.block_on([]() -> spindle::task<void> {
//       spindle::io::signal_set signals{SIGINT, SIGTERM, SIGHUP};
//       int signo = co_await signals.wait();                    // SIGINT, SIGTERM or SIGHUP
//     }());
//   }
//
// Blocking comes first. A signal handled through a signalfd must be blocked in *every* thread of
// the process; otherwise the kernel delivers it to a thread that does not block it, with its
// normal disposition (SIGINT, SIGTERM, SIGHUP, SIGUSR1... terminate the process) and the
// signalfd never sees it. A thread's mask is inherited by the threads it creates, and spindle's
// worker threads are created by the runtime's constructor, so: call block_signals() at the top
// of main, before creating the runtime (or any other thread). signal_set's constructor blocks its
// signals on the calling thread as well (enough for a single-threaded program, harmless
// otherwise), but it cannot change the masks of threads that already run. (An alternative is
// runtime_options::on_worker_start calling block_signals on each worker; the main thread and any
// other thread must then block them too.) The signals stay blocked after the signal_set is
// destroyed: unblocking would deliver pending ones with their default action.
//
// Process-directed versus thread-directed: kill(getpid(), sig), kill from another process, the
// terminal's SIGINT and sigqueue are process-directed and reach any waiter. raise(sig) and
// pthread_kill are thread-directed: in a multi-threaded program such a signal stays pending on
// that one thread, and a signalfd only reports it to a read made on that thread. So raise() in a
// task reaches a waiter only if the wait's read runs on the same worker (e.g. a runtime with one
// worker); raise() on a non-worker thread is never reported. Use kill(getpid(), sig) instead.
//
// Delivery: each signal instance is reported exactly once, to one waiter. Several tasks may wait
// on one signal_set at the same time (or on several signal_sets covering the same signal): each
// signal goes to exactly one of them, which one is unspecified. Standard signals are not queued
// by the kernel: the same signal sent twice before anyone reads it is reported once. Real-time
// signals (SIGRTMIN..SIGRTMAX) are queued and reported once per instance, in order. When several
// different signals are pending, the kernel reports the lowest-numbered first. A signal that
// arrives while nobody waits stays pending and is reported by the next wait.
//
// Waiting: wait() reads the signalfd (SFD_NONBLOCK | SFD_CLOEXEC) with io_opcode::read; when
// nothing is pending (-EAGAIN) it waits for readability with io_opcode::poll (POLLIN) and reads
// again. Both are cancellable waits: a cancelled task (handle.cancel(), with_timeout) gets
// task_cancelled (or timeout_error from with_timeout), and no signal is lost: a signal is
// consumed only by a read whose result is returned.
//
// Lifetime: the signal_set must outlive every wait() task made from it; destroy it (which closes
// the signalfd, synchronously) only when no wait is in flight. It is movable, not while a wait is
// in flight either.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <span>

#include "spindle/task/task.hpp"

namespace spindle::io {

// Blocks `signals` on the calling thread (pthread_sigmask(SIG_BLOCK)), adding to what it blocks
// already. Call it at the top of main, before any thread exists (see above). Throws
// system_error(EINVAL, "spindle: sigaddset") for an invalid signal number.
void block_signals(std::initializer_list<int> signals);
void block_signals(std::span<const int> signals);

// What the kernel says about one delivered signal (a subset of signalfd_siginfo).
struct signal_info {
  int signo = 0;
  int code = 0;           // si_code: SI_USER (kill), SI_QUEUE (sigqueue), SI_TKILL (raise), ...
  pid_t pid = 0;          // sender (kill, sigqueue)
  uid_t uid = 0;          // sender's real uid
  std::int32_t value = 0; // sigqueue's sival_int
};

class signal_set {
 public:
  // Blocks `signals` on the calling thread and opens a signalfd for them. Throws
  // system_error(EINVAL, "spindle: signal_set") for an invalid number, SIGKILL or SIGSTOP, and
  // system_error("spindle: signalfd") if the kernel refuses.
  signal_set(std::initializer_list<int> signals);
  explicit signal_set(std::span<const int> signals);
  signal_set(signal_set&& other) noexcept;
  signal_set& operator=(signal_set&& other) noexcept;
  signal_set(const signal_set&) = delete;
  signal_set& operator=(const signal_set&) = delete;
  // Closes the signalfd (no wait may be in flight). The signals stay blocked.
  ~signal_set();

  // The next signal of the set: its number. Throws task_cancelled when the task is cancelled
  // while waiting, system_error("spindle: read") / ("spindle: poll") on a kernel error.
  task<int> wait();
  // The same, with the details the kernel gives.
  task<signal_info> wait_info();

  // Whether `signo` belongs to the set.
  bool contains(int signo) const noexcept;
  int native_handle() const noexcept { return fd_; }

 private:
  sigset_t mask_{};
  int fd_ = -1;
};

}  // namespace spindle::io
