/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_index.c — B-tree of item pointers (route_index.h). Insertion splits full nodes on the
 * way down and deletion fills thin nodes on the way down (Cormen et al., "B-Trees"), so both are
 * one pass from the root; a leaf holds only item pointers, an inner node also its children.
 */
#include "route/route_index.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "kvmesh.h"

struct ridx_node {
    uint16_t n;
    bool leaf;
    void *items[RIDX_MAX];
    ridx_node_t *kids[]; /* RIDX_MAX + 1 in an inner node; absent in a leaf */
};

static size_t node_size(bool leaf)
{
    return offsetof(ridx_node_t, kids) + (leaf ? 0 : (RIDX_MAX + 1) * sizeof(ridx_node_t *));
}

static ridx_node_t *node_new(ridx_t *x, bool leaf)
{
    ridx_node_t *nd = malloc(node_size(leaf));
    if (!nd)
        return NULL;
    nd->n = 0;
    nd->leaf = leaf;
    x->bytes += node_size(leaf);
    return nd;
}

static void node_free(ridx_t *x, ridx_node_t *nd)
{
    x->bytes -= node_size(nd->leaf);
    free(nd);
}

int route_key_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    size_t n = KVM_MIN(na, nb);
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    return na < nb ? -1 : na > nb ? 1 : 0;
}

static int key_cmp(const ridx_t *x, const uint8_t *k, size_t len, const void *item)
{
    size_t il;
    const uint8_t *ik = x->key(item, &il);
    return route_key_cmp(k, len, ik, il);
}

/* The first position in nd whose item is >= k (> k when strict); *eq when that item == k. */
static uint16_t node_pos(const ridx_t *x, const ridx_node_t *nd, const uint8_t *k, size_t len,
                         bool strict, bool *eq)
{
    uint16_t lo = 0, hi = nd->n;
    *eq = false;
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        int c = key_cmp(x, k, len, nd->items[mid]);
        if (c > 0 || (c == 0 && strict)) {
            lo = (uint16_t)(mid + 1);
        } else {
            hi = mid;
            if (c == 0)
                *eq = true;
        }
    }
    return lo;
}

void ridx_init(ridx_t *x, ridx_key_fn key)
{
    *x = (ridx_t){.key = key};
}

static void clear_node(ridx_t *x, ridx_node_t *nd, void (*each)(void *, void *), void *ctx)
{
    for (uint16_t i = 0; i < nd->n; i++)
        if (each)
            each(nd->items[i], ctx);
    if (!nd->leaf)
        for (uint16_t i = 0; i <= nd->n; i++)
            clear_node(x, nd->kids[i], each, ctx);
    node_free(x, nd);
}

void ridx_clear(ridx_t *x, void (*each)(void *item, void *ctx), void *ctx)
{
    if (x->root)
        clear_node(x, x->root, each, ctx);
    x->root = NULL;
    x->count = 0;
    KVM_ASSERT(x->bytes == 0);
}

/* The slot holding the item whose key equals k, or NULL. */
static void **find_slot(const ridx_t *x, const uint8_t *k, size_t len)
{
    ridx_node_t *nd = x->root;
    while (nd) {
        bool eq;
        uint16_t i = node_pos(x, nd, k, len, false, &eq);
        if (eq)
            return &nd->items[i];
        nd = nd->leaf ? NULL : nd->kids[i];
    }
    return NULL;
}

void *ridx_find(const ridx_t *x, const uint8_t *k, size_t len)
{
    void **s = find_slot(x, k, len);
    return s ? *s : NULL;
}

void *ridx_replace(ridx_t *x, void *item)
{
    size_t len;
    const uint8_t *k = x->key(item, &len);
    void **s = find_slot(x, k, len);
    if (!s)
        return NULL;
    void *old = *s;
    *s = item;
    return old;
}

