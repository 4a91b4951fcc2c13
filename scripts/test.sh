#!/usr/bin/env bash
# Builds and runs the test suite, preset by preset:
#   release     all tests: unit, stress, Relacy models, package consumer, example programs
#   tsan        unit + stress under ThreadSanitizer
#               (TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1", set by the tsan test preset)
#   asan-ubsan  unit tests under AddressSanitizer + UBSan, libstdc++ assertions on (bounds of
#               vector/span/array indexing: an index past size() but within capacity is no ASan
#               report)
#   clang-release  unit, package, example and guide tests, built by clang 19 (the second
#               compiler); no Relacy models or stress tests (CI's 40 minutes; release and tsan
#               run the stress tests)
# Choose presets with SPINDLE_PRESETS="release tsan asan-ubsan clang-release" (the default).
# Each step prints how long it took (CI's budget is the sum).
# Ends with "N passed, N failed" over all presets; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh || exit 1

presets=${SPINDLE_PRESETS:-release tsan asan-ubsan clang-release}
jobs=$(nproc)
passed=0
failed=0
status=0
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

timings=""
for preset in $presets; do
  echo "=== [$preset] configure + build"
  started=$SECONDS
  if ! cmake --preset "$preset" || ! cmake --build --preset "$preset" -j"$jobs"; then
    echo "=== [$preset] BUILD FAILED"
    status=1
    continue
  fi
  built=$SECONDS

  echo "=== [$preset] test"
  log="$logdir/$preset.log"
  ctest --preset "$preset" -j"$jobs" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  timings+="=== [$preset] build $((built - started)) s, tests $((SECONDS - built)) s"$'\n'
  (( rc == 0 )) || status=1

  # "100% tests passed, 0 tests failed out of 12"
  summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [[ -n "$summary" ]]; then
    f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
    t=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary")
    passed=$((passed + t - f))
    failed=$((failed + f))
    echo "=== [$preset] $summary"
  elif (( rc != 0 )); then
    echo "=== [$preset] ctest failed (exit $rc) without a summary"
  else
    echo "=== [$preset] no tests"
  fi
done

# CI keeps only the tail of this output: repeat each failure (its result line and
# the first lines of its output) here, where the tail will show it.
for preset in $presets; do
  log="$logdir/$preset.log"
  [[ -f "$log" ]] || continue
  # (Skipped and disabled tests are not failures: they are left out.)
  grep -E '\*\*\*|\((Failed|Timeout|SEGFAULT|Subprocess aborted|Child aborted)\)' "$log" |
    grep -qvE '\*\*\*(Skipped|Not Run \(Disabled\))' || continue
  echo "=== [$preset] failures"
  awk '
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+:/ { inside = ($0 !~ / Passed |\*\*\*Skipped|\*\*\*Not Run \(Disabled\)/); shown = 0 }
    /^ +Start +[0-9]+:/ { inside = 0 }
    inside && shown < 60 { print; shown++ }
  ' "$log"
done

printf '%s' "$timings"
echo "$passed passed, $failed failed"
(( failed == 0 )) || status=1
exit "$status"
