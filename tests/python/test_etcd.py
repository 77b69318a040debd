# SPDX-License-Identifier: Apache-2.0
"""The subset on etcd: 3 kvmeshd on a real etcd, the native Store and the Mooncake store."""
import pytest

import kvmesh
from conftest import Cluster


@pytest.fixture(scope="module")
def etcd_cluster(etcd_server):
    c = Cluster(etcd_server.url)
    yield c
    c.stop()


def test_store_on_etcd(etcd_cluster):
    with etcd_cluster.store(tenant="e1") as s:
        s.put("k", b"etcd-value", replicas=2)
        assert s.get("k") == b"etcd-value"
        assert len(s.route("k").replicas) == 2
        keys = [f"k{i}" for i in range(20)]
        assert s.batch_put(keys, [bytes([i]) * 10 for i in range(20)]) == [None] * 20
        assert s.batch_get(keys) == [bytes([i]) * 10 for i in range(20)]
        other = s.scoped(tenant="e2")
        with pytest.raises(kvmesh.NotFound):
            other.get("k")
        s.remove("k")
        assert not s.exists("k")
        assert {m.id for m in s.members()} >= set(etcd_cluster.ids)
