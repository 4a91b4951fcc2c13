// Supervisors (A6): an actor that starts children in dependency order, watches them, and
// restarts them after crashes following a pattern and a limit; beyond the limit it stops them
// all and escalates (it crashes, so its own supervisor sees it). The decisions come from
// supervision_plan (pure logic, supervision_plan.hpp); this file carries them out with actors.
//
//   spindle::supervisor_spec spec;
//   spec.pattern = spindle::restart_pattern::downstream;
//   spec.limit = spindle::restart_limit::at_most(3, std::chrono::seconds(5));
//   spec.children.push_back({.name = "db", .start = [&](const spindle::spawn_options& o) {
//                              return spindle::actor_handle(spindle::spawn_actor<db>(rt, o)); }});
//   spec.children.push_back({.name = "cache", .depends_on = {"db"}, .start = ...});
//   auto sup = spindle::spawn_supervisor(rt, std::move(spec));   // usage_error on a cycle
//
// How it carries out a decision: the actions run one after the other, asynchronously. A stop
// sends the child a stop request (exit kind shutdown) and waits for its down notification
// before the next action, so dependents are gone before what they depend on is stopped, and a
// restarted child starts only after everything it depends on has started. Child exits that
// arrive while actions are pending are queued and decided afterwards, in arrival order. A child
// whose factory throws counts as a crash of that child; so does one whose factory returns no
// actor, or an actor that is already another running child of this supervisor (one actor is
// one child: tracked twice, a stop would wait forever; a line on stderr names both children).
//
// Stopping (issue 14, item 7; Erlang's supervisor shutdown): a stop request to the supervisor
// (stop(), or its own supervisor stopping it) is not carried out at once: the supervisor stops
// its running children in reverse start order (the plan's stop order), one at a time, each
// stop sent once the child before is down, then halts with the reason it was asked for. A
// child gets `stop_timeout` to be down after its stop request; then it is killed (so one child
// that never stops cannot hang the supervisor, nor whoever waits for it; the deadline is on the
// supervisor's one timer entry, no task waits). Giving up (the
// restart limit reached) stops the children the same way before the supervisor crashes with
// supervisor_escalation, and is reported first through the actor system's supervisor failure
// hook (the default writes a line to stderr; actor_system::set_supervisor_failure_hook), so a
// top-level supervisor does not halt silently; a task can await any actor's end with
// monitor_actor (actor.hpp). kill() on a supervisor halts it at once; its children are then
// sent their stop requests all together. Runtime shutdown halts supervision trees in the same
// order, synchronously (actor_scheduler.hpp, "Shutdown").
//
// Placement per child: any executor, one executor (the child is pinned there), a NUMA group,
// or a core kind (big/little). A group or kind names the executors whose placement
// (core/topology.hpp) is on it: the child starts on one of them and migrates only among them.
// When the supervisor is configured, every placement must name at least one executor of the
// runtime (usage_error otherwise): on a multi-node or hybrid machine that needs the runtime's
// affinity policy to bind executors; an unbound executor counts as on the machine's only node
// or kind when there is just one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "spindle/actor/actor.hpp"
#include "spindle/actor/supervision_plan.hpp"

namespace spindle {

struct child_placement {
  enum class kind : std::uint8_t { any, executor, numa_group, core_kind };
  using core_kind_value = core::core_kind;
  kind where = kind::any;
  std::uint32_t value = 0;

  static child_placement any_executor() noexcept { return {}; }
  static child_placement pinned_to(std::uint32_t executor) noexcept {
    return {kind::executor, executor};
  }
  static child_placement in_numa_group(std::uint32_t group) noexcept {
    return {kind::numa_group, group};
  }
  static child_placement on_core_kind(core_kind_value k) noexcept {
    return {kind::core_kind, std::uint32_t(k)};
  }
};

struct supervised_child {
  std::string name{};
  restart_type restart = restart_type::always;
  std::vector<std::string> depends_on{};  // names of children that must be started first
  child_placement placement{};
  // How long the child may take to be down after its stop request before it is killed (a
  // stop request is handled after the messages queued before it). Zero: killed at once. A
  // child that is a supervisor stops its own children first: give it the sum of theirs (once
  // killed, it sends the rest of its children their stop requests all together).
  // milliseconds::max(): never killed (the time module saturates it, sleep.hpp).
  std::chrono::milliseconds stop_timeout{5000};
  // Spawns the child with these options (placement resolved) and returns its handle.
  std::function<actor_handle(const spawn_options&)> start{};
};

struct supervisor_spec {
  std::vector<supervised_child> children{};
  restart_pattern pattern = restart_pattern::one;
  restart_limit limit = restart_limit::at_most(3, std::chrono::seconds(5));
};

// What a supervisor answers: the current handle of a child by name (empty while it is not
// running, or for an unknown name).
struct supervisor_query {
  std::string child;
  reply_to<actor_handle> reply;
};
// What a supervisor sends itself when a child's factory failed: that child's crash, decided in a
// later turn (so a factory that always fails cannot hold its executor).
struct supervisor_child_start_failed {
  std::size_t child;
};
// What a supervisor's stop timer sends it: the stop it awaits may have timed out (its one timer
// entry fired; supervisor_parts.hpp).
struct supervisor_stop_timed_out {};
using supervisor_message =
    std::variant<supervisor_query, supervisor_child_start_failed, supervisor_stop_timed_out>;
using supervisor_ref = actor_ref<supervisor_message>;

// The exception a supervisor crashes with when it gives up (its supervisor sees it).
class supervisor_escalation : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Validates `spec` (usage_error for unknown or cyclic dependencies, duplicate names, a missing
// factory, a placement the machine cannot honour) before anything is spawned; then spawns the
// supervisor, which starts the children in dependency order.
supervisor_ref spawn_supervisor(runtime& rt, supervisor_spec spec,
                                const spawn_options& options = {});
// The same from a worker (a handler or a task): the supervisor lives on the calling executor.
// Nested supervision: a child's factory may call this.
supervisor_ref spawn_supervisor_here(supervisor_spec spec, const spawn_options& options = {});

// The executors a placement names (any for `executor`: that placement also sets the executor).
inline core::executor_domain domain_of(const child_placement& placement) noexcept {
  switch (placement.where) {
    case child_placement::kind::numa_group:
      return core::executor_domain::on_numa_node(placement.value);
    case child_placement::kind::core_kind:
      return {core::executor_domain::kind::core_kind, placement.value};
    default: return core::executor_domain::any();
  }
}

}  // namespace spindle
