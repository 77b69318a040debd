#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds kvmesh and runs every test: a -Werror build, an ASan+UBSan build, a TSan build of the
# threaded tests (unit tests and the RPC/transport/metadata/observability integration tests),
# the libFuzzer targets (built with clang, each run briefly on its corpus), the Python package
# (scripts/python-test.sh: wheel, fresh venv, tests/python/ with pytest), and the chaos stage
# (root only: network namespaces), which runs real daemons under every nemesis of
# tests/chaos/chaos.py with the werror build, and checks that a deliberately broken build
# (KVMESH_CHAOS_BROKEN=ack_before_mirror) is caught; docs/reliability.md.
# Installs missing packages first (scripts/deps.sh). Exits non-zero when anything fails.
#
#   KVMESH_TEST_STAGES="werror asan tsan fuzz python chaos"   stages to run (default: all)
#   KVMESH_JOBS=N                                 build parallelism (default: nproc)
#   KVMESH_TEST_JOBS=N                            ctest parallelism (default: KVMESH_JOBS + 1: most
#                                                 cluster tests wait on leases, not on a CPU)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

bash scripts/deps.sh || exit 1

STAGES=${KVMESH_TEST_STAGES:-"werror asan tsan fuzz python chaos"}
JOBS=${KVMESH_JOBS:-$(nproc)}
TEST_JOBS=${KVMESH_TEST_JOBS:-$((JOBS + 1))}
failed_stages=()
passed_stages=()

stage() { # name builddir ctest-args cmake-args...
  local name=$1 dir=$2 cargs=$3
  shift 3
  echo "=== stage $name: configure ($*)"
  if ! cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log"; failed_stages+=("$name(configure)"); return
  fi
  echo "=== stage $name: build"
  if ! cmake --build "$dir" -j "$JOBS" >"$dir.build.log" 2>&1; then
    grep -E "error|warning" "$dir.build.log" | head -n 60; tail -n 20 "$dir.build.log"
    failed_stages+=("$name(build)"); return
  fi
  echo "=== stage $name: test"
  # shellcheck disable=SC2086
  if (cd "$dir" && ctest --output-on-failure -j "$TEST_JOBS" $cargs); then
    passed_stages+=("$name")
  else
    failed_stages+=("$name(test)")
  fi
}

for s in $STAGES; do
  case $s in
  werror) stage werror build "" -DKVMESH_WERROR=ON ;;
  asan)
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    stage asan build-asan "" -DKVMESH_WERROR=ON "-DKVMESH_SANITIZE=address,undefined" ;;
  tsan)
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp
    # (tests/tsan.supp: descriptors libuv closes unseen by ThreadSanitizer; nothing else)
    # The threaded code: every unit test plus the RPC, transport, metadata and observability
    # integration tests (the real-server and multi-process suites run in the other stages).
    stage tsan build-tsan \
      "-R ^unit_|^integration_rpc|^integration_transport|^meta_conformance_memory|^integration_obs|^integration_sigpipe" \
      -DKVMESH_WERROR=ON -DKVMESH_SANITIZE=thread ;;
  fuzz)
    stage fuzz build-fuzz "-L fuzz" -DCMAKE_C_COMPILER=clang -DKVMESH_FUZZ=ON \
      "-DKVMESH_SANITIZE=address,undefined"
    # A short libFuzzer run of every target on its corpus (bounded: 2,000 runs each).
    for f in build-fuzz/bin/fuzz_*; do
      [ -x "$f" ] || continue
      n=$(basename "$f"); short=${n#fuzz_}
      tmp=$(mktemp -d)
      if "$f" -runs=2000 -max_total_time=20 "$tmp" "tests/fuzz/corpus/$short" >"$tmp.log" 2>&1; then
        echo "fuzz $short: ok"
      else
        tail -n 30 "$tmp.log"; failed_stages+=("fuzz($short)")
      fi
      rm -rf "$tmp" "$tmp.log"
    done ;;
  python)
    # The -Werror build (a no-op when the werror stage just built it), then the wheel, a fresh
    # venv and pytest on tests/python/ (a real redis-server, etcd and 3 kvmeshd per cluster).
    echo "=== stage python: configure and build (build)"
    if ! cmake -S "$ROOT" -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVMESH_WERROR=ON \
        >build.configure.log 2>&1 || ! cmake --build build -j "$JOBS" >build.build.log 2>&1; then
      tail -n 40 build.configure.log build.build.log; failed_stages+=("python(build)")
    elif KVMESH_BUILD_DIR="$ROOT/build" bash scripts/python-test.sh; then
      passed_stages+=("python")
    else
      failed_stages+=("python(test)")
    fi ;;
  chaos)
    # Uses the werror stage's build dir (builds it when that stage did not run). Bounded: each
    # nemesis runs 18 s of workload; the whole stage takes about 5-7 minutes on 2 cores.
    echo "=== stage chaos: build (build, build-chaos-broken)"
    if ! { cmake -S "$ROOT" -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVMESH_WERROR=ON &&
      cmake --build build -j "$JOBS" --target kvmeshd chaos_client; } >build.chaos.log 2>&1 ||
      ! { cmake -S "$ROOT" -B build-chaos-broken -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKVMESH_WERROR=ON -DKVMESH_CHAOS_BROKEN=ack_before_mirror &&
      cmake --build build-chaos-broken -j "$JOBS" --target kvmeshd chaos_client; } \
        >>build.chaos.log 2>&1; then
      tail -n 30 build.chaos.log; failed_stages+=("chaos(build)")
    else
      echo "=== stage chaos: every nemesis + the Redis comparison"
      /usr/bin/python3 tests/chaos/chaos.py --schedule ci --duration 18 --bin-dir build/bin
      rc=$?
      echo "=== stage chaos: the broken build (ack_before_mirror) must be caught"
      /usr/bin/python3 tests/chaos/chaos.py --nemesis kill --duration 25 \
        --bin-dir build-chaos-broken/bin --expect-violation
      rc_broken=$?
      if [ $rc -eq 0 ] && [ $rc_broken -eq 0 ]; then
        passed_stages+=("chaos")
      else
        [ $rc -eq 3 ] || [ $rc_broken -eq 3 ] && echo "chaos: the machine refused namespaces/nftables (see above)"
        [ $rc -eq 0 ] || failed_stages+=("chaos(violations)")
        [ $rc_broken -eq 0 ] || failed_stages+=("chaos(broken build not caught)")
      fi
    fi ;;
  *) echo "unknown stage $s"; failed_stages+=("$s") ;;
  esac
done

echo
echo "stages passed: ${passed_stages[*]:-none}"
echo "stages failed: ${failed_stages[*]:-none}"
echo "${#passed_stages[@]} passed, ${#failed_stages[@]} failed"
[ ${#failed_stages[@]} -eq 0 ]
