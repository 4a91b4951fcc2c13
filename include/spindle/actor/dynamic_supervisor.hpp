// Dynamic supervisors (issue 17; Erlang's DynamicSupervisor, simple_one_for_one): a supervisor
// with no children at first, to which children are added and from which they are removed while
// it runs, each restarted on its own (pattern `one`) after a back-off.
//
//   spindle::dynamic_supervisor_spec spec;
//   spec.limit = spindle::restart_limit::at_most(5, std::chrono::seconds(10));
//   spec.max_children = 1000;
//   spindle::dynamic_supervisor sup = spindle::spawn_dynamic_supervisor(rt, spec);
//   spindle::dynamic_child_spec child{.name = "conn",
//       .restart = spindle::restart_type::on_crash_only,
//       .start = [&](const spindle::spawn_options& o) {
//                  return spindle::actor_handle(spindle::spawn_actor<connection>(rt, o, fd)); }};
//   spindle::started_child c = co_await sup.start_child(child);   // or .blocking_receive()
//   if (c.error == spindle::start_child_error::none) { ... c.id, c.actor ... }
//   spindle::terminate_result t = co_await sup.terminate_child(c.id);
//   std::vector<spindle::dynamic_child_info> now = co_await sup.which_children();
//   sup.ref().stop();   // stops every child (bounded by their stop timeouts), then halts
//
// Who takes part
//   - The supervisor actor (dynamic_supervisor.cpp): owns every child's record, alone decides;
//     everything below happens in its handlers, one at a time.
//   - Callers on any thread or task: start_child, terminate_child, which_children and
//     count_children are messages to it; each answer is a oneshot (co_await it in a task,
//     blocking_receive() on a plain thread). A question the supervisor never answers (it halted
//     with the question queued, or before it was sent) is answered by the question's own
//     destructor: start_child_error::supervisor_gone, terminate_result::supervisor_gone, no
//     children. So every start_child call gets exactly one answer.
//   - The children: actors the factories spawn; the supervisor monitors each incarnation.
//   - One timer entry (on the timer wheel of the executor the supervisor ran on when it armed
//     it) for all of the supervisor's deadlines: back-off restarts and stop timeouts. A min-heap
//     of deadlines sits behind it; when it fires it sends the supervisor a message, which then
//     handles whatever is due and re-arms for the next. No thread sleeps and no task waits per
//     child: a thousand children in back-off cost a heap of a thousand entries and one timer.
//
// A child's states
//   running --(exit, restarted)--> backing_off --(deadline)--> running (a new incarnation)
//   running / backing_off --(terminate_child, supervisor stop)--> stopping --(down)--> gone
//   running --(exit, not restarted / limit reached)--> gone
//   The child's id (dynamic_child_id) is stable across its incarnations; its actor changes.
//   Every started child ends exactly one way, as seen by which_children and the counters in
//   dynamic_supervisor_stats: still listed (running or backing off), terminated (by
//   terminate_child or the supervisor's stop), or ended (its restart type said not to restart it,
//   or the limit was reached: given up).
//
// Restart types (restart_type, as the static supervisor): always (permanent) is restarted
// whatever the outcome; on_crash_only (transient) after a crash, not after a normal end or a
// shutdown someone else asked for; never (temporary) never.
//
// Back-off (restart_backoff): the n-th consecutive restart of a child waits
// min(initial * factor^(n-1), max); a child that stayed up at least `reset_after` before it
// ended starts the count again. A child whose factory throws (or returns no actor) during a
// restart counts as a crash of that child at that time. A crash-looping child therefore costs
// its supervisor one message per attempt and no executor time in between.
//
// Restart intensity: restart_limit as the static supervisor (supervision.md, "Restart limit"),
// one restart counted per child restart, checked when the child ends (not when the back-off
// elapses). Beyond it the supervisor gives up: it stops every child (as a stop request does),
// reports through the actor system's supervisor failure hook, and crashes with
// supervisor_escalation (its own supervisor sees it). Snapshots list it in "supervision_tree"
// with kind "dynamic", its children with their restart counts, and its intensity (restarts,
// restarts_in_window, max_restarts, window_ms).
//
// Stopping: a stop request (ref().stop(), or its own supervisor stopping it) sends every running
// child its stop request at once and halts when all are down. Parallel, not in reverse start
// order: dynamic children are independent of each other (no dependency graph; a child that
// needs another belongs under a static supervisor), and in parallel the stop takes the longest
// child's stop_timeout rather than their sum. Each child has its own stop_timeout, after which it
// is killed; so a stop request is answered within max(stop_timeout) plus the kills' delivery.
// Start requests that arrive meanwhile are refused (supervisor_gone). kill() on the supervisor
// halts it at once; its children are then sent their stop requests. Runtime shutdown halts its
// children newest first, then it (actor_scheduler.hpp, "Shutdown").
//
// Costs: start_child is one message and one spawn; a child's exit O(log children) (the heap);
// which_children O(children). Memory: one record per child (its spec, factory included).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "spindle/actor/actor.hpp"
#include "spindle/actor/supervisor.hpp"
#include "spindle/sync/oneshot.hpp"

