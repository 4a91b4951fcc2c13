// The state a dispatcher shares with its tasks and its submissions (dispatcher.hpp has the
// design). Owned by std::shared_ptr: the dispatcher object, each of its tasks and each
// submission hold one (U3), so whichever goes last frees it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dispatch_queue.hpp"
#include "spindle/dispatch/dispatcher.hpp"

namespace spindle::detail {

// "Cancel the submission the runner is on", posted to the sequential worker.
struct cancel_running_node : dispatch_node {
  explicit cancel_running_node(submission_ref s) noexcept
      : dispatch_node(kind::cancel_running), target(std::move(s)) {}
  submission_ref target;
};

struct worker_exit;
struct runner_exit;

class dispatcher_shared : public std::enable_shared_from_this<dispatcher_shared> {
 public:
  dispatcher_shared(std::shared_ptr<runtime_state> runtime, dispatcher_options options);

  // Starts the worker tasks (and the runner); called once, right after construction.
  void start();

  void enqueue(submission_base* s);
  void close(close_policy policy);
  // Blocks the calling (foreign) thread until every accepted submission completed.
  void wait_until_idle() noexcept;

  // From submission_base.
  void on_finished(submission_base* s) noexcept;
  // False when the mode cannot cancel a started submission.
  bool on_cancel_running(submission_base* s) noexcept;
  // Whether the calling thread is one of this runtime's workers.
  bool on_own_worker() const noexcept;
  // A submission's exception nobody observes (U6): options.on_unobserved_exception, or the log.
  void report_unobserved(std::exception_ptr error) noexcept;
  // The snapshot's view (any thread): queued = in its queues; running = accepted, not
  // complete and not queued (approximate: the counts are read one after the other).
  void write_diagnostics(diagnostics::json_writer& out) const;

  const dispatcher_options options;
  std::atomic<std::uint64_t> outstanding{0};  // accepted, not complete
  // G2 metrics (relaxed read-modify-writes: many submitting threads; beside `outstanding`'s).
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> completed{0};
  // Appends the spindle_dispatcher_* samples of this dispatcher (any thread).
  void write_metrics(std::string& out, std::string_view id) const;

 private:
  friend struct worker_exit;
  friend struct runner_exit;
  // The tasks; each keeps the shared state alive through its exit guard.
  static task<void> parallel_worker(worker_exit exit);
  static task<void> sequential_worker(worker_exit exit);
  static task<void> runner(runner_exit exit);
  // The latch/drain/refill protocol for one cancel request (sequential mode, the worker).
  task<void> cancel_running(submission_base* target);
  // Completes every submission in `chain` as cancelled and frees the control nodes.
  void finish_chain(dispatch_node* chain) noexcept;
  void kill_queue(dispatch_queue& queue) noexcept;
  std::uint32_t pick_shard() noexcept;

  std::shared_ptr<runtime_state> runtime_;
  std::vector<std::unique_ptr<dispatch_queue>> shards_;
  std::atomic<bool> closing_{false};
  std::atomic<bool> closed_{false};  // the first closer is done with its steps

  // Sequential mode (shards_[0] is the worker's queue). The worker alone touches runner_task_
  // and drained_ (and its exit guard, once the worker is gone).
  dispatch_queue run_queue_;       // worker -> runner
  join_handle<void> runner_task_;
  dispatch_node* drained_ = nullptr;  // step 2 of the protocol, until step 4
  dispatch_node runner_finished_{dispatch_node::kind::runner_finished};
};

}  // namespace spindle::detail