/* Splits p's full child i around its median, which moves up into p (p not full). */
static int split_child(ridx_t *x, ridx_node_t *p, uint16_t i)
{
    ridx_node_t *c = p->kids[i];
    KVM_ASSERT(c->n == RIDX_MAX && p->n < RIDX_MAX);
    ridx_node_t *r = node_new(x, c->leaf);
    if (!r)
        return KVMESH_ENOMEM;
    r->n = RIDX_T - 1;
    memcpy(r->items, c->items + RIDX_T, (RIDX_T - 1) * sizeof(void *));
    if (!c->leaf)
        memcpy(r->kids, c->kids + RIDX_T, RIDX_T * sizeof(ridx_node_t *));
    c->n = RIDX_T - 1;
    memmove(p->items + i + 1, p->items + i, (size_t)(p->n - i) * sizeof(void *));
    memmove(p->kids + i + 2, p->kids + i + 1, (size_t)(p->n - i) * sizeof(ridx_node_t *));
    p->items[i] = c->items[RIDX_T - 1];
    p->kids[i + 1] = r;
    p->n++;
    return 0;
}

/* A root that is full gets a new root above it (the tree grows by one level). */
static int grow_root(ridx_t *x)
{
    if (!x->root) {
        x->root = node_new(x, true);
        return x->root ? 0 : KVMESH_ENOMEM;
    }
    if (x->root->n < RIDX_MAX)
        return 0;
    ridx_node_t *r = node_new(x, false);
    if (!r)
        return KVMESH_ENOMEM;
    r->kids[0] = x->root;
    if (split_child(x, r, 0) != 0) {
        node_free(x, r);
        return KVMESH_ENOMEM;
    }
    x->root = r;
    return 0;
}

/* Moves p's item i-1 down into the front of child i and the left sibling's last item up. */
static void rotate_right(ridx_node_t *p, uint16_t i)
{
    ridx_node_t *c = p->kids[i], *l = p->kids[i - 1];
    memmove(c->items + 1, c->items, c->n * sizeof(void *));
    if (!c->leaf)
        memmove(c->kids + 1, c->kids, (size_t)(c->n + 1) * sizeof(ridx_node_t *));
    c->items[0] = p->items[i - 1];
    if (!c->leaf)
        c->kids[0] = l->kids[l->n];
    p->items[i - 1] = l->items[l->n - 1];
    l->n--;
    c->n++;
}

/* Moves p's item i down onto the end of child i and the right sibling's first item up. */
static void rotate_left(ridx_node_t *p, uint16_t i)
{
    ridx_node_t *c = p->kids[i], *r = p->kids[i + 1];
    c->items[c->n] = p->items[i];
    if (!c->leaf)
        c->kids[c->n + 1] = r->kids[0];
    c->n++;
    p->items[i] = r->items[0];
    memmove(r->items, r->items + 1, (size_t)(r->n - 1) * sizeof(void *));
    if (!r->leaf)
        memmove(r->kids, r->kids + 1, r->n * sizeof(ridx_node_t *));
    r->n--;
}

/* Makes room under nd for key k in nd's full child i: moves one item to a sibling that has room
 * (so that keys inserted in order fill nodes instead of leaving them half full), else splits the
 * child. Returns the index of the child (not full) that k descends into, or -1 (ENOMEM). */
static int make_room(ridx_t *x, ridx_node_t *nd, uint16_t i, const uint8_t *k, size_t len)
{
    if (i > 0 && nd->kids[i - 1]->n < RIDX_MAX - 1) {
        rotate_left(nd, (uint16_t)(i - 1));
        return key_cmp(x, k, len, nd->items[i - 1]) < 0 ? i - 1 : i;
    }
    if (i < nd->n && nd->kids[i + 1]->n < RIDX_MAX - 1) {
        rotate_right(nd, (uint16_t)(i + 1));
        return key_cmp(x, k, len, nd->items[i]) > 0 ? i + 1 : i;
    }
    if (split_child(x, nd, i) != 0)
        return -1;
    return key_cmp(x, k, len, nd->items[i]) > 0 ? i + 1 : i;
}

