// The actor system's part of the snapshot (SPEC G1): the directory of live actors, supervisors'
// records, and the "actors" and "supervision_tree" sections (actor_scheduler.hpp,
// "Diagnostics").
#include <algorithm>

#include "spindle/actor/actor_scheduler.hpp"
#include "spindle/actor/registry.hpp"
#include "spindle/core/runtime_core.hpp"
#include "spindle/diagnostics/json_writer.hpp"
#include "spindle/task/runtime.hpp"

namespace spindle {

using actor_detail::actor_cell;

void actor_system::enlist(actor_cell* cell) {
  std::lock_guard guard(directory_lock_);
  cell->directory_previous = nullptr;
  cell->directory_next = directory_head_;
  if (directory_head_ != nullptr) directory_head_->directory_previous = cell;
  directory_head_ = cell;
  cell->listed = true;
}

void actor_system::delist(actor_cell* cell) noexcept {
  std::lock_guard guard(directory_lock_);
  if (!cell->listed) return;
  if (cell->directory_previous != nullptr) {
    cell->directory_previous->directory_next = cell->directory_next;
  } else {
    directory_head_ = cell->directory_next;
  }
  if (cell->directory_next != nullptr) cell->directory_next->directory_previous = cell->directory_previous;
  cell->directory_previous = cell->directory_next = nullptr;
  cell->listed = false;
}

void actor_system::add_supervisor_record(actor_detail::supervisor_record* record) {
  std::lock_guard guard(directory_lock_);
  supervisors_.push_back(record);
}

void actor_system::remove_supervisor_record(actor_detail::supervisor_record* record) noexcept {
  std::lock_guard guard(directory_lock_);
  std::erase(supervisors_, record);
}

namespace {

// Under the directory lock: the cell is listed, so alive. relaxed loads: each value whole.
actor_info describe(const actor_cell& cell) {
  constexpr auto relaxed = std::memory_order_relaxed;
  actor_info info;
  info.id = cell.id;
  info.name = cell.name;
  info.state = cell.state.load(relaxed);
  info.executor = cell.home.load(relaxed);
  const std::uint64_t handled = cell.messages_handled.load(relaxed);
  const actor_detail::envelope* head = cell.mailbox.load(relaxed);  // compared, never followed
  info.more_waiting = head != nullptr && head != actor_detail::closed_mailbox;
  if (cell.capacity != 0) {
    info.mailbox_length = cell.queued.load(relaxed);  // bounded: the sends count themselves
    info.mailbox_length_exact = true;
  } else if (cell.counts_pushes) {
    const std::uint64_t received = cell.messages_received.load(relaxed);
    info.mailbox_length = received > handled ? received - handled : 0;
    info.mailbox_length_exact = true;
  } else {
    const std::uint64_t taken = cell.messages_taken.load(relaxed);
    info.mailbox_length = taken > handled ? taken - handled : 0;
  }
  // Stashed messages (actor_stash.hpp) wait too: counted handled when stashed (and received
  // again when unstashed), so added here.
  info.stashed = cell.stash_length.load(relaxed);
  info.mailbox_length += info.stashed;
  info.mailbox_high_water = std::max<std::uint32_t>(
      cell.mailbox_high_water.load(relaxed),
      std::uint32_t(std::min<std::uint64_t>(info.mailbox_length, UINT32_MAX)));
  info.mailbox_capacity = cell.capacity;
  info.messages_handled = handled;
  info.reductions = cell.reductions_used.load(relaxed);
  info.statistics = cell.system->core().options().diagnostics.records;
  info.supervisor = cell.supervisor.load(relaxed);
  info.restarts = cell.restarts.load(relaxed);
  return info;
}

// The registered names (registry.hpp) by actor id: taken before the directory lock (the
// registry's lock is never held with it), few as a rule, looked up per listed actor.
std::vector<std::pair<actor_id, std::string>> sorted_names(const actor_detail::name_registry& names) {
  std::vector<std::pair<actor_id, std::string>> named;
  names.for_each_named([&](actor_id id, const std::string& name) { named.emplace_back(id, name); });
  std::sort(named.begin(), named.end());
  return named;
}
std::string name_in(const std::vector<std::pair<actor_id, std::string>>& named, actor_id id) {
  const auto it = std::lower_bound(named.begin(), named.end(), id,
                                   [](const auto& n, actor_id key) { return n.first < key; });
  return it != named.end() && it->first == id ? it->second : std::string();
}

void write_actor(diagnostics::json_writer& out, const actor_info& a) {
  out.begin_object();
  out.member("id", a.id);
  out.member("name", a.name);
  if (!a.registered_name.empty()) out.member("registered_name", a.registered_name);
  out.member("state", to_string(a.state));
  out.member("executor", a.executor);
  out.member("mailbox_length", a.mailbox_length);
  out.member("mailbox_length_exact", a.mailbox_length_exact);
  out.member("more_waiting", a.more_waiting);
  out.member("mailbox_high_water", a.mailbox_high_water);
  out.member("mailbox_capacity", a.mailbox_capacity);
  if (a.stashed != 0) out.member("stashed", a.stashed);
  out.member("messages_handled", a.messages_handled);
  out.member("reductions", a.reductions);
  if (!a.statistics) out.member("statistics", false);
  if (a.supervisor != 0) {
    out.member("supervisor", a.supervisor);
  } else {
    out.key("supervisor").null();
  }
  out.member("restarts", a.restarts);
  out.end_object();
}

void write_supervisor(diagnostics::json_writer& out, const supervisor_info& s,
                      const std::vector<supervisor_info>& all) {
  out.begin_object();
  out.member("id", s.id);
  out.member("name", s.name);
  out.member("kind", s.dynamic ? "dynamic" : "static");
  // Restart intensity: what its restart limit is checked against.
  out.member("restarts", s.restarts);
  out.member("restarts_in_window", s.restarts_in_window);
  if (s.max_restarts) {
    out.member("max_restarts", *s.max_restarts);
  } else {
    out.key("max_restarts").null();
  }
  if (s.window) {
    out.member("window_ms", double(s.window->count()) / 1e6);
  } else {
    out.key("window_ms").null();
  }
  out.key("children").begin_array();
  for (const supervisor_info::child& c : s.children) {
    out.begin_object();
    out.member("name", c.name);
    if (c.actor != 0) {
      out.member("actor", c.actor);
    } else {
      out.key("actor").null();
    }
    out.member("running", c.running);
    out.member("restarts", c.restarts);
    // A child that is itself a supervisor: its subtree, nested.
    const auto sub = std::find_if(all.begin(), all.end(), [&](const supervisor_info& other) {
      return c.actor != 0 && other.id == c.actor;
    });
    if (sub != all.end()) {
      out.key("supervisor");
      write_supervisor(out, *sub, all);
    }
    out.end_object();
  }
  out.end_array();
  out.end_object();
}

}  // namespace

std::vector<actor_info> actor_system::snapshot() const {
  std::vector<actor_info> result;
  {
    std::lock_guard guard(directory_lock_);
    for (const actor_cell* cell = directory_head_; cell != nullptr; cell = cell->directory_next) {
      result.push_back(describe(*cell));
    }
  }
  const std::vector<std::pair<actor_id, std::string>> named = sorted_names(*names_);
  if (!named.empty()) {
    for (actor_info& a : result) a.registered_name = name_in(named, a.id);
  }
  return result;
}

std::vector<supervisor_info> actor_system::supervision_tree() const {
  std::vector<supervisor_info> result;
  std::lock_guard guard(directory_lock_);
  for (const actor_detail::supervisor_record* record : supervisors_) {
    supervisor_info info;
    info.id = record->id;
    info.children = record->children;
    info.dynamic = record->dynamic;
    if (record->intensity) {
      const restart_intensity& intensity = *record->intensity;
      info.restarts = intensity.total();
      info.restarts_in_window = intensity.within_window(intensity.clock().now());
      if (!intensity.limit().is_unlimited()) info.max_restarts = intensity.limit().restarts();
      info.window = intensity.limit().window();
    }
    for (const actor_cell* cell = directory_head_; cell != nullptr; cell = cell->directory_next) {
      if (cell->id == record->id) {
        info.name = cell->name;
        info.parent = cell->supervisor.load(std::memory_order_relaxed);  // relaxed: a sample
        break;
      }
    }
    result.push_back(std::move(info));
  }
  return result;
}

bool actor_system::describe_stalled(const core::runnable* r,
                                    diagnostics::warning_subject& out) const {
  for (std::uint32_t i = 0; i < scheduler_capacity_; ++i) {
    const actor_scheduler* wheel = find_scheduler(i);
    if (wheel == nullptr || !wheel->is_turn(r)) continue;
    const actor_id running = wheel->running_actor();
    if (running == 0) return false;  // between runs: the wheel's own code, no actor to name
    out.what = diagnostics::warning_subject::kind::actor;
    out.id = running;
    // Its name as the "actors" section lists it (an actor that halted meanwhile: by id only).
    std::lock_guard guard(directory_lock_);
    for (const actor_cell* cell = directory_head_; cell != nullptr; cell = cell->directory_next) {
      if (cell->id == running) {
        out.name = cell->name;
        break;
      }
    }
    return true;
  }
  return false;
}

void actor_system::register_sections() {
  auto* state = static_cast<detail::runtime_state*>(core_.layer_state());
  if (state == nullptr) return;
  diagnostics::registry& registry = state->diagnostics_registry;
  actors_section_ = registry.add_snapshot_section("actors", [this](diagnostics::json_writer& out) {
    const std::vector<std::pair<actor_id, std::string>> named = sorted_names(*names_);
    out.begin_array();
    std::lock_guard guard(directory_lock_);
    for (const actor_cell* cell = directory_head_; cell != nullptr; cell = cell->directory_next) {
      actor_info info = describe(*cell);
      if (!named.empty()) info.registered_name = name_in(named, info.id);
      write_actor(out, info);
    }
    out.end_array();
  });
  tree_section_ =
      registry.add_snapshot_section("supervision_tree", [this](diagnostics::json_writer& out) {
        const std::vector<supervisor_info> all = supervision_tree();
        // Roots: supervisors no listed supervisor has as a child.
        out.begin_array();
        for (const supervisor_info& s : all) {
          const bool nested = std::any_of(all.begin(), all.end(), [&](const supervisor_info& p) {
            return std::any_of(p.children.begin(), p.children.end(),
                               [&](const supervisor_info::child& c) { return c.actor == s.id; });
          });
          if (!nested) write_supervisor(out, s, all);
        }
        out.end_array();
      });
  // A stall in one of this system's wheels names the actor running there (G4). Last (nothing
  // after it throws); removed first thing in the destructor, which waits for a call in progress.
  stall_describer_ = state->warnings.add_runnable_describer(
      [this](const core::runnable* r, diagnostics::warning_subject& out) {
        return describe_stalled(r, out);
      });
}

}  // namespace spindle
