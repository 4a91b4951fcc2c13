// The store: the keys are split among a few shard actors, each registered under a name
// ("kv.store.0", "kv.store.1", ...) and reached by typed calls (spindle::call_message).
//
//   spindle::actor_ref<kv::store_message> shard = spindle::whereis<kv::store_message>(
//       kv::shard_name(kv::shard_of(key, shard_count)));
//   kv::get_request question{key};
//   kv::lookup found = co_await shard.call(std::move(question));   // found.found, found.value
//
// Who takes part: the shard actors (one per shard, children of the server's supervisor, which
// restarts a shard that crashes or is killed); the sessions, which look the shard up by name for
// every request (a restarted shard is a new actor under the same name) and call it.
//
// State that must outlive a crash lives outside the process that may crash (OTP's ETS table
// with an heir): each shard's entries are in a `table` that the server creates once and hands to
// every incarnation of that shard. A shard's handlers are synchronous: a request is carried out
// and answered in one handler, so a kill (which takes effect between handlers) never leaves a
// table half-changed, and a request answered is a request applied. Incarnations never overlap:
// the supervisor starts the next only after the previous one's exit reached it, so the table has
// one user at a time and needs no lock. What a crash loses is the requests still queued in the
// dead shard's mailbox: they are dropped unanswered, and their callers see channel_closed.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>

#include <spindle/spindle.hpp>

namespace kv {

// One shard's entries; created by the server, shared by the incarnations of that shard.
struct table {
  std::unordered_map<std::string, std::string> entries;
};

// The requests; each names its reply type (what call() yields).
struct stored {};
struct set_request {
  std::string key;
  std::string value;
  using reply = stored;
};
struct lookup {
  bool found = false;
  std::string value;
};
struct get_request {
  std::string key;
  using reply = lookup;
};
struct del_request {
  std::string key;
  using reply = bool;  // whether the key was there
};

using store_message =
    std::variant<spindle::call_message<set_request>, spindle::call_message<get_request>,
                 spindle::call_message<del_request>>;

inline std::string shard_name(std::size_t shard) { return "kv.store." + std::to_string(shard); }
inline std::size_t shard_of(std::string_view key, std::size_t shard_count) {
  return std::hash<std::string_view>{}(key) % shard_count;
}

class store_shard {
 public:
  using message_type = store_message;

  explicit store_shard(std::shared_ptr<table> data) : data_(std::move(data)) {}

  void receive(message_type& message) {
    auto& entries = data_->entries;
    if (auto* set = std::get_if<spindle::call_message<set_request>>(&message)) {
      entries.insert_or_assign(std::move(set->request.key), std::move(set->request.value));
      set->reply(stored{});
    } else if (auto* get = std::get_if<spindle::call_message<get_request>>(&message)) {
      const auto found = entries.find(get->request.key);
      get->reply(found == entries.end() ? lookup{} : lookup{true, found->second});
    } else {
      auto& del = std::get<spindle::call_message<del_request>>(message);
      del.reply(entries.erase(del.request.key) == 1);
    }
  }

 private:
  std::shared_ptr<table> data_;
};

}  // namespace kv
