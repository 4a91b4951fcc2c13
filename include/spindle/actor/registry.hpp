// Registered names (issue 17): an actor found by a name, as Erlang's register/whereis.
//
//   spindle::register_name(rt, "db", ref);                  // any thread
//   auto db = spindle::spawn_registered<db_actor>(rt, "db", args...);  // spawn and name, atomic
//   auto db = spindle::whereis<db_message>(rt, "db");       // an empty ref if no such name
//   spindle::send_to<db_message>(rt, "db", query{...});     // send_result::no_such_name if none
//   spindle::unregister_name(rt, "db");                     // true if the name was registered
//   spindle::exit_reason why = co_await spindle::monitor_name(rt, "db");
//
// Rules (OTP's): a name names one actor, and an actor has at most one name. register_name
// throws name_in_use (a usage_error) when the name is taken by an actor that has not halted,
// or when the actor has a name already. A name is freed when its actor halts, by an exit
// callback on the actor (actor_cell.hpp, the one task monitors use): nothing on the send or
// scheduling paths knows about names. Every read goes by the actor's state, not by whether
// the callback has run yet: an actor that has halted has no name from its Halted store on
// (whereis finds nothing, registered_name(s) and unregister_name say none, register_name may
// give the name to another actor at once). So whoever has seen the halt (a down notification,
// a Halted state) sees the name free. Callback order is no help here: a watch placed while the
// halt delivers its list is told at once, possibly before the name's callback has run
// (ActorRegistryRace.RegisteringRacingTheActorsHaltLeavesNoStaleName found that).
//
// Who takes part:
//   - callers on any thread (register, unregister, whereis, send_to, snapshots);
//   - the halting actor's owner (its home executor, or the shutdown thread), which runs the
//     name's exit callback (name_watch) inside halt().
// State: `shards_` maps name -> entry {cell, token, watch}, sharded by the name's hash, each
// shard under a shared_mutex (lookups take it shared, so whereis from many threads runs in
// parallel on different shards and shares the lock on one). Writers (register, unregister,
// the halt callback) are serialised by `writers_`, which also guards `by_actor_` (actor id ->
// name, for the one-name rule and the diagnostics snapshot); a writer takes `writers_`, then a
// shard exclusively: one lock order, so no deadlock. A token (unique per registration) tells
// a halt callback whether the entry it was made for is still there: a name unregistered and
// registered again for another actor is not freed by the first actor's halt.
// Lifetime: an entry holds no reference to its cell. The cell is alive while its entry is in
// the map: the entry is removed by the exit callback, which halt() runs before it drops the
// system's reference to the cell; until register_name has added that callback (between the
// insert and add_exit_callback), the registering caller's reference keeps the cell, and if the
// actor halted meanwhile add_exit_callback runs the callback at once, on that caller. So a lookup that finds an entry under the shard lock
// may take a reference to the cell. The name_watch is owned by the actor's watch list until
// delivered (it then frees itself); unregister_name takes it back when it can (the actor has
// not started halting), else the halt delivers it, finds its token gone, and frees it. The
// registry lives in the actor system and outlives every halt (the system's shutdown halts
// every actor before the registry goes).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "spindle/actor/actor.hpp"
#include "spindle/core/errors.hpp"
#include "spindle/sync/oneshot.hpp"

namespace spindle {

// register_name's usage error: the name is taken, or the actor has a name already. `name` is
// the name asked for; `holder` the id of the actor that has it (0 when the actor being
// registered was the problem: it has a name already, `existing`).
class name_in_use : public usage_error {
 public:
  name_in_use(const std::string& what, std::string asked, actor_id holding_actor,
              std::string existing_name)
      : usage_error(what),
        name(std::move(asked)),
        holder(holding_actor),
        existing(std::move(existing_name)) {}
  std::string name;
  actor_id holder = 0;
  std::string existing;
};

namespace actor_detail {

class name_registry;

// The exit callback that frees a name when its actor halts.
struct name_watch final : exit_callback {
  name_watch(name_registry& owner, std::string registered, std::uint64_t registration) noexcept
      : exit_callback{&name_watch::deliver_to},
        registry(&owner),
        name(std::move(registered)),
        token(registration) {}
  static void deliver_to(exit_callback* self, const exit_reason& reason) noexcept;
  name_registry* registry;
  std::string name;
  std::uint64_t token;
};

class name_registry {
 public:
  name_registry() = default;
  name_registry(const name_registry&) = delete;
  name_registry& operator=(const name_registry&) = delete;
  ~name_registry();

