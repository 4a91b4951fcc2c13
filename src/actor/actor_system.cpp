// Finding a runtime's actor system, and where a new actor lives (actor.hpp, "Placement").
#include <memory>

#include "spindle/actor/actor.hpp"
#include "spindle/core/clock.hpp"
#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"

namespace spindle {
namespace {

// The actor system as an extension of the task layer's runtime state: shut down right after
// the runtime's tasks were abandoned (shutdown step 6), destroyed with the runtime.
struct actor_extension final : detail::runtime_state::extension {
  explicit actor_extension(core::runtime_core& core) : system(core, actor_system_options{}) {}
  void on_runtime_stopped() noexcept override { system.shutdown(); }
  actor_system system;
};

actor_system& system_in(detail::runtime_state& state) {
  auto& extension = state.extension_at(detail::runtime_state::actor_extension, [&state] {
    return std::make_unique<actor_extension>(*state.core);
  });
  return static_cast<actor_extension&>(extension).system;
}

thread_local std::uint32_t placement_random = 0x85ebca6bu;

}  // namespace

actor_system& actor_system_of(core::runtime_core& core) {
  auto* state = static_cast<detail::runtime_state*>(core.layer_state());
  if (state == nullptr) throw usage_error("spindle: actors need a spindle::runtime");
  return system_in(*state);
}

actor_system& actors_of(runtime& rt) { return actor_system_of(rt.core()); }

actor_system* current_actor_system() noexcept {
  detail::runtime_state* state = detail::current_runtime_state();
  if (state == nullptr) return nullptr;
  try {
    return &system_in(*state);
  } catch (...) {
    return nullptr;  // out of memory creating it
  }
}

namespace actor_detail {

std::uint32_t pick_home(actor_system& system, const spawn_options& options) {
  core::runtime_core& core = system.core();
  if (options.executor) {
    if (*options.executor >= core.executor_count()) {
      throw usage_error("spindle: spawn_options::executor names no executor");
    }
    if (!options.domain.contains(core.executor_at(*options.executor).placement())) {
      throw usage_error("spindle: spawn_options::executor is outside spawn_options::domain");
    }
    return *options.executor;
  }
  const std::int32_t here = system.current_index();
  if (here >= 0 && options.domain.contains(core.executor_at(std::uint32_t(here)).placement())) {
    return std::uint32_t(here);
  }
  if (options.domain.where == core::executor_domain::kind::any) {
    return core.pick_two_choices(placement_random);
  }
  const std::optional<std::uint32_t> member = core.pick_two_choices_in(options.domain,
                                                                       placement_random);
  if (!member) throw usage_error("spindle: no executor of this runtime is in spawn_options::domain");
  return *member;
}

}  // namespace actor_detail
}  // namespace spindle
