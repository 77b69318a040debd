/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_table.c — per-shard route map of packed entries (route_table.h, route_pack.h): the
 * ident order is a B-tree of entry pointers (route_index.h), the expiry index a BSD red-black
 * tree of <bsd/sys/tree.h> (tombstones only), the entries records of the table's pool
 * (core/slab.h).
 */
#include "route/route_table.h"

#ifndef __unused
#define __unused __attribute__((unused))
#endif
#include <bsd/sys/tree.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/slab.h"
#include "core/util.h"
#include "route/route_index.h"
#include "route/route_pack.h"

typedef struct rt_node {
    route_entry_t e; /* no links: the index (route_index.h) holds a pointer to the node */
    uint8_t data[];  /* e.priv_enc_len bytes of ident encoding, then e.priv_len of packed route */
} rt_node_t;

typedef struct tomb_ref {
    RB_ENTRY(tomb_ref) link;
    uint64_t until;
    rt_node_t *n;
} tomb_ref_t;

static int node_cmp(rt_node_t *a, rt_node_t *b)
{
    return route_key_cmp(a->data, a->e.priv_enc_len, b->data, b->e.priv_enc_len);
}

static int tomb_cmp(tomb_ref_t *a, tomb_ref_t *b)
{
    if (a->until != b->until)
        return a->until < b->until ? -1 : 1;
    return node_cmp(a->n, b->n);
}

RB_HEAD(tomb_tree, tomb_ref);
RB_GENERATE_STATIC(tomb_tree, tomb_ref, link, tomb_cmp)

struct route_table {
    ridx_t by_ident;
    struct tomb_tree by_expiry;
    size_t count, n_tombs;
    size_t entry_bytes, packed_bytes, ident_bytes; /* route_table_mem */
    rp_sets_t sets;
    slab_t pool; /* the entries (rt_node_t records: core/slab.h) */
};

/* The bytes n was allocated with (its header, ident encoding and packed route). */
static size_t node_bytes(const rt_node_t *n)
{
    return sizeof(*n) + n->e.priv_enc_len + n->e.priv_len;
}

static const uint8_t *packed(const rt_node_t *n)
{
    return n->data + n->e.priv_enc_len;
}

static const uint8_t *node_key(const void *item, size_t *len)
{
    const rt_node_t *n = item;
    *len = n->e.priv_enc_len;
    return n->data;
}

route_table_t *route_table_new(void)
{
    route_table_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    ridx_init(&t->by_ident, node_key);
    RB_INIT(&t->by_expiry);
    slab_init(&t->pool);
    return t;
}

kvm_ident_t route_entry_ident(const route_entry_t *e)
{
    const rt_node_t *n = KVM_CONTAINER_OF(e, rt_node_t, e);
    kvm_ident_t id;
    memset(&id, 0, sizeof(id));
    uint32_t len = e->priv_enc_len;
    if (len == 0)
        return id;
    const uint8_t *enc = n->data;
    id.enc = (uint8_t *)enc;
    id.enc_len = len;
    id.hash = kvm_hash_seeded(enc, len, KVM_HASH_SEED_IDENT);
    /* layout (ident.h): version | tenant_len | tenant | domain_len | domain | key_len(BE) | key */
    if (len >= 2) {
        uint32_t tl = enc[1];
        id.tenant_len = (uint8_t)tl;
        if (2 + tl < len) {
            uint32_t dl = enc[2 + tl];
            id.domain_len = (uint8_t)dl;
            if (4 + tl + dl < len)
                id.key_len = (uint16_t)(enc[3 + tl + dl] << 8 | enc[4 + tl + dl]);
        }
    }
    return id;
}

kvm_route_version_t route_entry_version(const route_entry_t *e)
{
    const rt_node_t *n = KVM_CONTAINER_OF(e, rt_node_t, e);
    return rp_version(packed(n), e->priv_len);
}

void route_table_view(const route_table_t *t, const route_entry_t *e, kvm_route_t *out)
{
    const rt_node_t *n = KVM_CONTAINER_OF(e, rt_node_t, e);
    rp_unpack(&t->sets, packed(n), e->priv_len, out);
    out->ident = route_entry_ident(e);
}

void route_table_head(const route_table_t *t, const route_entry_t *e, rp_head_t *out)
{
    const rt_node_t *n = KVM_CONTAINER_OF(e, rt_node_t, e);
    rp_head(&t->sets, packed(n), e->priv_len, out);
}

/* A tombstone with a purge deadline (finalized, or pending with one) is in the expiry index. */
static bool indexed(const kvm_route_t *r)
{
    return r->tomb != KVM_TOMB_NONE && r->retain_until_ms != 0;
}

