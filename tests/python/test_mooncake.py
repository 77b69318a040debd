# SPDX-License-Identifier: Apache-2.0
"""kvmesh.mooncake.MooncakeDistributedStore against the real 3-kvmeshd Redis cluster (and the
in-process memory:// default): every method, Mooncake's return conventions and errors."""
import threading
import uuid

import pytest
import torch

import kvmesh
from kvmesh import mooncake as mc
from kvmesh.mooncake import MooncakeDistributedStore, ReplicateConfig, SoftPinAction


@pytest.fixture
def mstore(cluster):
    s = MooncakeDistributedStore(kvmesh_config={"deployment": cluster.deployment,
                                                "lease_ttl_ms": "1000",
                                                "request_timeout_ms": "20000",
                                                "segment_size": "32MiB",
                                                "max_object_size": "32MiB"})
    tenant = "mc-" + uuid.uuid4().hex[:8]
    assert s.setup("127.0.0.1", cluster.url, 0, "16MB", "tcp", "", "ignored:50051",
                   tenant_id=tenant) == 0
    yield s
    assert s.close() == 0


def test_setup_forms_and_errors(cluster):
    s = MooncakeDistributedStore()
    # dict form with string values, memory:// default, human-readable sizes
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "memory://mc-dict",
                    "global_segment_size": "64MB", "local_buffer_size": "16MB",
                    "protocol": "tcp", "master_server_addr": "nowhere:1",
                    "tenant_id": "dict"}) == 0
    assert s.get_hostname() == "127.0.0.1"
    assert s.health_check() == 0
    assert s.kvmesh_store.config["memory_size"] == "64MiB"
    assert s.kvmesh_store.tenant == "dict"
    assert s.put("k", b"v") == 0 and s.get("k") == b"v"
    assert s.setup("127.0.0.1", "memory://x") == mc.UNAVAILABLE_IN_CURRENT_STATUS  # twice
    s.close()
    assert s.health_check() != 0
    assert s.get("k") == b""  # closed: a miss, never a crash
    assert "KVMESH_ECLOSED" in s.last_error
    # keyword form with the memory:// default metadata server
    s2 = MooncakeDistributedStore()
    assert s2.setup(local_hostname="127.0.0.1", metadata_server=None,
                    global_segment_size=32 << 20) == 0
    assert s2.kvmesh_store.config["metadata_url"] == "memory://default"
    s2.close()
    bad = MooncakeDistributedStore()
    with pytest.raises(kvmesh.InvalidArgument, match="percentage"):
        bad.setup("127.0.0.1", "memory://p", "50%")
    with pytest.raises(ValueError, match="not a size"):
        bad.setup("127.0.0.1", "memory://p", "1.5GB")
    with pytest.raises(kvmesh.InvalidArgument, match="not a kvmesh metadata URL"):
        bad.setup("127.0.0.1", "http://127.0.0.1:8080/metadata")
    with pytest.raises(kvmesh.InvalidArgument, match="protocol"):
        bad.setup("127.0.0.1", "memory://p", protocol="rdma")
    with pytest.raises(kvmesh.InvalidArgument, match="ssd"):
        bad.setup("127.0.0.1", "memory://p", enable_ssd_offload=True)
    with pytest.raises(kvmesh.InvalidArgument, match="unknown key"):
        bad.setup({"local_hostname": "h", "metadata_server": "memory://p", "bogus": "1"})
    with pytest.raises(kvmesh.InvalidArgument, match="needs 'metadata_server'"):
        bad.setup({"local_hostname": "h"})
    assert mc.parse_size("16MB", "x") == 16 << 20 and mc.parse_size("1GB", "x") == 1 << 30
    assert mc.parse_size(123, "x") == 123 and mc.parse_size("4 KB", "x") == 4096
    # a metadata server that does not answer: a negative code, not an exception
    dead = MooncakeDistributedStore(kvmesh_config={"request_timeout_ms": "1000"})
    rc = dead.setup("127.0.0.1", "redis://127.0.0.1:1", 0)
    assert rc < 0 and dead.last_error
    assert dead.setup_dummy(1, 1, "x") == mc.UNAVAILABLE_IN_CURRENT_MODE
    assert dead.init_all("tcp", "") == mc.UNAVAILABLE_IN_CURRENT_MODE


