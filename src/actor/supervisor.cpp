// The supervisor actor: carries out supervision_plan's decisions (supervisor.hpp has the
// protocol; supervision.md the decision rules).
#include "spindle/actor/supervisor.hpp"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>

#include "spindle/core/runtime_core.hpp"
#include "spindle/task/runtime.hpp"
#include "spindle/time/sleep.hpp"
#include "supervisor_parts.hpp"

namespace spindle {
namespace {

class supervisor_behaviour {
 public:
  using message_type = supervisor_message;
  using context = actor_context<supervisor_message>;

  supervisor_behaviour(supervisor_spec spec, supervision_plan plan)
      : spec_(std::move(spec)), plan_(std::move(plan)), starts_(spec_.children.size(), 0),
        children_(spec_.children.size()) {}
  supervisor_behaviour(const supervisor_behaviour&) = delete;
  supervisor_behaviour& operator=(const supervisor_behaviour&) = delete;
  ~supervisor_behaviour() {
    if (system_ != nullptr) system_->remove_supervisor_record(&record_);
  }

  void on_start(context& ctx) {
    stop_alarm_.emplace(*ctx.self().cell());
    // Diagnostics: the supervision tree lists this supervisor and its children from now on.
    record_.id = ctx.id();
    record_.children.resize(spec_.children.size());
    for (std::size_t i = 0; i < spec_.children.size(); ++i) {
      record_.children[i].name = spec_.children[i].name;
    }
    record_.intensity = plan_.intensity();
    system_ = current_actor_system();
    if (system_ != nullptr) system_->add_supervisor_record(&record_);
    for (std::size_t child : plan_.start_order()) start_child(child, ctx);
    run(ctx);
  }

  void receive(supervisor_message& message, context& ctx) {
    if (auto* failed = std::get_if<supervisor_child_start_failed>(&message)) {
      if (stopping_) return;  // nothing restarts any more
      exits_.emplace_back(failed->child, child_outcome::crashed);
      run(ctx);
      return;
    }
    if (std::holds_alternative<supervisor_stop_timed_out>(message)) {
      stop_alarm_->fired();
      if (!awaiting_stop_ || !children_[*awaiting_stop_]) return;  // down meanwhile
      if (ctx.system().core().clock().now() < stop_deadline_) {
        // A stale fire (of an earlier stop's deadline): wait for this one's.
        stop_alarm_->arm(ctx.system(), ctx.executor_index(), stop_deadline_);
        return;
      }
      children_[*awaiting_stop_].kill();  // it had its time; kill is untrappable
      return;
    }
    auto& query = std::get<supervisor_query>(message);
    const std::optional<std::size_t> index = plan_.index_of(query.child);
    query.reply(index ? children_[*index] : actor_handle{});
  }

  void on_down(const down_message& down, context& ctx) {
    auto it = child_of_.find(down.source);
    if (it == child_of_.end()) return;  // an earlier incarnation, or not a child
    const std::size_t child = it->second;
    child_of_.erase(it);
    children_[child] = actor_handle{};
    note_child(child, 0);
    if (awaiting_stop_ == child) {
      awaiting_stop_.reset();
      stop_alarm_->disarm();  // it would find nothing to kill
    } else if (!stopping_) {
      // Graceful ends (normal, or a shutdown someone else asked for) are normal outcomes.
      const bool graceful =
          down.reason.kind == exit_kind::normal || down.reason.kind == exit_kind::shutdown;
      exits_.emplace_back(child, graceful ? child_outcome::normal : child_outcome::crashed);
    }
    run(ctx);
  }

  // A stop request: stop the running children in stop order, one at a time, then halt with
  // the reason asked for (header: "Stopping"). Decisions still pending are dropped.
  void on_stop_request(const exit_reason& reason, context& ctx) {
    if (stopping_) return;
    stopping_ = true;
    stop_reason_ = reason.kind;
    actions_.clear();
    exits_.clear();
    for (std::size_t child : plan_.stop_order()) actions_.push_back({action::kind::stop, child});
    actions_.push_back({action::kind::halt, 0});
    run(ctx);
  }

  // Runtime shutdown (no worker runs): the children it runs, in stop order.
  void children_in_stop_order(std::vector<actor_detail::actor_cell*>& out) const {
    for (std::size_t child : plan_.stop_order()) {
      if (children_[child]) out.push_back(children_[child].cell());
    }
  }

