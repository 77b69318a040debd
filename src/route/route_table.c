/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_table.c — per-shard route map and owner-to-key index (route_table.h), on the BSD
 * red-black trees of <bsd/sys/tree.h>.
 */
#include "route/route_table.h"

#ifndef __unused
#define __unused __attribute__((unused))
#endif
#include <bsd/sys/tree.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

typedef struct rt_node {
    RB_ENTRY(rt_node) link;
    route_entry_t e;
} rt_node_t;

typedef struct own_ref {
    RB_ENTRY(own_ref) link;
    kvm_runtime_id_t owner;
    rt_node_t *n;
} own_ref_t;

typedef struct tomb_ref {
    RB_ENTRY(tomb_ref) link;
    uint64_t until;
    rt_node_t *n;
} tomb_ref_t;

static int node_cmp(rt_node_t *a, rt_node_t *b)
{
    return kvm_ident_cmp(&a->e.route.ident, &b->e.route.ident);
}

static int ref_cmp(own_ref_t *a, own_ref_t *b)
{
    int c = kvm_id128_cmp(&a->owner, &b->owner);
    if (c)
        return c;
    if (!a->n)
        return -1; /* a search key with no ident sorts before every ident of its owner */
    if (!b->n)
        return 1;
    return kvm_ident_cmp(&a->n->e.route.ident, &b->n->e.route.ident);
}

static int tomb_cmp(tomb_ref_t *a, tomb_ref_t *b)
{
    if (a->until != b->until)
        return a->until < b->until ? -1 : 1;
    return kvm_ident_cmp(&a->n->e.route.ident, &b->n->e.route.ident);
}

RB_HEAD(rt_tree, rt_node);
RB_HEAD(own_tree, own_ref);
RB_HEAD(tomb_tree, tomb_ref);
RB_GENERATE_STATIC(rt_tree, rt_node, link, node_cmp)
RB_GENERATE_STATIC(own_tree, own_ref, link, ref_cmp)
RB_GENERATE_STATIC(tomb_tree, tomb_ref, link, tomb_cmp)

struct route_table {
    struct rt_tree by_ident;
    struct own_tree by_owner;
    struct tomb_tree by_expiry;
    size_t count, n_tombs;
};

route_table_t *route_table_new(void)
{
    route_table_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    RB_INIT(&t->by_ident);
    RB_INIT(&t->by_owner);
    RB_INIT(&t->by_expiry);
    return t;
}

static void unref_tomb(route_table_t *t, rt_node_t *n)
{
    tomb_ref_t *r = n->e.priv_tomb;
    if (!r)
        return;
    RB_REMOVE(tomb_tree, &t->by_expiry, r);
    free(r);
    n->e.priv_tomb = NULL;
    t->n_tombs--;
}

static int ref_tomb(route_table_t *t, rt_node_t *n)
{
    if (n->e.route.tomb != KVM_TOMB_FINALIZED)
        return 0;
    tomb_ref_t *r = calloc(1, sizeof(*r));
    if (!r)
        return KVMESH_ENOMEM;
    r->until = n->e.route.retain_until_ms;
    r->n = n;
    RB_INSERT(tomb_tree, &t->by_expiry, r);
    n->e.priv_tomb = r;
    t->n_tombs++;
    return 0;
}

static void unref_owners(route_table_t *t, rt_node_t *n)
{
    for (unsigned i = 0; i < n->e.n_owner_refs; i++) {
        own_ref_t *r = n->e.priv_owner[i];
        RB_REMOVE(own_tree, &t->by_owner, r);
        free(r);
        n->e.priv_owner[i] = NULL;
    }
    n->e.n_owner_refs = 0;
}

static int ref_owners(route_table_t *t, rt_node_t *n)
{
    const kvm_route_t *r = &n->e.route;
    for (uint32_t i = 0; i < r->n_replicas; i++) {
        bool seen = false;
        for (uint32_t j = 0; j < i; j++)
            if (kvm_id128_equal(&r->replicas[j].owner, &r->replicas[i].owner))
                seen = true;
        if (seen)
            continue;
        own_ref_t *ref = calloc(1, sizeof(*ref));
        if (!ref)
            return KVMESH_ENOMEM;
        ref->owner = r->replicas[i].owner;
        ref->n = n;
        RB_INSERT(own_tree, &t->by_owner, ref);
        n->e.priv_owner[n->e.n_owner_refs++] = ref;
    }
    return 0;
}

static void node_free(route_table_t *t, rt_node_t *n)
{
    unref_owners(t, n);
    unref_tomb(t, n);
    RB_REMOVE(rt_tree, &t->by_ident, n);
    kvm_route_free(&n->e.route);
    free(n);
    t->count--;
}

void route_table_clear(route_table_t *t)
{
    rt_node_t *n, *nx;
    for (n = RB_MIN(rt_tree, &t->by_ident); n; n = nx) {
        nx = RB_NEXT(rt_tree, &t->by_ident, n);
        node_free(t, n);
    }
}

void route_table_free(route_table_t *t)
{
    if (!t)
        return;
    route_table_clear(t);
    free(t);
}

