// Registered names (registry.hpp has the design: who takes part, the locks, lifetimes).
#include "spindle/actor/registry.hpp"

#include <algorithm>
#include <memory>

namespace spindle {
namespace actor_detail {

void name_watch::deliver_to(exit_callback* self, const exit_reason&) noexcept {
  auto* watch = static_cast<name_watch*>(self);
  watch->registry->halted(watch->name, watch->token);
  delete watch;
}

name_registry::~name_registry() {
  // The system's shutdown halted every actor, so every entry went with its halt callback; an
  // entry left (a system never shut down) has its watch owned by the cell's list: not ours.
}

bool name_registry::has_halted(const actor_cell& cell) noexcept {
  // acquire: pairs with halt's Halted store (a snapshot: a halting actor frees its name itself).
  return cell.state.load(std::memory_order_acquire) == actor_state::halted;
}

void name_registry::erase_locked(shard& s, name_map::iterator it) noexcept {
  by_actor_.erase(it->second.cell->id);
  s.names.erase(it);
}

void name_registry::add(actor_cell& cell, std::string_view name) {
  if (name.empty()) throw usage_error("spindle: register_name with an empty name");
  shard& s = shard_for(name);
  auto watch = std::make_unique<name_watch>(*this, std::string(name), 0);
  {
    std::lock_guard writing(writers_);
    if (const auto named = by_actor_.find(cell.id); named != by_actor_.end()) {
      if (named->second.name == name) {
        throw name_in_use("spindle: register_name: the actor is registered under this name already",
                          std::string(name), cell.id, named->second.name);
      }
      throw name_in_use("spindle: register_name: the actor has a name already ('" +
                            named->second.name + "'); an actor has one name",
                        std::string(name), 0, named->second.name);
    }
    std::unique_lock shard_lock(s.lock);
    if (const auto taken = s.names.find(name); taken != s.names.end()) {
      // An actor that has halted has no name, even before its callback ran (it will find its
      // token gone): one who saw it halt may register the name at once.
      if (has_halted(*taken->second.cell)) {
        erase_locked(s, taken);
      } else {
        throw name_in_use("spindle: register_name: the name '" + std::string(name) +
                            "' is taken by a live actor",
                        std::string(name), taken->second.cell->id, std::string());
      }
    }
    watch->token = ++next_token_;
    by_actor_.emplace(cell.id, named_actor{std::string(name), &cell});  // first: a throw here leaves no entry
    try {
      s.names.emplace(std::string(name), entry{&cell, watch->token, watch.get()});
    } catch (...) {
      by_actor_.erase(cell.id);
      throw;
    }
  }
  const std::uint64_t token = watch->token;
  try {
    // Takes the watch over (at once delivered, freeing the name, if the actor halted).
    add_exit_callback(cell, watch.get());
    watch.release();
  } catch (...) {
    halted(std::string(name), token);  // out of memory: no callback would free the name
    throw;
  }
}

bool name_registry::remove(std::string_view name) {
  shard& s = shard_for(name);
  actor_cell* cell;
  name_watch* watch;
  bool alive;
  {
    std::lock_guard writing(writers_);
    std::unique_lock shard_lock(s.lock);
    const auto it = s.names.find(name);
    if (it == s.names.end()) return false;
    cell = it->second.cell;
    watch = it->second.watch;
    // The entry keeps the cell alive only while it is here: our own reference from now on.
    cell->add_reference();
    alive = !has_halted(*cell);  // a halted actor had no name any more (see add)
    erase_locked(s, it);
  }
  // Taken back: ours to free. Not there: the halt has it (or registration is still adding
  // it): delivered later, it finds its token gone and frees itself.
  if (remove_exit_callback(*cell, watch)) delete watch;
  cell->release();
  return alive;
}

actor_cell* name_registry::find(std::string_view name) const noexcept {
  const shard& s = shard_for(name);
  std::shared_lock reading(s.lock);
  const auto it = s.names.find(name);
  if (it == s.names.end()) return nullptr;
  if (has_halted(*it->second.cell)) return nullptr;  // an actor that halted has no name
  it->second.cell->add_reference();  // alive: its entry is here (see "Lifetime")
  return it->second.cell;
}

std::optional<std::string> name_registry::name_of(actor_id id) const {
  std::lock_guard guard(writers_);
  const auto it = by_actor_.find(id);
  if (it == by_actor_.end() || has_halted(*it->second.cell)) return std::nullopt;
  return it->second.name;
}

std::vector<std::pair<std::string, actor_id>> name_registry::list() const {
  std::vector<std::pair<std::string, actor_id>> names;
  {
    std::lock_guard guard(writers_);
    names.reserve(by_actor_.size());
    for (const auto& [id, named] : by_actor_) {
      if (!has_halted(*named.cell)) names.emplace_back(named.name, id);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

void name_registry::halted(const std::string& name, std::uint64_t token) noexcept {
  shard& s = shard_for(name);
  std::lock_guard writing(writers_);
  std::unique_lock shard_lock(s.lock);
  const auto it = s.names.find(name);
  if (it != s.names.end() && it->second.token == token) erase_locked(s, it);
}

name_registry& names_of(actor_system& system) noexcept { return system.names(); }

actor_system& calling_system(const char* what) {
  actor_system* system = current_actor_system();
  if (system == nullptr) throw usage_error(what);
  return *system;
}

}  // namespace actor_detail

void register_name(actor_system& system, std::string_view name, const actor_handle& actor) {
  if (!actor) throw usage_error("spindle: register_name with an empty actor reference");
  actor_detail::actor_cell& cell = *actor.cell();
  if (cell.system != &system) {
    throw usage_error("spindle: register_name: the actor belongs to another runtime");
  }
  if (system.stopping()) throw runtime_stopped();
  // acquire: a snapshot; an actor halting after this check frees the name itself.
  if (cell.state.load(std::memory_order_acquire) == actor_state::halted) {
    throw actor_unavailable(send_result::halted);
  }
  actor_detail::names_of(system).add(cell, name);
}

std::optional<std::string> registered_name(actor_system& system, const actor_handle& actor) {
  if (!actor) return std::nullopt;
  return actor_detail::names_of(system).name_of(actor.id());
}

}  // namespace spindle
