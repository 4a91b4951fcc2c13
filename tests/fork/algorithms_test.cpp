// Behaviour of the parallel algorithms: parallel_for over integers, iterators and ranges (vector,
// deque, span, array, C array, views::iota) visits every element exactly once, including empty
// ranges and ranges of one; last < first and null/empty callables are usage errors thrown before
// anything runs; parallel_map (and a short output); parallel_reduce with non-commutative combines
// (strings, 2x2 matrices) equals a serial fold, sum of squares over iota(0, 10^8) equals the
// closed form; exceptions from elements and from combine reach the caller (the first in element
// order); parallel_sort equals std::sort on many shapes and sizes, with custom comparators and
// move-only elements. Runtimes use fork_quantum 0 so loops split and pieces get stolen.
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <ranges>
#include <span>
#include <string>
#include <vector>

#include "support/test_support.hpp"
#include "support/fork_support.hpp"

namespace {

using namespace spindle::testing;

using spindle::testing::forking;

// Per-index visit counters: every index exactly once.
struct visits {
  explicit visits(std::size_t n) : counts(n) {}
  std::vector<std::atomic<int>> counts;
  void hit(std::size_t i) { counts.at(i).fetch_add(1, std::memory_order_relaxed); }
  ::testing::AssertionResult each_once() const {
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i].load() != 1) {
        return ::testing::AssertionFailure()
               << "index " << i << " visited " << counts[i].load() << " times";
      }
    }
    return ::testing::AssertionSuccess();
  }
};

