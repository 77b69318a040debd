# SPDX-License-Identifier: Apache-2.0
"""Tensor helpers: numpy arrays and torch tensors stored in kvmesh.

An object written here is a small header followed by the raw element bytes (C order):

    b"KVMT" | version u8 (1) | dtype code u8 | ndim u8 | 0 u8 | ndim x int64 little-endian shape

``put_*`` write header and payload with one gather put (the payload is not copied); ``get_*_into``
scatter the header into a small buffer and the payload straight into the caller's array or
tensor (zero copy when that memory is registered with the store); ``get_*`` allocate a writable
array of the right size and read into it. Batch puts stage header+payload into one buffer per
item (one copy: the C batch call takes one buffer per item). Tensor-parallel helpers split along
``split_dim`` into ``tp_size`` shards stored under ``f"{key}_tp_{rank}"`` (Mooncake's naming); with
``tp_size == 1`` the key itself is used.

torch is imported lazily; numpy is needed for the numpy helpers only.
"""
import struct

from . import _errors, _native

__all__ = ["encode_header", "decode_header", "header_size", "put_array", "get_array",
           "get_array_into", "put_tensor", "get_tensor", "get_tensor_into", "batch_put_tensors",
           "batch_get_tensors", "put_tensor_with_tp", "get_tensor_with_tp",
           "batch_put_tensors_with_tp", "batch_get_tensors_with_tp", "tp_key", "split_tp"]

MAGIC = b"KVMT"
VERSION = 1
MAX_NDIM = 32

# code -> dtype name (the names numpy and torch share; bfloat16 is torch only)
_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
           "int64", "bool", "complex64", "complex128", "uint16", "uint32", "uint64"]
_CODE = {n: i for i, n in enumerate(_DTYPES)}
_ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1,
             "int16": 2, "int32": 4, "int64": 8, "bool": 1, "complex64": 8, "complex128": 16,
             "uint16": 2, "uint32": 4, "uint64": 8}


def _invalid(msg):
    return _errors.make(_native.CODES["KVMESH_EINVAL"], "KVMESH_EINVAL", msg)


def header_size(ndim):
    return 8 + 8 * ndim


def encode_header(dtype_name, shape):
    if dtype_name not in _CODE:
        raise _invalid(f"dtype {dtype_name} is not supported; supported: {', '.join(_DTYPES)}")
    shape = tuple(int(x) for x in shape)
    if len(shape) > MAX_NDIM or any(x < 0 for x in shape):
        raise _invalid(f"shape {shape}: at most {MAX_NDIM} non-negative dimensions")
    return MAGIC + struct.pack(f"<BBBB{len(shape)}q", VERSION, _CODE[dtype_name], len(shape), 0,
                               *shape)


def decode_header(buf):
    """(dtype name, shape, header length, payload length) of a stored tensor object."""
    mv = memoryview(buf).cast("B")
    if len(mv) < 8 or bytes(mv[:4]) != MAGIC:
        raise _invalid("not a kvmesh tensor object (no KVMT header)")
    ver, code, ndim, _ = struct.unpack_from("<BBBB", mv, 4)
    if ver != VERSION or code >= len(_DTYPES) or ndim > MAX_NDIM or len(mv) < header_size(ndim):
        raise _invalid(f"bad tensor header (version {ver}, dtype {code}, ndim {ndim})")
    shape = struct.unpack_from(f"<{ndim}q", mv, 8)
    dt = _DTYPES[code]
    n = 1
    for x in shape:
        n *= x
    return dt, tuple(shape), header_size(ndim), n * _ITEMSIZE[dt]


# ---- numpy -----------------------------------------------------------------------------------
def _np():
    import numpy
    return numpy


def _np_payload(arr):
    np = _np()
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected a numpy.ndarray, not {type(arr).__name__}")
    name = arr.dtype.name
    if name not in _CODE:
        raise _invalid(f"numpy dtype {name} is not supported")
    a = np.ascontiguousarray(arr)
    return encode_header(name, a.shape), a.reshape(-1).view(np.uint8)


def put_array(store, key, arr, **kw):
    """Stores a numpy array (header + payload, one gather put; payload not copied)."""
    hdr, payload = _np_payload(arr)
    parts = [hdr, payload] if payload.size else [hdr]
    store.put_parts(key, parts, **kw)


def _read_object(store, key, kw):
    for _ in range(3):
        n = store.size(key, **kw)
        raw = bytearray(n)
        try:
            got = store.get_into(key, raw, **kw)
        except _errors.TooBig:
            continue  # replaced by a larger object meanwhile: size again
        return raw if got == n else raw[:got]
    raise _errors.make(_native.CODES["KVMESH_EAGAIN"], "KVMESH_EAGAIN",
                       f"object {key!r} kept changing size while being read")


