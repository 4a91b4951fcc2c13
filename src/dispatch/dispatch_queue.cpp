// See dispatch_queue.hpp.
#include "dispatch_queue.hpp"

namespace spindle::detail {

void dispatch_queue::link_back(dispatch_node* n) noexcept {
  n->next = nullptr;
  if (back_ == nullptr) {
    front_ = n;
  } else {
    back_->next = n;
  }
  back_ = n;
  // relaxed: under lock_; readers outside it only want a hint.
  size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void dispatch_queue::wake_consumer_locked(bool& wake) noexcept {
  wake = consumer_waiting_;
  consumer_waiting_ = false;
}

bool dispatch_queue::push(submission_base* s, bool track_live) {
  bool wake = false;
  {
    std::lock_guard guard(lock_);
    if (closed_ || dead_) return false;
    link_back(s);
    if (track_live) {
      s->live_linked = true;
      s->live_previous = nullptr;
      s->live_next = live_;
      if (live_ != nullptr) live_->live_previous = s;
      live_ = s;
    }
    wake_consumer_locked(wake);
  }
  if (wake) ready_.set();
  return true;
}

bool dispatch_queue::push_control(dispatch_node* n) {
  bool wake = false;
  {
    std::lock_guard guard(lock_);
    if (dead_) return false;
    link_back(n);
    wake_consumer_locked(wake);
  }
  if (wake) ready_.set();
  return true;
}

dispatch_queue::take_status dispatch_queue::take_batch(dispatch_node*& out, std::size_t max) {
  std::lock_guard guard(lock_);
  if (front_ != nullptr) {
    out = front_;
    dispatch_node* last = front_;
    std::size_t count = 1;
    for (; count < max && last->next != nullptr; ++count) last = last->next;
    front_ = last->next;
    last->next = nullptr;
    if (front_ == nullptr) back_ = nullptr;
    // relaxed: under lock_
    size_.store(size_.load(std::memory_order_relaxed) - count, std::memory_order_relaxed);
    return take_status::taken;
  }
  consumer_waiting_ = true;
  ready_.reset();
  return closed_ && !latched_ ? take_status::closed_and_empty : take_status::empty;
}

dispatch_queue::take_status dispatch_queue::take_one(dispatch_node*& out) { return take_batch(out, 1); }

dispatch_node* dispatch_queue::drain() {
  std::lock_guard guard(lock_);
  latched_ = true;
  dispatch_node* chain = std::exchange(front_, nullptr);
  back_ = nullptr;
  size_.store(0, std::memory_order_relaxed);  // relaxed: under lock_
  return chain;
}

void dispatch_queue::refill(dispatch_node* chain) {
  bool wake = false;
  {
    std::lock_guard guard(lock_);
    latched_ = false;
    wake_consumer_locked(wake);  // a consumer waiting on the latch must look again
    if (chain != nullptr) {
      dispatch_node* last = chain;
      std::size_t count = 1;
      for (; last->next != nullptr; last = last->next) ++count;
      last->next = front_;
      if (front_ == nullptr) back_ = last;
      front_ = chain;
      // relaxed: under lock_
      size_.store(size_.load(std::memory_order_relaxed) + count, std::memory_order_relaxed);
    }
  }
  if (wake) ready_.set();
}

void dispatch_queue::close() {
  bool wake = false;
  {
    std::lock_guard guard(lock_);
    closed_ = true;
    wake_consumer_locked(wake);  // a waiting consumer must learn it is closed
  }
  if (wake) ready_.set();
}

dispatch_node* dispatch_queue::kill() {
  std::lock_guard guard(lock_);
  closed_ = true;
  dead_ = true;
  back_ = nullptr;
  size_.store(0, std::memory_order_relaxed);  // relaxed: under lock_
  return std::exchange(front_, nullptr);
}

void dispatch_queue::unlink_live(submission_base* s) {
  std::lock_guard guard(lock_);
  if (!s->live_linked) return;
  s->live_linked = false;
  if (s->live_previous != nullptr) {
    s->live_previous->live_next = s->live_next;
  } else {
    live_ = s->live_next;
  }
  if (s->live_next != nullptr) s->live_next->live_previous = s->live_previous;
  s->live_previous = s->live_next = nullptr;
}

}  // namespace spindle::detail