namespace spindle {

// The delays between a child's consecutive restarts. The n-th (n >= 1) waits
// min(initial * factor^(n-1), max). Zero initial: restarts at once (the next timer check).
struct restart_backoff {
  std::chrono::nanoseconds initial = std::chrono::milliseconds(10);
  double factor = 2.0;  // at least 1
  std::chrono::nanoseconds max = std::chrono::seconds(5);
  // A child that ran at least this long before it ended starts its count again (n = 1).
  std::chrono::nanoseconds reset_after = std::chrono::seconds(10);

  // The delay before restart number `consecutive` (1 for the first); saturates at max.
  std::chrono::nanoseconds delay(std::uint32_t consecutive) const noexcept;
  static restart_backoff none() noexcept {
    return {std::chrono::nanoseconds(0), 1.0, std::chrono::nanoseconds(0)};
  }
};

// One child to start.
struct dynamic_child_spec {
  std::string name{};  // in diagnostics; need not be unique
  restart_type restart = restart_type::always;
  child_placement placement{};
  // How long the child may take to be down after its stop request before it is killed (as
  // supervised_child::stop_timeout). Zero: killed at once; milliseconds::max(): never killed.
  std::chrono::milliseconds stop_timeout{5000};
  // Spawns the child with these options and returns its handle. Called once per incarnation,
  // on the supervisor's executor: it must not block.
  std::function<actor_handle(const spawn_options&)> start{};
};

// A child spec whose factory takes arguments given at each start (OTP's simple_one_for_one
// child spec, start_child(Sup, Args)):
//   spindle::dynamic_child_template<int> conn{.name = "conn",
//       .start = [&](const spindle::spawn_options& o, const int& fd) { ... }};
//   sup.start_child(conn, fd);
template <class... Args>
struct dynamic_child_template {
  std::string name{};
  restart_type restart = restart_type::always;
  child_placement placement{};
  std::chrono::milliseconds stop_timeout{5000};
  std::function<actor_handle(const spawn_options&, const Args&...)> start{};

