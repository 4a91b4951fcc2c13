#!/usr/bin/env bash
# Installs the Debian packages spindle needs to build, test and benchmark.
# apt-get runs only when something is missing. Needs root for that.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

packages=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libfmt-dev liburing-dev libhwloc-dev relacy-dev libhttp-parser-dev
          nlohmann-json3-dev prometheus chromium)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "deps: all ${#packages[@]} packages installed"
  exit 0
fi

echo "deps: missing: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "deps: not root; install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
