#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages kvmesh needs to build, test, benchmark and run. Idempotent:
# installs only what is missing. As a non-root user it prints the exact apt line to run.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git
  libuv1-dev libhiredis-dev libcurl4-openssl-dev libjansson-dev libssl-dev
  libprotobuf-c-dev protobuf-c-compiler libxxhash-dev libmicrohttpd-dev liburing-dev
  libcyaml-dev libbsd-dev libcmocka-dev
  redis-server redis-tools etcd-server etcd-client memcached
  clang libclang-rt-14-dev clang-format gcovr
  python3 python3-dev python3-pytest python3-numpy python3-torch python3-setuptools
  python3-wheel python3-venv python3-build python3-pip binutils
  chromium chromium-driver prometheus
  iproute2 nftables libfaketime fio
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  exit 0
fi

echo "deps: installing ${#missing[@]} missing packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: not root. Run this as root (or with sudo), then retry:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
# Debian starts packaged servers as system services where an init system runs; the tests start
# their own instances on free loopback ports, so the packaged ones are not needed.
echo "deps: done"
