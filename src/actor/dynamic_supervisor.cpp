// The dynamic supervisor actor (dynamic_supervisor.hpp has the design: states, timer, stop).
#include "spindle/actor/dynamic_supervisor.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>
#include <utility>

#include "spindle/core/runtime_core.hpp"
#include "spindle/core/timer_wheel.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/time/sleep.hpp"
#include "supervisor_parts.hpp"

namespace spindle {

std::chrono::nanoseconds restart_backoff::delay(std::uint32_t consecutive) const noexcept {
  if (initial <= std::chrono::nanoseconds::zero()) return std::chrono::nanoseconds::zero();
  double delay_ns = double(initial.count());
  const double max_ns = double(max.count());
  for (std::uint32_t n = 1; n < consecutive && delay_ns < max_ns; ++n) delay_ns *= factor;
  if (delay_ns >= max_ns) return max;
  return std::chrono::nanoseconds(std::int64_t(delay_ns));
}

namespace {

using namespace dynamic_supervisor_detail;
using context = actor_context<dynamic_supervisor_message>;

using supervisor_alarm =
    supervisor_parts::supervisor_alarm<dynamic_supervisor_message, timer_due>;

class dynamic_supervisor_behaviour {
 public:
  using message_type = dynamic_supervisor_message;

  explicit dynamic_supervisor_behaviour(dynamic_supervisor_spec spec, spindle::clock& clock)
      : spec_(std::move(spec)), clock_(clock), intensity_(spec_.limit, clock) {}
  dynamic_supervisor_behaviour(const dynamic_supervisor_behaviour&) = delete;
  dynamic_supervisor_behaviour& operator=(const dynamic_supervisor_behaviour&) = delete;
  ~dynamic_supervisor_behaviour() {
    if (system_ != nullptr) system_->remove_supervisor_record(&record_);
  }

  void on_start(context& ctx) {
    alarm_.emplace(*ctx.self().cell());
    record_.id = ctx.id();
    record_.dynamic = true;
    record_.intensity = intensity_;
    system_ = current_actor_system();
    if (system_ != nullptr) system_->add_supervisor_record(&record_);
  }

  void receive(dynamic_supervisor_message& message, context& ctx) {
    std::visit([&](auto& m) { handle(m, ctx); }, message);
  }

  void on_down(const down_message& down, context& ctx) {
    auto found = child_of_.find(down.source);
    // Not a child (an earlier incarnation cannot be: each one's monitor fires once).
    if (found == child_of_.end()) return;
    const dynamic_child_id id = found->second;
    child_of_.erase(found);
    child_record& child = children_.at(id);
    child.actor = actor_handle{};
    if (child.state == dynamic_child_info::phase::stopping) {
      finish_stop(id, ctx);
      return;
    }
    // An exit of its own. Graceful ends (normal, or a shutdown someone else asked for) are
    // normal outcomes, as for the static supervisor.
    const bool graceful =
        down.reason.kind == exit_kind::normal || down.reason.kind == exit_kind::shutdown;
    child_ended(id, graceful, ctx);
  }

  // A stop request: every child is sent its stop request at once; halt when all are down.
  void on_stop_request(const exit_reason& reason, context& ctx) {
    if (stopping_) return;
    stopping_ = true;
    stop_reason_ = reason.kind;
    stop_all(ctx);
  }

  // Runtime shutdown (no worker runs): its running children, newest first.
  void children_in_stop_order(std::vector<actor_detail::actor_cell*>& out) const {
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
      if (it->second.actor) out.push_back(it->second.actor.cell());
    }
  }

  // Halting by kill, a crash, or runtime shutdown: what still runs is sent its stop request.
  void on_stop(const exit_reason&) {
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
      if (it->second.actor) it->second.actor.stop(exit_kind::shutdown);
    }
  }

 private:
  struct child_record {
    dynamic_child_spec spec;
    actor_handle actor;            // the running incarnation (empty while backing off)
    std::uint32_t starts = 0;      // incarnations started
    std::uint32_t consecutive = 0; // restarts since it last stayed up reset_after
    clock_time started_at{};
    dynamic_child_info::phase state = dynamic_child_info::phase::running;
    std::uint64_t generation = 0;  // bumped when its pending deadline no longer holds
    bool killed = false;
    std::vector<answer<terminate_result>> waiting;  // terminate_child callers
  };
  struct deadline {
    clock_time at;
    dynamic_child_id child;
    std::uint64_t generation;
    bool operator>(const deadline& other) const noexcept { return at > other.at; }
  };

