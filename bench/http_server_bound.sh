#!/usr/bin/env bash
# The http workload with the server, not wrk, as the bottleneck (docs/design/benchmarks.md,
# "what the http harness measures on this machine"): each server runs pinned to CPU 0 inside a
# cgroup limited to QUOTA percent of that CPU, wrk -t1 -c64 runs alone on CPU 1. Servers are
# interleaved round by round, so compare ratios within a round.
#
#   bench/http_server_bound.sh [threads] [rounds]        (defaults: 1 3)
#   environment: QUOTA (percent of one CPU, default 50), SECONDS_PER_RUN (default 4),
#                PEERS_BUILD (where ../shared/peers/run built asio_http, default /tmp/peers-build)
#
# Needs root (cgroups), wrk, taskset, and a release build (build/release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

threads=${1:-1}
rounds=${2:-3}
quota=${QUOTA:-50}
seconds=${SECONDS_PER_RUN:-4}
peers=${PEERS_BUILD:-/tmp/peers-build}
spindle_server=build/release/examples/spindle-example-http_hello

for tool in wrk taskset; do
  command -v "$tool" > /dev/null || { echo "http_server_bound.sh: $tool is missing" >&2; exit 1; }
done
[[ -x $spindle_server ]] || { echo "http_server_bound.sh: build the release preset first" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "http_server_bound.sh: needs root for the cgroup" >&2; exit 1; }
(( $(nproc) >= 2 )) || { echo "http_server_bound.sh: needs two CPUs" >&2; exit 1; }

# A cgroup limited to `quota` percent of one CPU: cgroup v2 (cpu.max) or v1 (cpu controller).
group=""
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
  group=/sys/fs/cgroup/spindle-http-bench
  mkdir -p "$group"
  echo "$((quota * 100)) 10000" > "$group/cpu.max"
elif [[ -d /sys/fs/cgroup/cpu ]]; then
  group=/sys/fs/cgroup/cpu/spindle-http-bench
  mkdir -p "$group"
  echo 10000 > "$group/cpu.cfs_period_us"
  echo "$((quota * 100))" > "$group/cpu.cfs_quota_us"
else
  echo "http_server_bound.sh: no cgroup cpu controller found" >&2
  exit 1
fi

port=19300
# Runs one server (a command with {port} and {t}) under the quota; prints req/s and p99.
measure() {
  local name=$1 template=$2
  port=$((port + 1))
  local command=${template//\{port\}/$port}
  command=${command//\{t\}/$threads}
  setsid bash -c "echo \$\$ > $group/cgroup.procs; exec taskset -c 0 $command" \
    > /dev/null 2>&1 &
  local server=$!
  for _ in $(seq 100); do
    (echo > "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
    sleep 0.05
  done
  local out
  out=$(taskset -c 1 wrk -t1 -c64 -d"${seconds}s" --latency "http://127.0.0.1:$port/" 2>&1)
  kill -TERM -- "-$server" 2> /dev/null || true
  wait "$server" 2> /dev/null || true
  local rps p99
  rps=$(awk '/Requests\/sec/ {print $2}' <<< "$out")
  p99=$(awk '$1 == "99%" {print $2}' <<< "$out")
  echo "$name $rps $p99"
}

servers=("spindle|$PWD/$spindle_server {port} {t}")
if [[ -x $peers/asio_http ]]; then
  servers=("asio|$peers/asio_http {port} {t}" "${servers[@]}")
else
  echo "(no $peers/asio_http: run ../shared/peers/run build for the Asio peer)" >&2
fi

echo "server-bound http: $threads thread(s), server at ${quota}% of CPU 0, wrk alone on CPU 1"
for round in $(seq "$rounds"); do
  asio_rps=""
  for entry in "${servers[@]}"; do
    read -r name rps p99 < <(measure "${entry%%|*}" "${entry#*|}")
    ratio=""
    if [[ $name == asio ]]; then
      asio_rps=$rps
    elif [[ -n $asio_rps && -n $rps ]]; then
      ratio=$(awk -v a="$asio_rps" -v s="$rps" 'BEGIN {printf "%.2fx asio", s / a}')
    fi
    printf '  round %d  %-8s req/s=%10s  p99=%8s  %s\n' "$round" "$name" "$rps" "$p99" "$ratio"
  done
done
