#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main job: installs what is missing (scripts/deps.sh), builds kvmesh, and runs
# `kvmesh demo`: a 3-runtime cluster inside one process on the embedded in-memory metadata
# backend, a KV-cache-shaped workload with a live progress line, one runtime killed and
# restarted midway, and a summary ending in "acknowledged: N, verified: N, lost: 0".
#
#   KVMESH_JOBS=N           build parallelism (default: nproc)
#   KVMESH_BUILD_DIR=DIR    build directory (default: build)
#   extra arguments go to `kvmesh demo` (see `kvmesh demo --help`), e.g.
#     bash scripts/demo.sh --requests 1000
#     bash scripts/demo.sh --metadata redis://127.0.0.1:6379
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${KVMESH_JOBS:-$(nproc)}
BUILD=${KVMESH_BUILD_DIR:-build}

bash scripts/deps.sh

echo "=== building kvmesh in $BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target kvmesh_tool kvmeshd >"$BUILD.build.log" 2>&1 ||
  { grep -E "error" "$BUILD.build.log" | head -n 40; tail -n 20 "$BUILD.build.log"; exit 1; }

echo "=== kvmesh demo"
exec "$BUILD/bin/kvmesh" demo "$@"