constexpr std::size_t sizes[] = {0, 1, 2, 17, 1000, 100'000};

// A runtime per test; at the end (workers joined) every promoted piece was either withdrawn by
// its owner or run by exactly one delegate.
class Algorithms : public ::testing::TestWithParam<std::uint32_t> {
 protected:
  void TearDown() override {
    rt.shutdown();
    const auto after = spindle::fork_statistics();
    EXPECT_EQ(after.promoted - before.promoted,
              (after.withdrawn - before.withdrawn) + (after.delegated - before.delegated));
  }
  spindle::fork_counters before = spindle::fork_statistics();
  spindle::runtime rt{forking(GetParam())};
};

// --- parallel_for ----------------------------------------------------------------------------

TEST_P(Algorithms, ForOverIntegersVisitsEachIndexOnce) {
  for (std::size_t n : sizes) {
    visits v(n);
    spindle::run_on(
        rt, [&] { spindle::parallel_for(0, int(n), [&](int i) { v.hit(std::size_t(i)); }); });
    EXPECT_TRUE(v.each_once()) << "n=" << n;
  }
  // Negative and wide index types.
  visits negative(200);
  spindle::run_on(rt, [&] {
    spindle::parallel_for(-100, 100, [&](int i) { negative.hit(std::size_t(i + 100)); });
  });
  EXPECT_TRUE(negative.each_once());
  visits wide(5000);
  const std::int64_t base = std::int64_t(1) << 40;
  spindle::run_on(rt, [&] {
    spindle::parallel_for(base, base + 5000,
                          [&](std::int64_t i) { wide.hit(std::size_t(i - base)); });
  });
  EXPECT_TRUE(wide.each_once());
  visits unsigned_indices(3000);
  spindle::run_on(rt, [&] {
    spindle::parallel_for(7u, 3007u, [&](unsigned i) { unsigned_indices.hit(i - 7); });
  });
  EXPECT_TRUE(unsigned_indices.each_once());
  if (GetParam() >= 2) {
    const auto before = spindle::fork_statistics().delegated;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (spindle::fork_statistics().delegated == before &&
           std::chrono::steady_clock::now() < deadline) {
      visits again(100'000);
      spindle::run_on(rt, [&] {
        spindle::parallel_for(0, 100'000, [&](int i) { again.hit(std::size_t(i)); });
      });
      ASSERT_TRUE(again.each_once());
    }
    EXPECT_GT(spindle::fork_statistics().delegated, before) << "no loop piece was ever stolen";
  }
}

TEST_P(Algorithms, ForOverIteratorsAndRanges) {
  for (std::size_t n : sizes) {
    std::vector<int> vec(n, 0);
    std::deque<int> deq(n, 0);
    spindle::run_on(rt, [&] {
      spindle::parallel_for(vec.begin(), vec.end(), [](int& x) { ++x; });               // iterators
      spindle::parallel_for(vec.data(), vec.data() + vec.size(), [](int& x) { ++x; });  // pointers
      spindle::parallel_for(vec, [](int& x) { ++x; });                                  // vector
      spindle::parallel_for(std::span<int>(vec), [](int& x) { ++x; });                  // span
      spindle::parallel_for(deq, [](int& x) { ++x; });                                  // deque
    });
    EXPECT_TRUE(std::ranges::all_of(vec, [](int x) { return x == 4; })) << "n=" << n;
    EXPECT_TRUE(std::ranges::all_of(deq, [](int x) { return x == 1; })) << "n=" << n;

    visits v(n);
    spindle::run_on(rt, [&] {
      spindle::parallel_for(std::views::iota(std::size_t(0), n), [&](std::size_t i) { v.hit(i); });
    });
    EXPECT_TRUE(v.each_once()) << "n=" << n;
  }
  std::array<int, 33> arr{};
  int c_array[5] = {};
  spindle::run_on(rt, [&] {
    spindle::parallel_for(arr, [](int& x) { x += 2; });
    spindle::parallel_for(c_array, [](int& x) { x += 3; });
  });
  EXPECT_TRUE(std::ranges::all_of(arr, [](int x) { return x == 2; }));
  EXPECT_TRUE(std::ranges::all_of(c_array, [](int x) { return x == 3; }));
}

TEST_P(Algorithms, ForRejectsBadInputBeforeRunningAnything) {
  std::atomic<int> runs{0};
  std::vector<int> vec(10);
  void (*null_function)(int) = nullptr;
  std::function<void(int&)> empty;
  auto rejected = [&] {
    int count = 0;
    auto check = [&](auto&& call) {
      try {
        call();
      } catch (const spindle::usage_error&) {
        ++count;
      }
    };
    check([&] { spindle::parallel_for(5, 3, [&](int) { runs.fetch_add(1); }); });
    check([&] { spindle::parallel_for(5u, 3u, [&](unsigned) { runs.fetch_add(1); }); });
    check([&] { spindle::parallel_for(vec.end(), vec.begin(), [&](int&) { runs.fetch_add(1); }); });
    check([&] { spindle::parallel_for(0, 10, null_function); });
    check([&] { spindle::parallel_for(vec, empty); });
    check([&] { spindle::parallel_for(vec.begin(), vec.end(), empty); });
    return count;
  };
  EXPECT_EQ(rejected(), 6);                     // plain thread
  EXPECT_EQ(spindle::run_on(rt, rejected), 6);  // worker
  EXPECT_EQ(runs.load(), 0);
  spindle::run_on(rt, [&] { spindle::parallel_for(3, 3, [&](int) { runs.fetch_add(1); }); });
  EXPECT_EQ(runs.load(), 0);
}

TEST_P(Algorithms, FirstExceptionInElementOrderReachesTheCaller) {
  std::mt19937 rng(42);
  for (int round = 0; round < 30; ++round) {
    constexpr int n = 50'000;
    std::vector<char> throws(n, 0);
    const int count = 1 + int(rng() % 5);
    int first = n;
    for (int k = 0; k < count; ++k) {
      const int i = int(rng() % n);
      throws[std::size_t(i)] = 1;
      first = std::min(first, i);
    }
    std::atomic<int> ran{0};
    try {
      spindle::run_on(rt, [&] {
        spindle::parallel_for(0, n, [&](int i) {
          ran.fetch_add(1, std::memory_order_relaxed);
          if (throws[std::size_t(i)]) throw custom_error{i};
        });
      });
      ADD_FAILURE() << "no exception";
    } catch (const custom_error& e) {
      EXPECT_EQ(e.code, first) << "round " << round;
    }
    EXPECT_LE(ran.load(), n);
  }
  EXPECT_EQ(spindle::run_on(rt,
                            [] {
                              return spindle::parallel_reduce(
                                  std::views::iota(0, 1000), 0, [](int i) { return i; },
                                  std::plus<>());
                            }),
            499'500);
}

TEST_P(Algorithms, NestedLoopsAndForksInsideLoopBodies) {
  // Loop frames and fork frames interleaved on the same frame stack, split at heartbeats.
  constexpr int rows = 300, columns = 300;
  visits v(std::size_t(rows) * columns);
  spindle::run_on(rt, [&] {
    spindle::parallel_for(0, rows, [&](int r) {
      if (r % 2 == 0) {
        spindle::parallel_for(0, columns,
                              [&](int c) { v.hit(std::size_t(r) * columns + std::size_t(c)); });
      } else {
        spindle::fork_join(
            [&] {
              spindle::parallel_for(
                  0, columns / 2, [&](int c) { v.hit(std::size_t(r) * columns + std::size_t(c)); });
            },
            [&] {
              spindle::parallel_for(columns / 2, columns, [&](int c) {
                v.hit(std::size_t(r) * columns + std::size_t(c));
              });
            });
      }
    });
  });
  EXPECT_TRUE(v.each_once());
  // A reduce whose map runs a reduce of its own.
  const std::uint64_t total = spindle::run_on(rt, [] {
    return spindle::parallel_reduce(
        std::views::iota(0, 500), std::uint64_t(0),
        [](int i) {
          return spindle::parallel_reduce(
              std::views::iota(0, i), std::uint64_t(0), [](int j) { return std::uint64_t(j); },
              std::plus<>());
        },
        std::plus<>());
  });
  std::uint64_t expected = 0;
  for (std::uint64_t i = 0; i < 500; ++i) expected += i * (i - (i > 0 ? 1 : 0)) / 2;
  EXPECT_EQ(total, expected);
}

// --- parallel_map ----------------------------------------------------------------------------

TEST_P(Algorithms, Map) {
  for (std::size_t n : sizes) {
    std::vector<int> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = int(i);
    std::vector<std::string> out(n + 3, "untouched");
    spindle::run_on(
        rt, [&] { spindle::parallel_map(in, out, [](int x) { return std::to_string(x * 2); }); });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], std::to_string(2 * i));
    for (std::size_t i = n; i < n + 3; ++i) EXPECT_EQ(out[i], "untouched");
  }
  std::vector<long> squares(1000);
  spindle::run_on(rt, [&] {
    spindle::parallel_map(std::views::iota(0, 1000), squares, [](int i) { return long(i) * i; });
  });
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(squares[std::size_t(i)], long(i) * i);

  std::vector<int> in(10, 1), short_out(9, 0);
  std::atomic<int> runs{0};
  auto f = [&](int x) {
    runs.fetch_add(1);
    return x;
  };
  EXPECT_THROW(spindle::run_on(rt, [&] { spindle::parallel_map(in, short_out, f); }),
               spindle::usage_error);
  EXPECT_THROW(spindle::parallel_map(in, short_out, f), spindle::usage_error);
  int (*null_function)(int) = nullptr;
  EXPECT_THROW(spindle::parallel_map(in, in, null_function), spindle::usage_error);
  EXPECT_EQ(runs.load(), 0);
  EXPECT_TRUE(std::ranges::all_of(short_out, [](int x) { return x == 0; }));
}

// --- parallel_reduce -------------------------------------------------------------------------

struct mat2 {
  std::uint64_t a = 1, b = 0, c = 0, d = 1;  // identity
  friend mat2 operator*(const mat2& x, const mat2& y) {
    return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c,
            x.c * y.b + x.d * y.d};
  }
  friend bool operator==(const mat2&, const mat2&) = default;
};

TEST_P(Algorithms, ReduceWithNonCommutativeCombineEqualsSerial) {
  for (std::size_t n : sizes) {
    const std::size_t m = std::min<std::size_t>(n, 3000);  // strings: keep it quadratic-free
    std::string serial;
    for (std::size_t i = 0; i < m; ++i) serial += std::to_string(i) + ",";
    const std::string parallel = spindle::run_on(rt, [&] {
      return spindle::parallel_reduce(
          std::views::iota(std::size_t(0), m), std::string(),
          [](std::size_t i) { return std::to_string(i) + ","; },
          [](std::string x, const std::string& y) { return x + y; });
    });
    EXPECT_EQ(parallel, serial) << "n=" << m;

    std::vector<mat2> matrices(n);
    std::mt19937_64 rng(n);
    for (auto& m2 : matrices) m2 = {rng(), rng(), rng(), rng()};
    mat2 expected;
    for (const auto& m2 : matrices) expected = expected * m2;
    const mat2 product = spindle::run_on(rt, [&] {
      return spindle::parallel_reduce(
          matrices, mat2{}, [](const mat2& x) { return x; },
          [](const mat2& x, const mat2& y) { return x * y; });
    });
    EXPECT_EQ(product, expected) << "n=" << n;
  }
  // Empty: the identity, map and combine never called.
  std::vector<int> none;
  EXPECT_EQ(spindle::run_on(rt,
                            [&] {
                              return spindle::parallel_reduce(
                                  none, 42, [](int) -> int { throw custom_error{1}; },
                                  [](int, int) -> int { throw custom_error{2}; });
                            }),
            42);
}

// A move-only result (issue 14, item 12): the identity comes from a function called for each
// piece; the combination order is still element order. Before, the identity was copied per piece
// and a move-only T was a deep template error; passing a move-only identity by value now says
// what to do instead (a static_assert).
TEST_P(Algorithms, ReduceWithAMoveOnlyResult) {
  using list = std::unique_ptr<std::vector<int>>;
  for (std::size_t n : sizes) {
    const list all = spindle::run_on(rt, [&] {
      return spindle::parallel_reduce(
          std::views::iota(std::size_t(0), n), [] { return std::make_unique<std::vector<int>>(); },
          [](std::size_t i) { return std::make_unique<std::vector<int>>(1, int(i)); },
          [](list x, list y) {
            x->insert(x->end(), y->begin(), y->end());
            return x;
          });
    });
    ASSERT_EQ(all->size(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ((*all)[i], int(i)) << "n=" << n;
  }
  std::vector<int> none;
  const list empty = spindle::parallel_reduce(
      none, [] { return std::make_unique<std::vector<int>>(3, 7); },
      [](int) { return list(); }, [](list x, list) { return x; });
  EXPECT_EQ(*empty, (std::vector<int>{7, 7, 7}));
}

TEST_P(Algorithms, SumOfSquaresOverAHundredMillion) {
  // Default quantum here: at quantum 0 every element would be a clock read. Smaller under
  // sanitizers.
#if defined(SPINDLE_TSAN) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  static constexpr long n = 2'000'000;
#else
  static constexpr long n = 100'000'000;
#endif
  spindle::runtime normal({.workers = GetParam()});
  const std::uint64_t sum = spindle::run_on(normal, [] {
    return spindle::parallel_reduce(
        std::views::iota(0L, n), std::uint64_t(0),
        [](long i) { return std::uint64_t(i) * std::uint64_t(i); },
        [](std::uint64_t x, std::uint64_t y) { return x + y; });
  });
  const unsigned __int128 big = n;
  const auto expected = std::uint64_t((big - 1) * big * (2 * big - 1) / 6);  // mod 2^64
  EXPECT_EQ(sum, expected);
}

TEST_P(Algorithms, ReduceExceptionsReachTheCaller) {
  // A combine that throws once the partial sum is large: some piece throws, no hang.
  for (int round = 0; round < 20; ++round) {
    EXPECT_THROW(spindle::run_on(rt,
                                 [] {
                                   return spindle::parallel_reduce(
                                       std::views::iota(0, 100'000), 0L,
                                       [](int i) { return long(i); },
                                       [](long x, long y) {
                                         if (x + y > 1'000'000'000L) throw custom_error{1};
                                         return x + y;
                                       });
                                 }),
                 custom_error);
  }
  // A map that throws at one element.
  EXPECT_THROW(spindle::run_on(rt,
                               [] {
                                 return spindle::parallel_reduce(
                                     std::views::iota(0, 100'000), 0L,
                                     [](int i) -> long {
                                       if (i == 77'777) throw std::out_of_range("element");
                                       return i;
                                     },
                                     std::plus<>());
                               }),
               std::out_of_range);
  int (*null_map)(int) = nullptr;
  std::function<int(int, int)> empty_combine;
  std::vector<int> v(10, 1);
  EXPECT_THROW(spindle::parallel_reduce(v, 0, null_map, std::plus<>()), spindle::usage_error);
  EXPECT_THROW(spindle::parallel_reduce(
                   v, 0, [](int x) { return x; }, empty_combine),
               spindle::usage_error);
  EXPECT_EQ(spindle::run_on(rt,
                            [&] {
                              return spindle::parallel_reduce(
                                  v, 0, [](int x) { return x; }, std::plus<>());
                            }),
            10);
}

// --- parallel_sort ---------------------------------------------------------------------------

std::vector<int> make_input(const std::string& shape, std::size_t n, std::mt19937& rng) {
  std::vector<int> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (shape == "random") v[i] = int(rng());
    if (shape == "sorted") v[i] = int(i);
    if (shape == "reverse") v[i] = int(n - i);
    if (shape == "equal") v[i] = 7;
    if (shape == "few") v[i] = int(rng() % 4);
  }
  return v;
}

TEST_P(Algorithms, SortEqualsStdSort) {
#if defined(SPINDLE_TSAN) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr std::size_t big = 100'000;
#else
  constexpr std::size_t big = 1'000'000;
#endif
  std::mt19937 rng(GetParam());
  for (const std::string shape : {"random", "sorted", "reverse", "equal", "few"}) {
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(17),
                          std::size_t(1000), big}) {
      std::vector<int> v = make_input(shape, n, rng);
      std::vector<int> expected = v;
      std::sort(expected.begin(), expected.end());
      spindle::run_on(rt, [&] { spindle::parallel_sort(v.begin(), v.end()); });
      ASSERT_EQ(v, expected) << shape << " n=" << n;
      // Descending, through the range overload.
      std::sort(expected.begin(), expected.end(), std::greater<>());
      spindle::run_on(rt, [&] { spindle::parallel_sort(v, std::greater<>()); });
      ASSERT_EQ(v, expected) << shape << " n=" << n << " descending";
    }
  }
  std::vector<int> untouched{3, 1, 2};
  EXPECT_THROW(spindle::parallel_sort(untouched.end(), untouched.begin()), spindle::usage_error);
  EXPECT_EQ(untouched, (std::vector<int>{3, 1, 2}));
  spindle::parallel_sort(untouched);  // plain thread: serially
  EXPECT_EQ(untouched, (std::vector<int>{1, 2, 3}));
}

TEST_P(Algorithms, SortWithCustomComparatorAndMoveOnlyElements) {
  // Pairs by key only: not stable, so compare as sorted-by-key and a permutation.
  std::mt19937 rng(9);
  std::vector<std::pair<int, int>> pairs(50'000);
  for (std::size_t i = 0; i < pairs.size(); ++i) pairs[i] = {int(rng() % 100), int(i)};
  auto original = pairs;
  auto by_key = [](const auto& x, const auto& y) { return x.first < y.first; };
  spindle::run_on(rt, [&] { spindle::parallel_sort(std::span(pairs), by_key); });
  EXPECT_TRUE(std::is_sorted(pairs.begin(), pairs.end(), by_key));
  std::sort(pairs.begin(), pairs.end());
  std::sort(original.begin(), original.end());
  EXPECT_EQ(pairs, original);

  std::vector<std::unique_ptr<int>> owned;
  std::vector<const int*> addresses;
  for (int i = 0; i < 20'000; ++i) {
    owned.push_back(std::make_unique<int>(int(rng() % 5000)));
    addresses.push_back(owned.back().get());
  }
  spindle::run_on(rt, [&] {
    spindle::parallel_sort(owned.begin(), owned.end(),
                           [](const auto& x, const auto& y) { return *x < *y; });
  });
  ASSERT_TRUE(std::ranges::none_of(owned, [](const auto& p) { return p == nullptr; }));
  EXPECT_TRUE(std::is_sorted(owned.begin(), owned.end(),
                             [](const auto& x, const auto& y) { return *x < *y; }));
  std::vector<const int*> after;
  for (const auto& p : owned) after.push_back(p.get());
  std::sort(addresses.begin(), addresses.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, addresses);  // every element exactly once
}

TEST_P(Algorithms, SortComparatorThatThrows) {
  std::mt19937 rng(3);
  for (int round = 0; round < 10; ++round) {
    std::vector<int> v(100'000);
    for (auto& x : v) x = int(rng());
    std::atomic<long> comparisons{0};
    const long limit = 1000 + long(rng() % 1'000'000);
    EXPECT_THROW(
        spindle::run_on(rt,
                        [&] {
                          spindle::parallel_sort(v, [&](int x, int y) {
                            if (comparisons.fetch_add(1, std::memory_order_relaxed) == limit)
                              throw custom_error{3};
                            return x < y;
                          });
                        }),
        custom_error);
  }
  std::vector<int> w{3, 2, 1};
  spindle::run_on(rt, [&] { spindle::parallel_sort(w); });  // still usable
  EXPECT_EQ(w, (std::vector<int>{1, 2, 3}));
}

INSTANTIATE_TEST_SUITE_P(Workers, Algorithms, ::testing::Values(1u, 2u, 4u));

// --- plain threads ---------------------------------------------------------------------------

TEST(AlgorithmsSerial, PlainThreadRunsEverythingSerially) {
  const auto before = spindle::fork_statistics();
  visits v(10'000);
  spindle::parallel_for(0, 10'000, [&](int i) { v.hit(std::size_t(i)); });
  EXPECT_TRUE(v.each_once());
  const long sum = spindle::parallel_reduce(
      std::views::iota(0, 10'000), 0L, [](int i) { return long(i); }, std::plus<>());
  EXPECT_EQ(sum, 49'995'000L);
  std::vector<int> w{5, 4, 3, 2, 1};
  spindle::parallel_sort(w);
  EXPECT_EQ(w, (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(spindle::fork_statistics().heartbeats, before.heartbeats);
}

}  // namespace