def test_plain_bytes(mstore):
    s = mstore
    assert s.put("a", b"alpha") == 0
    assert s.get("a") == b"alpha"
    assert s.get("missing") == b""
    assert s.is_exist("a") == 1 and s.is_exist("missing") == 0
    assert s.get_size("a") == 5 and s.get_size("missing") == mc.OBJECT_NOT_FOUND
    assert s.put_parts("p", b"ab", b"cd", bytearray(b"ef")) == 0
    assert s.get("p") == b"abcdef"
    assert s.upsert("a", b"alpha2") == 0 and s.get("a") == b"alpha2"
    assert s.upsert_parts("p", b"x", b"y") == 0 and s.get("p") == b"xy"
    keys = [f"b{i}" for i in range(10)]
    vals = [bytes([i]) * (i + 1) for i in range(10)]
    assert s.put_batch(keys, vals) == 0
    assert s.get_batch(keys + ["missing"]) == vals + [b""]
    assert s.upsert_batch(keys[:2], [b"u0", b"u1"]) == 0 and s.get_batch(keys[:2]) == [b"u0", b"u1"]
    assert s.batch_is_exist(keys[:3] + ["missing"]) == [1, 1, 1, 0]
    h = s.get_buffer("a")
    assert isinstance(h, mc.BufferHandle) and bytes(h) == b"alpha2" and h.size() == 6
    assert h.ptr() != 0
    assert s.get_buffer("missing") is None
    hs = s.batch_get_buffer(["a", "missing"])
    assert bytes(hs[0]) == b"alpha2" and hs[1] is None
    assert s.remove("a") == 0
    assert s.remove("a", force=True) in (0, mc.OBJECT_NOT_FOUND)
    assert s.is_exist("a") == 0
    assert s.batch_remove(keys[:3]) == [0, 0, 0]
    assert s.batch_is_exist(keys[:4]) == [0, 0, 0, 1]
    # invalid key: Mooncake's INVALID_KEY, not an exception
    assert s.put("x" * 1025, b"v") == mc.INVALID_KEY
    assert "KVMESH_EBADKEY" in s.last_error
    assert s.put_batch(["ok", ""], [b"1", b"2"]) == mc.INVALID_KEY


def test_replicate_config(cluster, mstore):
    s = mstore
    cfg = ReplicateConfig()
    assert cfg.replica_num == 1 and cfg.soft_pin_action == SoftPinAction.PRESERVE
    cfg.replica_num = 2
    assert s.put("r2", b"two", cfg) == 0
    reps = s.get_replica_desc("r2")
    assert len(reps) == 2 and all(r.is_memory_replica() for r in reps)
    assert {r.owner for r in reps} <= set(cluster.ids)
    assert reps[0].get_memory_descriptor().buffer_descriptor.size == 3
    assert not reps[0].is_disk_replica()
    d = s.batch_get_replica_desc(["r2", "missing"])
    assert len(d["r2"]) == 2 and d["missing"] == []
    pin = ReplicateConfig()
    pin.preferred_segment = cluster.ids[2]
    pin.with_hard_pin = True
    assert s.put("pinned", b"p", config=pin) == 0
    assert s.get_replica_desc("pinned")[0].owner == cluster.ids[2]
    # a member's address works as a segment name
    addr = {m.id: m.address for m in s.kvmesh_store.members()}[cluster.ids[1]]
    pin.preferred_segment = addr
    assert s.put("pinned-addr", b"p", config=pin) == 0
    assert s.get_replica_desc("pinned-addr")[0].owner == cluster.ids[1]
    pin.preferred_segment = "no-such-host:1"
    assert s.put("x", b"p", config=pin) == mc.INVALID_PARAMS
    soft = ReplicateConfig()
    soft.soft_pin_action = SoftPinAction.ENABLE
    assert s.put("x", b"p", config=soft) == mc.UNAVAILABLE_IN_CURRENT_MODE
    assert "soft pin" in s.last_error
    nof = ReplicateConfig()
    nof.nof_replica_num = 1
    assert s.put("x", b"p", config=nof) == mc.UNAVAILABLE_IN_CURRENT_MODE
    many = ReplicateConfig()
    many.replica_num = 9
    assert s.put("x", b"p", config=many) == mc.INVALID_PARAMS
    with pytest.raises(TypeError):
        s.put("x", b"p", config={"replica_num": 1})


