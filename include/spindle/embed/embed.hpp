// The embedded executor module: spindle tasks driven by a host's ticks (docs/design/embedded.md).
#pragma once

#include "spindle/embed/embedded_executor.hpp"
#include "spindle/embed/integration.hpp"
#include "spindle/embed/turnstile.hpp"
