// registry: where the parts of a runtime that the task layer does not know (actors and their
// supervisors, dispatchers, fork-join, the I/O reactors, anything a user adds) hand the
// diagnostics their state (docs/design/diagnostics.md).
//
// Who takes part
//   - contributors: add a snapshot section (a named JSON value) and/or a metrics writer
//     (Prometheus text) when they attach to a host, and drop the registration when they detach;
//   - readers: the snapshot, the metrics exposition and the diagnostics server, on any thread
//     (the server's own, a test's), at any time, while the host runs.
//
// Concurrency contract. One mutex guards the list, and the readers call the writers under it,
// so removing a registration (the registration's destructor) waits for a reader in progress and
// no writer runs after its registration is gone: a contributor may capture `this`. A writer must
// not add or remove registrations, and a contributor must not drop its registration while
// holding a lock its writer takes. Writers run on the reader's thread, concurrently with the
// host's threads: they read only what is safe to read from another thread (atomics, or state
// under the contributor's own lock).
//
// Lifetime. The registry lives in the host (task_host) and outlives every contributor, whose
// registrations are dropped before the host's destructor runs (the host's shutdown order).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/diagnostics/json_writer.hpp"

namespace spindle::core {
class trace_recorder;
}

namespace spindle::diagnostics {

class registry {
 public:
  // Writes one JSON value (an object or an array) describing the contributor.
  using snapshot_writer = std::function<void(json_writer&)>;
  // Appends Prometheus text exposition lines (# HELP, # TYPE and samples) to the string.
  using metrics_writer = std::function<void(std::string&)>;

  // Owns one entry of the registry; the entry goes when it is destroyed or reset.
  class registration {
   public:
    registration() = default;
    registration(registration&& other) noexcept;
    registration& operator=(registration&& other) noexcept;
    registration(const registration&) = delete;
    registration& operator=(const registration&) = delete;
    ~registration() { reset(); }
    void reset() noexcept;
    explicit operator bool() const noexcept { return owner_ != nullptr; }

   private:
    friend class registry;
    registration(registry* owner, std::uint64_t id) noexcept : owner_(owner), id_(id) {}
    registry* owner_ = nullptr;
    std::uint64_t id_ = 0;
  };

  registry() = default;
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  // `name` becomes the member's key in the snapshot's "sections" object; several contributors
  // may use the same name (their values are then gathered in an array under it).
  [[nodiscard]] registration add_snapshot_section(std::string name, snapshot_writer writer);
  // One element of the array section `name` (several contributors of one kind, each
  // dispatcher say): the section is an array even with a single element.
  [[nodiscard]] registration add_snapshot_item(std::string name, snapshot_writer writer);
  [[nodiscard]] registration add_metrics(metrics_writer writer);

  // Writes {"name": value, ...} for every snapshot section, leaving out those named in `except`
  // (snapshot_json puts "executors" and "tasks" at its top level).
  void write_snapshot_sections(json_writer& out,
                               std::initializer_list<std::string_view> except = {}) const;
  // Writes the value of the section(s) called `name` (as write_snapshot_sections would under
  // that key); false, writing nothing, when there is none.
  bool write_snapshot_section(std::string_view name, json_writer& out) const;
  // Appends every metrics writer's lines.
  void write_metrics(std::string& out) const;

  // G3 tracing: the recorder of the host's trace events (core/trace.hpp), read by
  // diagnostics::trace_json and switched by diagnostics::set_tracing (trace_export.hpp). Set by
  // the host when it is built; null where the host records no trace. Shared: a reader holding it
  // may outlive the host's core.
  void set_trace_source(std::shared_ptr<core::trace_recorder> recorder);
  std::shared_ptr<core::trace_recorder> trace_source() const;

 private:
  struct entry {
    std::uint64_t id;
    std::string name;  // empty for metrics writers
    snapshot_writer snapshot;
    metrics_writer metrics;
    bool item = false;  // add_snapshot_item: always inside an array
  };
  void remove(std::uint64_t id) noexcept;

  mutable std::mutex mutex_;
  std::vector<entry> entries_;  // guarded by mutex_
  std::uint64_t next_id_ = 1;   // guarded by mutex_
  std::shared_ptr<core::trace_recorder> trace_source_;  // guarded by mutex_
};

}  // namespace spindle::diagnostics
