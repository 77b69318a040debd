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

#include "core/bytes.h"
#include "core/util.h"
#include "core/wrh.h"
#include "route/route_int.h"

static void put_member(kvm_wr_t *w, const kvm_runtime_t *rt, env_node_t node)
{
    kvm_wr_bytes(w, rt->id.b, KVM_ID128_LEN);
    kvm_wr_u64le(w, rt->epoch);
    kvm_wr_u32le(w, node);
}

static void get_member(kvm_rd_t *r, kvm_runtime_t *rt, env_node_t *node)
{
    kvm_rd_copy(r, rt->id.b, KVM_ID128_LEN);
    rt->epoch = kvm_rd_u64le(r);
    *node = (env_node_t)kvm_rd_u32le(r);
}

int route_rec_encode(const route_rec_t *rec, uint8_t *buf, size_t cap, size_t *out_len)
{
    KVM_ASSERT(rec->n_set <= ROUTE_MSG_MAX_SET && rec->n_src <= ROUTE_MSG_MAX_SET);
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, 'S');
    kvm_wr_u8(&w, 1);
    kvm_wr_u64le(&w, rec->generation);
    kvm_wr_u64le(&w, rec->token);
    kvm_wr_u8(&w, rec->state);
    put_member(&w, &rec->primary, rec->primary_node);
    kvm_wr_u64le(&w, (uint64_t)rec->lease);
    kvm_wr_u32le(&w, rec->n_set);
    for (uint32_t i = 0; i < rec->n_set; i++)
        put_member(&w, &rec->set[i].rt, rec->set[i].node);
    kvm_wr_u32le(&w, rec->n_src);
    for (uint32_t i = 0; i < rec->n_src; i++)
        put_member(&w, &rec->src[i].rt, rec->src[i].node);
    if (kvm_wr_finish(&w, out_len) != 0)
        return kvm_errf(KVMESH_ETOOBIG, "shard record does not fit %zu bytes", cap);
    return 0;
}

int route_rec_decode(const uint8_t *buf, size_t len, route_rec_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    if (kvm_rd_u8(&r) != 'S' || kvm_rd_u8(&r) != 1)
        return kvm_errf(KVMESH_EPROTO, "shard record: bad magic or version");
    out->generation = kvm_rd_u64le(&r);
    out->token = kvm_rd_u64le(&r);
    out->state = kvm_rd_u8(&r);
    get_member(&r, &out->primary, &out->primary_node);
    out->lease = (int64_t)kvm_rd_u64le(&r);
    out->n_set = kvm_rd_u32le(&r);
    if (out->n_set > ROUTE_MSG_MAX_SET)
        return kvm_errf(KVMESH_EPROTO, "shard record: set of %u members", out->n_set);
    for (uint32_t i = 0; i < out->n_set; i++)
        get_member(&r, &out->set[i].rt, &out->set[i].node);
    out->n_src = kvm_rd_u32le(&r);
    if (out->n_src > ROUTE_MSG_MAX_SET)
        return kvm_errf(KVMESH_EPROTO, "shard record: source set of %u members", out->n_src);
    for (uint32_t i = 0; i < out->n_src; i++)
        get_member(&r, &out->src[i].rt, &out->src[i].node);
    if (!kvm_rd_end(&r) || out->state < ROUTE_REC_TRANSFERRING || out->state > ROUTE_REC_RESIGNED ||
        out->token == 0) {
        memset(out, 0, sizeof(*out));
        return kvm_errf(KVMESH_EPROTO, "shard record: truncated, trailing bytes or bad state");
    }
    return 0;
}

int route_policy_encode(const route_policy_t *p, uint8_t *buf, size_t cap, size_t *out_len)
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, 'P');
    kvm_wr_u8(&w, 1);
    kvm_wr_u32le(&w, (uint32_t)p->mode);
    kvm_wr_u32le(&w, p->top_k);
    kvm_wr_u32le(&w, p->n_shards);
    kvm_wr_u32le(&w, p->protocol_version);
    if (kvm_wr_finish(&w, out_len) != 0)
        return kvm_errf(KVMESH_ETOOBIG, "policy does not fit");
    return 0;
}

int route_policy_decode(const uint8_t *buf, size_t len, route_policy_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    if (kvm_rd_u8(&r) != 'P' || kvm_rd_u8(&r) != 1)
        return kvm_errf(KVMESH_EPROTO, "cluster route policy: bad magic or version");
    out->mode = (enum route_mode)kvm_rd_u32le(&r);
    out->top_k = kvm_rd_u32le(&r);
    out->n_shards = kvm_rd_u32le(&r);
    out->protocol_version = kvm_rd_u32le(&r);
    if (!kvm_rd_end(&r))
        return kvm_errf(KVMESH_EPROTO, "cluster route policy: truncated or trailing bytes");
    return 0;
}