static uint64_t node_until(const route_table_t *t, const rt_node_t *n, bool *in_index)
{
    kvm_route_t v;
    rp_unpack(&t->sets, packed(n), n->e.priv_len, &v);
    *in_index = indexed(&v);
    return v.retain_until_ms;
}

static tomb_ref_t *tomb_of(route_table_t *t, rt_node_t *n)
{
    if (t->n_tombs == 0)
        return NULL; /* (no unpack: a replaced live route's common case) */
    bool fin;
    tomb_ref_t key = {.until = node_until(t, n, &fin), .n = n};
    return fin ? RB_FIND(tomb_tree, &t->by_expiry, &key) : NULL;
}

static void unref_tomb(route_table_t *t, rt_node_t *n)
{
    tomb_ref_t *r = tomb_of(t, n);
    if (!r)
        return;
    RB_REMOVE(tomb_tree, &t->by_expiry, r);
    free(r);
    t->n_tombs--;
}

static int ref_tomb(route_table_t *t, rt_node_t *n, const kvm_route_t *route)
{
    if (!indexed(route))
        return 0;
    tomb_ref_t *r = calloc(1, sizeof(*r));
    if (!r)
        return KVMESH_ENOMEM;
    r->until = route->retain_until_ms;
    r->n = n;
    RB_INSERT(tomb_tree, &t->by_expiry, r);
    t->n_tombs++;
    return 0;
}

static void account(route_table_t *t, const rt_node_t *n, bool add)
{
    size_t b = node_bytes(n), p = n->e.priv_len, i = n->e.priv_enc_len;
    b = b > SLAB_MAX ? b : slab_size(b);
    if (add) {
        t->entry_bytes += b;
        t->packed_bytes += p;
        t->ident_bytes += i;
    } else {
        t->entry_bytes -= b;
        t->packed_bytes -= p;
        t->ident_bytes -= i;
    }
}

/* Frees n, out of the ident index already (or being cleared). */
static void node_release(route_table_t *t, rt_node_t *n)
{
    unref_tomb(t, n);
    rp_unref(&t->sets, packed(n), n->e.priv_len);
    account(t, n, false);
    slab_free(&t->pool, n, node_bytes(n));
    t->count--;
}

static void node_free(route_table_t *t, rt_node_t *n)
{
    void *was = ridx_remove(&t->by_ident, n->data, n->e.priv_enc_len);
    KVM_ASSERT(was == n);
    node_release(t, n);
}

static void release_each(void *item, void *ctx)
{
    node_release(ctx, item);
}

void route_table_clear(route_table_t *t)
{
    ridx_clear(&t->by_ident, release_each, t);
    slab_reset_if_empty(&t->pool); /* (every entry is released: the chunks go too) */
}

void route_table_free(route_table_t *t)
{
    if (!t)
        return;
    route_table_clear(t);
    rp_sets_fini(&t->sets);
    slab_fini(&t->pool);
    free(t);
}

size_t route_table_count(const route_table_t *t)
{
    return t->count;
}

static rt_node_t *find(route_table_t *t, const kvm_ident_t *ident)
{
    return ridx_find(&t->by_ident, ident->enc, ident->enc_len);
}

route_entry_t *route_table_get(route_table_t *t, const kvm_ident_t *ident)
{
    rt_node_t *n = find(t, ident);
    return n ? &n->e : NULL;
}

/* Rewrites old's packed route with buf (plen bytes, old's own length: a replacing route of the
 * same shape, the common case), in place: no record, no index update. r: the route packed. */
static int rewrite(route_table_t *t, rt_node_t *old, const kvm_route_t *r, const uint8_t *buf,
                   size_t plen)
{
    KVM_ASSERT(old->e.priv_len == plen);
    unref_tomb(t, old); /* (reads the old packed route) */
    rp_unref(&t->sets, packed(old), plen);
    memcpy(old->data + old->e.priv_enc_len, buf, plen);
    if (ref_tomb(t, old, r) != 0) {
        node_free(t, old);
        return KVMESH_ENOMEM;
    }
    return 0;
}

int route_table_put(route_table_t *t, const kvm_route_t *r, route_entry_t **out)
{
    rt_node_t *old = find(t, &r->ident);
    return route_table_put_at(t, old ? &old->e : NULL, r, out);
}