  // The spec of one child: the factory with these arguments bound (copied per restart).
  dynamic_child_spec with(Args... args) const {
    return {name, restart, placement, stop_timeout,
            [start = start, ... bound = std::move(args)](const spawn_options& options) {
              return start(options, bound...);
            }};
  }
};

struct dynamic_supervisor_spec {
  restart_limit limit = restart_limit::at_most(3, std::chrono::seconds(5));
  restart_backoff backoff{};
  // Children listed at once (backing off or stopping included); 0: no limit.
  std::size_t max_children = 0;
};

using dynamic_child_id = std::uint64_t;  // unique within its supervisor, from 1

enum class start_child_error : std::uint8_t {
  none,
  supervisor_gone,   // halted, halting, or stopping its children
  at_max_children,   // dynamic_supervisor_spec::max_children children listed
  start_failed,      // the factory threw or returned no actor (nothing is listed; no restart)
};
struct started_child {
  start_child_error error = start_child_error::supervisor_gone;
  dynamic_child_id id = 0;  // 0 unless started
  actor_handle actor{};     // its first incarnation
};

enum class terminate_result : std::uint8_t {
  stopped,          // it was down before its stop timeout (or was backing off: never restarted)
  killed,           // it was killed after its stop timeout
  not_found,        // no such child (never started, or already gone)
  supervisor_gone,  // the supervisor halted first (the child was sent its stop request)
};

struct dynamic_child_info {
  dynamic_child_id id = 0;
  std::string name;
  actor_handle actor;          // the running incarnation; empty while backing off
  std::uint32_t restarts = 0;  // incarnations started after the first
  enum class phase : std::uint8_t { running, backing_off, stopping } state = phase::running;
};

// Counts since the supervisor started (answers of which_children's sibling, stats()).
struct dynamic_supervisor_stats {
  std::uint64_t started = 0;     // start_child calls that started a child
  std::uint64_t restarts = 0;    // incarnations started again
  std::uint64_t terminated = 0;  // removed by terminate_child or the supervisor's stop
  std::uint64_t ended = 0;       // not restarted: its restart type, or the limit reached
  std::uint64_t listed = 0;      // listed now (running, backing off or stopping)
};

namespace dynamic_supervisor_detail {
// A reply that answers `fallback` if it is destroyed unanswered (the supervisor halted).
template <class T>
class answer {
 public:
  answer(oneshot_sender<T> sender, T fallback)
      : sender_(std::move(sender)), fallback_(std::move(fallback)) {}
  answer(answer&&) noexcept = default;
  answer& operator=(answer&&) noexcept = default;
  ~answer() {
    if (!sender_.valid()) return;
    try {
      sender_.send(std::move(fallback_));
    } catch (...) {
      // Out of memory: the receiver sees a dropped sender (channel_closed) instead.
    }
  }
  void operator()(T value) { sender_.send(std::move(value)); }

 private:
  oneshot_sender<T> sender_;
  T fallback_;
};

struct start_request {
  dynamic_child_spec spec;
  answer<started_child> reply;
};
struct terminate_request {
  dynamic_child_id id;
  answer<terminate_result> reply;
};
struct list_request {
  answer<std::vector<dynamic_child_info>> reply;
};
struct stats_request {
  answer<dynamic_supervisor_stats> reply;
};
struct timer_due {};  // from the supervisor's timer: something may be due
}  // namespace dynamic_supervisor_detail

using dynamic_supervisor_message =
    std::variant<dynamic_supervisor_detail::start_request,
                 dynamic_supervisor_detail::terminate_request,
                 dynamic_supervisor_detail::list_request, dynamic_supervisor_detail::stats_request,
                 dynamic_supervisor_detail::timer_due>;

// A handle on a dynamic supervisor; copyable; every member may be called from any thread.
class dynamic_supervisor {
 public:
  dynamic_supervisor() noexcept = default;
  explicit dynamic_supervisor(actor_ref<dynamic_supervisor_message> ref) noexcept
      : ref_(std::move(ref)) {}

  // Starts a child (see the header comment). usage_error at once for a spec without a factory.
  oneshot_receiver<started_child> start_child(dynamic_child_spec spec) const;
  // The template-factory form (simple_one_for_one): one template, started with arguments.
  template <class... Args>
  oneshot_receiver<started_child> start_child(const dynamic_child_template<Args...>& child,
                                              Args... args) const {
    return start_child(child.with(std::move(args)...));
  }

  // Stop request, then kill after the child's stop_timeout; answered once the child is down.
  oneshot_receiver<terminate_result> terminate_child(dynamic_child_id id) const;
  // The children listed now, oldest first.
  oneshot_receiver<std::vector<dynamic_child_info>> which_children() const;
  oneshot_receiver<dynamic_supervisor_stats> stats() const;

  const actor_ref<dynamic_supervisor_message>& ref() const noexcept { return ref_; }
  actor_id id() const { return ref_.id(); }
  explicit operator bool() const noexcept { return bool(ref_); }

 private:
  actor_ref<dynamic_supervisor_message> ref_;
};

// Validates `spec` (usage_error: a backoff factor below 1, negative delays) and spawns the
// supervisor, with no children.
dynamic_supervisor spawn_dynamic_supervisor(runtime& rt, dynamic_supervisor_spec spec,
                                            const spawn_options& options = {});
// The same from a worker (a handler, a task, a static supervisor's child factory).
dynamic_supervisor spawn_dynamic_supervisor_here(dynamic_supervisor_spec spec,
                                                 const spawn_options& options = {});

}  // namespace spindle
