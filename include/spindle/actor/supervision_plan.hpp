// Supervision plans: what a supervisor decides when one of its children ends, as pure data.
//
// A supervision_plan holds no threads and no actors. The actor layer tells it that a child ended
// (on_child_exit) and carries out the returned restart_decision: stop these children, in this
// order; start these, in this order; forget these; or halt and escalate. Because the logic is a
// value-in, value-out state machine, tests drive it step by step and compare every decision with
// a reference model. The contract is written down in docs/design/supervision.md; in short:
//
// Children
//   Identified by index 0..n-1 in declaration order. Each has a name (unique), a restart_type and
//   the indices of the children it depends on. create() rejects an out-of-range or self
//   dependency, a duplicate name, or a dependency cycle (usage_error; a cycle's message names it,
//   "spindle: supervisor dependency cycle: db -> cache -> db", each child depending on the next).
//
// Orders
//   start_order(): dependencies first; among children whose dependencies have all started, the
//   smallest index goes first (Kahn's algorithm with a min-heap). stop_order(): its exact reverse.
//   The plan assumes the supervisor has started every child in start_order() when it is created.
//
// When child c ends (normal or crashed; `shutdown` is the supervisor's own doing and changes
// nothing)
//   - c is `never`, or `on_crash_only` and ended normally: c is removed. Nothing else happens and
//     the restart limit is not consulted. Children depending on c keep running.
//   - otherwise a restart: affected = the pattern's set for c (one: c; downstream: c and every
//     child that transitively depends on it; upstream: c and every child it transitively depends
//     on; all: every child), computed on the declared graph, then restricted to present children.
//     If the restart limit allows one more restart: stop = affected children other than c, in
//     stop order; start = affected children not of type `never`, in start order; removed = the
//     stopped `never` children (in stop order). Otherwise: escalate, stop = every running child
//     in stop order, start empty, and the plan is halted (further on_child_exit: usage_error).
//
// Restart limit
//   unlimited(); at_most(n): at most n restarts over the plan's lifetime; at_most(n, window): a
//   restart at time t (read from the injected spindle::clock) is allowed when fewer than n
//   restarts were performed at times t' with t - t' < window. So restarts exactly `window` apart
//   never count against each other. One restart counts once, whatever the number of children it
//   restarts; an escalation is not a restart.
//
// Costs: create is O(n log n + edges) plus the cycle search, O(n + edges). on_child_exit is
// O(n + edges) (one graph walk and one pass over the stop or start order).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/core/clock.hpp"

namespace spindle {

// When a child that ended is started again (Erlang: permanent, transient, temporary).
enum class restart_type : std::uint8_t {
  always,         // restarted whatever the outcome
  on_crash_only,  // restarted after a crash, removed after a normal end; restarted when the
                  // supervisor stopped it as part of a sibling's restart
  never,          // removed when it ends, or when the supervisor stops it for a restart
};

// Which children a restart involves, given the child that ended.
enum class restart_pattern : std::uint8_t {
  one,         // only the child that ended
  downstream,  // it and every child that transitively depends on it
  upstream,    // it and every child it transitively depends on
  all,         // every present child
};

// How a child ended.
enum class child_outcome : std::uint8_t {
  normal,    // it finished its work
  crashed,   // it failed (an exception, a kill by someone other than the supervisor)
  shutdown,  // the supervisor stopped it: never triggers anything
};

// One child of a supervisor, in declaration order (its index is its position).
struct child_spec {
  std::string name{};
  restart_type restart = restart_type::always;
  std::vector<std::size_t> dependencies;  // indices of the children it needs started first
};

// How many restarts a supervisor performs before it gives up and escalates.
class restart_limit {
 public:
  static restart_limit unlimited() noexcept { return restart_limit(); }
  // At most `restarts` restarts over the supervisor's lifetime (0: the first crash escalates).
  static restart_limit at_most(std::size_t restarts) noexcept;
  // At most `restarts` restarts within any sliding window of duration `window` (must be > 0).
  static restart_limit at_most(std::size_t restarts, std::chrono::nanoseconds window);

  bool is_unlimited() const noexcept { return unlimited_; }
  // The number of restarts allowed (per window if there is one); meaningless when unlimited.
  std::size_t restarts() const noexcept { return restarts_; }
  // The sliding window, or nullopt when the limit covers the supervisor's whole lifetime.
  std::optional<std::chrono::nanoseconds> window() const noexcept { return window_; }

  friend bool operator==(const restart_limit&, const restart_limit&) = default;

