// The fork-join module (rows F1-F6): fork_join, run_on, and the parallel algorithms.
// Design: fork_state.hpp and docs/design/fork-join.md.
#pragma once

#include "spindle/fork/algorithms.hpp"
#include "spindle/fork/fork_join.hpp"
