# SPDX-License-Identifier: Apache-2.0
"""kvmesh.tensor: numpy arrays and torch tensors on the native Store, zero copy into registered
memory, batches and tensor-parallel shards, on the real Redis cluster."""
import numpy as np
import pytest
import torch

import kvmesh
from kvmesh import tensor as kt


def test_header_roundtrip():
    h = kt.encode_header("float16", (2, 3, 5))
    assert kt.decode_header(h + b"\0" * 60) == ("float16", (2, 3, 5), 32, 60)
    with pytest.raises(kvmesh.InvalidArgument):
        kt.decode_header(b"nope-not-a-tensor")
    with pytest.raises(kvmesh.InvalidArgument):
        kt.encode_header("float128", (1,))


def test_numpy_roundtrip_and_into(store):
    for dt in ("float32", "float64", "float16", "int8", "uint8", "int32", "int64", "bool"):
        a = (np.arange(60) % 7).astype(dt).reshape(3, 4, 5)
        kt.put_array(store, f"np-{dt}", a)
        g = kt.get_array(store, f"np-{dt}")
        assert g.dtype == a.dtype and g.shape == a.shape and (g == a).all()
        g[0, 0, 0] = 1  # writable
    # non-contiguous input is stored as its contiguous copy
    a = np.arange(100, dtype=np.int32).reshape(10, 10)[:, ::2]
    kt.put_array(store, "np-nc", a)
    assert (kt.get_array(store, "np-nc") == a).all()
    # zero copy into a registered array
    dst = np.zeros((3, 4, 5), dtype=np.float32)
    store.register_buffer(dst)
    out = kt.get_array_into(store, "np-float32", dst)
    assert out is dst and (dst == (np.arange(60) % 7).reshape(3, 4, 5)).all()
    store.unregister_buffer(dst)
    with pytest.raises(kvmesh.InvalidArgument, match="destination is"):
        kt.get_array_into(store, "np-float32", np.zeros((3, 4, 5), dtype=np.float64))
    with pytest.raises(kvmesh.InvalidArgument):
        kt.get_array_into(store, "np-float32", np.zeros((60,), dtype=np.float32))
    with pytest.raises(kvmesh.NotFound):
        kt.get_array(store, "np-missing")
    with pytest.raises(TypeError):
        kt.put_array(store, "x", [1, 2, 3])


def test_torch_roundtrip_and_into(store):
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool):
        t = (torch.arange(48) % 5).to(dt).reshape(4, 12)
        kt.put_tensor(store, f"t-{dt}", t)
        g = kt.get_tensor(store, f"t-{dt}")
        assert g.dtype == dt and torch.equal(g, t)
    t = torch.randn(16, 32)
    kt.put_tensor(store, "tt", t.t())  # non-contiguous
    assert torch.equal(kt.get_tensor(store, "tt"), t.t())
    out = torch.empty(32, 16)
    store.register_buffer(out.numpy())
    assert kt.get_tensor_into(store, "tt", out) is out and torch.equal(out, t.t())
    store.unregister_buffer(out.numpy())
    with pytest.raises(kvmesh.InvalidArgument):
        kt.get_tensor_into(store, "tt", torch.empty(16, 32, dtype=torch.float64))
    e = torch.empty(0, 4)
    kt.put_tensor(store, "empty", e)
    assert kt.get_tensor(store, "empty").shape == (0, 4)
    if torch.cuda.is_available():
        with pytest.raises(kvmesh.InvalidArgument, match="cpu"):
            kt.put_tensor(store, "cuda", torch.zeros(1, device="cuda"))


def test_torch_batches_and_tp(store):
    ts = [torch.full((2, 8), float(i)) for i in range(6)]
    keys = [f"bt{i}" for i in range(6)]
    assert kt.batch_put_tensors(store, keys, ts) == [None] * 6
    got = kt.batch_get_tensors(store, keys + ["missing"])
    assert all(torch.equal(a, b) for a, b in zip(got[:6], ts))
    assert isinstance(got[6], kvmesh.NotFound)
    full = torch.arange(96, dtype=torch.float32).reshape(4, 24)
    res = kt.put_tensor_with_tp(store, "w", full, tp_rank=0, tp_size=3, split_dim=1)
    assert res == [None] * 3
    for r in range(3):
        assert torch.equal(kt.get_tensor_with_tp(store, "w", r, 3, 1), full[:, r * 8:(r + 1) * 8])
    assert kt.tp_key("w", 2, 3) == "w_tp_2" and kt.tp_key("w", 0, 1) == "w"
    r = kt.batch_put_tensors_with_tp(store, ["x", "y"], [full, full * 2], 0, 2, 0)
    assert r == [[None, None], [None, None]]
    g = kt.batch_get_tensors_with_tp(store, ["x", "y"], 1, 2, 0)
    assert torch.equal(g[0], full[2:]) and torch.equal(g[1], (full * 2)[2:])
    with pytest.raises(kvmesh.InvalidArgument, match="equal shards"):
        kt.put_tensor_with_tp(store, "w", full, 0, 5, 1)
    with pytest.raises(kvmesh.InvalidArgument, match="tp_rank"):
        kt.get_tensor_with_tp(store, "w", 3, 3)
