# SPDX-License-Identifier: Apache-2.0
"""kvmesh.Store against a real cluster: 3 kvmeshd on a real redis-server, the store joining as a
client-only runtime. Every method of the native API, scopes, buffers, errors, threads."""
import mmap
import os
import threading
import uuid

import pytest

import kvmesh


def blob(n, seed=0):
    return bytes((i * 131 + seed) & 0xFF for i in range(n)) if n < 4096 else \
        (os.urandom(64) * (n // 64 + 1))[:n]


def test_version_and_fields():
    assert kvmesh.library_version() == "0.1.0"
    names = [f[0] for f in kvmesh.config_fields()]
    assert "metadata_url" in names and "memory_size" in names and "trace_sample_rate" in names
    assert kvmesh.errname(kvmesh.CODES["KVMESH_ENOENT"]) == "KVMESH_ENOENT"
    assert kvmesh.strerror(kvmesh.CODES["KVMESH_EQUOTA"]) == "tenant quota exceeded"
    assert issubclass(kvmesh.QuotaExceeded, kvmesh.Error)
    assert kvmesh._errors.CODE_CLASSES[kvmesh.CODES["KVMESH_EQUOTA"]] is kvmesh.QuotaExceeded


def test_put_get_sizes(store):
    for n in (1, 100, 4096, 256 * 1024, 4 << 20):
        v = blob(n, n)
        store.put(f"k{n}", v)
        assert store.get(f"k{n}") == v
        assert store.size(f"k{n}") == n
        assert store.exists(f"k{n}") is True
        buf = bytearray(n + 10)
        assert store.get_into(f"k{n}", buf) == n
        assert bytes(buf[:n]) == v


def test_bytes_and_str_keys(store):
    store.put(b"bin\xff\x80key", b"x")
    assert store.get(b"bin\xff\x80key") == b"x"
    store.put("unicodé", b"y")
    assert store.get("unicodé".encode()) == b"y"


def test_overwrite_remove_missing(store):
    store.put("k", b"one")
    store.put("k", b"two-two")
    assert store.get("k") == b"two-two"
    store.remove("k")
    assert store.exists("k") is False
    with pytest.raises(kvmesh.NotFound) as e:
        store.get("k")
    assert e.value.name == "KVMESH_ENOENT" and e.value.code == kvmesh.CODES["KVMESH_ENOENT"]
    with pytest.raises(kvmesh.NotFound):
        store.size("k")
    with pytest.raises(kvmesh.NotFound):
        store.route("k")


def test_parts(store):
    parts = [b"ab", bytearray(b"cde"), memoryview(b"fghi")]
    store.put_parts("p", parts)
    assert store.get("p") == b"abcdefghi"
    a, b = bytearray(4), bytearray(5)
    assert store.get_parts("p", [a, b]) == 9
    assert bytes(a + b) == b"abcdefghi"
    with pytest.raises(kvmesh.TooBig):
        store.get_parts("p", [bytearray(2), bytearray(2)])
    with pytest.raises(kvmesh.InvalidArgument):
        store.put_parts("p", [])
    with pytest.raises(TypeError):
        store.put_parts("p", b"not-a-list")


def test_get_into_too_small(store):
    store.put("big", b"x" * 1000)
    buf = bytearray(b"\x01" * 10)
    with pytest.raises(kvmesh.TooBig) as e:
        store.get_into("big", buf)
    assert "1000" in str(e.value)
    assert buf == bytearray(b"\x01" * 10)  # untouched


def test_route_and_replicas(cluster, store):
    store.put("r1", b"abc", replicas=2)
    r = store.route("r1")
    assert r.length == 3 and len(r.replicas) == 2
    owners = {x.owner for x in r.replicas}
    assert len(owners) == 2 and owners <= set(cluster.ids)
    assert r.fencing_token >= 1 and r.checksum != 0
    # preferred owner, hard pin
    target = cluster.ids[1]
    store.put("pinned", b"p", replicas=1, preferred=[target], hard_pin=True)
    assert store.route("pinned").replicas[0].owner == target
    with pytest.raises(kvmesh.Unavailable):
        store.put("pinned2", b"p", replicas=1, preferred=["0" * 32], hard_pin=True)
    with pytest.raises(kvmesh.InvalidArgument):
        store.put("x", b"p", replicas=9)
    with pytest.raises(kvmesh.InvalidArgument):
        store.put("x", b"p", hard_pin=True)  # without preferred owners


def test_members_self(cluster, store):
    ms = store.members()
    ids = {m.id for m in ms if m.state == "active"}
    assert set(cluster.ids) <= ids
    sid, epoch = store.self_id()
    assert len(sid) == 32 and epoch >= 1
    storing = [m for m in ms if m.id in cluster.ids]
    assert all(m.capacity_bytes == 64 << 20 for m in storing)


def test_batches(store):
    keys = [f"b{i}" for i in range(50)]
    vals = [blob(100 + i, i) for i in range(50)]
    assert store.batch_put(keys, vals) == [None] * 50
    got = store.batch_get(keys + ["absent"])
    assert got[:50] == vals
    assert isinstance(got[50], kvmesh.NotFound)
    assert store.batch_exists(keys[:3] + ["absent"]) == [True, True, True, False]
    assert store.batch_size(keys[:2]) == [100, 101]
    bufs = [bytearray(200) for _ in keys]
    res = store.batch_get_into(keys, bufs)
    assert res == [100 + i for i in range(50)]
    assert all(bytes(bufs[i][:res[i]]) == vals[i] for i in range(50))
    rm = store.batch_remove(keys[:10] + ["absent"])
    assert rm[:10] == [None] * 10
    assert store.batch_exists(keys[:11]) == [False] * 10 + [True]


def test_batch_larger_than_batch_max(cluster):
    # Calls over BATCH_MAX keys are split into several C batches; results stay in key order
    # across the split. Present keys sit on both sides of the chunk boundary. A 4096-item
    # lookup batch took 2-20 s on the loaded 2-core machine (timing out at 20 s under ASan),
    # hence the longer request deadline of this store.
    # (tombstone_retention_ms must stay above request_timeout_ms + 550 ms.)
    store = cluster.store(tenant="big-" + uuid.uuid4().hex[:6], request_timeout_ms=60000,
                          tombstone_retention_ms=120000)
    try:
        _batch_larger_than_batch_max(store)
    finally:
        store.close()


def _batch_larger_than_batch_max(store):
    n = kvmesh.BATCH_MAX + 10
    keys = [f"m{i}" for i in range(n)]
    present = list(range(0, 5)) + list(range(kvmesh.BATCH_MAX - 5, n))
    assert store.batch_put([keys[i] for i in present],
                           [i.to_bytes(4, "little") for i in present]) == [None] * len(present)
    want = [i in present for i in range(n)]
    assert store.batch_exists(keys) == want
    got = store.batch_get(keys)
    for i in range(n):
        if want[i]:
            assert got[i] == i.to_bytes(4, "little")
        else:
            assert isinstance(got[i], kvmesh.NotFound)


def test_batch_per_item_errors(store):
    keys = ["ok1", "", "x" * 1025, "ok2"]
    res = store.batch_put(keys, [b"1", b"2", b"3", b"4"])
    assert res[0] is None and res[3] is None
    assert isinstance(res[1], kvmesh.InvalidArgument) and res[1].name == "KVMESH_EBADKEY"
    assert isinstance(res[2], kvmesh.InvalidArgument) and res[2].name == "KVMESH_EBADKEY"
    assert store.batch_get(["ok1", "ok2"]) == [b"1", b"4"]
    # per-item too-small buffer
    store.put("large", b"L" * 100)
    res = store.batch_get_into(["ok1", "large"], [bytearray(10), bytearray(10)])
    assert res[0] == 1 and isinstance(res[1], kvmesh.TooBig)


def test_batch_argument_errors(store):
    with pytest.raises(kvmesh.InvalidArgument, match="2 keys but 1 buffers"):
        store.batch_put(["a", "b"], [b"x"])
    with pytest.raises(TypeError):
        store.batch_put("ab", [b"x", b"y"])
    with pytest.raises(TypeError):
        store.batch_get([1, 2])
    with pytest.raises(kvmesh.InvalidArgument, match="sizes"):
        store.batch_put(["a"], [b"x"], sizes=[1, 2])


def test_registered_buffers_zero_copy(store):
    region = mmap.mmap(-1, 1 << 20)
    addr = store.register_buffer(region)
    assert addr == kvmesh.address(region)
    assert (addr, 1 << 20) in store.registered_buffers()
    region[:5] = b"hello"
    # put from a raw address inside the registration, get back into another part of it
    store.put("z", addr, 5)
    assert store.get_into("z", addr + 4096, 100) == 5
    assert region[4096:4101] == b"hello"
    # batches with raw addresses
    keys = [f"zc{i}" for i in range(8)]
    for i in range(8):
        region[i * 1024:(i + 1) * 1024] = bytes([i]) * 1024
    ptrs = [addr + i * 1024 for i in range(8)]
    assert store.batch_put(keys, ptrs, [1024] * 8) == [None] * 8
    dst = [addr + 512 * 1024 + i * 1024 for i in range(8)]
    assert store.batch_get_into(keys, dst, [1024] * 8) == [1024] * 8
    for i in range(8):
        off = 512 * 1024 + i * 1024
        assert region[off:off + 1024] == bytes([i]) * 1024
    # outside the registration
    with pytest.raises(kvmesh.InvalidArgument, match="not inside a registered buffer"):
        store.get_into("z", addr + (1 << 20) - 2, 100)
    with pytest.raises(kvmesh.InvalidArgument, match="not inside a registered buffer"):
        store.batch_get_into(keys[:1], [addr + (1 << 20)], [1])
    # overlap refused, double unregister refused
    with pytest.raises(kvmesh.InvalidArgument, match="overlaps"):
        store.register_buffer(addr + 10, 10)
    store.unregister_buffer(region)
    with pytest.raises(kvmesh.InvalidArgument, match="not the start of a registered buffer"):
        store.unregister_buffer(addr)
    with pytest.raises(kvmesh.InvalidArgument):
        store.put("z", addr, 5)
    region.close()


def test_registered_buffer_holds_exporter(store):
    ba = bytearray(4096)
    store.register_buffer(ba)
    with pytest.raises(BufferError):
        ba.extend(b"x")  # the registration holds the buffer: it cannot move
    store.unregister_buffer(ba)
    ba.extend(b"x")


def test_raw_pointer_registration(store):
    ba = bytearray(8192)
    addr = kvmesh.address(ba)
    store.register_buffer(addr, 8192)
    ba[:3] = b"raw"
    store.put("rp", addr, 3)
    assert store.get("rp") == b"raw"
    store.unregister_buffer(addr)


def test_bad_arguments(store):
    with pytest.raises(TypeError, match="key must be str or bytes"):
        store.put(123, b"v")
    with pytest.raises(TypeError, match="buffer protocol"):
        store.put("k", "a str value")
    with pytest.raises(TypeError, match="buffer protocol"):
        store.put("k", 1.5)
    with pytest.raises(kvmesh.InvalidArgument, match="size must be >= 0"):
        store.put("k", b"abc", -1)
    with pytest.raises(kvmesh.InvalidArgument, match="size must be >= 0"):
        store.get_into("k", bytearray(4), -5)
    with pytest.raises(kvmesh.InvalidArgument, match="larger than the buffer"):
        store.put("k", b"abc", 10)
    with pytest.raises(kvmesh.InvalidArgument, match="raw pointer: give its size"):
        store.get_into("k", 12345)
    with pytest.raises(kvmesh.InvalidArgument, match="not inside a registered buffer"):
        store.get_into("k", 0x1000, 16)
    with pytest.raises(kvmesh.InvalidArgument) as e:
        store.put("x" * 1025, b"v")
    assert e.value.name == "KVMESH_EBADKEY" and "1024" in e.value.message
    with pytest.raises(kvmesh.InvalidArgument) as e:
        store.put("", b"v")
    assert e.value.name == "KVMESH_EBADKEY"
    with pytest.raises(kvmesh.InvalidArgument) as e:
        store.put("ctl\x01", b"v")
    assert e.value.name == "KVMESH_EBADKEY"
    with pytest.raises(kvmesh.InvalidArgument) as e:
        store.put("k", b"")
    assert e.value.name == "KVMESH_EINVAL"
    with pytest.raises(kvmesh.InvalidArgument) as e:
        store.put("k", b"v", tenant="bad tenant!")
    assert e.value.name == "KVMESH_EBADTENANT"
    with pytest.raises(kvmesh.InvalidArgument) as e:
        store.put("k", b"v", domain="")
    assert e.value.name == "KVMESH_EBADDOMAIN"
    with pytest.raises(kvmesh.InvalidArgument, match="NUL"):
        store.put("k", b"v", tenant="a\x00b")
    with pytest.raises(TypeError, match="tenant must be str"):
        store.put("k", b"v", tenant=5)
    with pytest.raises(TypeError, match="hard_pin must be a bool"):
        store.put("k", b"v", hard_pin=1)
    with pytest.raises(kvmesh.InvalidArgument, match="writable"):
        store.get_into("k", b"readonly")
    with pytest.raises(kvmesh.TooBig) as e:
        store.put("k", bytes(33 << 20))  # over max_object_size of the deployment (32 MiB)
    assert e.value.name == "KVMESH_ETOOBIG"


def test_non_contiguous_numpy_rejected(store):
    np = pytest.importorskip("numpy")
    a = np.arange(100, dtype=np.int32)[::2]
    with pytest.raises(kvmesh.InvalidArgument, match="C-contiguous"):
        store.put("nc", a)
    b = np.arange(100, dtype=np.int32)
    store.put("c", b)
    out = np.zeros(100, dtype=np.int32)
    assert store.get_into("c", out) == 400
    assert (out == b).all()


def test_config_errors(cluster):
    with pytest.raises(kvmesh.ConfigError) as e:
        kvmesh.Store(cluster.client_fields(replicas="0"))
    assert e.value.name == "KVMESH_ECONFIG" and "replicas" in e.value.message
    with pytest.raises(kvmesh.ConfigError, match="unknown configuration field"):
        kvmesh.Store(no_such_field=1)
    with pytest.raises(kvmesh.ConfigError):
        kvmesh.Store(metadata_url="ftp://x")
    with pytest.raises(TypeError):
        kvmesh.Store(memory_size=[1])
    with pytest.raises(TypeError):
        kvmesh.Store("metadata_url=memory://x")
    s = kvmesh.Store(cluster.client_fields(), open=False)
    assert not s.is_open
    with pytest.raises(kvmesh.Closed):
        s.get("k")
    assert s.config["memory_size"] == "0B" or s.config["memory_size"].startswith("0")


def test_context_manager_and_close(cluster):
    with cluster.store(tenant="ctx") as s:
        s.put("k", b"v")
        assert s.is_open
    assert not s.is_open
    with pytest.raises(kvmesh.Closed) as e:
        s.get("k")
    assert e.value.name == "KVMESH_ECLOSED"
    s.close()  # idempotent
    s.open()
    assert s.get("k") == b"v"
    s.close()


def test_tenant_domain_scopes(cluster):
    with cluster.store(tenant="ta") as a:
        b = a.scoped(tenant="tb")
        a.put("same", b"A")
        b.put("same", b"B")
        a.put("same", b"AD", domain="d1")
        a.put("same", b"AD2", domain="d2")
        assert a.get("same") == b"A" and b.get("same") == b"B"
        assert a.get("same", domain="d1") == b"AD" and a.get("same", domain="d2") == b"AD2"
        assert a.get("same", tenant="tb") == b"B"
        # cross-scope: not found
        a.put("only-a", b"x")
        with pytest.raises(kvmesh.NotFound):
            b.get("only-a")
        with pytest.raises(kvmesh.NotFound):
            a.get("only-a", domain="d1")
        assert b.batch_exists(["only-a", "same"]) == [False, True]
        # removing in one scope leaves the others
        a.remove("same", domain="d1")
        assert a.get("same") == b"A" and a.get("same", domain="d2") == b"AD2"
        assert b.get("same") == b"B"
        with pytest.raises(kvmesh.NotFound):
            a.get("same", domain="d1")
        # a scoped view with a default domain; domain=None overrides it per call
        d2 = a.scoped(domain="d2")
        assert d2.get("same") == b"AD2" and d2.get("same", domain=None) == b"A"
        assert d2.tenant == "ta" and d2.domain == "d2"


def _assert_absent(store, key, **scope):
    """Every single-key read path reports absence in ``scope`` exactly: NotFound (KVMESH_ENOENT)
    or False / a NotFound item for the existence checks."""
    with pytest.raises(kvmesh.NotFound) as e:
        store.get(key, **scope)
    assert e.value.code == kvmesh.CODES["KVMESH_ENOENT"]
    with pytest.raises(kvmesh.NotFound):
        store.route(key, **scope)
    with pytest.raises(kvmesh.NotFound):
        store.size(key, **scope)
    assert store.exists(key, **scope) is False
    assert store.batch_exists([key], **scope) == [False]
    got = store.batch_get([key], **scope)
    assert len(got) == 1 and isinstance(got[0], kvmesh.NotFound)


def test_same_key_three_scopes_independent(cluster):
    """Issue 14: one key in tenant A/domain x, A/domain y and B/domain x names three objects:
    reads, route queries, existence checks and deletes in one scope never see or touch the
    others; a scope where the key was never put answers not-found to everything."""
    ta, tb = "sa-" + uuid.uuid4().hex[:8], "sb-" + uuid.uuid4().hex[:8]
    key = "kv/layer0/block7"
    vals = {(ta, "x"): b"A-x:" + b"\x11" * 100,
            (ta, "y"): b"A-y:" + b"\x22" * 2000,
            (tb, "x"): b"B-x:" + b"\x33" * 30000}
    never = [(ta, None), (tb, "y"), (tb, None), ("sc-" + uuid.uuid4().hex[:8], "x")]
    with cluster.store(tenant=ta) as s, cluster.store(tenant=tb) as other:
        for (t, d), v in vals.items():
            s.put(key, v, tenant=t, domain=d)

        def check_live(live):
            """Every scope in ``live`` reads its own bytes and its own route, from this client
            and from a second one; returns the routes."""
            routes = {}
            for (t, d) in live:
                v = vals[(t, d)]
                for c in (s, other):
                    assert c.get(key, tenant=t, domain=d) == v
                    assert c.size(key, tenant=t, domain=d) == len(v)
                    assert c.exists(key, tenant=t, domain=d) is True
                    r = c.route(key, tenant=t, domain=d)
                    assert r.length == len(v) and len(r.replicas) >= 1
                    assert all(x.length == len(v) for x in r.replicas)
                    routes[(t, d)] = r
            return routes

        routes = check_live(list(vals))
        # three objects with three distinct values (the checksum is of the value)
        assert len({r.checksum for r in routes.values()}) == 3
        for t, d in never:
            _assert_absent(s, key, tenant=t, domain=d)
        # a delete where the key was never put: not-found, and nothing elsewhere changes
        for t, d in never:
            with pytest.raises(kvmesh.NotFound):
                s.remove(key, tenant=t, domain=d)
            res = s.batch_remove([key], tenant=t, domain=d)
            assert len(res) == 1 and isinstance(res[0], kvmesh.NotFound)
        assert check_live(list(vals)) == routes
        # a scoped view (tenant A, domain x) deletes its object only
        s.scoped(domain="x").remove(key)
        _assert_absent(s, key, tenant=ta, domain="x")
        _assert_absent(other, key, tenant=ta, domain="x")  # no stale route on the other client
        with pytest.raises(kvmesh.NotFound):
            s.remove(key, tenant=ta, domain="x")  # a second delete: not-found
        live = [(ta, "y"), (tb, "x")]
        assert check_live(live) == {k: routes[k] for k in live}
        # tenant B deletes from its own client: tenant A/domain y stays
        other.remove(key, domain="x")
        _assert_absent(s, key, tenant=tb, domain="x")
        assert check_live([(ta, "y")]) == {(ta, "y"): routes[(ta, "y")]}
        # a new put in a deleted scope is a new object, the survivor is unchanged
        vals[(ta, "x")] = b"A-x again"
        s.put(key, vals[(ta, "x")], tenant=ta, domain="x")
        after = check_live([(ta, "x"), (ta, "y")])
        assert after[(ta, "y")] == routes[(ta, "y")]
        assert after[(ta, "x")].checksum != routes[(ta, "x")].checksum
        _assert_absent(s, key, tenant=tb, domain="x")
        s.remove(key, tenant=ta, domain="x")
        s.remove(key, tenant=ta, domain="y")
        _assert_absent(s, key, tenant=ta, domain="y")


def test_same_key_seen_by_other_client(cluster):
    t = "shared-" + uuid.uuid4().hex[:6]
    with cluster.store(tenant=t) as a, cluster.store(tenant=t) as b:
        a.put("k", b"from-a")
        assert b.get("k") == b"from-a"
        b.remove("k")
        assert a.exists("k") is False


def test_eight_threads_one_store(store):
    errors = []
    rounds = 40

    def worker(w):
        try:
            for r in range(rounds):
                k = f"w{w}-{r}"
                v = blob(1000 + w * 10 + r, w + r)
                store.put(k, v)
                assert store.get(k) == v
                buf = bytearray(len(v))
                assert store.get_into(k, buf) == len(v) and bytes(buf) == v
                keys = [f"w{w}-b{r}-{i}" for i in range(8)]
                vals = [bytes([w, r, i]) * 50 for i in range(8)]
                assert store.batch_put(keys, vals) == [None] * 8
                assert store.batch_get(keys) == vals
                if r % 2:
                    store.remove(k)
                    assert not store.exists(k)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((w, repr(e)))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_close_waits_for_calls_in_flight(cluster):
    s = cluster.store(tenant="closer")
    s.put("k", b"v" * 100000)
    stop = threading.Event()
    outcomes = []

    def reader():
        while not stop.is_set():
            try:
                outcomes.append(s.get("k") == b"v" * 100000)
            except kvmesh.Closed:
                outcomes.append("closed")
                return

    ts = [threading.Thread(target=reader) for _ in range(4)]
    for t in ts:
        t.start()
    import time
    time.sleep(0.3)
    s.close()
    stop.set()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts)
    assert False not in outcomes and True in outcomes


def test_metrics_endpoint_through_config(cluster):
    import urllib.request
    from conftest import free_port
    port = free_port()
    with cluster.store(tenant="m", admin_listen=f"127.0.0.1:{port}") as s:
        s.put("k", b"v")
        s.get("k")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "kvmesh_" in text


def test_tracing_capture_through_config(cluster, tmp_path):
    with cluster.store(tenant="tr", trace_sample_rate="1", trace_capture_dir=str(tmp_path)) as s:
        s.put("k", b"v")
        s.get("k")
        sid, _ = s.self_id()
    path = tmp_path / f"trace-{sid}.jsonl"
    assert path.exists() and path.stat().st_size > 0


def test_readonly_registration_is_never_written(store):
    ro = b"\x00" * 4096
    addr = store.register_buffer(ro)
    store.put("ro-src", addr, 16)  # reading from it is fine
    assert store.get("ro-src") == b"\x00" * 16
    with pytest.raises(kvmesh.InvalidArgument, match="read-only"):
        store.get_into("ro-src", addr, 16)
    store.unregister_buffer(ro)
    assert ro == b"\x00" * 4096


def test_storage_runtime_drain(cluster):
    # a Python process that contributes memory: objects pinned to it survive its drain
    t = "drain-" + uuid.uuid4().hex[:6]
    owner = kvmesh.Store(cluster.client_fields(memory_size="32MiB"), tenant=t)
    reader = cluster.store(tenant=t)
    try:
        me, _ = owner.self_id()
        assert any(m.id == me and m.capacity_bytes == 32 << 20 for m in reader.members())
        keys = [f"d{i}" for i in range(10)]
        vals = [bytes([i]) * 5000 for i in range(10)]
        assert owner.batch_put(keys, vals, replicas=1, preferred=[me], hard_pin=True) == \
            [None] * 10
        assert all(owner.route(k).replicas[0].owner == me for k in keys)
        with pytest.raises(kvmesh.InvalidArgument):
            owner.drain(-1)
        with pytest.raises(TypeError):
            owner.drain("10")
        owner.drain(30000)
        with pytest.raises(kvmesh.Closed):
            owner.get(keys[0])
        assert reader.batch_get(keys) == vals
        assert all(reader.route(k).replicas[0].owner != me for k in keys)
    finally:
        owner.close()
        reader.close()


def test_tenant_quota(cluster):
    # A client-only runtime that enforces a tenant-root policy (tenant_policies): the object
    # limit refuses with QuotaExceeded naming max_objects, a remove refunds, an object larger
    # than max_bytes is refused at once, and another tenant with the same keys is untouched.
    tq = "pq-" + uuid.uuid4().hex[:8]
    other = "po-" + uuid.uuid4().hex[:8]
    with cluster.store(tenant=tq, tenant_policies=f"{tq}:64KiB:3") as s:
        for i in range(3):
            s.put(f"k{i}", b"x" * 1000)
        with pytest.raises(kvmesh.QuotaExceeded, match="max_objects 3"):
            s.put("k3", b"x" * 1000)
        s.put("k3", b"y" * 10, tenant=other)  # another tenant, no policy: not counted
        s.remove("k0")
        s.put("k3", b"x" * 1000)  # the refund made room
        with pytest.raises(kvmesh.Error) as e:
            s.put("big", b"z" * (65 << 10))
        assert e.value.code in (kvmesh.CODES["KVMESH_ETOOBIG"], kvmesh.CODES["KVMESH_EQUOTA"])
        assert s.get("k3") == b"x" * 1000 and s.get("k3", tenant=other) == b"y" * 10
        assert s.exists("k0") is False