  // Halting by kill, by a crash of its own, or at runtime shutdown: anything still running is
  // sent its stop request (normally nothing: a stop request and giving up stop them first).
  void on_stop(const exit_reason&) {
    for (std::size_t child : plan_.stop_order()) {
      if (children_[child]) children_[child].stop(exit_kind::shutdown);
    }
  }

 private:
  struct action {
    enum class kind : std::uint8_t { stop, start, escalate, halt } what;
    std::size_t child;
  };

  // Performs pending actions, then decides queued exits, until it must wait for a stop.
  void run(context& ctx) {
    while (!awaiting_stop_ && !halting_) {
      if (!actions_.empty()) {
        const action next = actions_.front();
        actions_.pop_front();
        perform(next, ctx);
        continue;
      }
      if (exits_.empty()) return;
      const auto [child, outcome] = exits_.front();
      exits_.pop_front();
      const std::size_t restarts_before = plan_.restart_count();
      decide(child, outcome);
      if (plan_.restart_count() != restarts_before) {
        ctx.system().count_restarts(plan_.restart_count() - restarts_before);
        supervisor_parts::publish_intensity(system_, record_, plan_.intensity());
      }
    }
  }

  void decide(std::size_t child, child_outcome outcome) {
    const restart_decision decision = plan_.on_child_exit(child, outcome);
    for (std::size_t c : decision.stop) actions_.push_back({action::kind::stop, c});
    for (std::size_t c : decision.start) actions_.push_back({action::kind::start, c});
    if (decision.escalate) {
      escalation_ = "spindle: supervisor gave up after child '" + plan_.child(child).name +
                    "' ended: restart limit reached";
      actions_.push_back({action::kind::escalate, child});
    }
  }

  void perform(const action& a, context& ctx) {
    switch (a.what) {
      case action::kind::stop: {
        // An exit of this child still queued: it is gone already, nothing to wait for.
        const auto queued = std::find_if(exits_.begin(), exits_.end(),
                                         [&](const auto& e) { return e.first == a.child; });
        if (queued != exits_.end()) exits_.erase(queued);
        if (!children_[a.child]) return;
        awaiting_stop_ = a.child;
        send_stop(a.child, ctx);
        return;
      }
      case action::kind::halt:
        halting_ = true;
        ctx.stop(stop_reason_);
        return;
      case action::kind::start:
        start_child(a.child, ctx);
        return;
      case action::kind::escalate:
        // Reported first: a top-level supervisor has no supervisor to see the crash.
        ctx.system().report_supervisor_failure(
            {ctx.id(), plan_.child(a.child).name, escalation_});
        throw supervisor_escalation(escalation_);  // a crash: our supervisor sees it
    }
  }

  void start_child(std::size_t child, context& ctx) {
    try {
      // Named after its spec (diagnostics).
      const spawn_options options = supervisor_parts::child_options(
          spec_.children[child].placement, spec_.children[child].name, ctx.id(), starts_[child]);
      actor_handle handle = spec_.children[child].start(options);
      if (!handle) throw usage_error("spindle: a supervisor's child factory returned no actor");
      if (child_of_.contains(handle.id())) {
        // One actor is one child: tracked twice, its one down notification would end only one
        // of them, and a stop would wait forever for the other. A failed start of this child.
        const std::string& other = plan_.child(child_of_.at(handle.id())).name;
        std::fprintf(stderr,
                     "spindle: supervisor %llu: the factory of child '%s' returned the actor of "
                     "running child '%s'; counted as a failed start of '%s'\n",
                     static_cast<unsigned long long>(ctx.id()), plan_.child(child).name.c_str(),
                     other.c_str(), plan_.child(child).name.c_str());
        throw usage_error("spindle: a supervisor's child factory returned another child's actor");
      }
      ctx.monitor(handle);
      child_of_[handle.id()] = child;
      // Diagnostics: which supervisor started it, and how many times its slot restarted (again
      // here: a factory may have ignored the options).
      supervisor_parts::mark_child(handle, ctx.id(), starts_[child]++);
      note_child(child, handle.id());
      children_[child] = std::move(handle);
    } catch (const runtime_stopped&) {
      // The runtime is shutting down: nothing will run any more, nothing to restart.
    } catch (...) {
      // A failed start is a crash of that child, decided in a later turn of this actor (a
      // message to itself), so a factory that always fails cannot keep its executor forever.
      ctx.self().send(supervisor_child_start_failed{child});
    }
  }

