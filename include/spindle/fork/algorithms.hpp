// Parallel algorithms over random-access ranges (F2): parallel_for, parallel_map,
// parallel_reduce and parallel_sort. No grain size: loops split at heartbeats
// (parallel_loop.hpp), sort forks at every partition (fork_join.hpp).
//
// Accepted inputs:
//   - index ranges: parallel_for(first, last, f) with integers calls f(i) for i in [first, last);
//   - iterator pairs: random-access iterators (pointers, vector/deque/array iterators,
//     std::span iterators), f receives the element by reference (*it);
//   - ranges: anything modelling std::ranges::random_access_range and sized_range (std::vector,
//     std::span, std::array, C arrays, std::views::iota(a, b), ...), elements by reference.
// last < first is a usage_error, thrown before anything runs; an empty range does nothing (and
// parallel_reduce returns `identity`).
//
// Where they run is fork_join's rule: on a worker, in parallel; on another thread, serially
// unless started through run_on(rt, ...), which runs them on `rt` and blocks.
// Exceptions: the first exception (in element order among those that ran) propagates once every
// piece has settled; elements of pieces not yet started are skipped. Never leaked, never a hang.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <iterator>
#include <ranges>
#include <type_traits>
#include <utility>
#include <variant>

#include "spindle/core/errors.hpp"
#include "spindle/fork/fork_join.hpp"
#include "spindle/fork/parallel_loop.hpp"