  // --- requests --------------------------------------------------------------------------------

  void handle(start_request& request, context& ctx) {
    if (stopping_) {
      request.reply({start_child_error::supervisor_gone, 0, {}});
      return;
    }
    if (spec_.max_children != 0 && children_.size() >= spec_.max_children) {
      request.reply({start_child_error::at_max_children, 0, {}});
      return;
    }
    const dynamic_child_id id = next_id_++;
    child_record& child = children_[id];
    child.spec = std::move(request.spec);
    if (!spawn(id, child, ctx)) {
      children_.erase(id);  // a failed first start is the caller's to know, never restarted
      request.reply({start_child_error::start_failed, 0, {}});
      return;
    }
    ++stats_.started;
    note_child(id);
    request.reply({start_child_error::none, id, child.actor});
  }

  void handle(terminate_request& request, context& ctx) {
    auto found = children_.find(request.id);
    if (found == children_.end()) {
      request.reply(terminate_result::not_found);
      return;
    }
    child_record& child = found->second;
    child.waiting.push_back(std::move(request.reply));
    if (child.state != dynamic_child_info::phase::stopping) begin_stop(request.id, ctx);
  }

  void handle(list_request& request, context&) {
    std::vector<dynamic_child_info> list;
    list.reserve(children_.size());
    for (const auto& [id, child] : children_) {
      list.push_back({id, child.spec.name, child.actor,
                      child.starts > 0 ? child.starts - 1 : 0, child.state});
    }
    request.reply(std::move(list));
  }

  void handle(stats_request& request, context&) {
    dynamic_supervisor_stats now = stats_;
    now.listed = children_.size();
    request.reply(now);
  }

  void handle(timer_due&, context& ctx) {
    alarm_->fired();  // (or a stale message: re-armed below either way)
    const clock_time now = clock_.now();
    while (!deadlines_.empty() && deadlines_.top().at <= now) {
      const deadline due = deadlines_.top();
      deadlines_.pop();
      auto found = children_.find(due.child);
      if (found == children_.end() || found->second.generation != due.generation) continue;
      child_record& child = found->second;
      if (child.state == dynamic_child_info::phase::backing_off) {
        restart(due.child, ctx);
      } else if (child.state == dynamic_child_info::phase::stopping && child.actor) {
        child.killed = true;
        child.actor.kill();  // its stop timeout passed; kill is untrappable
      }
    }
    rearm(ctx);
  }

  // --- children --------------------------------------------------------------------------------

  // Spawns an incarnation of `child`; false if its factory failed.
  bool spawn(dynamic_child_id id, child_record& child, context& ctx) {
    try {
      const spawn_options options = supervisor_parts::child_options(
          child.spec.placement, child.spec.name, ctx.id(), child.starts);
      actor_handle actor = child.spec.start(options);
      if (!actor || child_of_.contains(actor.id()) || actor.id() == ctx.id()) return false;
      ctx.monitor(actor);
      child_of_[actor.id()] = id;
      supervisor_parts::mark_child(actor, ctx.id(), child.starts++);
      child.actor = std::move(actor);
      child.started_at = clock_.now();
      child.state = dynamic_child_info::phase::running;
      return true;
    } catch (...) {
      return false;  // runtime_stopped included: nothing will run any more
    }
  }

  // Child `id` ended on its own (graceful: normal or a shutdown someone else asked for).
  void child_ended(dynamic_child_id id, bool graceful, context& ctx) {
    child_record& child = children_.at(id);
    const restart_type type = child.spec.restart;
    if (type == restart_type::never || (type == restart_type::on_crash_only && graceful)) {
      remove(id, ended_kind::ended);
      return;
    }
    std::optional<clock_time> now;
    if (!intensity_.allowed(now)) {
      std::string name = child.spec.name;
      remove(id, ended_kind::ended);  // given up: the one that went beyond the limit
      give_up(std::move(name), ctx);
      return;
    }
    intensity_.record(now);  // counted when decided, as the static supervisor's limit
    ctx.system().count_restarts(1);
    supervisor_parts::publish_intensity(system_, record_, intensity_);
    const clock_time at = now ? *now : clock_.now();
    if (at - child.started_at >= spec_.backoff.reset_after) child.consecutive = 0;
    const auto delay = spec_.backoff.delay(++child.consecutive);
    child.state = dynamic_child_info::phase::backing_off;
    deadlines_.push({detail::saturating_add(at, delay), id, child.generation});
    note_child(id);
    rearm(ctx);
  }

