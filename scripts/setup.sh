#!/usr/bin/env bash
# Installs the Debian 12 packages ratewall needs to build, test, run and benchmark.
# Only what is missing is installed; a machine that has everything is left untouched.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libboost1.81-dev libyaml-cpp-dev nlohmann-json3-dev doctest-dev libhiredis-dev
  libbenchmark-dev libssl-dev openssl libnghttp2-dev
  redis-server redis-tools wrk curl python3
  # HTTP/2 clients for the tests and the h2 benchmark: h2load and nghttp.
  nghttp2-client
  # The dashboard's test loads GET /dashboard in headless Chromium.
  chromium
)
if [[ "${WITH_PEERS:-0}" == 1 ]]; then
  packages+=(nginx haproxy)
fi
if [[ "${WITH_PROFILE:-0}" == 1 ]]; then
  packages+=(valgrind linux-perf strace)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=""
if [[ "$(id -u)" != 0 ]]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >/dev/null
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
