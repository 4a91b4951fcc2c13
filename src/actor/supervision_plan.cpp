// Supervision plans. Design and contract: include/spindle/actor/supervision_plan.hpp and
// docs/design/supervision.md.
#include "spindle/actor/supervision_plan.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "spindle/core/errors.hpp"

namespace spindle {
namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// Rejects out-of-range and self dependencies, and duplicate names.
void check_children(const std::vector<child_spec>& children) {
  const std::size_t count = children.size();
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t dependency : children[i].dependencies) {
      if (dependency >= count) {
        throw usage_error("spindle: supervisor child " + quoted(children[i].name) +
                          " depends on child " + std::to_string(dependency) + ", but there are " +
                          std::to_string(count) + " children");
      }
      if (dependency == i) {
        throw usage_error("spindle: supervisor child " + quoted(children[i].name) +
                          " depends on itself");
      }
    }
  }
  std::unordered_map<std::string_view, std::size_t> first_with_name;
  for (std::size_t i = 0; i < count; ++i) {
    const auto [where, inserted] = first_with_name.emplace(children[i].name, i);
    if (!inserted) {
      throw usage_error("spindle: supervisor children " + std::to_string(where->second) + " and " +
                        std::to_string(i) + " are both named " + quoted(children[i].name));
    }
  }
}

// Children of a graph known to hold a cycle: the first cycle a depth-first search meets, visiting
// roots by index and dependencies in declared order, as "a -> b -> ... -> a" (each depends on the
// next). Iterative, so that long dependency chains cannot overflow the stack.
std::string describe_cycle(const std::vector<child_spec>& children) {
  enum class mark : std::uint8_t { unvisited, on_path, done };
  std::vector<mark> marks(children.size(), mark::unvisited);
  // The current path: (child, index of the next dependency to follow).
  std::vector<std::pair<std::size_t, std::size_t>> path;
  for (std::size_t root = 0; root < children.size(); ++root) {
    if (marks[root] != mark::unvisited) continue;
    path.emplace_back(root, 0);
    marks[root] = mark::on_path;
    while (!path.empty()) {
      auto& [child, next] = path.back();
      const auto& dependencies = children[child].dependencies;
      if (next == dependencies.size()) {
        marks[child] = mark::done;
        path.pop_back();
        continue;
      }
      const std::size_t dependency = dependencies[next++];
      if (marks[dependency] == mark::on_path) {
        std::string text = "spindle: supervisor dependency cycle: ";
        auto first = std::find_if(path.begin(), path.end(),
                                  [&](const auto& step) { return step.first == dependency; });
        for (auto step = first; step != path.end(); ++step) {
          text += children[step->first].name + " -> ";
        }
        return text + children[dependency].name;
      }
      if (marks[dependency] == mark::unvisited) {
        marks[dependency] = mark::on_path;
        path.emplace_back(dependency, 0);
      }
    }
  }
  return "spindle: supervisor dependency cycle";  // not reached: the caller saw a cycle
}

}  // namespace

// --- restart_limit ---------------------------------------------------------------------------

restart_limit restart_limit::at_most(std::size_t restarts) noexcept {
  restart_limit limit;
  limit.unlimited_ = false;
  limit.restarts_ = restarts;
  return limit;
}

restart_limit restart_limit::at_most(std::size_t restarts, std::chrono::nanoseconds window) {
  if (window <= std::chrono::nanoseconds::zero()) {
    throw usage_error("spindle: restart_limit::at_most: the window must be positive");
  }
  restart_limit limit = at_most(restarts);
  limit.window_ = window;
  return limit;
}

// --- restart_intensity -----------------------------------------------------------------------

bool restart_intensity::allowed(std::optional<clock_time>& now) {
  if (limit_.is_unlimited()) return true;
  const auto window = limit_.window();
  if (!window) return total_ < limit_.restarts();
  now = clock_->now();
  // Forget restarts that left the window: t - t' >= window.
  while (!recent_.empty() && *now - recent_.front() >= *window) recent_.pop_front();
  return recent_.size() < limit_.restarts();
}

void restart_intensity::record(std::optional<clock_time> now) {
  if (now) recent_.push_back(*now);
  ++total_;
}

std::size_t restart_intensity::within_window(clock_time now) const noexcept {
  const auto window = limit_.window();
  if (!window) return total_;
  return std::size_t(std::count_if(recent_.begin(), recent_.end(),
                                   [&](clock_time t) { return now - t < *window; }));
}

// --- supervision_plan: construction ----------------------------------------------------------

supervision_plan supervision_plan::create(std::vector<child_spec> children, restart_pattern pattern,
                                          restart_limit limit, spindle::clock& clock) {
  check_children(children);
  return supervision_plan(std::move(children), pattern, limit, clock);
}

