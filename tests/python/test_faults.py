# SPDX-License-Identifier: Apache-2.0
"""A kvmeshd killed (SIGKILL) during batches: per-item results stay exact. The cluster uses the
tcp transport so that a dead owner's memory is really gone for readers (shm would keep the
segment mapped). Every loop is bounded in count and time."""
import threading
import time

import pytest

import kvmesh
from conftest import Cluster


def value(i, n=64 * 1024):
    return (i.to_bytes(4, "little") * (n // 4))[:n]


@pytest.fixture
def tcp_cluster(redis_server):
    c = Cluster(redis_server.url, transport="tcp")
    try:
        # the tests kill or stop a daemon: every shard's routes must be on all three first
        c.wait_routes_settled()
        yield c
    finally:
        c.stop()


def test_kill_during_batches(tcp_cluster):
    c = tcp_cluster
    s = c.store(tenant="faults")
    try:
        n = 120
        k1 = [f"r1-{i}" for i in range(n)]  # one replica
        k2 = [f"r2-{i}" for i in range(n)]  # two replicas
        assert s.batch_put(k1, [value(i) for i in range(n)], replicas=1) == [None] * n
        assert s.batch_put(k2, [value(i) for i in range(n)], replicas=2) == [None] * n
        owners1 = [s.route(k).replicas[0].owner for k in k1]
        victim = c.ids[0]
        on_victim = {i for i in range(n) if owners1[i] == victim}
        assert on_victim and len(on_victim) < n

        # readers running while the daemon dies: every item is the exact value or an Error
        stop = threading.Event()
        bad = []
        rounds = [0]

        def reader():
            t0 = time.monotonic()
            while not stop.is_set() and rounds[0] < 200 and time.monotonic() - t0 < 60:
                for keys in (k1, k2):
                    res = s.batch_get(keys)
                    for i, r in enumerate(res):
                        if isinstance(r, bytes):
                            if r != value(i):
                                bad.append((keys[i], "wrong bytes"))
                        elif not isinstance(r, kvmesh.Error):
                            bad.append((keys[i], repr(r)))
                rounds[0] += 1

        th = threading.Thread(target=reader)
        th.start()
        t0 = time.monotonic()
        while rounds[0] < 1 and time.monotonic() - t0 < 30:
            time.sleep(0.01)
        c.kill(0)
        # a put batch while the death is being noticed: what it acknowledges is readable
        k3 = [f"r3-{i}" for i in range(n)]
        put_res = s.batch_put(k3, [value(i) for i in range(n)], replicas=2)
        time.sleep(0.5)
        stop.set()
        th.join(120)
        assert not th.is_alive()
        assert bad == []

        # after the kill: single-replica keys of the victim fail (never wrong bytes), every other
        # key reads back exactly
        res = s.batch_get(k1)
        for i, r in enumerate(res):
            if i in on_victim:
                assert isinstance(r, kvmesh.Error) and not isinstance(r, kvmesh.NotFound), (i, r)
            else:
                assert r == value(i), (i, r)
        assert s.batch_get(k2) == [value(i) for i in range(n)]
        got3 = s.batch_get(k3)
        for i, (p, g) in enumerate(zip(put_res, got3)):
            if p is None:
                assert g == value(i), (i, g)
            else:
                assert isinstance(p, kvmesh.Error)
        bufs = [bytearray(64 * 1024) for _ in range(n)]
        res = s.batch_get_into(k1, bufs)
        for i, r in enumerate(res):
            if i in on_victim:
                assert isinstance(r, kvmesh.Error)
            else:
                assert r == 64 * 1024 and bytes(bufs[i]) == value(i)
        # exists/size still answer from the routes (the route outlives the replica's owner)
        ex = s.batch_exists(k2)
        assert ex == [True] * n
    finally:
        s.close()


def test_gil_released_while_blocked(tcp_cluster):
    """A get that waits on a stopped (SIGSTOP) owner must not hold the GIL: the main thread
    resumes the owner (SIGCONT) while the get is blocked, and the get then returns the value.
    With the GIL held the main thread could not run until the get timed out, and the get would
    fail instead."""
    import os
    import signal as sig
    c = tcp_cluster
    with c.store(tenant="gil", request_timeout_ms=30000) as s:
        owner = c.ids[1]
        s.put("g", value(5), replicas=1, preferred=[owner], hard_pin=True)
        assert s.get("g") == value(5)
        out = []
        os.kill(c.daemons[1].pid, sig.SIGSTOP)
        try:
            th = threading.Thread(target=lambda: out.append(s.get("g")))
            th.start()
            time.sleep(1.0)  # let the get reach the stopped owner
            os.kill(c.daemons[1].pid, sig.SIGCONT)
            th.join(60)
        finally:
            os.kill(c.daemons[1].pid, sig.SIGCONT)
        assert not th.is_alive()
        assert out == [value(5)]
