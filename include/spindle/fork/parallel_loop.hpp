// The loop engine under parallel_for, parallel_map and parallel_reduce: a range of element
// offsets [first, last) processed serially in blocks, whose untouched remainder is one latent
// frame that a heartbeat may split (F2, docs/design/fork-join.md).
//
// A loop's latent parallelism is the elements it has not started. The loop registers one latent
// frame covering them and claims one block at a time: it advances the frame's `next` past the
// block *before* it checks the clock and runs the block, so the frame's remainder [next, end)
// never includes an element the owner is about to run or running. When a heartbeat (or a ping,
// fork_state.hpp) promotes the frame, the remainder is split in half: the owner keeps
// [next, mid), the upper half [mid, end) becomes delegated work (a thief runs it as a loop of its
// own); a remainder of one element goes away whole (the owner is busy with its block). The owner
// continues its half in a fresh frame that inherits the old frame's epoch (those elements, too,
// have been latent since the loop started), so the next heartbeat can split again; a thief's loop
// starts with epoch 0, eligible at its first heartbeat for the same reason. No grain size: blocks
// are as long as the heartbeat countdown, which is calibrated in time, so an element costing a
// nanosecond and one costing a millisecond both reach the clock check a few times per quantum;
// elements longer than a quantum are offered by pings while they run.
//
// `next` and `end` are shared with the owner's ping handler: claiming a block (read both, move
// `next`) is done with pings masked; a ping may lower `end` (a split) at any other moment, so the
// owner re-reads it at each claim.
//
// Slices: a piece run by a delegate from its executor's loop may stop at a block boundary when
// its executor has other work waiting (fork_state.hpp, "Slices"). The stop propagates up the
// chain of fresh frames of that piece: each level takes back (withdraws) the upper half it had
// offered, so the rest of the piece stays one range [stop, last), which the delegate re-offers
// (loop_work::run). A level whose upper half a thief already runs cannot give it back: it
// finishes its own part instead and waits, and the stop is cancelled there.
//
// Results are combined in element order: (elements of the first blocks) + (the owner's
// remainder) + (the delegated upper half). `combine` must be associative; `make_identity()`
// returns its neutral element (called to start every piece, so move-only values work).
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include "spindle/fork/fork_state.hpp"

namespace spindle::fork_detail {

// What every piece of one loop shares; lives in the caller's frame for the whole loop.
// block(begin, end, accumulator) folds elements [begin, end) into the accumulator, in order.
template <class Block, class Combine, class MakeIdentity>
struct loop_context {
  Block* block;
  Combine* combine;
  const MakeIdentity* make_identity;
};

// Where a delegate's piece stopped early (slices): everything from `at` to the piece's end is
// left to do.
struct slice_stop {
  bool stopped = false;
  std::size_t at = 0;
};

template <class Value, class Context>
Value loop_reduce(std::size_t first, std::size_t last, const Context& context,
                  std::uint64_t epoch, slice_stop* stop);

// The upper half of a split loop, run by a thief (in slices, when its executor needs the loop).
template <class Value, class Context>
struct loop_work final : delegated_work {
  static void run(core::runnable* self) noexcept {
    auto* work = static_cast<loop_work*>(self);
    delegate_scope scope(work);  // restores the thread's computation when the piece returns
    fork_thread_state* state = thread_state();
    slice_stop stop;
    const bool sliced = begin_slice(state);
    try {
      Value value = loop_reduce<Value>(work->first, work->last, *work->context, 0,
                                       sliced ? &stop : nullptr);
      end_slice(state);
      // Elements before an earlier slice's stop come first.
      if (work->result) {
        value = (*work->context->combine)(std::move(*work->result), std::move(value));
      }
      work->result.emplace(std::move(value));
      if (stop.stopped) {
        work->first = stop.at;
        if (republish(state, work)) return;  // runs again later (not merged yet)
        // The board is full: go on here, to the end.
        Value rest = loop_reduce<Value>(work->first, work->last, *work->context, 0, nullptr);
        work->result.emplace(
            (*work->context->combine)(std::move(*work->result), std::move(rest)));
      }
    } catch (...) {
      end_slice(state);
      work->error = std::current_exception();
    }
    finish_delegate(work);
  }
  static constexpr core::runnable_vtable vtable{&loop_work::run, &drop_delegated};

  loop_work(std::size_t from, std::size_t to, const Context* shared) noexcept
      : delegated_work(&vtable), first(from), last(to), context(shared) {}
  std::size_t first, last;  // first moves on when a slice ends early
  const Context* context;
  std::optional<Value> result;  // the elements done so far, then the piece's result
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
  // Owner's heartbeat (pings masked) or its ping handler: plain stores only.
  static delegated_work* split(latent_frame* base, void*) noexcept {  // own storage
    auto* frame = static_cast<loop_frame*>(base);
    // relaxed: shared with this thread only (see above).
    const std::size_t from = frame->next.load(std::memory_order_relaxed);
    const std::size_t to = frame->end.load(std::memory_order_relaxed);
    if (from >= to) return nullptr;
    const std::size_t middle = from + (to - from) / 2;  // one element left: all of it
    auto* work = ::new (static_cast<void*>(frame->work_storage))
        work_type(middle, to, frame->context);
    frame->end.store(middle, std::memory_order_relaxed);
    return work;
  }
  work_type& work() noexcept { return *std::launder(reinterpret_cast<work_type*>(work_storage)); }

