# SPDX-License-Identifier: Apache-2.0
"""kvmesh: a masterless, multi-tenant distributed object store for LLM KV-cache blocks.

    import kvmesh
    with kvmesh.Store(metadata_url="redis://127.0.0.1:6379", memory_size=0,
                      tenant="demo") as s:
        s.put("layer0/block7", b"...")
        s.get("layer0/block7")

``kvmesh.Store`` is the native API (docs/python.md); ``kvmesh.mooncake`` is a drop-in for
Mooncake's ``MooncakeDistributedStore``; ``kvmesh.tensor`` stores numpy arrays and torch tensors.
"""

from . import _errors
from ._errors import *  # noqa: F401,F403  (the exception classes)
try:
    from . import _native
except ImportError as _e:  # a source tree without the built extension
    raise ImportError("kvmesh._native (the C extension) is not built or not loadable: install "
                      "the wheel, or run `KVMESH_BUILD_DIR=../build python3 setup.py build_ext "
                      f"--inplace` in python/ ({_e})") from _e

_errors._bind(_native.CODES)

from .store import Store, RouteInfo, Replica, Member, config_fields  # noqa: E402

__version__ = "0.1.0"
CODES = dict(_native.CODES)
BATCH_MAX = _native.BATCH_MAX
MAX_KEY_LEN = _native.MAX_KEY_LEN


def library_version():
    """The version of the libkvmesh linked into the native module."""
    return _native.version()


def errname(code):
    return _native.errname(code)


def strerror(code):
    return _native.strerror(code)


def address(buffer):
    """The address (int) of a C-contiguous buffer-protocol object, for the raw-pointer APIs."""
    return _native.address(buffer)


__all__ = ["Store", "RouteInfo", "Replica", "Member", "config_fields", "library_version",
           "errname", "strerror", "address", "CODES", "BATCH_MAX", "MAX_KEY_LEN"] + \
    list(_errors.__all__)