supervision_plan::supervision_plan(std::vector<child_spec> children, restart_pattern pattern,
                                   restart_limit limit, spindle::clock& clock)
    : children_(std::move(children)),
      dependents_(children_.size()),
      pattern_(pattern),
      intensity_(limit, clock),
      present_(children_.size(), true),
      running_(children_.size(), true) {
  const std::size_t count = children_.size();
  // Edges counted once even when a dependency is listed twice.
  std::vector<std::size_t> waiting_for(count, 0);  // dependencies not started yet
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<std::size_t> dependencies = children_[i].dependencies;
    std::sort(dependencies.begin(), dependencies.end());
    dependencies.erase(std::unique(dependencies.begin(), dependencies.end()), dependencies.end());
    for (std::size_t dependency : dependencies) dependents_[dependency].push_back(i);
    waiting_for[i] = dependencies.size();
  }
  // Kahn's algorithm; the min-heap makes the smallest ready index go first.
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < count; ++i) {
    if (waiting_for[i] == 0) ready.push(i);
  }
  start_order_.reserve(count);
  while (!ready.empty()) {
    const std::size_t next = ready.top();
    ready.pop();
    start_order_.push_back(next);
    for (std::size_t dependent : dependents_[next]) {
      if (--waiting_for[dependent] == 0) ready.push(dependent);
    }
  }
  if (start_order_.size() != count) throw usage_error(describe_cycle(children_));
  stop_order_.assign(start_order_.rbegin(), start_order_.rend());
}

// --- supervision_plan: queries ---------------------------------------------------------------

void supervision_plan::check_index(std::size_t child, const char* operation) const {
  if (child >= children_.size()) {
    throw usage_error(std::string("spindle: supervision_plan::") + operation + ": no child " +
                      std::to_string(child) + " (there are " + std::to_string(children_.size()) +
                      ")");
  }
}

const child_spec& supervision_plan::child(std::size_t index) const {
  check_index(index, "child");
  return children_[index];
}

std::optional<std::size_t> supervision_plan::index_of(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].name == name) return i;
  }
  return std::nullopt;
}

bool supervision_plan::is_present(std::size_t child) const {
  check_index(child, "is_present");
  return present_[child];
}

bool supervision_plan::is_running(std::size_t child) const {
  check_index(child, "is_running");
  return running_[child];
}

// --- supervision_plan: decisions -------------------------------------------------------------

std::vector<bool> supervision_plan::pattern_set(std::size_t child) const {
  const std::size_t count = children_.size();
  if (pattern_ == restart_pattern::all) return std::vector<bool>(count, true);
  std::vector<bool> in_set(count, false);
  in_set[child] = true;
  if (pattern_ == restart_pattern::one) return in_set;
  // Walk dependents (downstream) or dependencies (upstream) from `child`.
  std::vector<std::size_t> to_visit{child};
  while (!to_visit.empty()) {
    const std::size_t at = to_visit.back();
    to_visit.pop_back();
    const auto& neighbours =
        pattern_ == restart_pattern::downstream ? dependents_[at] : children_[at].dependencies;
    for (std::size_t neighbour : neighbours) {
      if (!in_set[neighbour]) {
        in_set[neighbour] = true;
        to_visit.push_back(neighbour);
      }
    }
  }
  return in_set;
}

restart_decision supervision_plan::on_child_exit(std::size_t child, child_outcome outcome) {
  if (halted_) {
    throw usage_error(
        "spindle: supervision_plan::on_child_exit: the supervisor halted (escalated)");
  }
  check_index(child, "on_child_exit");
  restart_decision decision;
  if (outcome == child_outcome::shutdown) return decision;
  if (!running_[child]) {
    throw usage_error("spindle: supervision_plan::on_child_exit: child " +
                      quoted(children_[child].name) + " is not running");
  }
  const restart_type type = children_[child].restart;
  if (type == restart_type::never ||
      (type == restart_type::on_crash_only && outcome == child_outcome::normal)) {
    decision.removed.push_back(child);
    present_[child] = false;
    running_[child] = false;
    return decision;
  }

  std::optional<clock_time> now;
  if (!intensity_.allowed(now)) {
    for (std::size_t i : stop_order_) {
      if (running_[i] && i != child) decision.stop.push_back(i);
    }
    decision.escalate = true;
    running_.assign(running_.size(), false);
    halted_ = true;
    return decision;
  }

  std::vector<bool> affected = pattern_set(child);
  for (std::size_t i = 0; i < affected.size(); ++i) affected[i] = affected[i] && present_[i];
  for (std::size_t i : stop_order_) {
    if (affected[i] && i != child && running_[i]) {
      decision.stop.push_back(i);
      if (children_[i].restart == restart_type::never) decision.removed.push_back(i);
    }
  }
  for (std::size_t i : start_order_) {
    if (affected[i] && children_[i].restart != restart_type::never) decision.start.push_back(i);
  }
  intensity_.record(now);  // the last step that may throw (allocation): state changes follow
  for (std::size_t i : decision.removed) {
    present_[i] = false;
    running_[i] = false;
  }
  return decision;
}

}  // namespace spindle
