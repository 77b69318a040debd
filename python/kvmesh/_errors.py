# SPDX-License-Identifier: Apache-2.0
"""The kvmesh exception hierarchy and the mapping from C error codes (KVMESH_E*) to classes.

Every exception raised for a failed libkvmesh call is an instance of :class:`Error` (or a
subclass) carrying ``code`` (the negative KVMESH_E* value), ``name`` (``"KVMESH_ENOENT"``, from
kvmesh_errname) and ``message`` (kvmesh_last_error: what was wrong and what to do). Bad Python
arguments raise ``TypeError`` (wrong type) or :class:`InvalidArgument` (bad value; also a
``ValueError``). The native module builds instances through :func:`make`.
"""

__all__ = [
    "Error", "InvalidArgument", "ConfigError", "NotFound", "AlreadyExists", "Timeout",
    "Canceled", "Conflict", "StaleGeneration", "Indeterminate", "Unavailable",
    "ConnectionFailed", "StoreIOError", "ProtocolError", "TooBig", "NoSpace", "AuthFailed",
    "Incompatible", "Busy", "ChecksumMismatch", "QuotaExceeded", "Closed", "BackendError",
    "NotSupported", "Corrupt", "InternalError", "OutOfMemory", "make", "CODE_CLASSES",
]


class Error(Exception):
    """A failed kvmesh call: ``code`` (negative KVMESH_E* value), ``name``, ``message``."""

    def __init__(self, code, name, message):
        super().__init__(f"{name}: {message}")
        self.code = code
        self.name = name
        self.message = message

    def __reduce__(self):
        return (type(self), (self.code, self.name, self.message))


class InvalidArgument(Error, ValueError):
    """A bad argument value (KVMESH_EINVAL, EBADKEY, EBADTENANT, EBADDOMAIN, ERANGE)."""


class ConfigError(Error, ValueError):
    """A bad configuration field or metadata URL (KVMESH_ECONFIG, KVMESH_EURL)."""


class NotFound(Error):
    """No object with this key in this tenant/domain (KVMESH_ENOENT)."""


class AlreadyExists(Error):
    """KVMESH_EEXIST."""


class Timeout(Error, TimeoutError):
    """The request deadline passed (KVMESH_ETIMEDOUT)."""


class Canceled(Error):
    """KVMESH_ECANCELED."""


class Conflict(Error):
    """A compare-and-set conflict (KVMESH_ECONFLICT)."""


class StaleGeneration(Error):
    """KVMESH_ESTALE_GENERATION: refresh and retry."""


class Indeterminate(Error):
    """The outcome is unknown (KVMESH_EINDETERMINATE): retry the put."""


class Unavailable(Error):
    """Not enough live owners, or a hard pin that cannot be met (KVMESH_EUNAVAILABLE)."""


class ConnectionFailed(Error, ConnectionError):
    """KVMESH_ECONN."""


class StoreIOError(Error):
    """KVMESH_EIO."""


class ProtocolError(Error):
    """KVMESH_EPROTO."""


class TooBig(Error):
    """A value larger than max_object_size, or a buffer smaller than the object (KVMESH_ETOOBIG)."""


class NoSpace(Error):
    """Memory full and nothing evictable in time (KVMESH_ENOSPC)."""


class AuthFailed(Error):
    """KVMESH_EAUTH."""


class Incompatible(Error):
    """KVMESH_EINCOMPAT: the cluster policy differs from the deployment's."""


class Busy(Error):
    """KVMESH_EAGAIN: resource busy, try again."""


class ChecksumMismatch(Error):
    """Every replica failed its checksum (KVMESH_ECHECKSUM)."""


class QuotaExceeded(Error):
    """The tenant's quota is exhausted (KVMESH_EQUOTA)."""


class Closed(Error):
    """The store is closed or drained (KVMESH_ECLOSED)."""


class BackendError(Error):
    """The metadata backend failed (KVMESH_EBACKEND)."""


class NotSupported(Error):
    """KVMESH_ENOTSUP."""


class Corrupt(Error):
    """KVMESH_ECORRUPT."""


class InternalError(Error):
    """KVMESH_EINTERNAL."""


class OutOfMemory(Error, MemoryError):
    """KVMESH_ENOMEM."""


# name -> class; the values are looked up from the native module's CODES table at import so
# that the numbers come from include/kvmesh.h only.
_BY_NAME = {
    "KVMESH_EINVAL": InvalidArgument,
    "KVMESH_ENOMEM": OutOfMemory,
    "KVMESH_ENOENT": NotFound,
    "KVMESH_EEXIST": AlreadyExists,
    "KVMESH_ETIMEDOUT": Timeout,
    "KVMESH_ECANCELED": Canceled,
    "KVMESH_ECONFLICT": Conflict,
    "KVMESH_ESTALE_GENERATION": StaleGeneration,
    "KVMESH_EINDETERMINATE": Indeterminate,
    "KVMESH_EUNAVAILABLE": Unavailable,
    "KVMESH_EIO": StoreIOError,
    "KVMESH_ECONN": ConnectionFailed,
    "KVMESH_EPROTO": ProtocolError,
    "KVMESH_ETOOBIG": TooBig,
    "KVMESH_ENOSPC": NoSpace,
    "KVMESH_EAUTH": AuthFailed,
    "KVMESH_EINCOMPAT": Incompatible,
    "KVMESH_EAGAIN": Busy,
    "KVMESH_ECHECKSUM": ChecksumMismatch,
    "KVMESH_EQUOTA": QuotaExceeded,
    "KVMESH_ECLOSED": Closed,
    "KVMESH_EBACKEND": BackendError,
    "KVMESH_EURL": ConfigError,
    "KVMESH_EBADKEY": InvalidArgument,
    "KVMESH_EBADTENANT": InvalidArgument,
    "KVMESH_EBADDOMAIN": InvalidArgument,
    "KVMESH_ERANGE": InvalidArgument,
    "KVMESH_ENOTSUP": NotSupported,
    "KVMESH_ECORRUPT": Corrupt,
    "KVMESH_EINTERNAL": InternalError,
    "KVMESH_ECONFIG": ConfigError,
}

CODE_CLASSES = {}  # filled by kvmesh/__init__.py from _native.CODES


def _bind(codes):
    """Called once with {name: code} from the native module."""
    for name, code in codes.items():
        CODE_CLASSES[code] = _BY_NAME.get(name, Error)


def make(code, name, message):
    """The exception instance for a C error code (used by the native module)."""
    return CODE_CLASSES.get(code, Error)(code, name, message)
