# SPDX-License-Identifier: Apache-2.0
"""The subset on etcd: 3 kvmeshd on a real etcd, the native Store and the Mooncake store."""
import pytest

import kvmesh
from conftest import Cluster


@pytest.fixture(scope="module")
def etcd_cluster(etcd_server):
    # a longer lease than on Redis: etcd lease grants and their first use are further apart
    # on a loaded machine (a 1 s lease was seen to expire inside kvmesh_open)
    c = Cluster(etcd_server.url, lease_ms=3000)
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


def test_mooncake_on_etcd(etcd_cluster):
    from kvmesh.mooncake import MooncakeDistributedStore
    s = MooncakeDistributedStore(kvmesh_config={"deployment": etcd_cluster.deployment,
                                                "lease_ttl_ms": "3000",
                                                "segment_size": "32MiB",
                                                "max_object_size": "32MiB"})
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": etcd_cluster.url,
                    "global_segment_size": "0", "tenant_id": "mc-etcd"}) == 0
    try:
        ptr = s.alloc_from_mem_pool(1 << 20)
        keys = [f"e{i}" for i in range(8)]
        assert s.batch_put_from(keys, [ptr + i * 4096 for i in range(8)], [4096] * 8) == [0] * 8
        assert s.batch_is_exist(keys + ["nope"]) == [1] * 8 + [0]
        assert s.batch_get_into(keys, [ptr + (512 << 10) + i * 4096 for i in range(8)],
                                [4096] * 8) == [4096] * 8
        assert s.health_check() == 0
    finally:
        s.close()