def test_zero_copy_family(mstore):
    s = mstore
    size = 1 << 20
    ptr = s.alloc_from_mem_pool(size)
    assert ptr != 0
    view = s._registered_view(ptr, size)
    view[:8] = b"12345678"
    assert s.put_from("zc", ptr, 8) == 0
    assert s.get_into("zc", ptr + 4096, 100) == 8
    assert bytes(view[4096:4104]) == b"12345678"
    assert s.upsert_from("zc", ptr + 1, 4) == 0 and s.get("zc") == b"2345"
    assert s.get_into("missing", ptr, 10) == mc.OBJECT_NOT_FOUND
    assert s.get_into("zc", ptr, 2) == mc.BUFFER_OVERFLOW
    # unregistered memory is refused with INVALID_PARAMS (never a crash)
    other = bytearray(64)
    assert s.get_into("zc", kvmesh.address(other), 64) == mc.INVALID_PARAMS
    assert "not inside a registered buffer" in s.last_error
    # batches
    n = 16
    keys = [f"bz{i}" for i in range(n)]
    for i in range(n):
        view[i * 4096:(i + 1) * 4096] = bytes([i]) * 4096
    ptrs = [ptr + i * 4096 for i in range(n)]
    assert s.batch_put_from(keys, ptrs, [4096] * n) == [0] * n
    dst = [ptr + (512 << 10) + i * 4096 for i in range(n)]
    assert s.batch_get_into(keys, dst, [4096] * n) == [4096] * n
    for i in range(n):
        off = (512 << 10) + i * 4096
        assert bytes(view[off:off + 4096]) == bytes([i]) * 4096
    assert s.batch_upsert_from(keys[:1], ptrs[1:2], [10]) == [0]
    assert s.batch_get_into(keys[:2] + ["missing"], dst[:3], [4096] * 3) == \
        [10, 4096, mc.OBJECT_NOT_FOUND]
    # multi-buffer families
    assert s.batch_put_from_multi_buffers(["mb"], [[ptr, ptr + 4096]], [[100, 50]]) == [0]
    assert s.get_size("mb") == 150
    assert s.batch_get_into_multi_buffers(["mb"], [[dst[0], dst[1]]], [[100, 50]]) == [150]
    assert bytes(view[dst[0] - ptr:dst[0] - ptr + 100]) == bytes([0]) * 100
    assert bytes(view[dst[1] - ptr:dst[1] - ptr + 50]) == bytes([1]) * 50
    # metadata + data
    view[0:4] = b"META"
    view[8192:8200] = b"DATADATA"
    assert s.put_from_with_metadata("md", ptr + 8192, ptr, 8, 4) == 0
    assert s.get("md") == b"METADATADATA"
    # ranges: copy [2, 6) of "md" to ptr+100
    assert s.get_into_ranges([ptr], [["md"]], [[100]], [[2, ]], [[4]]) == [[4]]
    assert bytes(view[100:104]) == b"TADA"
    # a user buffer registered by address
    buf = bytearray(4096)
    assert s.register_buffer(kvmesh.address(buf), 4096) == 0
    assert s.get_into("md", kvmesh.address(buf), 4096) == 12 and bytes(buf[:12]) == b"METADATADATA"
    assert s.unregister_buffer(kvmesh.address(buf)) == 0
    assert s.unregister_buffer(kvmesh.address(buf)) == mc.INVALID_PARAMS


