# SPDX-License-Identifier: Apache-2.0
"""kvmesh.mooncake: Mooncake's ``MooncakeDistributedStore`` surface over kvmesh.

An engine that uses ``from mooncake.store import MooncakeDistributedStore`` switches with
``from kvmesh.mooncake import MooncakeDistributedStore``. Method names, argument names, defaults
and return conventions follow Mooncake's Python store (shared/reference/mooncake-python-api.md):
0 or a negative error code, bytes (empty on a miss), lists of per-item ints.

Mapping (docs/python.md has the full table):
  - ``tenant_id`` is the kvmesh tenant of every call; ``metadata_server`` is a kvmesh metadata URL
    (``redis://``, ``etcd://``, ``memory://NAME``; empty = ``memory://default``, one process);
    ``master_server_addr`` is accepted and ignored (kvmesh has no master);
  - ``global_segment_size`` is the memory this process contributes (``memory_size``; 0 = client
    only); sizes are ints or strings with Mooncake's binary units ("16MB" = 16 MiB); percentages
    and other forms raise ValueError (kvmesh.InvalidArgument) naming the argument;
  - negative returns are Mooncake ``ErrorCode`` values (ERROR_CODES below), translated from the
    KVMESH_E* code; ``last_error`` holds the kvmesh name and message of the latest failure;
  - a method kvmesh cannot honour returns UNAVAILABLE_IN_CURRENT_MODE (-1011) and logs why once
    (nothing pretends to work).
"""
import ctypes
import enum
import logging
import mmap
import os
import re

from . import _errors, _native, tensor as _tensor
from .store import Store

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "BufferHandle",
           "BufferDescriptor", "MemoryDescriptor", "DiskDescriptor", "ReplicaDescriptor",
           "MooncakeHostMemAllocator", "ERROR_CODES", "parse_size"]

log = logging.getLogger("kvmesh.mooncake")

# Mooncake's ErrorCode values used here.
OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
WRITE_FAIL = -500
INVALID_PARAMS = -600
INVALID_READ = -701
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
TRANSFER_FAIL = -800
RPC_FAIL = -900
UNAVAILABLE_IN_CURRENT_STATUS = -1010
UNAVAILABLE_IN_CURRENT_MODE = -1011

ERROR_CODES = {
    "OK": OK, "INTERNAL_ERROR": INTERNAL_ERROR, "BUFFER_OVERFLOW": BUFFER_OVERFLOW,
    "NO_AVAILABLE_HANDLE": NO_AVAILABLE_HANDLE, "INVALID_KEY": INVALID_KEY,
    "WRITE_FAIL": WRITE_FAIL, "INVALID_PARAMS": INVALID_PARAMS, "INVALID_READ": INVALID_READ,
    "OBJECT_NOT_FOUND": OBJECT_NOT_FOUND, "OBJECT_ALREADY_EXISTS": OBJECT_ALREADY_EXISTS,
    "TRANSFER_FAIL": TRANSFER_FAIL, "RPC_FAIL": RPC_FAIL,
    "UNAVAILABLE_IN_CURRENT_STATUS": UNAVAILABLE_IN_CURRENT_STATUS,
    "UNAVAILABLE_IN_CURRENT_MODE": UNAVAILABLE_IN_CURRENT_MODE,
}

_KV_TO_MC = {
    "KVMESH_ENOENT": OBJECT_NOT_FOUND,
    "KVMESH_EEXIST": OBJECT_ALREADY_EXISTS,
    "KVMESH_EINVAL": INVALID_PARAMS, "KVMESH_EBADTENANT": INVALID_PARAMS,
    "KVMESH_EBADDOMAIN": INVALID_PARAMS, "KVMESH_ERANGE": INVALID_PARAMS,
    "KVMESH_ECONFIG": INVALID_PARAMS, "KVMESH_EURL": INVALID_PARAMS,
    "KVMESH_EBADKEY": INVALID_KEY,
    "KVMESH_ETOOBIG": BUFFER_OVERFLOW,
    "KVMESH_ENOSPC": NO_AVAILABLE_HANDLE, "KVMESH_EQUOTA": NO_AVAILABLE_HANDLE,
    "KVMESH_EUNAVAILABLE": NO_AVAILABLE_HANDLE,
    "KVMESH_ETIMEDOUT": RPC_FAIL, "KVMESH_ECONN": RPC_FAIL, "KVMESH_EPROTO": RPC_FAIL,
    "KVMESH_EAUTH": RPC_FAIL, "KVMESH_EINCOMPAT": RPC_FAIL,
    "KVMESH_EIO": TRANSFER_FAIL,
    "KVMESH_ECHECKSUM": INVALID_READ, "KVMESH_ECORRUPT": INVALID_READ,
    "KVMESH_EINDETERMINATE": WRITE_FAIL,
    "KVMESH_ECLOSED": UNAVAILABLE_IN_CURRENT_STATUS, "KVMESH_EAGAIN": UNAVAILABLE_IN_CURRENT_STATUS,
    "KVMESH_ENOTSUP": UNAVAILABLE_IN_CURRENT_MODE,
}