  // Registers `name` for `cell` (the caller holds a reference to it). Throws name_in_use, or
  // usage_error for an empty name.
  void add(actor_cell& cell, std::string_view name);
  // True if `name` was registered to an actor that has not halted (it is not any more).
  bool remove(std::string_view name);
  // The actor registered as `name`, with one reference for the caller; null if none.
  actor_cell* find(std::string_view name) const noexcept;
  // The name of actor `id`, if it has one.
  std::optional<std::string> name_of(actor_id id) const;
  // Every registered name and its actor's id, sorted by name.
  std::vector<std::pair<std::string, actor_id>> list() const;
  // Calls f(id, name) for each actor that has a name, under the writers' lock (diagnostics;
  // f must not call into the registry).
  template <class F>
  void for_each_named(F&& f) const {
    std::lock_guard guard(writers_);
    for (const auto& [id, named] : by_actor_) {
      if (!has_halted(*named.cell)) f(id, named.name);
    }
  }
  // name_watch: the actor registered by `token` halted.
  void halted(const std::string& name, std::uint64_t token) noexcept;

 private:
  struct entry {
    actor_cell* cell;     // alive while the entry is here (see "Lifetime")
    std::uint64_t token;  // this registration's
    name_watch* watch;    // owned by the cell's watch list once added there
  };
  struct name_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  using name_map = std::unordered_map<std::string, entry, name_hash, std::equal_to<>>;
  static constexpr std::size_t shard_count = 16;
  // A cache line each: readers of different shards share no line.
  struct alignas(64) shard {
    mutable std::shared_mutex lock;
    name_map names;  // under lock
  };
  shard& shard_for(std::string_view name) noexcept {
    return shards_[name_hash{}(name) % shard_count];
  }
  const shard& shard_for(std::string_view name) const noexcept {
    return shards_[name_hash{}(name) % shard_count];
  }
  struct named_actor {
    std::string name;
    actor_cell* cell;  // alive while its entry is in a shard (see "Lifetime")
  };
  static bool has_halted(const actor_cell& cell) noexcept;
  // Under writers_ and the shard's exclusive lock: removes the entry and its by_actor_ line.
  void erase_locked(shard& s, name_map::iterator it) noexcept;

