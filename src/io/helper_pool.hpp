// Blocking calls off the executors (private to src/io): a process-wide pool of helper threads
// and the awaitable that hands a job to it (io/directory.hpp says who uses it and why).
//
// Who takes part:
//   - the task: creates a job (a shared_ptr), hands it over with run_on_helper, and waits with an
//     eventfd read through its executor's reactor; once the read completes, the job is done and
//     its results are the task's to read. The kernel orders the helper's eventfd write after
//     run() before the read's completion, but ThreadSanitizer cannot see a read io_uring makes,
//     so `done` states the order explicitly (release by the helper, acquire by the task).
//   - a helper thread: takes jobs in order, runs them, writes the eventfd, drops its reference.
// Lifetimes: the job holds the eventfd and is shared, so a task cancelled while waiting (the
// read cancelled, the task gone) leaves a job the helper finishes and then frees, closing the
// eventfd; nothing the helper touches belongs to the task.
// The pools: two, each process-wide, with its own queue and its own threads: `files` (directory
// listings, status on epoll; at most io::helper_threads) and `resolver` (getaddrinfo for
// net::resolve; at most resolver_helper_threads), so that name lookups stuck on an unreachable
// DNS server (seconds each) never hold up a directory listing, nor listings a lookup. Threads
// start on demand (a job queued while every started thread of its pool is busy starts one more,
// up to the pool's limit), wait on a condition variable, and are never joined (detached: they may
// be blocked in a slow file system call or DNS query when the process exits).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "spindle/core/clock.hpp"

#include "spindle/task/task.hpp"

namespace spindle::io::detail {

class helper_job {
 public:
  helper_job();  // creates the eventfd (std::system_error on failure)
  virtual ~helper_job();
  helper_job(const helper_job&) = delete;
  helper_job& operator=(const helper_job&) = delete;

  // On the helper thread. Must not throw: store an error code for the task instead.
  virtual void run() noexcept = 0;

  int done_fd() const noexcept { return done_fd_; }
  // Helper, after run(): release, so the task that acquires it sees the job's results.
  void mark_done() noexcept { done_.store(true, std::memory_order_release); }
  // Task, after the eventfd read: acquire, pairing with mark_done.
  bool is_done() const noexcept { return done_.load(std::memory_order_acquire); }

 private:
  int done_fd_ = -1;
  std::atomic<bool> done_{false};
};

enum class helper_pool_kind : std::uint8_t { files, resolver };

// The most threads the resolver pool starts (net/resolve.hpp repeats it as net::resolver_threads).
inline constexpr unsigned resolver_helper_threads = 8;

// Queues `job` on the pool `kind` and waits (through the reactor) until it has run: true. With a
// deadline (`when`, on the runtime's clock), false when it passed first: the wait was cancelled
// and the job is left to the helper, which finishes it and frees it, as for a cancelled task.
task<bool> run_on_helper(std::shared_ptr<helper_job> job,
                         helper_pool_kind kind = helper_pool_kind::files,
                         std::optional<clock_time> when = std::nullopt);

}  // namespace spindle::io::detail
