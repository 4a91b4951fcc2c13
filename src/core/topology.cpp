// Topology discovery (hwloc) and the affinity planner; the design is in topology.hpp.
#include "spindle/core/topology.hpp"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <string>
#include <thread>
#include <tuple>

#include "spindle/core/clock.hpp"
#include "spindle/core/errors.hpp"

namespace spindle::core {
namespace {

// Gives dense ids to keys in order of first appearance.
template <class Key>
class dense_ids {
 public:
  std::uint32_t operator()(Key key) {
    auto [it, inserted] = ids_.try_emplace(key, std::uint32_t(ids_.size()));
    return it->second;
  }

 private:
  std::map<Key, std::uint32_t> ids_;
};

// Owns one hwloc topology for the duration of a discovery.
class hwloc_session {
 public:
  hwloc_session() { ok_ = hwloc_topology_init(&topology_) == 0; }
  ~hwloc_session() {
    if (ok_) hwloc_topology_destroy(topology_);
  }
  hwloc_session(const hwloc_session&) = delete;
  hwloc_session& operator=(const hwloc_session&) = delete;
  bool ok() const noexcept { return ok_; }
  hwloc_topology_t get() const noexcept { return topology_; }

 private:
  hwloc_topology_t topology_{};
  bool ok_ = false;
};

// The core kind of a unit: with two or more ranked kinds, the highest-ranked (most performant)
// is big and every other is little; unranked or homogeneous machines are all big.
core_kind kind_of(hwloc_topology_t topology, hwloc_obj_t unit, int kind_count) {
  if (kind_count < 2) return core_kind::big;
  const int index = hwloc_cpukinds_get_by_cpuset(topology, unit->cpuset, 0);
  if (index < 0) return core_kind::big;
  int efficiency = -1;
  if (hwloc_cpukinds_get_info(topology, unsigned(index), nullptr, &efficiency, nullptr, nullptr,
                              0) != 0 ||
      efficiency < 0) {
    return core_kind::big;  // hwloc could not rank the kinds
  }
  return index == kind_count - 1 ? core_kind::big : core_kind::little;
}

// Every processing unit of a loaded topology that `allowed` accepts (all when null).
std::vector<processing_unit> units_of(hwloc_topology_t topology, hwloc_const_bitmap_t allowed) {
  dense_ids<std::uint64_t> cores;
  dense_ids<std::uint64_t> cache_domains;
  dense_ids<int> numa_nodes;
  const int kind_count = hwloc_cpukinds_get_nr(topology, 0);
  std::vector<processing_unit> units;
  const int count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t unit = hwloc_get_obj_by_type(topology, HWLOC_OBJ_PU, unsigned(i));
    if (unit == nullptr) continue;
    if (allowed != nullptr && !hwloc_bitmap_isset(allowed, unit->os_index)) continue;
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topology, HWLOC_OBJ_CORE, unit);
    hwloc_obj_t last_level_cache = nullptr;
    for (hwloc_obj_t parent = unit->parent; parent != nullptr; parent = parent->parent) {
      if (hwloc_obj_type_is_cache(parent->type)) last_level_cache = parent;
    }
    processing_unit u;
    u.os_index = unit->os_index;
    u.core = cores(core != nullptr ? core->gp_index : unit->gp_index);
    u.cache_domain = cache_domains(last_level_cache != nullptr ? last_level_cache->gp_index : 0);
    // The unit's nodeset lists every node attached at or above it; the first (lowest OS index)
    // is its ordinary memory on the machines we know (CPU-less HBM/CXL nodes come later).
    u.numa_node = numa_nodes(unit->nodeset != nullptr ? hwloc_bitmap_first(unit->nodeset) : 0);
    u.kind = kind_of(topology, unit, kind_count);
    units.push_back(u);
  }
  return units;
}

// hwloc failed (or describes another machine): every CPU of the calling thread's affinity
// mask is its own core, in one cache domain and one node. The mask is read with a size that
// grows until the kernel accepts it (machines with more than CPU_SETSIZE CPUs).
std::vector<processing_unit> flat_units() {
  std::vector<processing_unit> units;
  for (int cpus = CPU_SETSIZE; cpus <= (1 << 20) && units.empty(); cpus *= 2) {
    cpu_set_t* allowed = CPU_ALLOC(cpus);
    const std::size_t size = CPU_ALLOC_SIZE(cpus);
    if (allowed == nullptr) break;
    if (sched_getaffinity(0, size, allowed) == 0) {
      for (int cpu = 0; cpu < cpus; ++cpu) {
        if (!CPU_ISSET_S(cpu, size, allowed)) continue;
        processing_unit u;
        u.os_index = std::uint32_t(cpu);
        u.core = std::uint32_t(units.size());
        units.push_back(u);
      }
      CPU_FREE(allowed);
      break;
    }
    CPU_FREE(allowed);
    if (errno != EINVAL) break;
  }
  if (units.empty()) {
    for (std::uint32_t cpu = 0; cpu < std::max(1u, std::thread::hardware_concurrency()); ++cpu) {
      processing_unit u;
      u.os_index = cpu;
      u.core = cpu;
      units.push_back(u);
    }
  }
  return units;
}