size_t route_table_count(const route_table_t *t)
{
    return t->count;
}

static rt_node_t *find(route_table_t *t, const kvm_ident_t *ident)
{
    rt_node_t key;
    memset(&key, 0, sizeof(key));
    key.e.route.ident = *ident; /* shallow: not freed */
    return RB_FIND(rt_tree, &t->by_ident, &key);
}

route_entry_t *route_table_get(route_table_t *t, const kvm_ident_t *ident)
{
    rt_node_t *n = find(t, ident);
    return n ? &n->e : NULL;
}

int route_table_put(route_table_t *t, const kvm_route_t *r, route_entry_t **out)
{
    rt_node_t *n = find(t, &r->ident);
    kvm_route_t copy;
    kvm_route_init(&copy);
    if (kvm_route_copy(&copy, r) != 0)
        return KVMESH_ENOMEM;
    if (n) {
        unref_owners(t, n);
        unref_tomb(t, n);
        kvm_route_free(&n->e.route);
        n->e.route = copy;
    } else {
        n = calloc(1, sizeof(*n));
        if (!n) {
            kvm_route_free(&copy);
            return KVMESH_ENOMEM;
        }
        n->e.route = copy;
        RB_INSERT(rt_tree, &t->by_ident, n);
        t->count++;
    }
    if (ref_owners(t, n) != 0 || ref_tomb(t, n) != 0) {
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

route_entry_t *route_table_next(route_table_t *t, const kvm_ident_t *after)
{
    rt_node_t *n;
    if (!after) {
        n = RB_MIN(rt_tree, &t->by_ident);
    } else {
        rt_node_t key;
        memset(&key, 0, sizeof(key));
        key.e.route.ident = *after;
        n = RB_NFIND(rt_tree, &t->by_ident, &key);
        if (n && kvm_ident_cmp(&n->e.route.ident, after) == 0)
            n = RB_NEXT(rt_tree, &t->by_ident, n);
    }
    return n ? &n->e : NULL;
}

route_entry_t *route_table_owner_next(route_table_t *t, const kvm_runtime_id_t *owner,
                                      const kvm_ident_t *after)
{
    own_ref_t key = {.owner = *owner};
    rt_node_t kn;
    if (after) {
        memset(&kn, 0, sizeof(kn));
        kn.e.route.ident = *after;
        key.n = &kn;
    }
    own_ref_t *r = RB_NFIND(own_tree, &t->by_owner, &key);
    if (r && after && ref_cmp(r, &key) == 0)
        r = RB_NEXT(own_tree, &t->by_owner, r);
    if (!r || !kvm_id128_equal(&r->owner, owner))
        return NULL;
    return &r->n->e;
}

route_entry_t *route_table_tomb_first(route_table_t *t)
{
    tomb_ref_t *r = RB_MIN(tomb_tree, &t->by_expiry);
    return r ? &r->n->e : NULL;
}

route_entry_t *route_table_tomb_next(route_table_t *t, route_entry_t *e)
{
    tomb_ref_t *r = e->priv_tomb;
    KVM_ASSERT(r != NULL);
    r = RB_NEXT(tomb_tree, &t->by_expiry, r);
    return r ? &r->n->e : NULL;
}

size_t route_table_tomb_count(const route_table_t *t)
{
    return t->n_tombs;
}

int route_table_check(route_table_t *t)
{
    size_t n_entries = 0, n_refs = 0, want_refs = 0, want_tombs = 0;
    rt_node_t *n;
    RB_FOREACH(n, rt_tree, &t->by_ident)
    {
        n_entries++;
        int rc = kvm_route_validate(&n->e.route);
        if (rc != 0)
            return rc;
        want_refs += n->e.n_owner_refs;
        bool fin = n->e.route.tomb == KVM_TOMB_FINALIZED;
        want_tombs += fin;
        const tomb_ref_t *tr = n->e.priv_tomb;
        if (fin != (tr != NULL) || (tr && (tr->n != n || tr->until != n->e.route.retain_until_ms)))
            return kvm_errf(KVMESH_ECORRUPT, "route table: expiry index disagrees with an entry");
        for (unsigned i = 0; i < n->e.n_owner_refs; i++) {
            own_ref_t *r = n->e.priv_owner[i];
            if (r->n != n)
                return kvm_errf(KVMESH_ECORRUPT, "route table: owner ref points elsewhere");
        }
    }
    own_ref_t *r;
    RB_FOREACH(r, own_tree, &t->by_owner)
    n_refs++;
    size_t n_tombs = 0;
    tomb_ref_t *tr;
    RB_FOREACH(tr, tomb_tree, &t->by_expiry)
    n_tombs++;
    if (n_tombs != want_tombs || n_tombs != t->n_tombs)
        return kvm_errf(KVMESH_ECORRUPT, "route table: %zu expiry refs for %zu tombstones", n_tombs,
                        want_tombs);
    if (n_entries != t->count || n_refs != want_refs)
        return kvm_errf(KVMESH_ECORRUPT, "route table: %zu entries (count %zu), %zu refs (%zu)",
                        n_entries, t->count, n_refs, want_refs);
    return 0;
}
