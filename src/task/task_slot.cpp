// task_slot: turns and occupants. The design is in include/spindle/task/task_slot.hpp.
#include "spindle/task/task_slot.hpp"

#include <algorithm>

namespace spindle {
namespace detail {

void slot_turn::link_next(const std::shared_ptr<slot_turn>& next) noexcept {
  std::lock_guard guard(mutex_);
  if (ended_) {
    next->mark_predecessor_ended();  // not yet shared with anyone: no lock needed
  } else {
    next_ = next;
  }
}

void slot_turn::occupant_completed() noexcept {
  bool ends = false;
  {
    std::lock_guard guard(mutex_);
    occupant_done_ = true;
    ends = predecessor_ended_;
  }
  if (ends) end_turns_from(shared_from_this());
}

void slot_turn::end_turns_from(std::shared_ptr<slot_turn> turn) noexcept {
  while (turn) {
    std::shared_ptr<slot_turn> next;
    {
      std::lock_guard guard(turn->mutex_);
      turn->ended_ = true;
      next = std::move(turn->next_);
    }
    if (!next) return;
    spawned_task_base* waiter = nullptr;
    bool next_ends = false;
    {
      std::lock_guard guard(next->mutex_);
      next->predecessor_ended_ = true;
      waiter = std::exchange(next->waiter_, nullptr);
      next_ends = next->occupant_done_;
    }
    if (waiter != nullptr) waiter->wake();  // outside the lock: scheduling takes no turn lock
    turn = next_ends ? std::move(next) : nullptr;
  }
}

bool slot_turn::awaiter::await_ready() noexcept {
  {
    std::lock_guard guard(turn_.mutex_);
    if (!turn_.predecessor_ended_) return false;
  }
  // Ended: go on at once, unless the cooperative budget is used up (await_suspend yields).
  return cooperative_await::may_complete_inline();
}

bool slot_turn::awaiter::await_suspend(std::coroutine_handle<> h) {
  spawned_task_base* t = spawned_task_base::current();
  if (t == nullptr) throw usage_error("spindle: a slot's occupant must be a spawned task");
  t->set_resume_point(h);
  {
    std::lock_guard guard(turn_.mutex_);
    if (!turn_.predecessor_ended_) {
      turn_.waiter_ = t;
      waiting_ = true;  // under the lock: the waker cannot wake us before this is written
      return true;
    }
  }
  // Ended: the yield (budget used up, C6) comes after the unlock, as the task may resume at once.
  return cooperative_await::yield_if_exhausted(*t, h);
}

slot_turn::awaiter::~awaiter() {
  // Destroyed while suspended: the task was abandoned at shutdown; the turn must not wake it.
  if (!waiting_) return;
  std::lock_guard guard(turn_.mutex_);
  turn_.waiter_ = nullptr;  // only this turn's occupant ever waits on it
}

}  // namespace detail

task_slot::~task_slot() {
  std::lock_guard guard(mutex_);
  for (detail::spawned_task_base* t : occupants_) t->release();
  occupants_.clear();
}

std::size_t task_slot::occupants() const {
  std::lock_guard guard(mutex_);
  return std::size_t(std::count_if(occupants_.begin(), occupants_.end(),
                                   [](detail::spawned_task_base* t) { return !t->is_complete(); }));
}

void task_slot::replace_occupants_locked(detail::spawned_task_base* newest) {
  std::erase_if(occupants_, [](detail::spawned_task_base* t) {
    if (!t->is_complete()) return false;
    t->release();
    return true;
  });
  for (detail::spawned_task_base* t : occupants_) t->request_cancel();
  newest->add_reference();
  occupants_.push_back(newest);  // capacity reserved by submit: cannot throw
}

}  // namespace spindle
