// Machine topology and CPU affinity (SPEC C4 and C9, seed 000 "CPU affinity").
//
// Who takes part:
//   - machine_topology: the processing units (hardware threads) the process may run on, each
//     labelled with its core, its cache domain (the units sharing one last-level cache), its
//     NUMA node and its core kind (big or little). Made once, by hwloc discovery (discover(),
//     restricted to the process's CPU affinity mask, cached for the process), from an hwloc
//     synthetic description (tests: any machine shape on any machine), or from a hand-written
//     list (tests: hybrid machines, which synthetic descriptions cannot express). Immutable
//     afterwards, so any thread reads it without synchronisation.
//   - affinity_planner: gives each new executor a processing unit according to the policy. The
//     runtime owns one and calls it under its registry mutex (executors are appended one at a
//     time), so it needs no synchronisation of its own.
//   - executor_placement: what one executor was given. Written before the executor is
//     published in the registry, never changed afterwards: readers need no synchronisation
//     beyond the registry's release/acquire.
//   - executor_domain: a set of executors named by NUMA node or core kind (supervisor
//     placement, actor spawn options); membership is a pure function of a placement.
//
// Ids: core, cache_domain and numa_node are dense, [0, count), in hwloc's logical order of the
// units the process may use; os_index is the kernel's CPU number (what sched_setaffinity takes).
//
// Policies (C9). The planner counts claims per unit and always chooses among the units with the
// fewest claims, so every unit is claimed once before any is claimed twice (more executors than
// units wrap around evenly):
//   depth_first:   stay in the NUMA node of the previous executor while it has such a unit;
//                  inside a node, fill one cache domain before the next, and take a core's first
//                  hardware thread before any core's second (SMT siblings last);
//   breadth_first: the NUMA node with the fewest claims, then its cache domain with the fewest,
//                  then its core with the fewest (spread memory bandwidth and caches);
//   random:        a random unit among the least claimed (seeded, so reproducible);
//   none:          no unit: the thread floats and the kernel places it. Its placement still
//                  names the NUMA node / cache domain / core kind when the machine has only one.
// The default policy and why are in docs/design/topology.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace spindle::core {

enum class core_kind : std::uint8_t { big = 0, little = 1 };

struct processing_unit {
  std::uint32_t os_index = 0;      // kernel CPU number
  std::uint32_t core = 0;          // dense core id (SMT siblings share it)
  std::uint32_t cache_domain = 0;  // dense id of the last-level cache shared
  std::uint32_t numa_node = 0;     // dense NUMA node id
  core_kind kind = core_kind::big;
};

class machine_topology {
 public:
  // The units this process may run on (hwloc, intersected with the affinity mask of the calling
  // thread). Discovered on first use and cached for the process; if hwloc fails, or describes
  // another machine (HWLOC_SYNTHETIC, HWLOC_XMLFILE), every allowed CPU is its own core in one
  // cache domain and one node.
  static const machine_topology& discover();
  // An hwloc synthetic description, e.g. "numa:2 l3:2 core:4 pu:2"; throws usage_error if hwloc
  // rejects it. Such a topology names CPUs that may not exist: it never binds threads.
  static machine_topology synthetic(std::string_view description);
  // A hand-made machine; ids must be dense (usage_error otherwise). Never binds threads.
  explicit machine_topology(std::vector<processing_unit> units);

  const std::vector<processing_unit>& units() const noexcept { return units_; }
  std::uint32_t unit_count() const noexcept { return std::uint32_t(units_.size()); }
  std::uint32_t core_count() const noexcept { return cores_; }
  std::uint32_t cache_domain_count() const noexcept { return cache_domains_; }
  std::uint32_t numa_node_count() const noexcept { return numa_nodes_; }
  bool has_core_kind(core_kind kind) const noexcept;
  // True for discovered topologies: os_index values are this machine's CPUs, threads may bind.
  bool binds_threads() const noexcept { return binds_threads_; }

 private:
  machine_topology(std::vector<processing_unit> units, bool binds_threads);
  std::vector<processing_unit> units_;
  std::uint32_t cores_ = 0;
  std::uint32_t cache_domains_ = 0;
  std::uint32_t numa_nodes_ = 0;
  bool binds_threads_ = false;
};

enum class affinity_policy : std::uint8_t { none, depth_first, breadth_first, random };

// "none", "depth-first", "breadth-first", "random" (underscores accepted); nullopt otherwise.
std::optional<affinity_policy> parse_affinity_policy(std::string_view text) noexcept;
const char* to_string(affinity_policy policy) noexcept;

struct executor_placement {
  static constexpr std::uint32_t unknown = ~std::uint32_t(0);
  std::uint32_t unit = unknown;          // index into machine_topology::units(); unknown: floats
  std::uint32_t os_index = unknown;      // the CPU it is bound to (when the topology binds)
  std::uint32_t cache_domain = unknown;  // known when bound, or when the machine has one
  std::uint32_t numa_node = unknown;     // known when bound, or when the machine has one
  std::optional<core_kind> kind;         // known when bound, or when the machine has one kind

  // How far `other` is from this executor for stealing: 0 same cache domain, 1 same NUMA node,
  // 2 anything else (or unknown).
  std::uint32_t distance_to(const executor_placement& other) const noexcept {
    if (cache_domain != unknown && cache_domain == other.cache_domain) return 0;
    if (numa_node != unknown && numa_node == other.numa_node) return 1;
    return 2;
  }
};

class affinity_planner {
 public:
  affinity_planner(const machine_topology& topology, affinity_policy policy,
                   std::uint32_t seed = 1) noexcept;
  // The placement of the next executor (claims a unit unless the policy is none).
  executor_placement next();
  // Gives back the claim of a placement next() returned whose executor was never made.
  void release(const executor_placement& placement) noexcept;
  affinity_policy policy() const noexcept { return policy_; }
  const machine_topology& topology() const noexcept { return *topology_; }

 private:
  executor_placement placement_of(std::uint32_t unit) const noexcept;
  std::uint32_t choose_depth_first() const;
  std::uint32_t choose_breadth_first() const;
  std::uint32_t choose_random();

  const machine_topology* topology_;
  affinity_policy policy_;
  std::uint32_t random_state_;
  std::vector<std::uint32_t> claims_;  // per unit
  std::uint32_t last_numa_node_ = executor_placement::unknown;
};

// A set of executors: all of them, those on one NUMA node, or those on one core kind.
struct executor_domain {
  enum class kind : std::uint8_t { any, numa_node, core_kind };
  kind where = kind::any;
  std::uint32_t value = 0;

  static executor_domain any() noexcept { return {}; }
  static executor_domain on_numa_node(std::uint32_t node) noexcept {
    return {kind::numa_node, node};
  }
  static executor_domain on_core_kind(spindle::core::core_kind k) noexcept {
    return {kind::core_kind, std::uint32_t(k)};
  }
  bool contains(const executor_placement& placement) const noexcept {
    switch (where) {
      case kind::any: return true;
      case kind::numa_node: return placement.numa_node == value;
      case kind::core_kind:
        return placement.kind.has_value() && std::uint32_t(*placement.kind) == value;
    }
    return false;
  }
};

// Binds the calling thread to one CPU; false if the kernel refuses (the thread then floats).
bool bind_current_thread_to_cpu(std::uint32_t os_index) noexcept;

}  // namespace spindle::core