  mutable std::mutex writers_;
  std::unordered_map<actor_id, named_actor> by_actor_;  // under writers_
  std::uint64_t next_token_ = 0;                        // under writers_
  shard shards_[shard_count];
};

name_registry& names_of(actor_system& system) noexcept;
// The actor system of the calling runtime worker; usage_error elsewhere.
actor_system& calling_system(const char* what);

}  // namespace actor_detail

// Registers `name` for `actor` (any thread). Throws usage_error for an empty handle or name, or
// an actor of another runtime; name_in_use if the name is taken or the actor has a name;
// actor_unavailable(send_result::halted) if the actor had halted (the name stays free; an actor
// halting while it is being registered frees its name at once); runtime_stopped once the
// runtime shuts down.
void register_name(actor_system& system, std::string_view name, const actor_handle& actor);
inline void register_name(runtime& rt, std::string_view name, const actor_handle& actor) {
  register_name(actors_of(rt), name, actor);
}
// Frees `name` (the actor keeps running); false if it was not registered, or its actor has
// halted (a halted actor has no name).
inline bool unregister_name(actor_system& system, std::string_view name) {
  return actor_detail::names_of(system).remove(name);
}
inline bool unregister_name(runtime& rt, std::string_view name) {
  return unregister_name(actors_of(rt), name);
}

// The actor registered as `name`, untyped; an empty handle if none.
inline actor_handle whereis(actor_system& system, std::string_view name) {
  return actor_handle::adopt(actor_detail::names_of(system).find(name));
}
inline actor_handle whereis(runtime& rt, std::string_view name) {
  return whereis(actors_of(rt), name);
}
// Typed: an empty ref if there is no such name; usage_error if its actor's message type is not
// M (a wrong type is a bug, an absent name a state).
template <class M>
actor_ref<M> whereis(actor_system& system, std::string_view name) {
  actor_detail::actor_cell* cell = actor_detail::names_of(system).find(name);
  if (cell == nullptr) return actor_ref<M>{};
  // The reference find took becomes the ref's (as<M>() would take and drop another).
  if (*cell->vtable->message_type != typeid(M)) {
    cell->release();
    throw usage_error("spindle: whereis<M>/send_to<M>: the named actor's message type is not M");
  }
  return actor_ref<M>::adopt(cell);
}
template <class M>
actor_ref<M> whereis(runtime& rt, std::string_view name) {
  return whereis<M>(actors_of(rt), name);
}
// From a worker of a runtime (a handler, a task): that runtime's names.
template <class M>
actor_ref<M> whereis(std::string_view name) {
  return whereis<M>(actor_detail::calling_system("spindle: whereis(name) outside a runtime worker"),
                    name);
}

// Sends to the actor registered as `name`: send_result::no_such_name if there is none (the
// message is dropped); usage_error if its message type is not M.
template <class M>
send_result send_to(actor_system& system, std::string_view name, M message) {
  const actor_ref<M> target = whereis<M>(system, name);
  if (!target) return send_result::no_such_name;
  return target.send(std::move(message));
}
template <class M>
send_result send_to(runtime& rt, std::string_view name, M message) {
  return send_to<M>(actors_of(rt), name, std::move(message));
}
template <class M>
send_result send_to(std::string_view name, M message) {
  return send_to<M>(actor_detail::calling_system("spindle: send_to(name) outside a runtime worker"),
                    name, std::move(message));
}

// monitor_actor for a name: the exit reason of the actor registered as `name` now; exit_kind::
// no_actor at once if there is none (Erlang's noproc). The watch follows the actor, not the
// name: unregistering or re-registering the name later changes nothing.
inline oneshot_receiver<exit_reason> monitor_name(actor_system& system, std::string_view name) {
  const actor_handle target = whereis(system, name);
  if (target) return monitor_actor(target);
  auto [sender, receiver] = oneshot<exit_reason>();
  sender.send(exit_reason{exit_kind::no_actor, {}});
  return std::move(receiver);
}
inline oneshot_receiver<exit_reason> monitor_name(runtime& rt, std::string_view name) {
  return monitor_name(actors_of(rt), name);
}

namespace actor_detail {
// spawn_registered's preparation: the name, taken before anyone can run the actor. whereis
// may find the cell from then on, before its home has adopted it: a send then wakes it as it
// would wake an actor spawned idle elsewhere (actor_scheduler::wake homes it; the late adopt
// message is stale), and it may even run and halt before spawn_registered returns; so
// spawn_prepared lists the cell and takes the returned ref's reference before `prepare` (the
// attack found a halted cell left listed, then freed, when that came after).
struct name_preparation {
  actor_system& system;
  std::string_view name;
  void operator()(actor_cell& cell) const { names_of(system).add(cell, name); }
};
}  // namespace actor_detail

// Spawns a B registered as `name`, in one step (OTP's gen_server:start({local, Name}, ...)):
// the actor has its name before it handles anything (on_start included), and if the name is
// taken (name_in_use) or empty (usage_error) there is no actor: the behaviour is destroyed
// without on_start or on_stop. Messages sent to the name from the moment it is registered are
// all delivered, exactly once.
template <actor_behaviour B, class... A>
actor_ref<typename B::message_type> spawn_registered(runtime& rt, std::string_view name,
                                                     const spawn_options& options, A&&... args) {
  actor_system& system = actors_of(rt);
  return actor_detail::spawn_prepared<B>(system, options,
                                         actor_detail::name_preparation{system, name},
                                         std::forward<A>(args)...);
}
template <actor_behaviour B, class... A>
  requires(!actor_detail::starts_with_options<A...>)
actor_ref<typename B::message_type> spawn_registered(runtime& rt, std::string_view name,
                                                     A&&... args) {
  return spawn_registered<B>(rt, name, spawn_options{}, std::forward<A>(args)...);
}

// The name of `actor`, if it has one; every registered name with its actor's id, by name
// (actors that have halted left out).
std::optional<std::string> registered_name(actor_system& system, const actor_handle& actor);
inline std::optional<std::string> registered_name(runtime& rt, const actor_handle& actor) {
  return registered_name(actors_of(rt), actor);
}
inline std::vector<std::pair<std::string, actor_id>> registered_names(actor_system& system) {
  return actor_detail::names_of(system).list();
}
inline std::vector<std::pair<std::string, actor_id>> registered_names(runtime& rt) {
  return registered_names(actors_of(rt));
}

}  // namespace spindle