def _decode_np(raw):
    np = _np()
    dt, shape, hl, pl = decode_header(raw)
    if dt == "bfloat16":
        raise _invalid("bfloat16 objects need torch (kvmesh.tensor.get_tensor)")
    if len(raw) != hl + pl:
        raise _invalid(f"tensor object is {len(raw)} bytes; header says {hl + pl}")
    return np.frombuffer(raw, dtype=dt, count=pl // _ITEMSIZE[dt], offset=hl).reshape(shape)


def get_array(store, key, **kw):
    """A writable numpy array read from ``key`` (kvmesh.NotFound when absent)."""
    return _decode_np(_read_object(store, key, kw))


def _read_into(store, key, out_bytes, dtype_name, shape, kw):
    hdr = bytearray(header_size(len(shape)))
    parts = [hdr, out_bytes] if len(out_bytes) else [hdr]
    try:
        n = store.get_parts(key, parts, **kw)
    except _errors.TooBig as e:
        raise _invalid(f"object {key!r} is larger than the destination "
                       f"({len(hdr) + len(out_bytes)} bytes with header): {e.message}") from None
    try:
        dt, sh, hl, pl = decode_header(hdr)
    except _errors.InvalidArgument:
        raise _invalid(f"object {key!r} is not a tensor of {len(shape)} dimensions") from None
    if dt != dtype_name or tuple(sh) != tuple(shape) or n != hl + pl:
        raise _invalid(f"object {key!r} is {dt}{list(sh)}, the destination is "
                       f"{dtype_name}{list(shape)}")
    return n


def get_array_into(store, key, out, **kw):
    """Reads ``key`` straight into ``out`` (a C-contiguous writable numpy array of the stored
    dtype and shape). Returns ``out``."""
    np = _np()
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise TypeError("out must be a writable C-contiguous numpy.ndarray")
    _read_into(store, key, out.reshape(-1).view(np.uint8), out.dtype.name, out.shape, kw)
    return out


# ---- torch -----------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


def _torch_name(t):
    return str(t.dtype).replace("torch.", "")


def _tensor_bytes(t):
    """A uint8 numpy view of a CPU tensor's memory (made contiguous first when needed)."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise _invalid(f"tensor is on {t.device}; kvmesh moves host memory: use .cpu() first")
    name = _torch_name(t)
    if name not in _CODE:
        raise _invalid(f"torch dtype {t.dtype} is not supported")
    c = t.detach().contiguous()
    if name == "bfloat16":
        arr = c.view(torch.int16).numpy()
    elif name == "bool":
        arr = c.view(torch.uint8).numpy()
    else:
        arr = c.numpy()
    return name, tuple(c.shape), arr.reshape(-1).view("uint8"), c


def put_tensor(store, key, tensor, **kw):
    """Stores a CPU torch tensor (header + payload, one gather put; payload not copied)."""
    name, shape, payload, _keep = _tensor_bytes(tensor)
    hdr = encode_header(name, shape)
    store.put_parts(key, [hdr, payload] if payload.size else [hdr], **kw)


def _decode_torch(raw):
    torch = _torch()
    dt, shape, hl, pl = decode_header(raw)
    if len(raw) != hl + pl:
        raise _invalid(f"tensor object is {len(raw)} bytes; header says {hl + pl}")
    tdt = getattr(torch, dt)
    if pl == 0:
        return torch.empty(shape, dtype=tdt)
    return torch.frombuffer(raw, dtype=tdt, count=pl // _ITEMSIZE[dt], offset=hl).reshape(shape)


def get_tensor(store, key, **kw):
    """A CPU torch tensor read from ``key`` (its memory is a fresh bytearray)."""
    return _decode_torch(_read_object(store, key, kw))


def get_tensor_into(store, key, out, **kw):
    """Reads ``key`` straight into ``out`` (a contiguous CPU tensor of the stored dtype and
    shape). Returns ``out``."""
    torch = _torch()
    if not isinstance(out, torch.Tensor) or not out.is_contiguous() or out.device.type != "cpu":
        raise TypeError("out must be a contiguous CPU torch.Tensor")
    name, shape, payload, _keep = _tensor_bytes(out)
    _read_into(store, key, payload, name, shape, kw)
    return out


def _staged(t):
    name, shape, payload, _keep = _tensor_bytes(t)
    hdr = encode_header(name, shape)
    buf = bytearray(len(hdr) + payload.size)
    buf[:len(hdr)] = hdr
    buf[len(hdr):] = payload.tobytes() if payload.size else b""
    return buf


def batch_put_tensors(store, keys, tensors, **kw):
    """One batch put of tensors; returns the per-item results of Store.batch_put."""
    if len(keys) != len(tensors):
        raise _invalid(f"{len(keys)} keys but {len(tensors)} tensors")
    return store.batch_put(keys, [_staged(t) for t in tensors], **kw)


def batch_get_tensors(store, keys, **kw):
    """One batch read; per item a tensor or the item's kvmesh.Error."""
    sizes = store.batch_size(keys, **kw)
    idx = [i for i, s in enumerate(sizes) if not isinstance(s, _errors.Error)]
    out = list(sizes)
    bufs = [bytearray(sizes[i]) for i in idx]
    res = store.batch_get_into([keys[i] for i in idx], bufs, **kw) if idx else []
    for j, i in enumerate(idx):
        r = res[j]
        if isinstance(r, _errors.Error):
            if isinstance(r, _errors.TooBig):  # replaced by a larger object: read it alone
                try:
                    out[i] = get_tensor(store, keys[i], **kw)
                except _errors.Error as e:
                    out[i] = e
            else:
                out[i] = r
        else:
            try:
                out[i] = _decode_torch(bufs[j][:r])
            except _errors.Error as e:
                out[i] = e
    return out


# ---- tensor parallelism ------------------------------------------------------------------------
def tp_key(key, tp_rank, tp_size):
    return key if tp_size == 1 else f"{key}_tp_{tp_rank}"


def _check_tp(tp_rank, tp_size, split_dim, ndim=None):
    for n, v in (("tp_rank", tp_rank), ("tp_size", tp_size), ("split_dim", split_dim)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{n} must be an int")
    if tp_size < 1 or not 0 <= tp_rank < tp_size:
        raise _invalid(f"need 0 <= tp_rank < tp_size, got tp_rank={tp_rank} tp_size={tp_size}")
    if ndim is not None and not -ndim <= split_dim < ndim:
        raise _invalid(f"split_dim {split_dim} out of range for a {ndim}-dimensional tensor")


def split_tp(tensor, tp_size, split_dim=0):
    """The tp_size shards of a tensor along split_dim (the dimension must divide evenly)."""
    _check_tp(0, tp_size, split_dim, tensor.dim())
    if tensor.shape[split_dim] % tp_size:
        raise _invalid(f"dimension {split_dim} of size {tensor.shape[split_dim]} does not split "
                       f"into {tp_size} equal shards")
    return list(tensor.chunk(tp_size, dim=split_dim))


def put_tensor_with_tp(store, key, tensor, tp_rank=0, tp_size=1, split_dim=0, **kw):
    """Stores every one of the tp_size shards of the full ``tensor`` (each under
    tp_key(key, r, tp_size)) in one batch; returns the per-shard results. ``tp_rank`` is
    validated only: every rank's shard is written, so any rank may publish the full tensor."""
    _check_tp(tp_rank, tp_size, split_dim, tensor.dim())
    shards = split_tp(tensor, tp_size, split_dim)
    return batch_put_tensors(store, [tp_key(key, r, tp_size) for r in range(tp_size)], shards,
                             **kw)


def get_tensor_with_tp(store, key, tp_rank=0, tp_size=1, split_dim=0, **kw):
    """The shard of ``tp_rank`` (stored by put_tensor_with_tp with the same tp_size)."""
    _check_tp(tp_rank, tp_size, split_dim)
    return get_tensor(store, tp_key(key, tp_rank, tp_size), **kw)


def batch_put_tensors_with_tp(store, keys, tensors, tp_rank=0, tp_size=1, split_dim=0, **kw):
    """Per key, the results of put_tensor_with_tp (one batch for all shards of all keys)."""
    if len(keys) != len(tensors):
        raise _invalid(f"{len(keys)} keys but {len(tensors)} tensors")
    _check_tp(tp_rank, tp_size, split_dim)
    all_keys, all_shards = [], []
    for k, t in zip(keys, tensors):
        all_keys += [tp_key(k, r, tp_size) for r in range(tp_size)]
        all_shards += split_tp(t, tp_size, split_dim)
    res = batch_put_tensors(store, all_keys, all_shards, **kw)
    return [res[i * tp_size:(i + 1) * tp_size] for i in range(len(keys))]


def batch_get_tensors_with_tp(store, keys, tp_rank=0, tp_size=1, split_dim=0, **kw):
    _check_tp(tp_rank, tp_size, split_dim)
    return batch_get_tensors(store, [tp_key(k, tp_rank, tp_size) for k in keys], **kw)
