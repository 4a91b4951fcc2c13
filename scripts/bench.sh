#!/usr/bin/env bash
# Builds the release preset and runs every benchmark workload:
#   build/release/bench/spindle-bench all [extra args...]
# which prints one protocol line per measurement (../shared/BENCH.md) and a summary.
#
# To compare with the peers in the same run (when ../shared/peers/run exists):
#   python3 ../shared/peers/run bench -t 2 --cand 'build/release/bench/spindle-bench {w} {p} {t}'
# (`../shared/peers/run deps` / `build` install and build the peers first.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ! -f bench/spindle_bench.cpp ]]; then
  echo "bench.sh: bench/spindle_bench.cpp does not exist yet" >&2
  exit 1
fi
bash scripts/deps.sh
cmake --preset release
cmake --build --preset release -j"$(nproc)" --target spindle-bench

exec build/release/bench/spindle-bench all "$@"