namespace spindle {
namespace fork_detail {

template <class Difference>
std::size_t checked_count(Difference count) {
  if (count < 0) throw usage_error("spindle: parallel algorithm given a range with last < first");
  return std::size_t(count);
}

// Calls body(offset) for every offset in [0, count), in parallel.
template <class Body>
void for_each_offset(std::size_t count, Body& body) {
  if (count == 0) return;
  auto block = [&body](std::size_t begin, std::size_t end, std::monostate&) {
    for (std::size_t i = begin; i < end; ++i) body(i);
  };
  auto combine = [](std::monostate, std::monostate) { return std::monostate{}; };
  run_loop(count, [] { return std::monostate{}; }, block, combine);
}

// Quicksort with the two sides of every partition forked. Elements equal to the pivot are
// handled as in pdqsort: when the pivot equals the element just before the range (an earlier
// pivot, no greater than anything in the range), every element equal to it goes left and is
// done, so inputs with few distinct values stay O(n log n) with one partition pass per level.
template <class It, class Compare>
void quicksort(It first, It last, Compare& compare, int depth_left, bool leftmost) {
  for (;;) {
    const auto count = last - first;
    if (count <= 16 || depth_left == 0) {  // small: insertion sort inside std::sort; degenerate
      std::sort(first, last, compare);     // pivots: std::sort's own O(n log n) guarantee
      return;
    }
    --depth_left;
    // Median of three, moved to the front: the pivot stays at *first while partitioning.
    It middle = first + count / 2, back = last - 1;
    if (compare(*middle, *first)) std::iter_swap(middle, first);
    if (compare(*back, *first)) std::iter_swap(back, first);
    if (compare(*back, *middle)) std::iter_swap(back, middle);
    std::iter_swap(first, middle);
    if (!leftmost && !compare(*(first - 1), *first)) {
      // Pivot == predecessor: [first, equal_end) are all equal to it; only the rest remains.
      first = std::partition(first + 1, last, [&](const auto& x) { return !compare(*first, x); });
      continue;
    }
    It less_end = std::partition(first + 1, last, [&](const auto& x) { return compare(x, *first); });
    It pivot = less_end - 1;
    std::iter_swap(first, pivot);
    fork_join([&] { quicksort(first, pivot, compare, depth_left, leftmost); },
              [&] { quicksort(pivot + 1, last, compare, depth_left, false); });
    return;
  }
}

}  // namespace fork_detail

// f(i) for every integer i in [first, last).
template <std::integral Index, class F>
  requires std::invocable<F&, Index>
void parallel_for(Index first, Index last, F&& f) {
  fork_detail::check_callable(f);
  if (last < first) throw usage_error("spindle: parallel_for given last < first");
  // Unsigned arithmetic: [INT_MIN, INT_MAX) is wider than int, and C++20 conversions back to a
  // signed type are modular, so first + offset lands on the right value.
  using unsigned_index = std::make_unsigned_t<Index>;
  auto body = [&](std::size_t offset) { f(Index(unsigned_index(first) + unsigned_index(offset))); };
  fork_detail::for_each_offset(std::size_t(unsigned_index(last) - unsigned_index(first)), body);
}

// f(*it) for every iterator it in [first, last).
template <std::random_access_iterator It, class F>
  requires std::invocable<F&, std::iter_reference_t<It>>
void parallel_for(It first, It last, F&& f) {
  fork_detail::check_callable(f);
  const std::size_t count = fork_detail::checked_count(last - first);
  auto body = [&](std::size_t offset) { f(first[std::iter_difference_t<It>(offset)]); };
  fork_detail::for_each_offset(count, body);
}

// f(element) for every element of a random-access range.
template <std::ranges::random_access_range Range, class F>
  requires std::ranges::sized_range<Range> &&
           std::invocable<F&, std::ranges::range_reference_t<Range>>
void parallel_for(Range&& range, F&& f) {
  parallel_for(std::ranges::begin(range), std::ranges::begin(range) + std::ranges::ssize(range),
               f);
}

// out[i] = f(in[i]) for every i; `out` must have at least as many elements as `in`.
template <std::ranges::random_access_range In, std::ranges::random_access_range Out, class F>
  requires std::ranges::sized_range<In> && std::ranges::sized_range<Out> &&
           std::invocable<F&, std::ranges::range_reference_t<In>>
void parallel_map(In&& in, Out&& out, F&& f) {
  fork_detail::check_callable(f);
  if (std::ranges::size(out) < std::ranges::size(in)) {
    throw usage_error("spindle: parallel_map output is shorter than its input");
  }
  auto source = std::ranges::begin(in);
  auto destination = std::ranges::begin(out);
  auto body = [&](std::size_t offset) {
    const auto i = std::ptrdiff_t(offset);
    destination[i] = f(source[i]);
  };
  fork_detail::for_each_offset(std::size_t(std::ranges::size(in)), body);
}

namespace fork_detail {

template <class T, class Range, class Map, class Combine, class MakeIdentity>
T reduce(Range& range, const MakeIdentity& make_identity, Map& map, Combine& combine) {
  check_callable(map);
  check_callable(combine);
  auto first = std::ranges::begin(range);
  const std::size_t count = checked_count(std::ranges::ssize(range));
  auto block = [&](std::size_t begin, std::size_t end, T& accumulator) {
    T local = std::move(accumulator);  // a local the optimiser can keep in registers
    for (std::size_t i = begin; i < end; ++i) {
      local = combine(std::move(local), T(map(first[std::ptrdiff_t(i)])));
    }
    accumulator = std::move(local);
  };
  auto join = [&](T left, T right) { return T(combine(std::move(left), std::move(right))); };
  if (count == 0) return make_identity();
  return run_loop(count, make_identity, block, join);
}

}  // namespace fork_detail

// combine(... combine(combine(identity, map(e0)), map(e1)) ..., map(en)) with the combinations
// regrouped freely: `combine` must be associative and `identity` neutral for it. Every piece of
// the loop starts from a copy of `identity`, so T must be copyable; for a move-only T pass a
// function that makes the identity instead (the overload below).
template <std::ranges::random_access_range Range, class T, class Map, class Combine>
  requires std::ranges::sized_range<Range> &&
           std::invocable<Map&, std::ranges::range_reference_t<Range>> &&
           std::invocable<Combine&, T, T>
T parallel_reduce(Range&& range, T identity, Map&& map, Combine&& combine) {
  static_assert(std::copy_constructible<T>,
                "spindle::parallel_reduce copies `identity` to start each piece of the loop: for "
                "a move-only result, pass a function returning a fresh identity instead, "
                "parallel_reduce(range, [] { return T(...); }, map, combine)");
  const auto make_identity = [&identity] { return identity; };
  return fork_detail::reduce<T>(range, make_identity, map, combine);
}

// The same with the identity made by `make_identity()` for each piece (results that cannot be
// copied, or are expensive to copy).
template <std::ranges::random_access_range Range, class MakeIdentity, class Map, class Combine,
          class T = std::remove_cvref_t<std::invoke_result_t<MakeIdentity&>>>
  requires std::ranges::sized_range<Range> && std::invocable<const MakeIdentity&> &&
           (!std::invocable<Combine&, MakeIdentity, MakeIdentity>) &&
           std::invocable<Map&, std::ranges::range_reference_t<Range>> &&
           std::invocable<Combine&, T, T>
T parallel_reduce(Range&& range, MakeIdentity make_identity, Map&& map, Combine&& combine) {
  return fork_detail::reduce<T>(range, make_identity, map, combine);
}

// Sorts [first, last) by `compare` (not stable): parallel quicksort, each partition's two sides
// forked (pdqsort's handling of equal elements); pathological pivot sequences fall back to
// std::sort below a depth of 2 log2(n).
template <std::random_access_iterator It, class Compare = std::ranges::less>
  requires std::sortable<It, Compare>
void parallel_sort(It first, It last, Compare compare = {}) {
  fork_detail::check_callable(compare);
  const std::size_t count = fork_detail::checked_count(last - first);
  int depth = 0;
  for (std::size_t n = count; n > 1; n >>= 1) depth += 2;
  fork_detail::quicksort(first, last, compare, depth, /*leftmost=*/true);
}

template <std::ranges::random_access_range Range, class Compare = std::ranges::less>
  requires std::ranges::sized_range<Range> &&
           std::sortable<std::ranges::iterator_t<Range>, Compare>
void parallel_sort(Range&& range, Compare compare = {}) {
  parallel_sort(std::ranges::begin(range), std::ranges::begin(range) + std::ranges::ssize(range),
                std::move(compare));
}

}  // namespace spindle