// One more than the highest id in `field`; usage_error if an id could not be dense (an id at or
// above the number of units), before anything is sized from it.
std::uint32_t count_of(const std::vector<processing_unit>& units,
                       std::uint32_t processing_unit::*field) {
  std::uint32_t highest = 0;
  for (const processing_unit& u : units) {
    if (u.*field >= units.size()) throw usage_error("spindle: machine topology ids must be dense");
    highest = std::max(highest, u.*field + 1);
  }
  return highest;
}

}  // namespace

machine_topology::machine_topology(std::vector<processing_unit> units)
    : machine_topology(std::move(units), false) {}

machine_topology::machine_topology(std::vector<processing_unit> units, bool binds_threads)
    : units_(std::move(units)), binds_threads_(binds_threads) {
  if (units_.empty()) throw usage_error("spindle: a machine topology needs at least one unit");
  cores_ = count_of(units_, &processing_unit::core);
  cache_domains_ = count_of(units_, &processing_unit::cache_domain);
  numa_nodes_ = count_of(units_, &processing_unit::numa_node);
  // Dense ids: every id below each count is used by some unit.
  for (auto [field, count] : {std::pair{&processing_unit::core, cores_},
                              std::pair{&processing_unit::cache_domain, cache_domains_},
                              std::pair{&processing_unit::numa_node, numa_nodes_}}) {
    std::vector<bool> seen(count, false);
    for (const processing_unit& u : units_) seen[u.*field] = true;
    if (std::find(seen.begin(), seen.end(), false) != seen.end()) {
      throw usage_error("spindle: machine topology ids must be dense");
    }
  }
}

const machine_topology& machine_topology::discover() {
  // Discovered once: reading sysfs through hwloc takes milliseconds, and tests create
  // thousands of runtimes. Static initialisation is thread-safe.
  static const machine_topology machine = [] {
    hwloc_session session;
    std::vector<processing_unit> units;
    // hwloc honours HWLOC_SYNTHETIC / HWLOC_XMLFILE: a topology that is not this system's names
    // CPUs we cannot bind to, so it is not used for discovery.
    if (session.ok() && hwloc_topology_load(session.get()) == 0 &&
        hwloc_topology_is_thissystem(session.get()) != 0) {
      // The calling thread's binding (taskset, cgroups), in hwloc's bitmap of any size.
      hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
      if (allowed != nullptr) {
        if (hwloc_get_cpubind(session.get(), allowed, HWLOC_CPUBIND_THREAD) != 0) {
          hwloc_bitmap_copy(allowed, hwloc_topology_get_allowed_cpuset(session.get()));
        }
        units = units_of(session.get(), allowed);
        hwloc_bitmap_free(allowed);
      }
    }
    if (units.empty()) units = flat_units();
    return machine_topology(std::move(units), true);
  }();
  return machine;
}

machine_topology machine_topology::synthetic(std::string_view description) {
  hwloc_session session;
  const std::string text(description);
  if (!session.ok() || hwloc_topology_set_synthetic(session.get(), text.c_str()) != 0 ||
      hwloc_topology_load(session.get()) != 0) {
    throw usage_error("spindle: hwloc rejects the synthetic topology '" + text + "'");
  }
  return machine_topology(units_of(session.get(), nullptr), false);
}

bool machine_topology::has_core_kind(core_kind kind) const noexcept {
  return std::any_of(units_.begin(), units_.end(),
                     [kind](const processing_unit& u) { return u.kind == kind; });
}

std::optional<affinity_policy> parse_affinity_policy(std::string_view text) noexcept {
  std::string name(text);
  std::replace(name.begin(), name.end(), '_', '-');
  if (name == "none") return affinity_policy::none;
  if (name == "depth-first") return affinity_policy::depth_first;
  if (name == "breadth-first") return affinity_policy::breadth_first;
  if (name == "random") return affinity_policy::random;
  return std::nullopt;
}

const char* to_string(affinity_policy policy) noexcept {
  switch (policy) {
    case affinity_policy::none: return "none";
    case affinity_policy::depth_first: return "depth-first";
    case affinity_policy::breadth_first: return "breadth-first";
    case affinity_policy::random: return "random";
  }
  return "?";
}

affinity_planner::affinity_planner(const machine_topology& topology, affinity_policy policy,
                                   std::uint32_t seed) noexcept
    : topology_(&topology),
      policy_(policy),
      random_state_(seed == 0 ? 1 : seed),
      claims_(topology.unit_count(), 0) {}

executor_placement affinity_planner::placement_of(std::uint32_t unit) const noexcept {
  const processing_unit& u = topology_->units()[unit];
  executor_placement placement;
  placement.unit = unit;
  placement.os_index = topology_->binds_threads() ? u.os_index : executor_placement::unknown;
  placement.cache_domain = u.cache_domain;
  placement.numa_node = u.numa_node;
  placement.kind = u.kind;
  return placement;
}