def test_unsupported_methods_say_so(mstore, caplog):
    s = mstore
    assert s.put("keep", b"v") == 0
    for name, args in [("remove_by_regex", ("ke.*",)), ("remove_all", ()),
                       ("mount_segment", (0, 0)), ("unmount_segment", (0, 0)),
                       ("allocate_and_mount_segment", (1 << 20,)),
                       ("unmount_and_free_segment", (0, 0)),
                       ("batch_replica_clear", (["k"],)), ("create_copy_task", ("k", [])),
                       ("create_move_task", ("k", "a", "b")), ("query_task", ("id",)),
                       ("batch_get_session_start", ()), ("batch_get_session_end", ()),
                       ("batch_put_session_start", ()), ("batch_put_session_end", ()),
                       ("batch_put_session_revoke", ()),
                       ("batch_put_from_multi_buffers_ranges", ()),
                       ("batch_get_into_multi_buffers_ranges", ()),
                       ("put_tensor_with_parallelism", ()), ("get_tensor_with_parallelism", ()),
                       ("batch_put_tensor_with_parallelism", ()),
                       ("batch_get_tensor_with_parallelism", ())]:
        assert getattr(s, name)(*args) == mc.UNAVAILABLE_IN_CURRENT_MODE, name
        assert "not supported by kvmesh" in s.last_error
    assert s.get("keep") == b"v"  # remove_all did nothing
    assert "remove_by_regex: not supported by kvmesh" in caplog.text


def test_tensors(mstore):
    s = mstore
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    assert s.put_tensor("t", t) == 0
    g = s.get_tensor("t")
    assert torch.equal(g, t) and g.dtype == torch.float32
    assert s.get_tensor("missing") is None
    bf = torch.randn(8, 16).to(torch.bfloat16)
    assert s.upsert_tensor("bf", bf) == 0 and torch.equal(s.get_tensor("bf"), bf)
    assert s.pub_tensor("pub", t, ReplicateConfig()) == 0 and torch.equal(s.get_tensor("pub"), t)
    ts = [torch.full((4, 4), float(i)) for i in range(5)]
    keys = [f"bt{i}" for i in range(5)]
    assert s.batch_put_tensor(keys, ts) == [0] * 5
    got = s.batch_get_tensor(keys + ["missing"])
    assert all(torch.equal(a, b) for a, b in zip(got[:5], ts)) and got[5] is None
    assert s.batch_upsert_tensor(keys[:1], ts[1:2]) == [0]
    assert s.batch_pub_tensor(keys[:1], ts[:1]) == [0]
    # zero copy into registered memory
    ptr = s.alloc_from_mem_pool(1 << 16)
    v = s.get_tensor_into("t", ptr, 1 << 16)
    assert torch.equal(v, t)
    v.add_(1)  # the tensor views the registered memory
    assert s.put_tensor_from("t2", ptr, s.get_size("t")) == 0
    assert torch.equal(s.get_tensor("t2"), t + 1)
    # tensor parallel
    full = torch.arange(64, dtype=torch.int64).reshape(8, 8)
    assert s.put_tensor_with_tp("tp", full, tp_rank=0, tp_size=4, split_dim=1) == 0
    for r in range(4):
        shard = s.get_tensor_with_tp("tp", tp_rank=r, tp_size=4, split_dim=1)
        assert torch.equal(shard, full[:, r * 2:(r + 1) * 2])
    assert s.get_tensor_with_tp("tp", tp_rank=1, tp_size=1) is None  # no plain "tp" key
    assert s.batch_put_tensor_with_tp(["tpa", "tpb"], [full, full + 1], tp_size=2) == [0, 0]
    got = s.batch_get_tensor_with_tp(["tpa", "tpb"], tp_rank=1, tp_size=2)
    assert torch.equal(got[0], full[4:]) and torch.equal(got[1], (full + 1)[4:])
    assert s.upsert_tensor_with_tp("tp", full, tp_size=2) == 0
    assert s.pub_tensor_with_tp("tp", full, tp_size=2) == 0
    assert s.batch_upsert_tensor_with_tp(["tpa"], [full], tp_size=2) == [0]
    assert s.batch_pub_tensor_with_tp(["tpa"], [full], tp_size=2) == [0]
    assert s.put_tensor_with_tp("tp", full, tp_rank=5, tp_size=4) == mc.INVALID_PARAMS
    assert s.put_tensor_with_tp("tp", full, tp_size=3) == mc.INVALID_PARAMS  # 8 % 3 != 0


