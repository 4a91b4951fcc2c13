// Named tasks: the registry and the wait (include/spindle/task/named_tasks.hpp).
#include "spindle/task/named_tasks.hpp"

#include "spindle/core/errors.hpp"

namespace spindle::detail {

void named_task_registry::add(const std::string& name) {
  std::lock_guard guard(mutex_);
  std::unique_ptr<entry>& e = entries_[name];
  if (!e) e = std::make_unique<entry>();
  ++e->live;
}

void named_task_registry::remove(const std::string& name) noexcept {
  decltype(entry::waiters) to_wake;
  {
    std::lock_guard guard(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return;  // cannot happen: add() came first
    entry& e = *it->second;
    if (--e.live > 0) return;
    // The last one: every waiter is ours to wake. Clearing entry_ under the lock makes a
    // canceller lose (try_cancel), so each stays suspended, its links intact, until woken.
    for (wait_awaiter* w = e.waiters.front(); w != nullptr; w = e.waiters.next(w)) {
      w->entry_ = nullptr;
    }
    to_wake = std::move(e.waiters);
    entries_.erase(it);
  }
  // Outside the lock (waking is scheduling). Read the link before waking: a woken waiter may
  // resume elsewhere and be destroyed at once.
  for (wait_awaiter* w = to_wake.front(); w != nullptr;) {
    wait_awaiter* next = to_wake.next(w);
    w->task_->wake();
    w = next;
  }
}

std::size_t named_task_registry::live(const std::string& name) const {
  std::lock_guard guard(mutex_);
  auto it = entries_.find(name);
  return it == entries_.end() ? 0 : it->second->live;
}

std::vector<std::pair<std::string, std::size_t>> named_task_registry::live_names() const {
  std::vector<std::pair<std::string, std::size_t>> names;
  std::lock_guard guard(mutex_);
  for (const auto& [name, e] : entries_) {
    if (e->live > 0) names.emplace_back(name, e->live);
  }
  return names;
}

// --- wait_named ------------------------------------------------------------------------------------

bool named_task_registry::wait_awaiter::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* t = spawned_task_base::current();
  if (t == nullptr) throw usage_error("spindle: wait_named outside a spawned task");
  t->set_resume_point(h, {wait_kind::named});
  registry_ = t->host().names.get();
  if (!t->begin_registration()) {
    cancelled_ = true;  // cancellation already requested: do not suspend, throw
    return false;
  }
  {
    std::lock_guard guard(registry_->mutex_);
    auto it = registry_->entries_.find(name_);
    if (it == registry_->entries_.end() || it->second->live == 0) {
      registry_ = nullptr;
    } else {
      task_ = t;  // before the entry may wake us: written under the registry lock
      entry_ = it->second.get();
      entry_->waiters.push_back(this);
    }
  }
  if (registry_ == nullptr) {
    t->end_registration(nullptr);
    // No live task of that name: nothing to wait for (a yield if the budget is used up, C6).
    return cooperative_await::complete_inline(*t, h);
  }
  t->end_registration(this);
  return true;
}

void named_task_registry::wait_awaiter::await_resume() {
  if (task_ != nullptr) {
    task_->clear_wait();  // the task lock orders a canceller's cancelled_ before us
    task_ = nullptr;
  }
  if (cancelled_) {
    cancelled_ = false;
    throw task_cancelled();
  }
}

bool named_task_registry::wait_awaiter::try_cancel() noexcept {
  // The canceller holds the task lock (S3): we are registered or were just woken.
  std::lock_guard guard(registry_->mutex_);
  if (entry_ == nullptr) return false;  // the last task of the name completed: it wakes us
  entry_->waiters.remove(this);
  entry_ = nullptr;
  cancelled_ = true;
  return true;
}

named_task_registry::wait_awaiter::~wait_awaiter() {
  // Destroyed while registered: the waiting task was abandoned at shutdown.
  if (registry_ == nullptr) return;
  std::lock_guard guard(registry_->mutex_);
  if (entry_ != nullptr) {
    entry_->waiters.remove(this);
    entry_ = nullptr;
  }
}

}  // namespace spindle::detail
