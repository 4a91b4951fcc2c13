// The snapshot document: see include/spindle/diagnostics/snapshot.hpp.
#include "spindle/diagnostics/snapshot.hpp"

#include "spindle/core/clock.hpp"

namespace spindle::diagnostics {

std::string snapshot_json(const registry& sections) {
  // The previous document's size (per thread): a large snapshot grows its string once.
  thread_local std::size_t last_size = 0;
  std::string out;
  out.reserve(last_size + last_size / 8);
  json_writer json(out);
  json.begin_object();
  json.member("taken_at_ns", core::monotonic_nanoseconds());
  for (const char* top : {"executors", "tasks"}) {
    json.key(top);
    if (!sections.write_snapshot_section(top, json)) json.begin_array().end_array();
  }
  json.key("sections");
  sections.write_snapshot_sections(json, {"executors", "tasks"});
  json.end_object();
  last_size = out.size();
  return out;
}

}  // namespace spindle::diagnostics