  std::atomic<std::size_t> next;  // first element not claimed yet (owner writes)
  std::atomic<std::size_t> end;   // one past the last element this frame still owns
  const Context* context;
  alignas(work_type) unsigned char work_storage[sizeof(work_type)];
};

template <class Value, class Context>
Value loop_reduce(std::size_t first, std::size_t last, const Context& context,
                  std::uint64_t epoch, slice_stop* stop) {
  fork_thread_state* state = thread_state();
  Value accumulator = (*context.make_identity)();
  // relaxed: the frame stack is shared with this thread's ping handler only (fork_state.hpp).
  latent_frame** const slot = state->top.load(std::memory_order_relaxed);
  if (slot == state->limit) [[unlikely]] {
    (*context.block)(first, last, accumulator);
    return accumulator;
  }
  loop_frame<Value, Context> frame(first, last, &context, epoch);
  push_frame(state, slot, &frame);
  if (slot == state->frames) [[unlikely]] begin_loop_computation(state);
  // relaxed below: `next` and `end` are shared with this thread's ping handler only.
  try {
    for (;;) {
      if (published_work(frame) != nullptr) {
        // Split: our lower half [next, end) goes on in a fresh frame that may split again
        // (`end` is final now: a published frame is never split again).
        const std::size_t from = frame.next.load(std::memory_order_relaxed);
        const std::size_t to = frame.end.load(std::memory_order_relaxed);
        if (from < to) {
          accumulator = (*context.combine)(
              std::move(accumulator), loop_reduce<Value>(from, to, context, frame.epoch, stop));
        }
        break;
      }
      if (stop != nullptr && state->slice_over) [[unlikely]] {
        // End the slice here: nothing of this frame may be offered any more.
        mask_pings(state);
        if (frame.published.load(std::memory_order_relaxed) == nullptr) {
          stop->stopped = true;
          stop->at = frame.next.load(std::memory_order_relaxed);
          frame.end.store(stop->at, std::memory_order_relaxed);
        }
        unmask_pings(state);
        if (stop->stopped) break;
        continue;  // a ping split it first: go on with the lower half
      }
      // Claim a block: `next` moves past it before the clock check and the block run, so a
      // split never hands out an element that was started.
      mask_pings(state);
      const std::size_t begin = frame.next.load(std::memory_order_relaxed);
      const std::size_t end = frame.end.load(std::memory_order_relaxed);
      if (begin >= end) {
        unmask_pings(state);
        break;
      }
      const std::int64_t budget = state->countdown.load(std::memory_order_relaxed);
      std::size_t count = end - begin;
      if (budget < std::int64_t(count)) count = budget > 0 ? std::size_t(budget) : 1;
      frame.next.store(begin + count, std::memory_order_relaxed);
      unmask_pings(state);
      if (count_down(state, std::int64_t(count))) {
        on_countdown(state);
        if (stop != nullptr && state->slice_over) [[unlikely]] {
          // The heartbeat says end the slice: give the block back and stop before it (a split
          // at that heartbeat left [begin, end) ours, so `next` may move back to begin).
          mask_pings(state);
          frame.next.store(begin, std::memory_order_relaxed);
          unmask_pings(state);
          continue;
        }
      }
      (*context.block)(begin, begin + count, accumulator);
    }
  } catch (...) {
    pop_frame(state, slot);
    settle_after_exception(state, slot, frame);
    if (published_work(frame) != nullptr) frame.work().~loop_work();
    throw;
  }
  pop_frame(state, slot);
  if (published_work(frame) == nullptr) [[likely]] return accumulator;

  auto& work = frame.work();
  if (stop != nullptr && stop->stopped) {
    if (withdraw(state, &work)) {
      work.~loop_work();  // the rest of the piece now reaches to our upper half's end
      return accumulator;
    }
    // A thief runs our upper half: finish our own part here, and wait for it. (Our part ends
    // where the upper half began: our `end`, final since the split; the work's own `first` is
    // the thief's to move.)
    const std::size_t resume = stop->at;
    const std::size_t middle = frame.end.load(std::memory_order_relaxed);
    *stop = slice_stop{};
    if (resume < middle) {
      accumulator = (*context.combine)(
          std::move(accumulator), loop_reduce<Value>(resume, middle, context, frame.epoch,
                                                     nullptr));
    }
  } else if (withdraw(state, &work)) {
    const std::size_t upper_first = work.first, upper_last = work.last;
    work.~loop_work();
    return (*context.combine)(std::move(accumulator),
                              loop_reduce<Value>(upper_first, upper_last, context, frame.epoch,
                                                 stop));
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
template <class MakeIdentity, class Block, class Combine,
          class Value = std::invoke_result_t<const MakeIdentity&>>
Value run_loop(std::size_t count, const MakeIdentity& make_identity, Block& block,
               Combine& combine) {
  const loop_context<Block, Combine, MakeIdentity> context{&block, &combine, &make_identity};
  // relaxed: see loop_reduce.
  return loop_reduce<Value>(0, count, context, thread_state()->epoch.load(std::memory_order_relaxed),
                            nullptr);
}

}  // namespace spindle::fork_detail
