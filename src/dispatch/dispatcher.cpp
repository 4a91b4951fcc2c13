// The dispatcher's tasks and the sequential cancel protocol (design in
// spindle/dispatch/dispatcher.hpp).
#include "spindle/dispatch/dispatcher.hpp"

#include <cstdint>
#include <memory>
#include <new>

#include "dispatcher_shared.hpp"
#include "spindle/diagnostics/prometheus.hpp"

namespace spindle {
namespace detail {

// A parameter of every worker coroutine, so it lives exactly as long as the frame: however the
// worker ends (its loop is done, or runtime shutdown destroys its frame), its queue dies and
// what is left in it completes as cancelled. It also keeps the shared state alive (U3).
struct worker_exit {
  std::shared_ptr<dispatcher_shared> shared;
  dispatch_queue* queue;
  worker_exit(std::shared_ptr<dispatcher_shared> s, dispatch_queue* q) noexcept : shared(std::move(s)), queue(q) {}
  worker_exit(worker_exit&&) noexcept = default;
  ~worker_exit() {
    if (!shared) return;
    shared->kill_queue(*queue);
    if (shared->options.mode == dispatch_mode::sequential) {
      // The runner's frame holds the shared state (runner_exit): holding its handle here
      // would keep both alive for ever.
      shared->runner_task_.detach();
      // Abandoned in the middle of the protocol: what was drained is nowhere else.
      shared->finish_chain(std::exchange(shared->drained_, nullptr));
      shared->kill_queue(shared->run_queue_);
    }
  }
};

// The runner's: only an abandoned runner (runtime shutdown) takes its queue down; one that
// ends normally or by the cancel protocol leaves it to the worker.
struct runner_exit {
  std::shared_ptr<dispatcher_shared> shared;
  bool abandoned = true;
  explicit runner_exit(std::shared_ptr<dispatcher_shared> s) noexcept : shared(std::move(s)) {}
  runner_exit(runner_exit&&) noexcept = default;
  ~runner_exit() {
    if (shared && abandoned) shared->kill_queue(shared->run_queue_);
  }
};

dispatcher_shared::dispatcher_shared(std::shared_ptr<runtime_state> runtime, dispatcher_options opts)
    : options(opts), runtime_(std::move(runtime)) {
  std::uint32_t count = 1;
  if (options.mode == dispatch_mode::parallel) {
    count = options.shards != 0 ? options.shards : runtime_->core->executor_count();
  }
  shards_.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) shards_.push_back(std::make_unique<dispatch_queue>());
}

void dispatcher_shared::start() {
  const std::uint32_t executors = runtime_->core->executor_count();
  auto start_on = [&](std::uint32_t executor, task<void> body) {
    host_entry entry(*runtime_);  // as for any spawn from outside (task/runtime.hpp)
    if (entry.refused()) throw runtime_stopped();
    auto* spawned = prepare_spawn(*runtime_, std::move(body));
    spawned->set_name(options.name.empty() ? std::string_view("dispatcher worker")
                                           : std::string_view(options.name));
    runtime_->core->schedule_on(executor % executors, spawned);
    join_handle<void>(spawned).detach();
  };
  if (options.mode == dispatch_mode::parallel) {
    for (std::uint32_t i = 0; i < shards_.size(); ++i) {
      start_on(i, parallel_worker(worker_exit(shared_from_this(), shards_[i].get())));
    }
  } else {
    start_on(0, sequential_worker(worker_exit(shared_from_this(), shards_[0].get())));
  }
}

std::uint32_t dispatcher_shared::pick_shard() noexcept {
  const auto count = static_cast<std::uint32_t>(shards_.size());
  if (count == 1) return 0;
  // xorshift per thread: submitters never share a generator.
  thread_local std::uint64_t seed = reinterpret_cast<std::uintptr_t>(&seed) | 1;
  seed ^= seed << 13;
  seed ^= seed >> 7;
  seed ^= seed << 17;
  const auto first = static_cast<std::uint32_t>(seed % count);
  const auto second = static_cast<std::uint32_t>((first + 1 + (seed >> 32) % (count - 1)) % count);
  return shards_[second]->size() < shards_[first]->size() ? second : first;
}

void dispatcher_shared::enqueue(submission_base* s) {
  submission_ref dispatcher_side(s);
  s->owner_ = this;
  s->owner_reference_ = shared_from_this();
  s->shard = pick_shard();
  // relaxed: counted before it can complete (the push publishes it); close() waits for zero.
  outstanding.fetch_add(1, std::memory_order_relaxed);
  // relaxed: a hint that saves the lock; the queue's own flag under its lock decides.
  if (closing_.load(std::memory_order_relaxed) || !shards_[s->shard]->push(s, true)) {
    if (outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) outstanding.notify_all();
    throw dispatcher_closed();
  }
  dispatcher_side.release();  // the queue holds it now
  // relaxed: a statistic (a reader may briefly see this submission completed, not yet counted
  // here; both counters only grow).
  accepted.fetch_add(1, std::memory_order_relaxed);
}

void dispatcher_shared::on_finished(submission_base* s) noexcept {
  shards_[s->shard]->unlink_live(s);
  completed.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
  // acq_rel: a closer that sees zero sees every completion before it.
  if (outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) outstanding.notify_all();
}

void dispatcher_shared::write_metrics(std::string& out, std::string_view id) const {
  // relaxed, all: samples; a reader may see a submission both queued and outstanding-not-yet.
  const std::uint64_t done = completed.load(std::memory_order_relaxed);
  const std::uint64_t taken = accepted.load(std::memory_order_relaxed);
  const std::uint64_t open = outstanding.load(std::memory_order_relaxed);
  std::uint64_t queued = run_queue_.size();
  for (const auto& shard : shards_) queued += shard->size();
  const diagnostics::metric_label labels[] = {{"dispatcher", id},
                                              {"mode", to_string(options.mode)}};
  diagnostics::prometheus_writer w(out);
  w.family("spindle_dispatcher_submissions_total", diagnostics::metric_type::counter,
           "Submissions the dispatcher accepted.");
  w.sample("spindle_dispatcher_submissions_total", labels, taken);
  w.family("spindle_dispatcher_completed_total", diagnostics::metric_type::counter,
           "Submissions that completed (ran to their end, failed or were cancelled).");
  w.sample("spindle_dispatcher_completed_total", labels, done);
  w.family("spindle_dispatcher_queued", diagnostics::metric_type::gauge,
           "Submissions waiting in the dispatcher's queues.");
  w.sample("spindle_dispatcher_queued", labels, queued);
  w.family("spindle_dispatcher_running", diagnostics::metric_type::gauge,
           "Submissions accepted, no longer queued and not complete.");
  w.sample("spindle_dispatcher_running", labels, open > queued ? open - queued : 0);
}

void dispatcher_shared::write_diagnostics(diagnostics::json_writer& out) const {
  std::uint64_t queued = run_queue_.size();
  for (const auto& shard : shards_) queued += shard->size();
  // relaxed: a sample for a person.
  const std::uint64_t outstanding_now = outstanding.load(std::memory_order_relaxed);
  out.begin_object();
  out.member("name", options.name);
  out.member("mode", to_string(options.mode));
  out.member("queues", std::uint64_t(shards_.size()));
  out.member("outstanding", outstanding_now);
  out.member("queued", queued);
  out.member("running", outstanding_now > queued ? outstanding_now - queued : 0);
  out.member("closing", closing_.load(std::memory_order_relaxed));
  out.end_object();
}

void dispatcher_shared::report_unobserved(std::exception_ptr error) noexcept {
  if (options.on_unobserved_exception) {
    options.on_unobserved_exception(std::move(error));  // noexcept here: a throwing hook terminates
  } else {
    log_unobserved_exception("a dispatcher submission whose future was dropped", std::move(error));
  }
}

bool dispatcher_shared::on_cancel_running(submission_base* s) noexcept {
  switch (options.mode) {
    case dispatch_mode::parallel:
      s->running_task_.cancel();  // U2
      return true;
    case dispatch_mode::sequential: {
      // The worker runs the protocol; the request queues behind the work already submitted,
      // and goes in even after close (only a dead queue refuses it: then the runtime is
      // abandoning the submission anyway).
      auto* node = new (std::nothrow) cancel_running_node(submission_ref::share(s));
      if (node == nullptr) return false;
      if (!shards_[0]->push_control(node)) delete node;
      return true;
    }
    case dispatch_mode::sequential_uncancelable:
      break;
  }
  return false;  // a started submission runs to its end
}

void dispatcher_shared::finish_chain(dispatch_node* chain) noexcept {
  while (chain != nullptr) {
    dispatch_node* node = std::exchange(chain, chain->next);
    switch (node->node_kind) {
      case dispatch_node::kind::submission: {
        submission_ref s(static_cast<submission_base*>(node));  // adopts the queue's reference
        s->abandon_queued();
        break;
      }
      case dispatch_node::kind::cancel_running:
        delete static_cast<cancel_running_node*>(node);
        break;
      case dispatch_node::kind::runner_finished:
        break;
    }
  }
}

void dispatcher_shared::kill_queue(dispatch_queue& queue) noexcept { finish_chain(queue.kill()); }

void dispatcher_shared::close(close_policy policy) {
  // acq_rel: the first closer alone applies its policy.
  if (closing_.exchange(true, std::memory_order_acq_rel)) {
    // Later closers return only once the first one has closed every shard (then nothing can
    // be accepted any more) and applied its policy.
    // acquire: pairs with the release below.
    while (!closed_.load(std::memory_order_acquire)) closed_.wait(false, std::memory_order_acquire);
    return;
  }
  for (auto& shard : shards_) shard->close();
  if (policy == close_policy::cancel_all) {
    // Every submission accepted before close() is in a live list now (push and close take
    // the same lock), and none can be added.
    for (auto& shard : shards_) shard->for_each_live([](submission_base* s) { s->cancel(); });
  }
  closed_.store(true, std::memory_order_release);  // release: the shards' closing above
  closed_.notify_all();
}

bool dispatcher_shared::on_own_worker() const noexcept {
  return current_executor_index(*runtime_->core) >= 0;
}

void dispatcher_shared::wait_until_idle() noexcept {
  // acquire: pairs with on_finished's decrement.
  for (std::uint64_t seen; (seen = outstanding.load(std::memory_order_acquire)) != 0;) {
    outstanding.wait(seen, std::memory_order_acquire);
  }
}

// --- parallel mode -----------------------------------------------------------------------------

// Submissions a parallel worker spawns before it yields to them.
constexpr std::size_t spawn_batch = 256;

task<void> dispatcher_shared::parallel_worker(worker_exit exit) {
  dispatch_queue& queue = *exit.queue;
  for (;;) {
    dispatch_node* batch = nullptr;
    switch (queue.take_batch(batch, spawn_batch)) {
      case dispatch_queue::take_status::taken:
        break;
      case dispatch_queue::take_status::empty:
        co_await queue.ready().wait();
        continue;
      case dispatch_queue::take_status::closed_and_empty:
        co_return;  // exit kills the queue
    }
    // No suspension below: a batch is never half in this frame.
    while (batch != nullptr) {
      auto* s = static_cast<submission_base*>(std::exchange(batch, batch->next));
      submission_ref dispatcher_side(s);  // the queue's reference
      if (!s->try_begin_start()) continue;  // cancelled while queued
      try {
        s->running_task_ = spindle::spawn(s->start()(dispatcher_side));
      } catch (...) {
        continue;  // the runtime is stopping: the body's guard completed it as cancelled
      }
      if (s->publish_running()) s->running_task_.cancel();  // a canceller came meanwhile (U2)
    }
    // Let what was just spawned run before taking more: the submitter may be far ahead, and
    // the rest waits as one allocation each in the queue instead of three in the scheduler.
    co_await spindle::yield_now();
  }
}

// --- sequential modes --------------------------------------------------------------------------

task<void> dispatcher_shared::sequential_worker(worker_exit exit) {
  dispatcher_shared& self = *exit.shared;
  dispatch_queue& queue = *exit.queue;
  const bool cancelable = self.options.mode == dispatch_mode::sequential;
  bool run_queue_closed = false;
  bool runner_done = !cancelable;
  if (cancelable) self.runner_task_ = spindle::spawn(runner(runner_exit(exit.shared)));
  for (;;) {
    dispatch_node* node = nullptr;
    switch (queue.take_one(node)) {
      case dispatch_queue::take_status::taken:
        break;
      case dispatch_queue::take_status::empty:
        co_await queue.ready().wait();
        continue;
      case dispatch_queue::take_status::closed_and_empty:
        if (cancelable && !run_queue_closed) {
          self.run_queue_.close();  // the runner finishes what it has, then says so
          run_queue_closed = true;
        }
        if (runner_done) co_return;
        co_await queue.ready().wait();  // for the runner's word, or a cancel request
        continue;
    }
    switch (node->node_kind) {
      case dispatch_node::kind::submission: {
        auto* s = static_cast<submission_base*>(node);
        if (!cancelable) {
          submission_ref dispatcher_side(s);
          if (s->try_run()) co_await s->start()(std::move(dispatcher_side));
        } else if (!self.run_queue_.push(s, false)) {
          submission_ref(s)->abandon_queued();  // the runner was abandoned
        }
        break;
      }
      case dispatch_node::kind::cancel_running: {
        std::unique_ptr<cancel_running_node> request(static_cast<cancel_running_node*>(node));
        co_await self.cancel_running(request->target.get());
        break;
      }
      case dispatch_node::kind::runner_finished:
        runner_done = true;
        self.runner_task_.detach();  // see worker_exit
        break;
    }
  }
}

task<void> dispatcher_shared::runner(runner_exit exit) {
  dispatcher_shared& self = *exit.shared;
  try {
    for (;;) {
      dispatch_node* node = nullptr;
      const auto status = self.run_queue_.take_one(node);
      if (status == dispatch_queue::take_status::closed_and_empty) break;
      if (status == dispatch_queue::take_status::empty) {
        co_await self.run_queue_.ready().wait();  // where a cancelled runner ends
        continue;
      }
      auto* s = static_cast<submission_base*>(node);
      submission_ref dispatcher_side(s);
      if (s->try_run()) co_await s->start()(std::move(dispatcher_side));
    }
  } catch (const task_cancelled&) {
    exit.abandoned = false;  // ended by the protocol: the worker starts the next runner
    throw;
  }
  exit.abandoned = false;
  self.shards_[0]->push_control(&self.runner_finished_);
}

// Cancelling the submission the runner is on (seed 002):
//   1. latch   - this worker is the only one that moves work to the runner, and it is busy
//                here: new submissions wait in its queue until step 4.
//   2. drain   - the runner's queue goes aside, so the runner cannot start anything else, and
//                is latched: the runner finds it empty, never closed, so it cannot end on its
//                own before step 4 (after close(), the queue is closed).
//   3. cancel  - if the target is still running, the runner is on it (only the runner makes a
//                submission running, and it has nothing else left to take): cancel the
//                runner, wait for it to end, start a new one. A target that finished in the
//                meantime costs at most a runner restart, never another submission's run.
//   4. refill  - the drained queue goes back in front, in order, and the latch opens.
task<void> dispatcher_shared::cancel_running(submission_base* target) {
  drained_ = run_queue_.drain();  // also latches it: the runner cannot see it closed and end
  if (target->is_running() && runner_task_.valid()) {
    runner_task_.cancel();
    bool ended_by_cancel = false;
    try {
      co_await std::move(runner_task_);
    } catch (const task_cancelled&) {
      ended_by_cancel = true;
    }
    // The latch leaves the runner no other way to end while it is alive; a runner that had
    // ended before (its queue closed and empty, runner_finished sent) is not replaced.
    if (ended_by_cancel) runner_task_ = spindle::spawn(runner(runner_exit(shared_from_this())));
  }
  run_queue_.refill(std::exchange(drained_, nullptr));
}

}  // namespace detail

