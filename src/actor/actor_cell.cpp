// Sending, references, links and monitors of the type-erased actor (actor_cell.hpp has the
// states and invariants W and X that every operation here is justified against).
#include "spindle/actor/actor_cell.hpp"

#include <algorithm>
#include <utility>

#include "spindle/actor/actor_scheduler.hpp"
#include "spindle/core/trace.hpp"

namespace spindle {

const char* to_string(actor_state state) noexcept {
  switch (state) {
    case actor_state::receiving: return "receiving";
    case actor_state::runnable: return "runnable";
    case actor_state::running: return "running";
    case actor_state::halted: return "halted";
  }
  return "?";
}

const char* to_string(exit_kind kind) noexcept {
  switch (kind) {
    case exit_kind::normal: return "normal";
    case exit_kind::crashed: return "crashed";
    case exit_kind::killed: return "killed";
    case exit_kind::shutdown: return "shutdown";
    case exit_kind::linked: return "linked";
    case exit_kind::no_actor: return "no_actor";
  }
  return "?";
}

std::string exit_reason::describe() const {
  std::string text = to_string(kind);
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      text += ": ";
      text += e.what();
    } catch (...) {
      text += ": (not a std::exception)";
    }
  }
  return text;
}

namespace actor_detail {

notification_envelope::notification_envelope(envelope_kind k, actor_id who,
                                             std::uint64_t monitor, exit_reason why)
    : envelope(&notification_envelope::destroy_self, k),
      source(who),
      monitor_id(monitor),
      reason(std::move(why)) {}

void notification_envelope::destroy_self(envelope* e) noexcept {
  delete static_cast<notification_envelope*>(e);
}

actor_cell::actor_cell(actor_system& owner_system, const actor_vtable& table, actor_id identity,
                       std::uint32_t home_executor, std::uint32_t mailbox_capacity,
                       std::uint32_t quantum_reductions, bool is_pinned,
                       core::executor_domain allowed_executors) noexcept
    : vtable(&table),
      system(&owner_system),
      id(identity),
      home(home_executor),
      capacity(mailbox_capacity),
      pinned(is_pinned),
      domain(allowed_executors),
      reductions_left(std::int32_t(quantum_reductions)),
      quantum(quantum_reductions) {}

void actor_cell::release() noexcept {
  // acq_rel: the last owner must see every other owner's writes before freeing (release by
  // each decrement, acquire by the one that reaches zero).
  if (references.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (actor_links* l = links.load(std::memory_order_acquire)) delete l;  // acquire: its CAS
    // acquire: its CAS. Every timer holds a reference on the cell: none is left to use it.
    if (timer_registry* t = timers.load(std::memory_order_acquire)) destroy_timer_registry(t);
    delete handler_stop.load(std::memory_order_acquire);  // acquire: the owner's publication
    vtable->free_cell(*this);
  }
}

namespace {

// Pushes onto the Treiber stack; false if the mailbox is closed (the actor halted).
bool push_envelope(actor_cell& cell, envelope* message) noexcept {
  // Read before the push: once pushed, the owner may handle and free the envelope at once.
  const bool counted = cell.counts_pushes && message->kind == envelope_kind::user;
  // relaxed: the value is only a CAS expectation.
  envelope* head = cell.mailbox.load(std::memory_order_relaxed);
  do {
    if (head == closed_mailbox) return false;
    message->next = head;
    // seq_cst: release publishes the envelope to the owner's acquire exchange; seq_cst orders
    // the push before our load of `state` below (the Dekker pairing with going Receiving).
  } while (!cell.mailbox.compare_exchange_weak(head, message, std::memory_order_seq_cst,
                                               std::memory_order_relaxed));
  if (counted) {
    // relaxed: a diagnostics count (the mailbox length is received - handled).
    cell.messages_received.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

void wake_if_receiving(actor_cell& cell) noexcept {
  actor_state expected = actor_state::receiving;
  // seq_cst: the second half of the Dekker pairing (push, then look at the state); most sends
  // stop here, finding the actor Runnable or Running.
  if (cell.state.load(std::memory_order_seq_cst) != expected) return;
  // seq_cst: the winner of this CAS is the only one that schedules the actor (invariant W).
  if (cell.state.compare_exchange_strong(expected, actor_state::runnable,
                                         std::memory_order_seq_cst)) {
    cell.system->route_wake(&cell);
  }
}

// The body of push_message, with or without its trace event (see push_message).
template <bool traced>
send_result push_message_as(actor_cell& cell, envelope* message) noexcept {
  if (cell.capacity != 0) {
    // relaxed: the counter only bounds the mailbox; the push below publishes the envelope.
    if (cell.queued.fetch_add(1, std::memory_order_relaxed) >= cell.capacity) {
      cell.queued.fetch_sub(1, std::memory_order_relaxed);
      message->destroy(message);
      return send_result::mailbox_full;
    }
  }
  if constexpr (traced) {
    core::trace_record(core::trace_kind::actor_send, cell.id, core::trace_ref(message), 0);
  }
  if (!push_envelope(cell, message)) {
    if (cell.capacity != 0) cell.queued.fetch_sub(1, std::memory_order_relaxed);
    message->destroy(message);  // invariant X: the sender destroys what it could not queue
    return send_result::halted;
  }
  wake_if_receiving(cell);
  return send_result::queued;
}

[[gnu::cold, gnu::noinline]] send_result push_message_traced(actor_cell& cell,
                                                             envelope* message) noexcept {
  return push_message_as<true>(cell, message);
}

}  // namespace

// A leaf on every send's path: the trace test tail-calls a traced copy, so the untraced path
// keeps no registers across a call (core/trace.hpp, "Leaf functions").
send_result push_message(actor_cell& cell, envelope* message) noexcept {
  if (core::trace_active()) [[unlikely]] return push_message_traced(cell, message);
  return push_message_as<false>(cell, message);
}

void wake_for_owner_work(actor_cell& cell) noexcept { wake_if_receiving(cell); }

void push_system_message(actor_cell& cell, envelope* message) noexcept {
  if (!push_envelope(cell, message)) {
    message->destroy(message);
    return;
  }
  wake_if_receiving(cell);
}

namespace {

actor_links& links_of(actor_cell& cell) {
  // acquire: pairs with the release CAS below.
  actor_links* existing = cell.links.load(std::memory_order_acquire);
  if (existing != nullptr) return *existing;
  auto* created = new actor_links();
  // seq_cst: publishes the new object (release), reads a competitor's on failure (acquire), and
  // orders the publication before add_watch's load of the state (see there).
  if (cell.links.compare_exchange_strong(existing, created, std::memory_order_seq_cst)) {
    return *created;
  }
  delete created;
  return *existing;
}

// The target has halted (the caller saw Halted or `closed`, so halt_reason is written and
// visible): the watcher is told its real exit reason, as if it had watched in time.
void notify_now(actor_cell& watcher, const actor_cell& target, std::uint64_t monitor_id) {
  const envelope_kind kind = monitor_id == 0 ? envelope_kind::exit : envelope_kind::down;
  push_system_message(watcher,
                      new notification_envelope(kind, target.id, monitor_id, target.halt_reason));
}

bool has_link(const actor_links& links, const actor_cell& watcher) noexcept {
  return std::any_of(links.watchers.begin(), links.watchers.end(), [&](const watch_entry& e) {
    return e.watcher == &watcher && e.monitor_id == 0;
  });
}

}  // namespace

void add_watch(actor_cell& target, actor_cell& watcher, std::uint64_t monitor_id) {
  actor_links& links = links_of(target);
  {
    std::lock_guard guard(links.lock);
    if (links.closed) {
      notify_now(watcher, target, monitor_id);
      return;
    }
    // Links are a set: linked already (either side may have asked), nothing changes. Each side
    // adds and removes its half of a link under its own lock, and a link is made or unmade only
    // by a running handler of one of the two, so the halves agree when neither is halting.
    if (monitor_id == 0 && has_link(links, watcher)) return;
    watcher.add_reference();
    links.watchers.push_back({&watcher, monitor_id});
  }
  // The target may have halted before its links existed (it then found none to close). links_of's
  // seq_cst CAS and this seq_cst load pair with halt's seq_cst store of watchers_final and links
  // load: if we see it set here, halt either saw no links (we notify) or will close them and find
  // our entry gone (we took it back) or there (it notifies, we do nothing). Either way after the
  // behaviour was destroyed (halt sets the flag after that). Not seeing it, our entry is in the
  // links halt will load.
  if (target.watchers_final.load(std::memory_order_seq_cst)) {
    bool taken_back = false;
    {
      std::lock_guard guard(links.lock);
      if (!links.closed) {
        auto it = std::find_if(links.watchers.begin(), links.watchers.end(), [&](const watch_entry& e) {
          return e.watcher == &watcher && e.monitor_id == monitor_id;
        });
        if (it != links.watchers.end()) {
          links.watchers.erase(it);
          taken_back = true;
        }
      }
    }
    if (taken_back) {
      watcher.release();
      notify_now(watcher, target, monitor_id);
    }
    return;
  }
  if (monitor_id != 0) return;
  // A link goes both ways: the target watches the watcher too. The watcher is the actor whose
  // handler is running (actor_context::link), so it cannot halt meanwhile.
  actor_links& back = links_of(watcher);
  std::lock_guard guard(back.lock);
  if (!back.closed && !has_link(back, target)) {
    target.add_reference();
    back.watchers.push_back({&target, 0});
  }
}

void remove_watch(actor_cell& target, actor_cell& watcher, std::uint64_t monitor_id) noexcept {
  auto erase = [](actor_cell& from, actor_cell& who, std::uint64_t id) {
    actor_links* links = from.links.load(std::memory_order_acquire);  // acquire: its CAS
    if (links == nullptr) return;
    actor_cell* dropped = nullptr;
    {
      std::lock_guard guard(links->lock);
      auto it = std::find_if(links->watchers.begin(), links->watchers.end(),
                             [&](const watch_entry& e) { return e.watcher == &who && e.monitor_id == id; });
      if (it != links->watchers.end()) {
        dropped = it->watcher;
        links->watchers.erase(it);
      }
    }
    if (dropped != nullptr) dropped->release();
  };
  erase(target, watcher, monitor_id);
  if (monitor_id == 0) erase(watcher, target, 0);
}

namespace {
// Under the links' lock: frees the abandoned callbacks (exit_callback) and takes them out of
// the list, then sets the next sweep's length. Freeing a task monitor drops its oneshot sender,
// which takes the oneshot's lock: that lock is never held while taking a links' lock.
void sweep_abandoned_locked(actor_links& links) noexcept {
  const auto kept = std::remove_if(links.watchers.begin(), links.watchers.end(),
                                   [](const watch_entry& e) {
                                     exit_callback* c = e.callback;
                                     if (c == nullptr || c->abandoned == nullptr || !c->abandoned(c)) {
                                       return false;
                                     }
                                     c->discard(c);
                                     return true;
                                   });
  links.watchers.erase(kept, links.watchers.end());
  links.sweep_at = std::max(actor_links::sweep_floor, 2 * links.watchers.size());
}
}  // namespace

void add_exit_callback(actor_cell& target, exit_callback* callback) {
  actor_links& links = links_of(target);
  {
    std::lock_guard guard(links.lock);
    if (!links.closed) {
      if (links.watchers.size() >= links.sweep_at) sweep_abandoned_locked(links);
      links.watchers.push_back({nullptr, 0, callback});
      callback = nullptr;
    }
  }
  if (callback != nullptr) {  // closed: halted, halt_reason written before
    callback->deliver(callback, target.halt_reason);
    return;
  }
  // The same window as add_watch's (see there): halted before its links existed.
  if (!target.watchers_final.load(std::memory_order_seq_cst)) return;
  exit_callback* taken_back = nullptr;
  {
    std::lock_guard guard(links.lock);
    if (!links.closed) {
      auto it = std::find_if(links.watchers.begin(), links.watchers.end(),
                             [&](const watch_entry& e) { return e.callback != nullptr; });
      // Any callback will do: every one registered here is owed the same notification.
      if (it != links.watchers.end()) {
        taken_back = it->callback;
        links.watchers.erase(it);
      }
    }
  }
  if (taken_back != nullptr) taken_back->deliver(taken_back, target.halt_reason);
}

bool remove_exit_callback(actor_cell& target, exit_callback* callback) noexcept {
  actor_links* links = target.links.load(std::memory_order_acquire);  // acquire: links_of's CAS
  if (links == nullptr) return false;
  std::lock_guard guard(links->lock);
  const auto it = std::find_if(links->watchers.begin(), links->watchers.end(),
                               [&](const watch_entry& e) { return e.callback == callback; });
  if (it == links->watchers.end()) return false;
  links->watchers.erase(it);
  return true;
}

}  // namespace actor_detail
}  // namespace spindle
