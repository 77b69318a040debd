# SPDX-License-Identifier: Apache-2.0
"""Builds kvmesh._native against a CMake build of libkvmesh.

KVMESH_BUILD_DIR   the CMake build directory (default: ../build next to this directory)
KVMESH_STATIC_LIBS space-separated archive paths overriding the default list (below)

The one place that knows how libkvmesh is linked: LINK_ARCHIVES (static archives, linked as one
group so their order does not matter) plus the pkg-config modules of PKG_DEPS. The archives'
symbols are kept local to the extension (--exclude-libs), so only PyInit__native is exported.
"""
import glob
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.path.dirname(HERE)
BUILD_DIR = os.path.abspath(os.environ.get("KVMESH_BUILD_DIR", os.path.join(SRC_ROOT, "build")))

# Static archives produced by CMake: libkvmesh.a (and, should the library be split into
# per-layer archives, every libkvmesh*.a except the test-only ones).
_EXCLUDE = {"libkvmesh_testsupport.a", "libkvmesh_sim.a"}
PKG_DEPS = ("libuv hiredis libcurl jansson libprotobuf-c libxxhash libmicrohttpd liburing "
            "libcyaml libbsd libcrypto").split()


def _archives():
    env = os.environ.get("KVMESH_STATIC_LIBS")
    if env:
        return shlex.split(env)
    libdir = os.path.join(BUILD_DIR, "lib")
    found = sorted(p for p in glob.glob(os.path.join(libdir, "libkvmesh*.a"))
                   if os.path.basename(p) not in _EXCLUDE)
    return found


def _pkg_config_libs():
    try:
        out = subprocess.run(["pkg-config", "--libs"] + PKG_DEPS, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"pkg-config failed for {' '.join(PKG_DEPS)}: {e}; "
                         "run scripts/deps.sh") from e
    return shlex.split(out)


def _extension():
    archives = _archives()
    if not archives:
        # sdist / metadata-only steps do not need the library; building the extension does.
        if os.environ.get("KVMESH_ALLOW_NO_LIB") == "1":
            return []
        raise SystemExit(f"no libkvmesh*.a under {BUILD_DIR}/lib: build kvmesh with CMake first "
                         "or set KVMESH_BUILD_DIR to its build directory")
    link = ["-Wl,--start-group"] + archives + ["-Wl,--end-group", "-Wl,--exclude-libs,ALL"]
    link += _pkg_config_libs() + ["-lpthread", "-lm"]
    return [Extension(
        "kvmesh._native",
        sources=["kvmesh/_native.c"],
        include_dirs=[os.path.join(SRC_ROOT, "include")],
        extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                            "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
        extra_link_args=link,
        depends=archives + [os.path.join(SRC_ROOT, "include", "kvmesh.h")],
    )]


setup(ext_modules=_extension())