// --- the public object ---------------------------------------------------------------------------

dispatcher::dispatcher(runtime& rt, dispatcher_options options) {
  if (rt.state_->core->stopping()) throw runtime_stopped();
  shared_ = std::make_shared<detail::dispatcher_shared>(rt.state_, options);
  shared_->start();
  static std::atomic<std::uint64_t> next_id{0};
  // relaxed: uniqueness only.
  const std::string id = std::to_string(next_id.fetch_add(1, std::memory_order_relaxed));
  metrics_ = rt.state_->diagnostics_registry.add_metrics(
      [shared = shared_.get(), id](std::string& out) { shared->write_metrics(out, id); });
  diagnostics_item_ = rt.state_->diagnostics_registry.add_snapshot_item(
      "dispatchers",
      [shared = shared_.get()](diagnostics::json_writer& out) { shared->write_diagnostics(out); });
}

dispatcher::~dispatcher() { close(); }

void dispatcher::close() { close(shared_->options.on_close); }

void dispatcher::close(close_policy policy) {
  shared_->close(policy);
  if (!shared_->on_own_worker()) shared_->wait_until_idle();
}

void dispatcher::enqueue(detail::submission_base* s) { shared_->enqueue(s); }

dispatch_mode dispatcher::mode() const noexcept { return shared_->options.mode; }

const char* to_string(dispatch_mode mode) noexcept {
  switch (mode) {
    case dispatch_mode::parallel:
      return "parallel";
    case dispatch_mode::sequential:
      return "sequential";
    case dispatch_mode::sequential_uncancelable:
      break;
  }
  return "sequential_uncancelable";
}

std::uint64_t dispatcher::pending() const noexcept {
  // relaxed: a snapshot.
  return shared_->outstanding.load(std::memory_order_relaxed);
}

}  // namespace spindle