int route_table_put_at(route_table_t *t, route_entry_t *at, const kvm_route_t *r,
                       route_entry_t **out)
{
    uint8_t buf[RP_MAX_PACKED];
    size_t plen = 0, elen = r->ident.enc_len;
    KVM_ASSERT(elen <= UINT16_MAX);
    if (rp_pack(&t->sets, r, buf, &plen) != 0) /* before anything of r's entry changes */
        return KVMESH_ENOMEM;
    rt_node_t *old = at ? KVM_CONTAINER_OF(at, rt_node_t, e) : NULL;
    if (old && old->e.priv_len == plen) {
        int rc = rewrite(t, old, r, buf, plen);
        if (rc == 0 && out)
            *out = &old->e;
        return rc;
    }
    rt_node_t *n = slab_alloc(&t->pool, sizeof(*n) + elen + plen); /* zeroed */
    if (!n) {
        rp_unref(&t->sets, buf, plen);
        return KVMESH_ENOMEM;
    }
    if (elen)
        memcpy(n->data, r->ident.enc, elen); /* r may be a view of old: copy before freeing it */
    memcpy(n->data + elen, buf, plen);
    n->e.priv_enc_len = (uint16_t)elen;
    n->e.priv_len = (uint16_t)plen;
    if (old) { /* in place: no index allocation, so nothing to undo */
        n->e.busy = old->e.busy;
        n->e.dirty = old->e.dirty;
        void *was = ridx_replace(&t->by_ident, n);
        KVM_ASSERT(was == old);
        node_release(t, old);
    } else if (ridx_insert(&t->by_ident, n) != 0) {
        rp_unref(&t->sets, buf, plen);
        slab_free(&t->pool, n, node_bytes(n));
        return KVMESH_ENOMEM;
    }
    t->count++;
    account(t, n, true);
    if (ref_tomb(t, n, r) != 0) {
        node_free(t, n);
        return KVMESH_ENOMEM;
    }
    if (out)
        *out = &n->e;
    return 0;
}

void route_table_del(route_table_t *t, route_entry_t *e)
{
    node_free(t, KVM_CONTAINER_OF(e, rt_node_t, e));
}

/* The entry at it, as a route entry (NULL at the end). */
static route_entry_t *entry_at(const ridx_iter_t *it)
{
    rt_node_t *n = ridx_iter_get(it);
    return n ? &n->e : NULL;
}

/* it at the first entry with ident > after (after NULL: the first entry). */
static void seek_after(route_table_t *t, ridx_iter_t *it, const uint8_t *after, size_t len)
{
    ridx_seek(&t->by_ident, it, after, len, true);
}

route_entry_t *route_table_next(route_table_t *t, const kvm_ident_t *after)
{
    ridx_iter_t it;
    seek_after(t, &it, after ? after->enc : NULL, after ? after->enc_len : 0);
    return entry_at(&it);
}

route_entry_t *route_table_after(route_table_t *t, route_entry_t *e)
{
    rt_node_t *n = KVM_CONTAINER_OF(e, rt_node_t, e);
    ridx_iter_t it;
    seek_after(t, &it, n->data, e->priv_enc_len);
    return entry_at(&it);
}

/* The first entry from it on whose route names owner as a hot replica owner, or NULL. */
static route_entry_t *owner_from(route_table_t *t, const kvm_runtime_id_t *owner, ridx_iter_t *it)
{
    int64_t idx = rp_intern_find(&t->sets.ids, owner);
    if (idx < 0 || rp_owner_refs(&t->sets.ids, (uint32_t)idx) == 0)
        return NULL;
    for (rt_node_t *n; (n = ridx_iter_get(it)) != NULL; ridx_iter_next(it))
        if (rp_has_owner(packed(n), n->e.priv_len, (uint32_t)idx))
            return &n->e;
    return NULL;
}

route_entry_t *route_table_owner_next(route_table_t *t, const kvm_runtime_id_t *owner,
                                      const kvm_ident_t *after)
{
    ridx_iter_t it;
    seek_after(t, &it, after ? after->enc : NULL, after ? after->enc_len : 0);
    return owner_from(t, owner, &it);
}

route_entry_t *route_table_owner_after(route_table_t *t, const kvm_runtime_id_t *owner,
                                       route_entry_t *e)
{
    rt_node_t *n = KVM_CONTAINER_OF(e, rt_node_t, e);
    ridx_iter_t it;
    seek_after(t, &it, n->data, e->priv_enc_len);
    return owner_from(t, owner, &it);
}

route_entry_t *route_table_tomb_first(route_table_t *t)
{
    tomb_ref_t *r = RB_MIN(tomb_tree, &t->by_expiry);
    return r ? &r->n->e : NULL;
}