def to_mooncake_code(err):
    """The Mooncake ErrorCode for a kvmesh.Error."""
    return _KV_TO_MC.get(err.name, INTERNAL_ERROR)


class SoftPinAction(enum.IntEnum):
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicateConfig:
    """Mooncake's replication options. kvmesh honours replica_num, preferred_segment(s),
    with_hard_pin; prefer_alloc_in_same_node and data_type are accepted (kvmesh already places
    the first replica on the calling runtime when it stores data). Options with no kvmesh
    equivalent (soft pin ENABLE, NoF/DFS replicas, NoF segments, group ids) make the call
    return UNAVAILABLE_IN_CURRENT_MODE."""

    def __init__(self):
        self.replica_num = 1
        self.nof_replica_num = 0
        self.dfs_replica_num = 0
        self.soft_pin_action = SoftPinAction.PRESERVE
        self.soft_pin_ttl_ms = 0
        self.with_hard_pin = False
        self.preferred_segments = []
        self.preferred_nof_segments = []
        self.preferred_segment = ""
        self.prefer_alloc_in_same_node = False
        self.data_type = 0
        self.group_ids = []

    def __repr__(self):
        return (f"ReplicateConfig(replica_num={self.replica_num}, "
                f"with_hard_pin={self.with_hard_pin}, preferred_segments="
                f"{self.preferred_segments!r}, preferred_segment={self.preferred_segment!r})")


class BufferHandle(bytearray):
    """A buffer returned by get_buffer: the bytes, with Mooncake's ptr() and size()."""

    def ptr(self):
        return _native.address(self) if len(self) else 0

    def size(self):
        return len(self)


class BufferDescriptor:
    def __init__(self, segment_name="", buffer_address=0, size=0):
        self.segment_name = segment_name
        self.buffer_address = buffer_address
        self.size = size

    def __repr__(self):
        return (f"BufferDescriptor(segment_name={self.segment_name!r}, "
                f"buffer_address={self.buffer_address}, size={self.size})")