  // The stop request, and the timer that kills the child if it is not down in time.
  void send_stop(std::size_t child, context& ctx) {
    const std::chrono::milliseconds timeout = spec_.children[child].stop_timeout;
    if (timeout.count() <= 0) {
      children_[child].kill();
      return;
    }
    children_[child].stop(exit_kind::shutdown);
    if (timeout == std::chrono::milliseconds::max()) {
      stop_deadline_ = clock_time::max();  // never killed (a stale fire finds nothing due)
      return;
    }
    stop_deadline_ = detail::saturating_add(ctx.system().core().clock().now(),
                                            detail::to_clock_duration(timeout));
    stop_alarm_->arm(ctx.system(), ctx.executor_index(), stop_deadline_);
  }

  // The supervision tree's record of a child (under the system's directory lock).
  void note_child(std::size_t child, actor_id running) {
    if (system_ == nullptr) return;
    system_->with_directory_locked([&] {
      supervisor_info::child& c = record_.children[child];
      c.actor = running;
      c.running = running != 0;
      c.restarts = starts_[child] > 0 ? starts_[child] - 1 : 0;
    });
  }

  supervisor_spec spec_;
  supervision_plan plan_;
  std::vector<std::uint32_t> starts_;  // per child: incarnations started
  actor_detail::supervisor_record record_;
  actor_system* system_ = nullptr;  // where record_ is listed (set by on_start)
  std::vector<actor_handle> children_;           // running children (empty when not)
  std::unordered_map<actor_id, std::size_t> child_of_;
  std::deque<action> actions_;
  std::deque<std::pair<std::size_t, child_outcome>> exits_;
  std::optional<std::size_t> awaiting_stop_;
  // The stop awaited is killed at stop_deadline_: one timer entry, re-armed per stop (a fire of
  // an earlier stop's deadline finds a later one and re-arms). Set by on_start.
  std::optional<supervisor_parts::supervisor_alarm<supervisor_message, supervisor_stop_timed_out>>
      stop_alarm_;
  clock_time stop_deadline_{};
  bool stopping_ = false;         // a stop request came: stop the children, then halt
  bool halting_ = false;          // ctx.stop called: nothing more to do
  exit_kind stop_reason_ = exit_kind::normal;
  std::string escalation_;
};

// Builds the plan (the configuration-time checks) from the named spec.
supervision_plan make_plan(const supervisor_spec& spec, core::runtime_core& core) {
  std::vector<child_spec> children;
  children.reserve(spec.children.size());
  for (const supervised_child& child : spec.children) {
    if (!child.start) {
      throw usage_error("spindle: supervisor child '" + child.name + "' has no start function");
    }
    children.push_back({child.name, child.restart, {}});
  }
  for (std::size_t i = 0; i < spec.children.size(); ++i) {
    for (const std::string& name : spec.children[i].depends_on) {
      auto found = std::find_if(spec.children.begin(), spec.children.end(),
                                [&](const supervised_child& c) { return c.name == name; });
      if (found == spec.children.end()) {
        throw usage_error("spindle: supervisor child '" + spec.children[i].name +
                          "' depends on unknown child '" + name + "'");
      }
      children[i].dependencies.push_back(std::size_t(found - spec.children.begin()));
    }
    const child_placement& p = spec.children[i].placement;
    std::uint32_t probe = 1;
    const bool valid =
        (p.where == child_placement::kind::executor && p.value < core.executor_count()) ||
        (p.where != child_placement::kind::executor && p.value <= 1024 &&
         core.pick_two_choices_in(domain_of(p), probe).has_value());
    if (!valid) {
      throw usage_error("spindle: supervisor child '" + spec.children[i].name +
                        "' has a placement no executor of this runtime can honour (a NUMA "
                        "group or core kind needs executors bound there: runtime affinity)");
    }
  }
  return supervision_plan::create(std::move(children), spec.pattern, spec.limit, core.clock());
}

supervisor_ref spawn_in(actor_system& system, supervisor_spec spec, const spawn_options& options) {
  supervision_plan plan = make_plan(spec, system.core());
  return actor_detail::spawn_in<supervisor_behaviour>(system, options, std::move(spec),
                                                      std::move(plan));
}

}  // namespace

supervisor_ref spawn_supervisor(runtime& rt, supervisor_spec spec, const spawn_options& options) {
  return spawn_in(actors_of(rt), std::move(spec), options);
}

supervisor_ref spawn_supervisor_here(supervisor_spec spec, const spawn_options& options) {
  actor_system* system = current_actor_system();
  if (system == nullptr) throw usage_error("spindle: spawn_supervisor_here outside a runtime worker");
  return spawn_in(*system, std::move(spec), options);
}


}  // namespace spindle
