// Spawned-task state machine: invariants S1-S4 in include/spindle/task/spawned_task.hpp.
#include "spindle/task/spawned_task.hpp"

#include "spindle/core/executor.hpp"
#include "spindle/task/join_handle.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/task/task_extras.hpp"
#include "spindle/task/tidy.hpp"

namespace spindle::detail {

// A worker of some runtime, or any thread while it runs a task (an embedded executor's tick):
// blocking there would stop the very thread that must run what is awaited.
bool on_worker_thread() noexcept {
  return core::executor::current() != nullptr || current_task != nullptr;
}

spawned_task_base::spawned_task_base(task_host& host, std::coroutine_handle<> root,
                                     destroy_function destroy, frame_function destroy_frame) noexcept
    : core::runnable(nullptr),
      host_(&host),
      resume_point_(root),
      destroy_(destroy),
      destroy_frame_(destroy_frame) {
  static const core::runnable_vtable table = {&spawned_task_base::run_entry,
                                              &spawned_task_base::drop_entry};
  vtable = &table;
}

void spawned_task_base::trace(core::trace_kind kind, std::uint32_t aux) const noexcept {
  core::trace_record(kind, trace_id(), 0, aux);
}

bool spawned_task_base::trace_poll_start() const noexcept {
  return core::trace_record_begin(core::trace_kind::poll_start, trace_id());
}

void spawned_task_base::run_entry(core::runnable* self) noexcept {
  auto* t = static_cast<spawned_task_base*>(self);
  if (t->record_ != nullptr) {
    const core::executor* here = core::executor::current();
    t->record_->on_poll_start(here != nullptr ? std::uint16_t(here->index()) : 0,
                              record_now_ns(t->host_->record_clock));
  }
  if (!t->started_) {
    t->started_ = true;
    if (t->cancellation_requested()) {
      // Cancelled before it ever ran: it does not run at all, and its frame (with whatever
      // its parameters own) goes now, not with the last handle.
      t->destroy_frame_(t);
      t->complete_with(outcome_kind::cancelled);
      return;
    }
  }
  spawned_task_base* outer = current_task;  // non-null only if a task blocks in a task (never)
  current_task = t;
  refill_cooperative_budget();
  // The end is recorded iff the start was (a switch flipped inside the poll: trace.hpp).
  const bool traced = core::trace_active() && t->trace_poll_start();
  run_trampoline(t->resume_point_);
  core::trace_end(traced, core::trace_kind::poll_end);  // ends this thread's innermost poll
  // `t` may be gone now (completed and freed, or woken and running elsewhere): do not touch it.
  current_task = outer;
}

bool spawned_task_base::begin_function_run() noexcept {
  started_ = true;
  if (cancellation_requested()) {
    destroy_frame_(this);  // the callable and its captures, as for a frame above
    complete_with(outcome_kind::cancelled);
    return false;
  }
  return true;
}

void spawned_task_base::drop_entry(core::runnable* self) noexcept {
  static_cast<spawned_task_base*>(self)->abandon();
}

void spawned_task_base::lock() noexcept {
  for (;;) {
    // acquire: entering the critical section guarding `wait_`.
    const std::uint32_t previous = flags_.fetch_or(locked, std::memory_order_acquire);
    if ((previous & locked) == 0) return;
    // relaxed: spin on a plain load until the holder releases, then retry the RMW.
    while ((flags_.load(std::memory_order_relaxed) & locked) != 0) core::cpu_relax();
  }
}

void spawned_task_base::unlock() noexcept {
  // release: publishes writes to `wait_` made under the lock.
  flags_.fetch_and(~locked, std::memory_order_release);
}

bool spawned_task_base::begin_registration() noexcept {
  lock();
  // relaxed: the lock's acquire orders us after any canceller that set the flag under it.
  // Shielded (tidy destructors running): the request waits, the wait goes ahead.
  if (cancelling(flags_.load(std::memory_order_relaxed))) {
    unlock();
    return false;
  }
  return true;
}

void spawned_task_base::end_registration(cancellable_wait* wait) noexcept {
  wait_ = wait;
  unlock();
}

void spawned_task_base::clear_wait() noexcept {
  lock();
  wait_ = nullptr;
  unlock();
}

void spawned_task_base::request_cancel() noexcept {
  lock();
  // A stop source (a token was asked for, task/stop_token.hpp) is stopped before the flag is
  // set, so a task that meets its cancellation finds its token stopped; outside the lock, as
  // stop callbacks may do anything (cancel this task again, take other locks).
  std::stop_source stop(std::nostopstate);
  // relaxed: under the lock.
  if (stop_source_ != nullptr && (flags_.load(std::memory_order_relaxed) & cancel_requested) == 0) {
    stop = *stop_source_;
    unlock();
    stop.request_stop();
    lock();
  }
  // Without a source, the lock is held from the check above to here, so a source the task
  // makes now sees the flag and stops itself (stop_token()).
  // relaxed: the lock orders it; readers outside the lock only use it as a hint.
  interrupt_wait_and_unlock(flags_.fetch_or(cancel_requested, std::memory_order_relaxed));
}

void spawned_task_base::interrupt_wait_and_unlock(std::uint32_t previous) noexcept {
  cancellable_wait* wait = wait_;
  bool interrupted = false;
  task_host::entry entry = task_host::entry::own_thread;
  // A registered wait exists only while no cancel bit was set (begin_registration refuses).
  if ((previous & (cancel_requested | scope_cancelled | complete | shielded)) == 0 &&
      wait != nullptr) {
    // Enter the host first, under our lock (the task cannot be abandoned meanwhile): a canceller
    // outside it wakes after unlocking, when a shutdown could otherwise destroy the task and the
    // host (the gate, task_host.hpp). Refused: the shutdown ends the task; leave the wait alone.
    entry = host_->enter();
    if (entry != task_host::entry::refused) {
      interrupted = wait->try_cancel();
      if (interrupted) wait_ = nullptr;
    }
  }
  task_host* host = host_;
  unlock();
  if (interrupted) wake();
  if (entry == task_host::entry::entered) host->leave();
}

std::stop_token spawned_task_base::stop_token() {
  // Only the running task writes stop_source_, so it may read it without the lock.
  if (stop_source_ == nullptr) {
    auto* made = new std::stop_source();  // allocated outside the spin lock (may throw)
    lock();
    stop_source_ = made;  // published to cancellers by the lock
    unlock();
  }
  lock();
  std::stop_source source = *stop_source_;
  // relaxed: under the lock, which orders us after any canceller that set the flag.
  const bool cancelled = (flags_.load(std::memory_order_relaxed) & cancel_requested) != 0;
  unlock();
  // Requested before the token existed: stop now (request_cancel found no source to stop).
  if (cancelled) source.request_stop();
  return source.get_token();
}

void spawned_task_base::enter_scope(cancellation_scope& scope) noexcept {
  lock();
  scope.outer = scopes_;
  scope.fired = false;
  scopes_ = &scope;
  unlock();
  scope.listed = true;
}

bool spawned_task_base::leave_scope(cancellation_scope& scope) noexcept {
  if (!scope.listed) return false;
  scope.listed = false;
  lock();
  // Usually the innermost; a frame destroyed while suspended may unlist an outer one first.
  bool others_fired = false;
  for (cancellation_scope** link = &scopes_; *link != nullptr;) {
    if (*link == &scope) {
      *link = scope.outer;
    } else {
      others_fired = others_fired || (*link)->fired;
      link = &(*link)->outer;
    }
  }
  // relaxed: under the lock; the running task reads its own write.
  if (!others_fired) flags_.fetch_and(~std::uint32_t(scope_cancelled), std::memory_order_relaxed);
  const bool fired = scope.fired;
  unlock();
  return fired;
}

void spawned_task_base::cancel_scope(const void* key) noexcept {
  lock();
  cancellation_scope* scope = scopes_;
  while (scope != nullptr && scope->key != key) scope = scope->outer;
  if (scope == nullptr || scope->fired) {
    unlock();  // its scope has ended (the awaited operation completed first): nothing to do
    return;
  }
  scope->fired = true;
  // relaxed: the lock orders it, as for cancel_requested.
  interrupt_wait_and_unlock(flags_.fetch_or(scope_cancelled, std::memory_order_relaxed));
}

task_status spawned_task_base::status() const noexcept {
  if (!is_complete()) return task_status::pending;
  switch (outcome_) {
    case outcome_kind::value: return task_status::completed;
    case outcome_kind::exception: return task_status::failed;
    case outcome_kind::cancelled: return task_status::cancelled;
  }
  return task_status::failed;
}

bool spawned_task_base::register_joiner(completion_waker* joiner,
                                        const task_host* joiner_host) noexcept {
  joiner_ = joiner;
  const std::uint32_t joining =
      join_waiting | (joiner_host != nullptr && joiner_host != host_ ? joiner_elsewhere : 0u);
  // acquire on the load and CAS failure: if complete is seen, S1 gives us the outcome.
  std::uint32_t expected = flags_.load(std::memory_order_acquire);
  for (;;) {
    if ((expected & complete) != 0) return false;
    // release: `joiner_` is written before join_waiting becomes visible (S2).
    if (flags_.compare_exchange_weak(expected, expected | joining, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return true;
    }
  }
}

bool spawned_task_base::withdraw_joiner() noexcept {
  // acquire: as in register_joiner.
  std::uint32_t expected = flags_.load(std::memory_order_acquire);
  for (;;) {
    if ((expected & complete) != 0 || (expected & join_waiting) == 0) return false;
    // acq_rel: S2, exactly one of completer and withdrawer clears join_waiting.
    if (flags_.compare_exchange_weak(expected, expected & ~(join_waiting | joiner_elsewhere),
                                     std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return true;
    }
  }
}

void spawned_task_base::complete_with(outcome_kind outcome) noexcept {
  if (core::trace_active()) [[unlikely]] trace(core::trace_kind::task_end, std::uint32_t(outcome));
  outcome_ = outcome;
  if (table_ != nullptr) {
    if (record_ != nullptr) record_->on_complete(record_now_ns(host_->record_clock));
    record_ = nullptr;  // the slot is another task's once erased
    table_->erase(id_, host_->table_shard());
    table_ = nullptr;
  }
  if (extras_ != nullptr) {
    // Before the CAS below: afterwards the last reference may go at any moment.
    while (completion_hook* hook = extras_->hooks) {
      extras_->hooks = hook->next;
      hook->on_complete();
      delete hook;
    }
  }
  // One CAS sets complete, takes over a registered joiner (clears join_waiting) and drops the
  // running task's reference (S4). acq_rel: release publishes outcome and result (S1), acquire
  // pairs with the joiner's release of `joiner_` (S2) and with other references' releases.
  std::uint32_t expected = flags_.load(std::memory_order_relaxed);
  std::uint32_t desired;
  bool entered = false;  // the gate for the joiner's host (S5)
  for (;;) {
    if ((expected & joiner_elsewhere) != 0 && !entered) {
      core::outside_gate::enter_unknown_host();
      entered = true;
    }
    desired = ((expected | complete) & ~(join_waiting | joiner_elsewhere)) - one_reference;
    if (flags_.compare_exchange_weak(expected, desired, std::memory_order_acq_rel,
                                     std::memory_order_relaxed)) {
      break;
    }
  }
  if ((expected & join_waiting) != 0) {
    // The waiting joiner holds a reference, so `this` is alive until it runs (S4); after
    // wake() it may free us: touch nothing but locals from here on.
    completion_waker* joiner = joiner_;
    joiner->wake(joiner);
  }
  if (entered) core::outside_gate::leave_unknown_host();  // touches only this thread's slot
  if ((desired >> reference_shift) == 0) destroy_(this);
}

void spawned_task_base::on_root_finished(outcome_kind outcome) noexcept {
  if (extras_ != nullptr && extras_->tidy_runner) {
    complete_with(extras_->finishing);  // the clean-ups have run: the body's outcome stands
    return;
  }
  if (extras_ == nullptr || extras_->tidy_top == nullptr) {
    complete_with(outcome);
    return;
  }
  // T4: run the clean-ups first, shielded, then come back here (the runner's root is this task).
  extras_->finishing = outcome;
  // "completing": the clean-ups run.
  if (record_ != nullptr) record_->on_complete(record_now_ns(host_->record_clock));
  // relaxed: no wait is registered while the task runs, so no canceller acts on the bit before
  // our next registration, which takes the lock (S3).
  flags_.fetch_or(shielded, std::memory_order_relaxed);
  extras_->tidy_runner = start_tidy_runner(*this);
  transfer_to(extras_->tidy_runner);
}

task_extras& spawned_task_base::extras() {
  if (extras_ == nullptr) extras_ = new task_extras();
  return *extras_;
}

void spawned_task_base::push_tidy(tidy_entry* entry) {
  task_extras& e = extras();
  entry->below = e.tidy_top;
  e.tidy_top = entry;
}

void spawned_task_base::add_completion_hook(completion_hook* hook) {
  task_extras& e = extras();
  hook->next = e.hooks;
  e.hooks = hook;
}

tidy_entry* spawned_task_base::pop_tidy() noexcept {
  if (extras_ == nullptr || extras_->tidy_top == nullptr) return nullptr;
  tidy_entry* entry = extras_->tidy_top;
  extras_->tidy_top = entry->below;
  return entry;
}

void spawned_task_base::destroy_tidy() noexcept {
  if (extras_ == nullptr) return;
  if (extras_->tidy_runner) {
    extras_->tidy_runner.destroy();  // owns the entry it was running
    extras_->tidy_runner = nullptr;
  }
  while (tidy_entry* entry = extras_->tidy_top) {
    extras_->tidy_top = entry->below;
    delete entry;
  }
}

void spawned_task_base::destroy_extras() noexcept {
  destroy_tidy();
  // Hooks ran at completion; a task destroyed without completing has none left to run.
  while (extras_ != nullptr && extras_->hooks != nullptr) {
    completion_hook* hook = extras_->hooks;
    extras_->hooks = hook->next;
    delete hook;
  }
  delete std::exchange(extras_, nullptr);
}

spawned_task_base::~spawned_task_base() {
  destroy_extras();
  delete stop_source_;
}

void spawned_task_base::abandon() noexcept {
  // Make a concurrent cancel() a no-op first: `wait_` points into the frames about to go (S3).
  lock();
  const std::uint32_t previous =
      flags_.fetch_or(cancel_requested, std::memory_order_relaxed);  // relaxed: under the lock
  wait_ = nullptr;
  std::stop_source stop(std::nostopstate);
  if (stop_source_ != nullptr && (previous & cancel_requested) == 0) stop = *stop_source_;
  unlock();
  if (stop.stop_possible()) stop.request_stop();  // as request_cancel: outside the lock
  // Destroy the frames (their destructors may unregister from primitives), then complete. The
  // clean-ups do not run: nothing is left to run them on (tidy.hpp).
  destroy_frame_(this);
  destroy_tidy();
  complete_with(outcome_kind::cancelled);
}

void spawned_task_base::release() noexcept {
  // acq_rel: the last releaser must see every other owner's writes before destroying.
  const std::uint32_t previous = flags_.fetch_sub(one_reference, std::memory_order_acq_rel);
  if ((previous >> reference_shift) == 1) destroy_(this);
}

// --- join awaiter ---------------------------------------------------------------------------

bool join_awaiter_base::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* self = spawned_task_base::current();
  if (self == nullptr) throw usage_error("spindle: awaiting a join_handle outside a task");
  joiner_ = self;
  self->set_resume_point(h, {wait_kind::join, pack_task_id(target_->id().index, target_->id().serial)});
  if (!self->begin_registration()) {
    cancelled_ = true;  // cancelled before waiting: do not suspend, await_resume throws
    return false;
  }
  registered_ = true;  // before registering: once registered we may resume elsewhere
  if (!target_->register_joiner(this, &self->host())) {
    registered_ = false;
    self->end_registration(nullptr);
    return cooperative_await::yield_if_exhausted(*self, h);  // already complete (C6)
  }
  self->end_registration(this);
  return true;
}

bool join_awaiter_base::try_cancel() noexcept {
  if (!target_->withdraw_joiner()) return false;
  cancelled_ = true;
  return true;
}

void join_awaiter_base::wake_joiner(completion_waker* self) noexcept {
  static_cast<join_awaiter_base*>(self)->joiner_->wake();
}

void join_awaiter_base::finish_wait() {
  registered_ = false;
  if (joiner_ != nullptr) joiner_->clear_wait();
  if (cancelled_) throw task_cancelled();
}

}  // namespace spindle::detail

namespace spindle {

void yield_awaiter::await_suspend(std::coroutine_handle<> h) noexcept {
  if (auto* t = detail::spawned_task_base::current()) {
    t->set_resume_point(h, {wait_kind::yield});
    t->yield_to_scheduler();
  } else {
    detail::transfer_to(h);  // not in a spawned task: nothing to yield to
  }
}

void yield_awaiter::await_resume() const {
  if (auto* t = detail::spawned_task_base::current(); t != nullptr && t->cancellation_requested()) {
    throw task_cancelled();
  }
}

}  // namespace spindle
