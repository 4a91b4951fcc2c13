// An intrusive doubly linked FIFO, not synchronised: whoever owns it guards it (a primitive's
// lock, a join set's mutex). Elements carry their own links, named by member pointers, so one
// element type can sit in lists of different owners without allocation.
#pragma once

#include <cassert>
#include <cstddef>

namespace spindle::core {

template <class T, T* T::*Previous, T* T::*Next>
class intrusive_list {
 public:
  intrusive_list() noexcept = default;
  // Moving takes every element over (the links live in the elements); the source is left empty.
  intrusive_list(intrusive_list&& other) noexcept { take(other); }
  intrusive_list& operator=(intrusive_list&& other) noexcept {
    assert(empty() && "spindle: moving a list into a non-empty one would drop its elements");
    if (this != &other) take(other);
    return *this;
  }

  bool empty() const noexcept { return head_ == nullptr; }
  std::size_t size() const noexcept { return size_; }
  T* front() const noexcept { return head_; }  // oldest, null if empty
  static T* next(const T* element) noexcept { return element->*Next; }

  void push_back(T* element) noexcept {
    element->*Next = nullptr;
    element->*Previous = tail_;
    if (tail_ != nullptr) {
      tail_->*Next = element;
    } else {
      head_ = element;
    }
    tail_ = element;
    ++size_;
  }

  // `element` must be linked in this list.
  void remove(T* element) noexcept {
    T* previous = element->*Previous;
    T* following = element->*Next;
    if (previous != nullptr) {
      previous->*Next = following;
    } else {
      head_ = following;
    }
    if (following != nullptr) {
      following->*Previous = previous;
    } else {
      tail_ = previous;
    }
    element->*Previous = element->*Next = nullptr;
    --size_;
  }

  T* pop_front() noexcept {  // null if empty
    T* element = head_;
    if (element != nullptr) remove(element);
    return element;
  }

 private:
  void take(intrusive_list& other) noexcept {
    head_ = other.head_;
    tail_ = other.tail_;
    size_ = other.size_;
    other.head_ = other.tail_ = nullptr;
    other.size_ = 0;
  }
  T* head_ = nullptr;
  T* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace spindle::core
