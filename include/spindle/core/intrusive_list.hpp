// Intrusive FIFOs, not synchronised: whoever owns one guards it (a primitive's lock, a join
// set's mutex, an executor's own thread). Elements carry their own links, named by member
// pointers, so one element type can sit in lists of different owners without allocation.
// intrusive_list is doubly linked (O(1) removal anywhere); intrusive_fifo is singly linked
// (removal from the middle scans).
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

// An intrusive singly linked FIFO, not synchronised: its owner guards it (an executor's own
// wheel queues, a reactor's operation lists). Elements carry the link, named by a member
// pointer. Removal from the middle is a scan comparing addresses, so a stale element is never
// dereferenced.
template <class T, T* T::*Next>
class intrusive_fifo {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  T* front() const noexcept { return head_; }  // oldest, null if empty
  std::size_t size() const noexcept { return size_; }

  void push_back(T* element) noexcept {
    element->*Next = nullptr;
    if (tail_ != nullptr) {
      tail_->*Next = element;
    } else {
      head_ = element;
    }
    tail_ = element;
    ++size_;
  }
  // Used as a stack (push_front, pop_front) by the embedded executor's newest end.
  void push_front(T* element) noexcept {
    element->*Next = head_;
    head_ = element;
    if (tail_ == nullptr) tail_ = element;
    ++size_;
  }
  T* pop_front() noexcept {  // null if empty
    T* element = head_;
    if (element != nullptr) {
      head_ = element->*Next;
      if (head_ == nullptr) tail_ = nullptr;
      element->*Next = nullptr;
      --size_;
    }
    return element;
  }
  // Moves every element of `other` to the back of this FIFO.
  void append(intrusive_fifo& other) noexcept {
    if (other.head_ == nullptr) return;
    if (tail_ != nullptr) {
      tail_->*Next = other.head_;
    } else {
      head_ = other.head_;
    }
    tail_ = other.tail_;
    size_ += other.size_;
    other.head_ = other.tail_ = nullptr;
    other.size_ = 0;
  }
  // Takes every element, leaving this FIFO empty.
  intrusive_fifo take_all() noexcept {
    intrusive_fifo all = *this;
    head_ = tail_ = nullptr;
    size_ = 0;
    return all;
  }
  // Unlinks `element` if it is in this FIFO.
  bool remove(T* element) noexcept {
    T* previous = nullptr;
    for (T* it = head_; it != nullptr; previous = it, it = it->*Next) {
      if (it != element) continue;
      if (previous != nullptr) {
        previous->*Next = element->*Next;
      } else {
        head_ = element->*Next;
      }
      if (tail_ == element) tail_ = previous;
      element->*Next = nullptr;
      --size_;
      return true;
    }
    return false;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace spindle::core