route_entry_t *route_table_tomb_next(route_table_t *t, route_entry_t *e)
{
    tomb_ref_t *r = tomb_of(t, KVM_CONTAINER_OF(e, rt_node_t, e));
    KVM_ASSERT(r != NULL);
    r = RB_NEXT(tomb_tree, &t->by_expiry, r);
    return r ? &r->n->e : NULL;
}

size_t route_table_tomb_count(const route_table_t *t)
{
    return t->n_tombs;
}

void route_table_mem(const route_table_t *t, route_table_mem_t *out)
{
    /* the entry pool's chunk bytes not handed out (free records, the newest chunk's tail,
     * chunk headers) count as entry bytes: the entries' memory is the pool's */
    size_t pool_spare = t->pool.chunk_bytes - t->pool.live_bytes;
    *out = (route_table_mem_t){.entries = t->count,
                               .entry_bytes = t->entry_bytes + pool_spare,
                               .packed_bytes = t->packed_bytes,
                               .ident_bytes = t->ident_bytes,
                               .index_bytes = t->by_ident.bytes,
                               .tomb_bytes = t->n_tombs * sizeof(tomb_ref_t),
                               .intern_bytes = rp_sets_bytes(&t->sets) + sizeof(*t)};
}

static int check_refs(const rp_intern_t *in, const uint32_t *refs, const uint32_t *orefs,
                      const char *what)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        if (refs[i] != in->refs[i] || (orefs && orefs[i] != in->orefs[i]))
            return kvm_errf(KVMESH_ECORRUPT,
                            "route table: %s %u has %u references (entries hold %u)", what, i,
                            in->refs[i], refs[i]);
        if (in->refs[i]) {
            live++;
            if (rp_intern_find(in, &in->keys[i]) != (int64_t)i)
                return kvm_errf(KVMESH_ECORRUPT, "route table: %s %u not found by its key", what,
                                i);
        }
    }
    if (live != in->live || in->n - live != in->n_free)
        return kvm_errf(KVMESH_ECORRUPT, "route table: %s set counts %u live, %u free of %u", what,
                        in->live, in->n_free, in->n);
    return 0;
}

int route_table_check(route_table_t *t)
{
    size_t n_entries = 0, want_tombs = 0;
    uint32_t *idr = calloc(t->sets.ids.n + 1, sizeof(uint32_t));
    uint32_t *ido = calloc(t->sets.ids.n + 1, sizeof(uint32_t));
    uint32_t *sgr = calloc(t->sets.segs.n + 1, sizeof(uint32_t));
    int rc = idr && ido && sgr ? ridx_check(&t->by_ident) : KVMESH_ENOMEM;
    if (!rc)
        rc = slab_check(&t->pool);
    rt_node_t *n, *prev = NULL;
    ridx_iter_t it;
    for (ridx_seek(&t->by_ident, &it, NULL, 0, false); (n = ridx_iter_get(&it)) != NULL;
         ridx_iter_next(&it)) {
        if (rc)
            break;
        n_entries++;
        if (prev && node_cmp(prev, n) >= 0)
            rc = kvm_errf(KVMESH_ECORRUPT, "route table: entries out of ident order");
        prev = n;
        kvm_route_t v;
        route_table_view(t, &n->e, &v);
        if (!rc)
            rc = kvm_route_validate(&v);
        rp_count(packed(n), n->e.priv_len, idr, ido, sgr);
        bool fin = indexed(&v);
        want_tombs += fin;
        tomb_ref_t *tr = tomb_of(t, n);
        if (!rc && fin != (tr != NULL))
            rc = kvm_errf(KVMESH_ECORRUPT, "route table: expiry index disagrees with an entry");
    }
    if (!rc)
        rc = check_refs(&t->sets.ids, idr, ido, "id");
    if (!rc)
        rc = check_refs(&t->sets.segs, sgr, NULL, "segment");
    free(idr);
    free(ido);
    free(sgr);
    if (rc)
        return rc;
    size_t n_tombs = 0;
    tomb_ref_t *tr;
    RB_FOREACH(tr, tomb_tree, &t->by_expiry)
    n_tombs++;
    if (n_tombs != want_tombs || n_tombs != t->n_tombs)
        return kvm_errf(KVMESH_ECORRUPT, "route table: %zu expiry refs for %zu tombstones", n_tombs,
                        want_tombs);
    if (n_entries != t->count)
        return kvm_errf(KVMESH_ECORRUPT, "route table: %zu entries (count %zu)", n_entries,
                        t->count);
    return 0;
}