 private:
  restart_limit() = default;
  bool unlimited_ = true;
  std::size_t restarts_ = 0;
  std::optional<std::chrono::nanoseconds> window_;
};

// A restart_limit applied over time: the restarts it still allows. Shared by supervision_plan
// and dynamic_supervisor (dynamic_supervisor.hpp), and copied into a supervisor's diagnostics
// record so snapshots report the current intensity. Single-threaded; copyable (the clock is
// referenced, and must outlive every copy).
class restart_intensity {
 public:
  restart_intensity(restart_limit limit, spindle::clock& clock) noexcept
      : limit_(limit), clock_(&clock) {}

  // Whether the limit allows one more restart now (the window's old restarts are forgotten);
  // `now` is set when the clock was read (windowed limits only). Then record(now) counts it.
  bool allowed(std::optional<clock_time>& now);
  void record(std::optional<clock_time> now);
  // Restarts recorded so far.
  std::size_t total() const noexcept { return total_; }
  // The current intensity: restarts recorded at times t with now - t < window (every restart
  // when the limit has no window).
  std::size_t within_window(clock_time now) const noexcept;
  const restart_limit& limit() const noexcept { return limit_; }
  spindle::clock& clock() const noexcept { return *clock_; }

 private:
  restart_limit limit_;
  spindle::clock* clock_;
  std::deque<clock_time> recent_;  // windowed limits only: restart times within the window
  std::size_t total_ = 0;
};

// What the supervisor must do after a child ended. Carried out in this order: stop `stop` (in
// the order given), forget `removed`, start `start` (in the order given); or, when `escalate`,
// stop `stop`, halt and report the failure to its own supervisor.
struct restart_decision {
  std::vector<std::size_t> stop;     // running children to stop, in stop order
  std::vector<std::size_t> start;    // children to start, in start order (the one that ended too)
  std::vector<std::size_t> removed;  // children that leave the supervisor for good
  bool escalate = false;

  friend bool operator==(const restart_decision&, const restart_decision&) = default;
};

// The decision logic of one supervisor, and the state it needs (which children are present and
// running, the restart history). Single-threaded: the owner serialises calls.
class supervision_plan {
 public:
  // Validates the children (usage_error, see above) and computes the orders. `clock` is read on
  // restarts, and must outlive the plan.
  static supervision_plan create(std::vector<child_spec> children, restart_pattern pattern,
                                 restart_limit limit, spindle::clock& clock);

  std::size_t child_count() const noexcept { return children_.size(); }
  const child_spec& child(std::size_t index) const;  // usage_error when out of range
  std::optional<std::size_t> index_of(std::string_view name) const noexcept;
  restart_pattern pattern() const noexcept { return pattern_; }
  const restart_limit& limit() const noexcept { return intensity_.limit(); }

  // Every child, dependencies first (ties: smallest index first); and the exact reverse.
  const std::vector<std::size_t>& start_order() const noexcept { return start_order_; }
  const std::vector<std::size_t>& stop_order() const noexcept { return stop_order_; }

  // Child `child` ended with `outcome`: the decision, with the state updated as if it had been
  // carried out. usage_error when the plan is halted, `child` is out of range, or (for normal
  // and crashed) `child` is not running. `shutdown` returns an empty decision and changes nothing.
  restart_decision on_child_exit(std::size_t child, child_outcome outcome);

  // Present: not removed. Running: present and not stopped by an escalation (usage_error when
  // out of range). Between calls every present child runs, until the plan halts.
  bool is_present(std::size_t child) const;
  bool is_running(std::size_t child) const;
  // Restarts performed so far (escalations excluded).
  std::size_t restart_count() const noexcept { return intensity_.total(); }
  // The restart history the limit is checked against (diagnostics: the current intensity).
  const restart_intensity& intensity() const noexcept { return intensity_; }
  // True once a decision escalated.
  bool halted() const noexcept { return halted_; }

 private:
  supervision_plan(std::vector<child_spec> children, restart_pattern pattern, restart_limit limit,
                   spindle::clock& clock);

  void check_index(std::size_t child, const char* operation) const;
  // The pattern's set for `child` on the declared graph, as a flag per child.
  std::vector<bool> pattern_set(std::size_t child) const;

  std::vector<child_spec> children_;
  std::vector<std::vector<std::size_t>> dependents_;  // dependents_[i]: children depending on i
  restart_pattern pattern_;
  restart_intensity intensity_;
  std::vector<std::size_t> start_order_;
  std::vector<std::size_t> stop_order_;
  std::vector<bool> present_;
  std::vector<bool> running_;
  bool halted_ = false;
};

}  // namespace spindle
