// for_each_concurrent / parallel_consume: an async source feeding concurrent, or CPU-parallel,
// work with at most `limit` items in flight (issue 16, docs/design/fork-join.md "Bridging async
// sources and fork-join").
//
//   // each item processed by an async function, at most 8 at a time
//   co_await spindle::for_each_concurrent(requests, 8, [](request r) { return handle(r); });
//   // each chunk counted on whichever worker is free; partial results combined as they finish
//   counts total = co_await spindle::parallel_consume(chunks, 4, counts{}, count_chunk, add);
//
// Sources (async_source below): what the consumer pulls items from, one at a time:
//   - an object with next() or receive() whose co_await gives std::optional<T> (nullopt: the end):
//     spindle::channel<T> (receive), spindle::join_set<T> (next: the children's values, in
//     completion order), a user's stream type;
//   - a callable whose result, awaited, gives std::optional<T> (a generator function);
//   - a std::ranges::input_range (a vector of items, of file names, of tasks, ...): its elements
//     are moved out one at a time.
// The source is taken by reference: it must outlive the awaited call (the usual rule for lazy
// tasks: await the call in the full expression that made it, or keep the source alive).
//
// Design
//   Participants: the consumer (the task awaiting the call, which owns the returned coroutine's
//   frame), one child task per item (spawned on the consumer's runtime, in a join_set), and
//   cancellers of the consumer.
//   The consumer loop: while fewer than `limit` children are unfinished, pull one item from the
//   source (the only place the source is touched, so it is never read ahead of the limit: with
//   `limit` children running, the next item stays in the source, and a channel's senders block),
//   then spawn a child for it; at the limit, wait for one child to finish (join_set::next, in
//   completion order). At the end of the source, wait for every child.
//   A child runs fn(item): if that returns an awaitable, the child awaits it; otherwise fn is a
//   plain function and its call is the child's whole work (CPU work: the child runs on whichever
//   worker takes it, and may itself fork-join). fn and the item live in the consumer's frame and
//   the child's frame respectively; the consumer never returns before every child finished, so a
//   child may use fn's captures, and fn may even be a capturing coroutine lambda.
//   Failures: the first failure (an item's exception, the source's exception, task_cancelled of
//   a child that was not cancelled by us) stops the pulling; the other children are cancelled and
//   waited for (join_set::shutdown), then that exception is rethrown (as when_all). A child that
//   fails while the consumer is suspended in the source (an empty channel) interrupts that wait:
//   the consumer awaits the source inside a cancellation scope of its own task (S6,
//   spawned_task.hpp) that the failing child fires (failure_signal below), so an exception is not
//   held back by a source that never produces again. An item that such a pull returned anyway
//   (it raced the failure) is dropped unprocessed.
//   Cancellation: if the consumer is cancelled while pulling or waiting, every child is cancelled
//   and waited for (structured: no child outlives the call), then task_cancelled propagates. An
//   item already pulled is processed or dropped with its child, never returned to the source.
//   Accounting: every item pulled from the source is handed to exactly one child; a child that
//   was cancelled before it ran never calls fn (its item is destroyed with its frame).
//   failure_signal: shared by the consumer and the children, under its own std::mutex: whether a
//   failure happened, and whether the consumer is inside its source scope now (so a child fires
//   the scope only while it is listed: firing an unlisted key finds nothing anyway, S6). The
//   consumer task stays alive while any child runs (it waits for all of them), so a child may
//   call cancel_scope on it.
// parallel_consume(source, limit, identity, map, combine): for_each_concurrent whose fn is the
//   plain function map(item) -> T, each result folded into one accumulator (under a std::mutex,
//   held for one combine) in completion order: `combine` must be associative and commutative,
//   `identity` neutral. Returns the total once the source ended and every item was mapped.
// Must be awaited in a task on a runtime worker (spawn needs one; usage_error otherwise).
// limit == 0 is a usage_error, thrown before the source is touched.
#pragma once

#include <concepts>
#include <cstddef>
#include <exception>
#include <iterator>
#include <mutex>
#include <optional>
#include <ranges>
#include <type_traits>
#include <utility>