def test_tenant_id_scopes(cluster):
    a, b = MooncakeDistributedStore(), MooncakeDistributedStore()
    extra = {"deployment": cluster.deployment, "lease_ttl_ms": "1000",
             "segment_size": "32MiB", "max_object_size": "32MiB"}
    a._extra = dict(extra)
    b._extra = dict(extra)
    assert a.setup("127.0.0.1", cluster.url, 0, tenant_id="tenant-a") == 0
    assert b.setup("127.0.0.1", cluster.url, 0, tenant_id="tenant-b") == 0
    try:
        assert a.put("same", b"A") == 0 and b.put("same", b"B") == 0
        assert a.get("same") == b"A" and b.get("same") == b"B"
        assert a.put("only-a", b"x") == 0
        assert b.is_exist("only-a") == 0 and b.get("only-a") == b""
        assert b.remove("only-a") == mc.OBJECT_NOT_FOUND
        assert a.is_exist("only-a") == 1
        # the same tenant in the native API sees the same objects
        with cluster.store(tenant="tenant-a") as n:
            assert n.get("same") == b"A"
    finally:
        a.close()
        b.close()


def _replica_size(r):
    return r.get_memory_descriptor().buffer_descriptor.size


def test_tenant_id_scopes_same_key_and_domains(cluster):
    """Issue 14 through the Mooncake API (tenant_id, no domain): the same key in tenant A, in
    tenant B and in domains x/y of tenant A (native API) are four objects; get / is_exist /
    get_replica_desc / remove in one never see or touch another; a miss is b"", 0, [] and
    OBJECT_NOT_FOUND."""
    ta, tb = "mca-" + uuid.uuid4().hex[:8], "mcb-" + uuid.uuid4().hex[:8]
    tc = "mcc-" + uuid.uuid4().hex[:8]
    extra = {"deployment": cluster.deployment, "lease_ttl_ms": "1000",
             "segment_size": "32MiB", "max_object_size": "32MiB"}
    a, b, c = (MooncakeDistributedStore(kvmesh_config=extra) for _ in range(3))
    assert a.setup("127.0.0.1", cluster.url, 0, tenant_id=ta) == 0
    assert b.setup("127.0.0.1", cluster.url, 0, tenant_id=tb) == 0
    assert c.setup("127.0.0.1", cluster.url, 0, tenant_id=tc) == 0  # never puts the key
    key = "blk/0"
    try:
        with cluster.store(tenant=ta) as n:
            assert a.put(key, b"mc-A") == 0 and b.put(key, b"mc-B-longer") == 0
            n.put(key, b"native-A-x", domain="x")
            n.put(key, b"native-A-y!", domain="y")
            assert a.get(key) == b"mc-A" and b.get(key) == b"mc-B-longer"
            assert a.is_exist(key) == 1 and b.is_exist(key) == 1
            assert a.get_size(key) == 4 and b.get_size(key) == 11
            ra, rb = a.get_replica_desc(key), b.get_replica_desc(key)
            assert ra and all(_replica_size(x) == 4 for x in ra)
            assert rb and all(_replica_size(x) == 11 for x in rb)
            # the Mooncake tenant A is native tenant A with no domain: not domain x or y
            assert n.get(key) == b"mc-A"
            assert n.get(key, domain="x") == b"native-A-x"
            # a tenant where the key was never put: every read is a miss, remove is not-found
            assert c.get(key) == b"" and "KVMESH_ENOENT" in c.last_error
            assert c.is_exist(key) == 0 and c.batch_is_exist([key]) == [0]
            assert c.get_replica_desc(key) == []
            assert c.get_size(key) == mc.OBJECT_NOT_FOUND
            assert c.remove(key) == mc.OBJECT_NOT_FOUND
            assert c.batch_remove([key]) == [mc.OBJECT_NOT_FOUND]
            assert a.get(key) == b"mc-A" and b.get(key) == b"mc-B-longer"
            # remove in tenant A (no domain) leaves tenant B and A's domains x/y
            assert a.remove(key) == 0
            assert a.get(key) == b"" and a.is_exist(key) == 0
            assert a.get_replica_desc(key) == []
            assert a.remove(key) == mc.OBJECT_NOT_FOUND
            assert b.get(key) == b"mc-B-longer" and b.is_exist(key) == 1
            assert [(x.owner, x.segment, _replica_size(x)) for x in b.get_replica_desc(key)] == \
                [(x.owner, x.segment, _replica_size(x)) for x in rb]
            assert n.get(key, domain="x") == b"native-A-x"
            assert n.get(key, domain="y") == b"native-A-y!"
            # a native delete of domain x leaves domain y, and Mooncake A still misses
            n.remove(key, domain="x")
            assert n.get(key, domain="y") == b"native-A-y!"
            assert a.get(key) == b"" and b.get(key) == b"mc-B-longer"
            # remove in tenant B leaves A/domain y
            assert b.batch_remove([key]) == [0]
            assert b.is_exist(key) == 0 and b.get(key) == b""
            assert n.get(key, domain="y") == b"native-A-y!"
            n.remove(key, domain="y")
    finally:
        a.close()
        b.close()
        c.close()