class MemoryDescriptor:
    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    """Mooncake's disk replica descriptor. kvmesh has no disk replicas: never produced."""

    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One replica of an object: kvmesh replicas are memory replicas on runtime ``owner``."""

    def __init__(self, owner, segment, offset, length):
        self.owner = owner
        self.status = "COMPLETE"
        self._mem = MemoryDescriptor(BufferDescriptor(owner, offset, length))
        self.segment = segment

    def is_memory_replica(self):
        return True

    def is_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        return self._mem

    def get_disk_descriptor(self):
        raise RuntimeError("kvmesh replicas are memory replicas; there is no disk descriptor")

    def __repr__(self):
        return f"ReplicaDescriptor(owner={self.owner!r}, segment={self.segment}, " \
               f"offset={self._mem.buffer_descriptor.buffer_address}, " \
               f"size={self._mem.buffer_descriptor.size})"


class MooncakeHostMemAllocator:
    """Page-aligned host memory (anonymous mmap) for zero-copy buffers: alloc(size) -> address,
    free(address). The memory lives until free() or the allocator is collected."""

    def __init__(self):
        self._maps = {}

    def alloc(self, size):
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"size must be a positive int, got {size!r}")
        m = mmap.mmap(-1, size)
        addr = _native.address(m)
        self._maps[addr] = m
        return addr

    def free(self, address):
        m = self._maps.pop(address, None)
        if m is None:
            return INVALID_PARAMS
        try:
            m.close()
        except BufferError:  # still registered somewhere: keep it alive
            self._maps[address] = m
            return UNAVAILABLE_IN_CURRENT_STATUS
        return OK

    def buffer(self, address):
        """The mmap object behind an address returned by alloc."""
        return self._maps[address]


# ---- sizes -------------------------------------------------------------------------------------
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40,
          "TB": 1 << 40, "TIB": 1 << 40}


def _bad(msg):
    return _errors.make(_native.CODES["KVMESH_EINVAL"], "KVMESH_EINVAL", msg)


def parse_size(value, what):
    """An int, or a string "N[unit]" with Mooncake's binary units (KB = 1024). Percentages
    ("50%") and fractions are rejected with kvmesh.InvalidArgument naming ``what``."""
    if isinstance(value, bool):
        raise _bad(f"{what}: a size is an int or a string like '16MB', not a bool")
    if isinstance(value, int):
        if value < 0:
            raise _bad(f"{what}: size must be >= 0, got {value}")
        return value
    if not isinstance(value, str):
        raise _bad(f"{what}: a size is an int or a string like '16MB', not "
                   f"{type(value).__name__}")
    s = value.strip()
    if s.endswith("%"):
        raise _bad(f"{what}: {value!r} is a percentage; kvmesh needs an absolute size "
                   "(e.g. '16MB' or '1GB')")
    m = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", s)
    if not m or m.group(2).upper() not in _UNITS:
        raise _bad(f"{what}: {value!r} is not a size; use an integer with an optional unit "
                   "B, KB, MB, GB, TB (binary: 1KB = 1024 bytes)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _bool_arg(value, what):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0",
                                                    "no", "off", ""):
        return value.lower() in ("true", "1", "yes", "on")
    if isinstance(value, int):
        return bool(value)
    raise _bad(f"{what}: {value!r} is not a boolean")


_SETUP_KEYS = ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
               "protocol", "rdma_devices", "master_server_addr", "engine", "enable_ssd_offload",
               "ssd_offload_path", "tenant_id", "enable_client_http_server", "client_http_port")

DEFAULT_CLIENT_HTTP_PORT = 9300


def _not_supported(method, why):
    """A MooncakeDistributedStore method that kvmesh does not implement: any call records
    "<method>: not supported by kvmesh: <why>" in last_error, warns once per method, and
    returns UNAVAILABLE_IN_CURRENT_MODE."""
    def unsupported(self, *args, **kwargs):
        return self._unsupported(method, why)
    unsupported.__name__ = method
    unsupported.__qualname__ = f"MooncakeDistributedStore.{method}"
    unsupported.__doc__ = f"Not supported by kvmesh: {why}."
    return unsupported


class MooncakeDistributedStore:
    """Mooncake's client class over one kvmesh runtime. ``kvmesh_config`` (a kvmesh extension)
    adds kvmesh configuration fields (e.g. ``{"deployment": "prod"}``) to what setup derives."""

    def __init__(self, kvmesh_config=None):
        self._extra = dict(kvmesh_config or {})
        self._store = None
        self._hostname = ""
        self._allocator = MooncakeHostMemAllocator()
        self._pool = []  # addresses from alloc_from_mem_pool (registered)
        self._warned = set()
        self.last_error = ""

    # ---- errors ---------------------------------------------------------------------------
    def _fail(self, err):
        self.last_error = f"{err.name}: {err.message}"
        return to_mooncake_code(err)

    def _unsupported(self, method, why):
        self.last_error = f"{method}: not supported by kvmesh: {why}"
        if method not in self._warned:
            self._warned.add(method)
            log.warning("%s", self.last_error)
        return UNAVAILABLE_IN_CURRENT_MODE

    def _s(self):
        if self._store is None or not self._store.is_open:
            raise _errors.make(_native.CODES["KVMESH_ECLOSED"], "KVMESH_ECLOSED",
                               "the store is not set up; call setup() first")
        return self._store

    def _call(self, fn, *a, **kw):
        """fn(*a) -> 0 on success; kvmesh errors become Mooncake codes."""
        try:
            r = fn(*a, **kw)
        except _errors.Error as e:
            return self._fail(e)
        return OK if r is None else r

    def _opts(self, config, method):
        """kvmesh put keywords for a ReplicateConfig, or a Mooncake error code."""
        if config is None:
            config = ReplicateConfig()
        if not isinstance(config, ReplicateConfig):
            raise TypeError(f"config must be a ReplicateConfig, not {type(config).__name__}")
        if config.soft_pin_action == SoftPinAction.ENABLE:
            return self._unsupported(f"{method}(soft_pin_action=ENABLE)",
                                     "kvmesh has no soft pins; eviction is by watermark")
        if config.nof_replica_num or config.dfs_replica_num or config.preferred_nof_segments:
            return self._unsupported(f"{method}(NoF/DFS replicas)",
                                     "kvmesh keeps hot replicas in runtime memory only")
        if config.group_ids:
            return self._unsupported(f"{method}(group_ids)", "kvmesh has no replica groups")
        if not isinstance(config.replica_num, int) or not 1 <= config.replica_num <= 8:
            self.last_error = f"replica_num must be 1..8, got {config.replica_num!r}"
            return INVALID_PARAMS
        prefs = list(config.preferred_segments or [])
        if config.preferred_segment:
            prefs.insert(0, config.preferred_segment)
        owners = []
        if prefs:
            try:
                owners = [self._owner_id(p) for p in prefs]
            except _errors.Error as e:
                return self._fail(e)
        if config.with_hard_pin and not owners:
            self.last_error = "with_hard_pin needs preferred_segment(s)"
            return INVALID_PARAMS
        return {"replicas": config.replica_num, "preferred": owners or None,
                "hard_pin": bool(config.with_hard_pin)}

    def _owner_id(self, segment):
        """A Mooncake segment name -> a kvmesh runtime id: a 32-hex id as is, this store's
        local_hostname = this runtime, else a member's address (host:port)."""
        if re.fullmatch(r"[0-9a-fA-F]{32}", segment):
            return segment.lower()
        s = self._s()
        if segment == self._hostname:
            return s.self_id()[0]
        for m in s.members():
            if m.address == segment:
                return m.id
        raise _bad(f"preferred segment {segment!r} is neither a runtime id nor the address of "
                   "a live runtime")

    # ---- setup -------------------------------------------------------------------------------
    def setup(self, local_hostname=None, metadata_server=None, global_segment_size=16 << 20,
              local_buffer_size=16 << 20, protocol="tcp", rdma_devices="",
              master_server_addr="127.0.0.1:50051", engine=None, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
              client_http_port=DEFAULT_CLIENT_HTTP_PORT):
        """Both Mooncake forms: positional/keyword, or one dict of string values. Returns 0 or a
        negative code; malformed arguments raise kvmesh.InvalidArgument (a ValueError)."""
        if isinstance(local_hostname, dict):
            if metadata_server is not None:
                raise TypeError("setup(config_dict) takes the dict alone")
            cfg = local_hostname
            unknown = sorted(set(cfg) - set(_SETUP_KEYS))
            if unknown:
                raise _bad(f"setup: unknown key(s) {unknown}; known: {', '.join(_SETUP_KEYS)}")
            for req in ("local_hostname", "metadata_server"):
                if req not in cfg:
                    raise _bad(f"setup: the dict needs {req!r}")
            kw = {k: cfg[k] for k in _SETUP_KEYS if k in cfg}
            return self.setup(**kw)
        if local_hostname is None:
            raise _bad("setup: local_hostname is required")
        if self._store is not None and self._store.is_open:
            self.last_error = "setup: already set up; close() first"
            return UNAVAILABLE_IN_CURRENT_STATUS
        fields = self._fields(local_hostname, metadata_server, global_segment_size,
                              local_buffer_size, protocol, rdma_devices, enable_ssd_offload,
                              enable_client_http_server, client_http_port)
        if not isinstance(tenant_id, str) or not tenant_id:
            raise _bad(f"setup: tenant_id must be a non-empty str, got {tenant_id!r}")
        del master_server_addr, engine, ssd_offload_path  # accepted; kvmesh has no master
        fields.update({k: v for k, v in self._extra.items()})
        try:
            self._store = Store(fields, tenant=tenant_id)
        except _errors.Error as e:
            return self._fail(e)
        self._hostname = str(local_hostname)
        return OK

    def _fields(self, local_hostname, metadata_server, global_segment_size, local_buffer_size,
                protocol, rdma_devices, enable_ssd_offload, enable_http, http_port):
        if not isinstance(local_hostname, str) or not local_hostname:
            raise _bad("setup: local_hostname must be a non-empty str (host or host:port)")
        host, _, port = local_hostname.rpartition(":") if re.search(r":\d+$", local_hostname) \
            else (local_hostname, "", "0")
        url = metadata_server or "memory://default"
        if not isinstance(url, str):
            raise _bad("setup: metadata_server must be a str URL")
        if not re.match(r"^(redis|etcd|memory)://", url):
            raise _bad(f"setup: metadata_server {url!r} is not a kvmesh metadata URL; use "
                       "redis://host:port, etcd://host:port[,...] or memory://NAME")
        mem = parse_size(global_segment_size, "global_segment_size")
        parse_size(local_buffer_size, "local_buffer_size")  # validated; kvmesh needs no staging
        proto = str(protocol or "tcp").lower()
        transports = {"tcp": "auto", "auto": "auto", "shm": "shm"}
        if proto not in transports:
            raise _bad(f"setup: protocol {protocol!r} is not available in kvmesh (tcp, shm; "
                       "tcp also uses shared memory between runtimes on one host)")
        if _bool_arg(enable_ssd_offload, "enable_ssd_offload"):
            raise _bad("setup: enable_ssd_offload is not supported by kvmesh (no SSD tier in "
                       "this client)")
        del rdma_devices
        fields = {"metadata_url": url, "memory_size": str(mem),
                  "listen": f"{host or '127.0.0.1'}:{port}", "transport": transports[proto]}
        if mem:
            seg = min(mem, 64 << 20)
            if seg < 1 << 20:
                raise _bad(f"global_segment_size {mem} is below kvmesh's 1MB segment minimum "
                           "(use 0 for a client that stores nothing)")
            fields["segment_size"] = str(seg)
            fields["max_object_size"] = str(seg)
            # memory_size must be a whole number of segments
            fields["memory_size"] = str(mem - mem % seg)
        if _bool_arg(enable_http, "enable_client_http_server"):
            fields["admin_listen"] = f"{host or '127.0.0.1'}:{int(http_port)}"
        return fields

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        return self._unsupported("setup_dummy", "kvmesh has no dummy/real client split; "
                                 "use setup() with memory 0 for a client-only runtime")

    def init_all(self, protocol, device_name, mount_segment_size=16 << 20):
        return self._unsupported("init_all", "use setup(); kvmesh joins in one step")

    def close(self):
        if self._store is not None:
            for addr in self._pool:
                try:
                    self._store.unregister_buffer(addr)
                except _errors.Error:
                    pass
                self._allocator.free(addr)
            self._pool = []
            self._store.close()
        return OK

    def health_check(self):
        try:
            s = self._s()
            sid, _ = s.self_id()
            return 0 if any(m.id == sid and m.state == "active" for m in s.members()) else 1
        except _errors.Error as e:
            self._fail(e)
            return 1

    def get_hostname(self):
        return self._hostname

    def bind_to_numa_node(self, node):
        """Pins this process's threads to the CPUs of NUMA node ``node`` (sched_setaffinity)."""
        try:
            with open(f"/sys/devices/system/node/node{int(node)}/cpulist") as f:
                spec = f.read().strip()
        except (OSError, ValueError):
            self.last_error = f"bind_to_numa_node: no NUMA node {node!r}"
            return INVALID_PARAMS
        cpus = set()
        for part in spec.split(","):
            a, _, b = part.partition("-")
            cpus.update(range(int(a), int(b or a) + 1))
        os.sched_setaffinity(0, cpus)
        return OK

    # ---- plain bytes -------------------------------------------------------------------------
    def put(self, key, value, config=None):
        o = self._opts(config, "put")
        if isinstance(o, int):
            return o
        return self._call(lambda: self._s().put(key, value, **o))

    def upsert(self, key, value, config=None):
        return self.put(key, value, config)

    def put_parts(self, key, *parts, config=None):
        o = self._opts(config, "put_parts")
        if isinstance(o, int):
            return o
        return self._call(lambda: self._s().put_parts(key, list(parts), **o))

    def upsert_parts(self, key, *parts, config=None):
        return self.put_parts(key, *parts, config=config)

    def put_batch(self, keys, values, config=None):
        o = self._opts(config, "put_batch")
        if isinstance(o, int):
            return o
        try:
            res = self._s().batch_put(keys, values, **o)
        except _errors.Error as e:
            return self._fail(e)
        for r in res:
            if r is not None:
                return self._fail(r)
        return OK

    def upsert_batch(self, keys, values, config=None):
        return self.put_batch(keys, values, config)

    def get(self, key):
        try:
            return self._s().get(key)
        except _errors.Error as e:
            self._fail(e)
            return b""

    def get_batch(self, keys):
        try:
            res = self._s().batch_get(keys)
        except _errors.Error as e:
            self._fail(e)
            return [b""] * len(keys)
        return [r if isinstance(r, bytes) else b"" for r in res]

    def get_buffer(self, key):
        """A BufferHandle with the value, or None on a miss."""
        try:
            s = self._s()
            for _ in range(3):
                n = s.size(key)
                h = BufferHandle(n)
                try:
                    got = s.get_into(key, h)
                except _errors.TooBig:
                    continue
                del h[got:]
                return h
        except _errors.Error as e:
            self._fail(e)
        return None

    def batch_get_buffer(self, keys):
        try:
            res = self._s().batch_get(keys)
        except _errors.Error as e:
            self._fail(e)
            return [None] * len(keys)
        return [BufferHandle(r) if isinstance(r, bytes) else None for r in res]

    def remove(self, key, force=False):
        return self._call(lambda: self._s().remove(key))

    def batch_remove(self, keys, force=False):
        try:
            res = self._s().batch_remove(keys)
        except _errors.Error as e:
            return [self._fail(e)] * len(keys)
        return [OK if r is None else self._fail(r) for r in res]

    def remove_by_regex(self, regex_pattern, force=False):
        return self._unsupported("remove_by_regex", "the kvmesh C API has no key listing, so "
                                 "a pattern cannot be expanded; remove keys by name "
                                 "(batch_remove)")

    def remove_all(self, force=False):
        return self._unsupported("remove_all", "the kvmesh C API has no key listing; remove "
                                 "keys by name (batch_remove), or use a fresh deployment")

    def is_exist(self, key):
        try:
            return 1 if self._s().exists(key) else 0
        except _errors.Error as e:
            return self._fail(e)

    def batch_is_exist(self, keys):
        try:
            res = self._s().batch_exists(keys)
        except _errors.Error as e:
            return [self._fail(e)] * len(keys)
        return [1 if r is True else 0 if r is False else self._fail(r) for r in res]

    def get_size(self, key):
        try:
            return self._s().size(key)
        except _errors.Error as e:
            return self._fail(e)

    # ---- zero copy ---------------------------------------------------------------------------
    def register_buffer(self, buffer_ptr, size):
        return self._call(lambda: self._s().register_buffer(buffer_ptr, size) and None)

    def unregister_buffer(self, buffer_ptr):
        return self._call(lambda: self._s().unregister_buffer(buffer_ptr))

    def alloc_from_mem_pool(self, size):
        """Registered host memory of ``size`` bytes (freed at close); 0 on failure."""
        try:
            addr = self._allocator.alloc(size)
        except ValueError as e:
            self.last_error = str(e)
            return 0
        try:
            self._s().register_buffer(addr, size)
        except _errors.Error as e:
            self._allocator.free(addr)
            self._fail(e)
            return 0
        self._pool.append(addr)
        return addr

    def put_from(self, key, buffer_ptr, size, config=None):
        o = self._opts(config, "put_from")
        if isinstance(o, int):
            return o
        return self._call(lambda: self._s().put(key, buffer_ptr, size, **o))

    def upsert_from(self, key, buffer_ptr, size, config=None):
        return self.put_from(key, buffer_ptr, size, config)

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
                               config=None):
        """Stores metadata followed by data as one object (one gather put)."""
        o = self._opts(config, "put_from_with_metadata")
        if isinstance(o, int):
            return o
        try:
            parts = [self._registered_view(metadata_buffer_ptr, metadata_size),
                     self._registered_view(buffer_ptr, size)]
            self._s().put_parts(key, [p for p in parts if len(p)], **o)
        except _errors.Error as e:
            return self._fail(e)
        return OK

    def get_into(self, key, buffer_ptr, size):
        try:
            return self._s().get_into(key, buffer_ptr, size)
        except _errors.Error as e:
            return self._fail(e)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        o = self._opts(config, "batch_put_from")
        if isinstance(o, int):
            return [o] * len(keys)
        try:
            res = self._s().batch_put(keys, buffer_ptrs, sizes, **o)
        except _errors.Error as e:
            return [self._fail(e)] * len(keys)
        return [OK if r is None else self._fail(r) for r in res]

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return self.batch_put_from(keys, buffer_ptrs, sizes, config)

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        try:
            res = self._s().batch_get_into(keys, buffer_ptrs, sizes)
        except _errors.Error as e:
            return [self._fail(e)] * len(keys)
        return [r if isinstance(r, int) else self._fail(r) for r in res]

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Per key, the value is the concatenation of its buffers (one gather put per key)."""
        o = self._opts(config, "batch_put_from_multi_buffers")
        if isinstance(o, int):
            return [o] * len(keys)
        if not len(keys) == len(all_buffer_ptrs) == len(all_sizes):
            self.last_error = "keys, all_buffer_ptrs and all_sizes differ in length"
            return [INVALID_PARAMS] * len(keys)
        out = []
        for k, ptrs, szs in zip(keys, all_buffer_ptrs, all_sizes):
            out.append(self._call(lambda: self._putv_raw(k, ptrs, szs, o)))
        return out

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_same_node=False):
        """Per key, scatter the value into its buffers in order; bytes read or a code."""
        if not len(keys) == len(all_buffer_ptrs) == len(all_sizes):
            self.last_error = "keys, all_buffer_ptrs and all_sizes differ in length"
            return [INVALID_PARAMS] * len(keys)
        out = []
        for k, ptrs, szs in zip(keys, all_buffer_ptrs, all_sizes):
            try:
                out.append(self._getv_raw(k, ptrs, szs))
            except _errors.Error as e:
                out.append(self._fail(e))
        return out

    def _views(self, ptrs, sizes):
        if len(ptrs) != len(sizes):
            raise _bad(f"{len(ptrs)} buffers but {len(sizes)} sizes")
        return [self._registered_view(p, n) for p, n in zip(ptrs, sizes)]

    def _registered_view(self, ptr, size):
        """A memoryview of [ptr, ptr+size) inside a registration of this store."""
        if not isinstance(ptr, int) or not isinstance(size, int) or size < 0:
            raise _bad(f"need an address (int) and a size >= 0, got {ptr!r}, {size!r}")
        for base, n in self._s().registered_buffers():
            if base <= ptr and ptr + size <= base + n:
                return memoryview((ctypes.c_char * size).from_address(ptr)).cast("B")
        raise _bad(f"pointer 0x{ptr:x} with size {size} is not inside a registered buffer; "
                   "call register_buffer(ptr, size) first")

    def _putv_raw(self, key, ptrs, sizes, o):
        self._s().put_parts(key, self._views(ptrs, sizes), **o)

    def _getv_raw(self, key, ptrs, sizes):
        return self._s().get_parts(key, self._views(ptrs, sizes))

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """For each i: for each j, copies bytes [src, src+size) of object all_keys[i][j] to
        buffer_ptrs[i] + dst. kvmesh has no ranged read: each object is read whole into a
        staging buffer and the range copied (not zero copy). Returns per i a list of bytes
        copied or a negative code per range."""
        out = []
        n = len(buffer_ptrs)
        if not n == len(all_keys) == len(all_dst_offsets) == len(all_src_offsets) == \
                len(all_sizes):
            self.last_error = "get_into_ranges: argument lists differ in length"
            return [[INVALID_PARAMS]] * n
        for base, keys, dsts, srcs, szs in zip(buffer_ptrs, all_keys, all_dst_offsets,
                                               all_src_offsets, all_sizes):
            row = []
            cache = {}
            for k, dst, src, sz in zip(keys, dsts, srcs, szs):
                try:
                    view = self._registered_view(base + dst, sz)
                    if k not in cache:
                        cache[k] = self._s().get(k)
                    data = cache[k]
                    if src < 0 or src + sz > len(data):
                        raise _bad(f"range [{src}, {src + sz}) outside object {k!r} of "
                                   f"{len(data)} bytes")
                    view[:] = data[src:src + sz]
                    row.append(sz)
                except _errors.Error as e:
                    row.append(self._fail(e))
            out.append(row)
        return out

    batch_put_from_multi_buffers_ranges = _not_supported("batch_put_from_multi_buffers_ranges",
                                                         "kvmesh has no ranged writes into "
                                                         "existing objects")

    batch_get_into_multi_buffers_ranges = _not_supported("batch_get_into_multi_buffers_ranges",
                                                         "kvmesh has no ranged reads (see "
                                                         "get_into_ranges)")

    batch_get_session_start = _not_supported("batch_get_session_start",
                                             "kvmesh batches are one call (batch_get_into); there "
                                             "are no sessions")

    batch_get_session_end = _not_supported("batch_get_session_end", "no sessions in kvmesh")

    batch_put_session_start = _not_supported("batch_put_session_start",
                                             "kvmesh batches are one call (batch_put_from); there "
                                             "are no sessions")

    batch_put_session_end = _not_supported("batch_put_session_end", "no sessions in kvmesh")

    batch_put_session_revoke = _not_supported("batch_put_session_revoke", "no sessions in kvmesh")

    # ---- segments ----------------------------------------------------------------------------
    mount_segment = _not_supported("mount_segment",
                                   "a kvmesh runtime's storage is fixed at open "
                                   "(global_segment_size); caller memory cannot become storage")

    unmount_segment = _not_supported("unmount_segment", "see mount_segment")

    allocate_and_mount_segment = _not_supported("allocate_and_mount_segment", "see mount_segment")

    unmount_and_free_segment = _not_supported("unmount_and_free_segment", "see mount_segment")

    # ---- replicas and tasks ------------------------------------------------------------------
    def get_replica_desc(self, key):
        """The replicas of ``key`` as ReplicaDescriptor objects ([] on a miss)."""
        try:
            r = self._s().route(key)
        except _errors.Error as e:
            self._fail(e)
            return []
        return [ReplicaDescriptor(x.owner, x.segment, x.offset, x.length) for x in r.replicas]

    def batch_get_replica_desc(self, keys):
        return {k: self.get_replica_desc(k) for k in keys}

    batch_replica_clear = _not_supported("batch_replica_clear",
                                         "replicas are managed by the runtimes (repair and "
                                         "eviction); the C API cannot drop one replica")

    create_copy_task = _not_supported("create_copy_task",
                                      "kvmesh has no task manager; replicas move by drain and "
                                      "repair")

    create_move_task = _not_supported("create_move_task", "kvmesh has no task manager")

    query_task = _not_supported("query_task", "kvmesh has no task manager")

    # ---- tensors -----------------------------------------------------------------------------
    def _t(self, fn, *a, **kw):
        try:
            r = fn(self._s(), *a, **kw)
        except _errors.Error as e:
            return self._fail(e)
        return OK if r is None else r

    def _topts(self, config, method):
        if config is None:
            return {}
        return self._opts(config, method)

    def put_tensor(self, key, tensor, config=None):
        o = self._topts(config, "put_tensor")
        if isinstance(o, int):
            return o
        return self._t(_tensor.put_tensor, key, tensor, **o)

    upsert_tensor = put_tensor

    def pub_tensor(self, key, tensor, config=None):
        return self.put_tensor(key, tensor, config)

    def get_tensor(self, key):
        """The tensor, or None on a miss or error (see last_error)."""
        try:
            return _tensor.get_tensor(self._s(), key)
        except _errors.Error as e:
            self._fail(e)
            return None

    def batch_put_tensor(self, keys, tensors, config=None):
        o = self._topts(config, "batch_put_tensor")
        if isinstance(o, int):
            return [o] * len(keys)
        try:
            res = _tensor.batch_put_tensors(self._s(), keys, tensors, **o)
        except _errors.Error as e:
            return [self._fail(e)] * len(keys)
        return [OK if r is None else self._fail(r) for r in res]

    batch_upsert_tensor = batch_put_tensor

    def batch_pub_tensor(self, keys, tensors, config=None):
        return self.batch_put_tensor(keys, tensors, config)

    def batch_get_tensor(self, keys):
        try:
            res = _tensor.batch_get_tensors(self._s(), keys)
        except _errors.Error as e:
            self._fail(e)
            return [None] * len(keys)
        out = []
        for r in res:
            if isinstance(r, _errors.Error):
                self._fail(r)
                out.append(None)
            else:
                out.append(r)
        return out

    def put_tensor_from(self, key, buffer_ptr, size, config=None):
        """Stores ``size`` bytes at a registered address that already hold a tensor object
        (header + payload, as get_tensor_into leaves it)."""
        return self.put_from(key, buffer_ptr, size, config)

    def get_tensor_into(self, key, buffer_ptr, size):
        """Reads the tensor object into registered memory at ``buffer_ptr`` and returns a tensor
        viewing that memory (zero copy), or None on a miss or error."""
        import torch
        try:
            n = self._s().get_into(key, buffer_ptr, size)
            view = self._registered_view(buffer_ptr, n)
            dt, shape, hl, pl = _tensor.decode_header(view)
            if n != hl + pl:
                raise _bad(f"object {key!r} is not a whole tensor object")
            if pl == 0:
                return torch.empty(shape, dtype=getattr(torch, dt))
            return torch.frombuffer(view, dtype=getattr(torch, dt),
                                    count=pl // _tensor._ITEMSIZE[dt], offset=hl).reshape(shape)
        except _errors.Error as e:
            self._fail(e)
            return None

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0, config=None):
        o = self._topts(config, "put_tensor_with_tp")
        if isinstance(o, int):
            return o
        try:
            res = _tensor.put_tensor_with_tp(self._s(), key, tensor, tp_rank, tp_size, split_dim,
                                             **o)
        except _errors.Error as e:
            return self._fail(e)
        for r in res:
            if r is not None:
                return self._fail(r)
        return OK

    upsert_tensor_with_tp = put_tensor_with_tp
    pub_tensor_with_tp = put_tensor_with_tp

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        try:
            return _tensor.get_tensor_with_tp(self._s(), key, tp_rank, tp_size, split_dim)
        except _errors.Error as e:
            self._fail(e)
            return None

    def batch_put_tensor_with_tp(self, keys, tensors, tp_rank=0, tp_size=1, split_dim=0,
                                 config=None):
        o = self._topts(config, "batch_put_tensor_with_tp")
        if isinstance(o, int):
            return [o] * len(keys)
        try:
            res = _tensor.batch_put_tensors_with_tp(self._s(), keys, tensors, tp_rank, tp_size,
                                                    split_dim, **o)
        except _errors.Error as e:
            return [self._fail(e)] * len(keys)
        out = []
        for per_key in res:
            bad = [r for r in per_key if r is not None]
            out.append(self._fail(bad[0]) if bad else OK)
        return out

    batch_upsert_tensor_with_tp = batch_put_tensor_with_tp
    batch_pub_tensor_with_tp = batch_put_tensor_with_tp

    def batch_get_tensor_with_tp(self, keys, tp_rank=0, tp_size=1, split_dim=0):
        try:
            res = _tensor.batch_get_tensors_with_tp(self._s(), keys, tp_rank, tp_size, split_dim)
        except _errors.Error as e:
            self._fail(e)
            return [None] * len(keys)
        return [None if isinstance(r, _errors.Error) else r for r in res]

    put_tensor_with_parallelism = _not_supported("put_tensor_with_parallelism",
                                                 "only tensor parallelism (*_with_tp) is "
                                                 "implemented")

    get_tensor_with_parallelism = _not_supported("get_tensor_with_parallelism",
                                                 "only tensor parallelism (*_with_tp) is "
                                                 "implemented")

    batch_put_tensor_with_parallelism = _not_supported("batch_put_tensor_with_parallelism",
                                                       "only *_with_tp")

    batch_get_tensor_with_parallelism = _not_supported("batch_get_tensor_with_parallelism",
                                                       "only *_with_tp")

    # ---- kvmesh extensions -------------------------------------------------------------------
    @property
    def kvmesh_store(self):
        """The underlying kvmesh.Store (None before setup)."""
        return self._store

