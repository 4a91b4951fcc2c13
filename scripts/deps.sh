#!/usr/bin/env bash
# Installs the Debian packages spindle needs to build, test and benchmark.
# apt-get runs only when something is missing: as root directly, as a user through sudo.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

packages=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libfmt-dev liburing-dev libhwloc-dev relacy-dev libhttp-parser-dev
          nlohmann-json3-dev prometheus chromium clang-19 libssl-dev openssl)

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
# As root (a fresh Debian machine, CI) apt-get runs as is; as a user, through sudo where there
# is one; otherwise say what to install.
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo > /dev/null; then
  as_root=(sudo DEBIAN_FRONTEND=noninteractive)
else
  echo "deps: not root and no sudo; as root, run:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