def test_eight_threads_mooncake(mstore):
    s = mstore
    ptr = s.alloc_from_mem_pool(8 * 64 * 1024)
    view = s._registered_view(ptr, 8 * 64 * 1024)
    errors = []

    def worker(w):
        base = ptr + w * 64 * 1024
        try:
            for r in range(20):
                keys = [f"th{w}-{r}-{i}" for i in range(4)]
                for i in range(4):
                    off = w * 64 * 1024 + i * 8192
                    view[off:off + 8192] = bytes([(w * 16 + r + i) & 0xFF]) * 8192
                assert s.batch_put_from(keys, [base + i * 8192 for i in range(4)], [8192] * 4) == \
                    [0] * 4
                assert s.batch_is_exist(keys) == [1] * 4
                dst = [base + 32768 + i * 8192 for i in range(4)]
                assert s.batch_get_into(keys, dst, [8192] * 4) == [8192] * 4
                for i in range(4):
                    off = w * 64 * 1024 + 32768 + i * 8192
                    assert bytes(view[off:off + 8192]) == bytes([(w * 16 + r + i) & 0xFF]) * 8192
        except AssertionError as e:
            errors.append((w, repr(e)))

    th = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join(120)
    assert not any(t.is_alive() for t in th) and errors == []


def test_allocator_and_numa(mstore):
    alloc = mc.MooncakeHostMemAllocator()
    p = alloc.alloc(4096)
    assert p != 0 and len(alloc.buffer(p)) == 4096
    assert alloc.free(p) == 0 and alloc.free(p) == mc.INVALID_PARAMS
    with pytest.raises(ValueError):
        alloc.alloc(-1)
    import os
    before = os.sched_getaffinity(0)
    try:
        assert mstore.bind_to_numa_node(0) == 0
        assert mstore.bind_to_numa_node(999) == mc.INVALID_PARAMS
    finally:
        os.sched_setaffinity(0, before)
    assert mc.DiskDescriptor("f", 1).object_size == 1
