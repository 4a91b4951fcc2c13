#include "spindle/diagnostics/registry.hpp"

#include <algorithm>
#include <utility>

namespace spindle::diagnostics {

registry::registration::registration(registration&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), id_(other.id_) {}

registry::registration& registry::registration::operator=(registration&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

void registry::registration::reset() noexcept {
  if (registry* owner = std::exchange(owner_, nullptr)) owner->remove(id_);
}

registry::registration registry::add_snapshot_section(std::string name, snapshot_writer writer) {
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_id_++;
  entries_.push_back(entry{id, std::move(name), std::move(writer), {}});
  return registration(this, id);
}

registry::registration registry::add_snapshot_item(std::string name, snapshot_writer writer) {
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_id_++;
  entries_.push_back(entry{id, std::move(name), std::move(writer), {}, true});
  return registration(this, id);
}

registry::registration registry::add_metrics(metrics_writer writer) {
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_id_++;
  entries_.push_back(entry{id, {}, {}, std::move(writer)});
  return registration(this, id);
}

void registry::remove(std::uint64_t id) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(entries_, [id](const entry& e) { return e.id == id; });
}

bool registry::write_snapshot_section(std::string_view name, json_writer& out) const {
  std::lock_guard lock(mutex_);
  std::size_t same_name = 0;
  bool items = false;
  for (const entry& e : entries_) {
    if (e.snapshot && e.name == name) {
      ++same_name;
      items = items || e.item;
    }
  }
  if (same_name == 0) return false;
  if (same_name > 1 || items) out.begin_array();
  for (const entry& e : entries_) {
    if (e.snapshot && e.name == name) e.snapshot(out);
  }
  if (same_name > 1 || items) out.end_array();
  return true;
}

void registry::write_snapshot_sections(json_writer& out,
                                       std::initializer_list<std::string_view> except) const {
  std::lock_guard lock(mutex_);
  out.begin_object();
  // Sections sharing a name are gathered in an array under it, in registration order.
  std::vector<bool> written(entries_.size(), false);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].snapshot || written[i]) continue;
    if (std::find(except.begin(), except.end(), std::string_view(entries_[i].name)) !=
        except.end()) {
      continue;
    }
    std::size_t same_name = 0;
    bool items = false;
    for (std::size_t j = i; j < entries_.size(); ++j) {
      if (entries_[j].snapshot && entries_[j].name == entries_[i].name) {
        ++same_name;
        items = items || entries_[j].item;
      }
    }
    out.key(entries_[i].name);
    if (same_name == 1 && !items) {
      entries_[i].snapshot(out);
      written[i] = true;
      continue;
    }
    out.begin_array();
    for (std::size_t j = i; j < entries_.size(); ++j) {
      if (entries_[j].snapshot && entries_[j].name == entries_[i].name) {
        entries_[j].snapshot(out);
        written[j] = true;
      }
    }
    out.end_array();
  }
  out.end_object();
}

void registry::write_metrics(std::string& out) const {
  std::lock_guard lock(mutex_);
  for (const entry& e : entries_) {
    if (e.metrics) e.metrics(out);
  }
}

void registry::set_trace_source(std::shared_ptr<core::trace_recorder> recorder) {
  std::lock_guard lock(mutex_);
  trace_source_ = std::move(recorder);
}

std::shared_ptr<core::trace_recorder> registry::trace_source() const {
  std::lock_guard lock(mutex_);
  return trace_source_;
}

}  // namespace spindle::diagnostics
