// The actor module: actors, their scheduling wheel, timers to actors, typed calls, supervisors
// (static and dynamic), registered names.
#pragma once

#include "spindle/actor/actor.hpp"
#include "spindle/actor/actor_scheduler.hpp"
#include "spindle/actor/actor_timers.hpp"
#include "spindle/actor/call.hpp"
#include "spindle/actor/dynamic_supervisor.hpp"
#include "spindle/actor/registry.hpp"
#include "spindle/actor/supervisor.hpp"