int ridx_insert(ridx_t *x, void *item)
{
    size_t len;
    const uint8_t *k = x->key(item, &len);
    if (grow_root(x) != 0)
        return KVMESH_ENOMEM;
    ridx_node_t *nd = x->root;
    for (;;) {
        bool eq;
        uint16_t i = node_pos(x, nd, k, len, false, &eq);
        KVM_ASSERT(!eq);
        if (nd->leaf) {
            memmove(nd->items + i + 1, nd->items + i, (size_t)(nd->n - i) * sizeof(void *));
            nd->items[i] = item;
            nd->n++;
            x->count++;
            return 0;
        }
        if (nd->kids[i]->n == RIDX_MAX) {
            int j = make_room(x, nd, i, k, len);
            if (j < 0) /* the splits and moves so far keep the content */
                return KVMESH_ENOMEM;
            i = (uint16_t)j;
        }
        nd = nd->kids[i];
    }
}

/* Merges p's child i+1 and item i into child i (both children thin). */
static void merge(ridx_t *x, ridx_node_t *p, uint16_t i)
{
    ridx_node_t *l = p->kids[i], *r = p->kids[i + 1];
    KVM_ASSERT(l->n + r->n + 1 <= RIDX_MAX);
    l->items[l->n] = p->items[i];
    memcpy(l->items + l->n + 1, r->items, r->n * sizeof(void *));
    if (!l->leaf)
        memcpy(l->kids + l->n + 1, r->kids, (size_t)(r->n + 1) * sizeof(ridx_node_t *));
    l->n = (uint16_t)(l->n + r->n + 1);
    memmove(p->items + i, p->items + i + 1, (size_t)(p->n - i - 1) * sizeof(void *));
    memmove(p->kids + i + 1, p->kids + i + 2, (size_t)(p->n - i - 1) * sizeof(ridx_node_t *));
    p->n--;
    node_free(x, r);
}

/* Gives p's child i at least RIDX_T items; returns the index of the child that now covers
 * what child i covered. */
static uint16_t fill_child(ridx_t *x, ridx_node_t *p, uint16_t i)
{
    if (p->kids[i]->n >= RIDX_T)
        return i;
    if (i > 0 && p->kids[i - 1]->n >= RIDX_T) {
        rotate_right(p, i);
        return i;
    }
    if (i < p->n && p->kids[i + 1]->n >= RIDX_T) {
        rotate_left(p, i);
        return i;
    }
    if (i < p->n) {
        merge(x, p, i);
        return i;
    }
    merge(x, p, (uint16_t)(i - 1));
    return (uint16_t)(i - 1);
}

/* Removes the last (first when !last) item of nd's subtree and returns it. */
static void *remove_edge(ridx_t *x, ridx_node_t *nd, bool last)
{
    while (!nd->leaf) {
        uint16_t i = last ? nd->n : 0;
        i = fill_child(x, nd, i);
        if (last)
            i = nd->n; /* a merge with the left sibling moved the last child */
        nd = nd->kids[i];
    }
    void *it;
    if (last) {
        it = nd->items[nd->n - 1];
    } else {
        it = nd->items[0];
        memmove(nd->items, nd->items + 1, (size_t)(nd->n - 1) * sizeof(void *));
    }
    nd->n--;
    return it;
}

/* Removes item i of the inner node nd (its neighbours in order come from the children). */
static ridx_node_t *remove_inner(ridx_t *x, ridx_node_t *nd, uint16_t i, void **found)
{
    *found = nd->items[i];
    if (nd->kids[i]->n >= RIDX_T) {
        nd->items[i] = remove_edge(x, nd->kids[i], true);
        return NULL;
    }
    if (nd->kids[i + 1]->n >= RIDX_T) {
        nd->items[i] = remove_edge(x, nd->kids[i + 1], false);
        return NULL;
    }
    merge(x, nd, i); /* the item is now in the middle of child i: remove it from there */
    return nd->kids[i];
}

static void shrink_root(ridx_t *x)
{
    ridx_node_t *r = x->root;
    if (!r || r->n > 0)
        return;
    x->root = r->leaf ? NULL : r->kids[0];
    node_free(x, r);
}

void *ridx_remove(ridx_t *x, const uint8_t *k, size_t len)
{
    void *found = NULL;
    ridx_node_t *nd = x->root;
    while (nd) {
        bool eq;
        uint16_t i = node_pos(x, nd, k, len, false, &eq);
        if (eq && nd->leaf) {
            found = nd->items[i];
            memmove(nd->items + i, nd->items + i + 1, (size_t)(nd->n - i - 1) * sizeof(void *));
            nd->n--;
            break;
        }
        if (eq) {
            void *it;
            ridx_node_t *next = remove_inner(x, nd, i, &it);
            if (!next) {
                found = it;
                break;
            }
            nd = next; /* continue: the item moved down into next */
            continue;
        }
        if (nd->leaf)
            break;
        nd = nd->kids[fill_child(x, nd, i)];
    }
    shrink_root(x);
    if (found)
        x->count--;
    return found;
}

