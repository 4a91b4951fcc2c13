// Topology discovery and the affinity policies (topology.hpp): synthetic and hand-made machines
// for the policies' orders, the real machine for binding.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "spindle/core/errors.hpp"
#include "spindle/core/topology.hpp"
#include "spindle/spindle.hpp"

namespace {

using spindle::core::affinity_planner;
using spindle::core::affinity_policy;
using spindle::core::core_kind;
using spindle::core::executor_domain;
using spindle::core::executor_placement;
using spindle::core::machine_topology;
using spindle::core::processing_unit;

// Two NUMA nodes, each with two last-level caches of two cores with two hardware threads.
const char* const two_node_machine = "numa:2 l3:2 core:2 pu:2";

std::vector<executor_placement> plan(const machine_topology& machine, affinity_policy policy,
                                     std::uint32_t count, std::uint32_t seed = 1) {
  affinity_planner planner(machine, policy, seed);
  std::vector<executor_placement> placements;
  for (std::uint32_t i = 0; i < count; ++i) placements.push_back(planner.next());
  return placements;
}

TEST(Topology, SyntheticMachineIsLabelledDensely) {
  const machine_topology machine = machine_topology::synthetic(two_node_machine);
  EXPECT_EQ(machine.unit_count(), 16u);
  EXPECT_EQ(machine.core_count(), 8u);
  EXPECT_EQ(machine.cache_domain_count(), 4u);
  EXPECT_EQ(machine.numa_node_count(), 2u);
  EXPECT_FALSE(machine.binds_threads());
  for (std::uint32_t i = 0; i < machine.unit_count(); ++i) {
    const processing_unit& u = machine.units()[i];
    EXPECT_EQ(u.core, i / 2);
    EXPECT_EQ(u.cache_domain, i / 4);
    EXPECT_EQ(u.numa_node, i / 8);
    EXPECT_EQ(u.kind, core_kind::big);
  }
}

TEST(Topology, BadDescriptionsAreUsageErrors) {
  EXPECT_THROW(machine_topology::synthetic("no such thing:3"), spindle::usage_error);
  EXPECT_THROW(machine_topology(std::vector<processing_unit>{}), spindle::usage_error);
  // Ids must be dense: node 1 without node 0; an id far beyond the unit count is refused
  // before anything is sized from it.
  EXPECT_THROW(machine_topology({{0, 0, 0, 1, core_kind::big}}), spindle::usage_error);
  EXPECT_THROW(machine_topology({{0, 0xffffffffu, 0, 0, core_kind::big}, {1, 0, 0, 0, core_kind::big}}),
               spindle::usage_error);
}

TEST(Topology, DiscoveredMachineIsWhatThisProcessMayUse) {
  const machine_topology& machine = machine_topology::discover();
  ASSERT_GE(machine.unit_count(), 1u);
  EXPECT_TRUE(machine.binds_threads());
  EXPECT_TRUE(machine.has_core_kind(core_kind::big));
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::set<std::uint32_t> seen;
  for (const processing_unit& u : machine.units()) {
    EXPECT_TRUE(CPU_ISSET(u.os_index, &allowed)) << "cpu " << u.os_index;
    EXPECT_TRUE(seen.insert(u.os_index).second) << "cpu " << u.os_index << " listed twice";
  }
  EXPECT_EQ(std::uint32_t(CPU_COUNT(&allowed)), machine.unit_count());
  EXPECT_EQ(&machine, &machine_topology::discover()) << "discovered once per process";
}

TEST(Affinity, PolicyNamesRoundTrip) {
  for (affinity_policy p : {affinity_policy::none, affinity_policy::depth_first,
                            affinity_policy::breadth_first, affinity_policy::random}) {
    EXPECT_EQ(spindle::core::parse_affinity_policy(spindle::core::to_string(p)), p);
  }
  EXPECT_EQ(spindle::core::parse_affinity_policy("depth_first"), affinity_policy::depth_first);
  EXPECT_FALSE(spindle::core::parse_affinity_policy("sideways").has_value());
}

TEST(Affinity, DepthFirstFillsOneNodeAndOneCacheAtATimeCoresBeforeSiblings) {
  const machine_topology machine = machine_topology::synthetic(two_node_machine);
  const auto placements = plan(machine, affinity_policy::depth_first, 16);
  std::set<std::uint32_t> units;
  for (std::uint32_t i = 0; i < 16; ++i) {
    const processing_unit& u = machine.units()[placements[i].unit];
    EXPECT_TRUE(units.insert(placements[i].unit).second) << "unit claimed twice before all once";
    EXPECT_EQ(u.numa_node, i / 8) << "executor " << i;
    EXPECT_EQ(u.cache_domain, i / 4) << "executor " << i;
    // In each cache domain the first two executors take distinct cores (SMT siblings last).
    if (i % 4 == 1) {
      EXPECT_NE(u.core, machine.units()[placements[i - 1].unit].core) << "executor " << i;
    }
    EXPECT_EQ(placements[i].numa_node, u.numa_node);
    EXPECT_EQ(placements[i].cache_domain, u.cache_domain);
    EXPECT_EQ(placements[i].os_index, executor_placement::unknown) << "synthetic: never binds";
  }
}

TEST(Affinity, BreadthFirstSpreadsOverNodesCachesThenCores) {
  const machine_topology machine = machine_topology::synthetic(two_node_machine);
  const auto placements = plan(machine, affinity_policy::breadth_first, 16);
  std::set<std::uint32_t> nodes, caches, cores, units;
  for (std::uint32_t i = 0; i < 16; ++i) {
    const processing_unit& u = machine.units()[placements[i].unit];
    if (i < 2) nodes.insert(u.numa_node);
    if (i < 4) caches.insert(u.cache_domain);
    if (i < 8) cores.insert(u.core);
    units.insert(placements[i].unit);
  }
  EXPECT_EQ(nodes.size(), 2u);
  EXPECT_EQ(caches.size(), 4u);
  EXPECT_EQ(cores.size(), 8u);
  EXPECT_EQ(units.size(), 16u);
}

TEST(Affinity, RandomIsReproducibleAndClaimsEveryUnitBeforeAnyTwice) {
  const machine_topology machine = machine_topology::synthetic(two_node_machine);
  const auto first = plan(machine, affinity_policy::random, 48, 99);
  const auto again = plan(machine, affinity_policy::random, 48, 99);
  std::vector<std::uint32_t> claims(16, 0);
  for (std::uint32_t i = 0; i < 48; ++i) {
    EXPECT_EQ(first[i].unit, again[i].unit);
    ++claims[first[i].unit];
    // After 16k placements every unit has exactly k claims.
    if ((i + 1) % 16 == 0) {
      for (std::uint32_t c : claims) EXPECT_EQ(c, (i + 1) / 16);
    }
  }
}

TEST(Affinity, AReleasedClaimIsGivenOutAgain) {
  const machine_topology machine = machine_topology::synthetic("core:4 pu:1");
  affinity_planner planner(machine, affinity_policy::depth_first);
  const executor_placement first = planner.next();
  planner.release(first);  // its executor could not be made
  EXPECT_EQ(planner.next().unit, first.unit);
  EXPECT_NE(planner.next().unit, first.unit);
}

TEST(Affinity, MoreExecutorsThanUnitsWrapAroundEvenly) {
  const machine_topology machine = machine_topology::synthetic("core:3 pu:1");
  for (affinity_policy policy : {affinity_policy::depth_first, affinity_policy::breadth_first}) {
    std::vector<std::uint32_t> claims(3, 0);
    for (const auto& p : plan(machine, policy, 7)) ++claims[p.unit];
    EXPECT_EQ(claims, (std::vector<std::uint32_t>{3, 2, 2})) << spindle::core::to_string(policy);
  }
}

TEST(Affinity, FloatingExecutorsKnowOnlyWhatIsUnique) {
  const auto single = plan(machine_topology::synthetic("l3:1 core:4 pu:1"), affinity_policy::none, 2);
  EXPECT_EQ(single[0].unit, executor_placement::unknown);
  EXPECT_EQ(single[0].numa_node, 0u);
  EXPECT_EQ(single[0].cache_domain, 0u);
  EXPECT_EQ(single[0].kind, core_kind::big);
  const auto multi = plan(machine_topology::synthetic(two_node_machine), affinity_policy::none, 1);
  EXPECT_EQ(multi[0].numa_node, executor_placement::unknown);
  EXPECT_EQ(multi[0].cache_domain, executor_placement::unknown);
  const machine_topology hybrid({{0, 0, 0, 0, core_kind::big}, {1, 1, 0, 0, core_kind::little}});
  EXPECT_FALSE(plan(hybrid, affinity_policy::none, 1)[0].kind.has_value());
}

TEST(Affinity, StealDistanceAndDomains) {
  const machine_topology machine = machine_topology::synthetic(two_node_machine);
  const auto p = plan(machine, affinity_policy::depth_first, 16);
  EXPECT_EQ(p[0].distance_to(p[1]), 0u);  // same cache domain
  EXPECT_EQ(p[0].distance_to(p[4]), 1u);  // same node, other cache
  EXPECT_EQ(p[0].distance_to(p[8]), 2u);  // other node
  EXPECT_EQ(executor_placement{}.distance_to(executor_placement{}), 2u);  // unknown is far
  EXPECT_TRUE(executor_domain::on_numa_node(1).contains(p[8]));
  EXPECT_FALSE(executor_domain::on_numa_node(1).contains(p[0]));
  EXPECT_TRUE(executor_domain::any().contains(executor_placement{}));
  EXPECT_TRUE(executor_domain::on_core_kind(core_kind::big).contains(p[3]));
  EXPECT_FALSE(executor_domain::on_core_kind(core_kind::little).contains(p[3]));
}

// --- in a runtime ------------------------------------------------------------------------------

spindle::task<int> current_cpu() { co_return sched_getcpu(); }

TEST(AffinityRuntime, BoundWorkersRunOnTheirCpus) {
  for (affinity_policy policy : {affinity_policy::depth_first, affinity_policy::breadth_first,
                                 affinity_policy::random}) {
    const std::uint32_t units = machine_topology::discover().unit_count();
    spindle::runtime rt({.workers = units + 1, .affinity = policy});
    auto& core = rt.core();
    std::set<std::uint32_t> cpus;
    for (std::uint32_t i = 0; i < core.executor_count(); ++i) {
      const executor_placement& placement = core.executor_at(i).placement();
      ASSERT_NE(placement.os_index, executor_placement::unknown);
      cpus.insert(placement.os_index);
      const int cpu = rt.spawn_on(i, current_cpu()).join();
      ASSERT_TRUE(core.executor_at(i).bound_to_cpu()) << "executor " << i;
      EXPECT_EQ(cpu, int(placement.os_index)) << "executor " << i;
    }
    EXPECT_EQ(cpus.size(), units) << "every unit used";
  }
}

TEST(AffinityRuntime, UnboundByDefaultAndEnvironmentOverrides) {
  {
    spindle::runtime rt({.workers = 2});
    EXPECT_EQ(rt.core().executor_at(0).placement().os_index, executor_placement::unknown);
    EXPECT_FALSE(rt.core().executor_at(0).bound_to_cpu());
  }
  ::setenv("SPINDLE_AFFINITY", "breadth-first", 1);
  {
    spindle::runtime rt({.workers = 2});
    EXPECT_NE(rt.core().executor_at(1).placement().os_index, executor_placement::unknown);
  }
  ::setenv("SPINDLE_AFFINITY", "everywhere", 1);
  EXPECT_THROW(spindle::runtime({.workers = 1}), spindle::usage_error);
  ::unsetenv("SPINDLE_AFFINITY");
}

TEST(AffinityRuntime, SyntheticTopologyLabelsExecutorsAndStealsNearestFirst) {
  const machine_topology machine = machine_topology::synthetic("numa:2 l3:1 core:2 pu:1");
  spindle::runtime rt({.workers = 4, .affinity = affinity_policy::depth_first,
                       .topology = &machine});
  auto& core = rt.core();
  EXPECT_TRUE(core.steals_nearest_first());
  for (std::uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(core.executor_at(i).placement().numa_node, i / 2);
    EXPECT_FALSE(core.executor_at(i).bound_to_cpu());
  }
  // Executors added later are placed by the same policy (wrapping around).
  const std::uint32_t added = core.add_executor();
  EXPECT_NE(core.executor_at(added).placement().unit, executor_placement::unknown);
  std::uint32_t random = 7;
  for (int i = 0; i < 20; ++i) {
    const auto pick = core.pick_two_choices_in(executor_domain::on_numa_node(1), random);
    ASSERT_TRUE(pick.has_value());
    EXPECT_EQ(core.executor_at(*pick).placement().numa_node, 1u);
  }
  EXPECT_FALSE(core.pick_two_choices_in(executor_domain::on_numa_node(2), random).has_value());
  // Work spawned on one executor is still spread by stealing, nearest first or not.
  std::vector<spindle::join_handle<int>> handles;
  for (int i = 0; i < 2000; ++i) handles.push_back(rt.spawn_on(0, current_cpu()));
  for (auto& h : handles) EXPECT_GE(h.join(), 0);
}

}  // namespace