  void restart(dynamic_child_id id, context& ctx) {
    child_record& child = children_.at(id);
    ++child.generation;
    if (spawn(id, child, ctx)) {
      ++stats_.restarts;  // incarnations started again (one terminated in back-off is not)
      note_child(id);
      return;
    }
    // A failed restart is a crash of that child, now (started_at: its last try).
    child.started_at = clock_.now();
    child_ended(id, /*graceful=*/false, ctx);
  }

  void begin_stop(dynamic_child_id id, context& ctx) {
    child_record& child = children_.at(id);
    ++child.generation;  // a pending restart no longer holds
    if (!child.actor) {  // backing off: nothing runs
      child.state = dynamic_child_info::phase::stopping;
      finish_stop(id, ctx);
      return;
    }
    child.state = dynamic_child_info::phase::stopping;
    const std::chrono::milliseconds timeout = child.spec.stop_timeout;
    if (timeout.count() <= 0) {
      child.killed = true;
      child.actor.kill();
      return;
    }
    child.actor.stop(exit_kind::shutdown);
    if (timeout != std::chrono::milliseconds::max()) {
      const clock_time at =
          detail::saturating_add(clock_.now(), detail::to_clock_duration(timeout));
      deadlines_.push({at, id, child.generation});
      rearm(ctx);
    }
  }

  // Child `id`, being stopped, is down (or was backing off).
  void finish_stop(dynamic_child_id id, context& ctx) {
    child_record& child = children_.at(id);
    const terminate_result result =
        child.killed ? terminate_result::killed : terminate_result::stopped;
    for (auto& reply : child.waiting) reply(result);
    child.waiting.clear();
    remove(id, ended_kind::terminated);
    if (stopping_ && children_.empty()) halt(ctx);
  }

  enum class ended_kind : std::uint8_t { ended, terminated };
  void remove(dynamic_child_id id, ended_kind how) {
    children_.erase(id);
    ++(how == ended_kind::ended ? stats_.ended : stats_.terminated);
    note_child(id);
  }

  void stop_all(context& ctx) {
    std::vector<dynamic_child_id> ids;
    ids.reserve(children_.size());
    for (const auto& [id, child] : children_) {
      if (child.state != dynamic_child_info::phase::stopping) ids.push_back(id);
    }
    for (dynamic_child_id id : ids) begin_stop(id, ctx);  // may remove backing-off children
    if (children_.empty()) halt(ctx);
  }

  // The restart limit was reached: stop every child (as a stop request does), then escalate.
  void give_up(std::string child, context& ctx) {
    escalation_ = "spindle: dynamic supervisor gave up after child '" + child +
                  "' ended: restart limit reached";
    escalating_child_ = std::move(child);
    stopping_ = true;
    escalating_ = true;
    stop_all(ctx);
  }

  void halt(context& ctx) {
    if (halting_) return;
    halting_ = true;
    if (escalating_) {
      // Reported first: a top-level supervisor has no supervisor to see the crash.
      ctx.system().report_supervisor_failure({ctx.id(), escalating_child_, escalation_});
      throw supervisor_escalation(escalation_);  // a crash: our supervisor sees it
    }
    ctx.stop(stop_reason_);
  }

  // Arms the timer for the earliest deadline that still holds (stale ones are dropped here).
  void rearm(context& ctx) {
    while (!deadlines_.empty()) {
      const deadline& top = deadlines_.top();
      auto found = children_.find(top.child);
      if (found != children_.end() && found->second.generation == top.generation) break;
      deadlines_.pop();
    }
    if (deadlines_.empty()) {
      alarm_->disarm();
      return;
    }
    alarm_->arm(ctx.system(), ctx.executor_index(), deadlines_.top().at);
  }

  // The supervision tree's record of child `id` (under the system's directory lock): added,
  // updated or removed in place. record_.children follows children_'s order (by id), and
  // record_ids_ names its entries, so a change costs a binary search (and a removal a move of
  // the entries after it), not a rebuild.
  void note_child(dynamic_child_id id) {
    if (system_ == nullptr) return;
    const auto at = std::lower_bound(record_ids_.begin(), record_ids_.end(), id);
    const auto position = at - record_ids_.begin();
    const bool listed = at != record_ids_.end() && *at == id;
    auto found = children_.find(id);
    if (found == children_.end()) {
      if (!listed) return;
      record_ids_.erase(at);
      system_->with_directory_locked(
          [&] { record_.children.erase(record_.children.begin() + position); });
      return;
    }
    const child_record& child = found->second;
    supervisor_info::child entry{child.spec.name, child.actor ? child.actor.id() : 0,
                                 child.starts > 0 ? child.starts - 1 : 0, bool(child.actor)};
    if (!listed) record_ids_.insert(at, id);
    system_->with_directory_locked([&] {
      if (listed) {
        record_.children[std::size_t(position)] = std::move(entry);
      } else {
        record_.children.insert(record_.children.begin() + position, std::move(entry));
      }
    });
  }

