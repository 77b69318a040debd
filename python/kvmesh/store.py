# SPDX-License-Identifier: Apache-2.0
"""kvmesh.Store: the Python face of one kvmesh runtime (a kvmesh_t).

A Store joins (or bootstraps) the deployment its configuration names, as a storage runtime
(``memory_size`` > 0) or a client-only one (``memory_size=0``), and issues object operations in
a tenant/domain scope. Configuration fields are the C table's (docs/configuration.md), set by
name from strings through kvmesh_config_set, so a value is validated exactly as the daemon
validates it. Every method that talks to the runtime releases the GIL while it waits.

Scope: ``tenant`` and ``domain`` given to the constructor (or :meth:`Store.scoped`) are the
defaults of every call; each call may override them with ``tenant=`` / ``domain=`` keywords
(``domain=None`` means no domain). The same key in two tenants or two domains names two
independent objects.

Buffers: a value or a destination is any C-contiguous buffer-protocol object (bytes, bytearray,
memoryview, numpy arrays, ...) or a raw address (int) plus a size; a raw address must lie inside
a buffer registered with :meth:`Store.register_buffer` (anything else raises InvalidArgument).

Batches return one result per key, in order: ``None`` / a value on success, or an
:class:`kvmesh.Error` instance (not raised) for that item, so a partial failure keeps every
other item's outcome exact.
"""

import dataclasses

from . import _errors
from . import _native

__all__ = ["Store", "RouteInfo", "Replica", "Member", "config_fields"]

_UNSET = object()


