#!/usr/bin/env bash
# Echo throughput: the spindle echo client (every byte checked) against the spindle echo server
# and the Boost.Asio one (bench/peers/asio_echo_server.cpp, built when libboost-dev is
# installed), interleaved round by round (docs/design/benchmarks.md, "echo").
#
#   bench/echo_compare.sh [threads] [rounds] [connections] [messages] [size]
#   (defaults: 2 3 64 1000 4096)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

threads=${1:-2}
rounds=${2:-3}
connections=${3:-64}
messages=${4:-1000}
size=${5:-4096}
client=build/release/examples/spindle-example-echo_client
servers=(build/release/examples/spindle-example-echo_server build/release/bench/spindle-asio-echo-server)
for program in "$client" "${servers[@]}"; do
  [[ -x $program ]] || { echo "echo_compare.sh: $program is missing (release build; libboost-dev)" >&2; exit 1; }
done

port=19400
for round in $(seq "$rounds"); do
  for server in "${servers[@]}"; do
    port=$((port + 1))
    "$server" "$port" "$threads" > /dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do
      (echo > "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
      sleep 0.05
    done
    result=$("$client" "$port" "$connections" "$messages" "$size" "$threads" 2>&1 | tail -1)
    kill -TERM "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    printf '  round %d  %-28s %s\n' "$round" "$(basename "$server")" "${result##*in }"
  done
done