executor_placement affinity_planner::next() {
  if (policy_ == affinity_policy::none) {
    // A floating thread: only what holds for every unit is known about it.
    executor_placement placement;
    if (topology_->cache_domain_count() == 1) placement.cache_domain = 0;
    if (topology_->numa_node_count() == 1) placement.numa_node = 0;
    const bool big = topology_->has_core_kind(core_kind::big);
    const bool little = topology_->has_core_kind(core_kind::little);
    if (big != little) placement.kind = big ? core_kind::big : core_kind::little;
    return placement;
  }
  std::uint32_t unit = 0;
  switch (policy_) {
    case affinity_policy::depth_first: unit = choose_depth_first(); break;
    case affinity_policy::breadth_first: unit = choose_breadth_first(); break;
    case affinity_policy::random: unit = choose_random(); break;
    case affinity_policy::none: break;
  }
  ++claims_[unit];
  last_numa_node_ = topology_->units()[unit].numa_node;
  return placement_of(unit);
}

void affinity_planner::release(const executor_placement& placement) noexcept {
  if (placement.unit != executor_placement::unknown && claims_[placement.unit] > 0) {
    --claims_[placement.unit];
  }
}

namespace {

// Claims summed per core, cache domain and NUMA node, and the fewest claims of any unit.
struct claim_totals {
  std::vector<std::uint32_t> per_core, per_cache_domain, per_numa_node;
  std::uint32_t fewest = ~std::uint32_t(0);

  claim_totals(const machine_topology& topology, const std::vector<std::uint32_t>& claims)
      : per_core(topology.core_count(), 0),
        per_cache_domain(topology.cache_domain_count(), 0),
        per_numa_node(topology.numa_node_count(), 0) {
    for (std::uint32_t i = 0; i < topology.unit_count(); ++i) {
      const processing_unit& u = topology.units()[i];
      per_core[u.core] += claims[i];
      per_cache_domain[u.cache_domain] += claims[i];
      per_numa_node[u.numa_node] += claims[i];
      fewest = std::min(fewest, claims[i]);
    }
  }
};

// The least-claimed unit that `better(a, b)` ranks first (ties: the lower unit index).
template <class Better>
std::uint32_t best_candidate(const machine_topology& topology,
                             const std::vector<std::uint32_t>& claims, std::uint32_t fewest,
                             Better better) {
  std::uint32_t best = ~std::uint32_t(0);
  for (std::uint32_t i = 0; i < topology.unit_count(); ++i) {
    if (claims[i] != fewest) continue;
    if (best == ~std::uint32_t(0) || better(topology.units()[i], topology.units()[best])) best = i;
  }
  return best;
}

}  // namespace

std::uint32_t affinity_planner::choose_depth_first() const {
  const claim_totals totals(*topology_, claims_);
  // Seed 000's order: the node of the previous executor, then a node where executors already
  // are, then any node; inside it the fullest cache domain (fill one before the next), then the
  // emptiest core (a core's first hardware thread before any core's second).
  auto rank = [&](const processing_unit& u) {
    const bool previous_node = u.numa_node == last_numa_node_;
    return std::tuple{!previous_node, ~totals.per_numa_node[u.numa_node], u.numa_node,
                      ~totals.per_cache_domain[u.cache_domain], u.cache_domain,
                      totals.per_core[u.core]};
  };
  return best_candidate(*topology_, claims_, totals.fewest,
                        [&](const processing_unit& a, const processing_unit& b) {
                          return rank(a) < rank(b);
                        });
}

std::uint32_t affinity_planner::choose_breadth_first() const {
  const claim_totals totals(*topology_, claims_);
  auto rank = [&](const processing_unit& u) {
    return std::tuple{totals.per_numa_node[u.numa_node], u.numa_node,
                      totals.per_cache_domain[u.cache_domain], u.cache_domain,
                      totals.per_core[u.core]};
  };
  return best_candidate(*topology_, claims_, totals.fewest,
                        [&](const processing_unit& a, const processing_unit& b) {
                          return rank(a) < rank(b);
                        });
}

std::uint32_t affinity_planner::choose_random() {
  const std::uint32_t fewest = *std::min_element(claims_.begin(), claims_.end());
  const auto candidates = std::uint32_t(std::count(claims_.begin(), claims_.end(), fewest));
  std::uint32_t pick = next_xorshift(random_state_) % candidates;
  for (std::uint32_t i = 0; i < claims_.size(); ++i) {
    if (claims_[i] == fewest && pick-- == 0) return i;
  }
  return 0;
}

bool bind_current_thread_to_cpu(std::uint32_t os_index) noexcept {
  if (os_index >= (1u << 20)) return false;
  cpu_set_t* set = CPU_ALLOC(os_index + 1);  // sized for the CPU, beyond CPU_SETSIZE too
  if (set == nullptr) return false;
  const std::size_t size = CPU_ALLOC_SIZE(os_index + 1);
  CPU_ZERO_S(size, set);
  CPU_SET_S(os_index, size, set);
  const bool bound = sched_setaffinity(0, size, set) == 0;
  CPU_FREE(set);
  return bound;
}

}  // namespace spindle::core