  dynamic_supervisor_spec spec_;
  spindle::clock& clock_;
  restart_intensity intensity_;
  std::optional<supervisor_alarm> alarm_;  // set by on_start (it needs the cell); disarms last
  std::map<dynamic_child_id, child_record> children_;  // by id: oldest first
  std::unordered_map<actor_id, dynamic_child_id> child_of_;
  std::priority_queue<deadline, std::vector<deadline>, std::greater<>> deadlines_;
  dynamic_child_id next_id_ = 1;
  dynamic_supervisor_stats stats_;
  actor_detail::supervisor_record record_;
  std::vector<dynamic_child_id> record_ids_;  // the ids of record_.children, in order
  actor_system* system_ = nullptr;
  bool stopping_ = false;  // a stop request came, or giving up: stop the children, then halt
  bool escalating_ = false;
  bool halting_ = false;
  exit_kind stop_reason_ = exit_kind::normal;
  std::string escalation_;
  std::string escalating_child_;
};

void check(const dynamic_supervisor_spec& spec) {
  const restart_backoff& b = spec.backoff;
  if (!(b.factor >= 1.0) || !std::isfinite(b.factor)) {
    throw usage_error("spindle: restart_backoff::factor must be a finite number >= 1");
  }
  if (b.initial.count() < 0 || b.max.count() < 0 || b.reset_after.count() < 0) {
    throw usage_error("spindle: restart_backoff delays must not be negative");
  }
}

dynamic_supervisor spawn_in(actor_system& system, dynamic_supervisor_spec spec,
                            const spawn_options& options) {
  check(spec);
  return dynamic_supervisor(actor_detail::spawn_in<dynamic_supervisor_behaviour>(
      system, options, std::move(spec), system.core().clock()));
}

}  // namespace

oneshot_receiver<started_child> dynamic_supervisor::start_child(dynamic_child_spec spec) const {
  if (!spec.start) {
    throw usage_error("spindle: dynamic_child_spec '" + spec.name + "' has no start function");
  }
  auto [sender, receiver] = oneshot<started_child>();
  // Unanswered (the supervisor halted, or the send was refused): supervisor_gone.
  dynamic_supervisor_message request{
      start_request{std::move(spec), answer<started_child>(std::move(sender), started_child{})}};
  ref_.send(std::move(request));
  return std::move(receiver);
}

oneshot_receiver<terminate_result> dynamic_supervisor::terminate_child(dynamic_child_id id) const {
  auto [sender, receiver] = oneshot<terminate_result>();
  dynamic_supervisor_message request{terminate_request{
      id, answer<terminate_result>(std::move(sender), terminate_result::supervisor_gone)}};
  ref_.send(std::move(request));
  return std::move(receiver);
}

oneshot_receiver<std::vector<dynamic_child_info>> dynamic_supervisor::which_children() const {
  auto [sender, receiver] = oneshot<std::vector<dynamic_child_info>>();
  dynamic_supervisor_message request{
      list_request{answer<std::vector<dynamic_child_info>>(std::move(sender), {})}};
  ref_.send(std::move(request));
  return std::move(receiver);
}

oneshot_receiver<dynamic_supervisor_stats> dynamic_supervisor::stats() const {
  auto [sender, receiver] = oneshot<dynamic_supervisor_stats>();
  dynamic_supervisor_message request{
      stats_request{answer<dynamic_supervisor_stats>(std::move(sender), {})}};
  ref_.send(std::move(request));
  return std::move(receiver);
}

dynamic_supervisor spawn_dynamic_supervisor(runtime& rt, dynamic_supervisor_spec spec,
                                            const spawn_options& options) {
  return spawn_in(actors_of(rt), std::move(spec), options);
}

dynamic_supervisor spawn_dynamic_supervisor_here(dynamic_supervisor_spec spec,
                                                 const spawn_options& options) {
  actor_system* system = current_actor_system();
  if (system == nullptr) {
    throw usage_error("spindle: spawn_dynamic_supervisor_here outside a runtime worker");
  }
  return spawn_in(*system, std::move(spec), options);
}

}  // namespace spindle
