// The loop engine under parallel_for, parallel_map and parallel_reduce: a range of element
// offsets [first, last) processed serially in blocks, whose untouched remainder is one latent
// frame that a heartbeat may split (F2, docs/design/fork-join.md).
//
// A loop's latent parallelism is the elements it has not started. The loop registers one latent
// frame covering them; between blocks it advances the frame's `next`. When a heartbeat promotes
// the frame, the remainder is split in half: the owner keeps [next, mid), the upper half
// [mid, end) becomes delegated work (a thief runs it as a loop of its own). The owner then
// continues its half in a fresh frame that inherits the old frame's epoch (those elements, too,
// have been latent since the loop started), so the next heartbeat can split again; a thief's
// loop starts with epoch 0, eligible at its first heartbeat for the same reason. No grain size:
// blocks are as long as the heartbeat countdown, which is calibrated in time, so an element
// costing a nanosecond and one costing a millisecond both reach the clock check a few times per
// quantum.
//
// Results are combined in element order: (elements of the first blocks) + (the owner's
// remainder) + (the delegated upper half). `combine` must be associative; `identity` is its
// neutral element (used to start every piece).
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <optional>
#include <utility>

#include "spindle/fork/fork_state.hpp"

namespace spindle::fork_detail {

// What every piece of one loop shares; lives in the caller's frame for the whole loop.
// block(begin, end, accumulator) folds elements [begin, end) into the accumulator, in order.
template <class Value, class Block, class Combine>
struct loop_context {
  Block* block;
  Combine* combine;
  const Value* identity;
};

template <class Value, class Context>
Value loop_reduce(std::size_t first, std::size_t last, const Context& context,
                  std::uint64_t epoch);

// The upper half of a split loop, run by a thief.
template <class Value, class Context>
struct loop_work final : delegated_work {
  static void run(core::runnable* self) noexcept {
    auto* work = static_cast<loop_work*>(self);
    begin_delegate(work);
    try {
      work->result.emplace(loop_reduce<Value>(work->first, work->last, *work->context, 0));
    } catch (...) {
      work->error = std::current_exception();
    }
    finish_delegate(work);
  }
  static constexpr core::runnable_vtable vtable{&loop_work::run, &drop_delegated};

  loop_work(std::size_t from, std::size_t to, const Context* shared) noexcept
      : delegated_work(&vtable), first(from), last(to), context(shared) {}
  std::size_t first, last;
  const Context* context;
  std::optional<Value> result;
};

template <class Value, class Context>
struct loop_frame final : latent_frame {
  using work_type = loop_work<Value, Context>;

  loop_frame(std::size_t first, std::size_t last, const Context* shared,
             std::uint64_t frame_epoch) noexcept
      : next(first), end(last), context(shared) {
    promote = &loop_frame::split;
    epoch = frame_epoch;
  }
  static delegated_work* split(latent_frame* base) noexcept {
    auto* frame = static_cast<loop_frame*>(base);
    const std::size_t remaining = frame->end - frame->next;
    if (remaining < 2) return nullptr;
    const std::size_t middle = frame->next + remaining / 2;
    auto* work = ::new (static_cast<void*>(frame->work_storage))
        work_type(middle, frame->end, frame->context);
    frame->end = middle;
    return work;
  }
  work_type& work() noexcept { return *std::launder(reinterpret_cast<work_type*>(work_storage)); }

  std::size_t next;  // first element not started yet (owner-only)
  std::size_t end;   // one past the last element this frame still owns
  const Context* context;
  alignas(work_type) unsigned char work_storage[sizeof(work_type)];
};

template <class Value, class Context>
Value loop_reduce(std::size_t first, std::size_t last, const Context& context,
                  std::uint64_t epoch) {
  fork_thread_state* state = thread_state();
  Value accumulator = *context.identity;
  latent_frame** const slot = state->top;
  if (slot == state->limit) [[unlikely]] {
    (*context.block)(first, last, accumulator);
    return accumulator;
  }
  loop_frame<Value, Context> frame(first, last, &context, epoch);
  *slot = &frame;
  state->top = slot + 1;
  try {
    while (frame.next < frame.end) {
      const std::size_t begin = frame.next;
      std::size_t count = frame.end - begin;
      if (state->countdown < std::int64_t(count)) {
        count = state->countdown > 0 ? std::size_t(state->countdown) : 1;
      }
      frame.next = begin + count;  // before the block: a split never hands out started elements
      state->countdown -= std::int64_t(count);
      (*context.block)(begin, begin + count, accumulator);
      if (state->countdown <= 0) on_countdown(state);
      if (frame.published != nullptr) {
        // Split: our lower half [next, end) goes on in a fresh frame that may split again.
        if (frame.next < frame.end) {
          accumulator = (*context.combine)(
              std::move(accumulator), loop_reduce<Value>(frame.next, frame.end, context, frame.epoch));
        }
        break;
      }
    }
  } catch (...) {
    state->top = slot;
    settle_after_exception(state, frame);
    if (frame.published != nullptr) frame.work().~loop_work();
    throw;
  }
  state->top = slot;
  if (frame.published == nullptr) [[likely]] return accumulator;

  auto& work = frame.work();
  if (withdraw(state, &work)) {
    const std::size_t upper_first = work.first, upper_last = work.last;
    work.~loop_work();
    return (*context.combine)(std::move(accumulator),
                              loop_reduce<Value>(upper_first, upper_last, context, frame.epoch));
  }
  wait_for_merge(state, &work);
  if (work.error) {
    std::exception_ptr error = std::move(work.error);
    work.~loop_work();
    std::rethrow_exception(std::move(error));
  }
  Value upper = std::move(*work.result);
  work.~loop_work();
  return (*context.combine)(std::move(accumulator), std::move(upper));
}

// Entry point: reduces element offsets [0, count).
template <class Value, class Block, class Combine>
Value run_loop(std::size_t count, const Value& identity, Block& block, Combine& combine) {
  const loop_context<Value, Block, Combine> context{&block, &combine, &identity};
  return loop_reduce<Value>(0, count, context, thread_state()->epoch);
}

}  // namespace spindle::fork_detail