#include "spindle/core/errors.hpp"
#include "spindle/task/awaitable.hpp"
#include "spindle/task/join_set.hpp"
#include "spindle/task/spawned_task.hpp"
#include "spindle/task/task.hpp"
#include "spindle/task/when.hpp"

namespace spindle {

namespace detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class Source>
concept has_next = requires(Source& source) { source.next(); };
template <class Source>
concept has_receive = requires(Source& source) { source.receive(); };

// The awaitable one pull of the source gives (before it is awaited): next(), else receive(),
// else the source called.
template <class Source>
  requires has_next<Source>
decltype(auto) pull_from(Source& source) {
  return source.next();
}
template <class Source>
  requires(!has_next<Source> && has_receive<Source>)
decltype(auto) pull_from(Source& source) {
  return source.receive();
}
template <class Source>
  requires(!has_next<Source> && !has_receive<Source> && std::invocable<Source&>)
decltype(auto) pull_from(Source& source) {
  return source();
}

template <class Source>
using pull_result_t = std::remove_cvref_t<await_result_t<decltype(pull_from(std::declval<Source&>()))>>;

}  // namespace detail

// Something for_each_concurrent pulls from with co_await (see "Sources" above).
template <class Source>
concept async_source = requires(Source& source) {
  { detail::pull_from(source) } -> awaitable;
} && detail::is_optional<detail::pull_result_t<Source>>::value;

namespace detail {

// A range seen as a source: its elements moved out in order.
template <class Range>
class range_source {
 public:
  explicit range_source(Range& range) : next_(std::ranges::begin(range)), end_(std::ranges::end(range)) {}
  using item_type = std::remove_cvref_t<std::ranges::range_reference_t<Range>>;
  // A ready awaitable: co_await gives the next element or nullopt.
  struct pull {
    std::optional<item_type> item;
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    std::optional<item_type> await_resume() { return std::move(item); }
  };
  pull next() {
    if (next_ == end_) return {std::nullopt};
    pull result{std::optional<item_type>(std::ranges::iter_move(next_))};
    ++next_;
    return result;
  }

 private:
  std::ranges::iterator_t<Range> next_;
  std::ranges::sentinel_t<Range> end_;
};

// Shared by the consumer and its children (see "failure_signal" in the design comment).
class failure_signal {
 public:
  explicit failure_signal(spawned_task_base* consumer) noexcept : consumer_(consumer) {
    scope_.key = this;
  }
  failure_signal(const failure_signal&) = delete;
  failure_signal& operator=(const failure_signal&) = delete;

  // A child failed: interrupts the consumer's pull, if it is in one.
  void fire() noexcept {
    std::lock_guard guard(lock_);
    failed_ = true;
    if (pulling_) consumer_->cancel_scope(this);
  }
  // The consumer, before a pull: false (no pull) if a child failed already.
  bool enter_pull() noexcept {
    std::lock_guard guard(lock_);
    if (failed_) return false;
    consumer_->enter_scope(scope_);
    pulling_ = true;
    return true;
  }
  // The consumer, after a pull (returned or threw): true if a child's failure fired the scope.
  bool leave_pull() noexcept {
    {
      std::lock_guard guard(lock_);
      pulling_ = false;
    }
    return consumer_->leave_scope(scope_);
  }
  bool failed() noexcept {
    std::lock_guard guard(lock_);
    return failed_;
  }