/* Pops finished nodes until the top's position names an item (or the iterator ends). */
static void settle(ridx_iter_t *it)
{
    while (it->depth > 0 && it->pos[it->depth - 1] >= it->node[it->depth - 1]->n)
        it->depth--;
}

static void push(ridx_iter_t *it, ridx_node_t *nd, uint16_t pos)
{
    KVM_ASSERT(it->depth < RIDX_DEPTH);
    it->node[it->depth] = nd;
    it->pos[it->depth] = pos;
    it->depth++;
}

void ridx_seek(const ridx_t *x, ridx_iter_t *it, const uint8_t *k, size_t len, bool strict)
{
    it->depth = 0;
    for (ridx_node_t *nd = x->root; nd;) {
        bool eq = false;
        uint16_t i = k ? node_pos(x, nd, k, len, strict, &eq) : 0;
        push(it, nd, i);
        if (eq || nd->leaf)
            break;
        nd = nd->kids[i];
    }
    settle(it);
}

void *ridx_iter_get(const ridx_iter_t *it)
{
    if (it->depth == 0)
        return NULL;
    return it->node[it->depth - 1]->items[it->pos[it->depth - 1]];
}

void ridx_iter_next(ridx_iter_t *it)
{
    if (it->depth == 0)
        return;
    ridx_node_t *nd = it->node[it->depth - 1];
    uint16_t i = ++it->pos[it->depth - 1];
    if (!nd->leaf)
        for (nd = nd->kids[i]; nd; nd = nd->leaf ? NULL : nd->kids[0])
            push(it, nd, 0);
    settle(it);
}

typedef struct check_st {
    const ridx_t *x;
    const void *prev;
    size_t items, bytes;
    int leaf_depth;
} check_st_t;

static int check_node(check_st_t *st, const ridx_node_t *nd, int depth)
{
    if (nd != st->x->root && (nd->n < RIDX_MIN || nd->n > RIDX_MAX))
        return kvm_errf(KVMESH_ECORRUPT, "route index: a node holds %u items", nd->n);
    if (nd == st->x->root && (nd->n < 1 || nd->n > RIDX_MAX))
        return kvm_errf(KVMESH_ECORRUPT, "route index: the root holds %u items", nd->n);
    if (depth >= RIDX_DEPTH)
        return kvm_errf(KVMESH_ECORRUPT, "route index: deeper than %d", RIDX_DEPTH);
    st->bytes += node_size(nd->leaf);
    if (nd->leaf && st->leaf_depth >= 0 && st->leaf_depth != depth)
        return kvm_errf(KVMESH_ECORRUPT, "route index: leaves at depths %d and %d", st->leaf_depth,
                        depth);
    if (nd->leaf)
        st->leaf_depth = depth;
    for (uint16_t i = 0; i <= nd->n; i++) {
        int rc = nd->leaf ? 0 : check_node(st, nd->kids[i], depth + 1);
        if (rc || i == nd->n)
            return rc;
        size_t len;
        const uint8_t *k = st->x->key(nd->items[i], &len);
        if (st->prev && key_cmp(st->x, k, len, st->prev) <= 0)
            return kvm_errf(KVMESH_ECORRUPT, "route index: items out of key order");
        st->prev = nd->items[i];
        st->items++;
    }
    return 0;
}

int ridx_check(const ridx_t *x)
{
    check_st_t st = {.x = x, .leaf_depth = -1};
    int rc = x->root ? check_node(&st, x->root, 0) : 0;
    if (rc)
        return rc;
    if (st.items != x->count || st.bytes != x->bytes)
        return kvm_errf(KVMESH_ECORRUPT, "route index: %zu items in %zu bytes (count %zu, %zu)",
                        st.items, st.bytes, x->count, x->bytes);
    return 0;
}
