/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_rec.c — durable metadata values of the route service: the shard-authority record and
 * the cluster route policy. Little-endian fixed-width layout, a magic and a version byte;
 * decoders reject anything malformed with KVMESH_EPROTO (the records come from a shared store).
 *
 *   record: 'S' 1 | u64 generation | u64 token | u8 state | primary (16 + u64 epoch)
 *           | u32 primary_node | i64 lease | u32 n_set, n_set x member | u32 n_src, member...
 *           member = 16 id bytes | u64 epoch | u32 node
 *   policy: 'P' 1 | u32 mode | u32 top_k | u32 n_shards | u32 protocol_version
 */
#include <string.h>

#include "core/util.h"
#include "core/wrh.h"
#include "route/route_int.h"

typedef struct rw {
    uint8_t *p;
    size_t cap, len;
    const uint8_t *rp;
    bool bad;
} rw_t;

static void put(rw_t *w, uint64_t v, int n)
{
    if (w->bad || w->cap - w->len < (size_t)n) {
        w->bad = true;
        return;
    }
    for (int i = 0; i < n; i++)
        w->p[w->len++] = (uint8_t)(v >> (8 * i));
}

static uint64_t get(rw_t *r, int n)
{
    if (r->bad || r->cap - r->len < (size_t)n) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | r->rp[r->len + (size_t)i];
    r->len += (size_t)n;
    return v;
}

static void put_member(rw_t *w, const kvm_runtime_t *rt, env_node_t node)
{
    for (int i = 0; i < KVM_ID128_LEN; i++)
        put(w, rt->id.b[i], 1);
    put(w, rt->epoch, 8);
    put(w, node, 4);
}

static void get_member(rw_t *r, kvm_runtime_t *rt, env_node_t *node)
{
    for (int i = 0; i < KVM_ID128_LEN; i++)
        rt->id.b[i] = (uint8_t)get(r, 1);
    rt->epoch = get(r, 8);
    *node = (env_node_t)get(r, 4);
}

int route_rec_encode(const route_rec_t *rec, uint8_t *buf, size_t cap, size_t *out_len)
{
    KVM_ASSERT(rec->n_set <= ROUTE_MSG_MAX_SET && rec->n_src <= ROUTE_MSG_MAX_SET);
    rw_t w = {.p = buf, .cap = cap};
    put(&w, 'S', 1);
    put(&w, 1, 1);
    put(&w, rec->generation, 8);
    put(&w, rec->token, 8);
    put(&w, rec->state, 1);
    put_member(&w, &rec->primary, rec->primary_node);
    put(&w, (uint64_t)rec->lease, 8);
    put(&w, rec->n_set, 4);
    for (uint32_t i = 0; i < rec->n_set; i++)
        put_member(&w, &rec->set[i].rt, rec->set[i].node);
    put(&w, rec->n_src, 4);
    for (uint32_t i = 0; i < rec->n_src; i++)
        put_member(&w, &rec->src[i].rt, rec->src[i].node);
    if (w.bad)
        return kvm_errf(KVMESH_ETOOBIG, "shard record does not fit %zu bytes", cap);
    *out_len = w.len;
    return 0;
}

int route_rec_decode(const uint8_t *buf, size_t len, route_rec_t *out)
{
    memset(out, 0, sizeof(*out));
    rw_t r = {.rp = buf, .cap = len};
    if (get(&r, 1) != 'S' || get(&r, 1) != 1)
        return kvm_errf(KVMESH_EPROTO, "shard record: bad magic or version");
    out->generation = get(&r, 8);
    out->token = get(&r, 8);
    out->state = (uint8_t)get(&r, 1);
    get_member(&r, &out->primary, &out->primary_node);
    out->lease = (int64_t)get(&r, 8);
    out->n_set = (uint32_t)get(&r, 4);
    if (out->n_set > ROUTE_MSG_MAX_SET)
        return kvm_errf(KVMESH_EPROTO, "shard record: set of %u members", out->n_set);
    for (uint32_t i = 0; i < out->n_set; i++)
        get_member(&r, &out->set[i].rt, &out->set[i].node);
    out->n_src = (uint32_t)get(&r, 4);
    if (out->n_src > ROUTE_MSG_MAX_SET)
        return kvm_errf(KVMESH_EPROTO, "shard record: source set of %u members", out->n_src);
    for (uint32_t i = 0; i < out->n_src; i++)
        get_member(&r, &out->src[i].rt, &out->src[i].node);
    if (r.bad || r.len != len || out->state < ROUTE_REC_TRANSFERRING ||
        out->state > ROUTE_REC_RESIGNED || out->token == 0) {
        memset(out, 0, sizeof(*out));
        return kvm_errf(KVMESH_EPROTO, "shard record: truncated, trailing bytes or bad state");
    }
    return 0;
}

int route_policy_encode(const route_policy_t *p, uint8_t *buf, size_t cap, size_t *out_len)
{
    rw_t w = {.p = buf, .cap = cap};
    put(&w, 'P', 1);
    put(&w, 1, 1);
    put(&w, (uint32_t)p->mode, 4);
    put(&w, p->top_k, 4);
    put(&w, p->n_shards, 4);
    put(&w, p->protocol_version, 4);
    if (w.bad)
        return kvm_errf(KVMESH_ETOOBIG, "policy does not fit");
    *out_len = w.len;
    return 0;
}

int route_policy_decode(const uint8_t *buf, size_t len, route_policy_t *out)
{
    memset(out, 0, sizeof(*out));
    rw_t r = {.rp = buf, .cap = len};
    if (get(&r, 1) != 'P' || get(&r, 1) != 1)
        return kvm_errf(KVMESH_EPROTO, "cluster route policy: bad magic or version");
    out->mode = (enum route_mode)get(&r, 4);
    out->top_k = (uint32_t)get(&r, 4);
    out->n_shards = (uint32_t)get(&r, 4);
    out->protocol_version = (uint32_t)get(&r, 4);
    if (r.bad || r.len != len)
        return kvm_errf(KVMESH_EPROTO, "cluster route policy: truncated or trailing bytes");
    return 0;
}
