#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python stage: builds the kvmesh wheel with Debian's tooling (no downloads) against the
# CMake build, installs it into a fresh virtual environment (--system-site-packages only for
# numpy, torch and pytest), and runs tests/python/ with that environment's interpreter from
# outside the source tree, so the installed package (and its native module) is what is tested.
# pytest's "no tests collected" (exit 5) counts as a failure.
#
#   KVMESH_BUILD_DIR   CMake build directory with lib/libkvmesh.a and bin/kvmeshd (default build)
#   KVMESH_PYTEST_ARGS extra pytest arguments (e.g. "-k mooncake")
#   KVMESH_PYTHON_SANITIZE=address,undefined   build the extension with ASan+UBSan and run the
#                      suite with the sanitizer runtimes preloaded (point KVMESH_BUILD_DIR at a
#                      -DKVMESH_SANITIZE=address,undefined build, e.g. build-asan)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=$(realpath -m "${KVMESH_BUILD_DIR:-$ROOT/build}")
PY=/usr/bin/python3

if [ ! -f "$BUILD/lib/libkvmesh.a" ] || [ ! -x "$BUILD/bin/kvmeshd" ]; then
  echo "python-test: $BUILD has no lib/libkvmesh.a or bin/kvmeshd; build kvmesh first:" >&2
  echo "  cmake -S . -B build && cmake --build build" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvmesh-pytest.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

SAN=${KVMESH_PYTHON_SANITIZE:-}
PRELOAD=""
if [ -n "$SAN" ]; then
  export CFLAGS="-fsanitize=$SAN -fno-omit-frame-pointer" LDFLAGS="-fsanitize=$SAN"
  for lib in libasan.so libubsan.so; do
    case $lib in libasan.so) [[ $SAN == *address* ]] || continue ;;
      libubsan.so) [[ $SAN == *undefined* ]] || continue ;; esac
    PRELOAD="${PRELOAD:+$PRELOAD:}$(gcc -print-file-name=$lib)"
  done
  # the interpreter itself frees nothing at exit: leak reports would be about CPython
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi

echo "=== python: build the wheel${SAN:+ (sanitizers: $SAN)}"
rm -rf python/build python/kvmesh.egg-info
if ! (cd python && KVMESH_BUILD_DIR="$BUILD" "$PY" -m build --no-isolation --wheel \
      --outdir "$WORK/dist" >"$WORK/build.log" 2>&1); then
  tail -n 40 "$WORK/build.log"; echo "python-test: wheel build failed" >&2; exit 1
fi
rm -rf python/build python/kvmesh.egg-info
WHEEL=$(ls "$WORK"/dist/kvmesh-*.whl)
echo "wheel: $(basename "$WHEEL")"

echo "=== python: install into a fresh venv"
"$PY" -m venv --system-site-packages "$WORK/venv" || exit 1
if ! "$WORK/venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check \
      -q "$WHEEL"; then
  echo "python-test: pip install of the wheel failed" >&2; exit 1
fi
(cd "$WORK" && LD_PRELOAD="$PRELOAD" "$WORK/venv/bin/python" -c \
  "import kvmesh, kvmesh._native as n; print('imported', kvmesh.__file__, n.__file__)") || exit 1

echo "=== python: pytest"
cd "$WORK"
# shellcheck disable=SC2086
KVMESH_BUILD_DIR="$BUILD" KVMESH_WHEEL="$WHEEL" KVMESH_EXPECT_INSTALLED=1 \
  LD_PRELOAD="$PRELOAD" "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$ROOT/tests/python" \
  "$ROOT/tests/python" ${KVMESH_PYTEST_ARGS:-}
rc=$?
if [ $rc -eq 5 ]; then
  echo "python-test: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit $rc
