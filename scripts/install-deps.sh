#!/usr/bin/env bash
# Installs the Debian packages shardcast needs, only those that are missing.
set -euo pipefail
pkgs=(cmake ninja-build g++ make pkg-config
      nlohmann-json3-dev libcli11-dev libfmt-dev libeigen3-dev libboost-graph-dev
      libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin
      libtomlplusplus-dev)
# The HTML reports' browser tests (tests/html_test.cc) need Debian's Chromium; CI asks for it
# with SHARDCAST_BROWSER_TESTS=1, elsewhere those tests skip without it.
if [ "${SHARDCAST_BROWSER_TESTS:-0}" = "1" ]; then pkgs+=(chromium); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
