// The helper pool and its awaitable (src/io/helper_pool.hpp).
#include "io/helper_pool.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "spindle/io/directory.hpp"
#include "spindle/io/io_wait.hpp"

namespace spindle::io::detail {
namespace {

class helper_pool {
 public:
  explicit helper_pool(unsigned most_threads) : most_threads_(most_threads) {}

  static helper_pool& instance(helper_pool_kind kind) {
    // Never destroyed: detached helpers may still use them while the process exits.
    static helper_pool* files = new helper_pool(helper_threads);
    static helper_pool* resolver = new helper_pool(resolver_helper_threads);
    return kind == helper_pool_kind::resolver ? *resolver : *files;
  }

  void submit(std::shared_ptr<helper_job> job) {
    std::unique_lock lock(mutex_);
    queue_.push_back(std::move(job));
    // More queued jobs than idle threads to take them: start one more. (Not "no idle thread":
    // idle threads count until they wake, so a burst queued before any woke would start none.)
    if (queue_.size() > idle_ && started_ < most_threads_) {
      try {
        std::thread([this] { serve(); }).detach();
        ++started_;
      } catch (...) {
        // No thread (EAGAIN): the job waits for a running helper, or, with none, is refused.
        if (started_ == 0) {
          queue_.pop_back();
          throw;
        }
      }
    }
    lock.unlock();
    ready_.notify_one();
  }

 private:
  void serve() {
    for (;;) {
      std::shared_ptr<helper_job> job;
      {
        std::unique_lock lock(mutex_);
        ++idle_;
        ready_.wait(lock, [this] { return !queue_.empty(); });
        --idle_;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->run();
      job->mark_done();
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t written = ::write(job->done_fd(), &one, sizeof one);
    }
  }

  const unsigned most_threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<helper_job>> queue_;
  unsigned started_ = 0;  // guarded by mutex_
  unsigned idle_ = 0;     // guarded by mutex_
};

}  // namespace

helper_job::helper_job() {
  done_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (done_fd_ < 0) throw std::system_error(errno, std::system_category(), "spindle: eventfd");
}

helper_job::~helper_job() {
  if (done_fd_ >= 0) ::close(done_fd_);
}

task<bool> run_on_helper(std::shared_ptr<helper_job> job, helper_pool_kind kind,
                         std::optional<clock_time> when) {
  current_reactor();  // usage_error off a worker, before anything is queued
  helper_pool::instance(kind).submit(job);
  // `value` and `op` live in this frame until the read's final completion (io_wait.hpp); `job`
  // (a parameter) keeps the eventfd open until then.
  std::uint64_t value = 0;
  for (;;) {
    core::io_operation op{};
    op.opcode = core::io_opcode::read;
    op.fd = job->done_fd();
    op.buffer = &value;
    op.length = sizeof value;
    const std::int32_t result = co_await submit_and_wait(op, when);
    if (result == deadline_expired) co_return false;
    if (result == sizeof value && job->is_done()) co_return true;
    if (result == sizeof value) continue;  // cannot happen: only the helper writes, after run()
    if (result == -EAGAIN) {
      core::io_operation ready{};
      ready.opcode = core::io_opcode::poll;
      ready.fd = job->done_fd();
      ready.flags = POLLIN;
      if (co_await submit_and_wait(ready, when) == deadline_expired) co_return false;
      continue;
    }
    if (result != -EINTR) {
      throw std::system_error(result < 0 ? -result : EIO, std::system_category(),
                              "spindle: helper completion read");
    }
  }
}

}  // namespace spindle::io::detail
