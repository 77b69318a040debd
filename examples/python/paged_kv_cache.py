#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What an inference engine does with kvmesh: a paged KV cache of torch tensors.

The engine keeps, per layer, one pool tensor of KV blocks ``[num_blocks, 2, block_tokens,
heads, head_dim]`` (K and V). The pools are registered with the store once. After a prefill it
offloads every full block of the sequence, per layer, with ONE ``batch_put_from`` (keys are the
chained hash of the token prefix, so equal prefixes give equal keys). A later request that
shares the prefix asks ``batch_is_exist`` which of its blocks are cached, takes the longest
cached prefix, allocates pool blocks and reloads them, for all layers, with ONE
``batch_get_into`` straight into the pools (zero copy), then computes only the rest.

    python3 examples/python/paged_kv_cache.py                       # in-process (memory://)
    python3 examples/python/paged_kv_cache.py --metadata redis://127.0.0.1:6379 --deployment d

Exit status 0 when every reloaded block equals the block that was offloaded.
"""
import argparse
import hashlib
import sys

import torch

from kvmesh.mooncake import MooncakeDistributedStore, ReplicateConfig


class PagedKVCache:
    def __init__(self, layers, num_blocks, block_tokens, heads, head_dim, dtype):
        self.layers, self.block_tokens = layers, block_tokens
        self.pools = [torch.zeros(num_blocks, 2, block_tokens, heads, head_dim, dtype=dtype)
                      for _ in range(layers)]
        self.block_bytes = self.pools[0][0].numel() * self.pools[0].element_size()
        self.free = list(range(num_blocks))

    def alloc(self, n):
        if n > len(self.free):
            raise RuntimeError("KV pool exhausted")
        got, self.free = self.free[:n], self.free[n:]
        return got

    def release(self, blocks):
        self.free.extend(blocks)

    def ptr(self, layer, block):
        return self.pools[layer].data_ptr() + block * self.block_bytes

    def register(self, store):
        for p in self.pools:
            rc = store.register_buffer(p.data_ptr(), p.numel() * p.element_size())
            if rc != 0:
                raise RuntimeError(f"register_buffer failed: {rc} {store.last_error}")

    def unregister(self, store):
        for p in self.pools:
            store.unregister_buffer(p.data_ptr())


def block_hashes(tokens, block_tokens, model):
    """Chained prefix hashes of the full blocks of ``tokens``."""
    out, prev = [], model.encode()
    for i in range(len(tokens) // block_tokens):
        h = hashlib.sha256(prev + torch.tensor(tokens[i * block_tokens:(i + 1) * block_tokens],
                                               dtype=torch.int64).numpy().tobytes()).hexdigest()
        out.append(h[:32])
        prev = h.encode()
    return out


def key(model, h, layer):
    return f"{model}/{h}/L{layer}"


def prefill(cache, tokens, seed):
    """Stands in for the attention kernels: fills the sequence's blocks with deterministic KV."""
    blocks = cache.alloc(len(tokens) // cache.block_tokens)
    g = torch.Generator().manual_seed(seed)
    for layer in range(cache.layers):
        for b in blocks:
            cache.pools[layer][b].copy_(torch.randn(cache.pools[layer][b].shape, generator=g)
                                        .to(cache.pools[layer].dtype))
    return blocks


def offload(store, cache, model, tokens, blocks):
    hashes = block_hashes(tokens, cache.block_tokens, model)
    keys, ptrs = [], []
    for layer in range(cache.layers):
        for h, b in zip(hashes, blocks):
            keys.append(key(model, h, layer))
            ptrs.append(cache.ptr(layer, b))
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    res = store.batch_put_from(keys, ptrs, [cache.block_bytes] * len(keys), cfg)
    bad = [(k, r) for k, r in zip(keys, res) if r != 0]
    if bad:
        raise RuntimeError(f"offload: {len(bad)} blocks failed, first {bad[0]}: "
                           f"{store.last_error}")
    return hashes


def reload_prefix(store, cache, model, tokens):
    """Reloads the longest cached prefix; returns (hashes reloaded, pool blocks)."""
    hashes = block_hashes(tokens, cache.block_tokens, model)
    # a block counts only when every layer of it is cached
    exist = store.batch_is_exist([key(model, h, layer) for layer in range(cache.layers)
                                  for h in hashes])
    n = len(hashes)
    hit = 0
    while hit < n and all(exist[layer * n + hit] == 1 for layer in range(cache.layers)):
        hit += 1
    if hit == 0:
        return [], []
    blocks = cache.alloc(hit)
    keys, ptrs = [], []
    for layer in range(cache.layers):
        for h, b in zip(hashes[:hit], blocks):
            keys.append(key(model, h, layer))
            ptrs.append(cache.ptr(layer, b))
    res = store.batch_get_into(keys, ptrs, [cache.block_bytes] * len(keys))
    if any(r != cache.block_bytes for r in res):
        # a negative result is a miss to recompute, never a crash (here: stop at the first)
        first = min(i % hit for i, r in enumerate(res) if r != cache.block_bytes)
        cache.release(blocks[first:])
        return hashes[:first], blocks[:first]
    return hashes[:hit], blocks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metadata", default="memory://paged-kv")
    ap.add_argument("--deployment", default="default")
    ap.add_argument("--tenant", default="engine")
    ap.add_argument("--segment", default="256MB",
                    help="memory this process contributes (0 = client only)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--block-tokens", type=int, default=16)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="extra kvmesh configuration field")
    a = ap.parse_args(argv)

    extra = {"deployment": a.deployment}
    for s in a.set:
        k, _, v = s.partition("=")
        extra[k] = v
    store = MooncakeDistributedStore(kvmesh_config=extra)
    rc = store.setup("127.0.0.1", a.metadata, a.segment, "16MB", "tcp", "", "", tenant_id=a.tenant)
    if rc != 0:
        print(f"setup failed: {rc} {store.last_error}", file=sys.stderr)
        return 1
    model = "demo-llm"
    cache = PagedKVCache(a.layers, 64, a.block_tokens, a.heads, a.head_dim, torch.bfloat16)
    cache.register(store)
    try:
        # request 1: a 5-block prompt, prefilled and offloaded
        prompt = list(range(1000, 1000 + 5 * a.block_tokens))
        blocks = prefill(cache, prompt, seed=7)
        hashes = offload(store, cache, model, prompt, blocks)
        originals = [[cache.pools[layer][b].clone() for b in blocks]
                     for layer in range(a.layers)]
        cache.release(blocks)
        # request 2: the same 5-block prefix, then 3 more blocks of new tokens
        prompt2 = prompt + list(range(5000, 5000 + 3 * a.block_tokens))
        got_hashes, got_blocks = reload_prefix(store, cache, model, prompt2)
        if got_hashes != hashes:
            print(f"expected a 5-block prefix hit, got {len(got_hashes)}", file=sys.stderr)
            return 1
        for layer in range(a.layers):
            for i, b in enumerate(got_blocks):
                if not torch.equal(cache.pools[layer][b], originals[layer][i]):
                    print(f"layer {layer} block {i}: reloaded bytes differ", file=sys.stderr)
                    return 1
        # request 3: a different prompt has no cached prefix
        miss, _ = reload_prefix(store, cache, model, list(range(9000, 9000 + 2 * a.block_tokens)))
        if miss:
            print("unexpected prefix hit for a new prompt", file=sys.stderr)
            return 1
        print(f"verified: offloaded {len(hashes)} blocks x {a.layers} layers "
              f"({cache.block_bytes} bytes each) with one batch_put_from, reloaded the "
              f"{len(got_hashes)}-block prefix with batch_is_exist + one batch_get_into")
        return 0
    finally:
        cache.unregister(store)
        store.close()


if __name__ == "__main__":
    sys.exit(main())