def _field_value(name, v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return v
    raise TypeError(f"config field {name!r}: value must be str, int, float or bool, "
                    f"not {type(v).__name__}")


def _fields(config, kwargs):
    fields = []
    if config is not None:
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict of field -> value, not {type(config).__name__}")
        for k, v in config.items():
            if not isinstance(k, str):
                raise TypeError(f"config field names must be str, not {type(k).__name__}")
            fields.append((k, _field_value(k, v)))
    for k, v in kwargs.items():
        fields.append((k, _field_value(k, v)))
    return fields


def config_fields():
    """Every configuration field as (name, default, help), from the C table."""
    return _native.config_fields()


def _item_error(rc):
    return _errors.make(rc, _native.errname(rc), _native.strerror(rc))


@dataclasses.dataclass(frozen=True)
class Replica:
    owner: str
    segment: int
    offset: int
    length: int


@dataclasses.dataclass(frozen=True)
class RouteInfo:
    fencing_token: int
    primary_sequence: int
    length: int
    checksum: int
    replicas: tuple
    cold_backed: bool


@dataclasses.dataclass(frozen=True)
class Member:
    id: str
    epoch: int
    address: str
    state: str
    weight: float
    capacity_bytes: int
    used_bytes: int


class _Core:
    """The open handle shared by a Store and its scoped views."""

    def __init__(self, fields):
        self.fields = list(fields)
        self.config = _native.config_check(self.fields)  # validates every field first
        self.handle = None

    def open(self):
        if self.handle is None or not self.handle.is_open:
            self.handle = _native.Handle(self.fields)

    def h(self):
        h = self.handle
        if h is None:
            raise _errors.make(_native.CODES["KVMESH_ECLOSED"], "KVMESH_ECLOSED",
                               "the store is not open; call open() first")
        return h


class Store:
    """One kvmesh runtime. ``Store(config_dict, **fields, tenant=..., domain=...)``.

    ``open=False`` builds and validates the configuration without joining; call :meth:`open`.
    Use as a context manager to close at the end.
    """

    def __init__(self, config=None, /, *, tenant=None, domain=None, open=True, **fields):
        self._core = _Core(_fields(config, fields))
        self._tenant = tenant if tenant is not None else self._core.config["default_tenant"]
        self._domain = domain
        self._check_scope(self._tenant, self._domain)
        if open:
            self._core.open()

    @staticmethod
    def _check_scope(tenant, domain):
        if not isinstance(tenant, str):
            raise TypeError(f"tenant must be str, not {type(tenant).__name__}")
        if domain is not None and not isinstance(domain, str):
            raise TypeError(f"domain must be str or None, not {type(domain).__name__}")

    # ---- lifecycle ---------------------------------------------------------------------------
    def open(self):
        """Joins the deployment (no-op when already open). Returns self."""
        self._core.open()
        return self

    def close(self):
        """Leaves at once (no drain). Waits for calls in flight; idempotent."""
        if self._core.handle is not None:
            self._core.handle.close()

    def drain(self, timeout_ms=0):
        """Moves this runtime's replicas to others, then leaves (0 = drain_timeout_ms)."""
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool):
            raise TypeError(f"timeout_ms must be an int, not {type(timeout_ms).__name__}")
        if not 0 <= timeout_ms <= 0xFFFFFFFF:
            raise _errors.make(_native.CODES["KVMESH_EINVAL"], "KVMESH_EINVAL",
                               f"timeout_ms must be 0..4294967295, got {timeout_ms}")
        self._core.h().drain(timeout_ms)

    @property
    def is_open(self):
        return self._core.handle is not None and self._core.handle.is_open

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def config(self):
        """The effective configuration (every field, as kvmesh_config_get writes it)."""
        return dict(self._core.config)

    @property
    def tenant(self):
        return self._tenant

    @property
    def domain(self):
        return self._domain

    def scoped(self, tenant=_UNSET, domain=_UNSET):
        """A view of this store (same runtime) with other default tenant/domain."""
        v = object.__new__(Store)
        v._core = self._core
        v._tenant = self._tenant if tenant is _UNSET else tenant
        v._domain = self._domain if domain is _UNSET else domain
        self._check_scope(v._tenant, v._domain)
        return v

    def _scope(self, tenant, domain):
        return (self._tenant if tenant is None else tenant,
                self._domain if domain is _UNSET else domain)

    # ---- single objects ---------------------------------------------------------------------
    def put(self, key, value, size=None, *, tenant=None, domain=_UNSET, replicas=0,
            preferred=None, hard_pin=False):
        """Creates or overwrites ``key`` with ``value`` (a buffer, or a registered address with
        ``size``). ``replicas`` 0 = the configured default; ``preferred`` runtime ids are tried
        first; ``hard_pin`` = only those (else kvmesh.Unavailable)."""
        t, d = self._scope(tenant, domain)
        self._core.h().put(t, d, key, value, size, replicas, preferred, hard_pin)

    def put_parts(self, key, parts, *, tenant=None, domain=_UNSET, replicas=0, preferred=None,
                  hard_pin=False):
        """Gather put: the value is the concatenation of ``parts`` (1..64 buffers)."""
        t, d = self._scope(tenant, domain)
        self._core.h().putv(t, d, key, parts, replicas, preferred, hard_pin)

    def get(self, key, *, tenant=None, domain=_UNSET):
        """The value as bytes; raises kvmesh.NotFound when absent."""
        t, d = self._scope(tenant, domain)
        return self._core.h().get(t, d, key)

    def get_into(self, key, buffer, size=None, *, tenant=None, domain=_UNSET):
        """Reads into ``buffer`` (writable buffer, or a registered address with ``size``);
        returns the object size. kvmesh.TooBig when the buffer is smaller than the object."""
        t, d = self._scope(tenant, domain)
        return self._core.h().get_into(t, d, key, buffer, size)

    def get_parts(self, key, parts, *, tenant=None, domain=_UNSET):
        """Scatter get into ``parts`` in order; returns the object size."""
        t, d = self._scope(tenant, domain)
        return self._core.h().getv(t, d, key, parts)

    def remove(self, key, *, tenant=None, domain=_UNSET):
        t, d = self._scope(tenant, domain)
        self._core.h().remove(t, d, key)

    def exists(self, key, *, tenant=None, domain=_UNSET):
        t, d = self._scope(tenant, domain)
        return self._core.h().exists(t, d, key)

    def size(self, key, *, tenant=None, domain=_UNSET):
        """The object size in bytes; raises kvmesh.NotFound when absent."""
        t, d = self._scope(tenant, domain)
        return self._core.h().size(t, d, key)

    def route(self, key, *, tenant=None, domain=_UNSET):
        """The object's route: version (fencing token, sequence), length, checksum, replicas."""
        t, d = self._scope(tenant, domain)
        r = self._core.h().route(t, d, key)
        r["replicas"] = tuple(Replica(**x) for x in r["replicas"])
        return RouteInfo(**r)

    # ---- batches ---------------------------------------------------------------------------
    def batch_put(self, keys, values, sizes=None, *, tenant=None, domain=_UNSET, replicas=0,
                  preferred=None, hard_pin=False):
        """One result per key: None (stored) or the item's kvmesh.Error."""
        t, d = self._scope(tenant, domain)
        res = self._core.h().batch_put(t, d, keys, values, sizes, replicas, preferred, hard_pin)
        return [None if rc == 0 else _item_error(rc) for rc, _ in res]

    def batch_get(self, keys, *, tenant=None, domain=_UNSET):
        """One result per key: the bytes, or the item's kvmesh.Error (NotFound when absent)."""
        t, d = self._scope(tenant, domain)
        res = self._core.h().batch_get(t, d, keys)
        return [r if isinstance(r, bytes) else _item_error(r) for r in res]

    def batch_get_into(self, keys, buffers, sizes=None, *, tenant=None, domain=_UNSET):
        """Reads each key into its buffer; one result per key: the object size, or the item's
        kvmesh.Error."""
        t, d = self._scope(tenant, domain)
        res = self._core.h().batch_get_into(t, d, keys, buffers, sizes)
        return [n if rc == 0 else _item_error(rc) for rc, n in res]

    def batch_exists(self, keys, *, tenant=None, domain=_UNSET):
        """One result per key: True / False, or the item's kvmesh.Error."""
        t, d = self._scope(tenant, domain)
        res = self._core.h().batch_exists(t, d, keys)
        enoent = _native.CODES["KVMESH_ENOENT"]
        return [True if rc == 0 else False if rc == enoent else _item_error(rc) for rc, _ in res]

    def batch_size(self, keys, *, tenant=None, domain=_UNSET):
        """One result per key: the object size, or the item's kvmesh.Error."""
        t, d = self._scope(tenant, domain)
        res = self._core.h().batch_exists(t, d, keys)
        return [n if rc == 0 else _item_error(rc) for rc, n in res]

    def batch_remove(self, keys, *, tenant=None, domain=_UNSET):
        """One result per key: None (removed) or the item's kvmesh.Error."""
        t, d = self._scope(tenant, domain)
        res = self._core.h().batch_remove(t, d, keys)
        return [None if rc == 0 else _item_error(rc) for rc, _ in res]

    # ---- registered buffers ------------------------------------------------------------------
    def register_buffer(self, buffer, size=None):
        """Registers a buffer-protocol object (held until unregistered) or a raw address with
        ``size``; returns the address. Reads into and puts from it are zero-copy."""
        return self._core.h().register_buffer(buffer, size)

    def unregister_buffer(self, buffer):
        """Unregisters by the object or its start address."""
        self._core.h().unregister_buffer(buffer)

    def registered_buffers(self):
        """[(address, size)] of the registrations of this store."""
        return self._core.h().registered()

    # ---- cluster view ------------------------------------------------------------------------
    def members(self):
        return [Member(**m) for m in self._core.h().members()]

    def self_id(self):
        """(runtime id hex, epoch) of this runtime."""
        return self._core.h().self_id()

    def __repr__(self):
        state = "open" if self.is_open else "closed"
        return (f"<kvmesh.Store {state} {self._core.config['metadata_url']} "
                f"deployment={self._core.config['deployment']} tenant={self._tenant} "
                f"domain={self._domain}>")