 private:
  spawned_task_base* const consumer_;
  cancellation_scope scope_;  // listed on the consumer while pulling_ (its key: this)
  std::mutex lock_;
  bool failed_ = false;   // under lock_
  bool pulling_ = false;  // under lock_
};

// One child: fn(item), awaited if it returns an awaitable. A failure fires the consumer's signal
// before it propagates through the join_set.
template <class Fn, class Item>
task<void> run_concurrent_item(Fn& fn, Item item, failure_signal& signal) {
  try {
    if constexpr (awaitable<std::invoke_result_t<Fn&, Item&&>>) {
      co_await fn(std::move(item));
    } else {
      fn(std::move(item));
    }
  } catch (const task_cancelled&) {
    throw;  // ours (shutdown) or its own: next() reports it; nothing to interrupt
  } catch (...) {
    signal.fire();
    throw;
  }
}

// Waits for one child to finish; records a failure (or the consumer's own cancellation) in
// `state` (when.hpp: a next() that threw without handing a child out was interrupted).
inline task<void> reap_one_child(join_set<void>& children, when_wait_state& state) {
  const std::size_t before = children.size();
  try {
    co_await children.next();
  } catch (...) {
    state.on_next_threw(before, children.size());
  }
}

template <class Source, class Fn>
task<void> for_each_concurrent_body(Source& source, std::size_t limit, Fn fn) {
  using item_type = typename pull_result_t<Source>::value_type;
  spawned_task_base* consumer = spawned_task_base::current();
  if (consumer == nullptr) throw usage_error("spindle: for_each_concurrent awaited outside a task");
  failure_signal signal(consumer);
  join_set<void> children;
  when_wait_state state;
  for (;;) {
    while (!state.done() && children.size() >= limit) co_await reap_one_child(children, state);
    if (state.done() || !signal.enter_pull()) break;
    std::optional<item_type> item;
    bool fired = false;
    try {
      // Moved in by construction: items need only be move-constructible (as a channel's).
      if (auto pulled = co_await pull_from(source)) item.emplace(std::move(*pulled));
      fired = signal.leave_pull();
    } catch (const task_cancelled&) {
      fired = signal.leave_pull();
      if (!fired || consumer->task_cancel_requested()) state.caller_cancelled = true;
    } catch (...) {
      signal.leave_pull();
      state.failure = std::current_exception();  // the source's own exception
    }
    if (state.done() || fired || !item) break;  // a fired pull: its item (if any) is dropped
    try {
      children.spawn(run_concurrent_item<Fn, item_type>(fn, std::move(*item), signal));
    } catch (...) {
      state.failure = std::current_exception();  // runtime_stopped, bad_alloc
      break;
    }
  }
  while (!state.done() && !children.empty()) co_await reap_one_child(children, state);
  if (state.done()) co_await children.shutdown();  // the others: cancelled and waited for
  state.rethrow();
}

template <class Source, class Fn>
task<void> for_each_concurrent_checked(Source& source, std::size_t limit, Fn fn) {
  if (limit == 0) throw usage_error("spindle: for_each_concurrent limit must be at least 1");
  if constexpr (async_source<Source>) {
    return for_each_concurrent_body(source, limit, std::move(fn));
  } else {
    // The adapter lives in this coroutine's frame (a range source is a plain cursor).
    return [](Source& range, std::size_t count, Fn function) -> task<void> {
      range_source<Source> adapter(range);
      co_await for_each_concurrent_body(adapter, count, std::move(function));
    }(source, limit, std::move(fn));
  }
}

}  // namespace detail

// Pulls every item from `source` and runs fn(item) for each in its own child task, at most
// `limit` unfinished at a time (see the design comment).
template <class Source, class Fn>
  requires(async_source<Source> || std::ranges::input_range<Source>)
task<void> for_each_concurrent(Source& source, std::size_t limit, Fn fn) {
  return detail::for_each_concurrent_checked(source, limit, std::move(fn));
}

// map(item) for every item of `source`, each on whichever worker is free (at most `limit` in
// flight), folded with `combine` into `identity` in completion order (see the design comment).
template <class Source, class T, class Map, class Combine>
  requires(async_source<Source> || std::ranges::input_range<Source>)
task<T> parallel_consume(Source& source, std::size_t limit, T identity, Map map, Combine combine) {
  struct accumulator {
    std::mutex lock;
    T total;
    Map map;
    Combine combine;
  };
  accumulator state{{}, std::move(identity), std::move(map), std::move(combine)};
  auto fold = [&state](auto item) {
    T part = state.map(std::move(item));
    std::lock_guard guard(state.lock);
    state.total = state.combine(std::move(state.total), std::move(part));
  };
  co_await detail::for_each_concurrent_checked(source, limit, std::move(fold));
  co_return std::move(state.total);
}

}  // namespace spindle
